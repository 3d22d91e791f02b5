// strata_bench_cuda: GPU throughput, measured the way benchmarks/torch_cuda.py measures PyTorch eager, so
// scripts/gpu can print the two side by side:
//   matmul      n x n x n products in float32, TF32 (cuda::set_allow_tf32) and bfloat16, n = 4096 and 8192,
//               in TFLOP/s (2 n^3 per product);
//   mlp_step    one SGD step (zero_grad, forward, cross entropy, backward, update) of a 784-4096-4096-10
//               ReLU MLP on a batch of 512, float32, in ms;
//   block_step  one AdamW step of a nanoGPT-style TransformerBlock (B 16, T 256, C 768, 12 heads, MSE
//               against a random target), float32, in ms;
//   models      the CPU benchmarks' small models (bench_common.h), float32, in ms: conv2d_3x3 (forward and
//               backward of a 3x3 convolution, 64 channels, 56 x 56, batch 8) and one SGD step each of
//               lenet_step (the MNIST CNN, batch 64), resnet_block_step (a basic block with batch norm, 64
//               channels, 32 x 32, batch 32, MSE) and lstm_step (2 layers, 256 wide, 64 steps, batch 32, MSE).
// One line per measurement, e.g. `matmul dtype=bf16 n=8192 tflops=612.30`; scripts/gpu pairs the lines
// with torch_cuda.py's by everything before the last field.
//
//   ./strata_bench_cuda [--reps R] [--part all|matmul|mlp|block|models]
//
// Method (the device tool's METHOD.md): random inputs, never zeros; a warm-up; then R timed batches, each
// a run of back-to-back operations between two cuda::synchronize() calls on the host clock, sized to take
// about 50 ms; the median batch time over its count. Products rotate among 4 input pairs so that repeats
// do not find their operands in the L2 cache. --reps: batches per measurement (default 15).

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/nn/activation.h>
#include <strata/nn/container.h>
#include <strata/nn/conv.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>
#include <strata/nn/rnn.h>
#include <strata/nn/transformer.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include <strata/strata.h>

#include "bench_common.h"

namespace nn = strata::nn;
namespace optim = strata::optim;
using strata::Tensor;
using strata_bench::Clock, strata_bench::median, strata_bench::seconds_since;

namespace {

constexpr int64_t kMlpBatch = 512, kMlpIn = 784, kMlpHidden = 4096, kMlpClasses = 10;  // MLP: B, in, hidden, classes
constexpr int64_t kBlockB = 16, kBlockT = 256, kBlockC = 768, kBlockHeads = 12;        // block: B, T, C, heads
constexpr double kTargetBatchSeconds = 0.05;

strata::Device gpu() { return strata::Device(strata::kCUDA, 0); }

/// Seconds per call of `op`: warm-up, then `reps` synchronised batches sized to about 50 ms; the median.
double time_per_call(const std::function<void()>& op, int reps) {
  for (int i = 0; i < 3; ++i) op();  // handles, kernels and the allocator's pool settle
  strata::cuda::synchronize();
  auto start = Clock::now();
  op();
  strata::cuda::synchronize();
  const double once = seconds_since(start);
  const int per_batch = std::max(1, static_cast<int>(kTargetBatchSeconds / std::max(once, 1e-6)));
  std::vector<double> batches;
  for (int r = 0; r < reps; ++r) {
    strata::cuda::synchronize();
    start = Clock::now();
    for (int i = 0; i < per_batch; ++i) op();
    strata::cuda::synchronize();
    batches.push_back(seconds_since(start) / per_batch);
  }
  return median(batches);
}

void bench_matmul(int reps) {
  struct Mode {
    const char* name;
    strata::ScalarType dtype;
    bool tf32;
  };
  const Mode modes[] = {
      {"f32", strata::kFloat, false}, {"tf32", strata::kFloat, true}, {"bf16", strata::kBFloat16, false}};
  for (int64_t n : {4096, 8192})
    for (const Mode& mode : modes) {
      strata::manual_seed(static_cast<uint64_t>(n));
      std::vector<Tensor> a, b;
      for (int i = 0; i < 4; ++i) {
        a.push_back(strata::randn({n, n}, strata::TensorOptions(strata::kFloat).device(gpu())).to(mode.dtype));
        b.push_back(strata::randn({n, n}, strata::TensorOptions(strata::kFloat).device(gpu())).to(mode.dtype));
      }
      const bool saved = strata::cuda::allow_tf32();
      strata::cuda::set_allow_tf32(mode.tf32);
      int next = 0;
      const double seconds = time_per_call(
          [&] {
            Tensor c = a[next].matmul(b[next]);
            next = (next + 1) % 4;
          },
          reps);
      strata::cuda::set_allow_tf32(saved);
      std::printf("matmul dtype=%s n=%lld tflops=%.2f\n", mode.name, static_cast<long long>(n),
                  2.0 * n * n * n / seconds / 1e12);
      std::fflush(stdout);
    }
}

/// Prints `line` with the milliseconds per call of `op`.
void report(const std::string& line, const std::function<void()>& op, int reps) {
  std::printf("%s ms=%.3f\n", line.c_str(), time_per_call(op, reps) * 1e3);
  std::fflush(stdout);
}

/// Prints `line` with the milliseconds of one training step: zero_grad, loss().backward(), step.
void report_step(const std::string& line, optim::Optimizer& optimizer, const std::function<Tensor()>& loss, int reps) {
  report(
      line,
      [&] {
        optimizer.zero_grad();
        loss().backward();
        optimizer.step();
      },
      reps);
}

void bench_mlp(int reps) {
  strata::manual_seed(0);
  nn::Sequential model(nn::Linear(kMlpIn, kMlpHidden), nn::ReLU(), nn::Linear(kMlpHidden, kMlpHidden), nn::ReLU(),
                       nn::Linear(kMlpHidden, kMlpClasses));
  model->to(gpu());
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.01));
  const Tensor x = strata::randn({kMlpBatch, kMlpIn}, strata::TensorOptions().device(gpu()));
  const Tensor y = strata::randint(kMlpClasses, {kMlpBatch}, strata::TensorOptions(strata::kLong).device(gpu()));
  report_step(
      "mlp_step dtype=f32 batch=" + std::to_string(kMlpBatch) + " sizes=784-4096-4096-10", sgd,
      [&] { return strata::cross_entropy(model(x), y); }, reps);
}

void bench_block(int reps) {
  strata::manual_seed(0);
  nn::TransformerBlock block(kBlockC, kBlockHeads);
  block->to(gpu());
  optim::AdamW adamw(block->parameters(), optim::AdamWOptions(3e-4));
  const strata::TensorOptions on_gpu = strata::TensorOptions().device(gpu());
  const Tensor x = strata::randn({kBlockB, kBlockT, kBlockC}, on_gpu);
  const Tensor target = strata::randn({kBlockB, kBlockT, kBlockC}, on_gpu);
  report_step(
      "block_step dtype=f32 B=" + std::to_string(kBlockB) + " T=" + std::to_string(kBlockT) +
          " C=" + std::to_string(kBlockC) + " heads=" + std::to_string(kBlockHeads),
      adamw, [&] { return strata::mse_loss(block(x), target); }, reps);
}

void bench_models(int reps) {
  using namespace strata_bench;  // the sizes the CPU benchmarks use
  const strata::TensorOptions on_gpu = strata::TensorOptions().device(gpu());
  strata::manual_seed(0);
  {
    Tensor x = strata::randn({kConvBatch, kConvWidth, kConvSize, kConvSize}, on_gpu).requires_grad_();
    Tensor w = (strata::randn({kConvWidth, kConvWidth, 3, 3}, on_gpu) * 0.05).requires_grad_();
    const Tensor grad = strata::randn({kConvBatch, kConvWidth, kConvSize, kConvSize}, on_gpu);
    report(
        "conv2d_3x3 dtype=f32 B=8 C=64 HW=56",
        [&] {
          strata::conv2d(x, w, {}, 1, 1).backward(grad);
          x.mutable_grad() = Tensor();
          w.mutable_grad() = Tensor();
        },
        reps);
  }
  {
    nn::Conv2d conv1(nn::Conv2dOptions(1, 10, 5)), conv2(nn::Conv2dOptions(10, 20, 5));
    nn::Linear fc1(320, 50), fc2(50, 10);
    nn::ModuleList net(conv1, conv2, fc1, fc2);
    net->to(gpu());
    optim::SGD sgd(net->parameters(), optim::SGDOptions(0.01));
    const Tensor x = strata::randn({kLenetBatch, 1, 28, 28}, on_gpu);
    const Tensor y = strata::randint(10, {kLenetBatch}, strata::TensorOptions(strata::kLong).device(gpu()));
    report_step(
        "lenet_step dtype=f32 batch=64", sgd,
        [&] {
          Tensor h = strata::relu(strata::max_pool2d(conv1(x), 2));
          h = strata::relu(strata::max_pool2d(conv2(h), 2));
          h = strata::relu(fc1(h.view({-1, 320})));
          return strata::nll_loss(strata::log_softmax(fc2(h), 1), y);
        },
        reps);
  }
  {
    auto conv3x3 = [] { return nn::Conv2d(nn::Conv2dOptions(kBlockWidth, kBlockWidth, 3).padding(1).bias(false)); };
    nn::Conv2d conv1 = conv3x3(), conv2 = conv3x3();
    nn::BatchNorm2d bn1(kBlockWidth), bn2(kBlockWidth);
    nn::ModuleList block(conv1, conv2, bn1, bn2);
    block->to(gpu());
    optim::SGD sgd(block->parameters(), optim::SGDOptions(0.01));
    const Tensor x = strata::randn({kBlockBatch, kBlockWidth, kBlockSize, kBlockSize}, on_gpu);
    const Tensor target = strata::randn({kBlockBatch, kBlockWidth, kBlockSize, kBlockSize}, on_gpu);
    report_step(
        "resnet_block_step dtype=f32 B=32 C=64 HW=32", sgd,
        [&] { return strata::mse_loss(strata::relu(bn2(conv2(strata::relu(bn1(conv1(x))))) + x), target); }, reps);
  }
  {
    nn::LSTM lstm(nn::LSTMOptions(kLstmInput, kLstmHidden).num_layers(kLstmLayers));
    lstm->to(gpu());
    optim::SGD sgd(lstm->parameters(), optim::SGDOptions(0.01));
    const Tensor x = strata::randn({kLstmSeq, kLstmBatch, kLstmInput}, on_gpu);
    const Tensor target = strata::randn({kLstmSeq, kLstmBatch, kLstmHidden}, on_gpu);
    report_step(
        "lstm_step dtype=f32 T=64 B=32 hidden=256 layers=2", sgd,
        [&] { return strata::mse_loss(std::get<0>(lstm(x)), target); }, reps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  std::string part = "all";
  try {
    strata_bench::parse_flags(argc, argv, "usage: strata_bench_cuda [--reps R] [--part all|matmul|mlp|block|models]",
                              {{"--reps", &reps}, {"--part", &part}});
    if (reps < 1 || (part != "all" && part != "matmul" && part != "mlp" && part != "block" && part != "models"))
      throw std::invalid_argument("usage: strata_bench_cuda [--reps R >= 1] [--part all|matmul|mlp|block|models]");
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (!strata::cuda::is_available()) {
    std::fprintf(stderr,
                 "strata_bench_cuda: no CUDA device is visible (strata::cuda::device_count() == 0); "
                 "nothing to measure\n");
    return 1;
  }
  try {
    if (part == "all" || part == "matmul") bench_matmul(reps);
    if (part == "all" || part == "mlp") bench_mlp(reps);
    if (part == "all" || part == "block") bench_block(reps);
    if (part == "all" || part == "models") bench_models(reps);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata_bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
