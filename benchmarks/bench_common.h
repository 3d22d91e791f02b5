#pragma once
// Sizes shared by the strata, Eigen and libtorch benchmarks, so every side runs the same step.
// Benchmark names are "<case>/<impl>[/threads:N]" with impl one of strata, eigen, libtorch;
// scripts/bench_ratios.py pairs them up by case.

#include <cstdint>
#include <string>

namespace strata_bench {

constexpr int64_t kBatch = 64;    // MLP: B
constexpr int64_t kIn = 784;      // MLP: input features
constexpr int64_t kHidden = 256;  // MLP: both hidden layers
constexpr int64_t kClasses = 10;  // MLP: output classes
constexpr double kLr = 0.01;      // MLP: SGD step size
constexpr int64_t kMatmul = 1024; // matmul: n = k = m

/// Which BLAS libtorch's matmul goes to, and its thread control (defined in bench_torch.cpp).
std::string torch_blas_info();

}  // namespace strata_bench
