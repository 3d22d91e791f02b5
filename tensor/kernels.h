#pragma once
// The kernel table: the small set of primitives every device implements, the fused recurrent
// cells, row kernels (softmax, layer norm, cross entropy) and optimizer steps, and optional fused
// kernels (direct convolution, attention) a device may decline. Ops
// above it (autograd/ops/*) are written once, for every device, in terms of these.
//
//   Tensor a = randn({2, 3}), b = randn({2, 3});
//   Tensor out = empty(a.sizes(), a.options());
//   kernels_for(a.device()).binary(BinaryOp::Mul, a, b, out);
//
// Contract shared by every entry: operands are already on one device, `out` is allocated
// by the caller with the final sizes and dtype, inputs have been expanded (stride 0) to the
// iteration shape where broadcasting applies, and inputs have the compute dtype unless an
// entry says otherwise. Inputs may have any strides; outputs may too (copy_ into views).
// Half and BFloat16 compute in float32: inside the kernels on CUDA, on float32 copies of the
// operands on the CPU (cpu/cpu_kernels.h's in_float32).

#include <array>
#include <cstdint>
#include <vector>

#include "strata/tensor/tensor.h"

namespace strata {

/// Elementwise functions of one tensor. Gelu is x * Phi(x); GeluTanh its tanh approximation; BitwiseNot
/// (integers and bool) is ~x, or !x for bool.
enum class UnaryOp : int8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Abs,
  Tanh,
  Sigmoid,
  Relu,
  Sign,
  Erf,
  LogicalNot,
  Gelu,
  GeluTanh,
  BitwiseNot
};
/// Elementwise functions of two tensors; comparisons and logical ops write bool. GeluBackward and
/// GeluTanhBackward take (grad, x) and give grad * gelu'(x), one pass instead of the dozen a composite takes;
/// ReluBackward takes (grad, y), y relu's output, and gives 0 where y <= 0, else grad (a NaN y passes grad).
/// The bitwise ops take integers and bool (where they are and, or and xor) and keep the dtype.
enum class BinaryOp : int8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  LogicalAnd,
  LogicalOr,
  GeluBackward,
  GeluTanhBackward,
  ReluBackward,
  BitwiseAnd,
  BitwiseOr,
  BitwiseXor
};
// GELU's constants.
inline constexpr double kGeluSqrtHalf = 0.7071067811865476;    ///< 1/sqrt(2)
inline constexpr double kGeluInvSqrt2Pi = 0.3989422804014327;  ///< 1/sqrt(2 pi)
inline constexpr double kGeluBeta = 0.7978845608028654;        ///< sqrt(2/pi)
inline constexpr double kGeluKappa = 0.044715;                 ///< the tanh form's cubic coefficient
/// The op's name as kernel errors show it: "neg", "exp", ...
const char* to_string(UnaryOp op);
/// The op's name as kernel errors show it: "add", "sub", ...
const char* to_string(BinaryOp op);
/// True for the comparisons and logical ops, which write bool.
constexpr bool writes_bool(BinaryOp op) {
  switch (op) {  // no default: a new op must be placed here
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Pow:
    case BinaryOp::Maximum:
    case BinaryOp::Minimum:
    case BinaryOp::GeluBackward:
    case BinaryOp::GeluTanhBackward:
    case BinaryOp::ReluBackward:
    case BinaryOp::BitwiseAnd:
    case BinaryOp::BitwiseOr:
    case BinaryOp::BitwiseXor:
      return false;
    case BinaryOp::Eq:
    case BinaryOp::Ne:
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
    case BinaryOp::LogicalAnd:
    case BinaryOp::LogicalOr:
      return true;
  }
  return false;
}
/// What a reduction kernel computes (a tensor reduction; collectives have distributed::ReduceOp).
enum class ReduceKind : int8_t { Sum, Prod, Max, Min };
/// The reduction's name as kernel errors show it: "sum", "prod", "max", "min".
const char* to_string(ReduceKind op);

/// Where the windows of a 2-D sliding-window op lie over an input's last two dims (height, width): window
/// position (oy, ox) and kernel offset (ky, kx) read input row oy * stride[0] - pad[0] + ky * dilation[0] (and
/// the same over the width); what falls outside [0, in[0]) x [0, in[1]) is padding.
struct Window2d {
  std::array<int64_t, 2> kernel;                             ///< window size per dim (height, width)
  std::array<int64_t, 2> stride;                             ///< step between window positions per dim
  std::array<int64_t, 2> dilation;                           ///< step between kernel offsets per dim
  std::array<int64_t, 2> pad;                                ///< padding before each dim
  std::array<int64_t, 2> in;                                 ///< input extent
  std::array<int64_t, 2> out;                                ///< window positions per dim
  int64_t positions() const { return out[0] * out[1]; }      ///< window positions, L
  int64_t offsets() const { return kernel[0] * kernel[1]; }  ///< kernel offsets, K
};

/// What the fused attention kernels compute besides their operands (scaled_dot_product_attention): row i of
/// slice n weighs key j by softmax_j(q_i . k_j * scale + mask[n, i, j]), with keys j > i left out when causal
/// (top-left aligned, as torch's tril) and, when dropout_p > 0, each weight dropped with probability dropout_p and
/// the rest scaled by 1 / (1 - dropout_p). Weight (n, i, j) is kept when u >= dropout_p, compared in float32 (float64
/// for double operands), u the uniform of counter offset + (n * L + i) * S + j of the stream (seed, offset) in that
/// precision: exactly what uniform() writes for [0, 1), so a composite that draws rand({N, L, S}) drops the same.
struct AttentionParams {
  double scale = 1;      ///< multiplies q . k
  bool causal = false;   ///< key j > query i gets no weight
  double dropout_p = 0;  ///< probability of dropping a weight
  uint64_t seed = 0;     ///< dropout's stream
  uint64_t offset = 0;   ///< dropout's first counter
};

/// One parameter of a fused Adam or AdamW step (adam_step): its tensors, contiguous, of one floating dtype and
/// device, and the bias corrections 1 - beta^step of its own step count.
struct AdamParam {
  Tensor param;                 ///< p, updated in place
  Tensor grad;                  ///< g, read only
  Tensor exp_avg;               ///< m, updated in place
  Tensor exp_avg_sq;            ///< v, updated in place
  Tensor max_exp_avg_sq;        ///< v_max with amsgrad (updated in place), else undefined
  double bias_correction1 = 1;  ///< 1 - beta1^step
  double bias_correction2 = 1;  ///< 1 - beta2^step
};
/// Adam's hyperparameters for adam_step (optim/adam.h has the update).
struct AdamHyper {
  double lr = 1e-3;         ///< learning rate
  double beta1 = 0.9;       ///< m's decay
  double beta2 = 0.999;     ///< v's decay
  double eps = 1e-8;        ///< added to the denominator
  double weight_decay = 0;  ///< L2 on the gradient (Adam) or decoupled decay of p (AdamW)
  double decay = 1;         ///< AdamW's factor 1 - lr * weight_decay, as the per-parameter path computed it
  bool decoupled = false;   ///< AdamW
  bool amsgrad = false;     ///< divide by the running maximum of v
};
/// One parameter of a fused SGD step (sgd_step): contiguous, of one floating dtype and device.
struct SgdParam {
  Tensor param;             ///< p, updated in place
  Tensor grad;              ///< g, read only
  Tensor momentum_buffer;   ///< with momentum, updated in place (set to d on the first step), else undefined
  bool first_step = false;  ///< the buffer is new: it takes d instead of decaying
};
/// SGD's hyperparameters for sgd_step (optim/sgd.h has the update).
struct SgdHyper {
  double lr = 0.01;         ///< learning rate
  double momentum = 0;      ///< buffer decay; 0: no buffer
  double dampening = 0;     ///< scales d into the buffer by 1 - dampening
  double weight_decay = 0;  ///< L2 on the gradient
  bool nesterov = false;    ///< step along d + momentum * buffer
};

/// One device's implementation of the primitives.
class Kernels {
 public:
  virtual ~Kernels() = default;
  /// Memory on `device` (its index picks the GPU), 64-byte aligned; on CUDA ordered on the device's current stream.
  virtual void* allocate(Device device, size_t nbytes) const = 0;
  /// Frees allocate(device, nbytes)'s memory
  virtual void deallocate(Device device, void* p, size_t nbytes) const = 0;
  /// dst = src, converting dtype; same sizes. src and dst may be on different devices: copy_kernels_for picks the table.
  virtual void copy(const Tensor& src, const Tensor& dst) const = 0;
  virtual void fill(const Tensor& dst, double value) const = 0;  ///< every element of dst = value
  /// Out = op(in); LogicalNot writes bool
  virtual void unary(UnaryOp op, const Tensor& in, const Tensor& out) const = 0;
  /// out = op(a, b); a and b share dtype and out's sizes; comparisons and logical ops write bool.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) const = 0;
  /// out = a + alpha * b in one pass (add and sub with alpha, optimizer updates); operands as for binary.
  virtual void add_scaled(const Tensor& a, const Tensor& b, double alpha, const Tensor& out) const = 0;
  /// out = cond ? a : b; cond is bool, a and b share out's dtype and sizes.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) const = 0;
  /// Reduces `in` over dims into out, whose sizes are in's with those dims set to 1.
  virtual void reduce(ReduceKind op, const Tensor& in, IntArrayRef dims, const Tensor& out) const = 0;
  /// Max or Min along one dim: values and int64 indices of the first extreme (NaN wins), sizes with dim set to 1.
  virtual void arg_reduce(ReduceKind op, const Tensor& in, int64_t dim, const Tensor& values,
                          const Tensor& indices) const = 0;
  /// out[b] = a[b] @ c[b] for 3-D a [B, M, K], c [B, K, N], out [B, M, N] (contiguous out).
  virtual void matmul(const Tensor& a, const Tensor& c, const Tensor& out) const = 0;
  /// out[..i..] = in[..index[..i..]..] along dim; index (int64) has out's sizes, checked against in.size(dim).
  virtual void gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) const = 0;
  /// out[..index[..i..]..] += src[..i..] along dim; index has src's sizes, checked against out.size(dim).
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) const = 0;
  /// im2col: cols [N, C, K, L] = what the windows of `window` read from in [N, C, H, W], pad_value over the
  /// padding (in an integer dtype, -inf and inf stand for its lowest and highest values); both contiguous, of one dtype (check_window_operands).
  virtual void im2col(const Tensor& in, const Window2d& window, double pad_value, const Tensor& cols) const = 0;
  /// col2im, im2col's adjoint: out [N, C, H, W] = at each input position, the sum of what cols [N, C, K, L] holds
  /// for the windows that read it (nothing of the padding); both contiguous, of one non-bool dtype.
  virtual void col2im(const Tensor& cols, const Window2d& window, const Tensor& out) const = 0;
  /// Direct convolution, where the device has a kernel for these operands: out [N, O, oH, oW] = in [N, C, H, W]
  /// convolved with weight [O, C / groups, kH, kW] over `window` (its padding zeros). Returns false, writing
  /// nothing, where it has none: the caller then composes im2col and matmul. All contiguous, of one dtype.
  virtual bool conv2d(const Tensor& in, const Tensor& weight, const Window2d& window, int64_t groups,
                      const Tensor& out) const = 0;
  /// conv2d's gradient with respect to its input (a transposed convolution): grad_in [N, C, H, W] from grad_out
  /// [N, O, oH, oW] and weight; false where the device has no direct kernel, as conv2d.
  virtual bool conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                                     int64_t groups, const Tensor& grad_in) const = 0;
  /// conv2d's gradient with respect to its weight: grad_weight [O, C / groups, kH, kW] from in and grad_out;
  /// false where the device has no direct kernel, as conv2d.
  virtual bool conv2d_backward_weight(const Tensor& in, const Tensor& grad_out, const Window2d& window, int64_t groups,
                                      const Tensor& grad_weight) const = 0;
  /// Fused attention, where the device has a kernel for these operands (AttentionParams says what it computes):
  /// out [N, L, Ev] from q [N, L, E], k [N, S, E], v [N, S, Ev], an additive mask [N, L, S] of q's dtype with any
  /// strides (stride 0 where broadcast) or undefined; logsumexp [N, L] (float64 for double operands, else float32)
  /// gets each row's log of its softmax denominator, -inf for a row that sees no key, whose output row is 0.
  /// Never materialises [L, S]. q, k, v, out contiguous, one floating dtype. Returns false, writing nothing, where
  /// it has none: the caller then composes matmul and softmax.
  virtual bool attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         const AttentionParams& params, const Tensor& out, const Tensor& logsumexp) const = 0;
  /// attention's gradients from grad_out [N, L, Ev], given its out and logsumexp (the weights recomputed, not
  /// stored): grad_q, grad_k and grad_v, contiguous, with q's, k's and v's sizes; false where attention is.
  virtual bool attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  const Tensor& out, const Tensor& logsumexp, const Tensor& grad_out,
                                  const AttentionParams& params, const Tensor& grad_q, const Tensor& grad_k,
                                  const Tensor& grad_v) const = 0;
  /// softmax, or log_softmax when `log`, of in [outer, size, inner] along its middle dim into out (in's sizes);
  /// both contiguous, of one floating dtype. A NaN or +inf makes its slice NaN; -inf entries get 0 (-inf for log).
  virtual void softmax(const Tensor& in, bool log, const Tensor& out) const = 0;
  /// softmax's gradient from its output y and grad [outer, size, inner], sums along the middle dim: grad_in =
  /// y * (grad - sum(grad * y)), or for log_softmax grad - exp(y) * sum(grad). All contiguous, of one dtype.
  virtual void softmax_backward(const Tensor& y, const Tensor& grad, bool log, const Tensor& grad_in) const = 0;
  /// Layer norm of each row of in [M, N]: out = (x - mean) * rstd * weight + bias, weight and bias [N] (either
  /// undefined: 1 and 0), with the row statistics mean [M] and rstd [M] = 1 / sqrt(biased variance + eps) written
  /// in float32 (float64 for double). in, out, weight and bias contiguous, of one floating dtype.
  virtual void layer_norm(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                          const Tensor& mean, const Tensor& rstd) const = 0;
  /// layer_norm's gradients from grad_out [M, N], given its mean and rstd; each undefined output is not computed.
  /// With xhat = (x - mean) * rstd and dxhat = grad_out * weight: grad_in [M, N] = rstd * (dxhat - mean(dxhat) -
  /// xhat * mean(dxhat * xhat)), the means along the row; grad_weight [N] = the column sums of grad_out * xhat and
  /// grad_bias [N] those of grad_out, accumulated in float32 (float64 for double).
  virtual void layer_norm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, const Tensor& grad_in, const Tensor& grad_weight,
                                   const Tensor& grad_bias) const = 0;
  /// Cross entropy of each row n of logits [N, C] at its class target[n] (int64 [N], in [0, C) or ignore_index),
  /// the log-probabilities never stored: with lse[n] = log(sum_c exp(x[n, c])), nll[n] = lse[n] - x[n, target[n]]
  /// and, where smooth is defined, smooth[n] = sum_c weight[c] * (lse[n] - x[n, c]) (weight [C], undefined: all 1);
  /// a row whose target is ignore_index gets 0 in both. lse [N] is float32 (float64 for double); logits, weight,
  /// nll and smooth share one floating dtype. All contiguous. The CPU checks the targets; a CUDA kernel cannot
  /// report one, so its caller checks them, and a row with one out of range comes out NaN.
  virtual void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                             const Tensor& nll, const Tensor& smooth, const Tensor& lse) const = 0;
  /// cross_entropy's gradient from grad_nll [N] and grad_smooth [N] (undefined: 0), p = exp(x - lse):
  /// grad_logits[n, c] = grad_nll[n] * (p[n, c] - [c == target[n]]) + grad_smooth[n] * (p[n, c] * sum(weight) -
  /// weight[c]), and 0 in a row whose target is ignore_index.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                      int64_t ignore_index, const Tensor& lse, const Tensor& grad_nll,
                                      const Tensor& grad_smooth, const Tensor& grad_logits) const = 0;
  /// Adam's or AdamW's update (optim/adam.h) of every parameter in one pass (the optimizers' fused option), element
  /// for element the same arithmetic as their per-parameter path, so float64 results are bit for bit its own: with
  /// fma(a, b, c) = a * b + c (rounded once where the CPU has FMA; add with alpha computes it alike), in the
  /// parameter's dtype (float32 for the 16-bit types on CUDA),
  ///   g = Adam with weight decay: fma(wd, p, g);  AdamW: p = p * decay
  ///   m = fma(1 - beta1, g, m * beta1);  v = fma(1 - beta2, g * g, v * beta2);  v_max = max(v_max, v)
  ///   p = fma(-lr / bias_correction1, m / (sqrt(v or v_max) / sqrt(bias_correction2) + eps), p)
  /// (scalars computed in double, then converted). Every parameter shares one dtype and device.
  virtual void adam_step(const std::vector<AdamParam>& params, const AdamHyper& hyper) const = 0;
  /// SGD's update (optim/sgd.h) of every parameter in one pass, the per-parameter path's arithmetic:
  ///   d = fma(wd, p, g) with weight decay, else g;  buf = first_step ? d : fma(1 - dampening, d, buf * momentum)
  ///   d = nesterov ? fma(momentum, buf, d) : buf (with momentum);  p = fma(-lr, d, p)
  virtual void sgd_step(const std::vector<SgdParam>& params, const SgdHyper& hyper) const = 0;
  /// Sorts each slice of `in` along dim and writes its first k = values.size(dim) elements (the k smallest, or
  /// largest when descending) and their int64 indices along dim; values and indices have in's sizes with dim set
  /// to k. NaN sorts as the largest value; equal elements keep their input order (Note [sort order], cpu/sort.cpp).
  virtual void sort(const Tensor& in, int64_t dim, bool descending, const Tensor& values,
                    const Tensor& indices) const = 0;
  /// out[i] = start + i * step.
  virtual void arange(const Tensor& out, double start, double step) const = 0;
  /// Uniform [lo, hi) floats from the counter-based stream (seed, offset + i); floating dtypes only.
  virtual void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) const = 0;
  /// Uniform integers in [lo, hi) (lo < hi, any int64 range) from the same stream; integer dtypes only.
  virtual void uniform_int(const Tensor& out, int64_t lo, int64_t hi, uint64_t seed, uint64_t offset) const = 0;
  /// Normal(mean, std) floats from the counter-based stream (seed, offset + i).
  virtual void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) const = 0;
  /// For each row n of the non-negative weights probs [N, C] (positive row sums), out.size(1) int64 categories drawn
  /// with replacement into out [N, S]: sample s is the first category whose running sum of weights exceeds u times
  /// the row's sum, u uniform in [0, 1) from the stream (seed, offset + n * S + s).
  virtual void multinomial(const Tensor& probs, const Tensor& out, uint64_t seed, uint64_t offset) const = 0;
  /// LSTM's pointwise step (fused_lstm_cell): with gates = input_gates + hidden_gates [B, 4H] in the order i, f,
  /// g, o, cy = sigmoid(f) cx + sigmoid(i) tanh(g) and hy = sigmoid(o) tanh(cy), all [B, H]. Every operand of
  /// the rnn cell entries is contiguous and floating, of one dtype (check_rnn_cell_operands).
  virtual void lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx, const Tensor& hy,
                         const Tensor& cy) const = 0;
  /// lstm_cell's gradient from grad_hy and grad_cy, the gates recomputed: grad_gates [B, 4H] (of either gate
  /// operand) and grad_cx [B, H].
  virtual void lstm_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                                  const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& grad_gates,
                                  const Tensor& grad_cx) const = 0;
  /// GRU's pointwise step (fused_gru_cell) from input_gates = W_i x + b_i and hidden_gates = W_h hx + b_h [B, 3H]
  /// in the order r, z, n: n = tanh(i_n + r h_n), hy = (1 - z) n + z hx [B, H].
  virtual void gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                        const Tensor& hy) const = 0;
  /// gru_cell's gradient from grad_hy, the gates recomputed: grad_input_gates and grad_hidden_gates [B, 3H] (equal
  /// but in the n gate, where the second carries the factor r) and grad_hx [B, H].
  virtual void gru_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                 const Tensor& grad_hy, const Tensor& grad_input_gates, const Tensor& grad_hidden_gates,
                                 const Tensor& grad_hx) const = 0;
};

/// A tensor sharing base's storage with the given geometry and no autograd state (for view ops and kernels).
Tensor make_view(const Tensor& base, IntArrayRef sizes, IntArrayRef strides, int64_t offset);

/// The kernels for a device; throws when strata was built without that backend.
const Kernels& kernels_for(Device device);
/// The table that copies between src's and dst's devices: CUDA's when either side is a GPU.
inline const Kernels& copy_kernels_for(Device src, Device dst) { return kernels_for(src.is_cpu() ? dst : src); }
/// The CPU table (tensor/cpu/).
const Kernels& cpu_kernels();
/// The CUDA table (tensor/cuda/); in a build without CUDA it throws "this build of strata has no CUDA backend".
const Kernels& cuda_kernels();

}  // namespace strata
