// CUDA kernels: softmax and log_softmax along the middle dim of [outer, size, inner], layer norm over the rows of
// [M, N], and their backwards. 16-bit floats load and store 16 bits and compute in float32; float64 stays float64.
//
// Each line (a softmax slice, a layer norm row) gets a group of threads as Note [CUDA row kernels] (rows.cuh) says.
// Softmax reads a line twice, once for its maximum and denominator together (merge rescales the running denominator
// when the maximum grows) and once to write. Layer norm reads a row three times, for the mean, for the variance as
// the mean of (x - mean)^2 (accurate where sum(x^2) / N - mean^2 cancels) and to write; a row is then in cache.
// layer_norm_backward sums grad_weight and grad_bias over the rows in a second kernel, a block per 32 columns and
// slice of rows, whose slices a third adds where there are several (see their comments), as PyTorch does.

#include <cuda/std/limits>

#include <cmath>
#include <cstdint>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/rows.cuh"

namespace strata::cuda {

namespace {

// ---- kernels ----

/// The lines of a contiguous [outer, size, inner]: line l has `size` elements `inner` apart from first(l).
struct Lines {
  int64_t count, size, inner;
  __device__ int64_t first(int64_t l) const { return l / inner * size * inner + l % inner; }
};

/// out = softmax of each line of in, or log_softmax when take_log.
template <class T, int kGroup>
__global__ void __launch_bounds__(kThreads) softmax_kernel(const T* in, T* out, Lines g, bool take_log) {
  using A = acc_t<T>;
  for_each_line<kGroup>(g.count, [&](int64_t l, int lane) {
    const T* x = in + g.first(l);
    T* y = out + g.first(l);
    MaxSum<A> st{-::cuda::std::numeric_limits<A>::infinity(), A(0)};
    for (int64_t j = lane; j < g.size; j += kGroup) st = merge(st, MaxSum<A>{convert<A>(x[j * g.inner]), A(1)});
    st = group_reduce<kGroup>(st, Merge{});
    const A log_s = log(st.s), inv_s = A(1) / st.s;
    for (int64_t j = lane; j < g.size; j += kGroup) {
      const A v = convert<A>(x[j * g.inner]) - st.m;
      y[j * g.inner] = convert<T>(take_log ? v - log_s : exp(v) * inv_s);
    }
  });
}

/// grad_in from softmax's output y and grad, line by line (Kernels::softmax_backward's formulas).
template <class T, int kGroup>
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(const T* y, const T* grad, T* grad_in, Lines g, bool take_log) {
  using A = acc_t<T>;
  for_each_line<kGroup>(g.count, [&](int64_t l, int lane) {
    const T* yl = y + g.first(l);
    const T* gl = grad + g.first(l);
    A sum = 0;
    for (int64_t j = lane; j < g.size; j += kGroup) {
      const A gj = convert<A>(gl[j * g.inner]);
      sum += take_log ? gj : gj * convert<A>(yl[j * g.inner]);
    }
    sum = group_reduce<kGroup>(sum, Plus{});
    for (int64_t j = lane; j < g.size; j += kGroup) {
      const A gj = convert<A>(gl[j * g.inner]), yj = convert<A>(yl[j * g.inner]);
      grad_in[g.first(l) + j * g.inner] = convert<T>(take_log ? gj - exp(yj) * sum : yj * (gj - sum));
    }
  });
}

/// out, mean and rstd for the M rows of [M, N]; weight and bias null where undefined.
template <class T, int kGroup>
__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const T* in, const T* weight, const T* bias, acc_t<T> eps, T* out, acc_t<T>* mean, acc_t<T>* rstd,
                      int64_t M, int64_t N) {
  using A = acc_t<T>;
  for_each_line<kGroup>(M, [&](int64_t i, int lane) {
    const T* x = in + i * N;
    A sum = 0;
    for (int64_t j = lane; j < N; j += kGroup) sum += convert<A>(x[j]);
    const A mu = group_reduce<kGroup>(sum, Plus{}) / static_cast<A>(N);
    A squares = 0;
    for (int64_t j = lane; j < N; j += kGroup) {
      const A d = convert<A>(x[j]) - mu;
      squares += d * d;
    }
    const A r = A(1) / sqrt(group_reduce<kGroup>(squares, Plus{}) / static_cast<A>(N) + eps);
    for (int64_t j = lane; j < N; j += kGroup) {
      A v = (convert<A>(x[j]) - mu) * r;
      if (weight) v *= convert<A>(weight[j]);
      if (bias) v += convert<A>(bias[j]);
      out[i * N + j] = convert<T>(v);
    }
    if (lane == 0) {
      mean[i] = mu;
      rstd[i] = r;
    }
  });
}

/// grad_in for the M rows of [M, N]; weight null where undefined.
template <class T, int kGroup>
__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_input_kernel(const T* grad_out, const T* in, const acc_t<T>* mean, const acc_t<T>* rstd,
                                     const T* weight, T* grad_in, int64_t M, int64_t N) {
  using A = acc_t<T>;
  for_each_line<kGroup>(M, [&](int64_t i, int lane) {
    const T* g = grad_out + i * N;
    const T* x = in + i * N;
    const A mu = mean[i], r = rstd[i];
    auto dxhat = [&](int64_t j) { return weight ? convert<A>(g[j]) * convert<A>(weight[j]) : convert<A>(g[j]); };
    auto xhat = [&](int64_t j) { return (convert<A>(x[j]) - mu) * r; };
    A sum = 0, dot = 0;
    for (int64_t j = lane; j < N; j += kGroup) {
      sum += dxhat(j);
      dot += dxhat(j) * xhat(j);
    }
    const A mean_d = group_reduce<kGroup>(sum, Plus{}) / static_cast<A>(N);
    const A mean_dx = group_reduce<kGroup>(dot, Plus{}) / static_cast<A>(N);
    for (int64_t j = lane; j < N; j += kGroup)
      grad_in[i * N + j] = convert<T>(r * (dxhat(j) - mean_d - xhat(j) * mean_dx));
  });
}

/// Rows a block of layer_norm_backward_params_kernel splits its columns' sums into: one per warp.
constexpr int kSlices = kThreads / kWarp;
/// Fewest rows a block of layer_norm_backward_params_kernel sums: 8 per warp.
constexpr int64_t kMinParamRows = 8 * kSlices;

/// grad_weight and grad_bias [N] (either null where not wanted), the column sums over M rows. Block (b, s) owns
/// columns [32 b, 32 b + 32), a lane per column, so each warp reads 32 neighbouring elements of a row, and rows
/// [s rows, (s + 1) rows); its warp w sums rows w, w + kSlices, ... of them, and the first warp adds the kSlices
/// partials in order. With one row slice (gridDim.y 1) that is the result; with more, each block writes its sums
/// into partial [2, gridDim.y, N] and layer_norm_sum_slices_kernel adds them. Zeros when M is 0.
template <class T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_params_kernel(const T* grad_out, const T* in, const acc_t<T>* mean, const acc_t<T>* rstd,
                                      T* grad_weight, T* grad_bias, acc_t<T>* partial, int64_t M, int64_t N,
                                      int64_t rows) {
  using A = acc_t<T>;
  __shared__ A weight_sums[kSlices][kWarp], bias_sums[kSlices][kWarp];
  const int lane = threadIdx.x % kWarp, slice = threadIdx.x / kWarp;
  const int64_t j = int64_t{blockIdx.x} * kWarp + lane;
  const int64_t begin = int64_t{blockIdx.y} * rows, end = begin + rows < M ? begin + rows : M;
  A sum_w = 0, sum_b = 0;
  if (j < N) {
    for (int64_t i = begin + slice; i < end; i += kSlices) {
      const A g = convert<A>(grad_out[i * N + j]);
      sum_w += g * (convert<A>(in[i * N + j]) - mean[i]) * rstd[i];
      sum_b += g;
    }
  }
  weight_sums[slice][lane] = sum_w;
  bias_sums[slice][lane] = sum_b;
  __syncthreads();
  if (slice != 0 || j >= N) return;
  for (int s = 1; s < kSlices; ++s) {
    sum_w += weight_sums[s][lane];
    sum_b += bias_sums[s][lane];
  }
  if (gridDim.y > 1) {
    partial[int64_t{blockIdx.y} * N + j] = sum_w;
    partial[(int64_t{gridDim.y} + blockIdx.y) * N + j] = sum_b;
    return;
  }
  if (grad_weight) grad_weight[j] = convert<T>(sum_w);
  if (grad_bias) grad_bias[j] = convert<T>(sum_b);
}

/// grad_weight and grad_bias [N] (either null) from layer_norm_backward_params_kernel's partial [2, slices, N]: a
/// thread per column adds its slices in order.
template <class T>
__global__ void layer_norm_sum_slices_kernel(const acc_t<T>* partial, T* grad_weight, T* grad_bias, int64_t slices,
                                             int64_t N) {
  using A = acc_t<T>;
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < N; j += int64_t{gridDim.x} * blockDim.x) {
    A sum_w = 0, sum_b = 0;
    for (int64_t s = 0; s < slices; ++s) {
      sum_w += partial[s * N + j];
      sum_b += partial[(slices + s) * N + j];
    }
    if (grad_weight) grad_weight[j] = convert<T>(sum_w);
    if (grad_bias) grad_bias[j] = convert<T>(sum_b);
  }
}

// ---- launchers ----

/// The lines of softmax's operand t [outer, size, inner].
Lines lines_of(const Tensor& t) { return {t.size(0) * t.size(2), t.size(1), t.size(2)}; }

}  // namespace

void CudaKernels::softmax(const Tensor& in, bool log, const Tensor& out) const {
  const char* op = log ? "log_softmax" : "softmax";
  check_softmax_operands(op, {&in, &out});
  const Lines lines = lines_of(in);
  on_device(op, in, [&]<class T>(cudaStream_t stream) {
    launch_lines(lines.count, lines.size, lines.inner == 1, [&]<int kGroup>(unsigned blocks) {
      softmax_kernel<T, kGroup><<<blocks, kThreads, 0, stream>>>(elements<const T>(in), elements<T>(out), lines, log);
    });
  });
}

void CudaKernels::softmax_backward(const Tensor& y, const Tensor& grad, bool log, const Tensor& grad_in) const {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_operands(op, {&y, &grad, &grad_in});
  const Lines lines = lines_of(y);
  on_device(op, y, [&]<class T>(cudaStream_t stream) {
    launch_lines(lines.count, lines.size, lines.inner == 1, [&]<int kGroup>(unsigned blocks) {
      softmax_backward_kernel<T, kGroup><<<blocks, kThreads, 0, stream>>>(elements<const T>(y), elements<const T>(grad),
                                                                          elements<T>(grad_in), lines, log);
    });
  });
}

void CudaKernels::layer_norm(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                             const Tensor& mean, const Tensor& rstd) const {
  const int64_t N = check_layer_norm_operands("layer_norm", in, {&in, &out}, {&weight, &bias}, mean, rstd);
  const int64_t M = in.size(0);
  if (N == 0) {  // an empty row: mean 0, variance 0, as on the CPU
    fill(mean, 0);
    fill(rstd, 1 / std::sqrt(eps));
    return;
  }
  on_device("layer_norm", in, [&]<class T>(cudaStream_t stream) {
    using A = acc_t<T>;
    launch_lines(M, N, true, [&]<int kGroup>(unsigned blocks) {
      layer_norm_kernel<T, kGroup><<<blocks, kThreads, 0, stream>>>(
          elements<const T>(in), elements<const T>(weight), elements<const T>(bias), static_cast<A>(eps),
          elements<T>(out), elements<A>(mean), elements<A>(rstd), M, N);
    });
  });
}

void CudaKernels::layer_norm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& weight, const Tensor& grad_in, const Tensor& grad_weight,
                                      const Tensor& grad_bias) const {
  const int64_t N = check_layer_norm_operands("layer_norm_backward", in, {&in, &grad_out, &grad_in},
                                              {&weight, &grad_weight, &grad_bias}, mean, rstd);
  const int64_t M = in.size(0);
  on_device("layer_norm_backward", in, [&]<class T>(cudaStream_t stream) {
    using A = acc_t<T>;
    if (grad_in.defined()) {
      launch_lines(M, N, true, [&]<int kGroup>(unsigned blocks) {
        layer_norm_backward_input_kernel<T, kGroup><<<blocks, kThreads, 0, stream>>>(
            elements<const T>(grad_out), elements<const T>(in), elements<const A>(mean), elements<const A>(rstd),
            elements<const T>(weight), elements<T>(grad_in), M, N);
      });
    }
    if ((grad_weight.defined() || grad_bias.defined()) && N > 0) {
      // Few columns leave most of the GPU idle, so the rows are sliced too (Note [CUDA deterministic reductions]).
      const int64_t column_blocks = ceil_div(N, kWarp);
      const int64_t rows = M > 0 ? slice_length(M, column_blocks, kMinParamRows) : 1;
      const int64_t slices = M > 0 ? ceil_div(M, rows) : 1;
      const Tensor partial =
          slices > 1 ? empty({2, slices, N}, TensorOptions(scalar_type_of<A>()).device(in.device())) : Tensor();
      const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(slices));
      layer_norm_backward_params_kernel<T><<<grid, kThreads, 0, stream>>>(
          elements<const T>(grad_out), elements<const T>(in), elements<const A>(mean), elements<const A>(rstd),
          elements<T>(grad_weight), elements<T>(grad_bias), elements<A>(partial), M, N, rows);
      STRATA_CUDA_LAUNCH_CHECK();
      if (slices > 1) {
        layer_norm_sum_slices_kernel<T><<<blocks_for(N), kThreads, 0, stream>>>(
            elements<const A>(partial), elements<T>(grad_weight), elements<T>(grad_bias), slices, N);
        STRATA_CUDA_LAUNCH_CHECK();
      }
    }
  });
}

}  // namespace strata::cuda
