// Collectives on CUDA tensors under mpirun -np 1..4: every collective against the same call on CPU
// tensors for each dtype it takes, async ordering against the current stream, subgroups, p2p, the
// differentiable collectives with their backward, and the path init() chose (distributed/README.md).
// Several ranks on one GPU take the staged path (MPI with host staging), one rank per GPU takes
// NCCL; STRATA_CUDA_BACKEND=mpi forces the staged path. Without a visible GPU every test is skipped.

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>

#include <strata/distributed/collectives.h>
#include <strata/distributed/functional.h>
#include <strata/tensor/cuda.h>

#include "../helpers.h"

namespace dist = strata::distributed;
namespace F = strata::distributed::functional;
using namespace strata;
using dist::ReduceOp;
using strata::testing::gpu;

namespace {

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

TensorOptions on(Device d, ScalarType t) { return TensorOptions(t).device(d); }

const std::vector<ScalarType> kAllDtypes = {kFloat, kDouble, kHalf, kBFloat16, kLong, kBool};
const std::vector<ScalarType> kFloatDtypes = {kFloat, kDouble, kHalf, kBFloat16};

/// n small integers (1..3, or 0/1 for bool) that depend on rank `r` and `salt`: exact in every dtype, and so are
/// their sums and products over 4 ranks.
Tensor input(ScalarType t, int64_t n, Device d, int salt = 0, int r = rank()) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = t == kBool ? (i + r + salt) % 2 : (i + r + salt) % 3 + 1;
  return tensor(v, kDouble).to(d, t, /*non_blocking=*/false, /*copy=*/true);
}

/// A collective run on tensors of dtype t on device d; returns its outputs.
using Run = std::function<tensor_list(Device, ScalarType)>;

/// Runs `run` on this rank's GPU and on the CPU for each dtype and expects the same outputs. The CPU cannot reduce
/// 16-bit floats, so when `reduces` its reference for them runs in float32 and is converted.
void expect_as_on_cpu(const Run& run, const std::vector<ScalarType>& dtypes, bool reduces) {
  for (ScalarType t : dtypes) {
    SCOPED_TRACE(std::string("dtype ") + to_string(t));
    const tensor_list on_gpu = run(gpu(), t);
    const tensor_list on_cpu = run(Device(kCPU), reduces && is_reduced_floating_point(t) ? kFloat : t);
    ASSERT_EQ(on_gpu.size(), on_cpu.size());
    const double rtol = is_reduced_floating_point(t) ? 1e-2 : t == kFloat ? 1e-6 : t == kDouble ? 1e-12 : 0;
    for (size_t i = 0; i < on_gpu.size(); ++i) {
      ASSERT_EQ(on_gpu[i].defined(), on_cpu[i].defined()) << "output " << i;
      if (!on_cpu[i].defined()) continue;
      EXPECT_EQ(on_gpu[i].device(), gpu()) << "output " << i;
      EXPECT_EQ(on_gpu[i].dtype(), t) << "output " << i;
      EXPECT_TRUE(strata::testing::allclose(on_gpu[i], on_cpu[i].to(t), rtol, 0)) << "output " << i;
    }
  }
}

/// `n` empty tensors of `size` elements.
tensor_list empties(int n, int64_t size, Device d, ScalarType t) {
  tensor_list out;
  for (int i = 0; i < n; ++i) out.push_back(empty({size}, on(d, t)));
  return out;
}

}  // namespace

// ---- which path, and the backend itself ----

TEST(CudaProcessGroup, InitPickedThePathTheSettingAsksFor) {
  STRATA_REQUIRE_CUDA();
  const dist::Group& w = dist::get_world_group();
  ASSERT_TRUE(w->has_backend(kCUDA)) << "a GPU is visible but WORLD has no backend for CUDA tensors";
  const char* env = std::getenv("STRATA_CUDA_BACKEND");
  const std::string setting = env && *env ? env : "auto";
  // The tests run on one node where every rank sees the same GPUs: each rank has one of its own exactly
  // when there are at least as many GPUs as ranks.
  const bool own_gpu = world() <= cuda::device_count();
  const std::string expected = setting == "mpi" || (setting == "auto" && !own_gpu) ? "mpi+staging" : "nccl";
  EXPECT_EQ(std::string(w->backend(kCUDA, "test").name()), expected);
  EXPECT_EQ(cuda::current_device(), rank() % cuda::device_count());
}

TEST(CudaProcessGroup, BackendBarrierAndDeviceCheck) {
  STRATA_REQUIRE_CUDA();
  dist::Backend& b = dist::get_world_group()->backend(kCUDA, "test");
  b.barrier(false);
  auto work = b.barrier(true);
  work->wait();
  EXPECT_TRUE(work->is_completed());
  if (std::string(b.name()) != "nccl" || cuda::device_count() < 2) return;
  // NCCL moves each rank's tensors on its own GPU; every rank fails the same way before communicating.
  const Device other(kCUDA, static_cast<int8_t>((cuda::current_device() + 1) % cuda::device_count()));
  EXPECT_THROW_MSG(dist::all_reduce(ones({2}, on(other, kFloat))), "but this rank's NCCL communicator is on");
}

TEST(CudaProcessGroup, DetailNamesARankWhoseTensorIsOnAnotherDevice) {
  STRATA_REQUIRE_CUDA();
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  const dist::DebugLevel was = dist::get_debug_level();
  dist::set_debug_level(dist::DebugLevel::DETAIL);
  // Rank 0's tensor takes WORLD's CPU backend, the others' its CUDA one: without the check they would never meet.
  Tensor t = ones({2}, on(rank() == 0 ? Device(kCPU) : gpu(), kFloat));
  EXPECT_THROW_MSG(dist::all_reduce(t),
                   ": ranks disagree on device (STRATA_DISTRIBUTED_DEBUG=DETAIL): rank 0 called "
                   "all_reduce(Float [2], SUM); ");
  EXPECT_THROW_MSG(dist::all_reduce(t), " called all_reduce(Float [2] on cuda, SUM)");
  dist::set_debug_level(was);
}

// ---- every collective against the CPU ----

TEST(CudaCollectives, AllReduceEveryOpAndDtype) {
  STRATA_REQUIRE_CUDA();
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX}) {
    SCOPED_TRACE(dist::to_string(op));
    expect_as_on_cpu(
        [op](Device d, ScalarType t) {
          Tensor x = input(t, 5, d);
          dist::all_reduce(x, op);
          return tensor_list{x};
        },
        op == ReduceOp::AVG ? kFloatDtypes : kAllDtypes, true);
  }
}

TEST(CudaCollectives, AllReduceNonContiguousAsyncAndCoalesced) {
  STRATA_REQUIRE_CUDA();
  expect_as_on_cpu(
      [](Device d, ScalarType t) {
        Tensor base = input(t, 6, d).view({2, 3});
        dist::all_reduce(base.t(), ReduceOp::SUM, {}, /*async_op=*/true)->wait();
        Tensor a = input(t, 3, d, 1), b = input(t, 4, d, 2).view({2, 2});
        dist::all_reduce_coalesced({a, b}, ReduceOp::MAX);
        return tensor_list{base, a, b};
      },
      kAllDtypes, true);
}

TEST(CudaCollectives, ReduceAndBroadcastFromTheLastRank) {
  STRATA_REQUIRE_CUDA();
  const int last = world() - 1;
  expect_as_on_cpu(
      [last](Device d, ScalarType t) {
        Tensor sum = input(t, 4, d), max = input(t, 4, d, 1);
        dist::reduce(sum, last, ReduceOp::SUM);
        dist::reduce(max, last, ReduceOp::MAX, {}, /*async_op=*/true)->wait();
        return tensor_list{sum, max};
      },
      kAllDtypes, true);
  expect_as_on_cpu(
      [last](Device d, ScalarType t) {
        Tensor base = zeros({2, 2}, on(d, t));
        Tensor col = base.select(1, 1);  // stride 2
        if (rank() == last) col.copy_(input(t, 2, d));
        dist::broadcast(col, last);
        Tensor async = input(t, 3, d, 1);
        dist::broadcast(async, last, {}, /*async_op=*/true)->wait();
        return tensor_list{base, async};
      },
      kAllDtypes, false);
}

TEST(CudaCollectives, AllGatherEveryForm) {
  STRATA_REQUIRE_CUDA();
  expect_as_on_cpu(
      [](Device d, ScalarType t) {
        tensor_list outs = empties(world(), 3, d, t);
        dist::all_gather(outs, input(t, 3, d));
        Tensor into = empty({2 * world()}, on(d, t));
        dist::all_gather_into_tensor(into, input(t, 2, d, 1), {}, /*async_op=*/true)->wait();
        std::vector<tensor_list> lists;
        for (int r = 0; r < world(); ++r) lists.push_back({empty({2}, on(d, t)), empty({1, 3}, on(d, t))});
        dist::all_gather_coalesced(lists, {input(t, 2, d, 2), input(t, 3, d, 3).view({1, 3})});
        tensor_list all = outs;
        all.push_back(into);
        for (const tensor_list& l : lists) all.insert(all.end(), l.begin(), l.end());
        return all;
      },
      kAllDtypes, false);
}

TEST(CudaCollectives, ReduceScatterBothForms) {
  STRATA_REQUIRE_CUDA();
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
    expect_as_on_cpu(
        [op](Device d, ScalarType t) {
          tensor_list inputs;
          for (int p = 0; p < world(); ++p) inputs.push_back(input(t, 2, d, p));
          Tensor out = empty({2}, on(d, t));
          dist::reduce_scatter(out, inputs, op);
          Tensor out_tensor = empty({3}, on(d, t));
          dist::reduce_scatter_tensor(out_tensor, input(t, 3 * world(), d, 1), op, {}, /*async_op=*/true)->wait();
          return tensor_list{out, out_tensor};
        },
        kAllDtypes, true);
  }
}

TEST(CudaCollectives, GatherAndScatterAtTheLastRank) {
  STRATA_REQUIRE_CUDA();
  const int last = world() - 1;
  const bool root = rank() == last;
  expect_as_on_cpu(
      [last, root](Device d, ScalarType t) {
        tensor_list gathered = root ? empties(world(), 3, d, t) : tensor_list{};
        dist::gather(input(t, 3, d), gathered, last);
        tensor_list parts;
        if (root)
          for (int p = 0; p < world(); ++p) parts.push_back(input(t, 2, d, p + 1));
        Tensor mine = empty({2}, on(d, t));
        dist::scatter(mine, parts, last, {}, /*async_op=*/true)->wait();
        gathered.push_back(mine);
        return gathered;
      },
      kAllDtypes, false);
}

TEST(CudaCollectives, AllToAllWithUnevenParts) {
  STRATA_REQUIRE_CUDA();
  const int me = rank(), n = world();
  expect_as_on_cpu(
      [me, n](Device d, ScalarType t) {
        // Rank r sends p + 1 + r elements to rank p, so this rank gets me + 1 + q from rank q.
        tensor_list ins, outs;
        for (int p = 0; p < n; ++p) {
          ins.push_back(input(t, p + 1 + me, d, p));
          outs.push_back(empty({me + 1 + p}, on(d, t)));
        }
        dist::all_to_all(outs, ins);
        // all_to_all_single over rows of 2: p + 1 rows go to rank p, me + 1 rows come from every rank.
        std::vector<int64_t> in_splits(n), out_splits(n, me + 1);
        std::iota(in_splits.begin(), in_splits.end(), 1);
        const int64_t in_rows = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0});
        Tensor out = empty({n * (me + 1), 2}, on(d, t));
        dist::all_to_all_single(out, input(t, 2 * in_rows, d, 1).view({in_rows, 2}), out_splits, in_splits, {},
                                /*async_op=*/true)
            ->wait();
        outs.push_back(out);
        return outs;
      },
      kAllDtypes, false);
}

// ---- ordering against the current stream ----

TEST(CudaCollectives, AsyncOpsAreOrderedOnTheCurrentStream) {
  STRATA_REQUIRE_CUDA();
  const int64_t n = int64_t{1} << 22;  // 16 MB, long enough for a missing dependency to show
  const double sum = world() * (world() + 1) / 2.0;
  Tensor x = zeros({n}, on(gpu(), kFloat));
  x.add_(rank() + 1);  // a kernel produces the input just before the call
  auto work = dist::all_reduce(x, ReduceOp::SUM, {}, /*async_op=*/true);
  work->wait();
  x.mul_(2);  // a kernel writes the result just after wait()
  EXPECT_TRUE(strata::testing::allclose(x.cpu(), full({n}, 2 * sum)));
  cuda::synchronize();
  EXPECT_TRUE(work->is_completed());

  // A Work dropped unwaited: the memory of its tensor must not go to a new tensor while the op still uses it.
  {
    Tensor dropped = full({n}, 1.0, on(gpu(), kFloat));
    dist::all_reduce(dropped, ReduceOp::SUM, {}, /*async_op=*/true);
  }
  Tensor fresh = full({n}, 5.0, on(gpu(), kFloat));
  cuda::synchronize();
  EXPECT_TRUE(strata::testing::allclose(fresh.cpu(), full({n}, 5.0)));
}

// ---- subgroups ----

TEST(CudaCollectives, SubgroupsUseTheirOwnRanks) {
  STRATA_REQUIRE_CUDA();
  std::vector<int> reversed(world());
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  dist::Group group = dist::new_group(reversed);  // group rank 0 is the last global rank
  EXPECT_STREQ(group->backend(kCUDA, "test").name(), dist::get_world_group()->backend(kCUDA, "test").name());
  expect_as_on_cpu(
      [&](Device d, ScalarType t) {
        Tensor x = input(t, 4, d);
        dist::all_reduce(x, ReduceOp::SUM, group);
        tensor_list outs = empties(world(), 2, d, t);
        dist::all_gather(outs, input(t, 2, d, 1), group);
        outs.push_back(x);
        return outs;
      },
      kAllDtypes, true);

  std::vector<int> evens;
  for (int r = 0; r < world(); r += 2) evens.push_back(r);
  dist::Group even = dist::new_group(evens);
  if (!even->is_member()) return;
  expect_as_on_cpu(
      [&](Device d, ScalarType t) {
        Tensor x = input(t, 3, d);
        dist::all_reduce(x, ReduceOp::MAX, even);
        Tensor y = input(t, 2, d, 1);
        dist::broadcast(y, evens.back(), even);
        return tensor_list{x, y};
      },
      kAllDtypes, true);
}

// ---- point to point ----

TEST(CudaP2P, PairsExchangeInOrderAndInBatches) {
  STRATA_REQUIRE_CUDA();
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int partner = rank() ^ 1;
  if (partner >= world()) return;  // the odd rank out
  for (ScalarType t : kAllDtypes) {
    SCOPED_TRACE(std::string("dtype ") + to_string(t));
    const Tensor mine = input(t, 4, gpu()), theirs = input(t, 4, Device(kCPU), 0, partner);
    // One direction at a time: NCCL matches a pair's messages in posting order.
    Tensor got = empty({4}, on(gpu(), t));
    Tensor second = empty({2}, on(gpu(), t));
    if (rank() % 2 == 0) {
      dist::send(mine, partner);
      dist::send(mine.narrow(0, 1, 2), partner, {}, /*tag=*/3);
      dist::recv(got, partner);
      dist::irecv(second, partner, {}, 3)->wait();
    } else {
      dist::recv(got, partner);
      dist::irecv(second, partner, {}, 3)->wait();
      dist::send(mine, partner);
      dist::isend(mine.narrow(0, 1, 2), partner, {}, 3)->wait();
    }
    EXPECT_TRUE(strata::testing::allclose(got, theirs, 0, 0));
    EXPECT_TRUE(strata::testing::allclose(second, theirs.narrow(0, 1, 2), 0, 0));
    // Both directions at once, into a strided tensor: one batch, so neither send waits for the other's.
    Tensor base = zeros({4, 2}, on(gpu(), t));
    Tensor col = base.select(1, 1);
    auto works = dist::batch_isend_irecv(
        {dist::P2POp{dist::P2POp::kSend, mine, partner}, dist::P2POp{dist::P2POp::kRecv, col, partner}});
    for (auto& w : works) w->wait();
    EXPECT_TRUE(strata::testing::allclose(col, theirs, 0, 0));
    EXPECT_TRUE(strata::testing::allclose(base.select(1, 0), zeros({4}, t), 0, 0));
  }
}

// ---- differentiable collectives ----

namespace {

/// A differentiable collective applied to a float64 leaf; returns its output (undefined where it has none).
using Differentiable = std::function<Tensor(const Tensor&)>;

/// {output, the leaf's gradient} of `op` on device d, with loss sum(output * w) for a rank-dependent w.
tensor_list forward_and_backward(Device d, const Differentiable& op) {
  Tensor x =
      input(kDouble, 24, d).view({12, 2}).to(d, kDouble, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
  Tensor out = op(x);
  if (out.defined())
    F::backward({(out * input(kDouble, out.numel(), d, 1).view(out.sizes())).sum()});
  else
    F::backward();
  return {out.defined() ? out.detach() : Tensor(), x.grad()};
}

}  // namespace

TEST(CudaFunctional, ForwardAndBackwardMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  const std::vector<std::pair<const char*, Differentiable>> ops = {
      {"all_reduce_sum", [](const Tensor& x) { return F::all_reduce_sum(x); }},
      {"all_reduce_max", [](const Tensor& x) { return F::all_reduce_max(x); }},
      {"all_gather axis 1", [](const Tensor& x) { return F::all_gather(x, {}, 1); }},
      {"reduce_scatter_sum", [](const Tensor& x) { return F::reduce_scatter_sum(x); }},
      {"all_to_all", [](const Tensor& x) { return F::all_to_all(x, {}, 0, 1); }},
      {"reduce_sum", [](const Tensor& x) { return F::reduce_sum(x); }},
      {"broadcast", [](const Tensor& x) { return F::broadcast(rank() == 0 ? x : Tensor()); }},
      {"gather", [](const Tensor& x) { return F::gather(x); }},
      {"scatter", [](const Tensor& x) { return F::scatter(rank() == 0 ? x : Tensor()); }},
      {"remote_send and remote_recv",
       [](const Tensor& x) {
         if (world() < 2 || rank() > 1) return Tensor();
         if (rank() == 0) {
           F::remote_send(x * 2, 1);
           return Tensor();
         }
         return F::remote_recv(0) + x;
       }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    const tensor_list on_gpu = forward_and_backward(gpu(), op), on_cpu = forward_and_backward(Device(kCPU), op);
    for (size_t i = 0; i < on_gpu.size(); ++i) {
      ASSERT_EQ(on_gpu[i].defined(), on_cpu[i].defined()) << (i ? "gradient" : "output");
      if (!on_cpu[i].defined()) continue;
      EXPECT_EQ(on_gpu[i].device(), gpu()) << (i ? "gradient" : "output");
      EXPECT_TRUE(strata::testing::allclose(on_gpu[i], on_cpu[i], 1e-12, 0)) << (i ? "gradient" : "output");
    }
  }
}
