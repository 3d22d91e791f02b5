#pragma once
// The differentiable ops, libtorch's free-function names. Each op family lives in one file
// of autograd/ops/ with every forward beside its backward.
//
//   using namespace strata;
//   auto param = [](IntArrayRef sizes) { return randn(sizes, requires_grad()); };
//   Tensor w1 = param({784, 256}), b1 = param({256}), w2 = param({256, 10}), b2 = param({10});
//   Tensor x = randn({64, 784}), labels = randint(0, 10, {64});
//   Tensor h = relu(matmul(x, w1) + b1);
//   Tensor loss = cross_entropy(matmul(h, w2) + b2, labels, {.label_smoothing = 0.1});
//   loss.backward();

#include <concepts>
#include <optional>
#include <string>
#include <tuple>
#include <variant>

#include "strata/tensor/creation.h"
#include "strata/tensor/promotion.h"
#include "strata/tensor/tensor.h"

namespace strata {

// ---- elementwise (autograd/ops/elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  ///< a + alpha * b, broadcasting
/// A + alpha * b (Note [type promotion] in tensor/promotion.cpp)
Tensor add(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);  ///< a - alpha * b
Tensor sub(const Tensor& a, Scalar b, Scalar alpha = 1);         ///< a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);                    ///< a * b
Tensor mul(const Tensor& a, Scalar b);                           ///< a * b
Tensor div(const Tensor& a, const Tensor& b);                    ///< a / b (true division: integer inputs give float)
Tensor div(const Tensor& a, Scalar b);                           ///< a / b (true division)
Tensor neg(const Tensor& a);                                     ///< -a
Tensor pow(const Tensor& a, const Tensor& e);                    ///< a ** e
Tensor pow(const Tensor& a, Scalar e);                           ///< a ** e
Tensor exp(const Tensor& a);                                     ///< e ** a
Tensor log(const Tensor& a);                                     ///< natural log
Tensor sqrt(const Tensor& a);                                    ///< square root
Tensor rsqrt(const Tensor& a);                                   ///< 1 / sqrt(a)
Tensor abs(const Tensor& a);                                     ///< |a|
Tensor tanh(const Tensor& a);                                    ///< hyperbolic tangent
Tensor sigmoid(const Tensor& a);                                 ///< 1 / (1 + exp(-a))
Tensor relu(const Tensor& a);                                    ///< max(a, 0)
/// x * Phi(x); approximate = "tanh" uses the tanh formula, as torch's gelu.
Tensor gelu(const Tensor& a, const std::string& approximate = "none");
Tensor silu(const Tensor& a);                                      ///< a * sigmoid(a)
Tensor leaky_relu(const Tensor& a, double negative_slope = 0.01);  ///< a where a > 0, else negative_slope * a
/// Limits to [min, max]
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp_min(const Tensor& a, Scalar min);     ///< clamp(a, min): at least min
Tensor clamp_max(const Tensor& a, Scalar max);     ///< clamp(a, nullopt, max): at most max
Tensor maximum(const Tensor& a, const Tensor& b);  ///< elementwise max (gradient split evenly on ties)
Tensor minimum(const Tensor& a, const Tensor& b);  ///< elementwise min (gradient split evenly on ties)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  ///< a where cond, else b; broadcasting
Tensor eq(const Tensor& a, const Tensor& b);                         ///< a == b, bool
Tensor eq(const Tensor& a, Scalar b);                                ///< a == b, bool
Tensor ne(const Tensor& a, const Tensor& b);                         ///< a != b, bool
Tensor ne(const Tensor& a, Scalar b);                                ///< a != b, bool
Tensor lt(const Tensor& a, const Tensor& b);                         ///< a < b, bool
Tensor lt(const Tensor& a, Scalar b);                                ///< a < b, bool
Tensor le(const Tensor& a, const Tensor& b);                         ///< a <= b, bool
Tensor le(const Tensor& a, Scalar b);                                ///< a <= b, bool
Tensor gt(const Tensor& a, const Tensor& b);                         ///< a > b, bool
Tensor gt(const Tensor& a, Scalar b);                                ///< a > b, bool
Tensor ge(const Tensor& a, const Tensor& b);                         ///< a >= b, bool
Tensor ge(const Tensor& a, Scalar b);                                ///< a >= b, bool
Tensor logical_and(const Tensor& a, const Tensor& b);                ///< a && b, bool
Tensor logical_or(const Tensor& a, const Tensor& b);                 ///< a || b, bool
Tensor logical_not(const Tensor& a);                                 ///< !a, bool
Tensor bitwise_and(const Tensor& a, const Tensor& b);                ///< a & b on integers and bool (and, on bool)
Tensor bitwise_and(const Tensor& a, Scalar b);                       ///< a & b
Tensor bitwise_or(const Tensor& a, const Tensor& b);                 ///< a | b on integers and bool (or, on bool)
Tensor bitwise_or(const Tensor& a, Scalar b);                        ///< a | b
Tensor bitwise_xor(const Tensor& a, const Tensor& b);                ///< a ^ b on integers and bool (xor, on bool)
Tensor bitwise_xor(const Tensor& a, Scalar b);                       ///< a ^ b
Tensor bitwise_not(const Tensor& a);                                 ///< ~a on integers, !a on bool

// ---- reductions (autograd/ops/reduce.cpp); an empty dims list means every dim ----
Tensor sum(const Tensor& a, IntArrayRef dims = {}, bool keepdim = false);   ///< sum over dims
Tensor mean(const Tensor& a, IntArrayRef dims = {}, bool keepdim = false);  ///< mean over dims (floating point only)
Tensor prod(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);  ///< product
Tensor max(const Tensor& a);  ///< largest element (gradient split evenly among ties)
std::tuple<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);  ///< values, indices along dim
Tensor min(const Tensor& a);                                                         ///< smallest element
std::tuple<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);  ///< values, indices along dim
Tensor amax(const Tensor& a, IntArrayRef dims = {}, bool keepdim = false);  ///< max over dims (ties share the gradient)
Tensor amin(const Tensor& a, IntArrayRef dims = {}, bool keepdim = false);  ///< min over dims (ties share the gradient)
Tensor argmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);  ///< index of max
Tensor argmin(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);  ///< index of min
Tensor var(const Tensor& a, IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false);   ///< variance
Tensor std(const Tensor& a, IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false);  ///< standard deviation
Tensor norm(const Tensor& a, double p = 2, IntArrayRef dims = {}, bool keepdim = false);         ///< p-norm
Tensor logsumexp(const Tensor& a, IntArrayRef dims, bool keepdim = false);  ///< stable log(sum(exp(a)))
Tensor all(const Tensor& a);                                     ///< whether every element is non-zero, bool 0-dim
Tensor all(const Tensor& a, int64_t dim, bool keepdim = false);  ///< whether every element along dim is non-zero
Tensor any(const Tensor& a);                                     ///< whether some element is non-zero, bool 0-dim
Tensor any(const Tensor& a, int64_t dim, bool keepdim = false);  ///< whether some element along dim is non-zero

// ---- sorting and sampling (autograd/ops/sort.cpp): NaN sorts as the largest value, equal elements keep their
// input order (every sort is stable, on every device), and values are differentiable ----
/// Values sorted along dim (ascending unless descending) and the int64 indices they came from
std::tuple<Tensor, Tensor> sort(const Tensor& a, int64_t dim = -1, bool descending = false);
/// sort with libtorch's `stable` flag (every strata sort is stable)
std::tuple<Tensor, Tensor> sort(const Tensor& a, std::optional<bool> stable, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& a, int64_t dim = -1, bool descending = false);  ///< the indices of sort
/// argsort with libtorch's `stable` flag (every strata sort is stable); only a real bool picks this, so
/// argsort(x, 1) sorts along dim 1 where libtorch's overloads are ambiguous
template <class B>
requires std::same_as<B, bool> Tensor argsort(const Tensor& a, B stable, int64_t dim = -1, bool descending = false) {
  return argsort(a, dim, descending);
}
Tensor msort(const Tensor& a);  ///< values sorted along dim 0
/// The k largest (or smallest) values along dim, in order, and their indices; of equal values the earliest are kept
std::tuple<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
/// The k-th smallest value along dim (k counts from 1) and its index
std::tuple<Tensor, Tensor> kthvalue(const Tensor& a, int64_t k, int64_t dim = -1, bool keepdim = false);
/// num_samples int64 category indices drawn per row of the weights a ([C] or [N, C]: non-negative, finite, a
/// positive sum), with or without replacement, from gen (default: the default generator)
Tensor multinomial(const Tensor& a, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

// ---- linear algebra (autograd/ops/linalg.cpp) ----
Tensor matmul(const Tensor& a, const Tensor& b);  ///< 1-D, 2-D and batched with broadcast batch dims
Tensor mm(const Tensor& a, const Tensor& b);      ///< [n,k] @ [k,m]
Tensor bmm(const Tensor& a, const Tensor& b);     ///< [b,n,k] @ [b,k,m]
/// input @ weight^T + bias over input's last dim, as torch::nn::functional::linear (bias optional)
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});

// ---- shape and views (autograd/ops/shape.cpp) ----
Tensor t(const Tensor& a);                                  ///< transpose of a tensor of at most 2 dims
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);  ///< swaps two dims
Tensor permute(const Tensor& a, IntArrayRef dims);          ///< reorders dims
Tensor reshape(const Tensor& a, IntArrayRef sizes);         ///< view when possible, else copy
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);  ///< merges dims
Tensor unsqueeze(const Tensor& a, int64_t dim);                                ///< inserts a size-1 dim
Tensor squeeze(const Tensor& a, std::optional<int64_t> dim = std::nullopt);    ///< removes size-1 dims
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);    ///< a view of a range
Tensor select(const Tensor& a, int64_t dim, int64_t index);                    ///< picks one index, removing dim
Tensor cat(const tensor_list& tensors, int64_t dim = 0);                       ///< concatenates along dim
/// The upper triangle of the last two dims (on and above diagonal k; k > 0 moves it up), the rest zero
Tensor triu(const Tensor& a, int64_t diagonal = 0);
/// The lower triangle of the last two dims (on and below diagonal k), the rest zero
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor stack(const tensor_list& tensors, int64_t dim = 0);                ///< stacks along a new dim
tensor_list split(const Tensor& a, int64_t split_size, int64_t dim = 0);  ///< views of split_size
tensor_list chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);      ///< near-equal views

// ---- indexing (autograd/ops/index.cpp) ----
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);  ///< picks indices along dim
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);        ///< gathers along dim
/// A with src added at index
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value);  ///< value (converted to a's dtype) where mask
/// Rows of weight picked by indices, as ATen's: padding_idx (negative: none) gets no gradient; scale_grad_by_freq
/// divides each row's gradient by its count in indices; sparse (sparse gradients) throws, strata has none.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1, bool scale_grad_by_freq = false,
                 bool sparse = false);
/// Scales in place each row of self [V, D] that indices pick whose norm_type-norm exceeds max_norm, to max_norm.
Tensor& embedding_renorm_(Tensor& self, const Tensor& indices, double max_norm, double norm_type);

// ---- nn functional (autograd/ops/nn.cpp) ----
Tensor softmax(const Tensor& a, int64_t dim);      ///< exp(a) / sum(exp(a)) along dim
Tensor log_softmax(const Tensor& a, int64_t dim);  ///< a - logsumexp(a) along dim
/// Normalises over the trailing dims `normalized_shape`, then scales and shifts (weight and bias optional).
Tensor layer_norm(const Tensor& a, IntArrayRef normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
/// Normalises each channel (dim 1) of [N, C, ...]: with the batch's statistics when training (and running_mean /
/// running_var, if given, updated in place by momentum), else with the running ones; then * weight + bias
Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
/// Normalises each sample's channels in num_groups groups, then * weight + bias per channel
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
/// x / sqrt(mean(x^2) + eps) over the trailing dims normalized_shape, then * weight; eps defaults to finfo.eps
Tensor rms_norm(const Tensor& input, IntArrayRef normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& a, double p = 0.5, bool train = true, Generator* gen = nullptr);
/// int64 class indices to a one-hot int64 tensor with a trailing dim of num_classes (-1: max + 1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- attention (autograd/ops/attention.cpp) ----
/// Which heads of a whole attention a call computes: query's heads (its last batch dim) are the whole's heads
/// [first, first + count) of `total`. The default, total 0, is the whole attention.
struct AttentionHeads {
  int64_t first = 0;  ///< the whole attention's index of query's head 0
  int64_t total = 0;  ///< the whole attention's head count; 0: query's own
};
/// softmax(query key^T * scale + mask) value (torch::scaled_dot_product_attention): query [..., L, E], key [..., S, E],
/// value [..., S, Ev] -> [..., L, Ev], batch dims broadcast. attn_mask broadcasts to [..., L, S]: bool (true takes
/// part) or added to the scores; is_causal lets query i see keys j <= i (no attn_mask with it); scale defaults to
/// 1 / sqrt(E); dropout_p drops attention weights (always: pass 0 when evaluating); enable_gqa lets key and value have
/// fewer heads (dim -3) than query, each shared by a group of query heads. A query that sees no key gets a row of 0.
/// A fused kernel that never holds [L, S] runs where the device has one (STRATA_DISPATCH_LOG=1 prints the path).
/// strata's `heads` (not in libtorch) says query's heads are some of a larger attention's, as a tensor-parallel rank
/// holds them: dropout then drops what the whole attention drops at those heads, and advances the generator as it.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask = std::nullopt, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false, const AttentionHeads& heads = {});

// ---- recurrent cells and stacks (autograd/ops/rnn.cpp), as ATen's functions; cells step [batch, features] ----
/// LSTM's pointwise step from gate pre-activations input_gates + hidden_gates [B, 4H] (i, f, g, o) and cx [B, H]:
/// (h', c') with c' = sigmoid(f) * cx + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c'); one node, one kernel
std::tuple<Tensor, Tensor> fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx);
/// GRU's pointwise step from input_gates = x W_ih^T + b_ih and hidden_gates = hx W_hh^T + b_hh [B, 3H] (r, z, n):
/// h' = (1 - z) * n + z * hx with n = tanh(i_n + r * h_n); one node, one kernel
Tensor fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx);
/// One LSTM step of input [B, I] from hx = {h, c} [B, H] with w_ih [4H, I], w_hh [4H, H] (torch::lstm_cell): (h', c')
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const tensor_list& hx, const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
/// One GRU step of input [B, I] from hx [B, H] with w_ih [3H, I], w_hh [3H, H] (torch::gru_cell)
Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = {},
                const Tensor& b_hh = {});
/// tanh(input W_ih^T + b_ih + hx W_hh^T + b_hh) (torch::rnn_tanh_cell)
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
/// relu(input W_ih^T + b_ih + hx W_hh^T + b_hh) (torch::rnn_relu_cell)
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = {}, const Tensor& b_hh = {});
// Stacks of layers over input [seq, batch, features] ([batch, seq, features] with batch_first) from states
// [num_layers * directions, batch, features], as ATen's: params are w_ih, w_hh (then b_ih, b_hh with has_biases;
// LSTM: then w_hr for projections) for each layer and direction, the reverse direction second; dropout applies
// to every layer's output but the last's when train. Outputs are [seq, batch, directions * h features].
/// LSTM stack from hx = {h_0, c_0} (torch::lstm): (output, h_n, c_n)
std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const tensor_list& hx, const tensor_list& params,
                                        bool has_biases, int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first);
/// GRU stack from h_0 = hx (torch::gru): (output, h_n)
std::tuple<Tensor, Tensor> gru(const Tensor& input, const Tensor& hx, const tensor_list& params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first);
/// Elman RNN stack with tanh from h_0 = hx (torch::rnn_tanh): (output, h_n)
std::tuple<Tensor, Tensor> rnn_tanh(const Tensor& input, const Tensor& hx, const tensor_list& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train, bool bidirectional,
                                    bool batch_first);
/// Elman RNN stack with relu from h_0 = hx (torch::rnn_relu): (output, h_n)
std::tuple<Tensor, Tensor> rnn_relu(const Tensor& input, const Tensor& hx, const tensor_list& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train, bool bidirectional,
                                    bool batch_first);

// ---- sliding windows (autograd/ops/conv.cpp): inputs [N, C, H, W] or unbatched [C, H, W]; a size
// argument is one value for every spatial dim or one per dim; an empty stride means the kernel size ----
/// Tag types of the padding names kValid and kSame, as libtorch's torch::enumtype.
namespace enumtype {
struct kValid {};  ///< padding "valid": none
struct kSame {};   ///< padding "same": the output as large as the input (stride 1)
}  // namespace enumtype
inline constexpr enumtype::kValid kValid{};  ///< conv padding: none, as torch::kValid
inline constexpr enumtype::kSame kSame{};    ///< conv padding: output as large as input, as torch::kSame
/// A convolution's padding given by name: kValid or kSame (not a string, which a literal 0 would convert to).
using PaddingMode = std::variant<enumtype::kValid, enumtype::kSame>;
/// The windows of input as columns [N, C * kH * kW, L] (F::unfold)
Tensor im2col(const Tensor& input, IntArrayRef kernel_size, IntArrayRef dilation, IntArrayRef padding,
              IntArrayRef stride);
/// Columns [N, C * kH * kW, L] summed back into [N, C, output_size] (F::fold), the adjoint of im2col
Tensor col2im(const Tensor& input, IntArrayRef output_size, IntArrayRef kernel_size, IntArrayRef dilation,
              IntArrayRef padding, IntArrayRef stride);
/// 2-D convolution (cross-correlation) of [N, C, H, W] with weight [O, C / groups, kH, kW] and an optional bias [O]
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, IntArrayRef stride = 1,
              IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
/// conv2d with padding kValid (none) or kSame (output as large as the input; stride 1)
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, PaddingMode padding,
              IntArrayRef dilation = 1, int64_t groups = 1);
/// 1-D convolution of [N, C, L] with weight [O, C / groups, k] and an optional bias [O]
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, IntArrayRef stride = 1,
              IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
/// conv1d with padding kValid or kSame
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, PaddingMode padding,
              IntArrayRef dilation = 1, int64_t groups = 1);
/// Transposed 2-D convolution (conv2d's gradient with respect to its input) with weight [C, O / groups, kH, kW]
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, IntArrayRef stride = 1,
                        IntArrayRef padding = 0, IntArrayRef output_padding = 0, int64_t groups = 1,
                        IntArrayRef dilation = 1);
/// Max over windows, with the flat index (into H * W) of each maximum
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                                   IntArrayRef stride = {}, IntArrayRef padding = 0,
                                                   IntArrayRef dilation = 1, bool ceil_mode = false);
/// Max over windows of [N, C, H, W]
Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false);
/// Max over windows of [N, C, L], with the index of each maximum
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                                   IntArrayRef stride = {}, IntArrayRef padding = 0,
                                                   IntArrayRef dilation = 1, bool ceil_mode = false);
/// Max over windows of [N, C, L]
Tensor max_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false);
/// Mean over windows; the divisor counts padding (count_include_pad) or not, unless divisor_override is given
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
/// Mean over output_size windows that tile [H, W] as evenly as torch's
Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size);
/// Dropout of whole channels of [N, C, ...] (one draw per sample and channel), scaled by 1/(1-p) when training
Tensor feature_dropout(const Tensor& input, double p, bool train, Generator* gen = nullptr);

/// How a loss reduces over the batch.
enum class Reduction { None, Mean, Sum };
constexpr Reduction kNone = Reduction::None;  ///< no reduction, as torch::kNone
constexpr Reduction kMean = Reduction::Mean;  ///< the mean, as torch::kMean
constexpr Reduction kSum = Reduction::Sum;    ///< the sum, as torch::kSum
/// Options of nll_loss and cross_entropy, named as in torch.nn.functional.
struct LossOptions {
  Reduction reduction = Reduction::Mean;  ///< mean over non-ignored targets, sum, or none
  int64_t ignore_index = -100;            ///< targets equal to this contribute nothing
  double label_smoothing = 0.0;           ///< cross_entropy only: mix with the uniform distribution
  Tensor weight = {};                     ///< optional per-class weights [C]
};
/// Negative log likelihood of log-probabilities [N, C] (or [N, C, d...]) at int64 targets [N] (or [N, d...]).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const LossOptions& options = {});
/// nll_loss with libtorch's positional arguments: nll_loss(out, target, /*weight=*/{}, Reduction::Sum)
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
/// log_softmax over dim 1 then nll_loss, with optional label smoothing.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions& options = {});
/// Mean (or sum, or none) of the squared difference.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
/// |input - target|, reduced.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
/// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, for d = input - target (beta 0: l1_loss), reduced.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
/// 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta), for d = input - target, reduced.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);
/// -w (t log(p) + (1 - t) log(1 - p)) for probabilities p in [0, 1] (an error otherwise), the logs clamped
/// at -100 as torch's; weight (optional) broadcasts to p.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);
/// binary_cross_entropy of sigmoid(input), computed stably from the logits; pos_weight (optional) scales
/// the positive term, per class along the last dim.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);

}  // namespace strata
