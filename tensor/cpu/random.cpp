// CPU kernels: counter-based random numbers.
//
// Note: the random stream. Value i of a call with (seed, offset) depends only on the counter
// c = offset + i, so results are the same for any thread count and any split of the work; a
// CUDA kernel reproduces them by evaluating the same formulas per element:
//   mix64(z)       SplitMix64's finaliser: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
//                  z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31
//   bits(lane, c)  mix64(mix64(seed + lane * 0xD1B54A32D192ED03) + (c + 1) * 0x9E3779B97F4A7C15)
//   uniform float  u = (bits(0, c) >> 40) * 2^-24 (float32) or (bits(0, c) >> 11) * 2^-53 (float64);
//                  value = T(lo + u * (hi - lo)) computed in double as one fused multiply-add; if rounding reached hi,
//                  the largest T below hi
//   uniform int    value = lo + mulhi64(bits(0, c), hi - lo)   (high 64 bits of the 128-bit product)
//   normal         with b = 24 bits for float32 and 53 for float64, in T's precision:
//                  u1 = ((bits(0, c) >> (64 - b)) + 1) * 2^-b in (0, 1], u2 = (bits(1, c) >> (64 - b)) * 2^-b,
//                  value = mean + std * sqrt(-2 log u1) * cos(2 pi u2)
//   multinomial    u = (bits(0, c) >> 11) * 2^-53 with c = offset + n * S + s for sample s of row n; the sample
//                  is the first category whose running sum of weights (in double) exceeds u * (the row's
//                  sum); should rounding leave none, the last category of positive weight (pick_category)
// (The transcendental functions run vectorised through Eigen, so the last bit of a normal
// value may differ from another libm's; the stream of uniforms is exact everywhere.)

#include "strata/tensor/cpu/eigen.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/random_stream.h"

namespace strata::cpu {

namespace {

using random_stream::kTwoPi;
using random_stream::pick_category;
using random_stream::Stream;
using random_stream::unit_double;

constexpr int64_t kRandomBlock = 256;

/// Fills element i (row-major) of out by block(dst, offset + first, n), which writes the values
/// of counters [offset + first, offset + first + n) to dst[0, n).
template <class T, class Block>
void generate(const Tensor& out, uint64_t offset, const Kernels& kernels, const Block& block) {
  if (!out.is_contiguous()) {
    Tensor dense = empty(out.sizes(), out.options());
    generate<T>(dense, offset, kernels, block);
    return kernels.copy(dense, out);
  }
  T* p = static_cast<T*>(out.data_ptr());
  const int64_t n = out.numel(), blocks = (n + kRandomBlock - 1) / kRandomBlock;
  parallel_for(blocks, use_threads(8 * n), [&](int64_t b) {
    const int64_t first = b * kRandomBlock;
    block(p + first, offset + static_cast<uint64_t>(first), std::min(kRandomBlock, n - first));
  });
}

/// Half and BFloat16 as the CUDA kernel draws them (tensor/cuda/random.cu): the float32 draw rounded, and where
/// rounding carried it up to hi, the largest 16-bit value below hi, so that the range stays [lo, hi).
void uniform_16_bit(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset, const Kernels& kernels) {
  const Tensor draws = empty(out.sizes(), out.options().dtype(kFloat));
  kernels.uniform(draws, lo, hi, seed, offset);
  const Tensor dense = out.is_contiguous() ? out : empty(out.sizes(), out.options());
  visit_all_dtypes(out.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const T top(static_cast<float>(hi)), below = lo == hi ? top : next_below(top);
      const float* d = draws.data_ptr<float>();
      T* p = static_cast<T*>(dense.data_ptr());
      parallel_for(out.numel(), use_threads(out.numel()), [&](int64_t i) {
        const T v(d[i]);
        p[i] = static_cast<float>(v) < static_cast<float>(top) ? v : below;
      });
    }
  });
  if (!dense.is_same(out)) kernels.copy(dense, out);
}

}  // namespace

void CpuKernels::uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) const {
  STRATA_CHECK(out.is_floating_point(), "uniform does not support ", out.dtype(), " (integers come from uniform_int)");
  STRATA_CHECK(lo <= hi, "uniform: expected lo <= hi, got lo=", lo, " hi=", hi);
  if (is_reduced_floating_point(out.dtype())) return uniform_16_bit(out, lo, hi, seed, offset, *this);
  const Stream bits(seed, 0);
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      constexpr int kBits = std::is_same_v<T, float> ? 24 : 53;
      const double scale = std::ldexp(1.0, -kBits) * (hi - lo);
      const T top = static_cast<T>(hi), below_top = lo == hi ? top : std::nextafter(top, static_cast<T>(lo));
      // Captures by value: loop-invariant locals let the compiler vectorise the loop.
      generate<T>(out, offset, *this, [=](T* dst, uint64_t c, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const T v = static_cast<T>(std::fma(static_cast<double>(bits(c + i) >> (64 - kBits)), scale, lo));
          dst[i] = v < top ? v : below_top;
        }
      });
    }
  });
}

void CpuKernels::uniform_int(const Tensor& out, int64_t lo, int64_t hi, uint64_t seed, uint64_t offset) const {
  STRATA_CHECK(!out.is_floating_point(), "uniform_int does not support ", out.dtype());
  STRATA_CHECK(lo < hi, "uniform_int: expected lo < hi, got lo=", lo, " hi=", hi);
  const Stream bits(seed, 0);
  // In uint64 arithmetic, so that any int64 range (up to 2^64 - 1 values) wraps to the right answer.
  const uint64_t first = static_cast<uint64_t>(lo), range = static_cast<uint64_t>(hi) - first;
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_floating_point_v<T>) {
      generate<T>(out, offset, *this, [=](T* dst, uint64_t c, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const auto high = static_cast<uint64_t>((static_cast<unsigned __int128>(bits(c + i)) * range) >> 64);
          dst[i] = static_cast<T>(static_cast<int64_t>(first + high));
        }
      });
    }
  });
}

void CpuKernels::normal(const Tensor& out, double mean, double stddev, uint64_t seed, uint64_t offset) const {
  STRATA_CHECK(out.is_floating_point(), "normal does not support ", out.dtype());
  STRATA_CHECK(stddev >= 0, "normal: expected std >= 0, got ", stddev);
  // As the CUDA kernel: the float32 draw, rounded.
  if (in_float32(*this, {}, {&out}, [&](const tensor_list& t) { normal(t[0], mean, stddev, seed, offset); })) return;
  const Stream bits0(seed, 0), bits1(seed, 1);
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
      constexpr int kBits = std::is_same_v<T, float> ? 24 : 53;
      const T scale = std::ldexp(T(1), -kBits), two_pi_scale = static_cast<T>(kTwoPi) * scale;
      generate<T>(out, offset, *this, [=](T* dst, uint64_t c, int64_t n) {
        alignas(64) T u1[kRandomBlock], u2[kRandomBlock];
        for (int64_t i = 0; i < n; ++i) {
          u1[i] = static_cast<T>((bits0(c + i) >> (64 - kBits)) + 1) * scale;
          u2[i] = static_cast<T>(bits1(c + i) >> (64 - kBits)) * two_pi_scale;
        }
        Eigen::Map<Array> z(dst, n);
        z = static_cast<T>(mean) + static_cast<T>(stddev) * (T(-2) * Eigen::Map<const Array>(u1, n).log()).sqrt() *
                                       Eigen::Map<const Array>(u2, n).cos();
      });
    }
  });
}

void CpuKernels::multinomial(const Tensor& probs, const Tensor& out, uint64_t seed, uint64_t offset) const {
  check_multinomial_operands(probs, out);
  const int64_t rows = out.size(0), samples = out.size(1), categories = probs.size(1);
  if (out.numel() == 0) return;
  STRATA_CHECK(categories > 0, "multinomial: expected at least one category, got weights of shape ", probs.sizes());
  if (in_float32(*this, {&probs}, {&out}, [&](const tensor_list& t) { multinomial(t[0], t[1], seed, offset); })) return;
  const Stream bits(seed, 0);
  visit_dtype(probs.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T* p = probs.data_ptr<T>();
      int64_t* o = out.data_ptr<int64_t>();
      const int64_t p_row = probs.stride(0), p_col = probs.stride(1), o_row = out.stride(0), o_col = out.stride(1);
      parallel_for(rows, use_threads(rows * (categories + samples)), [&](int64_t n) {
        std::vector<double> cumulative(categories);
        double running = 0;
        for (int64_t c = 0; c < categories; ++c)
          cumulative[c] = running += static_cast<double>(p[n * p_row + c * p_col]);
        for (int64_t s = 0; s < samples; ++s) {
          const double u = unit_double(bits(offset + static_cast<uint64_t>(n * samples + s)));
          o[n * o_row + s * o_col] = pick_category(cumulative.data(), categories, u);
        }
      });
    }
  });
}

}  // namespace strata::cpu
