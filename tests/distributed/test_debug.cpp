// STRATA_DISTRIBUTED_DEBUG=DETAIL: collectives whose ranks disagree throw on every rank, naming
// each rank's call; a p2p receiver throws when the sender's dtype or shape differ, and the pair
// stays in step afterwards; calls that agree (including legitimately different shapes) pass.
// INFO (the default): the same mismatches are caught within 64 calls, on every rank, naming the first.

#include <gtest/gtest.h>

#include <numeric>

#include <string>
#include <vector>

#include <strata/distributed/collectives.h>
#include <strata/strata.h>

#include "../helpers.h"
#include "forwarding_backend.h"

namespace strata::distributed {
namespace {

// Every test of a suite runs at its level and leaves the level as it found it.
template <DebugLevel kLevel>
class AtLevel : public ::testing::Test {
 protected:
  void SetUp() override {
    was_ = get_debug_level();
    set_debug_level(kLevel);
  }
  void TearDown() override { set_debug_level(was_); }

 private:
  DebugLevel was_ = DebugLevel::OFF;
};
using Detail = AtLevel<DebugLevel::DETAIL>;
using Info = AtLevel<DebugLevel::INFO>;

// How the message names global ranks first..world-1: "rank 1" or "ranks 1, 2, 3".
std::string ranks_from(int first) {
  std::string out = get_world_size() - first == 1 ? "rank " : "ranks ";
  for (int r = first; r < get_world_size(); ++r) out += (r > first ? ", " : "") + std::to_string(r);
  return out;
}

const std::string kDetail = " (STRATA_DISTRIBUTED_DEBUG=DETAIL): ";

#define NEEDS_RANKS(n) \
  if (get_world_size() < (n)) GTEST_SKIP() << "needs " << (n) << " ranks"

TEST_F(Detail, AgreeingCallsPass) {
  Tensor t = full({2, 3}, get_rank() + 1.0);
  all_reduce(t);
  const double sum = get_world_size() * (get_world_size() + 1) / 2.0;
  EXPECT_VALUES(t, {sum, sum, sum, sum, sum, sum});
  Tensor b = full({2}, get_rank() == get_world_size() - 1 ? 7.0 : 0.0, kLong);
  broadcast(b, get_world_size() - 1);
  EXPECT_VALUES(b, {7, 7});
  barrier();
  // all_to_all_single with uneven splits: each rank sends rank p one row per p, so input shapes differ.
  const int n = get_world_size(), me = get_rank();
  std::vector<int64_t> in_splits(n), out_splits(n, me);
  for (int p = 0; p < n; ++p) in_splits[p] = p;
  Tensor in = full({n * (n - 1) / 2, 2}, me, kFloat);
  Tensor out = empty({static_cast<int64_t>(n) * me, 2});
  all_to_all_single(out, in, out_splits, in_splits);
  std::vector<double> expected;
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < 2 * me; ++i) expected.push_back(p);
  EXPECT_EQ(testing::values(out), expected);
}

TEST_F(Detail, ShapeMismatchThrowsOnEveryRank) {
  NEEDS_RANKS(2);
  Tensor t = ones({get_rank() == 0 ? 2 : 3});
  EXPECT_THROW_MSG(all_reduce(t), " on WORLD: ranks disagree on shape" + kDetail +
                                      "rank 0 called all_reduce(Float [2], SUM); " + ranks_from(1) +
                                      " called all_reduce(Float [3], SUM)");
  EXPECT_EQ(testing::values(t), std::vector<double>(t.numel(), 1.0));  // nothing was reduced
  // The group is still in step: the next call that agrees works.
  Tensor u = ones({2});
  all_reduce(u);
  EXPECT_VALUES(u, {double(get_world_size()), double(get_world_size())});
}

TEST_F(Detail, OpMismatchThrows) {
  NEEDS_RANKS(2);
  Tensor t = ones({2});
  const std::string expected = ": ranks disagree on op, root and reduce op" + kDetail +
                               "rank 0 called all_reduce(Float [2], SUM); " + ranks_from(1) +
                               " called broadcast(Float [2], root 0)";
  if (get_rank() == 0)
    EXPECT_THROW_MSG(all_reduce(t), expected);
  else
    EXPECT_THROW_MSG(broadcast(t, 0), expected);
}

TEST_F(Detail, RootDtypeAndReduceOpMismatchesThrow) {
  NEEDS_RANKS(2);
  const bool first = get_rank() == 0;
  Tensor t = ones({2});
  EXPECT_THROW_MSG(broadcast(t, first ? 0 : 1), ": ranks disagree on root" + kDetail +
                                                    "rank 0 called broadcast(Float [2], root 0); " + ranks_from(1) +
                                                    " called broadcast(Float [2], root 1)");
  Tensor d = ones({2}, first ? kFloat : kDouble);
  EXPECT_THROW_MSG(all_reduce(d), ": ranks disagree on dtype" + kDetail + "rank 0 called all_reduce(Float [2], SUM); " +
                                      ranks_from(1) + " called all_reduce(Double [2], SUM)");
  EXPECT_THROW_MSG(all_reduce(t, first ? ReduceOp::SUM : ReduceOp::MAX),
                   ": ranks disagree on reduce op" + kDetail + "rank 0 called all_reduce(Float [2], SUM); " +
                       ranks_from(1) + " called all_reduce(Float [2], MAX)");
}

TEST_F(Detail, SkippedCallIsACallNumberMismatch) {
  NEEDS_RANKS(2);
  std::vector<int> ranks(get_world_size());
  std::iota(ranks.begin(), ranks.end(), 0);
  Group all = new_group(ranks);
  if (get_rank() == 0) all->next_sequence_number();  // as if rank 0 had made one more call on the group
  Tensor t = ones({2});
  EXPECT_THROW_MSG(all_reduce(t, ReduceOp::SUM, all), ": ranks disagree on call number" + kDetail +
                                                          "rank 0 called #2 all_reduce(Float [2], SUM); " +
                                                          ranks_from(1) + " called #1 all_reduce(Float [2], SUM)");
  destroy_process_group(all);
}

// Note [agreed refusals]: a call that one rank refuses before it runs fails every rank, and the ranks stay in step.
TEST_F(Detail, ACallOneRankRefusesFailsEveryRank) {
  NEEDS_RANKS(2);
  const bool refuses = get_rank() == 1;
  Tensor t = ones({2});
  tensor_list list(refuses ? 1 : get_world_size(), zeros({2}));
  const uint64_t call = get_world_group()->sequence_number() + 1;
  const std::string own = "all_gather: tensor_list has 1 tensors but WORLD has " + std::to_string(get_world_size());
  EXPECT_THROW_MSG(all_gather(list, t), refuses ? own
                                                : "all_gather #" + std::to_string(call) +
                                                      " on WORLD: rank 1 refused the call, so no rank runs it" +
                                                      " (STRATA_DISTRIBUTED_DEBUG=DETAIL); rank 1's error: " + own);
  // Every rank counted the call: the next one agrees.
  all_reduce(t);
  EXPECT_VALUES(t, {double(get_world_size()), double(get_world_size())});
  EXPECT_EQ(get_world_group()->sequence_number(), call + 1);
}

TEST_F(Detail, RefusalsOfSeveralRanksNameThemAll) {
  NEEDS_RANKS(3);
  const int dst = get_rank() == 0 ? 0 : get_world_size();  // ranks 1.. name a destination outside the world
  const std::string own = "reduce: dst " + std::to_string(get_world_size()) + " is not a member of WORLD";
  Tensor t = ones({2});
  EXPECT_THROW_MSG(reduce(t, dst), get_rank() == 0 ? ": " + ranks_from(1) +
                                                         " refused the call, so no rank runs it"
                                                         " (STRATA_DISTRIBUTED_DEBUG=DETAIL); rank 1's error: " +
                                                         own
                                                   : own);
  barrier();
}

// WORLD's MPI backend behind a check_device that refuses every device on rank 1, as NCCL's refuses a tensor on
// another GPU: the front end asks it (ProcessGroup::backend(Device)), strata's own exchanges do not
// (ProcessGroup::backend(DeviceType)).
class RefusingOnRankOne final : public testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "refusing"; }
  void check_device(Device device, const char* op) const override {
    STRATA_CHECK(get_rank() != 1, op, ": rank 1 refuses tensors on ", device);
  }
};

TEST_F(Detail, ABackendsDeviceCheckOnOneRankFailsEveryRank) {
  NEEDS_RANKS(2);
  const Group& world = get_world_group();
  Backends backends;
  backends[static_cast<size_t>(kCPU)] =
      std::make_unique<RefusingOnRankOne>(world->backend(kCPU, "test").split(world->rank()));
  auto group = std::make_shared<ProcessGroup>(1000, world->ranks(), world->rank(), std::move(backends));
  Tensor t = ones({2});
  const std::string own = "all_reduce: rank 1 refuses tensors on cpu";
  EXPECT_THROW_MSG(all_reduce(t, ReduceOp::SUM, group),
                   get_rank() == 1 ? own
                                   : "rank 1 refused the call, so no rank runs it (STRATA_DISTRIBUTED_DEBUG=DETAIL); "
                                     "rank 1's error: " +
                                         own);
  EXPECT_NO_THROW(group->backend(kCPU, "test"));  // by type: no device to check
}

TEST_F(Detail, ARefusalWhileTheSwitchIsOffWaitsForNoOne) {
  NEEDS_RANKS(2);
  all_gather_comm_off(true);
  tensor_list list(get_rank() == 1 ? 1 : get_world_size(), zeros({2}));
  if (get_rank() == 1)
    EXPECT_THROW_MSG(all_gather(list, ones({2})), "all_gather: tensor_list has 1 tensors");
  else
    all_gather(list, ones({2}));  // off: no rank communicates, so no rank waits for rank 1
  all_gather_comm_off(false);
  barrier();
}

TEST_F(Detail, SubgroupMismatchNamesGlobalRanks) {
  NEEDS_RANKS(2);
  Group pair = new_group({1, 0});
  if (pair->is_member()) {
    // Group rank 0 is global rank 1, so rank 1's call comes first.
    Tensor t = ones({get_rank() == 1 ? 2 : 3});
    EXPECT_THROW_MSG(all_reduce(t, ReduceOp::SUM, pair),
                     "all_reduce #1 on " + pair->describe() + ": ranks disagree on shape" + kDetail +
                         "rank 1 called all_reduce(Float [2], SUM); rank 0 called all_reduce(Float [3], SUM)");
  }
  destroy_process_group(pair);
}

// Ranks that disagree on the tensor-parallel size build different grids: the first group they make differs, and
// every rank throws there instead of training in mismatched groups.
TEST_F(Detail, RanksThatDisagreeOnTheTensorParallelSizeFailTogether) {
  NEEDS_RANKS(2);
  const int model = get_rank() == 0 ? 2 : 1;  // rank 0 splits each layer over 2 ranks, the others over 1
  const int data = get_world_size() / model;
  EXPECT_THROW_MSG(pipe::PipelineParallelGrid(pipe::PipeModelDataParallelTopology(1, model, data)), "new_group #");
  EXPECT_THROW_MSG(new_group(get_rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}),
                   ": ranks disagree on shape" + kDetail + "rank 0 called new_group(Long [0, 1])");
  barrier();  // still in step
}

TEST_F(Detail, P2PShapeMismatchThrowsOnTheReceiverAndKeepsThePairInStep) {
  NEEDS_RANKS(2);
  if (get_rank() == 0) {
    send(full({2}, 5.0), 1, {}, 7);
    send(full({3}, 6.0), 1, {}, 7);
  } else if (get_rank() == 1) {
    Tensor wrong = zeros({3});
    EXPECT_THROW_MSG(recv(wrong, 0, {}, 7),
                     "recv from rank 0 on WORLD with tag 7: sender and receiver disagree on shape" + kDetail +
                         "rank 0 called send(Float [2]), rank 1 called recv(Float [3])");
    Tensor right = zeros({3});
    recv(right, 0, {}, 7);
    EXPECT_VALUES(right, {6, 6, 6});
  }
}

TEST_F(Detail, P2PDtypeMismatchThrowsFromWait) {
  NEEDS_RANKS(2);
  if (get_rank() == 0) {
    isend(full({2}, 1.0, kDouble), 1)->wait();
  } else if (get_rank() == 1) {
    auto work = irecv(zeros({2}), 0);
    EXPECT_THROW_MSG(work->wait(), "irecv from rank 0 on WORLD with tag 0: sender and receiver disagree on dtype" +
                                       kDetail + "rank 0 called isend(Double [2]), rank 1 called irecv(Float [2])");
  }
}

TEST_F(Detail, P2PTagsTakenOutOfOrderPass) {
  NEEDS_RANKS(2);
  if (get_rank() == 0) {
    auto a = isend(full({1}, 1.0), 1, {}, 1);
    auto b = isend(full({2}, 2.0), 1, {}, 2);
    a->wait();
    b->wait();
  } else if (get_rank() == 1) {
    Tensor two = zeros({2}), one = zeros({1});
    auto b = irecv(two, 0, {}, 2);
    auto a = irecv(one, 0, {}, 1);
    b->wait();
    a->wait();
    EXPECT_VALUES(two, {2, 2});
    EXPECT_VALUES(one, {1});
  }
}

TEST_F(Detail, P2PRingExchangeDoesNotDeadlock) {
  // Every rank receives before it sends: the DETAIL check must not block an irecv.
  NEEDS_RANKS(2);
  const int n = get_world_size(), me = get_rank();
  Tensor got = zeros({2});
  auto works =
      batch_isend_irecv({{P2POp::kRecv, got, (me + n - 1) % n}, {P2POp::kSend, full({2}, me, kFloat), (me + 1) % n}});
  for (auto& w : works) w->wait();
  EXPECT_VALUES(got, {double((me + n - 1) % n), double((me + n - 1) % n)});
}

// ---- INFO: the default, windows of 64 calls compared at every 64th ----

// Agreeing all_reduces on WORLD until one throws (the comparison at a window's end), at most `limit`;
// returns the message, or "" when none threw.
std::string agree_until_caught(int limit) {
  for (int i = 0; i < limit; ++i) {
    Tensor t = ones({1});
    try {
      all_reduce(t);
    } catch (const Error& e) {
      return e.what();
    }
    EXPECT_VALUES(t, {double(get_world_size())});
  }
  return "";
}

TEST_F(Info, ShapeMismatchIsCaughtWithinAWindow) {
  NEEDS_RANKS(2);
  // The same number of elements in another shape: MPI moves it without a word.
  Tensor t = ones(get_rank() == 0 ? IntArrayRef{2, 3} : IntArrayRef{3, 2});
  all_reduce(t);
  const uint64_t seq = get_world_group()->sequence_number();
  const std::string message = agree_until_caught(64);
  EXPECT_NE(message.find(" on WORLD: the ranks' calls differ from #" + std::to_string(seq) +
                         " on: ranks disagree on shape (found by the check of every 64 calls, "
                         "STRATA_DISTRIBUTED_DEBUG=INFO; the results of the calls since are wrong"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 0 called #" + std::to_string(seq) + " all_reduce(Float [2, 3], SUM); " + ranks_from(1) +
                         " called #" + std::to_string(seq) + " all_reduce(Float [3, 2], SUM)"),
            std::string::npos)
      << message;
  // Caught on every rank at the same call, and the group goes on in step: a whole window passes.
  EXPECT_EQ(agree_until_caught(130), "");
}

TEST_F(Info, ReduceOpMismatchIsCaughtWithinAWindow) {
  NEEDS_RANKS(2);
  Tensor t = full({2}, get_rank() + 1.0);
  all_reduce(t, get_rank() == 0 ? ReduceOp::SUM : ReduceOp::MAX);  // a different result on each rank
  const std::string message = agree_until_caught(64);
  EXPECT_NE(message.find("ranks disagree on reduce op"), std::string::npos) << message;
  EXPECT_NE(message.find("all_reduce(Float [2], SUM); " + ranks_from(1) + " called #"), std::string::npos) << message;
  EXPECT_EQ(agree_until_caught(130), "");
}

TEST_F(Info, CallsThatAgreePassAndOffChecksNothing) {
  NEEDS_RANKS(2);
  // all_to_all_single's input shapes legitimately differ, barrier has no tensor.
  const int n = get_world_size(), me = get_rank();
  std::vector<int64_t> in_splits(n), out_splits(n, me);
  for (int p = 0; p < n; ++p) in_splits[p] = p;
  for (int i = 0; i < 70; ++i) {
    Tensor in = full({n * (n - 1) / 2, 2}, me, kFloat), out = empty({static_cast<int64_t>(n) * me, 2});
    all_to_all_single(out, in, out_splits, in_splits);
    barrier();
  }
  EXPECT_EQ(agree_until_caught(130), "");
  set_debug_level(DebugLevel::OFF);
  Tensor t = ones(get_rank() == 0 ? IntArrayRef{2, 3} : IntArrayRef{3, 2});
  all_reduce(t);
  EXPECT_EQ(agree_until_caught(130), "");  // unchecked
}

}  // namespace
}  // namespace strata::distributed
