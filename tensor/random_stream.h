#pragma once
// Internal to the kernel tables (tensor/cpu/random.cpp, tensor/cuda/random.cu): the
// counter-based stream both devices evaluate, and multinomial's search for a sample's category,
// so that a draw with the same (seed, offset) gives the same numbers on the CPU and on a GPU. The
// formulas are in the Note at the top of tensor/cpu/random.cpp.

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

/// 53 random bits as a double uniform in [0, 1): (bits >> 11) * 2^-53.
STRATA_HOST_DEVICE inline double unit_double(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1p-53; }

/// The first i in [0, n) with cumulative[i] > x (>= x when or_equal), or n; cumulative is ascending.
STRATA_HOST_DEVICE inline int64_t first_above(const double* cumulative, int64_t n, double x, bool or_equal) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (cumulative[mid] > x || (or_equal && cumulative[mid] == x))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// The category multinomial's uniform u picks from a row's running sums of weights cumulative[0, n): the
/// first whose sum exceeds u times the total; should rounding leave none, the first that reaches the total
/// (the last of positive weight). A category of weight 0 is never picked.
STRATA_HOST_DEVICE inline int64_t pick_category(const double* cumulative, int64_t n, double u) {
  const double total = cumulative[n - 1];
  const int64_t hit = first_above(cumulative, n, u * total, false);
  return hit < n ? hit : first_above(cumulative, n, total, true);
}

}  // namespace strata::random_stream
