// nn functional ops: softmax, log_softmax, layer_norm, batch_norm, group_norm, rms_norm, dropout, one_hot and
// the losses.
//
// softmax, log_softmax, layer_norm and cross_entropy run the kernel table's fused kernels forward and
// backward, one node each. On an AMD EPYC, one thread, forward plus backward took 0.41 of the composite's
// time for layer norm on [1024, 128], 0.63 for softmax on [16, 4, 64, 64] and 0.78 for cross entropy on
// [1024, 4096] after a fused log_softmax (strata_bench's (j) sets them beside PyTorch's). Their backwards
// take differentiable ops when they build a graph (create_graph), so second derivatives still work. The
// rest are compositions of other ops, so their gradients come free.

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "strata/autograd/ops/common.h"
#include "strata/tensor/dispatch_log.h"

namespace strata {

using autograd::SavedVariable;

namespace {
int64_t softmax_dim(const Tensor& a, int64_t dim, const char* name) {
  STRATA_CHECK(a.is_floating_point(), name, ": expected a floating point tensor, got ", a.dtype());
  return wrap_dim(dim, a.dim(), name);
}

/// t as the kernels' [outer, size, inner] around dim d, contiguous (a view where t already is).
Tensor as_slices(const Tensor& t, int64_t d) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= t.size(i);
  for (int64_t i = d + 1; i < t.dim(); ++i) inner *= t.size(i);
  return t.contiguous().view({outer, t.dim() == 0 ? 1 : t.size(d), inner});
}

/// softmax or log_softmax through the fused kernels: one node saving only the output. A backward that builds
/// a graph (create_graph) writes the gradient in differentiable ops instead, so both are twice differentiable.
Tensor fused_softmax(const Tensor& a, int64_t dim, bool log) {
  const int64_t d = softmax_dim(a, dim, log ? "log_softmax" : "softmax");
  Tensor y = empty(a.sizes(), a.options());
  {
    NoGradGuard no_grad;
    const Tensor x = as_slices(a, d);
    ops::kernels(a).softmax(x, log, y.view(x.sizes()));
  }
  if (auto node = autograd::record(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", a, y))
    node->backward = [d, log, y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
      const Tensor yv = y.unpack();
      if (GradMode::is_enabled() || g[0].dtype() != yv.dtype())
        return {log ? g[0] - exp(yv) * sum(g[0], d, true) : yv * (g[0] - sum(g[0] * yv, d, true))};
      Tensor grad_in = empty(yv.sizes(), yv.options());
      const Tensor y3 = as_slices(yv, d);
      ops::kernels(yv).softmax_backward(y3, as_slices(g[0], d), log, grad_in.view(y3.sizes()));
      return {grad_in};
    };
  return y;
}
}  // namespace

// y = exp(x - m) / sum(exp(x - m)) with m the max along dim; dx = y * (g - sum(g * y)).
Tensor softmax(const Tensor& a, int64_t dim) {
  if (ops::AutocastArgs cast{"softmax", {a}}) return softmax(cast[0], dim);
  return fused_softmax(a, dim, /*log=*/false);
}

// y = (x - m) - log(sum(exp(x - m))); dx = g - exp(y) * sum(g).
Tensor log_softmax(const Tensor& a, int64_t dim) {
  if (ops::AutocastArgs cast{"log_softmax", {a}}) return log_softmax(cast[0], dim);
  return fused_softmax(a, dim, /*log=*/true);
}

Tensor Tensor::softmax(int64_t dim) const { return strata::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return strata::log_softmax(*this, dim); }

namespace {

/// x's trailing k dims normalised as differentiable ops: (x - mean) * rstd, and rstd = 1 / sqrt(biased var + eps).
std::pair<Tensor, Tensor> normalize_trailing(const Tensor& x, int64_t k, double eps) {
  DimVector cols;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) cols.push_back(d);
  const Tensor centered = x - mean(x, cols, /*keepdim=*/true);
  const Tensor rstd = rsqrt(mean(centered * centered, cols, /*keepdim=*/true) + eps);
  return {centered * rstd, rstd};
}

/// layer_norm's gradients as differentiable ops of x, weight and dy, the statistics recomputed from x: what a
/// backward that builds a graph (create_graph) returns, so layer_norm is twice differentiable.
tensor_list layer_norm_composite_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, int64_t k,
                                          double eps, bool need_w, bool need_b) {
  DimVector rows, cols;
  for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? rows : cols).push_back(d);
  const auto [xhat, rstd] = normalize_trailing(x, k, eps);
  const Tensor dxhat = weight.defined() ? dy * weight : dy;
  const Tensor dx = rstd * (dxhat - mean(dxhat, cols, true) - xhat * mean(dxhat * xhat, cols, true));
  // Summed over the leading dims; with none, sum(t, {}) would sum everything.
  const auto over_rows = [&](const Tensor& t) { return rows.empty() ? t : sum(t, rows); };
  return {dx, need_w ? over_rows(dy * xhat) : Tensor(), need_b ? over_rows(dy) : Tensor()};
}

}  // namespace

// (x - mean) / sqrt(var + eps) over the trailing normalized_shape dims (biased variance), then * weight + bias:
// the fused kernels, forward and backward, saving x and the row statistics. A weight or bias of another dtype
// or device than the input's takes the composite of ops, as the dispatch log says.
Tensor layer_norm(const Tensor& a, IntArrayRef normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  if (ops::AutocastArgs cast{"layer_norm", {a, weight, bias}})
    return layer_norm(cast[0], normalized_shape, cast[1], cast[2], eps);
  const char* op = "layer_norm";
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  STRATA_CHECK(k >= 1 && a.dim() >= k && IntArrayRef(a.sizes().data() + a.dim() - k, k) == normalized_shape, op,
               ": normalized_shape ", normalized_shape, " does not match the trailing dims of input shape ", a.sizes());
  STRATA_CHECK(!weight.defined() || weight.sizes() == normalized_shape, op, ": weight of shape ",
               weight.defined() ? weight.sizes() : IntArrayRef(), " does not match normalized_shape ",
               normalized_shape);
  STRATA_CHECK(!bias.defined() || bias.sizes() == normalized_shape, op, ": bias of shape ",
               bias.defined() ? bias.sizes() : IntArrayRef(), " does not match normalized_shape ", normalized_shape);
  STRATA_CHECK(a.is_floating_point(), op, ": expected a floating point input, got ", a.dtype());
  const auto foreign = [&](const Tensor& p) {
    return p.defined() && (p.dtype() != a.dtype() || p.device() != a.device());
  };
  if (foreign(weight) || foreign(bias)) {
    log_dispatch(op, str("composite: weight or bias of another dtype or device than the input's ", a.dtype(), " on ",
                         a.device()));
    Tensor y = normalize_trailing(a, k, eps).first;
    if (weight.defined()) y = y * weight;
    return bias.defined() ? y + bias : y;
  }
  log_dispatch(op, str("fused kernel (", a.dtype(), ")"));
  int64_t N = 1;
  for (int64_t d : normalized_shape) N *= d;
  const int64_t M = N == 0 ? 0 : a.numel() / N;
  const TensorOptions stats = a.options().dtype(a.dtype() == kDouble ? kDouble : kFloat);
  Tensor y = empty(a.sizes(), a.options()), mean = empty({M}, stats), rstd = empty({M}, stats);
  const auto flat = [](const Tensor& t, IntArrayRef sizes) { return t.defined() ? t.contiguous().view(sizes) : t; };
  {
    NoGradGuard no_grad;
    ops::kernels(a).layer_norm(flat(a, {M, N}), flat(weight, {N}), flat(bias, {N}), eps, y.view({M, N}), mean, rstd);
  }
  if (auto node = autograd::record("NativeLayerNormBackward0", {a, weight, bias}, {y})) {
    const bool need_x = a.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
               need_b = bias.defined() && bias.requires_grad();
    node->backward = [x = SavedVariable(a), w = weight.defined() ? SavedVariable(weight) : SavedVariable(), mean, rstd,
                      k, M, N, eps, need_x, need_w, need_b, flat](const tensor_list& grads) -> tensor_list {
      const Tensor xv = x.unpack(), wv = w.unpack(), &dy = grads[0];
      if (GradMode::is_enabled() || dy.dtype() != xv.dtype())
        return layer_norm_composite_backward(xv, wv, dy, k, eps, need_w, need_b);
      const IntArrayRef shape(xv.sizes().data() + xv.dim() - k, k);
      Tensor dx = need_x ? empty(xv.sizes(), xv.options()) : Tensor();
      Tensor dw = need_w ? empty(shape, xv.options()) : Tensor(), db = need_b ? empty(shape, xv.options()) : Tensor();
      ops::kernels(xv).layer_norm_backward(flat(dy, {M, N}), flat(xv, {M, N}), mean, rstd, flat(wv, {N}),
                                           flat(dx, {M, N}), flat(dw, {N}), flat(db, {N}));
      return {dx, dw, db};
    };
  }
  return y;
}

namespace {

/// [1, C, 1, ...]: a per-channel tensor's shape broadcast against [N, C, ...] of `ndim` dims.
DimVector channel_shape(int64_t channels, int64_t ndim) {
  DimVector shape(static_cast<size_t>(ndim), 1);
  shape[1] = channels;
  return shape;
}

/// y * weight + bias with per-channel weight and bias broadcast over [N, C, ...] (either may be undefined).
Tensor channel_affine(Tensor y, const Tensor& weight, const Tensor& bias) {
  if (weight.defined()) y = y * weight.reshape(channel_shape(weight.numel(), y.dim()));
  if (bias.defined()) y = y + bias.reshape(channel_shape(bias.numel(), y.dim()));
  return y;
}

/// torch.finfo(dtype).eps: the gap between 1 and the next representable value.
double machine_epsilon(ScalarType dtype) {
  switch (dtype) {
    case kFloat64:
      return 2.220446049250313e-16;
    case kHalf:
      return 0.0009765625;
    case kBFloat16:
      return 0.0078125;
    default:
      return 1.1920928955078125e-07;
  }
}

// Note [batch norm backward]: in training, y = centered * invstd * weight + bias with centered = x - mean and
// both statistics of x itself. Recorded as its composite it costs a dozen nodes and as many passes over the
// batch backward; as one node it costs four, from the closed form (M values per channel, sums over them):
//   dbias = sum(dy),  dweight = sum(dy * centered) * invstd,
//   dx = weight * invstd * (dy - dbias / M - centered * invstd * dweight / M).
// The node saves centered and invstd with their own history, so with create_graph the derivatives through
// the statistics come from the ops that made them, and second derivatives are exact.

/// The training-mode normalisation of x [N, C, ...] by its batch statistics (centered = x - mean and invstd,
/// [1, C, 1, ...], with history), reduced over dims, then the affine transform: one node (Note [batch norm
/// backward]).
Tensor normalize_by_batch(const Tensor& x, const Tensor& centered, const Tensor& invstd, const Tensor& weight,
                          const Tensor& bias, const DimVector& dims) {
  const DimVector shape = channel_shape(x.size(1), x.dim());
  Tensor y;
  {
    NoGradGuard no_grad;
    const Tensor scale = weight.defined() ? invstd * weight.reshape(shape) : invstd;
    y = bias.defined() ? centered * scale + bias.reshape(shape) : centered * scale;
  }
  if (auto node = autograd::record("NativeBatchNormBackward0", {x, weight, bias}, {y})) {
    const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
               need_b = bias.defined() && bias.requires_grad();
    const double count = static_cast<double>(x.numel() / std::max<int64_t>(x.size(1), 1));
    node->backward = [saved_centered = SavedVariable(centered), saved_invstd = SavedVariable(invstd),
                      saved_w = weight.defined() ? SavedVariable(weight) : SavedVariable(), shape, dims, count, need_x,
                      need_w, need_b](const tensor_list& grads) -> tensor_list {
      const Tensor& dy = grads[0];
      const Tensor centered = saved_centered.unpack(), invstd = saved_invstd.unpack();
      const Tensor sum_dy = sum(dy, dims, /*keepdim=*/true);
      const Tensor dweight = need_x || need_w ? sum(dy * centered, dims, /*keepdim=*/true) * invstd : Tensor();
      Tensor dx;
      if (need_x) {
        const Tensor w = saved_w.unpack();
        const Tensor k = w.defined() ? invstd * w.reshape(shape) : invstd;
        dx = dy * k + (centered * (k * invstd * dweight * (-1 / count)) + k * sum_dy * (-1 / count));
      }
      const int64_t channels = shape[1];
      return {dx, need_w ? dweight.reshape({channels}) : Tensor(), need_b ? sum_dy.reshape({channels}) : Tensor()};
    };
  }
  return y;
}

void check_per_channel(const Tensor& t, int64_t channels, const char* what, const char* op) {
  STRATA_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == channels), op, ": expected ", what, " of shape [",
               channels, "], got ", t.defined() ? t.sizes() : IntArrayRef());
}

}  // namespace

// Training: batch statistics over every dim but 1 (biased variance to normalise, unbiased into
// running_var, as torch), running stats updated in place without history. Otherwise the running stats.
Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  // The running statistics pass uncast: batch_norm updates them in place, and a cast copy would drop the update.
  if (ops::AutocastArgs cast{"batch_norm", {input, weight, bias}})
    return batch_norm(cast[0], cast[1], cast[2], running_mean, running_var, training, momentum, eps);
  const char* op = "batch_norm";
  STRATA_CHECK(input.dim() >= 2, op, ": expected an input [N, C, ...], got shape ", input.sizes());
  STRATA_CHECK(input.is_floating_point(), op, ": expected a floating point input, got ", input.dtype());
  const int64_t channels = input.size(1);
  check_per_channel(weight, channels, "weight", op);
  check_per_channel(bias, channels, "bias", op);
  check_per_channel(running_mean, channels, "running_mean", op);
  check_per_channel(running_var, channels, "running_var", op);
  STRATA_CHECK(running_mean.defined() == running_var.defined(), op,
               ": running_mean and running_var must both be given or both be absent");
  const DimVector shape = channel_shape(channels, input.dim());
  if (!training) {
    STRATA_CHECK(running_mean.defined(), op, ": running_mean and running_var are needed when not training");
    Tensor y = (input - running_mean.reshape(shape)) * rsqrt(running_var.reshape(shape) + eps);
    return channel_affine(y, weight, bias);
  }
  const int64_t count = input.numel() / std::max<int64_t>(channels, 1);
  STRATA_CHECK(count > 1, op, ": Expected more than 1 value per channel when training, got input size ", input.sizes());
  DimVector dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  Tensor batch_mean = mean(input, dims, /*keepdim=*/true);
  Tensor centered = input - batch_mean;
  Tensor batch_var = mean(centered * centered, dims, /*keepdim=*/true);
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    Tensor running_mean_ = running_mean, running_var_ = running_var;  // handles to the caller's buffers
    running_mean_.mul_(1 - momentum).add_(batch_mean.detach().reshape({channels}), momentum);
    running_var_.mul_(1 - momentum).add_(batch_var.detach().reshape({channels}), momentum * unbias);
  }
  return normalize_by_batch(input, centered, rsqrt(batch_var + eps), weight, bias, dims);
}

// Statistics over each group of num_groups consecutive channels (and every spatial position) of each sample.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (ops::AutocastArgs cast{"group_norm", {input, weight, bias}})
    return group_norm(cast[0], num_groups, cast[1], cast[2], eps);
  const char* op = "group_norm";
  STRATA_CHECK(input.dim() >= 2, op, ": expected an input [N, C, ...], got shape ", input.sizes());
  const int64_t n = input.size(0), channels = input.size(1);
  STRATA_CHECK(num_groups > 0 && channels % num_groups == 0, op, ": Expected number of channels in input to be ",
               "divisible by num_groups, but got input of shape ", input.sizes(), " and num_groups=", num_groups);
  check_per_channel(weight, channels, "weight", op);
  check_per_channel(bias, channels, "bias", op);
  Tensor grouped = input.reshape({n, num_groups, -1});
  Tensor centered = grouped - mean(grouped, {2}, /*keepdim=*/true);
  Tensor var = mean(centered * centered, {2}, /*keepdim=*/true);
  return channel_affine((centered * rsqrt(var + eps)).reshape(input.sizes()), weight, bias);
}

// x / sqrt(mean(x^2) + eps) over the trailing dims; eps defaults to the dtype's machine epsilon, as torch.
Tensor rms_norm(const Tensor& input, IntArrayRef normalized_shape, const Tensor& weight, std::optional<double> eps) {
  if (ops::AutocastArgs cast{"rms_norm", {input, weight}}) return rms_norm(cast[0], normalized_shape, cast[1], eps);
  const char* op = "rms_norm";
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  STRATA_CHECK(k >= 1 && input.dim() >= k && IntArrayRef(input.sizes().data() + input.dim() - k, k) == normalized_shape,
               op, ": normalized_shape ", normalized_shape, " does not match the trailing dims of input shape ",
               input.sizes());
  STRATA_CHECK(input.is_floating_point(), op, ": expected a floating point input, got ", input.dtype());
  STRATA_CHECK(!weight.defined() || weight.sizes() == normalized_shape, op, ": weight of shape ",
               weight.defined() ? weight.sizes() : IntArrayRef(), " does not match normalized_shape ",
               normalized_shape);
  DimVector dims;
  for (int64_t d = input.dim() - k; d < input.dim(); ++d) dims.push_back(d);
  const double epsilon = eps ? *eps : machine_epsilon(input.dtype());
  Tensor y = input * rsqrt(mean(input * input, dims, /*keepdim=*/true) + epsilon);
  return weight.defined() ? y * weight : y;
}

// Keeps each element with probability 1 - p, scaled by 1 / (1 - p); the mask comes from `gen` (or the default).
Tensor dropout(const Tensor& a, double p, bool train, Generator* gen) {
  STRATA_CHECK(p >= 0 && p <= 1, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!train || p == 0) return a;
  STRATA_CHECK(a.is_floating_point(), "dropout: expected a floating point tensor, got ", a.dtype());
  Tensor mask;
  {
    NoGradGuard no_grad;
    const TensorOptions opts = TensorOptions(a.dtype()).device(a.device());
    mask = p == 1 ? zeros({}, opts) : rand(a.sizes(), opts, gen).ge(p).to(a.dtype()).mul_(1.0 / (1.0 - p));
  }
  return a * mask;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  STRATA_CHECK(indices.dtype() == kLong, "one_hot: expected an int64 (Long) tensor of class indices, got ",
               indices.dtype());
  STRATA_CHECK(num_classes == -1 || num_classes > 0, "one_hot: num_classes must be positive or -1, got ", num_classes);
  if (indices.numel() > 0) {
    const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
    STRATA_CHECK(lo >= 0, "one_hot: class values must be non-negative, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    STRATA_CHECK(hi < num_classes, "one_hot: class value ", hi, " is out of range for num_classes ", num_classes);
  }
  STRATA_CHECK(num_classes > 0, "one_hot: can not infer the number of classes from an empty tensor");
  Tensor classes = arange(num_classes, TensorOptions(kLong).device(indices.device()));
  return eq(indices.unsqueeze(-1), classes).to(kLong);
}

// ---- losses ----

namespace {

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      return mean(loss);
  }
  return loss;
}

// The targets of a classification loss over input [N, C, d...]: checked, with the weight each one carries
// (weight[target], or 1; 0 where target == ignore_index) and the targets made safe to gather (ignored -> 0).
// The common case, no class weights and no target equal to ignore_index, leaves `valid` and `weights`
// undefined (all true, all 1): the loss is then a gather and a mean, with no masks built or multiplied.
struct ClassTargets {
  Tensor valid;    // [N, d...] bool: target != ignore_index; undefined when all are
  Tensor safe;     // [N, d...] int64 in [0, C)
  Tensor weights;  // [N, d...] in the input's dtype; undefined when all are 1
};

ClassTargets check_targets(const Tensor& input, const Tensor& target, const LossOptions& o, const char* name) {
  STRATA_CHECK(input.dim() >= 2, name, ": expected input of shape [N, C] or [N, C, d1, ...], got ", input.sizes());
  STRATA_CHECK(input.is_floating_point(), name, ": expected a floating point input, got ", input.dtype());
  STRATA_CHECK(target.dtype() == kLong, name, ": expected target of dtype Long (int64 class indices), got ",
               target.dtype());
  DimVector expected(input.sizes());
  expected.erase(1);
  STRATA_CHECK(target.sizes() == IntArrayRef(expected), name, ": expected target of shape ", IntArrayRef(expected),
               " for input of shape ", input.sizes(), ", got ", target.sizes());
  const int64_t C = input.size(1);
  STRATA_CHECK(!o.weight.defined() || (o.weight.dim() == 1 && o.weight.size(0) == C), name,
               ": expected weight of shape [", C, "], got ", o.weight.defined() ? o.weight.sizes() : IntArrayRef());
  ClassTargets t;
  t.safe = target;
  if (target.numel() > 0) {
    // The bounds and the ignored count come back in one host read: each read is a device sync on a GPU.
    const Tensor valid =
        ne(target, scalar_tensor(static_cast<double>(o.ignore_index), TensorOptions(kLong).device(target.device())));
    const Tensor safe = where(valid, target, ops::scalar_like(0, target));
    const Tensor stats = stack({min(safe), max(safe), sum(valid)}).to(kCPU);
    const int64_t lo = stats[0].item<int64_t>(), hi = stats[1].item<int64_t>();
    STRATA_CHECK(lo >= 0, name, ": target ", lo, " is out of bounds for ", C, " classes");
    STRATA_CHECK(hi < C, name, ": target ", hi, " is out of bounds for ", C, " classes");
    if (stats[2].item<int64_t>() < target.numel()) {  // some targets are ignored: mask them
      t.valid = valid;
      t.safe = safe;
    }
  }
  if (t.valid.defined()) t.weights = t.valid.to(input.dtype());
  if (o.weight.defined()) {
    Tensor picked = index_select(o.weight, 0, t.safe.flatten()).reshape(target.sizes());
    t.weights = t.weights.defined() ? t.weights * picked : picked;
  }
  return t;
}

/// options with `weight` for its class weights (autocast's cast of them).
LossOptions with_weight(LossOptions options, const Tensor& weight) {
  options.weight = weight;
  return options;
}

// sum(loss) / sum(weights). With every target ignored the total weight is 0: the mean is NaN, as in
// libtorch, but its gradient is 0 (libtorch's), not 0 * inf = NaN, so a fully padded batch leaves the
// weights alone. The division goes through a total that is never 0 and the NaN comes without history.
Tensor weighted_mean(const Tensor& loss, const Tensor& weights) {
  Tensor total = sum(weights);
  Tensor none = total.eq(0.0);
  Tensor nan = ops::scalar_like(std::numeric_limits<double>::quiet_NaN(), total);
  return sum(loss) / where(none, ops::scalar_like(1, total), total) + where(none, nan, ops::scalar_like(0, total));
}

// weights * nll per element, reduced; Mean divides by the total weight of non-ignored targets.
Tensor reduce_nll(const Tensor& nll, const ClassTargets& t, Reduction reduction) {
  if (!t.weights.defined()) return reduce_loss(nll, reduction);
  Tensor loss = nll * t.weights;
  if (reduction == Reduction::Mean) return weighted_mean(loss, t.weights);
  return reduce_loss(loss, reduction);
}

// -log_probs[n, target[n]] per element, reduced.
Tensor nll_from(const Tensor& log_probs, const ClassTargets& t, Reduction reduction) {
  return reduce_nll(-gather(log_probs, 1, t.safe.unsqueeze(1)).squeeze(1), t, reduction);
}

/// The per-row terms of cross entropy of logits [N, C] through the fused kernels (one node, saving the logits and
/// each row's logsumexp, never the log-probabilities): nll [N] and, with label smoothing, smooth [N] =
/// -sum_c weight[c] * log_softmax(x)[n, c], both 0 where the target is ignore_index. A backward that builds a graph
/// writes the gradient in differentiable ops instead.
std::pair<Tensor, Tensor> fused_cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                              int64_t ignore_index, bool smoothing) {
  const int64_t N = logits.size(0);
  Tensor nll = empty({N}, logits.options()), smooth = smoothing ? empty({N}, logits.options()) : Tensor();
  Tensor lse = empty({N}, logits.options().dtype(logits.dtype() == kDouble ? kDouble : kFloat));
  const Tensor targets = target.contiguous(), w = weight.defined() ? weight.contiguous().detach() : Tensor();
  {
    NoGradGuard no_grad;
    ops::kernels(logits).cross_entropy(logits.contiguous(), targets, w, ignore_index, nll, smooth, lse);
  }
  const tensor_list outputs = smoothing ? tensor_list{nll, smooth} : tensor_list{nll};
  if (auto node = autograd::record("NllLossBackward0", {logits}, outputs))
    node->backward = [x = SavedVariable(logits), targets, w, ignore_index, lse](const tensor_list& g) -> tensor_list {
      const Tensor xv = x.unpack();
      const Tensor grad_nll = g[0].defined() ? g[0] : zeros({xv.size(0)}, xv.options());
      const Tensor grad_smooth = g.size() > 1 ? g[1] : Tensor();
      if (GradMode::is_enabled() || grad_nll.dtype() != xv.dtype() ||
          (grad_smooth.defined() && grad_smooth.dtype() != xv.dtype())) {
        const int64_t C = xv.size(1);
        const Tensor valid = targets.ne(static_cast<double>(ignore_index)).unsqueeze(1);
        const Tensor p = softmax(xv, 1);
        const Tensor picked = one_hot(where(valid.squeeze(1), targets, ops::scalar_like(0, targets)), C).to(xv.dtype());
        Tensor grad = grad_nll.unsqueeze(1) * (p - picked);
        if (grad_smooth.defined())
          grad = grad + grad_smooth.unsqueeze(1) * (w.defined() ? p * sum(w) - w : p * static_cast<double>(C) - 1.0);
        return {where(valid, grad, ops::scalar_like(0, grad))};
      }
      Tensor grad = empty(xv.sizes(), xv.options());
      ops::kernels(xv).cross_entropy_backward(xv.contiguous(), targets, w, ignore_index, lse, grad_nll.contiguous(),
                                              grad_smooth.defined() ? grad_smooth.contiguous() : grad_smooth, grad);
      return {grad};
    };
  return {nll, smooth};
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  return nll_loss(log_probs, target,
                  LossOptions{.reduction = reduction, .ignore_index = ignore_index, .weight = weight});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const LossOptions& options) {
  if (ops::AutocastArgs cast{"nll_loss", {log_probs, target, options.weight}})
    return nll_loss(cast[0], cast[1], with_weight(options, cast[2]));
  if (log_probs.dim() == 1) {  // one sample: [C] with a 0-dim target
    STRATA_CHECK(target.dim() == 0, "nll_loss: expected a 0-dim target for input of shape ", log_probs.sizes(),
                 ", got ", target.sizes());
    Tensor loss = nll_loss(log_probs.unsqueeze(0), target.unsqueeze(0), options);
    return options.reduction == Reduction::None ? loss.squeeze(0) : loss;
  }
  STRATA_CHECK(options.label_smoothing == 0, "nll_loss: label_smoothing is a cross_entropy option, got ",
               options.label_smoothing);
  return nll_from(log_probs, check_targets(log_probs, target, options, "nll_loss"), options.reduction);
}

// With label smoothing eps (as torch): (1 - eps) * nll + eps / C * smooth, where per element
// smooth = -sum_c weight[c] * log_probs[c] (weight 1 without one; 0 for ignored targets), reduced
// like nll (Mean divides by the total weight[target] of the non-ignored targets).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const LossOptions& options) {
  if (ops::AutocastArgs cast{"cross_entropy", {logits, target, options.weight}})
    return cross_entropy(cast[0], cast[1], with_weight(options, cast[2]));
  if (logits.dim() == 1) {
    STRATA_CHECK(target.dim() == 0, "cross_entropy: expected a 0-dim target for input of shape ", logits.sizes(),
                 ", got ", target.sizes());
    Tensor loss = cross_entropy(logits.unsqueeze(0), target.unsqueeze(0), options);
    return options.reduction == Reduction::None ? loss.squeeze(0) : loss;
  }
  const double eps = options.label_smoothing;
  STRATA_CHECK(eps >= 0 && eps <= 1, "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", eps);
  const ClassTargets t = check_targets(logits, target, options, "cross_entropy");
  const Tensor& w = options.weight;
  // The fused kernels take 2-D logits and a weight of their dtype; with label smoothing a weight that requires
  // grad needs the composite, whose smoothing term is differentiable in it (without, its gradient comes through
  // reduce_nll's t.weights either way).
  const bool fused =
      logits.dim() == 2 && (!w.defined() || (w.dtype() == logits.dtype() && w.device() == logits.device() &&
                                             (eps == 0 || !w.requires_grad())));
  Tensor nll, smooth;
  if (fused) {
    log_dispatch("cross_entropy", str("fused kernel (", logits.dtype(), ")"));
    std::tie(nll, smooth) = fused_cross_entropy(logits, target, w, options.ignore_index, eps > 0);
  } else {
    log_dispatch("cross_entropy",
                 logits.dim() == 2
                     ? "composite: a weight of another dtype or device, or one that requires grad with label smoothing"
                     : "composite: logits of more than 2 dims");
    const Tensor log_probs = log_softmax(logits, 1);
    nll = -gather(log_probs, 1, t.safe.unsqueeze(1)).squeeze(1);
    if (eps > 0) {
      DimVector shape(logits.dim(), 1);  // weight broadcast along dim 1: [1, C, 1, ...]
      shape[1] = logits.size(1);
      smooth = -sum(w.defined() ? log_probs * w.reshape(shape) : log_probs, 1);
      if (t.valid.defined()) smooth = where(t.valid, smooth, ops::scalar_like(0, smooth));
    }
  }
  Tensor loss = reduce_nll(nll, t, options.reduction);
  if (eps == 0) return loss;
  Tensor reduced = options.reduction == Reduction::Mean && t.weights.defined() ? weighted_mean(smooth, t.weights)
                                                                               : reduce_loss(smooth, options.reduction);
  return loss * (1 - eps) + reduced * (eps / static_cast<double>(logits.size(1)));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (ops::AutocastArgs cast{"mse_loss", {input, target}}) return mse_loss(cast[0], cast[1], reduction);
  Tensor diff = input - target;
  return reduce_loss(diff * diff, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (ops::AutocastArgs cast{"l1_loss", {input, target}}) return l1_loss(cast[0], cast[1], reduction);
  return reduce_loss(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (ops::AutocastArgs cast{"smooth_l1_loss", {input, target}})
    return smooth_l1_loss(cast[0], cast[1], reduction, beta);
  STRATA_CHECK(beta >= 0, "smooth_l1_loss: beta must be non-negative, got ", beta);
  if (beta == 0) return l1_loss(input, target, reduction);
  Tensor d = abs(input - target);
  return reduce_loss(where(d.lt(beta), d * d * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (ops::AutocastArgs cast{"huber_loss", {input, target}}) return huber_loss(cast[0], cast[1], reduction, delta);
  STRATA_CHECK(delta > 0, "huber_loss: delta must be positive, got ", delta);
  Tensor d = abs(input - target);
  return reduce_loss(where(d.le(delta), d * d * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  if (ops::AutocastArgs cast{"binary_cross_entropy", {input, target, weight}})
    return binary_cross_entropy(cast[0], cast[1], cast[2], reduction);
  STRATA_CHECK(input.sizes() == target.sizes(), "binary_cross_entropy: target of shape ", target.sizes(),
               " does not match input of shape ", input.sizes());
  STRATA_CHECK(input.is_floating_point(), "binary_cross_entropy: expected floating point input, got ", input.dtype());
  {
    NoGradGuard no_grad;
    STRATA_CHECK(logical_and(input.ge(0.0), input.le(1.0)).all().item<bool>(),
                 "binary_cross_entropy: all elements of input should be between 0 and 1");
  }
  // torch clamps each log at -100 so that p = 0 or 1 gives a finite loss and gradient.
  Tensor loss = -(target * clamp_min(log(input), -100) + (1 - target) * clamp_min(log(1 - input), -100));
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  if (ops::AutocastArgs cast{"binary_cross_entropy_with_logits", {input, target, weight, pos_weight}})
    return binary_cross_entropy_with_logits(cast[0], cast[1], cast[2], cast[3], reduction);
  STRATA_CHECK(input.sizes() == target.sizes(), "binary_cross_entropy_with_logits: target of shape ", target.sizes(),
               " does not match input of shape ", input.sizes());
  // -log(sigmoid(x)) = softplus(-x) = relu(-x) + log(1 + exp(-|x|)), which never overflows.
  Tensor log_sig_neg = relu(-input) + log(1 + exp(-abs(input)));  // -log(sigmoid(x))
  Tensor loss = pos_weight.defined() ? (1 - target) * input + (1 + (pos_weight - 1) * target) * log_sig_neg
                                     : (1 - target) * input + log_sig_neg;
  if (weight.defined()) loss = loss * weight;
  return reduce_loss(loss, reduction);
}

}  // namespace strata
