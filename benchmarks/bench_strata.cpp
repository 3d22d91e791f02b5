// strata benchmarks and their hand-written Eigen baselines (libtorch's are in bench_torch.cpp).
//
//   (a) per-op overhead: a + b on one-element tensors, with and without grad, and a tiny backward
//   (b) one SGD step of a 784-256-256-10 MLP on a batch of 64 (forward, cross entropy, backward,
//       update) at 1 and 2 threads
//   (c) a 1024 x 1024 x 1024 float32 matmul at 1 and 2 threads
//   (d) one SGD step of a 2-layer LSTM (input and hidden 256) over 64 steps of a batch of 32 (forward,
//       mean squared error against a target sequence, backward, update) at 1 and 2 threads; libtorch only
//   (e) one SGD step of pytorch/examples' MNIST CNN without its dropout (two 5x5 convolutions with max
//       pooling, two linear layers, log_softmax and nll_loss) on a batch of 64 Fashion-MNIST-shaped images
//   (f) one SGD step of a ResNet basic block (3x3 conv, batch norm, relu, 3x3 conv, batch norm, the
//       identity added, relu) at 64 channels, 32 x 32, batch 32, against a mean squared error
//   (g) conv2d 3x3, 64 -> 64 channels, 56 x 56, batch 8, forward and backward (input and weight
//       gradients) with FLOPS; its Eigen side is the three GEMMs of those shapes without the im2col
//       gather and col2im scatter, the GEMM roofline that an im2col convolution can at best reach
//   (e) to (g) at 1 and 2 threads, next to libtorch
//   (h) one SGD step of a pre-norm transformer block (nn::TransformerBlock: LayerNorm, causal self-attention,
//       LayerNorm, 4C GELU MLP) at C 256, 4 heads, T 128, batch 16, against a mean squared error, at 1 and 2
//       threads, next to libtorch's same block written out (and, from PyTorch 2, with its fused attention)
//   (i) one AdamW step (weight decay 0.1) over examples/char_gpt's parameters, per parameter and fused, at 1 and 2
//       threads, next to eager PyTorch's (torch_cpu.py: its default loop and fused=True)
//   (j) the fused row kernels, forward and backward at 1 and 2 threads, next to eager PyTorch's: layer norm over
//       char_gpt's activations [16, 64, 128], softmax over attention scores [16, 4, 64, 64], and cross entropy
//       over [1024, 4096] logits

// GCC 12 reports false maybe-uninitialized warnings inside Eigen's AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <benchmark/benchmark.h>
#include <omp.h>
#include <strata/strata.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.h"
#include "gbench_common.h"

namespace {

using namespace strata_bench;
using strata::Tensor;

// ---- (a) per-op overhead ----

void add_strata(benchmark::State& state, bool grad) {
  Tensor a = strata::ones({1}, strata::requires_grad(grad));
  Tensor b = strata::ones({1}, strata::requires_grad(grad));
  for (auto _ : state) {
    Tensor c = a + b;
    benchmark::DoNotOptimize(c.impl_ptr().get());
  }
}
BENCHMARK_CAPTURE(add_strata, , false)->Name("add/strata")->UseRealTime();
BENCHMARK_CAPTURE(add_strata, , true)->Name("add_requires_grad/strata")->UseRealTime();

void add_sum_backward_strata(benchmark::State& state) {
  Tensor a = strata::ones({1}, strata::requires_grad());
  Tensor b = strata::ones({1}, strata::requires_grad());
  for (auto _ : state) (a + b).sum().backward();
  benchmark::DoNotOptimize(a.grad().impl_ptr().get());
}
BENCHMARK(add_sum_backward_strata)->Name("add_sum_backward/strata")->UseRealTime();

// ---- (b) MLP training step ----

// One SGD step over `params` after backward, with the gradients set to none: zero_grad(set_to_none),
// PyTorch's default; the libtorch side does the same.
void sgd_step(std::vector<Tensor>& params) {
  strata::NoGradGuard no_grad;
  for (Tensor& p : params) {
    p.sub_(p.grad(), kLr);
    p.mutable_grad() = Tensor();
  }
}

void mlp_step_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  Tensor x = strata::randn({kBatch, kIn});
  Tensor y = strata::randint(kClasses, {kBatch});
  auto param = [](int64_t rows, int64_t cols) { return (strata::randn({rows, cols}) * 0.05).requires_grad_(); };
  Tensor w1 = param(kIn, kHidden), b1 = strata::zeros({kHidden}, strata::requires_grad());
  Tensor w2 = param(kHidden, kHidden), b2 = strata::zeros({kHidden}, strata::requires_grad());
  Tensor w3 = param(kHidden, kClasses), b3 = strata::zeros({kClasses}, strata::requires_grad());
  strata::tensor_list params = {w1, b1, w2, b2, w3, b3};
  for (auto _ : state) {
    Tensor h = strata::relu(x.matmul(w1) + b1);
    h = strata::relu(h.matmul(w2) + b2);
    strata::cross_entropy(h.matmul(w3) + b3, y).backward();
    sgd_step(params);
  }
}
BENCHMARK(mlp_step_strata)->Name("mlp_step/strata")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// The same step written by hand: row-major Eigen matrices, preallocated buffers, explicit backward.
void mlp_step_eigen(benchmark::State& state) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Row = Eigen::RowVectorXf;
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  Eigen::setNbThreads(threads);
  std::srand(0);
  Matrix x = Matrix::Random(kBatch, kIn);
  Eigen::VectorXi y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) y(i) = static_cast<int>(std::rand() % kClasses);
  Matrix w1 = Matrix::Random(kIn, kHidden) * 0.05f, w2 = Matrix::Random(kHidden, kHidden) * 0.05f,
         w3 = Matrix::Random(kHidden, kClasses) * 0.05f;
  Row b1 = Row::Zero(kHidden), b2 = Row::Zero(kHidden), b3 = Row::Zero(kClasses);
  Matrix z1(kBatch, kHidden), h1(kBatch, kHidden), z2(kBatch, kHidden), h2(kBatch, kHidden), z3(kBatch, kClasses);
  Matrix dz3(kBatch, kClasses), dh2(kBatch, kHidden), dh1(kBatch, kHidden);
  Matrix dw1(kIn, kHidden), dw2(kHidden, kHidden), dw3(kHidden, kClasses);
  const float lr = static_cast<float>(kLr);
  for (auto _ : state) {
    // forward
    z1.noalias() = x * w1;
    z1.rowwise() += b1;
    h1 = z1.cwiseMax(0.f);
    z2.noalias() = h1 * w2;
    z2.rowwise() += b2;
    h2 = z2.cwiseMax(0.f);
    z3.noalias() = h2 * w3;
    z3.rowwise() += b3;
    // softmax cross entropy, mean over the batch; dz3 = (softmax - onehot) / B
    float loss = 0;
    for (int64_t i = 0; i < kBatch; ++i) {
      float m = z3.row(i).maxCoeff();
      dz3.row(i) = (z3.row(i).array() - m).exp().matrix();
      float s = dz3.row(i).sum();
      loss += std::log(s) + m - z3(i, y(i));
      dz3.row(i) /= s;
      dz3(i, y(i)) -= 1.f;
    }
    dz3 /= static_cast<float>(kBatch);
    benchmark::DoNotOptimize(loss /= kBatch);
    // backward
    dw3.noalias() = h2.transpose() * dz3;
    dh2.noalias() = dz3 * w3.transpose();
    dh2 = dh2.cwiseProduct((z2.array() > 0.f).cast<float>().matrix());
    dw2.noalias() = h1.transpose() * dh2;
    dh1.noalias() = dh2 * w2.transpose();
    dh1 = dh1.cwiseProduct((z1.array() > 0.f).cast<float>().matrix());
    dw1.noalias() = x.transpose() * dh1;
    // update
    w3 -= lr * dw3;
    b3 -= lr * dz3.colwise().sum();
    w2 -= lr * dw2;
    b2 -= lr * dh2.colwise().sum();
    w1 -= lr * dw1;
    b1 -= lr * dh1.colwise().sum();
  }
  benchmark::DoNotOptimize(w1.data());
}
BENCHMARK(mlp_step_eigen)->Name("mlp_step/eigen")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// ---- (c) matmul ----

void matmul_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  Tensor a = strata::randn({kMatmul, kMatmul}), b = strata::randn({kMatmul, kMatmul});
  for (auto _ : state) {
    Tensor c = a.matmul(b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_flops(state, 2.0 * kMatmul * kMatmul * kMatmul);
}
BENCHMARK(matmul_strata)->Name("matmul_1024/strata")->Apply(at_1_and_2_threads);

void matmul_eigen(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  Eigen::setNbThreads(threads);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(kMatmul, kMatmul), b = Eigen::MatrixXf::Random(kMatmul, kMatmul);
  Eigen::MatrixXf c(kMatmul, kMatmul);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * kMatmul * kMatmul * kMatmul);
}
BENCHMARK(matmul_eigen)->Name("matmul_1024/eigen")->Apply(at_1_and_2_threads);

// ---- (d) LSTM training step ----

void lstm_step_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  strata::nn::LSTM lstm(strata::nn::LSTMOptions(kLstmInput, kLstmHidden).num_layers(kLstmLayers));
  Tensor x = strata::randn({kLstmSeq, kLstmBatch, kLstmInput});
  Tensor target = strata::randn({kLstmSeq, kLstmBatch, kLstmHidden});
  std::vector<Tensor> params = lstm->parameters();
  for (auto _ : state) {
    strata::mse_loss(std::get<0>(lstm(x)), target).backward();
    sgd_step(params);
  }
}
BENCHMARK(lstm_step_strata)->Name("lstm_step/strata")->Apply(at_1_and_2_threads);

// ---- (e) to (g): convolutional models ----

void lenet_step_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  strata::nn::Conv2d conv1(strata::nn::Conv2dOptions(1, 10, 5)), conv2(strata::nn::Conv2dOptions(10, 20, 5));
  strata::nn::Linear fc1(320, 50), fc2(50, 10);
  Tensor x = strata::randn({kLenetBatch, 1, 28, 28});
  Tensor y = strata::randint(10, {kLenetBatch});
  std::vector<Tensor> params = strata::nn::ModuleList(conv1, conv2, fc1, fc2)->parameters();
  for (auto _ : state) {
    Tensor h = strata::relu(strata::max_pool2d(conv1(x), 2));
    h = strata::relu(strata::max_pool2d(conv2(h), 2));
    h = strata::relu(fc1(h.view({-1, 320})));
    strata::nll_loss(strata::log_softmax(fc2(h), 1), y).backward();
    sgd_step(params);
  }
}
BENCHMARK(lenet_step_strata)->Name("lenet_step/strata")->Apply(at_1_and_2_threads);

void resnet_block_step_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  auto conv3x3 = [] {
    return strata::nn::Conv2d(strata::nn::Conv2dOptions(kBlockWidth, kBlockWidth, 3).padding(1).bias(false));
  };
  strata::nn::Conv2d conv1 = conv3x3(), conv2 = conv3x3();
  strata::nn::BatchNorm2d bn1(kBlockWidth), bn2(kBlockWidth);
  Tensor x = strata::randn({kBlockBatch, kBlockWidth, kBlockSize, kBlockSize});
  Tensor target = strata::randn({kBlockBatch, kBlockWidth, kBlockSize, kBlockSize});
  std::vector<Tensor> params = strata::nn::ModuleList(conv1, conv2, bn1, bn2)->parameters();
  for (auto _ : state) {
    Tensor h = strata::relu(bn1(conv1(x)));
    h = strata::relu(bn2(conv2(h)) + x);
    strata::mse_loss(h, target).backward();
    sgd_step(params);
  }
}
BENCHMARK(resnet_block_step_strata)->Name("resnet_block_step/strata")->Apply(at_1_and_2_threads);

void conv2d_3x3_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  Tensor x = strata::randn({kConvBatch, kConvWidth, kConvSize, kConvSize}, strata::requires_grad());
  Tensor w = (strata::randn({kConvWidth, kConvWidth, 3, 3}) * 0.05).requires_grad_();
  Tensor grad = strata::randn({kConvBatch, kConvWidth, kConvSize, kConvSize});
  for (auto _ : state) {
    strata::conv2d(x, w, {}, 1, 1).backward(grad);
    x.mutable_grad() = Tensor();
    w.mutable_grad() = Tensor();
  }
  set_flops(state, kConvFlops);
}
BENCHMARK(conv2d_3x3_strata)->Name("conv2d_3x3_64_56/strata")->Apply(at_1_and_2_threads);

void conv2d_3x3_eigen(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  Eigen::setNbThreads(threads);
  const int64_t depth = 9 * kConvWidth, pixels = kConvSize * kConvSize;
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Matrix w = Matrix::Random(kConvWidth, depth), grad_w(kConvWidth, depth);
  std::vector<Matrix> cols(kConvBatch, Matrix::Random(depth, pixels)),
      grads(kConvBatch, Matrix::Random(kConvWidth, pixels));
  Matrix out(kConvWidth, pixels), grad_cols(depth, pixels);
  for (auto _ : state) {
    grad_w.setZero();
    for (int64_t i = 0; i < kConvBatch; ++i) {
      out.noalias() = w * cols[i];
      grad_cols.noalias() = w.transpose() * grads[i];
      grad_w.noalias() += grads[i] * cols[i].transpose();
      benchmark::DoNotOptimize(out.data());
      benchmark::DoNotOptimize(grad_cols.data());
    }
    benchmark::DoNotOptimize(grad_w.data());
  }
  set_flops(state, kConvFlops);
}
BENCHMARK(conv2d_3x3_eigen)->Name("conv2d_3x3_64_56/eigen")->Apply(at_1_and_2_threads);

// ---- (h) transformer block ----

void block_step_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  strata::nn::TransformerBlock block(kTfDim, kTfHeads);
  Tensor x = strata::randn({kTfBatch, kTfSeq, kTfDim});
  Tensor target = strata::randn({kTfBatch, kTfSeq, kTfDim});
  std::vector<Tensor> params = block->parameters();
  for (auto _ : state) {
    strata::mse_loss(block(x), target).backward();
    sgd_step(params);
  }
}
BENCHMARK(block_step_strata)->Name("block_step/strata")->Apply(at_1_and_2_threads);

// ---- (i) AdamW over char_gpt's parameters ----

void adamw_step_strata(benchmark::State& state, bool fused) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  std::vector<Tensor> params;
  for (const std::vector<int64_t>& shape : char_gpt_param_shapes()) {
    params.push_back(strata::randn(shape).requires_grad_(true));
    params.back().mutable_grad() = strata::randn(shape);
  }
  strata::optim::AdamW opt(params, strata::optim::AdamWOptions(1e-3).weight_decay(0.1).fused(fused));
  for (auto _ : state) opt.step();
}
BENCHMARK_CAPTURE(adamw_step_strata, , false)->Name("adamw_step/strata")->Apply(at_1_and_2_threads);
BENCHMARK_CAPTURE(adamw_step_strata, , true)->Name("adamw_step_fused/strata")->Apply(at_1_and_2_threads);

// ---- (j) the fused row kernels ----

/// Times forward plus backward of loss_of(x) (one op) with the gradient given by `grad`, x's gradient reset.
template <class F>
void row_kernel_step(benchmark::State& state, Tensor x, const Tensor& grad, const F& loss_of) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    loss_of(x).backward(grad);
    x.mutable_grad() = Tensor();
  }
}

void layer_norm_strata(benchmark::State& state) {
  strata::manual_seed(0);
  const Tensor w = strata::randn({128}).requires_grad_(true), b = strata::randn({128}).requires_grad_(true);
  row_kernel_step(state, strata::randn({16, 64, 128}).requires_grad_(true), strata::randn({16, 64, 128}),
                  [&](const Tensor& x) { return strata::layer_norm(x, {128}, w, b); });
}
BENCHMARK(layer_norm_strata)->Name("layer_norm_fwd_bwd/strata")->Apply(at_1_and_2_threads);

void softmax_strata(benchmark::State& state) {
  strata::manual_seed(0);
  row_kernel_step(state, strata::randn({16, 4, 64, 64}).requires_grad_(true), strata::randn({16, 4, 64, 64}),
                  [](const Tensor& x) { return strata::softmax(x, -1); });
}
BENCHMARK(softmax_strata)->Name("softmax_fwd_bwd/strata")->Apply(at_1_and_2_threads);

void cross_entropy_strata(benchmark::State& state) {
  strata::manual_seed(0);
  const Tensor target = strata::randint(0, 4096, {1024}, strata::kLong);
  row_kernel_step(state, strata::randn({1024, 4096}).requires_grad_(true), Tensor(),
                  [&](const Tensor& x) { return strata::cross_entropy(x, target); });
}
BENCHMARK(cross_entropy_strata)->Name("cross_entropy_fwd_bwd/strata")->Apply(at_1_and_2_threads);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("strata_default_threads", std::to_string(strata::get_num_threads()));
#ifdef STRATA_BENCH_WITH_TORCH
  benchmark::AddCustomContext("libtorch_version", strata_bench::torch_version());
  benchmark::AddCustomContext("libtorch_blas", strata_bench::torch_blas_info());
#else
  benchmark::AddCustomContext("libtorch_blas", "libtorch not built in");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
