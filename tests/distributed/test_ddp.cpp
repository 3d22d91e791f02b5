// nn::DistributedDataParallel under mpirun -np 1, 2 and 4: data-parallel training against
// single-process training on the concatenated batch (every rank computes the reference itself),
// the bucket layout, no_sync accumulation, unused parameters, the initial broadcast, overlap of
// communication with backward, subgroups, and the errors.

#include <stdexcept>

#include <strata/autograd/engine.h>

#include "ddp_training.h"

namespace dist = strata::distributed;
using namespace strata;
using namespace strata::testing::ddp_training;

namespace {

std::vector<Tensor> grads(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad());
  return out;
}

// A module of bare parameters, for tests that compute their loss by hand.
std::shared_ptr<nn::Module> bare(const std::vector<std::pair<std::string, Tensor>>& params) {
  auto m = std::make_shared<nn::Module>("Bare");
  for (const auto& [name, t] : params) m->register_parameter(name, t);
  return m;
}

}  // namespace

TEST(DDP, MatchesSingleProcessTrainingFloat32) { expect_matches_single_process(kFloat, 1e-5); }

TEST(DDP, MatchesSingleProcessTrainingFloat64) { expect_matches_single_process(kDouble, 1e-12); }

TEST(DDP, BroadcastsRankZerosParametersAndBuffers) {
  auto m = bare({{"w", full({3}, rank(), kFloat)}});
  m->register_buffer("count", full({1}, 10 + rank(), kLong));
  nn::DistributedDataParallel ddp(m);
  EXPECT_VALUES(m->parameters()[0], {0, 0, 0});
  EXPECT_VALUES(m->buffers()[0], {10});
  EXPECT_EQ(ddp.module(), m);
}

TEST(DDP, BucketsGoInReverseRegistrationOrderUnderTheCap) {
  Mlp model = make_mlp(7, kFloat);
  using Names = std::vector<std::string>;
  nn::DistributedDataParallel small(model, {.bucket_cap_mb = kSmallCapMb});
  auto buckets = small.buckets();
  ASSERT_EQ(buckets.size(), 5u);
  EXPECT_EQ(buckets[0].parameter_names, (Names{"fc3.bias", "fc3.weight"}));  // 12 + 96 bytes
  EXPECT_EQ(buckets[1].parameter_names, (Names{"fc2.bias"}));
  EXPECT_EQ(buckets[2].parameter_names, (Names{"fc2.weight"}));  // 256 bytes: alone, over the cap
  EXPECT_EQ(buckets[3].parameter_names, (Names{"fc1.bias"}));
  EXPECT_EQ(buckets[4].parameter_names, (Names{"fc1.weight"}));
  EXPECT_EQ(buckets[0].numel, 27);
  EXPECT_EQ(buckets[0].dtype, kFloat);
  // One bucket per dtype under the default cap, numbered by their first parameter.
  model->fc2->to(kDouble);
  nn::DistributedDataParallel mixed(model);
  buckets = mixed.buckets();
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].parameter_names, (Names{"fc3.bias", "fc3.weight", "fc1.bias", "fc1.weight"}));
  EXPECT_EQ(buckets[1].parameter_names, (Names{"fc2.bias", "fc2.weight"}));
  EXPECT_EQ(buckets[1].dtype, kDouble);
  // The first bucket holds at most 1 MiB (as torch, so that communication starts early), later ones the cap.
  const int64_t n = 96 * 1024;  // float32 elements of 384 KiB: two fit in 1 MiB, three do not
  auto big = bare({{"a", zeros({n})}, {"b", zeros({n})}, {"c", zeros({n})}, {"d", zeros({n})}});
  nn::DistributedDataParallel first_small(big);
  buckets = first_small.buckets();
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].parameter_names, (Names{"d", "c"}));
  EXPECT_EQ(buckets[1].parameter_names, (Names{"b", "a"}));
}

TEST(DDP, NoSyncAccumulatesLocallyAndTheNextBackwardAveragesEverything) {
  Mlp model = make_mlp(7, kDouble), reference = make_mlp(7, kDouble), local = make_mlp(7, kDouble);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = kSmallCapMb});
  auto [x, y] = full_batch(0, kDouble, 2 * kRowsPerRank);
  const Tensor mine_x = my_rows(x), mine_y = my_rows(y);
  const Tensor x0 = mine_x.narrow(0, 0, kRowsPerRank), y0 = mine_y.narrow(0, 0, kRowsPerRank);
  const Tensor x1 = mine_x.narrow(0, kRowsPerRank, kRowsPerRank), y1 = mine_y.narrow(0, kRowsPerRank, kRowsPerRank);
  {
    auto guard = ddp.no_sync();
    { auto nested = ddp.no_sync(); }  // restores "no sync", not "sync"
    (mse_loss(model(x0), y0) * 0.5).backward();
    (mse_loss(local(x0), y0) * 0.5).backward();
    EXPECT_EQ(ddp.buckets_launched(), 0);
    EXPECT_LE(max_relative_error(grads(*model), grads(*local)), 1e-15);  // this rank's own gradients
  }
  (mse_loss(model(x1), y1) * 0.5).backward();
  EXPECT_EQ(ddp.buckets_launched(), static_cast<int64_t>(ddp.buckets().size()));
  mse_loss(reference(x), y).backward();  // one step on all 2 * world micro-batches
  EXPECT_LE(max_relative_error(grads(*model), grads(*reference)), 1e-12);
}

TEST(DDP, GradientsAccumulateAcrossSynchronizedBackwards) {
  auto m = bare({{"w", ones({3}, kDouble)}});
  const Tensor w = m->parameters()[0];
  nn::DistributedDataParallel ddp(m);
  const double mean = (world() + 1) / 2.0;  // the average of rank + 1
  (w * (rank() + 1)).sum().backward();
  EXPECT_VALUES(w.grad(), {mean, mean, mean});
  (w * (2 * (rank() + 1))).sum().backward();  // accumulates into the averaged gradient
  EXPECT_VALUES(w.grad(), {3 * mean, 3 * mean, 3 * mean});
  EXPECT_TRUE(w.grad().is_contiguous());
  m->zero_grad(/*set_to_none=*/false);  // zeroes the bucket's slice in place
  (w * (rank() + 1)).sum().backward();
  EXPECT_VALUES(w.grad(), {mean, mean, mean});
  m->zero_grad();  // undefined: the next gradient is copied into the bucket
  (w * (rank() + 1)).sum().backward();
  EXPECT_VALUES(w.grad(), {mean, mean, mean});
}

TEST(DDP, UnusedParametersCountAsZeros) {
  for (double cap : {25.0, 1e-6}) {  // one bucket, then one per parameter (the end of backward starts them)
    auto m = bare({{"used", ones({2}, kDouble)}, {"rank0_only", ones({2}, kDouble)}, {"never", ones({2}, kDouble)}});
    const auto p = m->parameters();
    nn::DistributedDataParallel ddp(m, {.bucket_cap_mb = cap});
    Tensor loss = (p[0] * (rank() + 1)).sum();
    if (rank() == 0) loss = loss + (p[1] * 3).sum();
    loss.backward();
    const double mean = (world() + 1) / 2.0, rank0_share = 3.0 / world();
    EXPECT_VALUES(p[0].grad(), {mean, mean});
    EXPECT_VALUES(p[1].grad(), {rank0_share, rank0_share});
    EXPECT_FALSE(p[2].grad().defined()) << "no rank had a gradient: it stays undefined, as in torch";
  }
}

TEST(DDP, AllReducesStartWhileBackwardRuns) {
  Mlp model = make_mlp(7, kFloat);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = kSmallCapMb});
  auto [x, y] = full_batch(0, kFloat);
  Tensor h = model->fc1(my_rows(x));
  // h's gradient comes after every parameter of fc2 and fc3 has its gradient, before fc1's.
  int64_t launched_before_fc1 = -1;
  h.register_hook([&](const Tensor&) { launched_before_fc1 = ddp.buckets_launched(); });
  mse_loss(model->fc3(tanh(model->fc2(tanh(h)))), my_rows(y)).backward();
  EXPECT_EQ(launched_before_fc1, 3);  // {fc3.bias, fc3.weight}, {fc2.bias}, {fc2.weight}
  EXPECT_EQ(ddp.buckets_launched(), 5);
}

// A zero-bubble stage splits its backward (autograd::backward_input): the parameters' post-accumulate hooks,
// and so DDP's all-reduces, fire in W, and the averaged gradients are those of one backward, bit for bit.
TEST(DDP, SplitBackwardRunsTheAllReducesInW) {
  Mlp whole = make_mlp(7, kDouble), split = make_mlp(7, kDouble);
  nn::DistributedDataParallel ddp_whole(whole, {.bucket_cap_mb = kSmallCapMb});
  nn::DistributedDataParallel ddp_split(split, {.bucket_cap_mb = kSmallCapMb});
  auto [x, y] = full_batch(0, kDouble);
  const Tensor xw = my_rows(x).clone().requires_grad_(true), xs = my_rows(x).clone().requires_grad_(true);
  mse_loss(whole(xw), my_rows(y)).backward();
  autograd::DeferredWeightGrad w = autograd::backward_input({mse_loss(split(xs), my_rows(y))}, {}, {xs});
  EXPECT_TRUE(strata::testing::same_tensor(xs.grad(), xw.grad()));
  EXPECT_EQ(ddp_split.buckets_launched(), 0);
  w.run();
  EXPECT_EQ(ddp_split.buckets_launched(), ddp_whole.buckets_launched());
  const auto a = split->parameters(), b = whole->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(strata::testing::same_tensor(a[i].grad(), b[i].grad())) << i;
}

TEST(DDP, WorksOnASubgroup) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pair = dist::new_group({1, 0});  // group rank 0, the source of the initial values, is global rank 1
  if (!pair->is_member()) return;
  auto m = bare({{"w", full({2}, rank(), kDouble)}});
  const Tensor w = m->parameters()[0];
  nn::DistributedDataParallel ddp(m, {.group = pair});
  EXPECT_VALUES(w, {1, 1});
  (w * (rank() + 1)).sum().backward();
  EXPECT_VALUES(w.grad(), {1.5, 1.5});
}

TEST(DDP, DifferentModulesThrowOnEveryRank) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto shapes = bare({{"w", zeros({rank() == 1 ? 3 : 4, 4})}});
  EXPECT_THROW_MSG(nn::DistributedDataParallel{shapes},
                   "DistributedDataParallel: the modules differ across WORLD: global rank 1 has parameter w: Float "
                   "[3, 4] requires_grad where global rank 0 has parameter w: Float [4, 4] requires_grad");
  auto buffers = bare({{"w", zeros({2})}});
  if (rank() != 1) buffers->register_buffer("steps", zeros({1}, kLong));
  EXPECT_THROW_MSG(nn::DistributedDataParallel{buffers},
                   "global rank 1 lacks buffer steps: Long [1] that global rank 0 has");
  auto frozen = bare({{"w", zeros({2})}});
  if (rank() == world() - 1) frozen->parameters()[0].requires_grad_(false);
  EXPECT_THROW_MSG(nn::DistributedDataParallel{frozen}, "global rank " + std::to_string(world() - 1) +
                                                            " has parameter w: Float [2] where global rank 0 has "
                                                            "parameter w: Float [2] requires_grad");
}

TEST(DDP, AFailedBackwardIsReportedByTheNextOne) {
  Mlp model = make_mlp(7, kDouble), reference = make_mlp(7, kDouble);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = kSmallCapMb});
  auto [x, y] = full_batch(0, kDouble);
  Tensor h = model->fc1(my_rows(x));
  h.register_hook([](const Tensor&) { throw std::runtime_error("test: backward fails after fc2"); });
  EXPECT_THROW(mse_loss(model->fc3(tanh(model->fc2(tanh(h)))), my_rows(y)).backward(), std::runtime_error);
  EXPECT_THROW_MSG(mse_loss(model(my_rows(x)), my_rows(y)).backward(),
                   "DistributedDataParallel: the previous backward stopped (threw) before its gradients were reduced");
  model->zero_grad();  // and the step done again works
  mse_loss(model(my_rows(x)), my_rows(y)).backward();
  mse_loss(reference(x), y).backward();
  EXPECT_LE(max_relative_error(grads(*model), grads(*reference)), 1e-12);
}

// Every rank changes its module alike after making the DDP; buckets {b}, {a}.
TEST(DDP, AParameterChangedAfterConstructionFailsTheBackwardAndTheNextOneAbandonsIt) {
  const std::string stopped = "DistributedDataParallel: the previous backward stopped (threw)";
  {  // b's check throws before its bucket's all_reduce is posted: the next backward has nothing to wait for
    auto m = bare({{"a", ones({2}, kDouble)}, {"b", ones({2}, kDouble)}});
    const auto p = m->parameters();
    nn::DistributedDataParallel ddp(m, {.bucket_cap_mb = 1e-6});
    m->to(kFloat);
    EXPECT_THROW_MSG((p[0] * p[1]).sum().backward(),
                     "DistributedDataParallel: parameter b is now Float [2] but was Double [2]");
    EXPECT_EQ(ddp.buckets_launched(), 0);
    EXPECT_THROW_MSG((p[0] * p[1]).sum().backward(), stopped);
  }
  {  // unused a's check throws at the end of backward, with {b}'s all_reduce in flight: the next backward waits
     // for it instead of posting another one on the same buffer
    auto m = bare({{"a", ones({2}, kDouble)}, {"b", ones({2}, kDouble)}});
    const auto p = m->parameters();
    nn::DistributedDataParallel ddp(m, {.bucket_cap_mb = 1e-6});
    {
      NoGradGuard no_grad;
      p[0].set_data(p[0].to(kFloat));
    }
    EXPECT_THROW_MSG((p[1] * 2).sum().backward(), "DistributedDataParallel: parameter a is now Float [2]");
    EXPECT_EQ(ddp.buckets_launched(), 1);
    EXPECT_THROW_MSG((p[1] * 2).sum().backward(), stopped);
  }
}

TEST(DDP, Errors) {
  EXPECT_THROW_MSG(nn::DistributedDataParallel(std::shared_ptr<nn::Module>()),
                   "DistributedDataParallel: the module is null");
  auto m = bare({{"w", ones({2}, kDouble)}});
  EXPECT_THROW_MSG(nn::DistributedDataParallel(m, {.bucket_cap_mb = 0}),
                   "DistributedDataParallel: bucket_cap_mb must be positive, got 0");
  nn::DistributedDataParallel ddp(m);
  const Tensor w = m->parameters()[0];
  EXPECT_THROW_MSG((w * w).sum().backward({}, /*retain_graph=*/true, /*create_graph=*/true),
                   "DistributedDataParallel: backward with create_graph is not supported");
  nn::DistributedDataParallel moved = std::move(ddp);
  EXPECT_THROW_MSG(ddp.buckets(), "DistributedDataParallel: used after it was moved from");
  EXPECT_EQ(moved.buckets().size(), 1u);
}

TEST(DDP, DestructionRemovesTheHooks) {
  auto m = bare({{"w", ones({2}, kDouble)}});
  const Tensor w = m->parameters()[0];
  { nn::DistributedDataParallel ddp(m); }
  (w * (rank() + 1)).sum().backward();
  EXPECT_VALUES(w.grad(), {rank() + 1.0, rank() + 1.0});  // this rank's own gradient
}
