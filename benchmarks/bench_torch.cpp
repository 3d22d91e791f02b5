// libtorch baselines of the benchmarks in bench_strata.cpp, under the same names with impl
// "libtorch": PyTorch's own C++ library from its PyPI wheel (scripts/bench's choice), or Debian's
// libtorch 1.13 as the fallback. Debian's sends float matmul to the system BLAS (libblas.so.3:
// OpenBLAS when libopenblas0 is installed), so thread counts are set for both torch and OpenBLAS;
// the wheel's uses its own MKL, which torch::set_num_threads controls.

#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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

// ---- (h) transformer block ----

// nanoGPT's Block as strata's nn::TransformerBlock computes it: x + attn(ln_1(x)), then + mlp(ln_2(x)) with a
// 4C GELU MLP. `fused` takes PyTorch 2's scaled_dot_product_attention instead of the product, mask and softmax.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t c, int64_t heads, bool fused) : heads(heads), fused(fused) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    c_attn = register_module("c_attn", torch::nn::Linear(c, 3 * c));
    attn_proj = register_module("attn_proj", torch::nn::Linear(c, c));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    c_fc = register_module("c_fc", torch::nn::Linear(c, 4 * c));
    mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * c, c));
  }

  torch::Tensor attention(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads;
    std::vector<torch::Tensor> qkv = c_attn(x).split(c, 2);
    for (torch::Tensor& z : qkv) z = z.view({b, t, heads, d}).transpose(1, 2);
    torch::Tensor y;
#if TORCH_VERSION_MAJOR >= 2
    if (fused) y = torch::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], {}, 0.0, /*is_causal=*/true);
#endif
    if (!y.defined()) {
      torch::Tensor att = (qkv[0] * (1.0 / std::sqrt(static_cast<double>(d)))).matmul(qkv[1].transpose(-2, -1));
      torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
      y = att.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1).matmul(qkv[2]);
    }
    return attn_proj(y.transpose(1, 2).reshape({b, t, c}));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x + attention(ln_1(x));
    return h + mlp_proj(torch::gelu(c_fc(ln_2(h))));
  }

  int64_t heads;
  bool fused;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
};
TORCH_MODULE(Block);

void block_step_torch(benchmark::State& state, bool fused) {
  set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  Block block(kTfDim, kTfHeads, fused);
  torch::Tensor x = torch::randn({kTfBatch, kTfSeq, kTfDim});
  torch::Tensor target = torch::randn({kTfBatch, kTfSeq, kTfDim});
  std::vector<torch::Tensor> params = block->parameters();
  for (auto _ : state) {
    torch::mse_loss(block(x), target).backward();
    sgd_step(params);
  }
}
BENCHMARK_CAPTURE(block_step_torch, , false)->Name("block_step/libtorch")->Apply(at_1_and_2_threads);
#if TORCH_VERSION_MAJOR >= 2
BENCHMARK_CAPTURE(block_step_torch, , true)->Name("block_step_sdpa/libtorch")->Apply(at_1_and_2_threads);
#endif

}  // namespace

std::string torch_version() { return TORCH_VERSION; }

std::string torch_blas_info() {
  using ConfigFn = char* (*)();
  auto config = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (config && openblas_set_num_threads()) return std::string(config());
  if (at::hasMKL()) return "MKL";
  return "not OpenBLAS or MKL (libtorch matmul timings are not representative; install libopenblas0)";
}

}  // namespace strata_bench
