#pragma once
// Internal to the kernel tables (tensor/cpu/random.cpp, tensor/cuda/random.cu): the
// counter-based stream both devices evaluate, so that a draw with the same (seed, offset) gives
// the same numbers on the CPU and on a GPU. The formulas are in the Note at the top of
// tensor/cpu/random.cpp.

#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::random_stream {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kLane = 0xD1B54A32D192ED03ULL;
constexpr double kTwoPi = 6.283185307179586476925286766559;

/// SplitMix64's finaliser.
STRATA_HOST_DEVICE constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// The bits of one lane of the stream: bits(c) = mix64(key + (c + 1) * golden).
struct Stream {
  uint64_t key;  ///< mix64(seed + lane * kLane)
  STRATA_HOST_DEVICE Stream(uint64_t seed, uint64_t lane) : key(mix64(seed + lane * kLane)) {}
  /// Bits of counter c
  STRATA_HOST_DEVICE uint64_t operator()(uint64_t c) const { return mix64(key + (c + 1) * kGolden); }
};

}  // namespace strata::random_stream
