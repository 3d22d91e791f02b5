// CUDA kernels: sort along one dim, whole slices (sort) or their first k (topk), through CUB's
// radix sorts, in the CPU's order (Note [sort order] in cpu/sort.cpp).
//
// Note [CUDA sort]: three steps on the current stream. (1) key_kernel reads `in` through its
// strides and writes each element's radix key and its position along dim into two dense
// [rows, len] buffers (dim last). (2) CUB sorts the (key, position) pairs of every row:
// DeviceRadixSort when there is one row (all of the GPU on it), else
// DeviceSegmentedSort::StableSortPairs, which picks a warp, a block or several passes per row by
// its length. Both are stable, so equal keys keep their order along dim, as the CPU's order asks.
// (3) take_kernel writes the first k positions of each sorted row to `indices`, and the elements of
// `in` at them to `values`: values are the input's own bits (a NaN's payload, -0.0). topk sorts whole
// rows and keeps k: a radix select would do less work when k is much smaller than a row, but
// sort-then-narrow shares one tested path with sort and gives exactly the CPU's choice among ties.
//
// A radix key is an unsigned integer of the element's size whose order is the value order:
// bool is 0 or 1; an unsigned integer is its bits; a signed one flips its sign bit; a float flips every bit when its sign is set, else
// only the sign bit, after -0.0 becomes +0.0 (equal values, equal keys), and every NaN becomes the
// largest key. Descending sorts use CUB's descending sorts, which are stable too.

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

/// The unsigned integer of T's size: T's radix key.
template <class T>
using radix_t = std::conditional_t<
    sizeof(T) == 1, uint8_t,
    std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

// ---- kernels ----

/// The radix key of the element at p (see the Note).
template <class T>
__device__ inline radix_t<T> radix_key(const char* p) {
  using K = radix_t<T>;
  const K bits = *reinterpret_cast<const K*>(p);
  if constexpr (std::is_same_v<T, bool>) {
    return bits != 0;
  } else {
    constexpr K kSign = K(1) << (8 * sizeof(K) - 1);
    if constexpr (std::is_unsigned_v<T>) {
      return bits;
    } else if constexpr (std::is_integral_v<T>) {
      return bits ^ kSign;
    } else {
      const auto v = convert<acc_t<T>>(*reinterpret_cast<const T*>(p));
      if (v != v) return static_cast<K>(~K(0));
      const K canonical = v == 0 ? K(0) : bits;  // -0.0 as +0.0
      return (canonical & kSign) ? static_cast<K>(~canonical) : static_cast<K>(canonical | kSign);
    }
  }
}

/// Over loop (operand 0: the dense key buffer viewed with in's sizes, operand 1: in), writes the key
/// of every element and, at the same position of `positions`, its index along dim (the key's
/// position in the buffer modulo len, since dim is the buffer's last).
template <Indexing kInd, class T>
__global__ void __launch_bounds__(kThreads) key_kernel(Loop<2> loop, int64_t len, int64_t* positions) {
  using K = radix_t<T>;
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += grid) {
    int64_t off[2];
    offsets_at<kInd>(loop, i, off);
    *at<K>(loop, off, 0) = radix_key<T>(loop.data[1] + off[1]);
    const int64_t e = off[0] / static_cast<int64_t>(sizeof(K));
    positions[e] = e % len;
  }
}

/// Over loop (values, indices, sorted positions, in with dim's stride 0) of values' shape: the
/// position j, and the element of `in` j * step bytes along dim; U is the element's bits (only moved).
template <Indexing kInd, class U>
__global__ void __launch_bounds__(kThreads) take_kernel(Loop<4> loop, int64_t step) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += grid) {
    int64_t off[4];
    offsets_at<kInd>(loop, i, off);
    const int64_t j = *at<const int64_t>(loop, off, 2);
    *at<U>(loop, off, 0) = *reinterpret_cast<const U*>(loop.data[3] + off[3] + j * step);
    *at<int64_t>(loop, off, 1) = j;
  }
}

// ---- launchers ----

/// Element strides of the dense buffer that holds a tensor of `sizes` with dim moved last, per dim of sizes.
DimVector dim_last_strides(IntArrayRef sizes, int64_t dim) {
  DimVector strides(sizes.size());
  int64_t step = sizes[dim];
  strides[dim] = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (d == dim) continue;
    strides[d] = step;
    step *= sizes[d];
  }
  return strides;
}

/// n bytes of device scratch memory (a Bool tensor), freed in stream order with the tensor.
Tensor scratch(Device device, int64_t n) { return empty({n}, TensorOptions(kBool).device(device)); }

/// Sorts the (key, position) pairs of each of `rows` rows of `len` (step 2 of Note [CUDA sort]) into the out buffers.
template <class K>
void sort_pairs(const K* keys, K* keys_out, const int64_t* positions, int64_t* positions_out, int64_t rows, int64_t len,
                bool descending, Device device, cudaStream_t stream) {
  const int64_t n = rows * len;
  Tensor offsets;  // row r is [offsets[r], offsets[r + 1])
  if (rows > 1) {
    offsets = empty({rows + 1}, TensorOptions(kLong).device(device));
    cuda_kernels().arange(offsets, 0, static_cast<double>(len));
  }
  const int64_t* begin = rows > 1 ? offsets.data_ptr<int64_t>() : nullptr;
  constexpr int kBits = 8 * sizeof(K);
  size_t bytes = 0;
  auto run = [&](void* temp) {
    if (rows == 1)
      return descending ? cub::DeviceRadixSort::SortPairsDescending(temp, bytes, keys, keys_out, positions,
                                                                    positions_out, n, 0, kBits, stream)
                        : cub::DeviceRadixSort::SortPairs(temp, bytes, keys, keys_out, positions, positions_out, n, 0,
                                                          kBits, stream);
    return descending ? cub::DeviceSegmentedSort::StableSortPairsDescending(
                            temp, bytes, keys, keys_out, positions, positions_out, n, rows, begin, begin + 1, stream)
                      : cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, keys, keys_out, positions, positions_out,
                                                                  n, rows, begin, begin + 1, stream);
  };
  STRATA_CUDA_CHECK(run(nullptr));  // asks for the temporary storage's size
  // At least one byte: given a null pointer, CUB would only answer the size again.
  Tensor temp = scratch(device, std::max<int64_t>(static_cast<int64_t>(bytes), 1));
  STRATA_CUDA_CHECK(run(temp.data_ptr()));
}

}  // namespace

void CudaKernels::sort(const Tensor& in, int64_t dim, bool descending, const Tensor& values,
                       const Tensor& indices) const {
  if (in.dim() == 0) return sort(as_1d(in), dim, descending, as_1d(values), as_1d(indices));
  dim = check_sort_operands(in, dim, values, indices);
  if (values.numel() == 0) return;
  const Device device = in.device();
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  const int64_t len = in.size(dim), rows = in.numel() / len;
  const DimVector dense = dim_last_strides(in.sizes(), dim);
  visit_cuda_dtype(in.dtype(), [&]<class T>() {
    using K = radix_t<T>;
    constexpr auto kSize = static_cast<int64_t>(sizeof(T));
    // Step 1: keys and positions, dense with dim last.
    Tensor keys = scratch(device, in.numel() * kSize), keys_out = scratch(device, in.numel() * kSize);
    Tensor positions = empty({in.numel()}, TensorOptions(kLong).device(device));
    Tensor sorted = empty({in.numel()}, TensorOptions(kLong).device(device));
    const Loop<2> keys_loop =
        make_loop<2>(in.sizes(), {static_cast<char*>(keys.data_ptr()), static_cast<char*>(in.data_ptr())},
                     {dense.data(), in.strides().data()}, {kSize, kSize});
    visit_indexing(keys_loop, [&]<Indexing kInd>() {
      key_kernel<kInd, T>
          <<<blocks_for(keys_loop.numel), kThreads, 0, stream>>>(keys_loop, len, positions.data_ptr<int64_t>());
      STRATA_CUDA_LAUNCH_CHECK();
    });
    // Step 2: each row's pairs in order.
    sort_pairs(static_cast<const K*>(keys.data_ptr()), static_cast<K*>(keys_out.data_ptr()),
               positions.data_ptr<int64_t>(), sorted.data_ptr<int64_t>(), rows, len, descending, device, stream);
    // Step 3: the first k of each row into indices and values (the dense buffer read with values' sizes).
    const DimVector in_strides = strides_without(in, dim);
    const Loop<4> take_loop =
        make_loop<4>(values.sizes(),
                     {static_cast<char*>(values.data_ptr()), static_cast<char*>(indices.data_ptr()),
                      static_cast<char*>(sorted.data_ptr()), static_cast<char*>(in.data_ptr())},
                     {values.strides().data(), indices.strides().data(), dense.data(), in_strides.data()},
                     {kSize, int64_t{sizeof(int64_t)}, int64_t{sizeof(int64_t)}, kSize});
    visit_indexing(take_loop, [&]<Indexing kInd>() {
      take_kernel<kInd, K><<<blocks_for(take_loop.numel), kThreads, 0, stream>>>(take_loop, in.stride(dim) * kSize);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace strata::cuda
