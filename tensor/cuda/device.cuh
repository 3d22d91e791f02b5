#pragma once
// Internal to tensor/cuda/*.cu: what the kernel files share. Device element types and the dtype
// switch, the accumulation type, turning a Loop's linear index into byte offsets (by a multiply
// when the loop has one dim, else by division in 32- or 64-bit math: Indexing), and the launch
// shape of a flat kernel.
//
//   auto loop = make_loop<2>({&out, &in});
//   visit_cuda_dtype(out.dtype(), [&]<class T>() {
//     visit_indexing(loop, [&]<Indexing kInd>() {   // my_kernel calls offsets_at<kInd>(loop, i, off)
//       my_kernel<kInd, T><<<blocks_for(loop.numel), kThreads, 0, current_stream(d)>>>(loop);
//       STRATA_CUDA_LAUNCH_CHECK();
//     });
//   });

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "strata/tensor/cuda/cuda_kernels.h"
#include "strata/tensor/iteration.h"

namespace strata::cuda {

/// Threads per block of the flat kernels.
constexpr int kThreads = 256;

/// Blocks of kThreads covering n elements, capped where a grid-stride loop takes over.
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Blocks a sliced reduction aims for: enough to fill any current GPU several times over.
constexpr int64_t kTargetBlocks = 1024;

/// Slice length for `reduced` elements summed by `blocks` blocks: none (all of them) unless the GPU would sit idle,
/// and never under min_slice. Depends on the shapes alone, so sliced sums stay deterministic.
inline int64_t slice_length(int64_t reduced, int64_t blocks, int64_t min_slice) {
  const int64_t slices = std::max<int64_t>(1, std::min(ceil_div(kTargetBlocks, blocks), ceil_div(reduced, min_slice)));
  return ceil_div(reduced, slices);
}

/// Calls f.template operator()<T>() with T the device type of `t`: bool, uint8_t, int8_t, int16_t, int32_t,
/// int64_t, float, double, __half (Half) or __nv_bfloat16 (BFloat16).
template <class F>
decltype(auto) visit_cuda_dtype(ScalarType t, F&& f) {
  switch (t) {
    case kHalf:
      return f.template operator()<__half>();
    case kBFloat16:
      return f.template operator()<__nv_bfloat16>();
    default:
      return visit_dtype(t, std::forward<F>(f));
  }
}

/// True for the 16-bit device float types.
template <class T>
constexpr bool is_reduced_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
/// True for every device floating type.
template <class T>
constexpr bool is_floating_v = std::is_floating_point_v<T> || is_reduced_v<T>;

/// The type arithmetic on T runs in: float for the 16-bit floats, T otherwise.
template <class T>
using acc_t = std::conditional_t<is_reduced_v<T>, float, T>;

/// Converts between device types through float for the 16-bit floats.
template <class To, class From>
__host__ __device__ inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_reduced_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return element_cast<To>(v);  // floating into narrow integers through int64, as the CPU
  }
}

/// Byte offsets of linear position i (row-major over g's sizes) for every operand of g, in Index
/// arithmetic (int64_t, or int32_t where indexing_for(g) says kNarrow).
template <class Index, int N>
__device__ inline void offsets_of(const Loop<N>& g, std::type_identity_t<Index> i, Index (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const auto size = static_cast<Index>(g.sizes[d]);
    const Index idx = i % size;
    i /= size;
    for (int k = 0; k < N; ++k) off[k] += idx * static_cast<Index>(g.strides[d][k]);
  }
}

/// Pointer to operand k of g at the byte offsets off (from offsets_of or offsets_at), as T*.
template <class T, class Index, int N>
__device__ inline T* at(const Loop<N>& g, const Index (&off)[N], int k) {
  return reinterpret_cast<T*>(g.data[k] + off[k]);
}

/// How a kernel turns a linear position into byte offsets: kFlat multiplies (g has one dim, no
/// division at all), kNarrow divides in int32 (numel and every operand's byte extent fit),
/// kWide divides in int64.
enum class Indexing { kFlat, kNarrow, kWide };

/// The cheapest Indexing that is exact for g.
template <int N>
Indexing indexing_for(const Loop<N>& g) {
  if (g.ndim <= 1) return Indexing::kFlat;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (g.numel > kMax) return Indexing::kWide;
  for (int k = 0; k < N; ++k) {
    int64_t extent = 0;
    for (int d = 0; d < g.ndim; ++d) extent += (g.sizes[d] - 1) * std::abs(g.strides[d][k]);
    if (extent > kMax) return Indexing::kWide;
  }
  return Indexing::kNarrow;
}

/// Calls f.template operator()<kInd>() with kInd = indexing_for(g).
template <int N, class F>
void visit_indexing(const Loop<N>& g, F&& f) {
  switch (indexing_for(g)) {
    case Indexing::kFlat:
      return f.template operator()<Indexing::kFlat>();
    case Indexing::kNarrow:
      return f.template operator()<Indexing::kNarrow>();
    case Indexing::kWide:
      return f.template operator()<Indexing::kWide>();
  }
}

/// Byte offsets of linear position i for every operand of g, computed the kInd way.
template <Indexing kInd, int N>
__device__ inline void offsets_at(const Loop<N>& g, int64_t i, int64_t (&off)[N]) {
  if constexpr (kInd == Indexing::kFlat) {
    for (int k = 0; k < N; ++k) off[k] = i * g.strides[0][k];
  } else if constexpr (kInd == Indexing::kNarrow) {
    int32_t narrow[N];
    offsets_of<int32_t>(g, static_cast<int32_t>(i), narrow);
    for (int k = 0; k < N; ++k) off[k] = narrow[k];
  } else {
    offsets_of<int64_t>(g, i, off);
  }
}

/// Calls f.template operator()<U>() with U the unsigned integer type of t's element size, for
/// kernels that only move elements (where, gather): one instantiation serves several dtypes.
template <class F>
decltype(auto) visit_bits_type(ScalarType t, F&& f) {
  switch (element_size(t)) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

constexpr int kWarp = 32;                    ///< lanes of a warp
constexpr unsigned kAllLanes = 0xffffffffu;  ///< every lane takes part in the shuffles

/// t's elements as the device type T; null where t is undefined.
template <class T>
T* elements(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace strata::cuda
