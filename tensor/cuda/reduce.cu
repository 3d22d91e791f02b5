// CUDA kernels: reductions over dims (reduce) and along one dim with indices (arg_reduce).
//
// Note [CUDA reduction geometry]: reduce views its problem as O outputs, each combining R
// elements. The host splits make_loop's dims into kept dims (out has a stride there) and reduced
// dims (out's stride is 0), both outermost first with byte strides, so output o starts at
// offset_of(o, kept) and its element r sits at offset_of(r, reduced) from there. One kernel,
// reduce_kernel<kGroup>, gives each output a group of kGroup threads:
//   - kGroup 32 or 256 (rows): the innermost dim (smallest input stride) is reduced and at least
//     kMinRow long, so the group's lanes read neighbouring elements of one output;
//   - kGroup 1 (columns): otherwise, consecutive threads take consecutive outputs, which are
//     neighbours along the innermost dim, so a warp's loads coalesce (sum over dim 0 of [R, O]).
// When that leaves too few blocks to fill the GPU (few outputs, long reductions), blockIdx.y
// splits R into slices: pass 1 writes one partial per (output, slice) into a scratch tensor of
// the accumulation type, pass 2 runs the same kernel over the partials.
//
// Note [CUDA deterministic reductions]: the slices, the element each thread reads and the
// shuffle tree depend only on the shapes and strides, never on timing or on the GPU model, and
// no atomics are used, so the same input always gives bit-identical output.

#include <cuda/std/limits>

#include <algorithm>
#include <type_traits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

/// Shortest innermost reduced run read by a warp per output; shorter ones go one thread per output.
constexpr int64_t kMinRow = 32;
/// Rows at least this long get a whole block per output.
constexpr int64_t kBlockRow = 4096;
/// Fewest elements per slice: 32 per thread of a block (rows), 128 per thread (columns).
constexpr int64_t kMinRowSlice = 32 * kThreads;
constexpr int64_t kMinColumnSlice = 128;

/// Accumulator, as on the CPU: double for float sums and products (float for the 16-bit floats),
/// int64 for integer and bool ones, acc_t<T> for max and min.
template <ReduceKind kOp, class T>
using reduce_acc_t = std::conditional_t<
    kOp == ReduceKind::Sum || kOp == ReduceKind::Prod,
    std::conditional_t<is_reduced_v<T>, float, std::conditional_t<is_floating_v<T>, double, int64_t>>, acc_t<T>>;

/// O outputs of R elements each (see Note [CUDA reduction geometry]); byte strides, plain data.
struct Geometry {
  const char* in = nullptr;
  char* out = nullptr;
  int nk = 0, nr = 0;        ///< kept and reduced dims, outermost first
  int64_t outputs = 1;       ///< O
  int64_t reduced = 1;       ///< R
  int64_t slice = 1;         ///< elements per slice (blockIdx.y); R when not split
  int64_t slice_stride = 0;  ///< bytes between the partials of one output in pass 1
  int64_t ksize[kMaxDims], kin[kMaxDims], kout[kMaxDims];
  int64_t rsize[kMaxDims], rin[kMaxDims];
};

/// Byte offset of linear position i (row-major over sizes[0, n)); the outermost dim needs no modulo.
__host__ __device__ inline int64_t offset_of(int64_t i, int n, const int64_t* sizes, const int64_t* strides) {
  int64_t off = 0;
  for (int d = n - 1; d > 0; --d) {
    off += i % sizes[d] * strides[d];
    i /= sizes[d];
  }
  return n > 0 ? off + i * strides[0] : 0;
}

template <class V>
__device__ inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}

template <ReduceKind kOp, class A>
__device__ inline A identity() {
  using L = ::cuda::std::numeric_limits<A>;
  if constexpr (kOp == ReduceKind::Sum)
    return A(0);
  else if constexpr (kOp == ReduceKind::Prod)
    return A(1);
  else if constexpr (!L::has_infinity)
    return kOp == ReduceKind::Max ? L::lowest() : L::max();
  else
    return kOp == ReduceKind::Max ? -L::infinity() : L::infinity();
}

/// Combines two partial results as the CPU does; max and min propagate NaN.
template <ReduceKind kOp>
struct Combine {
  template <class A>
  __device__ A operator()(A a, A b) const {
    if constexpr (kOp == ReduceKind::Sum)
      return a + b;
    else if constexpr (kOp == ReduceKind::Prod)
      return a * b;
    else if constexpr (kOp == ReduceKind::Max)
      return (a > b || is_nan(a)) ? a : b;
    else
      return (a < b || is_nan(a)) ? a : b;
  }
};

/// A candidate of arg_reduce: a value and its index along the dim; index -1 when none was seen.
template <class V>
struct Arg {
  V value;
  int64_t index;
};

/// True when v replaces b as the extreme: strictly beyond it, or NaN where b is not.
template <ReduceKind kOp, class V>
__device__ inline bool beats(V v, V b) {
  const bool beyond = kOp == ReduceKind::Max ? v > b : v < b;
  return beyond || (is_nan(v) && !is_nan(b));
}

/// Combines two candidates: the extreme wins, NaN wins, and of two equal ones (or two NaNs) the
/// first index, so the result is the CPU's serial scan whatever the order of combination.
template <ReduceKind kOp>
struct ArgCombine {
  template <class V>
  __device__ Arg<V> operator()(Arg<V> a, Arg<V> b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    const bool take_b = beats<kOp>(b.value, a.value) || (!beats<kOp>(a.value, b.value) && b.index < a.index);
    return take_b ? b : a;
  }
};

template <class V>
__device__ inline V shfl_down(V v, int delta) {
  if constexpr (std::is_same_v<V, bool>)
    return __shfl_down_sync(0xffffffffu, static_cast<int>(v), delta) != 0;
  else
    return __shfl_down_sync(0xffffffffu, v, delta);
}
template <class V>
__device__ inline Arg<V> shfl_down(Arg<V> a, int delta) {
  return {shfl_down(a.value, delta), shfl_down(a.index, delta)};
}

/// Combines v over a group of kGroup consecutive threads (1, 32 or the whole block) in a fixed
/// tree; the result is valid in the group's first thread. Every thread of the group must call it.
template <int kGroup, class V, class F>
__device__ inline V group_reduce(V v, V empty, F combine, V* warp_results) {
  static_assert(kGroup == 1 || kGroup == 32 || kGroup == kThreads);
  if constexpr (kGroup > 1) {
    for (int d = 16; d > 0; d /= 2) v = combine(v, shfl_down(v, d));
    if constexpr (kGroup == kThreads) {
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      if (lane == 0) warp_results[warp] = v;
      __syncthreads();
      v = lane < kThreads / 32 ? warp_results[lane] : empty;
      for (int d = 16; d > 0; d /= 2) v = combine(v, shfl_down(v, d));
      __syncthreads();  // warp_results is refilled for the block's next output
    }
  }
  return v;
}

/// Reduces slice blockIdx.y of every output of g, kGroup threads per output, reading T,
/// accumulating in A and writing OutT (the final dtype, or A into a partial buffer).
template <ReduceKind kOp, class T, class A, class OutT, int kGroup>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const Geometry g) {
  constexpr int kGroups = kThreads / kGroup;
  __shared__ A warp_results[kThreads / 32];
  const int lane = threadIdx.x % kGroup;
  const int64_t begin = blockIdx.y * g.slice, end = min(begin + g.slice, g.reduced);
  for (int64_t o = int64_t{blockIdx.x} * kGroups + threadIdx.x / kGroup; o < g.outputs;
       o += int64_t{gridDim.x} * kGroups) {
    const char* base = g.in + offset_of(o, g.nk, g.ksize, g.kin);
    A acc = identity<kOp, A>();
    for (int64_t r = begin + lane; r < end; r += kGroup)
      acc = Combine<kOp>{}(acc, convert<A>(*reinterpret_cast<const T*>(base + offset_of(r, g.nr, g.rsize, g.rin))));
    acc = group_reduce<kGroup>(acc, identity<kOp, A>(), Combine<kOp>{}, warp_results);
    if (lane == 0)
      *reinterpret_cast<OutT*>(g.out + offset_of(o, g.nk, g.ksize, g.kout) + blockIdx.y * g.slice_stride) =
          convert<OutT>(acc);
  }
}

/// For every element of g's shape (values, indices, in), the first extreme of the `len` elements
/// `step` bytes apart in `in`, kGroup threads per output.
template <ReduceKind kOp, class T, int kGroup>
__global__ void __launch_bounds__(kThreads) arg_reduce_kernel(const Loop<3> g, int64_t len, int64_t step) {
  using V = acc_t<T>;
  constexpr int kGroups = kThreads / kGroup;
  __shared__ Arg<V> warp_results[kThreads / 32];
  const int lane = threadIdx.x % kGroup;
  for (int64_t o = int64_t{blockIdx.x} * kGroups + threadIdx.x / kGroup; o < g.numel;
       o += int64_t{gridDim.x} * kGroups) {
    int64_t off[3];
    offsets_of(g, o, off);
    Arg<V> best{V(), -1};
    const char* q = g.data[2] + off[2] + lane * step;
    for (int64_t j = lane; j < len; j += kGroup, q += kGroup * step) {  // j grows: a lane keeps its first extreme
      const V v = convert<V>(*reinterpret_cast<const T*>(q));
      if (best.index < 0 || beats<kOp>(v, best.value)) best = {v, j};
    }
    best = group_reduce<kGroup>(best, Arg<V>{V(), -1}, ArgCombine<kOp>{}, warp_results);
    if (lane == 0) {
      *at<T>(g, off, 0) = convert<T>(best.value);
      *at<int64_t>(g, off, 1) = best.index;
    }
  }
}

template <ReduceKind kOp, class T, class A, class OutT, int kGroup>
void launch_reduce(const Geometry& g, int64_t slices, cudaStream_t stream) {
  const dim3 grid(blocks_for(g.outputs * kGroup), static_cast<unsigned>(slices));
  reduce_kernel<kOp, T, A, OutT, kGroup><<<grid, kThreads, 0, stream>>>(g);
  STRATA_CUDA_LAUNCH_CHECK();
}

/// Splits loop's dims into kept and reduced ones (reduced: out's stride is 0).
Geometry geometry_of(const Loop<2>& loop) {
  Geometry g;
  g.in = loop.data[0];
  g.out = loop.data[1];
  for (int d = 0; d < loop.ndim; ++d) {
    if (loop.strides[d][1] == 0 && loop.sizes[d] > 1) {
      g.rsize[g.nr] = loop.sizes[d];
      g.rin[g.nr++] = loop.strides[d][0];
      g.reduced *= loop.sizes[d];
    } else {
      g.ksize[g.nk] = loop.sizes[d];
      g.kin[g.nk] = loop.strides[d][0];
      g.kout[g.nk++] = loop.strides[d][1];
      g.outputs *= loop.sizes[d];
    }
  }
  g.slice = g.reduced;
  return g;
}

/// Reduces as loop says (operand 1 has stride 0 on the reduced dims); see Note [CUDA reduction geometry].
template <ReduceKind kOp, class T, class OutT>
void reduce_loop(const Loop<2>& loop, Device device, cudaStream_t stream) {
  using A = reduce_acc_t<kOp, T>;
  Geometry g = geometry_of(loop);
  const int inner = loop.ndim - 1;
  const bool rows = loop.strides[inner][1] == 0 && loop.sizes[inner] >= kMinRow;
  if (rows && g.reduced < kBlockRow) return launch_reduce<kOp, T, A, OutT, 32>(g, 1, stream);

  g.slice = rows ? slice_length(g.reduced, g.outputs, kMinRowSlice)
                 : slice_length(g.reduced, ceil_div(g.outputs, kThreads), kMinColumnSlice);
  const int64_t slices = ceil_div(g.reduced, g.slice);
  if (slices == 1) {
    if (rows) return launch_reduce<kOp, T, A, OutT, kThreads>(g, 1, stream);
    return launch_reduce<kOp, T, A, OutT, 1>(g, 1, stream);
  }
  // Two passes. Partials are laid out [O, S] for rows (pass 2 reads each output's partials
  // contiguously, a warp per output) and [S, O] for columns (pass 2 reads them by columns).
  Tensor partial = empty({g.outputs * slices}, TensorOptions(scalar_type_of<A>()).device(device));
  Geometry first = g;
  first.out = static_cast<char*>(partial.data_ptr());
  first.slice_stride = rows ? int64_t{sizeof(A)} : g.outputs * int64_t{sizeof(A)};
  for (int64_t d = g.nk - 1, unit = rows ? slices * int64_t{sizeof(A)} : int64_t{sizeof(A)}; d >= 0; --d) {
    first.kout[d] = unit;
    unit *= g.ksize[d];
  }
  Geometry second = g;
  second.in = first.out;
  std::copy_n(first.kout, g.nk, second.kin);
  second.nr = 1;
  second.rsize[0] = second.reduced = second.slice = slices;
  second.rin[0] = first.slice_stride;
  if (rows) {
    launch_reduce<kOp, T, A, A, kThreads>(first, slices, stream);
    launch_reduce<kOp, A, A, OutT, 32>(second, 1, stream);
  } else {
    launch_reduce<kOp, T, A, A, 1>(first, slices, stream);
    launch_reduce<kOp, A, A, OutT, 1>(second, 1, stream);
  }
}  // partial is freed on the stream after pass 2 (Note [CUDA streams])

template <ReduceKind kOp, class T, int kGroup>
void launch_arg_reduce(const Loop<3>& loop, int64_t len, int64_t step, cudaStream_t stream) {
  arg_reduce_kernel<kOp, T, kGroup><<<blocks_for(loop.numel * kGroup), kThreads, 0, stream>>>(loop, len, step);
  STRATA_CUDA_LAUNCH_CHECK();
}

template <ReduceKind kOp, class T>
void arg_reduce_loop(const Loop<3>& loop, int64_t len, int64_t step, cudaStream_t stream) {
  // Groups of threads only pay off when their lanes read neighbouring elements.
  const bool contiguous = step == int64_t{sizeof(T)};
  if (contiguous && len >= kBlockRow)
    launch_arg_reduce<kOp, T, kThreads>(loop, len, step, stream);
  else if (contiguous && len >= kMinRow)
    launch_arg_reduce<kOp, T, 32>(loop, len, step, stream);
  else
    launch_arg_reduce<kOp, T, 1>(loop, len, step, stream);
}

}  // namespace

void CudaKernels::reduce(ReduceKind op, const Tensor& in, IntArrayRef dims, const Tensor& out) const {
  const char* name = to_string(op);
  const bool sum_like = op == ReduceKind::Sum || op == ReduceKind::Prod;
  const DimVector out_strides = check_reduce_operands(op, in, dims, out);
  if (out.numel() == 0) return;
  if (in.numel() == 0) {
    STRATA_CHECK(sum_like, name, "(): cannot reduce over a zero-size dimension");
    return fill(out, op == ReduceKind::Sum ? 0 : 1);
  }
  const Device device = in.device();
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  auto loop = make_loop<2>(in.sizes(), {static_cast<char*>(in.data_ptr()), static_cast<char*>(out.data_ptr())},
                           {in.strides().data(), out_strides.data()},
                           {static_cast<int64_t>(in.element_size()), static_cast<int64_t>(out.element_size())});
  visit_cuda_dtype(in.dtype(), [&]<class T>() {
    using SumT = std::conditional_t<is_floating_v<T>, T, int64_t>;  // integer and bool sums are Long
    switch (op) {
      case ReduceKind::Sum:
        return reduce_loop<ReduceKind::Sum, T, SumT>(loop, device, stream);
      case ReduceKind::Prod:
        return reduce_loop<ReduceKind::Prod, T, SumT>(loop, device, stream);
      case ReduceKind::Max:
        return reduce_loop<ReduceKind::Max, T, T>(loop, device, stream);
      case ReduceKind::Min:
        return reduce_loop<ReduceKind::Min, T, T>(loop, device, stream);
    }
  });
}

void CudaKernels::arg_reduce(ReduceKind op, const Tensor& in, int64_t dim, const Tensor& values,
                             const Tensor& indices) const {
  const char* name = to_string(op);
  dim = check_arg_reduce_operands(op, in, dim, values, indices);
  const bool scalar = in.dim() == 0;  // one element; dim 0 names it
  if (values.numel() == 0) return;
  const int64_t len = scalar ? 1 : in.size(dim);
  STRATA_CHECK(len > 0, name, "(): cannot reduce over a zero-size dimension");
  const int device = values.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  visit_cuda_dtype(in.dtype(), [&]<class T>() {
    const int64_t step = scalar ? 0 : in.stride(dim) * int64_t{sizeof(T)};
    // Iterate over values' shape (dim has size 1 there, so it drops out) and scan dim per element.
    auto loop = make_loop<3>(values.sizes(),
                             {static_cast<char*>(values.data_ptr()), static_cast<char*>(indices.data_ptr()),
                              static_cast<char*>(in.data_ptr())},
                             {values.strides().data(), indices.strides().data(), in.strides().data()},
                             {int64_t{sizeof(T)}, int64_t{sizeof(int64_t)}, int64_t{sizeof(T)}});
    if (op == ReduceKind::Max)
      arg_reduce_loop<ReduceKind::Max, T>(loop, len, step, stream);
    else
      arg_reduce_loop<ReduceKind::Min, T>(loop, len, step, stream);
  });
}

}  // namespace strata::cuda
