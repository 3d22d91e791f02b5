// CUDA kernels: counter-based random numbers, the CPU's stream evaluated per element (see the
// Note at the top of tensor/cpu/random.cpp for the formulas). Element i of `out`, counted in
// row-major order whatever its strides, takes counter offset + i, so a CUDA draw equals the CPU
// draw with the same (seed, offset): bit for bit for uniforms, to the last bits of the libm
// functions for normals.
//
// Note [fused multiply-add]: lo + u * scale (uniform) and start + i * step (arange) are
// evaluated as one fused multiply-add, one rounding, as the CPU kernels do with std::fma, so the
// two devices agree bit for bit whatever the compiler's contraction flags.
//
// Half and BFloat16, which the CPU does not draw, are defined here as the float32 draw rounded
// to the 16-bit type: a uniform that rounding carried up to hi becomes the largest 16-bit value
// below hi (so the range stays [lo, hi)), a normal is computed in float32 and rounded.
//
// multinomial sums each row's weights in double by a block scan, whose additions group otherwise
// than the CPU's left-to-right sum: a sample differs from the CPU's only when u * total falls
// within rounding of a boundary between two categories.

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"
#include "strata/tensor/random_stream.h"

namespace strata::cuda {

namespace {

using random_stream::kTwoPi;
using random_stream::pick_category;
using random_stream::Stream;
using random_stream::unit_double;

/// Random bits kept per draw: 24 for float32 (and the 16-bit floats, drawn as float32), 53 for float64.
template <class T>
constexpr int kBits = std::is_same_v<T, double> ? 53 : 24;

// ---- kernels ----

/// Calls f(i, p) for every element of out with i its row-major position and p its address.
template <Indexing kInd, class T, class F>
__device__ inline void for_each_element(const Loop<1>& out, const F& f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < out.numel; i += step) {
    int64_t off[1];
    offsets_at<kInd>(out, i, off);
    f(i, at<T>(out, off, 0));
  }
}

/// Uniform floats: W = acc_t<T> is the CPU's type; [top, below] keep the value under hi in W,
/// [top_t, below_t] again after rounding to a 16-bit T.
template <Indexing kInd, class T>
__global__ void __launch_bounds__(kThreads)
    uniform_float_kernel(Loop<1> out, Stream bits, uint64_t offset, double lo, double scale, acc_t<T> top,
                         acc_t<T> below, T top_t, T below_t) {
  using W = acc_t<T>;
  for_each_element<kInd, T>(out, [&](int64_t i, T* p) {
    const double u = static_cast<double>(bits(offset + static_cast<uint64_t>(i)) >> (64 - kBits<T>));
    const W w = static_cast<W>(__fma_rn(u, scale, lo));  // Note [fused multiply-add]
    T v = convert<T>(w < top ? w : below);
    if constexpr (is_reduced_v<T>) {
      if (!(static_cast<float>(v) < static_cast<float>(top_t))) v = below_t;
    }
    *p = v;
  });
}

/// Uniform integers in [lo, lo + range): lo + the high 64 bits of bits * range.
template <Indexing kInd, class T>
__global__ void __launch_bounds__(kThreads)
    uniform_int_kernel(Loop<1> out, Stream bits, uint64_t offset, uint64_t lo, uint64_t range) {
  for_each_element<kInd, T>(out, [&](int64_t i, T* p) {
    const auto b = static_cast<unsigned long long>(bits(offset + static_cast<uint64_t>(i)));
    *p = static_cast<T>(static_cast<int64_t>(lo + __umul64hi(b, range)));
  });
}

/// Box-Muller in W = acc_t<T>: mean + std * sqrt(-2 log u1) * cos(2 pi u2), u1 in (0, 1].
template <Indexing kInd, class T>
__global__ void __launch_bounds__(kThreads)
    normal_kernel(Loop<1> out, Stream bits0, Stream bits1, uint64_t offset, acc_t<T> mean, acc_t<T> stddev) {
  using W = acc_t<T>;
  constexpr W kScale = W(1) / static_cast<W>(uint64_t{1} << kBits<T>);
  const W two_pi_scale = static_cast<W>(kTwoPi) * kScale;
  for_each_element<kInd, T>(out, [&](int64_t i, T* p) {
    const uint64_t c = offset + static_cast<uint64_t>(i);
    const W u1 = static_cast<W>((bits0(c) >> (64 - kBits<T>)) + 1) * kScale;
    const W u2 = static_cast<W>(bits1(c) >> (64 - kBits<T>)) * two_pi_scale;
    W z;
    if constexpr (std::is_same_v<W, double>)
      z = mean + stddev * sqrt(-2.0 * log(u1)) * cos(u2);
    else
      z = mean + stddev * sqrtf(-2.0f * logf(u1)) * cosf(u2);
    *p = convert<T>(z);
  });
}

/// The running sums, in double, of each row of `probs` (rows of `categories` weights, row_step and col_step
/// bytes apart) into cumulative [rows, categories]: a block per row, kThreads weights at a time.
template <class T>
__global__ void __launch_bounds__(kThreads) cumulative_kernel(const char* probs, int64_t rows, int64_t categories,
                                                              int64_t row_step, int64_t col_step, double* cumulative) {
  using Scan = cub::BlockScan<double, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    double running = 0;
    for (int64_t first = 0; first < categories; first += kThreads) {
      const int64_t c = first + threadIdx.x;
      const double w =
          c < categories ? convert<double>(*reinterpret_cast<const T*>(probs + n * row_step + c * col_step)) : 0.0;
      double sum, chunk;
      Scan(scan_storage).InclusiveSum(w, sum, chunk);
      if (c < categories) cumulative[n * categories + c] = running + sum;
      running += chunk;
      __syncthreads();  // scan_storage is reused by the next chunk
    }
  }
}

/// Sample i = n * samples + s of out [rows, samples] (element strides out_row, out_col): the category that the
/// stream's value offset + i picks from row n of cumulative (pick_category, as on the CPU).
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const double* cumulative, int64_t categories, int64_t samples, int64_t count, Stream bits,
                  uint64_t offset, int64_t* out, int64_t out_row, int64_t out_col) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += grid) {
    const int64_t n = i / samples, s = i % samples;
    const double u = unit_double(bits(offset + static_cast<uint64_t>(i)));
    out[n * out_row + s * out_col] = pick_category(cumulative + n * categories, categories, u);
  }
}

// ---- launchers ----

/// out's geometry with dims in row-major order (size-1 dims dropped, contiguous neighbours
/// merged), so a kernel's linear position is the element's row-major index. make_loop would
/// reorder dims by stride, which changes which counter an element gets.
Loop<1> row_major_loop(const Tensor& out) {
  Loop<1> g;
  g.numel = out.numel();
  g.data[0] = static_cast<char*>(out.data_ptr());
  const auto elem_size = static_cast<int64_t>(out.element_size());
  int nd = 0;
  for (int64_t d = 0; d < out.dim(); ++d) {
    const int64_t size = out.size(d), stride = out.stride(d) * elem_size;
    if (size == 1) continue;
    if (nd > 0 && g.strides[nd - 1][0] == stride * size) {
      g.sizes[nd - 1] *= size;
      g.strides[nd - 1][0] = stride;
      continue;
    }
    STRATA_CHECK(nd < kMaxDims, "tensor kernels support at most ", kMaxDims, " dims of size > 1, got shape ",
                 out.sizes());
    g.sizes[nd] = size;
    g.strides[nd][0] = stride;
    ++nd;
  }
  if (nd == 0) {  // one element
    g.sizes[0] = 1;
    g.strides[0][0] = elem_size;
    nd = 1;
  }
  g.ndim = nd;
  return g;
}

/// Runs launch.template operator()<kInd>() on out's device and stream, for a non-empty out.
template <class F>
void launch_on(const Tensor& out, const Loop<1>& loop, F&& launch) {
  const int d = out.device().index;
  const cudaStream_t stream = current_stream(d);
  DeviceGuard guard(d);
  visit_indexing(loop, [&]<Indexing kInd>() {
    launch.template operator()<kInd>(stream);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void CudaKernels::uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) const {
  STRATA_CHECK(out.is_floating_point(), "uniform does not support ", out.dtype(), " (integers come from uniform_int)");
  STRATA_CHECK(lo <= hi, "uniform: expected lo <= hi, got lo=", lo, " hi=", hi);
  if (out.numel() == 0) return;
  const Stream bits(seed, 0);
  visit_cuda_dtype(out.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      using W = acc_t<T>;
      const double scale = std::ldexp(1.0, -kBits<T>) * (hi - lo);
      const W top = static_cast<W>(hi), below = lo == hi ? top : std::nextafter(top, static_cast<W>(lo));
      T top_t = convert<T>(top), below_t = top_t;
      if constexpr (is_reduced_v<T>) {
        using Host = std::conditional_t<std::is_same_v<T, __half>, Half, BFloat16>;  // the same bits
        if (lo != hi) below_t = std::bit_cast<T>(next_below(std::bit_cast<Host>(top_t)));
      }
      const Loop<1> loop = row_major_loop(out);
      launch_on(out, loop, [&]<Indexing kInd>(cudaStream_t stream) {
        uniform_float_kernel<kInd, T><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop, bits, offset, lo, scale,
                                                                                       top, below, top_t, below_t);
      });
    }
  });
}

void CudaKernels::uniform_int(const Tensor& out, int64_t lo, int64_t hi, uint64_t seed, uint64_t offset) const {
  STRATA_CHECK(!out.is_floating_point(), "uniform_int does not support ", out.dtype());
  STRATA_CHECK(lo < hi, "uniform_int: expected lo < hi, got lo=", lo, " hi=", hi);
  if (out.numel() == 0) return;
  const Stream bits(seed, 0);
  const uint64_t first = static_cast<uint64_t>(lo), range = static_cast<uint64_t>(hi) - first;
  visit_cuda_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!is_floating_v<T>) {
      const Loop<1> loop = row_major_loop(out);
      launch_on(out, loop, [&]<Indexing kInd>(cudaStream_t stream) {
        uniform_int_kernel<kInd, T><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop, bits, offset, first, range);
      });
    }
  });
}

void CudaKernels::normal(const Tensor& out, double mean, double stddev, uint64_t seed, uint64_t offset) const {
  STRATA_CHECK(out.is_floating_point(), "normal does not support ", out.dtype());
  STRATA_CHECK(stddev >= 0, "normal: expected std >= 0, got ", stddev);
  if (out.numel() == 0) return;
  const Stream bits0(seed, 0), bits1(seed, 1);
  const Loop<1> loop = row_major_loop(out);
  visit_cuda_dtype(out.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      using W = acc_t<T>;
      launch_on(out, loop, [&]<Indexing kInd>(cudaStream_t stream) {
        normal_kernel<kInd, T><<<blocks_for(loop.numel), kThreads, 0, stream>>>(
            loop, bits0, bits1, offset, static_cast<W>(mean), static_cast<W>(stddev));
      });
    }
  });
}

void CudaKernels::multinomial(const Tensor& probs, const Tensor& out, uint64_t seed, uint64_t offset) const {
  check_multinomial_operands(probs, out);
  const int64_t rows = out.size(0), samples = out.size(1), categories = probs.size(1);
  if (out.numel() == 0) return;
  STRATA_CHECK(categories > 0, "multinomial: expected at least one category, got weights of shape ", probs.sizes());
  const Device device = out.device();
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  Tensor cumulative = empty({rows, categories}, TensorOptions(kDouble).device(device));
  visit_cuda_dtype(probs.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      constexpr auto kSize = static_cast<int64_t>(sizeof(T));
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
      cumulative_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const char*>(probs.data_ptr()), rows,
                                                            categories, probs.stride(0) * kSize,
                                                            probs.stride(1) * kSize, cumulative.data_ptr<double>());
      STRATA_CUDA_LAUNCH_CHECK();
    }
  });
  sample_kernel<<<blocks_for(out.numel()), kThreads, 0, stream>>>(
      cumulative.data_ptr<double>(), categories, samples, out.numel(), Stream(seed, 0), offset, out.data_ptr<int64_t>(),
      out.stride(0), out.stride(1));
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata::cuda
