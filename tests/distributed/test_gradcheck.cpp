// distributed::gradcheck of every differentiable collective under mpirun -np 1, 2 and 4, on WORLD
// and (with 4 ranks) on the permuted subgroup {2, 0, 3}: non-zero roots, axes other than 0 and
// non-contiguous inputs; then gradcheck's own reports of wrong gradients and bad inputs, and its
// own communication under the profiling switches.

#include <strata/distributed/collectives.h>
#include <strata/distributed/functional.h>
#include <strata/distributed/gradcheck.h>

#include "../helpers.h"
#include "switches.h"

namespace dist = strata::distributed;
namespace F = strata::distributed::functional;
using namespace strata;

namespace {

/// A float64 leaf that differs on every rank (max and min must have no ties across ranks).
Tensor input(IntArrayRef sizes, int salt = 0) {
  Generator gen(1000 * (dist::get_rank() + 1) + salt);
  return randn(sizes, kDouble, &gen).requires_grad_(true);
}

/// Checks fn on every group of the test this rank belongs to: WORLD and, with 4 ranks, {2, 0, 3} (rank 1 is
/// outside it). inputs(group) gives this rank's inputs; fn(in, group) the outputs.
void check_on_groups(const std::function<tensor_list(const dist::Group&)>& inputs,
                     const std::function<tensor_list(const tensor_list&, const dist::Group&)>& fn) {
  std::vector<dist::Group> groups{dist::get_world_group()};
  if (dist::get_world_size() >= 4) groups.push_back(dist::new_group({2, 0, 3}));
  for (const dist::Group& g : groups) {
    if (!g->is_member()) continue;
    SCOPED_TRACE(g->describe());
    try {
      EXPECT_TRUE(dist::gradcheck([&](const tensor_list& in) { return fn(in, g); }, inputs(g), {}, g));
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
  // What the refused function recorded does not run in the next backward; what was pending before still does.
  Tensor y = F::all_reduce_sum(x);
  EXPECT_THROW_MSG(autograd::gradcheck([](const tensor_list& in) { return F::all_reduce_sum(in[0] * 2.0); }, {x}),
                   message);
  F::backward({y.sum()});
  EXPECT_VALUES(x.grad(), {double(n), double(n)});
}
