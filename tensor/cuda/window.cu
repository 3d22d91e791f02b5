// CUDA kernels: im2col and col2im (cpu/window.cpp has the same entries). im2col runs a thread per
// column element; col2im a thread per input element that sums the column entries of the windows
// covering it, in a fixed order and in acc_t: no atomics, so results are deterministic.

#include <type_traits>

#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

/// cols[p, k, l] = in[p, iy, ix] for window position l and kernel offset k, or pad over the padding.
template <class T>
__global__ void __launch_bounds__(kThreads) im2col_kernel(const T* in, T* cols, int64_t numel, Window2d g, T pad) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t L = g.out[0] * g.out[1], K = g.kernel[0] * g.kernel[1];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += grid) {
    const int64_t l = i % L, k = i / L % K, p = i / (L * K);
    const int64_t iy = l / g.out[1] * g.stride[0] - g.pad[0] + k / g.kernel[1] * g.dilation[0];
    const int64_t ix = l % g.out[1] * g.stride[1] - g.pad[1] + k % g.kernel[1] * g.dilation[1];
    const bool inside = iy >= 0 && iy < g.in[0] && ix >= 0 && ix < g.in[1];
    cols[i] = inside ? in[(p * g.in[0] + iy) * g.in[1] + ix] : pad;
  }
}

/// out[p, y, x] = the sum over the kernel offsets whose window reads (y, x) of cols[p, k, l].
template <class T>
__global__ void __launch_bounds__(kThreads) col2im_kernel(const T* cols, T* out, int64_t numel, Window2d g) {
  const int64_t grid = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t L = g.out[0] * g.out[1], K = g.kernel[0] * g.kernel[1];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += grid) {
    const int64_t x = i % g.in[1], y = i / g.in[1] % g.in[0], p = i / (g.in[0] * g.in[1]);
    acc_t<T> sum = acc_t<T>(0);
    for (int64_t ky = 0; ky < g.kernel[0]; ++ky) {
      const int64_t ty = y + g.pad[0] - ky * g.dilation[0];
      if (ty < 0 || ty % g.stride[0] != 0 || ty / g.stride[0] >= g.out[0]) continue;
      for (int64_t kx = 0; kx < g.kernel[1]; ++kx) {
        const int64_t tx = x + g.pad[1] - kx * g.dilation[1];
        if (tx < 0 || tx % g.stride[1] != 0 || tx / g.stride[1] >= g.out[1]) continue;
        const int64_t l = ty / g.stride[0] * g.out[1] + tx / g.stride[1];
        sum += convert<acc_t<T>>(cols[(p * K + ky * g.kernel[1] + kx) * L + l]);
      }
    }
    out[i] = convert<T>(sum);
  }
}

}  // namespace

void CudaKernels::im2col(const Tensor& in, const Window2d& g, double pad_value, const Tensor& cols) const {
  check_window_operands("im2col", in, g, cols);
  if (cols.numel() == 0) return;
  DeviceGuard guard(in.device().index);
  visit_cuda_dtype(in.dtype(), [&]<class T>() {
    T pad;
    if constexpr (is_floating_v<T>)
      pad = convert<T>(pad_value);
    else
      pad = integer_pad<T>(pad_value);
    im2col_kernel<T><<<blocks_for(cols.numel()), kThreads, 0, current_stream(in.device().index)>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(cols.data_ptr()), cols.numel(), g, pad);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void CudaKernels::col2im(const Tensor& cols, const Window2d& g, const Tensor& out) const {
  check_window_operands("col2im", out, g, cols);
  STRATA_CHECK(out.dtype() != kBool, "col2im does not support ", out.dtype());
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  visit_cuda_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      col2im_kernel<T><<<blocks_for(out.numel()), kThreads, 0, current_stream(out.device().index)>>>(
          static_cast<const T*>(cols.data_ptr()), static_cast<T*>(out.data_ptr()), out.numel(), g);
      STRATA_CUDA_LAUNCH_CHECK();
    }
  });
}

// No direct convolution on CUDA (strata links no cuDNN): the ops compose im2col, cuBLAS and col2im.
bool CudaKernels::conv2d(const Tensor&, const Tensor&, const Window2d&, int64_t, const Tensor&) const { return false; }

bool CudaKernels::conv2d_backward_input(const Tensor&, const Tensor&, const Window2d&, int64_t, const Tensor&) const {
  return false;
}

bool CudaKernels::conv2d_backward_weight(const Tensor&, const Tensor&, const Window2d&, int64_t, const Tensor&) const {
  return false;
}

}  // namespace strata::cuda
