#pragma once
// Internal to tensor/cpu: the CPU kernel table. Each family file defines its members:
// kernels.cpp (memory, table), elementwise.cpp (copy, fill, binary, where, arange), unary.cpp,
// reduce.cpp (reduce, arg_reduce), gemm.cpp (matmul, gemm), index.cpp (gather, scatter_add),
// window.cpp (im2col, col2im), conv.cpp (the direct convolutions, through oneDNN), sort.cpp (sort), random.cpp
// (uniform, uniform_int, normal, multinomial), rnn.cpp (the fused recurrent cells), attention.cpp (the fused
// attention), norm.cpp (softmax and layer norm), loss.cpp (cross entropy), optim.cpp (the fused optimizer steps).

#include <functional>
#include <initializer_list>
#include <vector>

#include "strata/tensor/kernels.h"

namespace strata::cpu {

class CpuKernels final : public Kernels {
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
  void adam_step(const std::vector<AdamParam>& params, const AdamHyper& hyper) const override;
  void sgd_step(const std::vector<SgdParam>& params, const SgdHyper& hyper) const override;
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
};

/// True when any of `operands` is a Half or BFloat16 tensor.
inline bool any_16_bit_float(std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (t->defined() && is_reduced_floating_point(t->dtype())) return true;
  return false;
}

/// Whether a kernel only writes its outputs (the stand-ins start empty) or adds into them (scatter_add).
enum class OutputUse { kWrite, kReadWrite };

/// Runs `f` on float32 stand-ins for the Half and BFloat16 tensors among `inputs` and `outputs` (an output's
/// holding its values for kReadWrite), then rounds the outputs' stand-ins back into them (kernels.cpp). `f` gets
/// the inputs, then the outputs.
void run_in_float32(const Kernels& kernels, std::initializer_list<const Tensor*> inputs,
                    std::initializer_list<const Tensor*> outputs, OutputUse use,
                    const std::function<void(const tensor_list&)>& f);

/// When any operand is Half or BFloat16, run_in_float32(...) and true; otherwise nothing and false, at the cost of a
/// dtype test (no copy, no allocation). The CPU has no 16-bit float arithmetic: as libtorch's, its kernels compute
/// in float32 and store 16 bits.
///
///   if (in_float32(*this, {&in}, {&out}, [&](const tensor_list& t) { unary(op, t[0], t[1]); })) return;
template <class F>
bool in_float32(const Kernels& kernels, std::initializer_list<const Tensor*> inputs,
                std::initializer_list<const Tensor*> outputs, const F& f, OutputUse use = OutputUse::kWrite) {
  if (!any_16_bit_float(inputs) && !any_16_bit_float(outputs)) return false;
  run_in_float32(kernels, inputs, outputs, use, f);
  return true;
}

/// c [m, n] = alpha * op(a) op(b) + beta * c over row-major arrays with leading dims lda, ldb, ldc, op(x) being
/// x, or x^T where its trans flag is set (gemm.cpp): oneDNN's sgemm for float, Eigen's GEMM for double. Safe in an
/// OpenMP region (it then runs on the calling thread); false where oneDNN refused the arguments.
template <class T>
[[nodiscard]] bool gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                        const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

/// binary's GeluBackward and GeluTanhBackward (unary.cpp, beside gelu): out = grad * gelu'(x), floating types.
void gelu_backward(BinaryOp op, const Tensor& grad, const Tensor& x, const Tensor& out);

}  // namespace strata::cpu
