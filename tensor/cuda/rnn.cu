// CUDA kernels: the fused recurrent cells, LSTM's and GRU's pointwise steps and their gradients, one thread
// per (batch row, hidden unit) on a grid-stride loop. The expressions are cpu/rnn.cpp's (the derivations are
// there); 16-bit floats compute in float32. The backwards recompute the gates from the pre-activations.

#include <cstdint>

#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

// ---- kernels ----

template <class A>
__device__ inline A sigmoid(A x) {
  return A(1) / (A(1) + exp(-x));
}

/// Element k of p in the accumulation type.
template <class T>
__device__ inline acc_t<T> load(const T* p, int64_t k) {
  return convert<acc_t<T>>(p[k]);
}

/// The first element of the grid-stride loop over [0, numel) this thread handles, and the stride.
__device__ inline int64_t first_element() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <class T>
__global__ void __launch_bounds__(kThreads)
    lstm_cell_kernel(const T* ig, const T* hg, const T* cx, T* hy, T* cy, int64_t H, int64_t numel) {
  using A = acc_t<T>;
  for (int64_t e = first_element(); e < numel; e += grid_stride()) {
    const int64_t g0 = 4 * H * (e / H) + e % H;
    auto gate = [&](int k) { return load(ig, g0 + k * H) + load(hg, g0 + k * H); };
    const A c = sigmoid(gate(1)) * load(cx, e) + sigmoid(gate(0)) * tanh(gate(2));
    cy[e] = convert<T>(c);
    hy[e] = convert<T>(sigmoid(gate(3)) * tanh(c));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    lstm_cell_backward_kernel(const T* ig, const T* hg, const T* cx, const T* grad_hy, const T* grad_cy, T* grad_gates,
                              T* grad_cx, int64_t H, int64_t numel) {
  using A = acc_t<T>;
  for (int64_t e = first_element(); e < numel; e += grid_stride()) {
    const int64_t g0 = 4 * H * (e / H) + e % H;
    auto gate = [&](int k) { return load(ig, g0 + k * H) + load(hg, g0 + k * H); };
    const A i = sigmoid(gate(0)), f = sigmoid(gate(1)), g = tanh(gate(2)), o = sigmoid(gate(3));
    const A c_prev = load(cx, e), dh = load(grad_hy, e);
    const A tc = tanh(f * c_prev + i * g);
    const A dc = load(grad_cy, e) + dh * o * (A(1) - tc * tc);
    grad_gates[g0] = convert<T>(dc * g * i * (A(1) - i));
    grad_gates[g0 + H] = convert<T>(dc * c_prev * f * (A(1) - f));
    grad_gates[g0 + 2 * H] = convert<T>(dc * i * (A(1) - g * g));
    grad_gates[g0 + 3 * H] = convert<T>(dh * tc * o * (A(1) - o));
    grad_cx[e] = convert<T>(dc * f);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gru_cell_kernel(const T* ig, const T* hg, const T* hx, T* hy, int64_t H, int64_t numel) {
  using A = acc_t<T>;
  for (int64_t e = first_element(); e < numel; e += grid_stride()) {
    const int64_t g0 = 3 * H * (e / H) + e % H;
    const A r = sigmoid(load(ig, g0) + load(hg, g0)), z = sigmoid(load(ig, g0 + H) + load(hg, g0 + H));
    const A n = tanh(load(ig, g0 + 2 * H) + r * load(hg, g0 + 2 * H));
    hy[e] = convert<T>(n + z * (load(hx, e) - n));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gru_cell_backward_kernel(const T* ig, const T* hg, const T* hx, const T* grad_hy, T* grad_ig, T* grad_hg,
                             T* grad_hx, int64_t H, int64_t numel) {
  using A = acc_t<T>;
  for (int64_t e = first_element(); e < numel; e += grid_stride()) {
    const int64_t g0 = 3 * H * (e / H) + e % H;
    const A r = sigmoid(load(ig, g0) + load(hg, g0)), z = sigmoid(load(ig, g0 + H) + load(hg, g0 + H));
    const A hn = load(hg, g0 + 2 * H), n = tanh(load(ig, g0 + 2 * H) + r * hn);
    const A dh = load(grad_hy, e);
    const A dn = dh * (A(1) - z) * (A(1) - n * n);
    const A dr = dn * hn * r * (A(1) - r), dz = dh * (load(hx, e) - n) * z * (A(1) - z);
    grad_ig[g0] = grad_hg[g0] = convert<T>(dr);
    grad_ig[g0 + H] = grad_hg[g0 + H] = convert<T>(dz);
    grad_ig[g0 + 2 * H] = convert<T>(dn);
    grad_hg[g0 + 2 * H] = convert<T>(dn * r);
    grad_hx[e] = convert<T>(dh * z);
  }
}

// ---- launchers ----

/// Runs launch.template operator()<T>(blocks, stream) for T the device type of state's floating dtype, on
/// state's device, when state has elements.
template <class F>
void launch_cell(const char* op, const Tensor& state, const F& launch) {
  if (state.numel() == 0) return;
  const int device = state.device().index;
  DeviceGuard guard(device);
  visit_cuda_dtype(state.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      launch.template operator()<T>(blocks_for(state.numel()), current_stream(device));
      STRATA_CUDA_LAUNCH_CHECK();
    } else {
      STRATA_CHECK(false, op, " does not support ", state.dtype());
    }
  });
}

}  // namespace

void CudaKernels::lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx, const Tensor& hy,
                            const Tensor& cy) const {
  const int64_t H = check_rnn_cell_operands("lstm_cell", 4, {&input_gates, &hidden_gates}, {&cx, &hy, &cy});
  launch_cell("lstm_cell", cx, [&]<class T>(unsigned blocks, cudaStream_t stream) {
    lstm_cell_kernel<T><<<blocks, kThreads, 0, stream>>>(elements<T>(input_gates), elements<T>(hidden_gates),
                                                         elements<T>(cx), elements<T>(hy), elements<T>(cy), H,
                                                         cx.numel());
  });
}

void CudaKernels::lstm_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                                     const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& grad_gates,
                                     const Tensor& grad_cx) const {
  const int64_t H = check_rnn_cell_operands("lstm_cell_backward", 4, {&input_gates, &hidden_gates, &grad_gates},
                                            {&cx, &grad_hy, &grad_cy, &grad_cx});
  launch_cell("lstm_cell_backward", cx, [&]<class T>(unsigned blocks, cudaStream_t stream) {
    lstm_cell_backward_kernel<T><<<blocks, kThreads, 0, stream>>>(
        elements<T>(input_gates), elements<T>(hidden_gates), elements<T>(cx), elements<T>(grad_hy),
        elements<T>(grad_cy), elements<T>(grad_gates), elements<T>(grad_cx), H, cx.numel());
  });
}

void CudaKernels::gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                           const Tensor& hy) const {
  const int64_t H = check_rnn_cell_operands("gru_cell", 3, {&input_gates, &hidden_gates}, {&hx, &hy});
  launch_cell("gru_cell", hx, [&]<class T>(unsigned blocks, cudaStream_t stream) {
    gru_cell_kernel<T><<<blocks, kThreads, 0, stream>>>(elements<T>(input_gates), elements<T>(hidden_gates),
                                                        elements<T>(hx), elements<T>(hy), H, hx.numel());
  });
}

void CudaKernels::gru_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                    const Tensor& grad_hy, const Tensor& grad_input_gates,
                                    const Tensor& grad_hidden_gates, const Tensor& grad_hx) const {
  const int64_t H = check_rnn_cell_operands("gru_cell_backward", 3,
                                            {&input_gates, &hidden_gates, &grad_input_gates, &grad_hidden_gates},
                                            {&hx, &grad_hy, &grad_hx});
  launch_cell("gru_cell_backward", hx, [&]<class T>(unsigned blocks, cudaStream_t stream) {
    gru_cell_backward_kernel<T><<<blocks, kThreads, 0, stream>>>(
        elements<T>(input_gates), elements<T>(hidden_gates), elements<T>(hx), elements<T>(grad_hy),
        elements<T>(grad_input_gates), elements<T>(grad_hidden_gates), elements<T>(grad_hx), H, hx.numel());
  });
}

}  // namespace strata::cuda
