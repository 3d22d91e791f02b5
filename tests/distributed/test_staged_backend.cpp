// The staged backend (distributed/staged.cpp) under mpirun -np 1, 2 and 4, on CPU tensors so that it
// runs without a GPU: it copies every tensor to a host buffer and back whatever the device, so what
// runs here is the CUDA path's staging (16-bit reductions in float32, inputs copied at the call,
// results landing in wait(), roots). Also the MPI backend's handling of 16-bit floats.

#include <numeric>

#include <strata/distributed/collectives.h>
#include <strata/distributed/detail/cuda_backend.h>

#include "../helpers.h"

namespace dist = strata::distributed;
using namespace strata;
using dist::ReduceOp;

namespace {

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

/// A staged backend moving CPU tensors through a duplicate of WORLD's MPI communicator (a collective).
std::unique_ptr<dist::Backend> staged() {
  auto host = dist::get_world_group()->backend(kCPU, "test").split(rank());
  return dist::detail::make_staged_backend(std::move(host), kCPU, rank());
}

/// {rank + 1, 2 (rank + 1), ...} as dtype t: small integers, exact in Half and BFloat16.
Tensor ranked(ScalarType t, int n = 2, int r = rank()) { return ((arange(n, kDouble) + 1) * (r + 1.0)).to(t); }

/// 1 + 2 + ... + world.
double triangle() { return world() * (world() + 1) / 2.0; }

}  // namespace

TEST(StagedBackend, NameAndDeviceType) {
  auto b = staged();
  EXPECT_STREQ(b->name(), "mpi+staging");
  EXPECT_EQ(b->device_type(), kCPU);
}

TEST(StagedBackend, AllReduceReducesSixteenBitFloatsInFloat32) {
  auto b = staged();
  for (ScalarType t : {kHalf, kBFloat16, kFloat, kDouble, kLong}) {
    SCOPED_TRACE(to_string(t));
    Tensor x = ranked(t);
    b->all_reduce(x, ReduceOp::SUM, false);
    EXPECT_EQ(x.dtype(), t);
    EXPECT_VALUES(x, {triangle(), 2 * triangle()});
  }
  // 1.5 + 1.25 (twice the first): a sum Half can hold, of terms it holds, so float32 and back is exact.
  Tensor avg = full({1}, 1.5 + 0.25 * (rank() % 2), kHalf);
  b->all_reduce(avg, ReduceOp::AVG, false);
  const int odd = world() / 2;
  EXPECT_VALUES(avg, {(1.5 * world() + 0.25 * odd) / world()}, 1e-3);
  Tensor any = tensor({rank() == 0 ? 1.0 : 0.0, 0.0}, kBool);
  b->all_reduce(any, ReduceOp::MAX, false);
  EXPECT_VALUES(any, {1, 0});
}

TEST(StagedBackend, AsyncInputsAreCopiedAtTheCallAndResultsLandInWait) {
  auto b = staged();
  Tensor x = ranked(kHalf);
  auto work = b->all_reduce(x, ReduceOp::SUM, true);
  x.fill_(-1);  // written right after the call: the op reduces the copy made at the call
  work->wait();
  EXPECT_VALUES(x, {triangle(), 2 * triangle()});
  EXPECT_TRUE(work->is_completed());

  // The result lands in the tensor by is_completed() too, when it first sees the op done.
  Tensor gathered = empty({3 * world()});
  auto polled = b->all_gather(gathered, ranked(kFloat, 3), true);
  while (!polled->is_completed()) {
  }
  for (int r = 0; r < world(); ++r)
    EXPECT_TRUE(strata::testing::allclose(gathered.narrow(0, 3 * r, 3), ranked(kFloat, 3, r)));
}

TEST(StagedBackend, RootsKeepOrReceiveTheirTensors) {
  auto b = staged();
  const int last = world() - 1;
  Tensor sum = ranked(kBFloat16);
  b->reduce(sum, last, ReduceOp::SUM, false);
  const bool root = rank() == last;
  EXPECT_VALUES(sum, {root ? triangle() : rank() + 1.0, root ? 2 * triangle() : 2.0 * (rank() + 1)});
  Tensor bcast = rank() == last ? ranked(kHalf) : zeros({2}, kHalf);
  b->broadcast(bcast, last, true)->wait();
  EXPECT_VALUES(bcast, {double(world()), 2.0 * world()});
}

TEST(StagedBackend, GatherScatterAndAllToAllMoveSixteenBitBits) {
  auto b = staged();
  const int n = world(), last = n - 1;
  for (ScalarType t : {kHalf, kBFloat16, kLong, kBool}) {
    SCOPED_TRACE(to_string(t));
    Tensor gathered = rank() == last ? empty({2 * n}, t) : Tensor();
    b->gather(gathered, ranked(t), last, false);
    for (int r = 0; r < n && rank() == last; ++r)
      EXPECT_TRUE(strata::testing::allclose(gathered.narrow(0, 2 * r, 2), ranked(t, 2, r), 0, 0));
    const Tensor parts = (arange(2 * n, kDouble) + 1).to(t);
    Tensor mine = empty({2}, t);
    b->scatter(mine, rank() == last ? parts : Tensor(), last, true)->wait();
    EXPECT_TRUE(strata::testing::allclose(mine, parts.narrow(0, 2 * rank(), 2), 0, 0));
    // all_to_all: rank r sends its p-th element to rank p, so this rank gets element `rank` of everyone.
    Tensor received = empty({n}, t);
    const std::vector<int64_t> ones(n, 1);
    b->all_to_all(received, ranked(t, n), ones, ones, false);
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(strata::testing::allclose(received.narrow(0, r, 1), ranked(t, n, r).narrow(0, rank(), 1), 0, 0));
  }
  Tensor scattered = empty({1}, kHalf);
  b->reduce_scatter(scattered, ranked(kHalf, n), ReduceOp::SUM, false);
  EXPECT_VALUES(scattered, {(rank() + 1) * triangle()});
}

TEST(StagedBackend, SendAndReceiveBetweenPairs) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto b = staged();
  const int partner = rank() ^ 1;
  if (partner >= world()) return;
  Tensor got = empty({2}, kBFloat16);
  auto receive = b->recv(got, partner, 5, true);
  b->send(ranked(kBFloat16), partner, 5, false);
  receive->wait();
  EXPECT_TRUE(strata::testing::allclose(got, ranked(kBFloat16, 2, partner), 0, 0));
}

TEST(StagedBackend, SplitStagesTheSubgroup) {
  auto b = staged();
  // Even ranks form a group; the odd ones are outside it.
  const int index = rank() % 2 == 0 ? rank() / 2 : -1;
  std::unique_ptr<dist::Backend> evens = b->split(index);
  EXPECT_EQ(evens != nullptr, index >= 0);
  if (!evens) return;
  EXPECT_STREQ(evens->name(), "mpi+staging");
  const int members = (world() + 1) / 2;
  Tensor x = full({1}, 1.0, kHalf);
  evens->all_reduce(x, ReduceOp::SUM, false);
  EXPECT_VALUES(x, {double(members)});
  // Roots are group ranks: group rank 0 is global rank 0.
  Tensor y = full({1}, double(rank()), kHalf);
  evens->reduce(y, 0, ReduceOp::MAX, false);
  EXPECT_VALUES(y, {rank() == 0 ? 2.0 * (members - 1) : double(rank())});
}

TEST(MpiBackend, SixteenBitFloatsMoveButDoNotReduce) {
  for (ScalarType t : {kHalf, kBFloat16}) {
    SCOPED_TRACE(to_string(t));
    EXPECT_THROW_MSG(dist::all_reduce(ranked(t)), std::string("all_reduce: MPI cannot reduce ") + to_string(t));
    EXPECT_THROW_MSG(dist::reduce_scatter_tensor(empty({1}, t), ranked(t, world())), "MPI cannot reduce");
    tensor_list outs;
    for (int r = 0; r < world(); ++r) outs.push_back(empty({2}, t));
    dist::all_gather(outs, ranked(t));
    for (int r = 0; r < world(); ++r) EXPECT_TRUE(strata::testing::allclose(outs[r], ranked(t, 2, r), 0, 0));
  }
}
