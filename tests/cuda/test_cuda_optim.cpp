// The fused optimizer steps on CUDA (tensor/cuda/optim.cu): SGD, Adam and AdamW with fused or foreach against
// the per-parameter path on the GPU, bit for bit in float64 and float32 and within 16-bit rounding in float16 and
// bfloat16; against the fused CPU step; the kernel table's checks. Every test skips without a GPU.

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include <strata/tensor/cuda.h>
#include <strata/tensor/dispatch_log.h>
#include <strata/tensor/kernels.h>

#include "parity.h"

namespace strata {
namespace {

using testing::gpu;
using testing::normalized_error;
using testing::same_tensor;

constexpr int kSteps = 3;

/// Parameter sizes: empty ones, one element, exactly one of optim.cu's 4096-element chunks, two chunks and a bit,
/// and 100003 elements (24 chunks and a partial one).
const std::vector<std::vector<int64_t>> kSizes = {{0}, {1}, {7, 5}, {4096}, {0}, {3, 1366}, {100003}};

/// Makes an optimizer over the parameters.
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

template <class Opt, class Options>
MakeOptimizer maker(const Options& options) {
  return [options](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<Opt>(std::move(params), options);
  };
}

/// What a run leaves: the parameters before and after, and the optimizer's state dict.
struct Outcome {
  std::vector<Tensor> initial;
  std::vector<Tensor> params;
  optim::StateDict state;
};

/// kSteps steps of make's optimizer in dtype on device, from the same standard-normal parameters and the same
/// gradients on every run (drawn in float64 on the CPU, then converted). Parameter 2 has no gradient at step 0, so
/// at step 1 it takes its first step (a fresh momentum buffer, step 1's bias corrections) in the same call as the
/// others' second. `bounded` draws gradients of magnitude in [0.5, 2) (see SixteenBitFloats...).
Outcome run(const MakeOptimizer& make, ScalarType dtype, Device device, bool bounded = false) {
  Generator gen(5);
  Outcome r;
  for (const std::vector<int64_t>& sizes : kSizes) {
    r.params.push_back(randn(sizes, kDouble, &gen).to(device, dtype).requires_grad_(true));
    r.initial.push_back(r.params.back().detach().to(Device(kCPU), /*non_blocking=*/false, /*copy=*/true));
  }
  std::unique_ptr<optim::Optimizer> opt = make(r.params);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < r.params.size(); ++i) {
      Tensor g = randn(r.params[i].sizes(), kDouble, &gen);
      if (bounded) {
        const Tensor x = rand(r.params[i].sizes(), kDouble, &gen) * 3 - 1.5;
        g = x + (x.ge(0).to(kDouble) - 0.5);  // in (-2, -0.5] and [0.5, 2)
      }
      r.params[i].mutable_grad() = step == 0 && i == 2 ? Tensor() : g.to(device, dtype);
    }
    opt->step();
  }
  r.state = opt->state_dict();
  return r;
}

/// The state dict's tensors copied to the CPU.
optim::StateDict on_host(const optim::StateDict& state) {
  optim::StateDict out;
  for (const auto& [name, t] : state) out.emplace(name, t.cpu());
  return out;
}

/// a's parameters and state against b's, bit for bit.
::testing::AssertionResult same_run(const Outcome& a, const Outcome& b) {
  for (size_t i = 0; i < a.params.size(); ++i)
    if (auto same = same_tensor(a.params[i].cpu(), b.params[i].cpu()); !same) return same << " for parameter " << i;
  return testing::same_state(on_host(a.state), on_host(b.state));
}

/// The fused and foreach runs of `options` on the GPU against its per-parameter run, bit for bit, in float64 and
/// float32; `step` names the optimizer in the dispatch log.
template <class Opt, class Options>
void expect_fused_is_per_parameter(const Options& options, const char* step) {
  for (ScalarType dtype : {kDouble, kFloat}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    const Outcome plain = run(maker<Opt>(options), dtype, gpu());
    for (const Options& fast : {Options(options).fused(true), Options(options).foreach(true)}) {
      const Outcome fused = run(maker<Opt>(fast), dtype, gpu());
      EXPECT_EQ(last_dispatch(step), str("fused cuda kernel (", dtype, ")"));
      EXPECT_TRUE(same_run(fused, plain));
    }
  }
}

TEST(CudaFusedOptim, SgdIsThePerParameterStepBitForBit) {
  STRATA_REQUIRE_CUDA();
  using optim::SGD, optim::SGDOptions;
  expect_fused_is_per_parameter<SGD>(SGDOptions(0.1), "SGD.step");
  expect_fused_is_per_parameter<SGD>(SGDOptions(0.1).weight_decay(0.01), "SGD.step");
  expect_fused_is_per_parameter<SGD>(SGDOptions(0.1).momentum(0.9), "SGD.step");
  expect_fused_is_per_parameter<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0.01), "SGD.step");
  expect_fused_is_per_parameter<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.1), "SGD.step");
}

TEST(CudaFusedOptim, AdamAndAdamWAreThePerParameterStepBitForBit) {
  STRATA_REQUIRE_CUDA();
  using optim::Adam, optim::AdamOptions, optim::AdamW, optim::AdamWOptions;
  expect_fused_is_per_parameter<Adam>(AdamOptions(1e-2), "Adam.step");
  expect_fused_is_per_parameter<Adam>(AdamOptions(1e-2).amsgrad(true), "Adam.step");
  expect_fused_is_per_parameter<Adam>(AdamOptions(1e-2).weight_decay(0.1).amsgrad(true), "Adam.step");
  expect_fused_is_per_parameter<AdamW>(AdamWOptions(3e-3), "AdamW.step");
  expect_fused_is_per_parameter<AdamW>(AdamWOptions(3e-3).betas({0.8, 0.95}).eps(1e-6).amsgrad(true), "AdamW.step");
}

/// ||(a - a0) - (b - b0)|| / ||b - b0|| over every parameter, a0 = b0 the initial values: how far apart the two
/// runs' displacements are, relative to the displacement.
double displacement_error(const Outcome& a, const Outcome& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.params.size(); ++i) {
    const std::vector<double> pa = testing::values(a.params[i]), pb = testing::values(b.params[i]);
    const std::vector<double> p0 = testing::values(b.initial[i]);
    for (size_t e = 0; e < pa.size(); ++e) {
      diff += (pa[e] - pb[e]) * (pa[e] - pb[e]);
      norm += (pb[e] - p0[e]) * (pb[e] - p0[e]);
    }
  }
  return std::sqrt(diff / norm);  // NaN anywhere gives NaN, which fails every bound
}

// The 16-bit floats: the fused step computes in float32 and rounds what it stores; the per-parameter path rounds
// every intermediate too, and its Scalar operands (beta1, beta2, eps, sqrt(bias_correction2), momentum,
// 1 - lr * wd) to the 16-bit type (beta2 = 0.999 and 1 - lr * wd = 0.999 are 1 in bfloat16, eps = 1e-8 is 0
// in float16). So each update differs by some units of 2^-8 (bfloat16) or 2^-11 (float16) of itself, and each
// step, rounding p from slightly different values, may leave the two a unit in p's last place apart (up to
// 2^-7 |p| and 2^-10 |p|). With lr = 0.1 a step moves p by about 0.1 (Adam's |m / sqrt(v)| is at most about 1 in
// these first steps; SGD's momentum makes it larger), many such units, so the two runs' displacements p - p0 are
// compared: their normalized error comes to a few percent in bfloat16 and under one percent in float16, and the
// bounds are 0.1 and 0.025, where a missing, doubled or wrongly corrected update gives 0.5 or more.
// The gradients are at least 0.5 in magnitude: in float16 the per-parameter path's (1 - beta2) * g * g
// underflows to 0 for |g| below about 0.008, and with eps 0 its update is then infinite.
TEST(CudaFusedOptim, SixteenBitFloatsAgreeWithThePerParameterStepWithinTheirRounding) {
  STRATA_REQUIRE_CUDA();
  using optim::Adam, optim::AdamOptions, optim::AdamW, optim::AdamWOptions, optim::SGD, optim::SGDOptions;
  const std::vector<std::pair<MakeOptimizer, MakeOptimizer>> cases = {
      {maker<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01)),
       maker<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01).fused(true))},
      {maker<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1)),
       maker<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1).foreach(true))},
      {maker<Adam>(AdamOptions(0.1).weight_decay(0.01).amsgrad(true)),
       maker<Adam>(AdamOptions(0.1).weight_decay(0.01).amsgrad(true).fused(true))},
      {maker<AdamW>(AdamWOptions(0.1)), maker<AdamW>(AdamWOptions(0.1).fused(true))},
  };
  for (ScalarType dtype : {kBFloat16, kHalf}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    const double bound = dtype == kBFloat16 ? 0.1 : 0.025;
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "case " << c);
      const Outcome plain = run(cases[c].first, dtype, gpu(), /*bounded=*/true);
      const Outcome fused = run(cases[c].second, dtype, gpu(), /*bounded=*/true);
      EXPECT_LE(displacement_error(fused, plain), bound);
    }
  }
}

// The fused CPU step (tensor/cpu/optim.cpp) performs the same operations in the same order with std::fma and
// IEEE-rounded sqrt and division, as the GPU's _rn intrinsics are: float64 must agree bit for bit. float32 is
// held to the normalized error 1e-6 (float32 rounding) in case the host compiler contracts differently.
TEST(CudaFusedOptim, MatchesTheFusedCpuStep) {
  STRATA_REQUIRE_CUDA();
  using optim::Adam, optim::AdamOptions, optim::AdamW, optim::AdamWOptions, optim::SGD, optim::SGDOptions;
  const std::vector<MakeOptimizer> cases = {
      maker<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.1).fused(true)),
      maker<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1).foreach(true)),
      maker<Adam>(AdamOptions(1e-2).weight_decay(0.1).amsgrad(true).fused(true)),
      maker<AdamW>(AdamWOptions(3e-3).fused(true)),
  };
  for (ScalarType dtype : {kDouble, kFloat}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "case " << c);
      const Outcome on_cpu = run(cases[c], dtype, Device(kCPU));
      const Outcome on_gpu = run(cases[c], dtype, gpu());
      if (dtype == kDouble) {
        EXPECT_TRUE(same_run(on_gpu, on_cpu));
        continue;
      }
      for (size_t i = 0; i < on_cpu.params.size(); ++i)
        EXPECT_LE(normalized_error(on_gpu.params[i], on_cpu.params[i]), 1e-6) << "parameter " << i;
    }
  }
}

TEST(CudaFusedOptim, EmptyListsAndTheKernelsChecks) {
  STRATA_REQUIRE_CUDA();
  const Kernels& k = kernels_for(gpu());
  const TensorOptions gpu_float = TensorOptions(kFloat).device(gpu());
  // Nothing to launch: an empty list, or only empty parameters.
  k.sgd_step({}, SgdHyper{});
  k.adam_step({}, AdamHyper{});
  const Tensor e = empty({0}, gpu_float);
  k.sgd_step({SgdParam{.param = e, .grad = e, .momentum_buffer = e}}, SgdHyper{.momentum = 0.9});
  k.adam_step({AdamParam{.param = e, .grad = e, .exp_avg = e, .exp_avg_sq = e, .max_exp_avg_sq = {}}}, AdamHyper{});

  // Each call is refused before anything is launched.
  const Tensor p = ones({3}, gpu_float);
  const std::vector<SgdParam> cpu_grad = {{.param = p, .grad = ones({3}, kFloat), .momentum_buffer = {}}};
  EXPECT_THROW_MSG(k.sgd_step(cpu_grad, SgdHyper{}),
                   str("sgd_step: expected every operand on ", gpu(), ", got one on cpu"));
  const std::vector<SgdParam> no_buffer = {{.param = p, .grad = p, .momentum_buffer = {}}};
  EXPECT_THROW_MSG(k.sgd_step(no_buffer, SgdHyper{.momentum = 0.9}), "sgd_step: a parameter has no momentum_buffer");
  const std::vector<AdamParam> no_max = {
      {.param = p, .grad = p, .exp_avg = p.clone(), .exp_avg_sq = p.clone(), .max_exp_avg_sq = {}}};
  EXPECT_THROW_MSG(k.adam_step(no_max, AdamHyper{.amsgrad = true}), "adam_step: a parameter has no max_exp_avg_sq");
  const std::vector<SgdParam> wrong_size = {{.param = p, .grad = ones({4}, gpu_float), .momentum_buffer = {}}};
  EXPECT_THROW_MSG(k.sgd_step(wrong_size, SgdHyper{}),
                   "sgd_step: expected grad of dtype Float and sizes [3], got Float and [4]");
  const Tensor n = ones({3}, TensorOptions(kLong).device(gpu()));
  const std::vector<SgdParam> integral = {{.param = n, .grad = n, .momentum_buffer = {}}};
  EXPECT_THROW_MSG(k.sgd_step(integral, SgdHyper{}), "sgd_step does not support Long");
  EXPECT_TRUE(same_tensor(p.cpu(), ones({3}, kFloat)));
}

}  // namespace
}  // namespace strata
