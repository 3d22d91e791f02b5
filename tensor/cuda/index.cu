// CUDA kernels: gather and scatter_add along one dim, with the CPU's checks and messages
// (cpu/index.cpp). The index's range is checked by the kernels themselves (Note [index check]).
//
// Note [index check]: a kernel cannot throw, so an index outside [0, size) is skipped (memory is
// never touched out of bounds) and recorded in two int64 slots of a per-call buffer: the
// smallest and the largest bad value (atomicMin/atomicMax; in-range indices cost a compare).
// The host reads the slots back after the launch, which waits for the kernel (one host
// synchronisation per call: the price of an exception with the CPU's message, where libtorch's
// asynchronous device-side assert kills the context), and throws the smallest bad value when
// one is negative, else the largest, which is what the CPU's scan over all indices reports.
// scatter_add adds with atomics, so float sums into one element may round in any order: its
// results can differ in the last bits from run to run, unlike the CPU's.
// When it throws, the elements with good indices have been written (scatter_add has added
// them); the ops above write into a fresh tensor, so nothing the caller sees is left half done.

#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

// ---- kernels ----

/// Slot values when no kernel recorded a bad index: {smallest, largest}.
constexpr std::array<int64_t, 2> kNoBadIndex = {std::numeric_limits<int64_t>::max(),
                                                std::numeric_limits<int64_t>::min()};

__device__ inline void record_bad_index(int64_t* bad, int64_t j) {
  atomicMin(reinterpret_cast<long long*>(bad), static_cast<long long>(j));
  atomicMax(reinterpret_cast<long long*>(bad + 1), static_cast<long long>(j));
}

/// out[i] = in[i + index[i] * step] over loop (operands out, index, in with in's dim stride 0);
/// U is the element's bits (only moved).
template <Indexing kInd, class U>
__global__ void __launch_bounds__(kThreads) gather_kernel(Loop<3> loop, int64_t size, int64_t step, int64_t* bad) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += grid) {
    int64_t off[3];
    offsets_at<kInd>(loop, i, off);
    const int64_t j = *at<const int64_t>(loop, off, 1);
    if (j < 0 || j >= size) {
      record_bad_index(bad, j);
      continue;
    }
    *at<U>(loop, off, 0) = *reinterpret_cast<const U*>(loop.data[2] + off[2] + j * step);
  }
}

/// *p += v atomically; int64 adds as unsigned long long (two's complement wraps the same). CUDA has no 1- and
/// 2-byte atomicAdd: those integers add by compare-and-swap on the aligned 32-bit word that holds them.
template <class T>
__device__ inline void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_integral_v<T> && sizeof(T) < 4) {
    using Bits = std::make_unsigned_t<T>;
    const auto address = reinterpret_cast<uintptr_t>(p);
    auto* word = reinterpret_cast<unsigned int*>(address & ~uintptr_t{3});
    const unsigned shift = static_cast<unsigned>(address & 3) * 8, mask = unsigned{Bits(~Bits(0))} << shift;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const auto sum = static_cast<Bits>(static_cast<Bits>((assumed & mask) >> shift) + static_cast<Bits>(v));
      old = atomicCAS(word, assumed, (assumed & ~mask) | (unsigned{sum} << shift));
    } while (old != assumed);
  } else {
    atomicAdd(p, v);
  }
}

/// out[i + index[i] * step] += src[i] over loop (operands out with its dim stride 0, index, src).
template <Indexing kInd, class T>
__global__ void __launch_bounds__(kThreads) scatter_add_kernel(Loop<3> loop, int64_t size, int64_t step, int64_t* bad) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += grid) {
    int64_t off[3];
    offsets_at<kInd>(loop, i, off);
    const int64_t j = *at<const int64_t>(loop, off, 1);
    if (j < 0 || j >= size) {
      record_bad_index(bad, j);
      continue;
    }
    atomic_add(reinterpret_cast<T*>(loop.data[0] + off[0] + j * step), *at<const T>(loop, off, 2));
  }
}

// ---- launchers ----

/// The loop over index's shape of (a, index, b) with the given element strides; a and b hold
/// elem_size-byte elements, one of them with dim's stride zeroed (strides_without).
Loop<3> index_loop(const Tensor& a, IntArrayRef a_strides, const Tensor& index, const Tensor& b, IntArrayRef b_strides,
                   int64_t elem_size) {
  return make_loop<3>(
      index.sizes(),
      {static_cast<char*>(a.data_ptr()), static_cast<char*>(index.data_ptr()), static_cast<char*>(b.data_ptr())},
      {a_strides.data(), index.strides().data(), b_strides.data()},
      {elem_size, static_cast<int64_t>(sizeof(int64_t)), elem_size});
}

/// Runs launch(bad, stream) on device with fresh bad-index slots, waits for it and throws the
/// CPU's message when a kernel recorded an index outside [0, size) (Note [index check]).
template <class F>
void run_checked(const CudaKernels& table, Device device, const char* op, int64_t dim, int64_t size, const F& launch) {
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  auto* slots = static_cast<int64_t*>(table.allocate(device, sizeof(kNoBadIndex)));
  std::array<int64_t, 2> bad;
  try {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(slots, kNoBadIndex.data(), sizeof(kNoBadIndex), cudaMemcpyHostToDevice, stream));
    launch(slots, stream);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(bad.data(), slots, sizeof(bad), cudaMemcpyDeviceToHost, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    table.deallocate(device, slots, sizeof(kNoBadIndex));
    throw;
  }
  table.deallocate(device, slots, sizeof(kNoBadIndex));
  STRATA_CHECK(bad == kNoBadIndex, op, ": index ", bad[0] < 0 ? bad[0] : bad[1], " is out of bounds for dim ", dim,
               " with size ", size);
}

}  // namespace

void CudaKernels::gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) const {
  if (in.dim() == 0) return gather(as_1d(in), dim, as_1d(index), as_1d(out));
  dim = wrap_dim(dim, in.dim(), "gather");
  check_index_operands(index, in, out, dim, "gather");
  if (index.numel() == 0) return;
  const int64_t size = in.size(dim);
  visit_bits_type(in.dtype(), [&]<class U>() {
    constexpr auto kSize = static_cast<int64_t>(sizeof(U));
    const DimVector in_strides = strides_without(in, dim);
    const Loop<3> loop = index_loop(out, out.strides(), index, in, in_strides, kSize);
    const int64_t step = in.stride(dim) * kSize;
    run_checked(*this, out.device(), "gather", dim, size, [&](int64_t* bad, cudaStream_t stream) {
      visit_indexing(loop, [&]<Indexing kInd>() {
        gather_kernel<kInd, U><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop, size, step, bad);
        STRATA_CUDA_LAUNCH_CHECK();
      });
    });
  });
}

void CudaKernels::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) const {
  if (out.dim() == 0) return scatter_add(as_1d(out), dim, as_1d(index), as_1d(src));
  dim = wrap_dim(dim, out.dim(), "scatter_add");
  check_index_operands(index, out, src, dim, "scatter_add");
  STRATA_CHECK(out.dtype() != kBool, "scatter_add does not support ", out.dtype());
  if (index.numel() == 0) return;
  if (is_reduced_floating_point(out.dtype())) {
    // Note [16-bit scatter_add]: a 16-bit atomic rounds after every add (a bfloat16 sum of 1000 ones
    // stops at 256), so the sums run in float32 and round once, as every other 16-bit op here.
    Tensor acc = empty(out.sizes(), TensorOptions(kFloat).device(out.device()));
    Tensor src32 = empty(src.sizes(), TensorOptions(kFloat).device(src.device()));
    copy(out, acc);
    copy(src, src32);
    scatter_add(acc, dim, index, src32);
    return copy(acc, out);
  }
  const int64_t size = out.size(dim);
  visit_cuda_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool> && !is_reduced_v<T>) {
      constexpr auto kSize = static_cast<int64_t>(sizeof(T));
      const DimVector out_strides = strides_without(out, dim);
      const Loop<3> loop = index_loop(out, out_strides, index, src, src.strides(), kSize);
      const int64_t step = out.stride(dim) * kSize;
      run_checked(*this, out.device(), "scatter_add", dim, size, [&](int64_t* bad, cudaStream_t stream) {
        visit_indexing(loop, [&]<Indexing kInd>() {
          scatter_add_kernel<kInd, T><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop, size, step, bad);
          STRATA_CUDA_LAUNCH_CHECK();
        });
      });
    }
  });
}

}  // namespace strata::cuda
