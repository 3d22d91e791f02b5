#pragma once
// Internal to the row kernels of tensor/cuda (norm.cu, loss.cu): a group of threads per line, the reductions
// within a group, and the launcher that picks the group. A kernel templated on kGroup calls for_each_line and
// group_reduce; its launcher calls on_device and launch_lines.
//
//   for_each_line<kGroup>(rows, [&](int64_t r, int lane) {       // in the kernel
//     A sum = 0;
//     for (int64_t j = lane; j < N; j += kGroup) sum += convert<A>(x[r * N + j]);
//     sum = group_reduce<kGroup>(sum, Plus{});                    // every thread of the group has the row's sum
//   });
//   on_device("op", x, [&]<class T>(cudaStream_t stream) {        // in the launcher
//     launch_lines(rows, N, true, [&]<int kGroup>(unsigned blocks) { my_kernel<T, kGroup><<<...>>>(...); });
//   });
//
// Note [CUDA row kernels]: each kernel walks "lines", a softmax's outer * inner slices of `size` elements `inner`
// apart, a layer norm's M rows or cross entropy's N rows, and gives each line a group of kGroup consecutive threads
// on a grid-stride loop:
//   - kGroup 1 where lines are strided (inner > 1: consecutive threads take neighbouring lines, so a warp's loads
//     coalesce) or shorter than a warp;
//   - kGroup 32 (a warp) for contiguous lines up to kBlockRow, reduced by shuffles;
//   - kGroup kThreads (a block) for longer ones, the warps' results combined through shared memory.
// A group combines in the same fixed order in every thread and nothing uses atomics, so results are deterministic
// and every thread of a group sees the identical statistic.

#include <cuda/std/limits>

#include <cstdint>

#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

constexpr int64_t kBlockRow = 1024;  ///< contiguous lines at least this long get a block, shorter a warp

/// Softmax's statistics of some elements x: their maximum m and s = sum exp(x - m).
template <class A>
struct MaxSum {
  A m, s;
};

/// The statistics of two sets of elements together; symmetric in a and b, so every lane of a butterfly agrees. A NaN
/// or +inf element makes them NaN, as exp(x - max) does on the CPU (fmax alone would drop a NaN).
template <class A>
__device__ inline MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  constexpr A kInf = ::cuda::std::numeric_limits<A>::infinity();
  if (isnan(a.m) || isnan(b.m) || a.m == kInf || b.m == kInf) {
    const A nan = ::cuda::std::numeric_limits<A>::quiet_NaN();
    return {nan, nan};
  }
  const A m = fmax(a.m, b.m);
  if (m == -kInf) return {m, a.s + b.s};  // exp(-inf - -inf) would be NaN
  return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
}

/// merge, for group_reduce.
struct Merge {
  template <class A>
  __device__ MaxSum<A> operator()(MaxSum<A> a, MaxSum<A> b) const {
    return merge(a, b);
  }
};

/// a + b, for group_reduce.
struct Plus {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

/// v of the lane whose index differs from this one's in the bits of `lanes` (a butterfly step).
template <class A>
__device__ inline A shfl_xor(A v, int lanes) {
  return __shfl_xor_sync(kAllLanes, v, lanes);
}
template <class A>
__device__ inline MaxSum<A> shfl_xor(MaxSum<A> v, int lanes) {
  return {shfl_xor(v.m, lanes), shfl_xor(v.s, lanes)};
}

/// v combined over the kGroup threads of its group, in every one of them. The whole group must call it.
template <int kGroup, class V, class F>
__device__ inline V group_reduce(V v, F combine) {
  static_assert(kGroup == 1 || kGroup == kWarp || kGroup == kThreads, "a group is a thread, a warp or a block");
  if constexpr (kGroup > 1)
    for (int lanes = kWarp / 2; lanes > 0; lanes /= 2) v = combine(v, shfl_xor(v, lanes));
  if constexpr (kGroup == kThreads) {
    __shared__ V warps[kThreads / kWarp];
    __syncthreads();  // every thread has read the previous call's results
    if (threadIdx.x % kWarp == 0) warps[threadIdx.x / kWarp] = v;
    __syncthreads();
    v = warps[0];
    for (int w = 1; w < kThreads / kWarp; ++w) v = combine(v, warps[w]);
  }
  return v;
}

/// Calls f(line, lane) for every line in [0, count), kGroup threads per line (lane: the thread's place among them).
template <int kGroup, class F>
__device__ inline void for_each_line(int64_t count, F f) {
  constexpr int kGroups = kThreads / kGroup;
  const int lane = static_cast<int>(threadIdx.x % kGroup);
  for (int64_t l = int64_t{blockIdx.x} * kGroups + threadIdx.x / kGroup; l < count; l += int64_t{gridDim.x} * kGroups)
    f(l, lane);
}

/// Calls f.template operator()<T>(stream) with T the device type of t's dtype, on t's device and its current stream;
/// a dtype that is not floating is an error naming op.
template <class F>
void on_device(const char* op, const Tensor& t, const F& f) {
  const int device = t.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  visit_cuda_dtype(t.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>)
      f.template operator()<T>(stream);
    else
      STRATA_CHECK(false, op, " does not support ", t.dtype());
  });
}

/// Calls launch.template operator()<kGroup>(blocks) with the group of Note [CUDA row kernels] for `count` lines of
/// `length` elements, and checks the launch; nothing when there are no lines.
template <class F>
void launch_lines(int64_t count, int64_t length, bool contiguous, const F& launch) {
  if (count == 0) return;
  auto with_group = [&]<int kGroup>() {
    launch.template operator()<kGroup>(blocks_for(count * kGroup));
    STRATA_CUDA_LAUNCH_CHECK();
  };
  if (!contiguous || length < kWarp)
    with_group.template operator()<1>();
  else if (length < kBlockRow)
    with_group.template operator()<kWarp>();
  else
    with_group.template operator()<kThreads>();
}

}  // namespace strata::cuda
