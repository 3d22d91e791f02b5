// CUDA kernels: copy (on one device, between devices, to and from the host), fill and arange.
// Conversions follow the CPU's static_cast, through float for Half and BFloat16 (convert<To>).
//
// Note [host copies]: between host and device only contiguous bytes travel, with cudaMemcpyAsync
// on the device's current stream. The host side makes its operand contiguous in its own dtype
// (cpu_kernels().copy into a temporary when it is strided); the device side does every dtype
// conversion and strided layout (copy_kernel, through a contiguous device temporary). Host memory
// is pageable, and cudaMemcpyAsync need not have finished reading or writing a pageable buffer
// when it returns, so both directions synchronise the stream after the transfer (as torch's
// copies without non_blocking do): the caller may then reuse or read its host tensor at once.
//
// Note [copies between devices]: cudaMemcpyPeerAsync runs on the destination's stream after an
// event of the source's stream, so it sees everything queued to produce src; the source's
// stream then waits on an event after the copy, so a later write to src, or its free (ordered
// on the source's stream), cannot overtake the copy.

#include <cmath>
#include <type_traits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

// ---- kernels ----

/// dst = convert<D>(src) over loop (operand 0 dst, operand 1 src).
template <Indexing kInd, class D, class S>
__global__ void __launch_bounds__(kThreads) copy_kernel(Loop<2> loop) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += step) {
    int64_t off[2];
    offsets_at<kInd>(loop, i, off);
    *at<D>(loop, off, 0) = convert<D>(*at<const S>(loop, off, 1));
  }
}

template <Indexing kInd, class T>
__global__ void __launch_bounds__(kThreads) fill_kernel(Loop<1> loop, T value) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += step) {
    int64_t off[1];
    offsets_at<kInd>(loop, i, off);
    *at<T>(loop, off, 0) = value;
  }
}

/// out[i * stride] = start + i * step in double with one rounding (Note [fused multiply-add] in random.cu), as T.
template <class T>
__global__ void __launch_bounds__(kThreads)
    arange_kernel(T* out, int64_t stride, int64_t n, double start, double step) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += grid)
    out[i * stride] = convert<T>(__fma_rn(static_cast<double>(i), step, start));
}

/// Whole-number int64 ranges, exact beyond 2^53.
__global__ void __launch_bounds__(kThreads)
    arange_exact_kernel(int64_t* out, int64_t stride, int64_t n, int64_t start, int64_t step) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += grid)
    out[i * stride] = start + i * step;
}

// ---- launchers ----

/// True when loop walks both operands densely in one run (after make_loop merged the dims).
bool dense_run(const Loop<2>& loop, int64_t elem_size) {
  return loop.ndim == 1 && loop.strides[0][0] == elem_size && loop.strides[0][1] == elem_size;
}

/// The bytes [first, last] t can touch in its storage.
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t extent = (t.size(d) - 1) * t.stride(d);
    (extent < 0 ? lo : hi) += extent;
  }
  const auto size = static_cast<int64_t>(t.element_size());
  return {lo * size, hi * size + size - 1};
}

/// True when dst's writes may land on src elements not yet read: one storage, overlapping bytes and a
/// different layout (a copy onto itself element for element is harmless).
bool overlaps(const Tensor& src, const Tensor& dst) {
  if (!src.is_alias_of(dst) || src.numel() == 0) return false;
  if (src.dtype() == dst.dtype() && src.storage_offset() == dst.storage_offset() && src.strides() == dst.strides())
    return false;
  const auto [s0, s1] = byte_span(src);
  const auto [d0, d1] = byte_span(dst);
  return s0 <= d1 && d0 <= s1;
}

/// dst = src with both on one device.
void copy_on_device(const Tensor& src, const Tensor& dst) {
  if (overlaps(src, dst)) {  // as the CPU's memmove: read everything before writing anything
    Tensor staged = empty(src.sizes(), src.options());
    copy_on_device(src, staged);
    return copy_on_device(staged, dst);
  }
  const int d = dst.device().index;
  const cudaStream_t stream = current_stream(d);
  DeviceGuard guard(d);
  const auto loop = make_loop<2>({&dst, &src});
  const auto elem_size = static_cast<int64_t>(dst.element_size());
  if (src.dtype() == dst.dtype()) {
    if (dense_run(loop, elem_size)) {
      STRATA_CUDA_CHECK(cudaMemcpyAsync(loop.data[0], loop.data[1], static_cast<size_t>(loop.numel * elem_size),
                                        cudaMemcpyDeviceToDevice, stream));
      return;
    }
    // Same dtype: the kernel only moves bits, so one instantiation per element size serves all.
    return visit_bits_type(dst.dtype(), [&]<class U>() {
      visit_indexing(loop, [&]<Indexing kInd>() {
        copy_kernel<kInd, U, U><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop);
        STRATA_CUDA_LAUNCH_CHECK();
      });
    });
  }
  visit_cuda_dtype(src.dtype(), [&]<class S>() {
    visit_cuda_dtype(dst.dtype(), [&]<class D>() {
      visit_indexing(loop, [&]<Indexing kInd>() {
        copy_kernel<kInd, D, S><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop);
        STRATA_CUDA_LAUNCH_CHECK();
      });
    });
  });
}

/// Makes `later` wait for the work queued so far on `earlier`, a stream of `earlier_device`.
void wait_for(cudaStream_t later, cudaStream_t earlier, int earlier_device) {
  DeviceGuard guard(earlier_device);  // an event is recorded on a stream of its own device
  cudaEvent_t event = nullptr;
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaError_t status = cudaEventRecord(event, earlier);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(later, event, 0);
  // Destroying an event a stream waits on is allowed: the wait stays in place.
  STRATA_CUDA_CHECK(cudaEventDestroy(event));
  STRATA_CUDA_CHECK(status);
}

/// dst = src on two different devices (Note [copies between devices]).
void copy_between_devices(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    Tensor dense = empty(src.sizes(), TensorOptions(dst.dtype()).device(src.device()));
    copy_on_device(src, dense);
    return copy_between_devices(dense, dst);
  }
  if (!dst.is_contiguous()) {
    Tensor dense = empty(dst.sizes(), dst.options());
    copy_between_devices(src, dense);
    return copy_on_device(dense, dst);
  }
  const int from = src.device().index, to = dst.device().index;
  const cudaStream_t from_stream = current_stream(from), to_stream = current_stream(to);
  wait_for(to_stream, from_stream, from);
  {
    DeviceGuard guard(to);
    STRATA_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), to, src.data_ptr(), from, src.nbytes(), to_stream));
  }
  wait_for(from_stream, to_stream, to);
}

/// Moves the bytes of contiguous `from` into contiguous `to` (one side on the host) and waits (Note [host copies]).
void transfer(const Tensor& from, const Tensor& to, cudaMemcpyKind kind, int device) {
  const cudaStream_t stream = current_stream(device);
  DeviceGuard guard(device);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(to.data_ptr(), from.data_ptr(), from.nbytes(), kind, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

/// A contiguous host copy of a strided host tensor, in its dtype.
Tensor dense_on_host(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor dense = empty(t.sizes(), t.dtype());
  cpu_kernels().copy(t, dense);
  return dense;
}

/// dst (CUDA) = src (CPU) (Note [host copies]).
void copy_from_host(const Tensor& src, const Tensor& dst) {
  const Tensor host = dense_on_host(src);
  if (dst.is_contiguous() && dst.dtype() == src.dtype())
    return transfer(host, dst, cudaMemcpyHostToDevice, dst.device().index);
  Tensor staged = empty(src.sizes(), TensorOptions(src.dtype()).device(dst.device()));
  transfer(host, staged, cudaMemcpyHostToDevice, dst.device().index);
  copy_on_device(staged, dst);
}

/// dst (CPU) = src (CUDA) (Note [host copies]).
void copy_to_host(const Tensor& src, const Tensor& dst) {
  Tensor device_side = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    device_side = empty(src.sizes(), TensorOptions(dst.dtype()).device(src.device()));
    copy_on_device(src, device_side);
  }
  if (dst.is_contiguous()) return transfer(device_side, dst, cudaMemcpyDeviceToHost, src.device().index);
  Tensor host = empty(dst.sizes(), dst.dtype());
  transfer(device_side, host, cudaMemcpyDeviceToHost, src.device().index);
  cpu_kernels().copy(host, dst);
}

}  // namespace

void CudaKernels::copy(const Tensor& src, const Tensor& dst) const {
  STRATA_CHECK(src.sizes() == dst.sizes(), "copy: expected equal sizes, got ", src.sizes(), " and ", dst.sizes());
  if (src.numel() == 0) return;
  if (src.is_cpu() && dst.is_cpu()) return cpu_kernels().copy(src, dst);
  if (src.is_cpu()) return copy_from_host(src, dst);
  if (dst.is_cpu()) return copy_to_host(src, dst);
  if (src.device() != dst.device()) return copy_between_devices(src, dst);
  copy_on_device(src, dst);
}

void CudaKernels::fill(const Tensor& dst, double value) const {
  if (dst.numel() == 0) return;
  const int d = dst.device().index;
  const cudaStream_t stream = current_stream(d);
  DeviceGuard guard(d);
  const auto loop = make_loop<1>({&dst});
  const auto elem_size = static_cast<int64_t>(dst.element_size());
  // +0 is all-zero bits in every dtype.
  if (value == 0 && !std::signbit(value) && loop.ndim == 1 && loop.strides[0][0] == elem_size) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(loop.data[0], 0, static_cast<size_t>(loop.numel * elem_size), stream));
    return;
  }
  visit_cuda_dtype(dst.dtype(), [&]<class T>() {
    const T v = convert<T>(value);  // as the CPU's static_cast<T>(value); 16-bit through float
    visit_indexing(loop, [&]<Indexing kInd>() {
      fill_kernel<kInd, T><<<blocks_for(loop.numel), kThreads, 0, stream>>>(loop, v);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

void CudaKernels::arange(const Tensor& out, double start, double step) const {
  STRATA_CHECK(out.dim() <= 1, "arange: expected a 1-D output, got shape ", out.sizes());
  STRATA_CHECK(out.dtype() != kBool, "arange does not support ", out.dtype());
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t stride = out.dim() == 1 ? out.stride(0) : 1;
  const int d = out.device().index;
  const cudaStream_t stream = current_stream(d);
  DeviceGuard guard(d);
  visit_cuda_dtype(out.dtype(), [&]<class T>() {
    T* p = static_cast<T*>(out.data_ptr());
    if constexpr (std::is_same_v<T, int64_t>) {
      // Exact integer steps when start and step are whole numbers, as on the CPU.
      if (start == std::floor(start) && step == std::floor(step)) {
        arange_exact_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, stride, n, static_cast<int64_t>(start),
                                                                    static_cast<int64_t>(step));
        STRATA_CUDA_LAUNCH_CHECK();
        return;
      }
    }
    if constexpr (!std::is_same_v<T, bool>) {
      arange_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(p, stride, n, start, step);
      STRATA_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace strata::cuda
