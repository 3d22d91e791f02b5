// nn::SyncBatchNorm under mpirun -np 1, 2 and 4: each rank normalises its own samples, of different
// counts, and the outputs, every gradient and the running statistics equal BatchNorm over the
// concatenated batch, which every rank computes itself (1e-12 in float64); distributed::gradcheck of
// the layer's function; eval mode; the module over a subgroup.

#include <strata/distributed/collectives.h>
#include <strata/distributed/gradcheck.h>
#include <strata/nn/sync_batch_norm.h>

#include "../helpers.h"

namespace dist = strata::distributed;
using namespace strata;

namespace {

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

/// Rank r's samples: r + 1 of them, starting at r (r + 1) / 2 in the concatenated batch.
int64_t first_sample(int r) { return static_cast<int64_t>(r) * (r + 1) / 2; }

}  // namespace

TEST(SyncBatchNorm, EqualsBatchNormOverTheConcatenatedBatch) {
  const int n = world(), r = rank();
  const int64_t total = first_sample(n), mine = r + 1, start = first_sample(r);
  manual_seed(7);  // the same data, weights and output gradient on every rank
  Tensor batch = randn({total, 3, 4, 2}, kFloat64) * 1.5 + 0.5;
  Tensor out_grad = randn({total, 3, 4, 2}, kFloat64);
  nn::BatchNorm2d reference(nn::BatchNormOptions(3).momentum(0.3));
  nn::SyncBatchNorm sync(nn::BatchNormOptions(3).momentum(0.3));
  reference->to(kFloat64);
  sync->to(kFloat64);
  {
    NoGradGuard no_grad;
    Tensor w = randn({3}, kFloat64), b = randn({3}, kFloat64);
    reference->weight.copy_(w);
    sync->weight.copy_(w);
    reference->bias.copy_(b);
    sync->bias.copy_(b);
  }
  for (int step = 0; step < 2; ++step) {
    Tensor full_input = (batch + step).requires_grad_(true);
    Tensor full_out = reference(full_input);
    (full_out * out_grad).sum().backward();

    Tensor local = (batch + step).narrow(0, start, mine).detach().requires_grad_(true);
    Tensor out = sync(local);
    (out * out_grad.narrow(0, start, mine)).sum().backward();

    EXPECT_ALLCLOSE(out, full_out.narrow(0, start, mine), 1e-12, 1e-12);
    EXPECT_ALLCLOSE(local.grad(), full_input.grad().narrow(0, start, mine), 1e-12, 1e-12);
    // Each rank holds its samples' share of the parameter gradients; their sum is the whole batch's.
    for (Tensor* p : {&sync->weight, &sync->bias}) {
      Tensor summed = p->grad().clone();
      dist::all_reduce(summed);
      EXPECT_ALLCLOSE(summed, p == &sync->weight ? reference->weight.grad() : reference->bias.grad(), 1e-12, 1e-12);
    }
    EXPECT_ALLCLOSE(sync->running_mean, reference->running_mean, 1e-12, 1e-12);
    EXPECT_ALLCLOSE(sync->running_var, reference->running_var, 1e-12, 1e-12);
    EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), step + 1);
    sync->zero_grad();
    reference->zero_grad();
  }
  // Eval mode uses the running statistics and needs no other rank.
  sync->eval();
  reference->eval();
  Tensor local = batch.narrow(0, start, mine);
  EXPECT_ALLCLOSE(sync(local), reference(local), 1e-14, 1e-14);
}

TEST(SyncBatchNorm, PassesDistributedGradcheck) {
  const int r = rank();
  manual_seed(11 + r);
  Tensor x = randn({r + 2, 2, 3}, kFloat64).requires_grad_(true);
  manual_seed(5);  // the layer's parameters agree across ranks
  nn::SyncBatchNorm bn(nn::BatchNormOptions(2).track_running_stats(false));
  bn->to(kFloat64);
  Tensor w = bn->weight, b = bn->bias;
  {
    NoGradGuard no_grad;
    w.copy_(randn({2}, kFloat64));
  }
  EXPECT_TRUE(dist::gradcheck([&](const tensor_list& in) { return tensor_list{bn(in[0])}; }, {x}));
}

TEST(SyncBatchNorm, UsesItsGroupOnly) {
  const int n = world(), r = rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  // Ranks {0, 1} share statistics; the others normalise alone (a group of one each). Every rank makes
  // every group, in the same order.
  auto pair = dist::new_group({0, 1});
  std::vector<dist::Group> alone;
  for (int q = 0; q < n; ++q) alone.push_back(dist::new_group({q}));
  manual_seed(3);
  Tensor batch = randn({4, 2, 3}, kFloat64);
  nn::SyncBatchNorm bn(nn::BatchNormOptions(2).affine(false), r < 2 ? pair : alone[static_cast<size_t>(r)]);
  bn->to(kFloat64);
  Tensor out = bn(batch.narrow(0, 2 * (r % 2), 2));
  Tensor expected = r < 2 ? batch_norm(batch, {}, {}, {}, {}, true).narrow(0, 2 * r, 2)
                          : batch_norm(batch.narrow(0, 2 * (r % 2), 2), {}, {}, {}, {}, true);
  EXPECT_ALLCLOSE(out, expected, 1e-12, 1e-12);
}
