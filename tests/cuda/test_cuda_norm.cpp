// Softmax, layer norm and cross entropy on CUDA (tensor/cuda/norm.cu, loss.cu) against the CPU table
// (tensor/cpu/norm.cpp, loss.cpp): every entry, forward and backward, in float64, float32 and the 16-bit floats, over
// rows that take a thread, a warp and a block (N = 1, 31, 100, 4096; C = 1, 5, 65, 4096), strided slices (inner > 1),
// masked entries, ignored targets, class weights, label smoothing and empty shapes; relu's backward kernel in every
// arithmetic dtype, with zeros and NaN in relu's output; and softmax, log_softmax, layer_norm, relu and cross_entropy
// through the ops, with their gradients. Every test skips without a GPU.

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <strata/tensor/cuda.h>

#include "parity.h"

namespace strata {
namespace {

using testing::cuda_matches_cpu;
using testing::gpu;
using testing::indices;
using testing::normal;
using testing::uniform;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kIgnore = -100;  ///< the ignore_index of the cross entropy tests

/// softmax's output, then softmax_backward's from it and in[1], through the table of in[0]'s device.
tensor_list softmax_kernels(const tensor_list& in, bool log) {
  const Kernels& kernels = kernels_for(in[0].device());
  const Tensor y = empty_like(in[0]), grad_in = empty_like(in[0]);
  kernels.softmax(in[0], log, y);
  kernels.softmax_backward(y, in[1], log, grad_in);
  return {y, grad_in};
}

/// layer_norm's out, mean and rstd, then layer_norm_backward's three gradients, through the table of in[0]'s
/// device; in = {x [M, N], weight, bias (either may be undefined), grad_out}.
tensor_list layer_norm_kernels(const tensor_list& in) {
  const Tensor& x = in[0];
  const Kernels& kernels = kernels_for(x.device());
  const int64_t M = x.size(0), N = x.size(1);
  const TensorOptions stats = TensorOptions(x.dtype() == kDouble ? kDouble : kFloat).device(x.device());
  const Tensor out = empty_like(x), mean = empty({M}, stats), rstd = empty({M}, stats);
  kernels.layer_norm(x, in[1], in[2], 1e-5, out, mean, rstd);
  const Tensor grad_in = empty_like(x), grad_weight = empty({N}, x.options()), grad_bias = empty({N}, x.options());
  kernels.layer_norm_backward(in[3], x, mean, rstd, in[1], grad_in, grad_weight, grad_bias);
  return {out, mean, rstd, grad_in, grad_weight, grad_bias};
}

/// cross_entropy's nll, smooth (when `smoothing`) and lse, then cross_entropy_backward's grad_logits, through the
/// table of in[0]'s device; in = {logits [N, C], target [N], weight [C] (may be undefined), grad_nll [N],
/// grad_smooth [N] (passed only when `smoothing`)}.
tensor_list cross_entropy_kernels(const tensor_list& in, bool smoothing) {
  const Tensor& logits = in[0];
  const Kernels& kernels = kernels_for(logits.device());
  const int64_t N = logits.size(0);
  const TensorOptions stats = TensorOptions(logits.dtype() == kDouble ? kDouble : kFloat).device(logits.device());
  const Tensor nll = empty({N}, logits.options()), smooth = smoothing ? empty({N}, logits.options()) : Tensor();
  const Tensor lse = empty({N}, stats), grad_logits = empty_like(logits);
  kernels.cross_entropy(logits, in[1], in[2], kIgnore, nll, smooth, lse);
  kernels.cross_entropy_backward(logits, in[1], in[2], kIgnore, lse, in[3], smoothing ? in[4] : Tensor(), grad_logits);
  return {nll, smooth, lse, grad_logits};
}

/// int64 targets [N] in [0, C), about a quarter of them kIgnore.
Tensor targets_with_ignored(int64_t N, int64_t C, uint64_t seed) {
  const Tensor t = indices({N}, C, seed);
  return where(uniform({N}, 0, 1, kDouble, seed + 1).lt(0.25), full_like(t, kIgnore), t);
}

TEST(CudaNorm, SoftmaxKernelsMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  // [outer, size, inner]: a thread, a warp and a block per contiguous row, strided slices, size 1, and empty.
  const std::vector<DimVector> shapes = {{4, 7, 1}, {3, 100, 1}, {2, 4096, 1}, {3, 5, 6}, {2, 300, 4},
                                         {5, 1, 1}, {2, 1, 3},   {0, 5, 1},    {2, 0, 3}, {2, 5, 0}};
  for (ScalarType dt : {kDouble, kFloat, kHalf, kBFloat16}) {
    for (const DimVector& shape : shapes) {
      for (bool log : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dt << " " << IntArrayRef(shape) << (log ? " log_softmax" : " softmax"));
        EXPECT_TRUE(cuda_matches_cpu([log](const tensor_list& in) { return softmax_kernels(in, log); },
                                     {uniform(shape, -4, 4, dt, 1), normal(shape, dt, 2)}));
      }
    }
  }
}

TEST(CudaNorm, SoftmaxKernelsGiveMaskedEntriesNoWeight) {
  STRATA_REQUIRE_CUDA();
  for (const DimVector& shape : {DimVector{6, 40, 1}, DimVector{6, 1000, 1}, DimVector{3, 40, 2}}) {
    SCOPED_TRACE(IntArrayRef(shape));
    const Tensor x = uniform(shape, -4, 4, kFloat, 3);
    const Tensor masked = where(uniform(shape, 0, 1, kFloat, 4).lt(0.3), full_like(x, -kInf), x);
    for (bool log : {false, true})
      EXPECT_TRUE(cuda_matches_cpu([log](const tensor_list& in) { return softmax_kernels(in, log); },
                                   {masked, normal(shape, kFloat, 5)}));
  }
}

// A NaN or +inf anywhere in a line makes all of it NaN, as on the CPU: in a line of a thread (C 6), a warp (65) and
// a block (2000), at the first element a lane reads (0), later (5) and at the end, and a +inf.
TEST(CudaNorm, SoftmaxAndCrossEntropySpreadNanAndInfinity) {
  STRATA_REQUIRE_CUDA();
  for (int64_t C : {6, 65, 2000}) {
    SCOPED_TRACE(::testing::Message() << "C " << C);
    std::vector<double> v(static_cast<size_t>(4 * C));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 7) * 0.5;
    v[0] = kNaN, v[C + 5] = kNaN, v[3 * C - 1] = kNaN, v[3 * C + 3] = kInf;
    const Tensor x = from_blob(v.data(), {4, C}, kFloat64).to(kFloat);
    for (const Device device : {Device(kCPU), gpu()}) {
      const Tensor xd = x.to(device), x3 = xd.view({4, C, 1});
      for (bool log : {false, true}) {
        const Tensor y = softmax_kernels({x3, zeros_like(x3)}, log)[0].cpu();
        EXPECT_TRUE(y.ne(y).all().item<bool>()) << device << (log ? " log_softmax " : " softmax ") << y;
      }
      const Tensor target = zeros({4}, TensorOptions(kLong).device(device));
      const Tensor nll = cross_entropy_kernels({xd, target, Tensor(), ones({4}, xd.options())}, false)[0].cpu();
      EXPECT_TRUE(nll.ne(nll).all().item<bool>()) << device << " cross_entropy " << nll;
    }
  }
}

TEST(CudaNorm, LayerNormKernelsMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  // [M, N]: a thread, a warp and a block per row, N = 1, empty (M = 0 still zeroes grad_weight and grad_bias), and
  // enough rows for the parameter gradients to be summed in row slices (11, the last one shorter, and 8).
  const std::vector<DimVector> shapes = {{4, 10}, {6, 31}, {5, 100},  {2, 4096}, {3, 1},
                                         {0, 8},  {3, 0},  {700, 40}, {512, 7}};
  for (ScalarType dt : {kDouble, kFloat, kHalf, kBFloat16}) {
    for (const DimVector& shape : shapes) {
      const int64_t N = shape[1];
      const Tensor weight = normal({N}, dt, 2), bias = normal({N}, dt, 3);
      const std::vector<std::pair<Tensor, Tensor>> affine = {{}, {weight, bias}, {weight, {}}};
      for (const auto& [w, b] : affine) {
        SCOPED_TRACE(::testing::Message()
                     << dt << " " << IntArrayRef(shape) << " weight " << w.defined() << " bias " << b.defined());
        EXPECT_TRUE(cuda_matches_cpu(layer_norm_kernels, {uniform(shape, -1, 3, dt, 1), w, b, normal(shape, dt, 4)}));
      }
    }
  }
}

TEST(CudaNorm, LayerNormBackwardComputesOnlyTheGradientsAsked) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = uniform({8, 300}, -1, 3, kFloat, 1).to(gpu()), w = normal({300}, kFloat, 2).to(gpu());
  const Tensor grad_out = normal({8, 300}, kFloat, 3).to(gpu());
  const tensor_list all = layer_norm_kernels({x, w, Tensor(), grad_out});
  const Kernels& kernels = kernels_for(gpu());
  const Tensor grad_in = empty_like(x), grad_weight = empty_like(w), grad_bias = empty_like(w);
  kernels.layer_norm_backward(grad_out, x, all[1], all[2], w, grad_in, Tensor(), Tensor());
  kernels.layer_norm_backward(grad_out, x, all[1], all[2], w, Tensor(), grad_weight, Tensor());
  kernels.layer_norm_backward(grad_out, x, all[1], all[2], w, Tensor(), Tensor(), grad_bias);
  EXPECT_TRUE(testing::same_tensor(grad_in.cpu(), all[3].cpu()));
  EXPECT_TRUE(testing::same_tensor(grad_weight.cpu(), all[4].cpu()));
  EXPECT_TRUE(testing::same_tensor(grad_bias.cpu(), all[5].cpu()));
}

TEST(CudaNorm, ReluBackwardKernelMatchesTheCpu) {
  STRATA_REQUIRE_CUDA();
  auto relu_backward = [](const tensor_list& in) {
    const Tensor grad = in[0].t(), y = in[1].t(), out = empty_like(grad);  // transposed: the strided kernel
    kernels_for(grad.device()).binary(BinaryOp::ReluBackward, grad, y, out);
    const Tensor dense = empty_like(in[0]);  // contiguous: the vectorised kernel
    kernels_for(grad.device()).binary(BinaryOp::ReluBackward, in[0], in[1], dense);
    return tensor_list{out, dense};
  };
  for (ScalarType dt : {kDouble, kFloat, kHalf, kBFloat16, kLong, kInt, kShort, kChar, kByte}) {
    SCOPED_TRACE(dt);
    Tensor grad, y;
    if (is_floating_point(dt)) {
      grad = normal({40, 30}, dt, 1);
      const Tensor u = uniform({40, 30}, -3, 3, kDouble, 2);  // a fifth exactly 0, a tenth NaN
      y = where(u.gt(2.4), full_like(u, kNaN), where(u.abs().lt(0.6), zeros_like(u), u)).to(dt);
    } else {
      const int64_t low = dt == kByte ? 0 : -3;  // uint8 relu outputs are 0 and up
      grad = (indices({40, 30}, 7, 1) - 3).abs().to(dt);
      y = (indices({40, 30}, 7, 2) + low).to(dt);
    }
    EXPECT_TRUE(cuda_matches_cpu(relu_backward, {grad, y}));
  }
  const Tensor flags = zeros({4}, TensorOptions(kBool).device(gpu()));
  EXPECT_THROW_MSG(kernels_for(gpu()).binary(BinaryOp::ReluBackward, flags, flags, empty_like(flags)),
                   "relu_backward does not support Bool");
}

TEST(CudaNorm, KernelsRejectWhatTheCpuRejectsWithItsMessages) {
  STRATA_REQUIRE_CUDA();
  for (Device device : {Device(kCPU), gpu()}) {
    SCOPED_TRACE(device);
    const Kernels& kernels = kernels_for(device);
    const TensorOptions options = TensorOptions(kFloat).device(device);
    const Tensor x = zeros({4, 5}, options), stats = empty({4}, options);
    EXPECT_THROW_MSG(kernels.softmax(x, true, empty_like(x)),
                     "log_softmax: expected [outer, size, inner] operands, got shape [4, 5]");
    const Tensor counts = zeros({4, 5, 1}, TensorOptions(kLong).device(device));
    EXPECT_THROW_MSG(kernels.softmax(counts, false, empty_like(counts)), "softmax does not support Long");
    EXPECT_THROW_MSG(kernels.layer_norm(x, zeros({4}, options), Tensor(), 1e-5, empty_like(x), stats, stats),
                     "layer_norm: expected contiguous [5] weight, bias and their gradients of Float, got [4] Float");
    EXPECT_THROW_MSG(kernels.layer_norm(x, Tensor(), Tensor(), 1e-5, empty_like(x), stats.to(kDouble), stats),
                     "layer_norm: expected mean and rstd [4] of Float, got [4] Double");
    const Tensor target = zeros({4}, TensorOptions(kLong).device(device));
    EXPECT_THROW_MSG(kernels.cross_entropy(x, target.to(kInt), Tensor(), kIgnore, stats, Tensor(), stats),
                     "cross_entropy: expected contiguous int64 targets [4], got [4] Int");
    EXPECT_THROW_MSG(kernels.cross_entropy(x, target, zeros({4}, options), kIgnore, stats, Tensor(), stats),
                     "cross_entropy: expected a contiguous weight [5] of Float, got [4] Float");
    EXPECT_THROW_MSG(kernels.cross_entropy(x, target, Tensor(), kIgnore, stats, Tensor(), stats.to(kDouble)),
                     "cross_entropy: expected lse [4] of Float, got [4] Double");
    EXPECT_THROW_MSG(kernels.cross_entropy(counts.squeeze(2), target, Tensor(), kIgnore, target, Tensor(), stats),
                     "cross_entropy does not support Long");
    EXPECT_THROW_MSG(kernels.cross_entropy_backward(x, target, Tensor(), kIgnore, stats, stats, Tensor(), x.t()),
                     "cross_entropy_backward: expected a contiguous grad_logits [4, 5] of Float, got [5, 4] Float");
    EXPECT_THROW_MSG(kernels.cross_entropy(x, target, Tensor(), kIgnore, Tensor(), Tensor(), stats),
                     "cross_entropy: expected a defined per-row operand [4], got an undefined tensor");
  }
  const Tensor x = zeros({4, 5}, TensorOptions(kFloat).device(gpu())), stats = empty({4}, x.options());
  EXPECT_THROW_MSG(kernels_for(gpu()).cross_entropy(x, zeros({4}, kLong), Tensor(), kIgnore, stats, Tensor(), stats),
                   str("cross_entropy: expected every operand on ", gpu(), ", got one on cpu"));
}

TEST(CudaNorm, CrossEntropyKernelsMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  // A thread (C = 1, 5), a warp (65) and a block (4096) per row, and no rows.
  for (ScalarType dt : {kDouble, kFloat, kHalf, kBFloat16}) {
    for (int64_t C : {1, 5, 65, 4096}) {
      for (int64_t N : {37, 0}) {
        const Tensor logits = uniform({N, C}, -4, 4, dt, 1), target = targets_with_ignored(N, C, 2);
        const Tensor grad_nll = normal({N}, dt, 4), grad_smooth = normal({N}, dt, 5);
        for (const Tensor& weight : {Tensor(), uniform({C}, 0.1, 1.5, dt, 3)}) {
          for (bool smoothing : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dt << " [" << N << ", " << C << "] weight " << weight.defined()
                                              << " smoothing " << smoothing);
            EXPECT_TRUE(
                cuda_matches_cpu([smoothing](const tensor_list& in) { return cross_entropy_kernels(in, smoothing); },
                                 {logits, target, weight, grad_nll, grad_smooth}));
          }
        }
      }
    }
  }
}

TEST(CudaNorm, CrossEntropyKernelsMakeARowWithAnOutOfRangeTargetNaN) {
  STRATA_REQUIRE_CUDA();
  // The op checks the targets first (Note [cross entropy targets], tensor/cuda/loss.cu); handed bad ones anyway (rows
  // 1 and 2), the kernels read nothing out of bounds and those rows show it. Row 0 is valid, row 3 ignored.
  const int64_t C = 40;
  const Tensor target = tensor(std::vector<int64_t>{7, C, -1, kIgnore}).cuda();
  const tensor_list out =
      cross_entropy_kernels({uniform({4, C}, -4, 4, kFloat, 1).cuda(), target, uniform({C}, 0.1, 1.5, kFloat, 2).cuda(),
                             normal({4}, kFloat, 3).cuda(), normal({4}, kFloat, 4).cuda()},
                            true);
  const std::vector<double> nll = testing::values(out[0]), smooth = testing::values(out[1]);
  const std::vector<double> grad = testing::values(out[3]);
  auto row = [&](int64_t n, auto holds) {
    return std::all_of(grad.begin() + n * C, grad.begin() + (n + 1) * C, holds);
  };
  EXPECT_TRUE(std::isfinite(nll[0]) && std::isfinite(smooth[0]) && row(0, [](double g) { return std::isfinite(g); }));
  for (int64_t n : {1, 2}) {
    SCOPED_TRACE(n);
    EXPECT_TRUE(std::isnan(nll[n]) && std::isnan(smooth[n]) && row(n, [](double g) { return std::isnan(g); }));
  }
  EXPECT_TRUE(nll[3] == 0 && smooth[3] == 0 && row(3, [](double g) { return g == 0; }));
}

/// softmax and log_softmax along dim, layer_norm over the last two dims and relu of in[0], and the gradients of
/// a weighted sum of them for x = in[0] and layer_norm's weight and bias in[1], in[2].
tensor_list ops_and_grads(const tensor_list& in, int64_t dim) {
  tensor_list inputs;
  for (const Tensor& t : in) inputs.push_back(t.detach().requires_grad_(true));
  const Tensor& x = inputs[0];
  tensor_list out{softmax(x, dim), log_softmax(x, dim), layer_norm(x, {x.size(1), x.size(2)}, inputs[1], inputs[2]),
                  relu(x)};
  Tensor loss = (out[0] * in[3]).sum();
  for (size_t k = 1; k < out.size(); ++k) loss = loss + (out[k] * in[3]).sum();
  for (const Tensor& g : autograd::grad({loss}, {inputs[0], inputs[1], inputs[2]})) out.push_back(g);
  return out;
}

TEST(CudaNorm, OpsAndTheirGradientsMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kDouble, kFloat}) {
    for (int64_t dim : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << dt << " dim " << dim);
      const tensor_list in{normal({4, 6, 50}, dt, 1), normal({6, 50}, dt, 2), normal({6, 50}, dt, 3),
                           normal({4, 6, 50}, dt, 4)};
      EXPECT_TRUE(cuda_matches_cpu([dim](const tensor_list& t) { return ops_and_grads(t, dim); }, in));
    }
  }
}

/// cross_entropy of logits in[0] at targets in[1] (kIgnore ignored) with class weights in[2] (may be undefined), and
/// its gradient for the logits; Reduction::None's losses are summed with the weights in[3] first.
tensor_list cross_entropy_and_grad(const tensor_list& in, Reduction reduction, double label_smoothing) {
  const Tensor x = in[0].detach().requires_grad_(true);
  const Tensor loss = cross_entropy(
      x, in[1], {.reduction = reduction, .ignore_index = kIgnore, .label_smoothing = label_smoothing, .weight = in[2]});
  const Tensor total = reduction == Reduction::None ? (loss * in[3]).sum() : loss;
  return {loss, autograd::grad({total}, {x})[0]};
}

TEST(CudaNorm, CrossEntropyAndItsGradientMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kDouble, kFloat}) {
    for (int64_t C : {5, 65, 4096}) {
      const Tensor logits = uniform({24, C}, -4, 4, dt, 1), target = targets_with_ignored(24, C, 2);
      for (const Tensor& weight : {Tensor(), uniform({C}, 0.1, 1.5, dt, 3)}) {
        for (Reduction reduction : {kMean, kSum, kNone}) {
          for (double label_smoothing : {0.0, 0.1}) {
            SCOPED_TRACE(::testing::Message() << dt << " C " << C << " weight " << weight.defined() << " reduction "
                                              << static_cast<int>(reduction) << " label_smoothing " << label_smoothing);
            EXPECT_TRUE(cuda_matches_cpu(
                [=](const tensor_list& in) { return cross_entropy_and_grad(in, reduction, label_smoothing); },
                {logits, target, weight, normal({24}, dt, 4)}));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
