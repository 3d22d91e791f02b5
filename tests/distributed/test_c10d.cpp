// libtorch's C++ distributed API (c10d/) under mpirun -np 1, 2 and 4: every call of ProcessGroupMPI against
// hand-worked values, with ranks of the c10d group (a reversed group included); Work's outcome, error and
// timeout; and errors that name the call and the value, raised on every rank before anything is sent.

#include <strata/c10d/ProcessGroupMPI.hpp>
#include <strata/c10d/ProcessGroupNCCL.hpp>
#include <strata/distributed/collectives.h>

#include "../helpers.h"

namespace c10d = strata::c10d;
namespace dist = strata::distributed;
using strata::Tensor;
using strata::testing::values;

namespace {

/// [v, v] in float32.
Tensor pair(double v) { return strata::full({2}, v); }

/// A distributed::Work that completes when told, with an error.
struct FailingWork : dist::Work {
  bool done = false;
  bool is_completed() override { return done; }
  void wait() override { throw strata::Error("the op failed"); }
};

}  // namespace

TEST(C10d, EveryCollectiveWithLibtorchsSignatures) {
  const auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI();
  ASSERT_NE(pg, nullptr);
  const int r = pg->getRank(), n = pg->getSize();
  EXPECT_EQ(r, dist::get_rank());
  EXPECT_EQ(n, dist::get_world_size());
  EXPECT_EQ(pg->getBackendName(), "mpi");

  std::vector<Tensor> t = {pair(r + 1)};
  std::shared_ptr<c10d::ProcessGroup::Work> work = pg->allreduce(t);
  EXPECT_TRUE(work->wait());
  EXPECT_TRUE(work->isCompleted() && work->isSuccess());
  EXPECT_EQ(work->exception(), nullptr);
  EXPECT_EQ(values(t[0]), std::vector<double>(2, n * (n + 1) / 2.0));
  EXPECT_TRUE(work->result()[0].is_same(t[0]));

  t = {pair(r + 1)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  pg->allreduce(t, max)->wait();
  EXPECT_EQ(values(t[0]), std::vector<double>(2, n));

  t = {pair(r)};
  c10d::BroadcastOptions from_last;
  from_last.rootRank = n - 1;
  pg->broadcast(t, from_last)->wait();
  EXPECT_EQ(values(t[0]), std::vector<double>(2, n - 1));

  t = {pair(r + 1)};
  c10d::ReduceOptions to_last;
  to_last.rootRank = n - 1;
  to_last.reduceOp = c10d::ReduceOp::PRODUCT;
  pg->reduce(t, to_last)->wait();
  double factorial = 1;
  for (int i = 2; i <= n; ++i) factorial *= i;
  EXPECT_EQ(values(t[0]), std::vector<double>(2, r == n - 1 ? factorial : r + 1));

  std::vector<Tensor> mine = {pair(r)};
  std::vector<std::vector<Tensor>> all(1);
  for (int p = 0; p < n; ++p) all[0].push_back(strata::empty({2}));
  pg->allgather(all, mine)->wait();
  for (int p = 0; p < n; ++p) EXPECT_EQ(values(all[0][p]), std::vector<double>(2, p));

  Tensor in = pair(r), out = strata::empty({2 * n});
  pg->_allgather_base(out, in)->wait();
  for (int p = 0; p < n; ++p) EXPECT_EQ(values(out)[2 * p], p);

  std::vector<Tensor> two = {pair(r), strata::full({3}, 10.0 * r)};
  std::vector<std::vector<Tensor>> lists(n);
  for (auto& list : lists) list = {strata::empty({2}), strata::empty({3})};
  pg->allgather_coalesced(lists, two)->wait();
  for (int p = 0; p < n; ++p) EXPECT_EQ(values(lists[p][1]), std::vector<double>(3, 10.0 * p));

  std::vector<std::vector<Tensor>> gathered(r == 0 ? 1 : 0);
  if (r == 0) gathered[0] = all[0];
  for (Tensor& g : all[0]) g.zero_();
  pg->gather(gathered, mine)->wait();
  if (r == 0) {
    for (int p = 0; p < n; ++p) EXPECT_EQ(values(gathered[0][p]), std::vector<double>(2, p));
  }

  std::vector<std::vector<Tensor>> to_scatter(r == 0 ? 1 : 0);
  if (r == 0)
    for (int p = 0; p < n; ++p) to_scatter[0].push_back(pair(100 + p));
  std::vector<Tensor> piece = {strata::empty({2})};
  pg->scatter(piece, to_scatter)->wait();
  EXPECT_EQ(values(piece[0]), std::vector<double>(2, 100 + r));

  std::vector<std::vector<Tensor>> parts(1);
  for (int p = 0; p < n; ++p) parts[0].push_back(pair(p * (r + 1)));  // rank r's part p
  std::vector<Tensor> reduced = {strata::empty({2})};
  pg->reduce_scatter(reduced, parts)->wait();
  EXPECT_EQ(values(reduced[0]), std::vector<double>(2, r * n * (n + 1) / 2.0));
  Tensor whole = strata::arange(2 * n).to(strata::kFloat), slice = strata::empty({2});
  pg->_reduce_scatter_base(slice, whole)->wait();
  EXPECT_EQ(values(slice), (std::vector<double>{2.0 * r * n, (2.0 * r + 1) * n}));

  // alltoall_base: rank r sends p + 1 rows to rank p and receives r + 1 rows from each.
  std::vector<int64_t> in_splits, out_splits(n, r + 1);
  std::vector<double> rows;
  for (int p = 0; p < n; ++p) {
    in_splits.push_back(p + 1);
    for (int i = 0; i <= p; ++i) rows.push_back(100 * r + p);
  }
  Tensor send_rows = strata::tensor(rows, strata::kFloat), recv_rows = strata::empty({n * (r + 1)});
  pg->alltoall_base(recv_rows, send_rows, out_splits, in_splits)->wait();
  for (int p = 0; p < n; ++p) EXPECT_EQ(values(recv_rows)[p * (r + 1)], 100 * p + r);
  std::vector<Tensor> outs, ins;
  for (int p = 0; p < n; ++p) {
    outs.push_back(strata::empty({2}));
    ins.push_back(pair(10 * r + p));
  }
  pg->alltoall(outs, ins)->wait();
  for (int p = 0; p < n; ++p) EXPECT_EQ(values(outs[p]), std::vector<double>(2, 10 * p + r));

  if (n > 1) {  // a ring, each rank receiving from the one before it (strata refuses sends to oneself)
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<Tensor> inbox = {strata::empty({2})}, outbox = {pair(r)};
    auto received = pg->recv(inbox, prev, 7);
    auto sent = pg->send(outbox, next, 7);
    sent->wait();
    received->wait();
    EXPECT_EQ(received->sourceRank(), prev);
    EXPECT_EQ(values(inbox[0]), std::vector<double>(2, prev));
    EXPECT_THROW_MSG(sent->sourceRank(), "c10d::Work::sourceRank: only a recv's Work has a source rank");
  }

  std::vector<Tensor> both = {pair(1), strata::full({3}, 2.0)};
  pg->allreduce_coalesced(both)->wait();
  EXPECT_EQ(values(both[1]), std::vector<double>(3, 2.0 * n));
  EXPECT_TRUE(pg->barrier()->wait());
  pg->monitoredBarrier(c10d::BarrierOptions(), /*waitAllRanks=*/true);
}

// createProcessGroupMPI(ranks): group rank i is global rank ranks[i]; roots and peers are group ranks; processes
// outside the group get null.
TEST(C10d, GroupsNumberTheirRanksInTheGivenOrder) {
  const int n = dist::get_world_size(), me = dist::get_rank();
  std::vector<int> reversed;
  for (int g = n - 1; g >= 0; --g) reversed.push_back(g);
  const auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI(reversed);
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->getRank(), n - 1 - me);
  std::vector<Tensor> t = {pair(me)};
  pg->broadcast(t)->wait();  // group rank 0 is global rank n - 1
  EXPECT_EQ(values(t[0]), std::vector<double>(2, n - 1));
  EXPECT_EQ(pg->group()->ranks(), reversed);
  const int r = pg->getRank(), last = n - 1;  // group rank `last` is global rank 0

  t = {pair(r + 1)};
  c10d::ReduceOptions to_last;
  to_last.rootRank = last;
  pg->reduce(t, to_last)->wait();
  if (me == 0) {
    EXPECT_EQ(values(t[0]), std::vector<double>(2, n * (n + 1) / 2.0));
  }

  std::vector<Tensor> mine = {pair(r)};
  std::vector<std::vector<Tensor>> gathered(me == 0 ? 1 : 0);
  for (auto& list : gathered)
    for (int p = 0; p < n; ++p) list.push_back(strata::empty({2}));
  c10d::GatherOptions at_last;
  at_last.rootRank = last;
  auto work = pg->gather(gathered, mine, at_last);
  work->wait();
  EXPECT_EQ(work->result().size(), me == 0 ? static_cast<size_t>(n) : 0u);
  for (int p = 0; me == 0 && p < n; ++p) EXPECT_EQ(values(gathered[0][p]), std::vector<double>(2, p));

  std::vector<std::vector<Tensor>> to_scatter(me == 0 ? 1 : 0);
  for (auto& list : to_scatter)
    for (int p = 0; p < n; ++p) list.push_back(pair(10 + p));
  c10d::ScatterOptions from_last;
  from_last.rootRank = last;
  pg->scatter(mine, to_scatter, from_last)->wait();
  EXPECT_EQ(values(mine[0]), std::vector<double>(2, 10 + r));

  if (n > 1) {  // group rank r sends to group rank r + 1: global me to me - 1
    std::vector<Tensor> inbox = {strata::empty({2})}, outbox = {pair(me)};
    auto received = pg->recv(inbox, (r + n - 1) % n, 3);
    EXPECT_FALSE(received->isCompleted());  // no rank sends before every rank got here
    pg->barrier()->wait();
    pg->send(outbox, (r + 1) % n, 3)->wait();
    EXPECT_TRUE(received->wait(std::chrono::seconds(60)));
    EXPECT_TRUE(received->isCompleted() && received->isSuccess());
    EXPECT_EQ(received->sourceRank(), (r + n - 1) % n);
    EXPECT_EQ(values(inbox[0]), std::vector<double>(2, (me + 1) % n));
  }

  const auto first = c10d::ProcessGroupMPI::createProcessGroupMPI({0});
  EXPECT_EQ(first != nullptr, me == 0);
  if (first) {
    EXPECT_EQ(first->getSize(), 1);
  }
}

// Work reports a failed op through isSuccess() and exception(), and wait() rethrows it; a wait with a timeout
// gives up naming it.
TEST(C10d, WorkReportsItsOutcome) {
  auto failing = std::make_shared<FailingWork>();
  c10d::Work work(failing, {});
  EXPECT_FALSE(work.isCompleted());
  EXPECT_FALSE(work.isSuccess());
  EXPECT_EQ(work.exception(), nullptr);
  EXPECT_THROW_MSG(work.wait(std::chrono::milliseconds(20)), "c10d::Work::wait: the op did not finish within 20 ms");
  failing->done = true;
  EXPECT_TRUE(work.isCompleted());
  EXPECT_FALSE(work.isSuccess());
  ASSERT_NE(work.exception(), nullptr);
  EXPECT_THROW_MSG(std::rethrow_exception(work.exception()), "the op failed");
  EXPECT_THROW_MSG(work.wait(), "the op failed");

  c10d::Work done(dist::completed_work(), {});
  EXPECT_TRUE(done.isCompleted() && done.isSuccess());
  EXPECT_TRUE(done.wait(std::chrono::milliseconds(1)));
}

// Every rank raises the same error before communicating, so a bad call never leaves a rank waiting.
TEST(C10d, ErrorsNameTheCallAndTheValue) {
  const auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI();
  const int n = pg->getSize();
  std::vector<Tensor> two = {pair(1), pair(2)};
  EXPECT_THROW_MSG(pg->allreduce(two), "c10d::ProcessGroupMPI::allreduce: expected one tensor per call");
  EXPECT_THROW_MSG(pg->allreduce(two), "got 2");
  std::vector<Tensor> t = {pair(1)};
  c10d::BroadcastOptions outside;
  outside.rootRank = n;
  EXPECT_THROW_MSG(pg->broadcast(t, outside), "c10d::ProcessGroupMPI::broadcast: rootRank " + std::to_string(n) +
                                                  " is not a rank of the group of " + std::to_string(n));
  c10d::AllreduceOptions band;
  band.reduceOp = c10d::ReduceOp::BAND;
  EXPECT_THROW_MSG(pg->allreduce(t, band), "ReduceOp 5 (a bitwise reduction) is not supported");
  std::vector<std::vector<Tensor>> two_lists(2);
  EXPECT_THROW_MSG(pg->gather(two_lists, t), "c10d::ProcessGroupMPI::gather: rank " + std::to_string(pg->getRank()));
  EXPECT_THROW_MSG(pg->gather(two_lists, t), "got 2");
  EXPECT_THROW_MSG(pg->send(t, -1, 0), "c10d::ProcessGroupMPI::send: dstRank -1 is not a rank of the group");
  const int me = dist::get_rank();
  EXPECT_THROW_MSG(c10d::ProcessGroupNCCL(me, n + 1), "c10d::ProcessGroupNCCL: rank " + std::to_string(me) + " of " +
                                                          std::to_string(n + 1) +
                                                          " is not this process's place in the job");
  if (!dist::get_world_group()->has_backend(strata::kCUDA))
    EXPECT_THROW_MSG(c10d::ProcessGroupNCCL(me, n),
                     "c10d::ProcessGroupNCCL: strata moves WORLD's CUDA tensors nowhere");
  // A root's list off the root is refused on that rank only; under DETAIL the root learns of it as the ranks
  // compare their calls, and throws instead of waiting in the gather.
  const dist::DebugLevel level = dist::get_debug_level();
  dist::set_debug_level(dist::DebugLevel::DETAIL);
  std::vector<std::vector<Tensor>> one_list(1);
  for (int p = 0; p < n; ++p) one_list[0].push_back(strata::empty({2}));
  if (n > 1) {
    if (pg->getRank() == 0) {
      EXPECT_THROW(pg->gather(one_list, t), strata::Error);
    } else {
      EXPECT_THROW_MSG(pg->gather(one_list, t), "is not the root and takes no output list, got 1");
    }
  }
  dist::set_debug_level(level);
  if (n > 1) {
    const dist::Group others = dist::new_group({1});
    if (dist::get_rank() != 1)
      EXPECT_THROW_MSG(c10d::ProcessGroupMPI{others}, "c10d::ProcessGroupMPI: this process is not a member of");
  }
}

// ProcessGroupNCCL reduces CUDA tensors over NCCL and refuses host tensors, on every rank alike.
TEST(CudaC10d, NcclGroupMovesCudaTensorsOnly) {
  STRATA_REQUIRE_CUDA();
  if (std::string(dist::get_world_group()->backend(strata::kCUDA, "test").name()) != "nccl")
    GTEST_SKIP() << "WORLD stages CUDA tensors through MPI here (ranks share a GPU), so there is no NCCL group";
  const int r = dist::get_rank(), n = dist::get_world_size();
  c10d::ProcessGroupNCCL pg(r, n);
  EXPECT_EQ(pg.getBackendName(), "nccl");
  std::vector<Tensor> t = {pair(r + 1).cuda()};
  pg.allreduce(t)->wait();
  EXPECT_EQ(values(t[0].cpu()), std::vector<double>(2, n * (n + 1) / 2.0));
  std::vector<Tensor> host = {pair(1)};
  EXPECT_THROW_MSG(pg.allreduce(host), "c10d::ProcessGroupNCCL::allreduce: expected CUDA tensors, got one on cpu");
}
