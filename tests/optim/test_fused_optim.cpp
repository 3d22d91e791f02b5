// The fused and foreach optimizer steps against the per-parameter path: bit for bit over several steps and
// parameters of every size class, with momentum, Nesterov, weight decay, amsgrad and parameter groups; the
// dispatch log's path; the state dict they leave; non-contiguous parameters; the errors.

#include <functional>
#include <vector>

#include "strata/optim/adam.h"
#include "strata/optim/sgd.h"
#include "strata/tensor/dispatch_log.h"
#include "../helpers.h"

namespace strata::optim {
namespace {

using strata::testing::same_tensor;

/// Parameters of sizes 0, 1, 7 x 5 and 40000 elements (several of the kernel's chunks), standard normal.
std::vector<Tensor> make_params(ScalarType dtype) {
  Generator gen(3);
  std::vector<Tensor> params;
  for (const std::vector<int64_t>& sizes : std::vector<std::vector<int64_t>>{{0}, {1}, {7, 5}, {200, 200}})
    params.push_back(randn(sizes, dtype, &gen).requires_grad_(true));
  return params;
}

/// Runs `steps` steps of the optimizer make(params) builds over fresh copies of make_params(dtype), with the same
/// gradients on both runs (parameter 1 gets none at step 2, so its step count falls behind); returns the
/// parameters and the state dict.
std::pair<std::vector<Tensor>, StateDict> run(
    const std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>& make, ScalarType dtype, int steps = 4) {
  std::vector<Tensor> params = make_params(dtype);
  std::unique_ptr<Optimizer> opt = make(params);
  Generator gen(9);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() = s == 2 && i == 1 ? Tensor() : randn(params[i].sizes(), dtype, &gen);
    opt->step();
  }
  return {params, opt->state_dict()};
}

/// The fused, foreach and per-parameter runs of `options` agree, parameters and state: bit for bit when `exact`,
/// else within a few float32 roundings (normalized error 1e-6).
template <class Opt, class Options>
void expect_fused_is_per_parameter(const Options& options, ScalarType dtype, bool exact = true) {
  auto make = [&](const Options& o) {
    return [o](std::vector<Tensor> params) -> std::unique_ptr<Optimizer> { return std::make_unique<Opt>(params, o); };
  };
  const auto per_parameter = run(make(options), dtype);
  for (const Options& fast : {Options(options).fused(true), Options(options).foreach(true)}) {
    const auto fused = run(make(fast), dtype);
    for (size_t i = 0; i < fused.first.size(); ++i) {
      if (exact) {
        EXPECT_TRUE(same_tensor(fused.first[i], per_parameter.first[i])) << "parameter " << i;
      } else {
        EXPECT_LT(testing::normalized_error(fused.first[i], per_parameter.first[i]), 1e-6) << "parameter " << i;
      }
    }
    if (exact) {
      EXPECT_TRUE(testing::same_state(fused.second, per_parameter.second));
    }
  }
}

TEST(FusedOptim, SgdIsThePerParameterUpdateBitForBit) {
  for (ScalarType dtype : {kDouble, kFloat}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    expect_fused_is_per_parameter<SGD>(SGDOptions(0.1), dtype);
    expect_fused_is_per_parameter<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01), dtype);
    expect_fused_is_per_parameter<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.1), dtype);
  }
}

// In float32 the per-parameter path's square root is Eigen's vectorised one, which is not always correctly
// rounded; the fused kernel's is. So float32 agrees to a few roundings, float64 bit for bit.
TEST(FusedOptim, AdamAndAdamWAreThePerParameterUpdateBitForBitInFloat64) {
  for (ScalarType dtype : {kDouble, kFloat}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    const bool exact = dtype == kDouble;
    expect_fused_is_per_parameter<Adam>(AdamOptions(1e-2), dtype, exact);
    expect_fused_is_per_parameter<Adam>(AdamOptions(1e-2).weight_decay(0.1).amsgrad(true), dtype, exact);
    expect_fused_is_per_parameter<AdamW>(AdamWOptions(3e-3).betas({0.8, 0.95}).eps(1e-6), dtype, exact);
    expect_fused_is_per_parameter<AdamW>(AdamWOptions(3e-3).amsgrad(true), dtype, exact);
  }
}

TEST(FusedOptim, GroupsWithTheirOwnOptionsAndTheDispatchLog) {
  std::vector<Tensor> a = make_params(kDouble), b = make_params(kDouble);
  for (Tensor& p : a) p.mutable_grad() = ones_like(p);
  for (Tensor& p : b) p.mutable_grad() = ones_like(p);
  AdamW fused({OptimizerParamGroup({a[2], a[3]}), OptimizerParamGroup({a[1]}, AdamWOptions(1e-2).weight_decay(0))},
              AdamWOptions(1e-2).fused(true));
  AdamW plain({OptimizerParamGroup({b[2], b[3]}), OptimizerParamGroup({b[1]}, AdamWOptions(1e-2).weight_decay(0))},
              AdamWOptions(1e-2));
  fused.step();
  plain.step();
  // The second group's own options have no fused: only the first group took the fused path.
  EXPECT_EQ(last_dispatch("AdamW.step"), "fused cpu kernel (Double)");
  for (size_t i = 1; i < 4; ++i) EXPECT_TRUE(same_tensor(a[i], b[i])) << "parameter " << i;
}

TEST(FusedOptim, NonContiguousParameterTakesThePerParameterPath) {
  Tensor base = randn({6, 4}, kDouble), twin = base.clone();
  Tensor p = base.t().requires_grad_(true), q = twin.t().requires_grad_(true);  // [4, 6], strides (1, 4)
  p.mutable_grad() = ones({4, 6}, kDouble);
  q.mutable_grad() = ones({4, 6}, kDouble);
  SGD fused({p}, SGDOptions(0.1).momentum(0.9).fused(true));
  SGD plain({q}, SGDOptions(0.1).momentum(0.9));
  fused.step();
  EXPECT_EQ(last_dispatch("SGD.step"), "per-parameter: a parameter or its gradient is not contiguous");
  plain.step();
  EXPECT_TRUE(same_tensor(p, q));
}

TEST(FusedOptim, StepBumpsTheVersionsItWrites) {
  Tensor p = randn({3}, kDouble).requires_grad_(true);
  p.mutable_grad() = ones({3}, kDouble);
  Adam opt({p}, AdamOptions(0.1).fused(true));
  const uint32_t before = p._version();
  opt.step();
  EXPECT_EQ(last_dispatch("Adam.step"), "fused cpu kernel (Double)");
  EXPECT_GT(p._version(), before);
}

TEST(FusedOptim, FusedAndForeachTogetherIsAnError) {
  Tensor p = randn({3}, kDouble).requires_grad_(true);
  EXPECT_THROW_MSG(SGD({p}, SGDOptions(0.1).fused(true).foreach(true)), "fused and foreach cannot both be true");
  EXPECT_THROW_MSG(Adam({p}, AdamOptions(0.1).fused(true).foreach(true)), "fused and foreach cannot both be true");
}

}  // namespace
}  // namespace strata::optim
