// clip_grad_norm_ against norms worked out by hand.

#include <cmath>

#include "strata/nn/clip_grad.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::values;

// Two float64 leaves with gradients [3, -4] and [[12]].
std::vector<Tensor> params_with_grads() {
  Tensor a = zeros({2}, kDouble).requires_grad_(true), b = zeros({1, 1}, kDouble).requires_grad_(true);
  a.mutable_grad() = tensor({3.0, -4.0}, kDouble);
  b.mutable_grad() = tensor({12.0}, kDouble).reshape({1, 1});
  return {a, b};
}

TEST(NnClipGrad, TwoNormScalesEveryGradient) {
  auto params = params_with_grads();
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(params, 6.5), 13.0);  // sqrt(9 + 16 + 144)
  const double c = 6.5 / (13.0 + 1e-6);
  EXPECT_VALUES(params[0].grad(), {3 * c, -4 * c});
  EXPECT_VALUES(params[1].grad(), {12 * c});
}

TEST(NnClipGrad, BelowMaxNormLeavesGradientsAlone) {
  auto params = params_with_grads();
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(params, 13.5), 13.0);
  EXPECT_EQ(values(params[0].grad()), (std::vector<double>{3.0, -4.0}));
  EXPECT_EQ(values(params[1].grad()), (std::vector<double>{12.0}));
}

TEST(NnClipGrad, OtherNorms) {
  auto params = params_with_grads();
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(params, 6, INFINITY), 12.0);  // max |g|
  EXPECT_VALUES(params[0].grad(), {3 * 6 / (12 + 1e-6), -4 * 6 / (12 + 1e-6)});
  params = params_with_grads();
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(params, 100, 1), 19.0);  // 3 + 4 + 12
  params = params_with_grads();
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(params, 100, 3), std::cbrt(27.0 + 64.0 + 1728.0));
}

TEST(NnClipGrad, SkipsParametersWithoutGradient) {
  auto params = params_with_grads();
  Tensor bare = zeros({3}, kFloat).requires_grad_(true);
  params.push_back(bare);
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(params, 1e9), 13.0);
  EXPECT_FALSE(bare.grad().defined());
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_({bare}, 1.0), 0.0);
}

TEST(NnClipGrad, Float32GradientFromBackward) {
  Tensor w = tensor({1.0, 2.0, 2.0}).requires_grad_(true);  // float32
  (w * w).sum().backward();                                 // grad 2w = [2, 4, 4], norm 6
  EXPECT_DOUBLE_EQ(utils::clip_grad_norm_(w, 3.0), 6.0);
  EXPECT_VALUES(w.grad(), {1.0, 2.0, 2.0});
}

TEST(NnClipGrad, NonFiniteNormPropagates) {
  auto params = params_with_grads();
  params[1].mutable_grad() = tensor({NAN}, kDouble).reshape({1, 1});
  EXPECT_TRUE(std::isnan(utils::clip_grad_norm_(params, 1.0)));
  EXPECT_TRUE(std::isnan(params[0].grad()[0].item<double>()));  // torch scales by NaN too
  params = params_with_grads();
  params[1].mutable_grad() = tensor({NAN}, kDouble).reshape({1, 1});
  EXPECT_TRUE(std::isnan(utils::clip_grad_norm_(params, 1.0, INFINITY)));
}

TEST(NnClipGrad, ErrorIfNonfiniteLeavesGradientsAlone) {
  auto params = params_with_grads();
  params[1].mutable_grad() = tensor({INFINITY}, kDouble).reshape({1, 1});
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, 1.0, 2.0, true),
                   "clip_grad_norm_: the total norm of order 2 of the gradients is inf; error_if_nonfinite is set");
  EXPECT_EQ(values(params[0].grad()), (std::vector<double>{3.0, -4.0}));
}

TEST(NnClipGrad, ClipGradValueClampsEachElement) {
  auto params = params_with_grads();
  utils::clip_grad_value_(params, 3.5);
  EXPECT_EQ(values(params[0].grad()), (std::vector<double>{3.0, -3.5}));
  EXPECT_EQ(values(params[1].grad()), (std::vector<double>{3.5}));
  EXPECT_THROW_MSG(utils::clip_grad_value_(params, -1), "clip_grad_value_: clip_value must be >= 0, got -1");
}

TEST(NnClipGrad, ChecksArguments) {
  auto params = params_with_grads();
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, 1.0, 0), "clip_grad_norm_: norm_type must be positive or inf, got 0");
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, 1.0, -INFINITY), "norm_type must be positive or inf, got -inf");
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, -1.0), "clip_grad_norm_: max_norm must be >= 0, got -1");
  params.push_back(Tensor());
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, 1.0), "clip_grad_norm_: parameter 2 is undefined");
}

}  // namespace
}  // namespace strata::nn
