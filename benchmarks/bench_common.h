#pragma once
// What the benchmark programs share: the MLP, matmul, LSTM, convolution and transformer block sizes (so the
// strata, Eigen and libtorch sides run the same step), the step clock, medians and "--name value" options.
// Google Benchmark names are "<case>/<impl>[/threads:N]" with impl one of strata, eigen, libtorch;
// scripts/bench_ratios.py pairs them up by case.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "cli.h"

namespace strata_bench {

constexpr int64_t kBatch = 64;        // MLP: B
constexpr int64_t kIn = 784;          // MLP: input features
constexpr int64_t kHidden = 256;      // MLP: both hidden layers
constexpr int64_t kClasses = 10;      // MLP: output classes
constexpr double kLr = 0.01;          // MLP: SGD step size
constexpr int64_t kMatmul = 1024;     // matmul: n = k = m
constexpr int64_t kLstmSeq = 64;      // LSTM step: T
constexpr int64_t kLstmBatch = 32;    // LSTM step: B
constexpr int64_t kLstmInput = 256;   // LSTM step: input features
constexpr int64_t kLstmHidden = 256;  // LSTM step: hidden features of both layers
constexpr int64_t kLstmLayers = 2;    // LSTM step: stacked layers
constexpr int64_t kLenetBatch = 64;   // LeNet step: B of 1 x 28 x 28 images (Fashion-MNIST's shape)
constexpr int64_t kBlockBatch = 32;   // ResNet basic block step: B
constexpr int64_t kBlockWidth = 64;   // ResNet basic block step: channels in, inside and out
constexpr int64_t kBlockSize = 32;    // ResNet basic block step: height and width
constexpr int64_t kConvBatch = 8;     // conv2d 3x3: B
constexpr int64_t kConvWidth = 64;    // conv2d 3x3: input and output channels
constexpr int64_t kConvSize = 56;     // conv2d 3x3: height and width (padding 1 keeps them)
constexpr int64_t kTfBatch = 16;      // transformer block step: B
constexpr int64_t kTfSeq = 128;       // transformer block step: T
constexpr int64_t kTfDim = 256;       // transformer block step: C
constexpr int64_t kTfHeads = 4;       // transformer block step: heads (of C / 4 = 64 each)

/// The parameter shapes of examples/char_gpt's default model (vocabulary 80, C 128, T 64, 4 blocks), the AdamW
/// step's: token and position embeddings, per block ln_1, c_attn, c_proj, ln_2, c_fc, c_proj, then ln_f.
inline std::vector<std::vector<int64_t>> char_gpt_param_shapes() {
  constexpr int64_t V = 80, C = 128, T = 64, kLayers = 4;
  std::vector<std::vector<int64_t>> shapes = {{V, C}, {T, C}};
  for (int64_t l = 0; l < kLayers; ++l)
    for (std::vector<int64_t> s : std::vector<std::vector<int64_t>>{
             {C}, {C}, {3 * C, C}, {3 * C}, {C, C}, {C}, {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}})
      shapes.push_back(s);
  shapes.push_back({C});
  shapes.push_back({C});
  return shapes;
}

/// Floating-point operations of one conv2d 3x3 forward and backward (input and weight gradients):
/// three GEMMs of [C_out x 9 C_in] by [9 C_in x H W] per image.
constexpr double kConvFlops = 3.0 * 2.0 * kConvBatch * kConvWidth * 9 * kConvWidth * kConvSize * kConvSize;

/// Which BLAS libtorch's matmul goes to, and its thread control (defined in bench_torch.cpp).
std::string torch_blas_info();
/// libtorch's version, e.g. "2.15.0" (defined in bench_torch.cpp).
std::string torch_version();

using Clock = std::chrono::steady_clock;
/// Seconds from `start` to now.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The median (the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

/// A "--name value" option of a benchmark program and the variable it sets.
struct Flag {
  const char* name;                                 ///< e.g. "--reps"
  std::variant<int*, double*, std::string*> value;  ///< where the value goes
};

/// Sets the flags given as "--name value" (numbers must parse whole); anything else throws
/// std::invalid_argument whose message starts with `usage`.
inline void parse_flags(int argc, char** argv, const std::string& usage, const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto flag = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return arg == f.name; });
    if (flag == flags.end() || i + 1 == argc) throw std::invalid_argument(usage + "; got " + arg);
    const std::string value = argv[++i];
    std::visit(
        [&](auto* slot) {
          if constexpr (std::is_same_v<decltype(slot), std::string*>) {
            *slot = value;
          } else {
            const auto number = cli::parse_number<std::remove_pointer_t<decltype(slot)>>(value);
            if (!number) throw std::invalid_argument(usage + "; bad value for " + arg + ": " + value);
            *slot = *number;
          }
        },
        flag->value);
  }
}

}  // namespace strata_bench
