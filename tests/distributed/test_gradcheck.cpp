// distributed::gradcheck of every differentiable collective, MegEngine's and Megatron's tensor-parallel
// mappings, under mpirun -np 1, 2 and 4, on WORLD and (with 4 ranks) on the permuted subgroup {2, 0, 3}:
// non-zero roots, axes other than 0 and non-contiguous inputs; then gradcheck's own reports of wrong gradients,
// bad inputs and broken replication, and its own communication under the profiling switches.

#include <strata/autograd/engine.h>
#include <strata/distributed/collectives.h>
#include <strata/distributed/functional.h>
#include <strata/distributed/gradcheck.h>
#include <strata/distributed/tensor_parallel.h>

#include "../helpers.h"
#include "switches.h"

namespace dist = strata::distributed;
namespace F = strata::distributed::functional;
namespace tp = strata::distributed::tensor_parallel;
using namespace strata;

namespace {

/// A float64 leaf that differs on every rank (max and min must have no ties across ranks).
Tensor input(IntArrayRef sizes, int salt = 0) {
  Generator gen(1000 * (dist::get_rank() + 1) + salt);
  return randn(sizes, kDouble, &gen).requires_grad_(true);
}

/// A float64 leaf that is the same on every rank: a replicated tensor.
Tensor replicated(IntArrayRef sizes, int salt = 0) {
  Generator gen(7 + salt);
  return randn(sizes, kDouble, &gen).requires_grad_(true);
}

/// Checks fn on every group of the test this rank belongs to: WORLD and, with 4 ranks, {2, 0, 3} (rank 1 is
/// outside it). inputs(group) gives this rank's inputs; fn(in, group) the outputs; `rep` names the replicated ones.
void check_on_groups(const std::function<tensor_list(const dist::Group&)>& inputs,
                     const std::function<tensor_list(const tensor_list&, const dist::Group&)>& fn,
                     const dist::Replicated& rep = {}) {
  std::vector<dist::Group> groups{dist::get_world_group()};
  if (dist::get_world_size() >= 4) groups.push_back(dist::new_group({2, 0, 3}));
  for (const dist::Group& g : groups) {
    if (!g->is_member()) continue;
    SCOPED_TRACE(g->describe());
    try {
      EXPECT_TRUE(dist::gradcheck([&](const tensor_list& in) { return fn(in, g); }, inputs(g), {}, g, rep));
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

int size(const dist::Group& g) { return g->size(); }
bool is_last(const dist::Group& g) { return g->rank() == g->size() - 1; }

}  // namespace

TEST(DistGradcheck, AllReduceSum) {
  check_on_groups(
      [](const dist::Group&) {
        return tensor_list{input({2, 3}), input({3, 2}, 1).t()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{F::all_reduce_sum(in[0], g), F::all_reduce_sum(in[1], g)};
      });
}

TEST(DistGradcheck, AllReduceMaxAndMin) {
  check_on_groups(
      [](const dist::Group&) {
        return tensor_list{input({2, 3}), input({3, 2}, 1).t()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{F::all_reduce_max(in[0], g), F::all_reduce_min(in[1], g)};
      });
}

TEST(DistGradcheck, ReduceSumAndBroadcastFromTheLastRank) {
  check_on_groups(
      [](const dist::Group& g) {
        return tensor_list{input({3, 2}, 0).t(), is_last(g) ? input({2, 2}, 1) : Tensor()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        const int root = size(g) - 1;
        return tensor_list{F::reduce_sum(in[0], g, root), F::broadcast(in[1], g, root).tanh()};
      });
}

TEST(DistGradcheck, AllGatherAndReduceScatterSum) {
  check_on_groups(
      [](const dist::Group& g) {
        return tensor_list{input({2, 3}), input({3, 2}, 1).t(), input({2, 1, 2}, 2), input({2 * size(g), 2}, 3),
                           input({size(g), 2}, 4).t()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{F::all_gather(in[0], g), F::all_gather(in[1], g, 1), F::all_gather(in[2], g, -1),
                           F::reduce_scatter_sum(in[3], g), F::reduce_scatter_sum(in[4], g, 1)};
      });
}

TEST(DistGradcheck, GatherAndScatterAtTheLastRank) {
  check_on_groups(
      [](const dist::Group& g) {
        const bool root = is_last(g);
        return tensor_list{input({2, 2}), input({2, 2}, 1).t(), root ? input({2 * size(g), 2}, 2) : Tensor(),
                           root ? input({2 * size(g), 2}, 3).t() : Tensor()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        const int root = size(g) - 1;
        return tensor_list{F::gather(in[0], g, 0, root), F::gather(in[1], g, 1, root), F::scatter(in[2], g, 0, root),
                           F::scatter(in[3], g, 1, root)};
      });
}

TEST(DistGradcheck, AllToAll) {
  check_on_groups(
      [](const dist::Group& g) {
        const int n = size(g);
        return tensor_list{input({2 * n, 3}), input({3, 2 * n}, 1).t(), input({2, n}, 2)};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{F::all_to_all(in[0], g, 0, 1), F::all_to_all(in[1], g), F::all_to_all(in[2], g, 1, 0)};
      });
}

TEST(DistGradcheck, RemoteSendAndRecvBothWays) {
  if (dist::get_world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 0 sends x to rank 1, which returns y * w and sends tanh(y * w) back to rank 0.
  const int r = dist::get_rank();
  tensor_list inputs;
  if (r == 0) inputs = {input({3, 2}).t()};
  if (r == 1) inputs = {input({2, 3})};
  auto fn = [r](const tensor_list& in) -> tensor_list {
    if (r == 0) {
      F::remote_send(in[0], 1);
      return {F::remote_recv(1)};
    }
    if (r == 1) {
      Tensor out = F::remote_recv(0) * in[0];
      F::remote_send(out.tanh(), 0);
      return {out};
    }
    return {};
  };
  try {
    EXPECT_TRUE(dist::gradcheck(fn, inputs));
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
}

// Megatron's mappings, under the replicated-loss convention: replicated inputs are one variable, replicated
// outputs count once.
TEST(DistGradcheck, CopyToAndReduceFromRegion) {
  check_on_groups(
      [](const dist::Group&) {
        return tensor_list{replicated({2, 3}), input({3, 2}).t()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{tp::copy_to_region(in[0], g).tanh(), tp::reduce_from_region(in[1], g).sigmoid()};
      },
      {.inputs = {0}, .outputs = {1}});
}

TEST(DistGradcheck, ScatterToAndGatherFromRegion) {
  check_on_groups(
      [](const dist::Group& g) {
        return tensor_list{replicated({2, 3 * size(g)}), input({3, 2}).t()};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{tp::scatter_to_region(in[0], g).tanh(), tp::gather_from_region(in[1], g).sigmoid()};
      },
      {.inputs = {0}, .outputs = {1}});
}

TEST(DistGradcheck, SequenceRegionsAlongEitherAxis) {
  for (int64_t axis : {0, 1}) {
    SCOPED_TRACE(axis);
    check_on_groups(
        [axis](const dist::Group& g) {
          const int n = size(g);
          const DimVector whole = axis == 0 ? DimVector{2 * n, 3} : DimVector{3, 2 * n};
          const DimVector part = axis == 0 ? DimVector{2, 3} : DimVector{3, 2};
          return tensor_list{replicated(whole), input(part), input({whole[1], whole[0]}, 1).t(), input(part, 2)};
        },
        [axis](const tensor_list& in, const dist::Group& g) {
          // in[0].tanh(): a part of a tensor with history must keep the mapping's backward, not become its view.
          return tensor_list{tp::scatter_to_sequence_region(in[0].tanh(), g, axis).tanh(),
                             tp::gather_from_sequence_region(in[1], g, axis).sigmoid(),
                             tp::reduce_scatter_to_sequence_region(in[2], g, axis),
                             tp::gather_from_sequence_region(in[3], g, axis, false).exp()};
        },
        {.inputs = {0}, .outputs = {3}});
  }
}

// The middle axis of a 3-D tensor, named from the end.
TEST(DistGradcheck, RegionsAlongANegativeMiddleAxis) {
  check_on_groups(
      [](const dist::Group& g) {
        return tensor_list{replicated({2, 2 * size(g), 3}), input({2, 2, 3}), input({2, 2 * size(g), 3}, 1)};
      },
      [](const tensor_list& in, const dist::Group& g) {
        return tensor_list{tp::scatter_to_sequence_region(in[0] * 2.0, g, -2),
                           tp::gather_from_sequence_region(in[1], g, -2),
                           tp::reduce_scatter_to_sequence_region(in[2], g, -2).tanh()};
      },
      {.inputs = {0}});
}

// Megatron's MLP: a column-parallel linear layer, then a row-parallel one; one all-reduce each way.
TEST(DistGradcheck, ColumnThenRowParallelMlp) {
  check_on_groups(
      [](const dist::Group&) {
        return tensor_list{replicated({3, 4}), input({2, 4}, 1), input({4, 2}, 2), replicated({4}, 3)};
      },
      [](const tensor_list& in, const dist::Group& g) {
        const Tensor h = tp::copy_to_region(in[0], g).matmul(in[1].t()).tanh();
        return tensor_list{tp::reduce_from_region(h.matmul(in[2].t()), g) + in[3]};
      },
      {.inputs = {0, 3}, .outputs = {0}});
}

// The two conventions differ: an all-reduce's gradient under one is wrong under the other, and gradcheck says so.
TEST(DistGradcheck, TellsTheConventionsApart) {
  if (dist::get_world_size() < 2) GTEST_SKIP() << "with one rank both conventions agree";
  autograd::GradcheckOptions quiet;
  quiet.raise_exception = false;
  auto megengine = [](const tensor_list& in) { return tensor_list{F::all_reduce_sum(in[0])}; };
  auto megatron = [](const tensor_list& in) { return tensor_list{tp::reduce_from_region(in[0])}; };
  EXPECT_TRUE(dist::gradcheck(megengine, {input({2})}));
  EXPECT_FALSE(dist::gradcheck(megengine, {input({2})}, quiet, {}, {.outputs = {0}}));
  EXPECT_TRUE(dist::gradcheck(megatron, {input({2})}, {}, {}, {.outputs = {0}}));
  EXPECT_FALSE(dist::gradcheck(megatron, {input({2})}, quiet));
}

TEST(DistGradcheck, ReplicatedMeansTheSameOnEveryRank) {
  if (dist::get_world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto squash = [](const tensor_list& in) { return tensor_list{in[0].sigmoid()}; };
  EXPECT_THROW_MSG(dist::gradcheck(squash, {input({2})}, {}, {}, {.inputs = {0}}),
                   "distributed::gradcheck: replicated input 0 is undefined or differs between the ranks of WORLD");
  EXPECT_THROW_MSG(dist::gradcheck(squash, {input({2})}, {}, {}, {.outputs = {0}}),
                   "distributed::gradcheck: replicated output 0 is undefined or differs between the ranks of WORLD");
  EXPECT_THROW_MSG(dist::gradcheck(squash, {replicated({2})}, {}, {}, {.outputs = {1}}),
                   "distributed::gradcheck: on rank 0, replicated output 1 is not an output (1 returned)");
  const size_t which = dist::get_rank() == 0 ? 0 : 1;
  EXPECT_THROW_MSG(dist::gradcheck(squash, {replicated({2})}, {}, {}, {.outputs = {which}}),
                   "distributed::gradcheck: the ranks of WORLD name different replicated inputs or outputs");
  EXPECT_THROW_MSG(dist::gradcheck(squash, {input({2})}, {}, {}, {.inputs = {1}}),
                   "distributed::gradcheck: on rank 0, replicated input 1 is not an input (1 given)");
  Tensor x = replicated({2});
  if (dist::get_rank() == 0) x = x.detach();
  EXPECT_THROW_MSG(dist::gradcheck(squash, {x}, {}, {}, {.inputs = {0}}),
                   "distributed::gradcheck: the replicated inputs require grad on some ranks of WORLD only");
}

// The backward of each mapping is the swapped mapping, recorded under create_graph: with c_r = r + 1 on rank r,
// L = sum_r c_r x^2, so dL/dx = 2 C x and d(sum dL/dx)/dx = 2 C, C = n (n + 1) / 2.
TEST(TensorParallel, DoubleBackward) {
  const int n = dist::get_world_size();
  Tensor x = replicated({3});
  const double c = dist::get_rank() + 1, whole = n * (n + 1) / 2.0;
  const Tensor loss = tp::reduce_from_region(tp::copy_to_region(x).pow(2) * c).sum();
  const Tensor gx = autograd::grad({loss}, {x}, {}, true, true)[0];
  EXPECT_TRUE(strata::testing::allclose(gx, 2 * whole * x.detach()));
  gx.sum().backward();
  EXPECT_TRUE(strata::testing::allclose(x.grad(), full({3}, 2 * whole, kDouble)));
}

TEST(TensorParallel, BadInputNamesTheMappingAndTheShapes) {
  const int n = dist::get_world_size();
  EXPECT_THROW_MSG(tp::copy_to_region(Tensor()), "tensor_parallel::copy_to_region: got an undefined tensor");
  EXPECT_EQ(tp::reduce_from_region(full({}, 2.0)).item<double>(), 2.0 * n);  // no axis: a 0-dim tensor is fine
  EXPECT_THROW_MSG(tp::scatter_to_region(ones({})),
                   "tensor_parallel::scatter_to_region: needs a tensor with at least one dimension");
  EXPECT_THROW_MSG(tp::gather_from_sequence_region(ones({2, 3}), {}, 2),
                   "tensor_parallel::gather_from_sequence_region: dimension out of range (expected to be in range of "
                   "[-2, 1], but got 2)");
  if (n == 1) return;
  EXPECT_THROW_MSG(tp::scatter_to_region(ones({2, n + 1})),
                   "tensor_parallel::scatter_to_region: size " + std::to_string(n + 1) +
                       " of dimension 1 of a tensor of shape [2, " + std::to_string(n + 1) +
                       "] is not divisible by the tensor-parallel size " + std::to_string(n));
  EXPECT_THROW_MSG(tp::reduce_scatter_to_sequence_region(ones({n + 1, 2})),
                   "is not divisible by the tensor-parallel size");
}

TEST(DistGradcheck, NamesTheRankWithAWrongGradient) {
  const int last = dist::get_world_size() - 1;
  // The last rank's input reaches the sum without its gradient.
  auto fn = [last](const tensor_list& in) {
    return tensor_list{F::all_reduce_sum(dist::get_rank() == last ? in[0].detach() : in[0])};
  };
  Tensor x = input({2});
  EXPECT_THROW_MSG(dist::gradcheck(fn, {x}), "distributed::gradcheck: on rank " + std::to_string(last) +
                                                 ", gradient mismatch for input 0 at element [0]: analytical 0 vs "
                                                 "numerical");
  autograd::GradcheckOptions quiet;
  quiet.raise_exception = false;
  EXPECT_FALSE(dist::gradcheck(fn, {x}, quiet));
  EXPECT_FALSE(x.grad().defined());  // the analytical side used its own leaves
}

TEST(DistGradcheck, BadInputsThrowOnEveryRank) {
  const int last = dist::get_world_size() - 1;
  auto fn = [](const tensor_list& in) { return tensor_list{F::all_reduce_sum(in[0])}; };
  Tensor x = dist::get_rank() == last ? ones({2}, TensorOptions(kFloat).requires_grad(true)) : input({2});
  EXPECT_THROW_MSG(dist::gradcheck(fn, {x}),
                   "distributed::gradcheck: on rank " + std::to_string(last) + ", gradcheck: input 0 has dtype");
  EXPECT_THROW_MSG(dist::gradcheck(fn, {ones({2}, kDouble)}),
                   "distributed::gradcheck: no input requires grad on any rank of WORLD");
}

TEST(DistGradcheck, ItsOwnStepsIgnoreTheProfilingSwitches) {
  // all_to_all has no switch and functional's agreements skip them, so only gradcheck's own steps (the input
  // checks, the element counts, the global sum, the verdict) could be skipped here.
  const strata::testing::CommSwitchesOff off{dist::all_reduce_comm_off, dist::all_gather_comm_off,
                                             dist::broadcast_comm_off, dist::reduce_scatter_comm_off,
                                             dist::reduce_comm_off};
  check_on_groups(
      [](const dist::Group& g) {
        return tensor_list{input({2 * size(g), 3})};
      },
      [](const tensor_list& in, const dist::Group& g) { return tensor_list{F::all_to_all(in[0], g, 0, 1)}; });
  // A wrong gradient on the last rank only is still reported by every rank.
  const int last = dist::get_world_size() - 1;
  auto fn = [last](const tensor_list& in) {
    return tensor_list{F::all_to_all(dist::get_rank() == last ? in[0].detach() : in[0])};
  };
  EXPECT_THROW_MSG(dist::gradcheck(fn, {input({dist::get_world_size()})}),
                   "distributed::gradcheck: on rank " + std::to_string(last) + ", gradient mismatch for input 0");
}

TEST(DistGradcheck, LocalGradcheckRefusesCollectives) {
  // autograd::gradcheck perturbs this rank's inputs only: a collective's gradient would be checked against
  // numbers that mean nothing, so it refuses on every rank and points to distributed::gradcheck.
  const int n = dist::get_world_size();
  Tensor x = input({2});
  const std::string message = "AllReduceSumBackward, an op that spans processes";
  EXPECT_THROW_MSG(autograd::gradcheck([](const tensor_list& in) { return F::all_reduce_sum(in[0]); }, {x}), message);
  EXPECT_THROW_MSG(autograd::gradgradcheck([](const tensor_list& in) { return F::all_reduce_sum(in[0]); }, {x}),
                   "use distributed::gradcheck");
  // Megatron's mappings record no pending node: gradcheck finds them in the outputs' graph.
  EXPECT_THROW_MSG(
      autograd::gradcheck([](const tensor_list& in) { return tp::copy_to_region(in[0]).tanh() * 2.0; }, {x}),
      "MappingBackward, an op that spans processes");
  // What the refused function recorded does not run in the next backward; what was pending before still does.
  Tensor y = F::all_reduce_sum(x);
  EXPECT_THROW_MSG(autograd::gradcheck([](const tensor_list& in) { return F::all_reduce_sum(in[0] * 2.0); }, {x}),
                   message);
  F::backward({y.sum()});
  EXPECT_VALUES(x.grad(), {double(n), double(n)});
}
