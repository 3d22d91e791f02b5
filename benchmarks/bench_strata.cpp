// strata benchmarks and their hand-written Eigen baselines (libtorch's are in bench_torch.cpp).
//
//   (a) per-op overhead: a + b on one-element tensors, with and without grad, and a tiny backward
//   (b) one SGD step of a 784-256-256-10 MLP on a batch of 64 (forward, cross entropy, backward,
//       update) at 1 and 2 threads
//   (c) a 1024 x 1024 x 1024 float32 matmul at 1 and 2 threads
//   (d) one SGD step of a 2-layer LSTM (input and hidden 256) over 64 steps of a batch of 32 (forward,
//       mean squared error against a target sequence, backward, update) at 1 and 2 threads; libtorch only

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
    Tensor loss = strata::cross_entropy(h.matmul(w3) + b3, y);
    loss.backward();
    strata::NoGradGuard no_grad;
    for (Tensor& p : params) {
      p.sub_(p.grad(), kLr);
      p.mutable_grad() = Tensor();  // zero_grad(set_to_none), PyTorch's default; libtorch's side does the same
    }
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

void set_flops(benchmark::State& state) {
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * kMatmul * kMatmul * kMatmul, benchmark::Counter::kIsIterationInvariantRate);
}

void matmul_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  Tensor a = strata::randn({kMatmul, kMatmul}), b = strata::randn({kMatmul, kMatmul});
  for (auto _ : state) {
    Tensor c = a.matmul(b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_flops(state);
}
BENCHMARK(matmul_strata)
    ->Name("matmul_1024/strata")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

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
  set_flops(state);
}
BENCHMARK(matmul_eigen)
    ->Name("matmul_1024/eigen")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- (d) LSTM training step ----

void lstm_step_strata(benchmark::State& state) {
  strata::set_num_threads(static_cast<int>(state.range(0)));
  strata::manual_seed(0);
  strata::nn::LSTM lstm(strata::nn::LSTMOptions(kLstmInput, kLstmHidden).num_layers(kLstmLayers));
  Tensor x = strata::randn({kLstmSeq, kLstmBatch, kLstmInput});
  Tensor target = strata::randn({kLstmSeq, kLstmBatch, kLstmHidden});
  std::vector<Tensor> params = lstm->parameters();
  for (auto _ : state) {
    Tensor loss = strata::mse_loss(std::get<0>(lstm(x)), target);
    loss.backward();
    strata::NoGradGuard no_grad;
    for (Tensor& p : params) {
      p.sub_(p.grad(), kLr);
      p.mutable_grad() = Tensor();
    }
  }
}
BENCHMARK(lstm_step_strata)
    ->Name("lstm_step/strata")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("strata_default_threads", std::to_string(strata::get_num_threads()));
#ifdef STRATA_BENCH_WITH_TORCH
  benchmark::AddCustomContext("libtorch_blas", strata_bench::torch_blas_info());
#else
  benchmark::AddCustomContext("libtorch_blas", "libtorch not built in");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
