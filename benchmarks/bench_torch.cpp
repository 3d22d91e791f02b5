// libtorch baselines of the benchmarks in bench_strata.cpp, under the same names with impl
// "libtorch". Debian's libtorch sends float matmul to the system BLAS (libblas.so.3: OpenBLAS
// when libopenblas0 is installed), so thread counts are set for both torch and OpenBLAS.

#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <string>

#include "bench_common.h"
#include "gbench_common.h"

namespace strata_bench {

namespace {

// OpenBLAS's thread control, when the BLAS behind libblas.so.3 is OpenBLAS.
using SetThreadsFn = void (*)(int);
SetThreadsFn openblas_set_num_threads() {
  static auto fn = reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return fn;
}

void set_torch_threads(int n) {
  torch::set_num_threads(n);
  if (auto fn = openblas_set_num_threads()) fn(n);
}

// One SGD step over `params` after backward, with the gradients set to none (as the strata side).
void sgd_step(std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : params) {
    p.sub_(p.grad(), kLr);
    p.mutable_grad() = torch::Tensor();
  }
}

// ---- (a) per-op overhead ----

void add_torch(benchmark::State& state, bool grad) {
  torch::Tensor a = torch::ones({1}, torch::requires_grad(grad));
  torch::Tensor b = torch::ones({1}, torch::requires_grad(grad));
  for (auto _ : state) {
    torch::Tensor c = a + b;
    benchmark::DoNotOptimize(c.unsafeGetTensorImpl());
  }
}
BENCHMARK_CAPTURE(add_torch, , false)->Name("add/libtorch")->UseRealTime();
BENCHMARK_CAPTURE(add_torch, , true)->Name("add_requires_grad/libtorch")->UseRealTime();

void add_sum_backward_torch(benchmark::State& state) {
  torch::Tensor a = torch::ones({1}, torch::requires_grad());
  torch::Tensor b = torch::ones({1}, torch::requires_grad());
  for (auto _ : state) (a + b).sum().backward();
  benchmark::DoNotOptimize(a.grad().unsafeGetTensorImpl());
}
BENCHMARK(add_sum_backward_torch)->Name("add_sum_backward/libtorch")->UseRealTime();

// ---- (b) MLP training step ----

void mlp_step_torch(benchmark::State& state) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({kBatch, kIn});
  torch::Tensor y = torch::randint(kClasses, {kBatch});
  auto param = [](int64_t rows, int64_t cols) { return (torch::randn({rows, cols}) * 0.05).requires_grad_(); };
  torch::Tensor w1 = param(kIn, kHidden), b1 = torch::zeros({kHidden}, torch::requires_grad());
  torch::Tensor w2 = param(kHidden, kHidden), b2 = torch::zeros({kHidden}, torch::requires_grad());
  torch::Tensor w3 = param(kHidden, kClasses), b3 = torch::zeros({kClasses}, torch::requires_grad());
  std::vector<torch::Tensor> params = {w1, b1, w2, b2, w3, b3};
  for (auto _ : state) {
    torch::Tensor h = torch::relu(x.matmul(w1) + b1);
    h = torch::relu(h.matmul(w2) + b2);
    torch::nn::functional::cross_entropy(h.matmul(w3) + b3, y).backward();
    sgd_step(params);
  }
}
BENCHMARK(mlp_step_torch)->Name("mlp_step/libtorch")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// ---- (c) matmul ----

void matmul_torch(benchmark::State& state) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::Tensor a = torch::randn({kMatmul, kMatmul}), b = torch::randn({kMatmul, kMatmul});
  for (auto _ : state) {
    torch::Tensor c = a.matmul(b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_flops(state, 2.0 * kMatmul * kMatmul * kMatmul);
}
BENCHMARK(matmul_torch)->Name("matmul_1024/libtorch")->Apply(at_1_and_2_threads);

// ---- (d) LSTM training step ----

void lstm_step_torch(benchmark::State& state) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(kLstmInput, kLstmHidden).num_layers(kLstmLayers));
  torch::Tensor x = torch::randn({kLstmSeq, kLstmBatch, kLstmInput});
  torch::Tensor target = torch::randn({kLstmSeq, kLstmBatch, kLstmHidden});
  std::vector<torch::Tensor> params = lstm->parameters();
  for (auto _ : state) {
    torch::mse_loss(std::get<0>(lstm(x)), target).backward();
    sgd_step(params);
  }
}
BENCHMARK(lstm_step_torch)->Name("lstm_step/libtorch")->Apply(at_1_and_2_threads);

// ---- (e) to (g): convolutional models ----

void lenet_step_torch(benchmark::State& state) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  torch::nn::Conv2d conv1(torch::nn::Conv2dOptions(1, 10, 5)), conv2(torch::nn::Conv2dOptions(10, 20, 5));
  torch::nn::Linear fc1(320, 50), fc2(50, 10);
  torch::Tensor x = torch::randn({kLenetBatch, 1, 28, 28});
  torch::Tensor y = torch::randint(10, {kLenetBatch});
  std::vector<torch::Tensor> params = torch::nn::ModuleList(conv1, conv2, fc1, fc2)->parameters();
  for (auto _ : state) {
    torch::Tensor h = torch::relu(torch::max_pool2d(conv1(x), 2));
    h = torch::relu(torch::max_pool2d(conv2(h), 2));
    h = torch::relu(fc1(h.view({-1, 320})));
    torch::nll_loss(torch::log_softmax(fc2(h), 1), y).backward();
    sgd_step(params);
  }
}
BENCHMARK(lenet_step_torch)->Name("lenet_step/libtorch")->Apply(at_1_and_2_threads);

void resnet_block_step_torch(benchmark::State& state) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  auto conv3x3 = [] {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(kBlockWidth, kBlockWidth, 3).padding(1).bias(false));
  };
  torch::nn::Conv2d conv1 = conv3x3(), conv2 = conv3x3();
  torch::nn::BatchNorm2d bn1(kBlockWidth), bn2(kBlockWidth);
  torch::Tensor x = torch::randn({kBlockBatch, kBlockWidth, kBlockSize, kBlockSize});
  torch::Tensor target = torch::randn({kBlockBatch, kBlockWidth, kBlockSize, kBlockSize});
  std::vector<torch::Tensor> params = torch::nn::ModuleList(conv1, conv2, bn1, bn2)->parameters();
  for (auto _ : state) {
    torch::Tensor h = torch::relu(bn1(conv1(x)));
    h = torch::relu(bn2(conv2(h)) + x);
    torch::mse_loss(h, target).backward();
    sgd_step(params);
  }
}
BENCHMARK(resnet_block_step_torch)->Name("resnet_block_step/libtorch")->Apply(at_1_and_2_threads);

void conv2d_3x3_torch(benchmark::State& state) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({kConvBatch, kConvWidth, kConvSize, kConvSize}, torch::requires_grad());
  torch::Tensor w = (torch::randn({kConvWidth, kConvWidth, 3, 3}) * 0.05).requires_grad_();
  torch::Tensor grad = torch::randn({kConvBatch, kConvWidth, kConvSize, kConvSize});
  for (auto _ : state) {
    torch::conv2d(x, w, {}, 1, 1).backward(grad);
    x.mutable_grad() = torch::Tensor();
    w.mutable_grad() = torch::Tensor();
  }
  set_flops(state, kConvFlops);
}
BENCHMARK(conv2d_3x3_torch)->Name("conv2d_3x3_64_56/libtorch")->Apply(at_1_and_2_threads);

}  // namespace

std::string torch_blas_info() {
  using ConfigFn = char* (*)();
  auto config = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (config && openblas_set_num_threads()) return std::string(config());
  return "not OpenBLAS (libtorch matmul timings are not representative; install libopenblas0)";
}

}  // namespace strata_bench
