// PipelineParallelGrid and stage-to-stage P2P under mpirun -np 1, 2 and 4: every pipe x data (x model)
// split of the world, its groups proven by all_reduce within them, and transfers between stages.
// Every rank builds the same grids in the same order, so group creation never diverges.

#include <strata/distributed/collectives.h>
#include <strata/pipe/p2p.h>
#include <strata/pipe/topology.h>

#include <numeric>

#include "../helpers.h"

namespace strata::pipe {
namespace {

namespace dist = strata::distributed;

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

// The divisors of the world size: each is a possible number of stages.
std::vector<int> divisors() {
  std::vector<int> d;
  for (int n = 1; n <= world(); ++n)
    if (world() % n == 0) d.push_back(n);
  return d;
}

// Checks that `group` holds exactly `ranks`, in order, and that an all_reduce in it sums their global ranks.
void expect_group(const dist::Group& group, const std::vector<int>& ranks, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(group && group->is_member());
  EXPECT_EQ(group->ranks(), ranks);
  EXPECT_EQ(dist::get_world_size(group), static_cast<int>(ranks.size()));
  Tensor t = full({1}, rank(), kLong);
  dist::all_reduce(t, dist::ReduceOp::SUM, group);
  EXPECT_EQ(t.item<int64_t>(), std::accumulate(ranks.begin(), ranks.end(), int64_t{0}));
}

// Checks a grid of pp stages x dp replicas x mp model ranks, laid out as rank = (stage * dp + d) * mp + m.
void expect_grid(const PipelineParallelGrid& grid, int pp, int dp, int mp) {
  SCOPED_TRACE("pp " + std::to_string(pp) + " dp " + std::to_string(dp) + " mp " + std::to_string(mp));
  const int stage = rank() / (dp * mp), d = rank() / mp % dp, m = rank() % mp;
  auto global = [&](int s, int di, int mi) { return (s * dp + di) * mp + mi; };
  EXPECT_EQ(grid.get_global_rank(), rank());
  EXPECT_EQ(grid.get_stage_id(), stage);
  EXPECT_EQ(grid.get_data_parallel_id(), d);
  EXPECT_EQ(grid.get_pipe_parallel_world_size(), pp);
  EXPECT_EQ(grid.get_data_parallel_world_size(), dp);
  EXPECT_EQ(grid.get_model_parallel_world_size(), mp);
  EXPECT_EQ(grid.is_first_stage(), stage == 0);
  EXPECT_EQ(grid.is_last_stage(), stage == pp - 1);
  std::vector<int> pipe_ranks, data_ranks, model_ranks;
  for (int s = 0; s < pp; ++s) pipe_ranks.push_back(global(s, d, m));
  for (int di = 0; di < dp; ++di) data_ranks.push_back(global(stage, di, m));
  for (int mi = 0; mi < mp; ++mi) model_ranks.push_back(global(stage, d, mi));
  // The same order on every rank: each all_reduce runs in groups that every rank is in one of.
  expect_group(grid.get_pipe_parallel_group(), pipe_ranks, "pipe group");
  expect_group(grid.get_data_parallel_group(), data_ranks, "data group");
  expect_group(grid.get_model_parallel_group(), model_ranks, "model group");
  for (int s = 0; s < pp; ++s) EXPECT_EQ(grid.stage_to_global(s), global(s, d, m));
  EXPECT_EQ(grid.prev_stage_rank(), stage == 0 ? -1 : global(stage - 1, d, m));
  EXPECT_EQ(grid.next_stage_rank(), stage == pp - 1 ? -1 : global(stage + 1, d, m));
  EXPECT_THROW_MSG(grid.stage_to_global(pp),
                   "PipelineParallelGrid::stage_to_global: stage " + std::to_string(pp) + " is out of range");
}

// A [2, 3] float64 tensor that names its sender.
Tensor payload(int stage, int d) { return full({2, 3}, 100.0 * stage + d, kDouble); }

TEST(PipeGrid, EveryPipeDataSplit) {
  for (int pp : divisors()) {
    const int dp = world() / pp;
    expect_grid(PipelineParallelGrid(PipeDataParallelTopology(pp, dp)), pp, dp, 1);
    expect_grid(PipelineParallelGrid(pp), pp, dp, 1);
  }
}

TEST(PipeGrid, EveryPipeModelDataSplit) {
  for (int pp : divisors())
    for (int mp : divisors()) {
      if (world() % (pp * mp) != 0) continue;
      const int dp = world() / (pp * mp);
      expect_grid(PipelineParallelGrid(PipeModelDataParallelTopology(pp, mp, dp)), pp, dp, mp);
    }
}

TEST(PipeGrid, Errors) {
  // Every rank throws the same error before any group is made, so no collective is left half-called.
  const std::string w = std::to_string(world());
  EXPECT_THROW_MSG(
      PipelineParallelGrid(world() + 1),
      "PipelineParallelGrid: world size " + w + " is not divisible by " + std::to_string(world() + 1) + " stages");
  EXPECT_THROW_MSG(PipelineParallelGrid(0), "PipelineParallelGrid: expected at least 1 stage, got 0");
  EXPECT_THROW_MSG(
      PipelineParallelGrid(PipeDataParallelTopology(world(), 2)),
      "PipelineParallelGrid: the topology has " + std::to_string(2 * world()) + " ranks but the world size is " + w);
  EXPECT_THROW_MSG(PipelineParallelGrid(ProcessTopology({"pipe", "model"}, {1, world()})),
                   "PipelineParallelGrid: the topology has no 'data' axis");
}

TEST(PipeGrid, P2PForwardAndBackwardRings) {
  for (int pp : divisors()) {
    if (pp < 2) continue;
    PipelineParallelGrid grid(pp);
    P2P p2p(grid);
    const int stage = grid.get_stage_id(), d = grid.get_data_parallel_id();
    SCOPED_TRACE("pp " + std::to_string(pp));

    // Blocking, stage to stage + 1: each stage receives before it sends, a chain that cannot deadlock.
    if (!grid.is_first_stage()) {
      Tensor in = zeros({2, 3}, kDouble);
      p2p.recv(in, stage - 1);
      EXPECT_TRUE(testing::same_tensor(in, payload(stage - 1, d)));
    }
    if (!grid.is_last_stage()) p2p.send(payload(stage, d), stage + 1);

    // Async, stage to stage - 1 (the gradient direction): all posted, then one wait.
    Tensor grad_in = zeros({2, 3}, kDouble);
    const Tensor grad_out = payload(stage, d);
    if (!grid.is_last_stage()) p2p.recv(grad_in, stage + 1, /*async_op=*/true);
    if (!grid.is_first_stage()) p2p.send(grad_out, stage - 1, /*async_op=*/true);
    EXPECT_EQ(p2p.num_pending(), static_cast<size_t>(!grid.is_last_stage() + !grid.is_first_stage()));
    p2p.wait();
    EXPECT_EQ(p2p.num_pending(), 0u);
    if (!grid.is_last_stage()) {
      EXPECT_TRUE(testing::same_tensor(grad_in, payload(stage + 1, d)));
    }

    // First <-> last, both ways at once.
    if (grid.is_first_stage() || grid.is_last_stage()) {
      const int peer = grid.is_first_stage() ? pp - 1 : 0;
      Tensor in = zeros({2, 3}, kDouble);
      p2p.send(payload(stage, d), peer, true);
      p2p.recv(in, peer, true);
      p2p.wait();
      EXPECT_TRUE(testing::same_tensor(in, payload(peer, d)));
    }
  }
}

TEST(PipeGrid, P2PErrors) {
  // Every check fails before any communication, so ranks cannot diverge here.
  PipelineParallelGrid grid(world());
  P2P p2p(grid);
  const int stage = grid.get_stage_id(), stages = world();
  const std::string s = std::to_string(stage), n = std::to_string(stages);
  Tensor t = zeros({2}, kFloat);
  EXPECT_THROW_MSG(p2p.send(t, stage), "P2P::send: stage " + s + " cannot talk to itself");
  EXPECT_THROW_MSG(p2p.recv(t, stages, true), "P2P::recv: stage " + n + " is out of range for " + n + " stages");
  EXPECT_THROW_MSG(p2p.recv(t, -1), "P2P::recv: stage -1 is out of range for " + n + " stages");
  EXPECT_EQ(p2p.num_pending(), 0u);
  if (stages >= 4) {
    // Two stages on (mod the number of stages) is neither adjacent nor the first and the last together.
    const int peer = (stage + 2) % stages;
    EXPECT_THROW_MSG(p2p.send(t, peer),
                     "P2P::send: stage " + s +
                         " may only talk to adjacent stages or between the first and the last stage, "
                         "not to stage " +
                         std::to_string(peer) + " (" + n + " stages)");
    EXPECT_THROW_MSG(p2p.recv(t, peer, true), "P2P::recv: stage " + s + " may only talk");
  }
}

}  // namespace
}  // namespace strata::pipe
