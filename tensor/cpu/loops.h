#pragma once
// Internal to tensor/cpu: the strided N-d loop every elementwise kernel runs on (a small
// version of PyTorch's TensorIterator).
//
//   auto loop = cpu::make_loop<3>({&out, &a, &b});
//   cpu::for_each(loop, [](char* const* data, const int64_t* strides, int64_t n) {
//     cpu::map_inner<float, float, float>(data, strides, n, [](float x, float y) { return x + y; });
//   });
//
// make_loop (tensor/iteration.h, shared with the CUDA kernels) drops size-1 dims and merges the
// rest as far as the strides allow. for_each calls the inner function with each operand's
// pointer, its inner byte stride and an element count, on OpenMP threads only above
// kParallelThreshold elements, and in cache-sized tiles when an operand is read or written
// across its rows (transposes). Nothing here allocates.

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <type_traits>
#include <utility>

#include "strata/tensor/iteration.h"
#include "strata/tensor/kernels.h"

namespace strata::cpu {

/// Below this many elements a kernel runs on the calling thread.
constexpr int64_t kParallelThreshold = 32768;
/// x != x: true only for a floating NaN (integers and bool are never NaN). Max and min use it to
/// propagate NaN, as libtorch does.
template <class T>
constexpr bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

/// x + alpha * y, as add with alpha and the fused optimizer steps compute it: one rounding (an FMA) where the
/// CPU has the instruction, two where it has not. Spelled out because GCC's contraction of `x + alpha * y` is
/// not a promise: it contracts in the Release build and not in the sanitizer build (-O2 with ASan), so the
/// two paths would agree bit for bit in one build and not the other.
template <class T>
inline T multiply_add(T alpha, T y, T x) {
#ifdef __FMA__
  if constexpr (std::is_floating_point_v<T>) return std::fma(alpha, y, x);
#endif
  return x + alpha * y;
}

/// True when work over `numel` elements should be split across OpenMP threads.
inline bool use_threads(int64_t numel) {
  return numel >= kParallelThreshold && !omp_in_parallel() && omp_get_max_threads() > 1;
}

/// Runs f over the linear positions [begin, end) of g, one inner run at a time.
template <int N, class F>
void run_range(const Loop<N>& g, int64_t begin, int64_t end, const F& f) {
  const int inner = g.ndim - 1;
  char* ptr[N];
  if (inner == 0) {
    for (int k = 0; k < N; ++k) ptr[k] = g.data[k] + begin * g.strides[0][k];
    f(ptr, g.strides[0], end - begin);
    return;
  }
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int d = inner; d >= 0; --d) {
    idx[d] = rem % g.sizes[d];
    rem /= g.sizes[d];
  }
  for (int k = 0; k < N; ++k) {
    ptr[k] = g.data[k];
    for (int d = 0; d <= inner; ++d) ptr[k] += idx[d] * g.strides[d][k];
  }
  for (int64_t pos = begin; pos < end;) {
    int64_t n = std::min(g.sizes[inner] - idx[inner], end - pos);
    f(ptr, g.strides[inner], n);
    pos += n;
    idx[inner] += n;
    for (int k = 0; k < N; ++k) ptr[k] += n * g.strides[inner][k];
    for (int d = inner; d > 0 && idx[d] == g.sizes[d]; --d) {
      for (int k = 0; k < N; ++k) ptr[k] += g.strides[d - 1][k] - idx[d] * g.strides[d][k];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

/// Edge of the square tiles used when an operand walks its inner dim with a long stride.
constexpr int64_t kTile = 64;

/// True when some operand jumps at least a few cache lines per inner step (a transposed read
/// or write): then for_each walks the two inner dims in kTile x kTile tiles so the lines
/// fetched for one row of a tile are still cached for the next.
template <int N>
bool wants_tiles(const Loop<N>& g) {
  const int inner = g.ndim - 1;
  if (inner < 1 || g.sizes[inner] < kTile / 4 || g.sizes[inner - 1] < kTile / 4) return false;
  for (int k = 0; k < N; ++k)
    if (std::abs(g.strides[inner][k]) >= 256) return true;
  return false;
}

/// Runs f over tiles [begin, end) of g: tile t covers a kTile x kTile block of the two inner dims.
template <int N, class F>
void run_tiles(const Loop<N>& g, int64_t begin, int64_t end, const F& f) {
  const int inner = g.ndim - 1, outer_dims = g.ndim - 2;
  const int64_t n0 = g.sizes[inner], n1 = g.sizes[inner - 1];
  const int64_t tiles0 = (n0 + kTile - 1) / kTile, tiles1 = (n1 + kTile - 1) / kTile;
  for (int64_t t = begin; t < end; ++t) {
    int64_t rest = t / (tiles0 * tiles1);
    const int64_t t1 = t / tiles0 % tiles1, t0 = t % tiles0;
    char* base[N];
    for (int k = 0; k < N; ++k)
      base[k] = g.data[k] + t1 * kTile * g.strides[inner - 1][k] + t0 * kTile * g.strides[inner][k];
    for (int d = outer_dims - 1; d >= 0; --d) {
      const int64_t i = rest % g.sizes[d];
      rest /= g.sizes[d];
      for (int k = 0; k < N; ++k) base[k] += i * g.strides[d][k];
    }
    const int64_t len0 = std::min(kTile, n0 - t0 * kTile), len1 = std::min(kTile, n1 - t1 * kTile);
    for (int64_t i1 = 0; i1 < len1; ++i1) {
      char* ptr[N];
      for (int k = 0; k < N; ++k) ptr[k] = base[k] + i1 * g.strides[inner - 1][k];
      f(ptr, g.strides[inner], len0);
    }
  }
}

/// Runs f over all of g, split across threads when numel * cost_per_element is large.
template <int N, class F>
void for_each(const Loop<N>& g, const F& f, int64_t cost_per_element = 1) {
  if (g.numel == 0) return;
  const bool parallel = use_threads(g.numel * cost_per_element);
  if (wants_tiles(g)) {
    const int inner = g.ndim - 1;
    const int64_t tiles = g.numel / (g.sizes[inner] * g.sizes[inner - 1]) * ((g.sizes[inner] + kTile - 1) / kTile) *
                          ((g.sizes[inner - 1] + kTile - 1) / kTile);
    if (parallel) {
#pragma omp parallel
      {
        int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        run_tiles(g, tiles * t / nt, tiles * (t + 1) / nt, f);
      }
    } else {
      run_tiles(g, 0, tiles, f);
    }
  } else if (parallel) {
#pragma omp parallel
    {
      int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      run_range(g, g.numel * t / nt, g.numel * (t + 1) / nt, f);
    }
  } else {
    run_range(g, 0, g.numel, f);
  }
}

/// Calls f(i) for i in [0, n), as an OpenMP static loop when `parallel`, else on this thread.
template <class F>
inline void parallel_for(int64_t n, bool parallel, const F& f) {
  if (parallel) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

/// Calls body(begin, end) over [0, rows), in one contiguous share per OpenMP thread when `numel` elements are
/// worth threading; a share is where a kernel keeps its scratch.
template <class F>
void for_rows(int64_t rows, int64_t numel, const F& body) {
  if (!use_threads(numel)) return body(int64_t{0}, rows);
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t share = (rows + threads - 1) / threads, begin = std::min(rows, t * share);
    body(begin, std::min(rows, begin + share));
  }
}

/// Calls f.template operator()<T>() for float and double; other dtypes are an error naming op.
template <class F>
void visit_floating(const char* op, ScalarType dtype, const F& f) {
  visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      f.template operator()<T>();
    else
      STRATA_CHECK(false, op, " does not support ", dtype);
  });
}

/// Calls body(offset) for every position of an nd-dim grid, offset = sum(index[d] * strides[d]).
template <class F>
inline void for_each_offset(int nd, const int64_t* sizes, const int64_t* strides, const F& body) {
  int64_t count = 1;
  for (int d = 0; d < nd; ++d) count *= sizes[d];
  int64_t idx[kMaxDims] = {};
  int64_t off = 0;
  for (int64_t i = 0; i < count; ++i) {
    body(off);
    for (int d = nd - 1; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
}

/// Offset of linear position i (row-major over sizes) under strides.
inline int64_t offset_of(int64_t i, int nd, const int64_t* sizes, const int64_t* strides) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

namespace detail {
// Note [ivdep]: out may be one of the inputs (in-place ops write x[i] = f(x[i], ...)), which
// defeats the compiler's overlap test and would leave these loops scalar. Element i only reads
// index i (or a stride-0 scalar), so there is no loop-carried dependence to respect.
template <class Out, class... In, class F, size_t... I>
inline void map_inner(std::index_sequence<I...>, char* const* d, const int64_t* s, int64_t n, const F& f) {
  Out* out = reinterpret_cast<Out*>(d[0]);
  std::tuple<const In*...> in{reinterpret_cast<const In*>(d[I + 1])...};
  const bool out_unit = s[0] == sizeof(Out);
  if (out_unit && ((s[I + 1] == sizeof(In)) && ...)) {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) out[i] = f(std::get<I>(in)[i]...);
    return;
  }
  if constexpr (sizeof...(In) == 1) {
    if (out_unit && s[1] == 0) {
      const Out v = f(*std::get<0>(in));
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) out[i] = v;
      return;
    }
  } else if constexpr (sizeof...(In) == 2) {
    const auto* a = std::get<0>(in);
    const auto* b = std::get<1>(in);
    if (out_unit && s[1] == sizeof(*a) && s[2] == 0) {
      const auto bv = *b;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], bv);
      return;
    }
    if (out_unit && s[1] == 0 && s[2] == sizeof(*b)) {
      const auto av = *a;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) out[i] = f(av, b[i]);
      return;
    }
  } else if constexpr (sizeof...(In) == 3) {  // where(cond, x, scalar) and where(cond, scalar, x)
    const auto* c = std::get<0>(in);
    const auto* a = std::get<1>(in);
    const auto* b = std::get<2>(in);
    if (out_unit && s[1] == sizeof(*c) && s[2] == sizeof(*a) && s[3] == 0) {
      const auto bv = *b;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) out[i] = f(c[i], a[i], bv);
      return;
    }
    if (out_unit && s[1] == sizeof(*c) && s[2] == 0 && s[3] == sizeof(*b)) {
      const auto av = *a;
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) out[i] = f(c[i], av, b[i]);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<Out*>(d[0] + i * s[0]) = f(*reinterpret_cast<const In*>(d[I + 1] + i * s[I + 1])...);
}
}  // namespace detail

/// One inner run of out = f(in...): unit strides (and, for one to three inputs, a stride-0
/// scalar) take loops the compiler vectorises; anything else walks the byte strides.
template <class Out, class... In, class F>
inline void map_inner(char* const* data, const int64_t* strides, int64_t n, const F& f) {
  detail::map_inner<Out, In...>(std::index_sequence_for<In...>{}, data, strides, n, f);
}

}  // namespace strata::cpu
