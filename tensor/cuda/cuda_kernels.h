#pragma once
// Internal to tensor/cuda and the distributed layer's NCCL backend: the CUDA kernel table, the
// current stream of each device, and the CUDA and cuBLAS status checkers. Each family file
// defines its members: runtime.cpp (device API, streams, allocator, cuBLAS handles, the table),
// copy.cu (copy, fill, arange), elementwise.cu (unary, binary, add_scaled, where), reduce.cu
// (reduce, arg_reduce), index.cu (gather, scatter_add), window.cu (im2col, col2im; no direct convolution), sort.cu
// (sort), random.cu (uniform, uniform_int, normal, multinomial), rnn.cu (the fused recurrent cells), attention.cu (the
// fused attention), norm.cu (softmax, layer norm and their backwards), loss.cu (cross entropy and its backward),
// optim.cu (the fused optimizer steps) and gemm.cpp (matmul through cuBLAS).
//
// Note [CUDA streams]: every kernel, copy and allocation of device d is queued on
// current_stream(d), one non-blocking stream per device, so work on one device runs in issue
// order and the stream-ordered allocator may hand a freed block to the next op without a
// synchronisation. Anything that runs on another stream (NCCL's communication stream) makes
// that stream wait on an event of the current one before touching a tensor, makes the current
// stream wait on its own event before the tensor is used or freed, and keeps the tensor alive
// until then. The host waits only where it reads device memory (item(), copies to the CPU).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "strata/tensor/kernels.h"

/// Throws strata::Error with the call, file:line and CUDA's message unless `call` returns cudaSuccess.
#define STRATA_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    const cudaError_t strata_cuda_code_ = (call);                                     \
    if (strata_cuda_code_ != cudaSuccess) [[unlikely]]                                \
      ::strata::cuda::throw_cuda_error(__FILE__, __LINE__, #call, strata_cuda_code_); \
  } while (0)

/// Checks the kernel launch just issued (bad configuration, missing device code).
#define STRATA_CUDA_LAUNCH_CHECK() STRATA_CUDA_CHECK(cudaGetLastError())

/// Throws strata::Error with the call, file:line and cuBLAS's status name unless `call` succeeds.
#define STRATA_CUBLAS_CHECK(call)                                                         \
  do {                                                                                    \
    const cublasStatus_t strata_cublas_code_ = (call);                                    \
    if (strata_cublas_code_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                        \
      ::strata::cuda::throw_cublas_error(__FILE__, __LINE__, #call, strata_cublas_code_); \
  } while (0)

namespace strata::cuda {

/// Formats cudaGetErrorName/String for `code` into a strata::Error.
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* call, cudaError_t code);
/// Formats cublasGetStatusName/String for `code` into a strata::Error.
[[noreturn]] void throw_cublas_error(const char* file, int line, const char* call, cublasStatus_t code);

/// The stream all of strata's work on `device` is queued on (see Note [CUDA streams]).
cudaStream_t current_stream(int device);
/// The cuBLAS handle of `device`, bound to current_stream(device) with a workspace.
cublasHandle_t cublas_handle(int device);
/// Checks that `device` is a visible GPU; `op` names the caller in the error.
void check_device(int device, const char* op);

/// Makes a device current for the scope and restores the previous one (c10::cuda::CUDAGuard).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);  ///< switches to device when it is not current already
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

/// The CUDA kernel table.
class CudaKernels final : public Kernels {
 public:
  void* allocate(Device device, size_t nbytes) const override;
  void deallocate(Device device, void* p, size_t nbytes) const override;
  void copy(const Tensor& src, const Tensor& dst) const override;
  void fill(const Tensor& dst, double value) const override;
  void unary(UnaryOp op, const Tensor& in, const Tensor& out) const override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) const override;
  void add_scaled(const Tensor& a, const Tensor& b, double alpha, const Tensor& out) const override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) const override;
  void reduce(ReduceKind op, const Tensor& in, IntArrayRef dims, const Tensor& out) const override;
  void arg_reduce(ReduceKind op, const Tensor& in, int64_t dim, const Tensor& values,
                  const Tensor& indices) const override;
  void matmul(const Tensor& a, const Tensor& c, const Tensor& out) const override;
  void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) const override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) const override;
  void im2col(const Tensor& in, const Window2d& window, double pad_value, const Tensor& cols) const override;
  void col2im(const Tensor& cols, const Window2d& window, const Tensor& out) const override;
  bool conv2d(const Tensor& in, const Tensor& weight, const Window2d& window, int64_t groups,
              const Tensor& out) const override;
  bool conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Window2d& window, int64_t groups,
                             const Tensor& grad_in) const override;
  bool conv2d_backward_weight(const Tensor& in, const Tensor& grad_out, const Window2d& window, int64_t groups,
                              const Tensor& grad_weight) const override;
  bool attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& params,
                 const Tensor& out, const Tensor& logsumexp) const override;
  bool attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                          const Tensor& logsumexp, const Tensor& grad_out, const AttentionParams& params,
                          const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) const override;
  void softmax(const Tensor& in, bool log, const Tensor& out) const override;
  void softmax_backward(const Tensor& y, const Tensor& grad, bool log, const Tensor& grad_in) const override;
  void layer_norm(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                  const Tensor& mean, const Tensor& rstd) const override;
  void layer_norm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& mean, const Tensor& rstd,
                           const Tensor& weight, const Tensor& grad_in, const Tensor& grad_weight,
                           const Tensor& grad_bias) const override;
  void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     const Tensor& nll, const Tensor& smooth, const Tensor& lse) const override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                              const Tensor& lse, const Tensor& grad_nll, const Tensor& grad_smooth,
                              const Tensor& grad_logits) const override;
  void sort(const Tensor& in, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) const override;
  void arange(const Tensor& out, double start, double step) const override;
  void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) const override;
  void uniform_int(const Tensor& out, int64_t lo, int64_t hi, uint64_t seed, uint64_t offset) const override;
  void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) const override;
  void multinomial(const Tensor& probs, const Tensor& out, uint64_t seed, uint64_t offset) const override;
  void lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx, const Tensor& hy,
                 const Tensor& cy) const override;
  void lstm_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                          const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& grad_gates,
                          const Tensor& grad_cx) const override;
  void gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                const Tensor& hy) const override;
  void gru_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx, const Tensor& grad_hy,
                         const Tensor& grad_input_gates, const Tensor& grad_hidden_gates,
                         const Tensor& grad_hx) const override;
  void adam_step(const std::vector<AdamParam>& params, const AdamHyper& hyper) const override;
  void sgd_step(const std::vector<SgdParam>& params, const SgdHyper& hyper) const override;
};

}  // namespace strata::cuda
