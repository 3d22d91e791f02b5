// Batch, group and RMS normalisation (autograd/ops/nn.cpp, nn/normalization.h): values from the
// definitions, torch's running-statistics rules (momentum, unbiased running variance, the cumulative
// average without momentum, eval mode with and without tracking), gradcheck and gradgradcheck in
// float64, the modules' buffers, printing and errors.

#include <cmath>
#include <sstream>

#include "../helpers.h"

using namespace strata;
namespace F = strata::nn::functional;
using strata::testing::allclose;

TEST(BatchNorm, TrainingNormalisesEachChannelAndUpdatesTheRunningStats) {
  manual_seed(1);
  Tensor x = randn({6, 3, 4, 5}, kFloat64) * 2.0 + 1.0;
  Tensor w = randn({3}, kFloat64), b = randn({3}, kFloat64);
  Tensor running_mean = zeros({3}, kFloat64), running_var = ones({3}, kFloat64);
  Tensor y = batch_norm(x, w, b, running_mean, running_var, /*training=*/true, 0.25, 1e-5);
  for (int64_t c = 0; c < 3; ++c) {
    Tensor xc = x.select(1, c);
    const double m = xc.mean().item<double>(), v = ((xc - m) * (xc - m)).mean().item<double>();
    const double n = static_cast<double>(xc.numel());
    EXPECT_TRUE(allclose(y.select(1, c), (xc - m) / std::sqrt(v + 1e-5) * w[c].item<double>() + b[c].item<double>(),
                         1e-12, 1e-12));
    EXPECT_NEAR(running_mean[c].item<double>(), 0.25 * m, 1e-14);
    EXPECT_NEAR(running_var[c].item<double>(), 0.75 + 0.25 * v * n / (n - 1), 1e-14);  // unbiased, as torch
  }
  // Not training: the running statistics, and nothing updated.
  Tensor frozen_mean = running_mean.clone();
  Tensor z = batch_norm(x, {}, {}, running_mean, running_var, /*training=*/false);
  EXPECT_TRUE(allclose(z, (x - running_mean.reshape({1, 3, 1, 1})) / (running_var.reshape({1, 3, 1, 1}) + 1e-5).sqrt(),
                       1e-14, 1e-14));
  EXPECT_TRUE(allclose(running_mean, frozen_mean, 0, 0));
  EXPECT_THROW_MSG(batch_norm(randn({1, 3}), {}, {}, {}, {}, true), "Expected more than 1 value per channel");
  EXPECT_THROW_MSG(batch_norm(x, randn({4}, kFloat64), {}, {}, {}, true), "expected weight of shape [3]");
  EXPECT_THROW_MSG(batch_norm(x, {}, {}, {}, {}, false), "needed when not training");
}

TEST(BatchNorm, ModulesFollowTorchsRunningStatisticRules) {
  manual_seed(2);
  Tensor a = randn({4, 2, 3, 3}, kFloat64), c = randn({4, 2, 3, 3}, kFloat64) + 3.0;
  nn::BatchNorm2d bn(nn::BatchNormOptions(2).momentum(std::nullopt));  // a cumulative average
  bn->to(kFloat64);
  bn(a);
  bn(c);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  const Tensor mean_a = a.mean({0, 2, 3}), mean_c = c.mean({0, 2, 3});
  EXPECT_TRUE(allclose(bn->running_mean, (mean_a + mean_c) / 2.0, 1e-14, 1e-14));
  bn->eval();
  Tensor eval_out = bn(a);
  EXPECT_TRUE(allclose(
      eval_out, (a - bn->running_mean.reshape({1, 2, 1, 1})) / (bn->running_var.reshape({1, 2, 1, 1}) + 1e-5).sqrt(),
      1e-14, 1e-14));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);  // eval does not count
  // The buffers are state: a checkpoint carries them.
  auto names = bn->named_buffers();
  EXPECT_EQ(names.size(), 3u);
  // Without running statistics, eval mode normalises with the batch's own.
  nn::BatchNorm1d plain(nn::BatchNormOptions(2).track_running_stats(false).affine(false));
  plain->eval();
  Tensor v = randn({5, 2}, kFloat32);
  EXPECT_TRUE(allclose(plain(v), batch_norm(v, {}, {}, {}, {}, true), 0, 0));
  EXPECT_TRUE(plain->parameters().empty());
  EXPECT_THROW_MSG(bn(randn({2, 3})), "expected 4D input (got 2D input)");
  EXPECT_THROW_MSG(plain(randn({2, 2, 2, 2})), "expected 2D or 3D input (got 4D input)");
  std::ostringstream printed;
  printed << *bn << " " << *plain;
  EXPECT_EQ(printed.str(),
            "BatchNorm2d(2, eps=1e-05, momentum=None, affine=true, track_running_stats=true) "
            "BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)");
  // The functional form takes libtorch's argument order.
  Tensor rm = zeros({2}, kFloat64), rv = ones({2}, kFloat64);
  EXPECT_TRUE(allclose(F::batch_norm(a, rm, rv, F::BatchNormFuncOptions().training(true)),
                       batch_norm(a, {}, {}, {}, {}, true), 0, 0));
}

TEST(GroupNorm, GroupsInterpolateBetweenLayerAndInstanceNorm) {
  manual_seed(3);
  Tensor x = randn({2, 6, 3, 4}, kFloat64);
  // One group is layer_norm over [C, H, W]; one group per channel is instance normalisation.
  EXPECT_TRUE(allclose(group_norm(x, 1), layer_norm(x, {6, 3, 4}), 1e-12, 1e-12));
  Tensor per_channel = x.reshape({2, 6, 12});
  Tensor centered = per_channel - per_channel.mean({2}, true);
  Tensor instance = centered / ((centered * centered).mean({2}, true) + 1e-5).sqrt();
  EXPECT_TRUE(allclose(group_norm(x, 6), instance.reshape(x.sizes()), 1e-12, 1e-12));
  nn::GroupNorm gn(3, 6);
  EXPECT_EQ(gn(x.to(kFloat)).sizes(), x.sizes());
  EXPECT_THROW_MSG(group_norm(x, 4), "divisible by num_groups");
  EXPECT_THROW_MSG(nn::GroupNorm(4, 6), "num_channels must be divisible by num_groups");
  std::ostringstream printed;
  printed << *gn;
  EXPECT_EQ(printed.str(), "GroupNorm(3, 6, eps=1e-05, affine=true)");
  EXPECT_TRUE(allclose(F::group_norm(x, F::GroupNormFuncOptions(2)), group_norm(x, 2), 0, 0));
}

TEST(RMSNorm, DividesByTheRootMeanSquare) {
  manual_seed(4);
  Tensor x = randn({3, 4, 8});
  Tensor ms = (x * x).mean({2}, true);
  // Without eps, torch uses the dtype's machine epsilon.
  EXPECT_TRUE(allclose(rms_norm(x, {8}), x / (ms + 1.1920928955078125e-07).sqrt(), 1e-6, 1e-6));
  nn::RMSNorm rms(nn::RMSNormOptions({4, 8}).eps(1e-6));
  Tensor all = (x * x).mean({1, 2}, true);
  EXPECT_TRUE(allclose(rms(x), x / (all + 1e-6).sqrt(), 1e-6, 1e-6));
  EXPECT_EQ(rms->weight.sizes(), IntArrayRef({4, 8}));
  std::ostringstream printed;
  printed << *rms;
  EXPECT_EQ(printed.str(), "RMSNorm([4, 8], eps=1e-06, elementwise_affine=true)");
  EXPECT_THROW_MSG(rms_norm(x, {4}), "does not match the trailing dims");
}

TEST(Normalization, GradcheckAndGradgradcheck) {
  manual_seed(5);
  auto bn = [](const tensor_list& in) { return batch_norm(in[0], in[1], in[2], {}, {}, true, 0.1, 1e-5); };
  const Tensor running_mean = randn({3}, kFloat64), running_var = rand({3}, kFloat64) + 0.5;
  auto bn_eval = [&](const tensor_list& in) { return batch_norm(in[0], in[1], {}, running_mean, running_var, false); };
  auto gn = [](const tensor_list& in) { return group_norm(in[0], 2, in[1], in[2]); };
  auto rms = [](const tensor_list& in) { return rms_norm(in[0], {3}, in[1], 1e-6); };
  EXPECT_GRADCHECK(bn, {leaf({4, 3, 2}), leaf({3}), leaf({3})});
  EXPECT_GRADCHECK(bn_eval, {leaf({4, 3, 2}), leaf({3})});
  EXPECT_GRADCHECK(gn, {leaf({2, 4, 3}), leaf({4}), leaf({4})});
  EXPECT_GRADCHECK(rms, {leaf({2, 3}), leaf({3})});
  EXPECT_GRADGRADCHECK(bn, {leaf({3, 2, 2}), leaf({2}), leaf({2})});
  // Without the affine parameters, and over the spatial dims of a 4-D input.
  auto bn_plain = [](const tensor_list& in) { return batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-5); };
  auto bn_weight_only = [](const tensor_list& in) { return batch_norm(in[0], in[1], {}, {}, {}, true, 0.1, 1e-5); };
  EXPECT_GRADCHECK(bn_plain, {leaf({2, 3, 2, 3})});
  EXPECT_GRADGRADCHECK(bn_plain, {leaf({2, 2, 2, 2})});
  EXPECT_GRADGRADCHECK(bn_weight_only, {leaf({2, 2, 3, 1}), leaf({2})});
  EXPECT_GRADGRADCHECK(gn, {leaf({2, 2, 3}), leaf({2}), leaf({2})});
  EXPECT_GRADGRADCHECK(rms, {leaf({2, 3}), leaf({3})});
}
