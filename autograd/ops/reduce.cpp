// Reductions: sum, mean, prod, max/min, argmax/argmin, var/std, norm, logsumexp, and ops::sum_to.
//
// Each kernel-backed reduction plans its shapes once (ReducePlan), runs one kernel into a fresh
// output, and records a backward that broadcasts the gradient back over the reduced dims. The
// statistics (var, std, norm for p != 2, logsumexp) are compositions, so their gradients (and
// second derivatives) come from the ops they are made of.

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/autograd/ops/common.h"

namespace strata {
namespace {

/// The shapes of one reduction.
struct ReducePlan {
  DimVector in_sizes;    // the input's sizes
  DimVector keep_sizes;  // in_sizes with the reduced dims set to 1: what kernels write
  DimVector out_sizes;   // keep_sizes without the reduced dims, unless keepdim
  DimVector dims;        // reduced dims, ascending; empty only for a 0-dim input
  int64_t count = 1;     // input elements per output element
  bool keepdim = false;
};

/// Validates `dims` of `a` for `op` (negative dims wrap, duplicates throw; empty means every dim).
ReducePlan plan_reduce(const Tensor& a, IntArrayRef dims, bool keepdim, const char* op) {
  const int64_t ndim = a.dim();
  STRATA_CHECK(ndim <= 64, op, ": tensors of more than 64 dims are not supported, got ", ndim);
  uint64_t mask = 0;
  if (dims.empty()) {
    mask = ndim == 64 ? ~uint64_t{0} : (uint64_t{1} << ndim) - 1;
  } else {
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, ndim, op);
      STRATA_CHECK(!(mask >> w & 1), op, ": dim ", w, " appears multiple times in the list of dims");
      mask |= uint64_t{1} << w;
    }
    if (ndim == 0) mask = 0;  // a 0-dim tensor accepts dim 0 and -1, as in libtorch, and reduces nothing
  }
  ReducePlan p;
  p.in_sizes = a.sizes();
  p.keep_sizes = p.in_sizes;
  p.keepdim = keepdim;
  for (int64_t d = 0; d < ndim; ++d) {
    if (mask >> d & 1) {
      p.dims.push_back(d);
      p.count *= p.in_sizes[d];
      p.keep_sizes[d] = 1;
    } else if (!keepdim) {
      p.out_sizes.push_back(p.in_sizes[d]);
    }
  }
  if (keepdim) p.out_sizes = p.keep_sizes;
  return p;
}

/// A fresh output of out_sizes viewed with keep_sizes, the shape kernels write.
Tensor kept_view(const Tensor& out, const ReducePlan& p) {
  return p.keepdim ? out : make_view(out, p.keep_sizes, contiguous_strides(p.keep_sizes), 0);
}

/// Runs reduce kernel `op` over `in` into a fresh tensor of out_sizes. Sum and prod of bool and int64
/// give int64, as in libtorch (the kernel accumulates bool into int64 itself).
Tensor run_reduce(ReduceKind op, const Tensor& in, const ReducePlan& p) {
  const bool to_long = (op == ReduceKind::Sum || op == ReduceKind::Prod) && !in.is_floating_point();
  Tensor out = empty(p.out_sizes, to_long ? TensorOptions(kLong).device(in.device()) : in.options());
  if (p.dims.empty())
    ops::kernels(in).copy(in, out);
  else
    ops::kernels(in).reduce(op, in, p.dims, kept_view(out, p));
  return out;
}

/// A reduction's output (or its gradient) with the reduced dims back as size 1, so that it broadcasts
/// against the input. Leading reduced dims are left out: broadcasting adds them back.
Tensor unsqueeze_reduced(const Tensor& g, const ReducePlan& p) {
  if (p.keepdim) return g;
  size_t lead = 0;
  while (lead < p.dims.size() && p.dims[lead] == static_cast<int64_t>(lead)) ++lead;
  Tensor r = g;
  for (size_t i = lead; i < p.dims.size(); ++i) r = r.unsqueeze(p.dims[i] - static_cast<int64_t>(lead));
  return r;
}

/// The gradient of a sum: the output gradient broadcast over the reduced dims (a view, no copy).
Tensor expand_reduced(const Tensor& g, const ReducePlan& p) { return unsqueeze_reduced(g, p).expand(p.in_sizes); }

/// amax / amin over dims; the gradient is split evenly among the elements equal to the extreme. A NaN is
/// the extreme of its slice, so its gradient goes to the NaN elements (as libtorch's max(); its amax would
/// give every element of the slice NaN).
Tensor extreme(ReduceKind op, const Tensor& a, IntArrayRef dims, bool keepdim, const char* name) {
  ReducePlan p = plan_reduce(a, dims, keepdim, name);
  STRATA_CHECK(p.count > 0, name, ": cannot reduce over a dimension of size 0, got shape ", a.sizes());
  Tensor out = run_reduce(op, a, p);
  if (auto node = autograd::record(op == ReduceKind::Max ? "MaxBackward" : "MinBackward", a, out))
    node->backward = [x = autograd::SavedVariable(a), y = autograd::SavedVariable(out, true),
                      p = std::move(p)](const tensor_list& g) -> tensor_list {
      Tensor input = x.unpack(), extreme = unsqueeze_reduced(y.unpack(), p);
      Tensor ties = input.eq(extreme).logical_or(input.ne(input).logical_and(extreme.ne(extreme)));
      Tensor share = unsqueeze_reduced(g[0], p) / sum(ties, p.dims, true);
      return {where(ties, share, ops::scalar_like(0, share))};
    };
  return out;
}

/// max(dim) / min(dim): values and int64 indices of the first extreme; the gradient goes to that index.
std::tuple<Tensor, Tensor> extreme_along(ReduceKind op, const Tensor& a, int64_t dim, bool keepdim, const char* name) {
  ReducePlan p = plan_reduce(a, IntArrayRef(dim), keepdim, name);
  STRATA_CHECK(p.count > 0, name, ": cannot reduce over a dimension of size 0, got shape ", a.sizes());
  Tensor values = empty(p.out_sizes, a.options());
  Tensor indices = empty(p.out_sizes, a.options().dtype(kLong));
  Tensor kept_indices = kept_view(indices, p);
  if (p.dims.empty()) {  // a 0-dim input is its own extreme, at index 0
    ops::kernels(a).copy(a, values);
    ops::kernels(a).fill(indices, 0);
  } else {
    ops::kernels(a).arg_reduce(op, a, p.dims[0], kept_view(values, p), kept_indices);
  }
  if (auto node = autograd::record(op == ReduceKind::Max ? "MaxBackward" : "MinBackward", a, values))
    // Saved through SavedVariable: the caller gets `indices`, and writing into it must not reroute gradients.
    node->backward = [saved = autograd::SavedVariable(kept_indices),
                      p = std::move(p)](const tensor_list& g) -> tensor_list {
      if (p.dims.empty()) return {g[0]};
      Tensor kept_grad = p.keepdim ? g[0] : g[0].unsqueeze(p.dims[0]);
      return {scatter_add(zeros(p.in_sizes, g[0].options()), p.dims[0], saved.unpack(), kept_grad)};
    };
  return {values, indices};
}

/// argmax / argmin: along dim, or over the flattened tensor when dim is absent.
Tensor arg_extreme(ReduceKind op, const Tensor& a, std::optional<int64_t> dim, bool keepdim, const char* name) {
  NoGradGuard no_grad;  // indices have no gradient; nothing here should be recorded
  if (dim) return std::get<1>(extreme_along(op, a, *dim, keepdim, name));
  STRATA_CHECK(a.numel() > 0, name, ": expected a non-empty tensor when no dim is given, got shape ", a.sizes());
  Tensor dense = a.contiguous();
  Tensor flat = make_view(dense, IntArrayRef(a.numel()), IntArrayRef(int64_t{1}), dense.storage_offset());
  Tensor indices = empty(keepdim ? DimVector(a.dim(), 1) : DimVector(), a.options().dtype(kLong));
  const int64_t one = 1;
  ops::kernels(a).arg_reduce(op, flat, 0, empty(IntArrayRef(one), a.options()),
                             make_view(indices, IntArrayRef(one), IntArrayRef(one), 0));
  return indices;
}

/// The 2-norm, with gradient x / |x| and 0 (the subgradient torch picks) where |x| == 0.
Tensor norm2(const Tensor& a, IntArrayRef dims, bool keepdim) {
  ReducePlan p = plan_reduce(a, dims, keepdim, "norm");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(sum(a * a, dims, keepdim));
  }
  if (auto node = autograd::record("NormBackward", a, out))
    node->backward = [x = autograd::SavedVariable(a), y = autograd::SavedVariable(out, true),
                      p = std::move(p)](const tensor_list& g) -> tensor_list {
      Tensor norm = unsqueeze_reduced(y.unpack(), p);
      // Where the norm is 0 every element is 0, so dividing by 1 there gives the 0 subgradient.
      Tensor safe_norm = where(norm.eq(0.0), ops::scalar_like(1, norm), norm);
      return {unsqueeze_reduced(g[0], p) * x.unpack() / safe_norm};
    };
  return out;
}

}  // namespace

namespace ops {

Tensor sum_to(const Tensor& grad, IntArrayRef sizes) {
  IntArrayRef grad_sizes = grad.sizes();
  if (grad_sizes == sizes) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(sizes.size());
  if (lead < 0) return grad.reshape(sizes);  // only size-1 dims can be missing
  // Sum the leading dims broadcasting added, and the dims where the target has size 1.
  DimVector dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  bool keepdim = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1 && grad_sizes[lead + i] != 1) {
      dims.push_back(lead + static_cast<int64_t>(i));
      keepdim = true;
    }
  }
  STRATA_CHECK(!dims.empty(), "sum_to: cannot reduce shape ", grad_sizes, " to ", sizes);
  Tensor r = sum(grad, dims, keepdim);
  return keepdim && lead > 0 ? r.view(sizes) : r;
}

}  // namespace ops

// ---- sum and mean ----

Tensor sum(const Tensor& a, IntArrayRef dims, bool keepdim) {
  if (ops::AutocastArgs cast{"sum", {a}}) return sum(cast[0], dims, keepdim);
  ReducePlan p = plan_reduce(a, dims, keepdim, "sum");
  Tensor out = run_reduce(ReduceKind::Sum, a, p);
  if (auto node = autograd::record("SumBackward", a, out))
    node->backward = [p = std::move(p)](const tensor_list& g) -> tensor_list { return {expand_reduced(g[0], p)}; };
  return out;
}

Tensor mean(const Tensor& a, IntArrayRef dims, bool keepdim) {
  if (ops::AutocastArgs cast{"mean", {a}}) return mean(cast[0], dims, keepdim);
  STRATA_CHECK(a.is_floating_point(),
               "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
               "dtype. Got: ",
               a.dtype());
  // Note [16-bit reductions]: a Half sum passes 65504 long before its mean or norm would, so the
  // composite reductions of 16-bit tensors run in float32 and round once at the end (as torch).
  if (is_reduced_floating_point(a.dtype())) return mean(a.to(kFloat), dims, keepdim).to(a.dtype());
  ReducePlan p = plan_reduce(a, dims, keepdim, "mean");
  Tensor out = run_reduce(ReduceKind::Sum, a, p);
  out.mul_(1.0 / static_cast<double>(p.count));  // a fresh tensor without history: scaled in place
  if (auto node = autograd::record("MeanBackward", a, out))
    node->backward = [p = std::move(p)](const tensor_list& g) -> tensor_list {
      return {expand_reduced(g[0].div(static_cast<double>(p.count)), p)};
    };
  return out;
}

// ---- prod ----

Tensor prod(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  if (ops::AutocastArgs cast{"prod", {a}}) return prod(cast[0], dim, keepdim);
  ReducePlan p = dim ? plan_reduce(a, IntArrayRef(*dim), keepdim, "prod") : plan_reduce(a, {}, false, "prod");
  Tensor out = run_reduce(ReduceKind::Prod, a, p);
  if (auto node = autograd::record("ProdBackward", a, out))
    node->backward = [x = autograd::SavedVariable(a), dim, p = std::move(p)](const tensor_list& g) -> tensor_list {
      // d prod / d x_i is the product of the others. Dividing prod by x_i fails at zeros, so take the
      // product of the non-zero elements: with no zero in a slice it over x_i is the answer; with one
      // zero it is the answer at the zero and 0 elsewhere; with two or more zeros every answer is 0.
      Tensor input = x.unpack();
      Tensor is_zero = input.eq(0.0);
      Tensor nonzero = where(is_zero, ops::scalar_like(1, input), input);
      Tensor others = dim ? prod(nonzero, dim, true) : prod(nonzero);
      Tensor zeros_in_slice = sum(is_zero, p.dims, true);
      Tensor local = where(zeros_in_slice.eq(0.0), others / nonzero,
                           where(is_zero.logical_and(zeros_in_slice.eq(1.0)), others, ops::scalar_like(0, input)));
      return {unsqueeze_reduced(g[0], p) * local};
    };
  return out;
}

// ---- max and min ----

Tensor max(const Tensor& a) { return extreme(ReduceKind::Max, a, {}, false, "max"); }
Tensor amax(const Tensor& a, IntArrayRef dims, bool keepdim) {
  return extreme(ReduceKind::Max, a, dims, keepdim, "amax");
}
Tensor amin(const Tensor& a, IntArrayRef dims, bool keepdim) {
  return extreme(ReduceKind::Min, a, dims, keepdim, "amin");
}
Tensor min(const Tensor& a) { return extreme(ReduceKind::Min, a, {}, false, "min"); }
std::tuple<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_along(ReduceKind::Max, a, dim, keepdim, "max");
}
std::tuple<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_along(ReduceKind::Min, a, dim, keepdim, "min");
}
Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(ReduceKind::Max, a, dim, keepdim, "argmax");
}
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(ReduceKind::Min, a, dim, keepdim, "argmin");
}

// ---- statistics (compositions) ----

Tensor var(const Tensor& a, IntArrayRef dims, bool unbiased, bool keepdim) {
  if (ops::AutocastArgs cast{"var", {a}}) return var(cast[0], dims, unbiased, keepdim);
  STRATA_CHECK(a.is_floating_point(), "var: expected a floating point tensor, got ", a.dtype());
  if (is_reduced_floating_point(a.dtype()))  // Note [16-bit reductions]
    return var(a.to(kFloat), dims, unbiased, keepdim).to(a.dtype());
  const int64_t count = plan_reduce(a, dims, keepdim, "var").count;
  Tensor centered = a - mean(a, dims, true);  // two passes: no cancellation from E[x^2] - E[x]^2
  const double divisor = static_cast<double>(std::max<int64_t>(0, count - (unbiased ? 1 : 0)));
  return sum(centered * centered, dims, keepdim).div(divisor);
}

// sqrt(var) with libtorch's gradient g / (2 std) * dvar, defined as 0 where std is 0 (sqrt's infinite slope
// times var's zero gradient would be NaN there).
Tensor std(const Tensor& a, IntArrayRef dims, bool unbiased, bool keepdim) {
  if (ops::AutocastArgs cast{"std", {a}}) return std(cast[0], dims, unbiased, keepdim);
  STRATA_CHECK(a.is_floating_point(), "std: expected a floating point tensor, got ", a.dtype());
  if (is_reduced_floating_point(a.dtype()))  // Note [16-bit reductions]
    return std(a.to(kFloat), dims, unbiased, keepdim).to(a.dtype());
  ReducePlan p = plan_reduce(a, dims, keepdim, "std");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = sqrt(var(a, dims, unbiased, keepdim));
  }
  if (auto node = autograd::record("StdBackward0", a, out))
    node->backward = [x = autograd::SavedVariable(a), y = autograd::SavedVariable(out, true), unbiased,
                      p = std::move(p)](const tensor_list& g) -> tensor_list {
      Tensor input = x.unpack(), sd = unsqueeze_reduced(y.unpack(), p);
      const double divisor = static_cast<double>(std::max<int64_t>(0, p.count - (unbiased ? 1 : 0)));
      Tensor scale = where(sd.eq(0.0), ops::scalar_like(0, sd), unsqueeze_reduced(g[0], p) / (sd * divisor));
      return {scale * (input - mean(input, p.dims, true))};
    };
  return out;
}

namespace {
// (sum |x|^p)^(1/p) with libtorch's gradient g * sgn(x) |x|^(p-1) / norm^(p-1), defined as 0 where the norm
// is 0 and, for p < 1, where x is 0 (the composition would give NaN at both).
Tensor pnorm(const Tensor& a, double p_value, IntArrayRef dims, bool keepdim) {
  ReducePlan p = plan_reduce(a, dims, keepdim, "norm");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = pow(sum(pow(abs(a), p_value), dims, keepdim), 1.0 / p_value);
  }
  if (auto node = autograd::record("NormBackward1", a, out))
    node->backward = [x = autograd::SavedVariable(a), y = autograd::SavedVariable(out, true), p_value,
                      p = std::move(p)](const tensor_list& g) -> tensor_list {
      Tensor input = x.unpack(), norm = unsqueeze_reduced(y.unpack(), p);
      Tensor zero = ops::scalar_like(0, norm);
      Tensor scale = where(norm.eq(0.0), zero, unsqueeze_reduced(g[0], p) / pow(norm, p_value - 1));
      Tensor local = pow(abs(input), p_value - 1);
      local = where(input.lt(0.0), -local, local);
      if (p_value < 1) local = where(input.eq(0.0), zero, local);
      return {scale * local};
    };
  return out;
}
}  // namespace

Tensor norm(const Tensor& a, double p, IntArrayRef dims, bool keepdim) {
  if (ops::AutocastArgs cast{"norm", {a}}) return norm(cast[0], p, dims, keepdim);
  STRATA_CHECK(a.is_floating_point(), "norm: expected a floating point tensor, got ", a.dtype());
  if (is_reduced_floating_point(a.dtype()))
    return norm(a.to(kFloat), p, dims, keepdim).to(a.dtype());  // Note [16-bit reductions]
  if (p == 2) return norm2(a, dims, keepdim);
  if (p == 1) return sum(abs(a), dims, keepdim);
  if (p == 0) return sum(a.ne(0.0), dims, keepdim).to(a.dtype());  // the count of non-zeros
  if (std::isinf(p)) return extreme(p > 0 ? ReduceKind::Max : ReduceKind::Min, abs(a), dims, keepdim, "norm");
  return pnorm(a, p, dims, keepdim);
}

Tensor logsumexp(const Tensor& a, IntArrayRef dims, bool keepdim) {
  if (ops::AutocastArgs cast{"logsumexp", {a}}) return logsumexp(cast[0], dims, keepdim);
  Tensor x = a.is_floating_point() ? a : a.to(get_default_dtype());
  const ReducePlan p = plan_reduce(x, dims, keepdim, "logsumexp");
  // The log of an empty sum is -inf, as in libtorch; the sum keeps the (empty) gradient path to x.
  if (p.count == 0) return sum(x, dims, keepdim) - std::numeric_limits<double>::infinity();
  // Subtract the (detached) max so exp cannot overflow; an infinite max is replaced by 0 so that
  // inf - inf does not make a NaN. The gradient is unchanged: the max cancels out.
  Tensor shift;
  {
    NoGradGuard no_grad;
    shift = extreme(ReduceKind::Max, x, dims, true, "logsumexp");
    shift = shift.masked_fill(shift.abs().eq(std::numeric_limits<double>::infinity()), 0);
  }
  Tensor out = log(sum(exp(x - shift), dims, true)) + shift;
  return keepdim ? out : out.view(p.out_sizes);
}

// ---- Tensor methods ----

// Note [all and any]: counts of (non-)zeros, so bool reductions need no kernel of their own.
Tensor all(const Tensor& a) { return a.eq(0).sum().eq(0); }
Tensor all(const Tensor& a, int64_t dim, bool keepdim) { return a.eq(0).sum(dim, keepdim).eq(0); }
Tensor any(const Tensor& a) { return a.ne(0).sum().ne(0); }
Tensor any(const Tensor& a, int64_t dim, bool keepdim) { return a.ne(0).sum(dim, keepdim).ne(0); }

Tensor Tensor::sum(std::optional<ScalarType> dtype) const {
  if (!dtype) return strata::sum(*this);
  return strata::sum(to(*dtype)).to(*dtype);  // an integer dtype is the result's too (sums accumulate in Long)
}
Tensor Tensor::sum(IntArrayRef dims, bool keepdim) const { return strata::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return strata::mean(*this); }
Tensor Tensor::mean(IntArrayRef dims, bool keepdim) const { return strata::mean(*this, dims, keepdim); }
Tensor Tensor::prod() const { return strata::prod(*this); }
Tensor Tensor::prod(int64_t dim, bool keepdim) const { return strata::prod(*this, dim, keepdim); }
Tensor Tensor::max() const { return strata::max(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return strata::max(*this, dim, keepdim); }
Tensor Tensor::min() const { return strata::min(*this); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return strata::min(*this, dim, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const { return strata::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const { return strata::argmin(*this, dim, keepdim); }
Tensor Tensor::var(IntArrayRef dims, bool unbiased, bool keepdim) const {
  return strata::var(*this, dims, unbiased, keepdim);
}
Tensor Tensor::std(IntArrayRef dims, bool unbiased, bool keepdim) const {
  return strata::std(*this, dims, unbiased, keepdim);
}
Tensor Tensor::all() const { return strata::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return strata::all(*this, dim, keepdim); }
Tensor Tensor::any() const { return strata::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return strata::any(*this, dim, keepdim); }
Tensor Tensor::norm(double p, IntArrayRef dims, bool keepdim) const { return strata::norm(*this, p, dims, keepdim); }
Tensor Tensor::logsumexp(IntArrayRef dims, bool keepdim) const { return strata::logsumexp(*this, dims, keepdim); }

}  // namespace strata
