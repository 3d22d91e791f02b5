// Elementwise ops: arithmetic, unary math, activations, comparisons, where, and the in-place
// forms, each forward beside its backward.
//
// Type promotion is libtorch's result_type (Note [type promotion] in tensor/promotion.cpp).
//
// Note [wrapped numbers]: a Scalar operand becomes a tensor of the computation dtype with the
// other operand's sizes and all strides 0, backed by one element (wrap()). It then meets the
// kernels' contract without a broadcast or an expand view, and `float_t * 2.0` takes
// binary_kernel's fast path and the lean add/mul backward.
//
// Note [bool arithmetic]: torch lets bool + bool mean logical or and bool * bool logical and;
// strata rejects arithmetic whose computation type is bool with an error naming logical_or /
// logical_and, since those spell the intent. Mixed bool-and-number arithmetic promotes as usual.

#include "strata/autograd/ops/common.h"

namespace strata {

using autograd::LambdaNode;
using autograd::SavedVariable;

namespace {

// Float ops (exp, log, ...) on integer or bool tensors compute in float32, as torch.
ScalarType float_type(const Tensor& t) { return t.is_floating_point() ? t.dtype() : get_default_dtype(); }

// torch's canCast: no floating into integer or bool, no number into bool.
bool can_cast(ScalarType from, ScalarType to) {
  if (is_floating_point(from) && !is_floating_point(to)) return false;
  return !(from != kBool && to == kBool);
}

void check_not_bool(ScalarType compute, const char* op) {
  STRATA_CHECK(compute != kBool, op,
               ": arithmetic on bool tensors is not supported; use logical_or / logical_and, or convert with "
               ".to(kLong)");
}

// A host scalar's value, stored beside its Storage: one allocation, no kernel allocate, no deleter.
struct HostScalar {
  Storage storage;
  alignas(8) unsigned char bytes[8];
};

// A 0-dim tensor holding s converted to dtype: exact on the host; other devices fill from a double.
Tensor zero_dim_tensor(const Scalar& s, ScalarType dtype, Device device) {
  if (!device.is_cpu()) {
    Tensor t = empty({}, TensorOptions(dtype).device(device));
    ops::kernels(t).fill(t, s.to<double>());
    return t;
  }
  auto box = std::make_shared<HostScalar>();
  box->storage.data = box->bytes;
  box->storage.nbytes = element_size(dtype);
  visit_all_dtypes(dtype, [&]<class T>() { *reinterpret_cast<T*>(box->bytes) = s.to<T>(); });
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::shared_ptr<Storage>(box, &box->storage);
  impl->numel = 1;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// s in dtype, broadcast (stride 0) to like's sizes (Note [wrapped numbers]). The tensor is new and
// unshared, so its geometry is set directly instead of through a second, view, tensor.
Tensor wrap(const Scalar& s, ScalarType dtype, const Tensor& like) {
  Tensor t = zero_dim_tensor(s, dtype, like.device());
  if (like.dim() > 0) {
    TensorImpl& impl = t.impl();
    impl.sizes = like.sizes();
    impl.strides = DimVector(like.sizes().size(), 0);
    impl.numel = like.numel();
  }
  return t;
}

// t converted to dtype without history (a copy through the kernels); t itself when it matches.
Tensor cast(const Tensor& t, ScalarType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.sizes(), TensorOptions(dtype).device(t.device()));
  ops::kernels(t).copy(t, out);
  return out;
}

// A stride-0 view of t broadcast to sizes (already checked by broadcast_shapes), without history.
Tensor expand_to(const Tensor& t, IntArrayRef sizes) {
  if (t.sizes() == sizes) return t;
  const size_t lead = sizes.size() - t.sizes().size();
  DimVector strides(sizes.size(), 0);
  for (size_t d = 0; d < t.sizes().size(); ++d)
    if (t.sizes()[d] != 1) strides[lead + d] = t.strides()[d];
  return make_view(t, sizes, strides, t.storage_offset());
}

TensorOptions options_of(ScalarType dtype, const Tensor& like) { return TensorOptions(dtype).device(like.device()); }

// out = op(a, b); for Add and Sub an alpha other than 1 scales b in the same pass.
void run_binary(const Kernels& k, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (alpha == 1)
    k.binary(op, a, b, out);
  else
    k.add_scaled(a, b, op == BinaryOp::Sub ? -alpha : alpha, out);
}

void check_same_device(const Tensor& a, const Tensor& b, const char* name) {
  STRATA_CHECK(a.device() == b.device(), name, ": expected both tensors on one device, got ", a.device(), " and ",
               b.device());
}

// out = op(a, b) over the broadcast shape, computed in `compute`, written as `out_dtype`.
Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, ScalarType compute, ScalarType out_dtype,
                     const char* name, double alpha = 1) {
  check_same_device(a, b, name);
  const Kernels& k = ops::kernels(a);
  if (a.sizes() == b.sizes() && a.dtype() == compute && b.dtype() == compute) {  // the common case: no views, no casts
    Tensor out = empty(a.sizes(), options_of(out_dtype, a));
    run_binary(k, op, a, b, out, alpha);
    return out;
  }
  const DimVector shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty(shape, options_of(out_dtype, a));
  run_binary(k, op, expand_to(cast(a, compute), shape), expand_to(cast(b, compute), shape), out, alpha);
  return out;
}

// out = op(a), computed and written in dtype.
Tensor unary_kernel(UnaryOp op, const Tensor& a, ScalarType dtype) {
  Tensor out = empty(a.sizes(), options_of(dtype, a));
  ops::kernels(a).unary(op, cast(a, dtype), out);
  return out;
}

// What backward needs to hand an input its gradient: sizes, dtype, and whether it wants one at all.
struct GradTarget {
  DimVector sizes;
  ScalarType dtype;
  bool needed;
  GradTarget(const Tensor& t, bool needed) : sizes(t.sizes()), dtype(t.dtype()), needed(needed) {}
  // g summed over the dims the input was broadcast along, in the input's dtype.
  Tensor operator()(const Tensor& g) const {
    Tensor r = ops::sum_to(g, sizes);
    return r.dtype() == dtype ? r : r.to(dtype);
  }
};

bool needs_grad(const LambdaNode& node, size_t i) { return node.next_edges[i].valid(); }

// Note [lean add]: when both inputs already have the output's sizes and dtype (the common case),
// the backward captures only trivially copyable values, so std::function stores it inline and
// `a + b` with grad allocates nothing beyond the output and the node.
bool same_geometry(const Tensor& a, const Tensor& b, const Tensor& out) {
  return a.dtype() == out.dtype() && b.dtype() == out.dtype() && a.sizes() == out.sizes() && b.sizes() == out.sizes();
}

// d(a + alpha*b) = (g, alpha*g); sub passes -alpha.
void set_add_backward(LambdaNode& node, const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  if (same_geometry(a, b, out)) {
    node.backward = [alpha, need_b = needs_grad(node, 1)](const tensor_list& g) -> tensor_list {
      return {g[0], !need_b ? Tensor() : alpha == 1 ? g[0] : g[0] * alpha};
    };
    return;
  }
  node.backward = [alpha, ta = GradTarget(a, needs_grad(node, 0)),
                   tb = GradTarget(b, needs_grad(node, 1))](const tensor_list& g) -> tensor_list {
    return {ta.needed ? ta(g[0]) : Tensor(), tb.needed ? tb(alpha == 1 ? g[0] : g[0] * alpha) : Tensor()};
  };
}

// d(a * b) = (g * b, g * a); a_value and b_value are the operands' values at the time of the op
// (clones taken before the write for mul_, Note [in-place operands]).
void set_mul_backward(LambdaNode& node, const Tensor& a, const Tensor& b, const Tensor& a_value,
                      const Tensor& b_value) {
  const bool need_a = needs_grad(node, 0), need_b = needs_grad(node, 1);
  node.backward = [ta = GradTarget(a, need_a), tb = GradTarget(b, need_b),
                   sa = need_b ? SavedVariable(a_value) : SavedVariable(),
                   sb = need_a ? SavedVariable(b_value) : SavedVariable()](const tensor_list& g) -> tensor_list {
    return {ta.needed ? ta(g[0] * sb.unpack()) : Tensor(), tb.needed ? tb(g[0] * sa.unpack()) : Tensor()};
  };
}

// d(a / b) = (g / b, -g * a / b^2); a_value and b_value as in set_mul_backward.
void set_div_backward(LambdaNode& node, const Tensor& a, const Tensor& b, const Tensor& a_value,
                      const Tensor& b_value) {
  const bool need_a = needs_grad(node, 0), need_b = needs_grad(node, 1);
  node.backward = [ta = GradTarget(a, need_a), tb = GradTarget(b, need_b), sb = SavedVariable(b_value),
                   sa = need_b ? SavedVariable(a_value) : SavedVariable()](const tensor_list& g) -> tensor_list {
    Tensor bv = sb.unpack();
    return {ta.needed ? ta(g[0] / bv) : Tensor(), tb.needed ? tb(-g[0] * sa.unpack() / (bv * bv)) : Tensor()};
  };
}

// alpha must not be floating for an integer computation, as torch.
void check_alpha(const Scalar& alpha, ScalarType compute, const char* name) {
  STRATA_CHECK(is_floating_point(compute) || !alpha.isFloatingPoint(), name,
               ": for integral input tensors, argument alpha must not be a floating point number, got ", alpha);
}

// libtorch refuses subtraction with a bool operand (Long - Bool included): it is an inverted mask gone wrong.
void check_sub_operands(ScalarType a, ScalarType b, const char* name) {
  STRATA_CHECK(a != kBool && b != kBool, name,
               ": subtraction, the `-` operator, with a bool tensor is not supported "
               "(operands ",
               a, " and ", b,
               "). If you are trying to invert a mask, use the `~` or `logical_not()` "
               "operator instead.");
}

// a + alpha * b (op Add) or a - alpha * b (op Sub).
Tensor add_impl(BinaryOp op, const Tensor& a, const Tensor& b, const Scalar& alpha, ScalarType compute,
                const char* name, const char* node_name) {
  check_not_bool(compute, name);
  check_alpha(alpha, compute, name);
  Tensor out = binary_kernel(op, a, b, compute, compute, name, alpha.to<double>());
  if (auto node = autograd::record(node_name, a, b, out)) {
    const double alpha_value = alpha.to<double>();  // gradients are floating
    set_add_backward(*node, a, b, out, op == BinaryOp::Add ? alpha_value : -alpha_value);
  }
  return out;
}

Tensor mul_impl(const Tensor& a, const Tensor& b, ScalarType compute) {
  check_not_bool(compute, "mul");
  Tensor out = binary_kernel(BinaryOp::Mul, a, b, compute, compute, "mul");
  if (auto node = autograd::record("MulBackward0", a, b, out)) set_mul_backward(*node, a, b, a, b);
  return out;
}

Tensor div_impl(const Tensor& a, const Tensor& b, ScalarType compute) {
  if (!is_floating_point(compute)) compute = get_default_dtype();  // true division
  Tensor out = binary_kernel(BinaryOp::Div, a, b, compute, compute, "div");
  if (auto node = autograd::record("DivBackward0", a, b, out)) set_div_backward(*node, a, b, a, b);
  return out;
}

// Comparisons and logical ops compute in the promoted dtype and write bool; they have no gradient.
Tensor compare(BinaryOp op, const Tensor& a, const Tensor& b, ScalarType compute, const char* name) {
  return binary_kernel(op, a, b, compute, kBool, name);
}

// erf with its gradient 2/sqrt(pi) * exp(-x^2); used by gelu's backward, so gelu is twice differentiable.
Tensor erf(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Erf, a, float_type(a));
  if (auto node = autograd::record("ErfBackward0", a, y))
    node->backward = [x = SavedVariable(a)](const tensor_list& g) -> tensor_list {
      Tensor xv = x.unpack();
      return {g[0] * exp(xv * xv * -1.0) * 1.1283791670955126};
    };
  return y;
}

// ---- in place ----

// Validates an in-place binary op before anything is written: one device, the result dtype must cast to self's,
// other must broadcast to self's shape; then autograd's in-place checks (which bump the version).
void check_inplace_operands(const Tensor& self, const Tensor& other, ScalarType compute, const char* name) {
  check_same_device(self, other, name);
  STRATA_CHECK(can_cast(compute, self.dtype()), name, ": result type ", compute,
               " can't be cast to the desired output type ", self.dtype());
  if (other.sizes() != self.sizes()) {
    const DimVector shape = broadcast_shapes(self.sizes(), other.sizes(), name);
    STRATA_CHECK(IntArrayRef(shape) == self.sizes(), name, ": shape ", other.sizes(),
                 " cannot be broadcast to the in-place target's shape ", self.sizes());
  }
  autograd::check_inplace(self, name);
}

// self = op(self, other) written straight into self (through a temporary only when the computation dtype differs).
void write_inplace(BinaryOp op, const Tensor& self, const Tensor& other, ScalarType compute, double alpha = 1) {
  const Kernels& k = ops::kernels(self);
  Tensor b = ops::unaliased(expand_to(cast(other, compute), self.sizes()), self);
  if (self.dtype() == compute) {
    run_binary(k, op, self, b, self, alpha);
    return;
  }
  Tensor tmp = empty(self.sizes(), options_of(compute, self));
  run_binary(k, op, cast(self, compute), b, tmp, alpha);
  k.copy(tmp, self);
}

Tensor& add_inplace(BinaryOp op, Tensor& self, const Tensor& other, const Scalar& alpha, ScalarType compute,
                    const char* name) {
  check_not_bool(compute, name);
  check_alpha(alpha, compute, name);
  check_inplace_operands(self, other, compute, name);
  auto node = autograd::record(op == BinaryOp::Add ? "AddBackward0" : "SubBackward0", {self, other}, {});
  write_inplace(op, self, other, compute, alpha.to<double>());
  if (node) {
    autograd::rebase_history(self, node);
    const double alpha_value = alpha.to<double>();
    set_add_backward(*node, self, other, self, op == BinaryOp::Add ? alpha_value : -alpha_value);
  }
  return self;
}

// Note [in-place operands]: mul_ and div_ save both operands' values for backward, and must take
// them before self is written. self's is a differentiable clone (for double backward). other is
// saved as is, unless it shares self's storage (x.mul_(x), x.div_(x[0])): then the write changes
// it too, and after rebase_history its grad_fn may be the node itself (a reference cycle), so a
// clone taken before the write is saved instead (self's own clone when other is self).
struct InplaceOperands {
  Tensor self_value, other_value;
  InplaceOperands(const LambdaNode* node, const Tensor& self, const Tensor& other) {
    if (!node) return;
    if (needs_grad(*node, 1)) self_value = self.clone();
    if (!other.is_alias_of(self))
      other_value = other;
    else
      other_value = other.is_same(self) && self_value.defined() ? self_value : other.clone();
  }
};

Tensor& mul_inplace(Tensor& self, const Tensor& other, ScalarType compute) {
  check_not_bool(compute, "mul_");
  check_inplace_operands(self, other, compute, "mul_");
  auto node = autograd::record("MulBackward0", {self, other}, {});
  const InplaceOperands saved(node.get(), self, other);
  write_inplace(BinaryOp::Mul, self, other, compute);
  if (node) {
    autograd::rebase_history(self, node);
    set_mul_backward(*node, self, other, saved.self_value, saved.other_value);
  }
  return self;
}

Tensor& div_inplace(Tensor& self, const Tensor& other, ScalarType compute) {
  if (!is_floating_point(compute)) compute = get_default_dtype();
  check_inplace_operands(self, other, compute, "div_");
  auto node = autograd::record("DivBackward0", {self, other}, {});
  const InplaceOperands saved(node.get(), self, other);
  write_inplace(BinaryOp::Div, self, other, compute);
  if (node) {
    autograd::rebase_history(self, node);
    set_div_backward(*node, self, other, saved.self_value, saved.other_value);
  }
  return self;
}

// x limited to [lo, hi] in dtype compute, written into out (which may be x itself).
void clamp_kernel(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi, ScalarType compute,
                  const Tensor& out) {
  const Kernels& k = ops::kernels(x);
  Tensor src = cast(x, compute);
  if (lo) {
    k.binary(BinaryOp::Maximum, src, wrap(*lo, compute, x), out);
    src = out;
  }
  if (hi) k.binary(BinaryOp::Minimum, src, wrap(*hi, compute, x), out);
}

// Where clamp passes its input through (inclusive bounds, as torch): the gradient mask.
Tensor clamp_mask(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  if (lo && hi) return logical_and(x.ge(*lo), x.le(*hi));
  return lo ? x.ge(*lo) : x.le(*hi);
}

void set_clamp_backward(LambdaNode& node, Tensor mask) {
  node.backward = [mask = std::move(mask)](const tensor_list& g) -> tensor_list { return {g[0] * mask}; };
}

// clamp computes in the dtype promoted with both bounds: Long stays Long with integral bounds.
ScalarType clamp_type(const Tensor& a, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  STRATA_CHECK(lo || hi, "clamp: at least one of 'min' or 'max' must not be None");
  STRATA_CHECK(a.dtype() != kBool, "clamp: bool tensors are not supported");
  ScalarType t = a.dtype();
  if (lo) t = result_type(t, *lo);
  if (hi) t = result_type(t, *hi);
  return t;
}

}  // namespace

namespace ops {
Tensor scalar_like(Scalar v, const Tensor& t) { return zero_dim_tensor(v, t.dtype(), t.device()); }

Tensor unaliased(const Tensor& operand, const Tensor& target) {
  if (!operand.is_alias_of(target) || (operand.storage_offset() == target.storage_offset() &&
                                       operand.strides() == target.strides() && operand.dtype() == target.dtype()))
    return operand;
  Tensor copy = empty(operand.sizes(), operand.options());
  kernels(operand).copy(operand, copy);
  return copy;
}
}  // namespace ops

// ---- arithmetic ----

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  return add_impl(BinaryOp::Add, a, b, alpha, result_type(a, b), "add", "AddBackward0");
}

Tensor add(const Tensor& a, Scalar b, Scalar alpha) {
  const ScalarType c = result_type(a, b);
  return add_impl(BinaryOp::Add, a, wrap(b, c, a), alpha, c, "add", "AddBackward1");
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_sub_operands(a.dtype(), b.dtype(), "sub");
  return add_impl(BinaryOp::Sub, a, b, alpha, result_type(a, b), "sub", "SubBackward0");
}

Tensor sub(const Tensor& a, Scalar b, Scalar alpha) {
  check_sub_operands(a.dtype(), b.type(), "sub");
  const ScalarType c = result_type(a, b);
  return add_impl(BinaryOp::Sub, a, wrap(b, c, a), alpha, c, "sub", "SubBackward1");
}

Tensor mul(const Tensor& a, const Tensor& b) { return mul_impl(a, b, result_type(a, b)); }

Tensor mul(const Tensor& a, Scalar b) {
  const ScalarType c = result_type(a, b);
  return mul_impl(a, wrap(b, c, a), c);
}

Tensor div(const Tensor& a, const Tensor& b) { return div_impl(a, b, result_type(a, b)); }

Tensor div(const Tensor& a, Scalar b) {
  const ScalarType c = is_floating_point(result_type(a, b)) ? result_type(a, b) : get_default_dtype();  // true division
  return div_impl(a, wrap(b, c, a), c);
}

Tensor neg(const Tensor& a) {
  check_not_bool(a.dtype(), "neg");
  Tensor y = unary_kernel(UnaryOp::Neg, a, a.dtype());
  if (auto node = autograd::record("NegBackward0", a, y))
    node->backward = [](const tensor_list& g) -> tensor_list { return {-g[0]}; };
  return y;
}

// d(a^e)/da = e * a^(e-1) (0 where e == 0), d(a^e)/de = a^e * log(a) (0 where a == 0 and e >= 0), as torch.
Tensor pow(const Tensor& a, const Tensor& e) {
  const ScalarType compute = result_type(a, e);
  check_not_bool(compute, "pow");
  Tensor y = binary_kernel(BinaryOp::Pow, a, e, compute, compute, "pow");
  if (auto node = autograd::record("PowBackward1", a, e, y)) {
    const bool need_a = needs_grad(*node, 0), need_e = needs_grad(*node, 1);
    node->backward = [ta = GradTarget(a, need_a), te = GradTarget(e, need_e), sa = SavedVariable(a),
                      se = SavedVariable(e),
                      sy = need_e ? SavedVariable(y, true) : SavedVariable()](const tensor_list& g) -> tensor_list {
      Tensor av = sa.unpack(), ev = se.unpack();
      Tensor zero = ops::scalar_like(0, g[0]);
      tensor_list grads(2);
      if (ta.needed) grads[0] = ta(g[0] * where(ev.eq(0.0), zero, ev * av.pow(ev - 1.0)));
      if (te.needed) grads[1] = te(g[0] * where(logical_and(av.eq(0.0), ev.ge(0.0)), zero, sy.unpack() * log(av)));
      return grads;
    };
  }
  return y;
}

Tensor pow(const Tensor& a, Scalar exponent) {
  const ScalarType compute = result_type(a, exponent);
  check_not_bool(compute, "pow");
  STRATA_CHECK(is_floating_point(compute) || exponent.isBoolean() || exponent.to<int64_t>() >= 0,
               "pow: integers to negative integer powers are not allowed, got exponent ", exponent);
  Tensor y = binary_kernel(BinaryOp::Pow, a, wrap(exponent, compute, a), compute, compute, "pow");
  if (auto node = autograd::record("PowBackward0", a, y))
    node->backward = [e = exponent.to<double>(), x = SavedVariable(a)](const tensor_list& g) -> tensor_list {
      if (e == 0) return {zeros_like(g[0])};
      return {g[0] * (x.unpack().pow(e - 1) * e)};
    };
  return y;
}

// ---- unary math ----

Tensor exp(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Exp, a, float_type(a));
  if (auto node = autograd::record("ExpBackward0", a, y))
    node->backward = [y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list { return {g[0] * y.unpack()}; };
  return y;
}

Tensor log(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Log, a, float_type(a));
  if (auto node = autograd::record("LogBackward0", a, y))
    node->backward = [x = SavedVariable(a)](const tensor_list& g) -> tensor_list { return {g[0] / x.unpack()}; };
  return y;
}

Tensor sqrt(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Sqrt, a, float_type(a));
  if (auto node = autograd::record("SqrtBackward0", a, y))
    node->backward = [y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
      return {g[0] / (y.unpack() * 2.0)};
    };
  return y;
}

Tensor rsqrt(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Rsqrt, a, float_type(a));
  if (auto node = autograd::record("RsqrtBackward0", a, y))
    node->backward = [y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
      Tensor yv = y.unpack();
      return {g[0] * (yv * yv * yv) * -0.5};  // d(x^-1/2) = -1/2 x^-3/2
    };
  return y;
}

Tensor abs(const Tensor& a) {
  STRATA_CHECK(a.dtype() != kBool, "abs: bool tensors are not supported");
  Tensor y = unary_kernel(UnaryOp::Abs, a, a.dtype());
  if (auto node = autograd::record("AbsBackward0", a, y))
    node->backward = [x = SavedVariable(a)](const tensor_list& g) -> tensor_list {
      Tensor xv = x.unpack();
      return {g[0] * unary_kernel(UnaryOp::Sign, xv, xv.dtype())};  // sign has zero derivative: a constant
    };
  return y;
}

Tensor tanh(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Tanh, a, float_type(a));
  if (auto node = autograd::record("TanhBackward0", a, y))
    node->backward = [y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
      Tensor yv = y.unpack();
      return {g[0] * (1.0 - yv * yv)};
    };
  return y;
}

Tensor sigmoid(const Tensor& a) {
  Tensor y = unary_kernel(UnaryOp::Sigmoid, a, float_type(a));
  if (auto node = autograd::record("SigmoidBackward0", a, y))
    node->backward = [y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
      Tensor yv = y.unpack();
      return {g[0] * yv * (1.0 - yv)};
    };
  return y;
}

// ---- activations ----

Tensor relu(const Tensor& a) {
  STRATA_CHECK(a.dtype() != kBool, "relu: bool tensors are not supported");
  Tensor y = unary_kernel(UnaryOp::Relu, a, a.dtype());
  if (auto node = autograd::record("ReluBackward0", a, y))
    node->backward = [y = SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
      // As libtorch's threshold_backward: zero where y <= 0, so a NaN passes its gradient through. One kernel,
      // or differentiable ops when backward builds a graph (create_graph).
      const Tensor yv = y.unpack();
      if (!GradMode::is_enabled() && g[0].dtype() == yv.dtype())
        return {binary_kernel(BinaryOp::ReluBackward, g[0], yv, yv.dtype(), yv.dtype(), "relu_backward")};
      return {where(yv.le(0.0), ops::scalar_like(0, g[0]), g[0])};
    };
  return y;
}

// gelu(x) = x * Phi(x). Exact: Phi(x) = (1 + erf(x / sqrt 2)) / 2, d/dx = Phi(x) + x * phi(x).
// "tanh": 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
//         d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u).
// Forward and backward are one kernel each; a backward that builds a graph (create_graph) writes d/dx
// in differentiable ops instead, so gelu is twice differentiable.
Tensor gelu(const Tensor& a, const std::string& approximate) {
  const bool tanh_form = approximate == "tanh";
  STRATA_CHECK(tanh_form || approximate == "none", "gelu: approximate must be \"none\" or \"tanh\", got \"",
               approximate, "\"");
  Tensor y = unary_kernel(tanh_form ? UnaryOp::GeluTanh : UnaryOp::Gelu, a, float_type(a));
  if (auto node = autograd::record("GeluBackward0", a, y))
    node->backward = [tanh_form, x = SavedVariable(a)](const tensor_list& g) -> tensor_list {
      Tensor xv = x.unpack();
      if (!GradMode::is_enabled()) {
        const ScalarType c = result_type(g[0], xv);
        return {binary_kernel(tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward, g[0], xv, c, c,
                              "gelu_backward")};
      }
      if (tanh_form) {
        Tensor x2 = xv * xv;
        Tensor t = tanh((xv + x2 * xv * kGeluKappa) * kGeluBeta);
        return {g[0] * ((t + 1.0) * 0.5 + xv * 0.5 * (1.0 - t * t) * kGeluBeta * (x2 * (3 * kGeluKappa) + 1.0))};
      }
      return {g[0] * ((erf(xv * kGeluSqrtHalf) + 1.0) * 0.5 + xv * exp(xv * xv * -0.5) * kGeluInvSqrt2Pi)};
    };
  return y;
}

// silu(x) = x * s, s = sigmoid(x); d/dx = s * (1 + x * (1 - s)).
Tensor leaky_relu(const Tensor& a, double negative_slope) {
  STRATA_CHECK(a.is_floating_point(), "leaky_relu: expected a floating point tensor, got ", a.dtype());
  return where(a.gt(0.0), a, a * negative_slope);  // at 0 the slope side, as torch's backward
}

Tensor silu(const Tensor& a) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = a * sigmoid(a);
  }
  if (auto node = autograd::record("SiluBackward0", a, y))
    node->backward = [x = SavedVariable(a)](const tensor_list& g) -> tensor_list {
      Tensor xv = x.unpack();
      Tensor s = sigmoid(xv);
      return {g[0] * s * (xv * (1.0 - s) + 1.0)};
    };
  return y;
}

Tensor clamp_min(const Tensor& a, Scalar min) { return clamp(a, min); }
Tensor clamp_max(const Tensor& a, Scalar max) { return clamp(a, std::nullopt, max); }

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  const ScalarType compute = clamp_type(a, min, max);
  Tensor y = empty(a.sizes(), options_of(compute, a));
  clamp_kernel(a, min, max, compute, y);
  if (auto node = autograd::record("ClampBackward1", a, y)) set_clamp_backward(*node, clamp_mask(a, min, max));
  return y;
}

// maximum/minimum: the gradient goes to the selected input, split evenly on ties. As in libtorch, an input
// gets none only where it loses the comparison, so where either is NaN both get the whole gradient.
namespace {
Tensor extremum(BinaryOp op, const Tensor& a, const Tensor& b, const char* name, const char* node_name) {
  const ScalarType compute = result_type(a, b);
  Tensor y = binary_kernel(op, a, b, compute, compute, name);
  if (auto node = autograd::record(node_name, a, b, y)) {
    node->backward = [op, ta = GradTarget(a, needs_grad(*node, 0)), tb = GradTarget(b, needs_grad(*node, 1)),
                      sa = SavedVariable(a), sb = SavedVariable(b)](const tensor_list& g) -> tensor_list {
      Tensor av = sa.unpack(), bv = sb.unpack();
      const ScalarType dt = g[0].dtype();
      // Each share is 1, 1/2 on ties, 0 where that input loses (constants: no second derivative).
      const Tensor a_loses = op == BinaryOp::Maximum ? av.lt(bv) : av.gt(bv);
      const Tensor b_loses = op == BinaryOp::Maximum ? av.gt(bv) : av.lt(bv);
      const Tensor not_tied = 1.0 - cast(av.eq(bv), dt) * 0.5;
      return {ta.needed ? ta(g[0] * (not_tied - cast(a_loses, dt))) : Tensor(),
              tb.needed ? tb(g[0] * (not_tied - cast(b_loses, dt))) : Tensor()};
    };
  }
  return y;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Maximum, a, b, "maximum", "MaximumBackward0");
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::Minimum, a, b, "minimum", "MinimumBackward0");
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(cond.dtype() == kBool, "where: expected a bool condition, got ", cond.dtype());
  STRATA_CHECK(cond.device() == a.device() && a.device() == b.device(), "where: expected tensors on one device, got ",
               cond.device(), ", ", a.device(), " and ", b.device());
  const ScalarType compute = result_type(a, b);
  const DimVector shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor y = empty(shape, options_of(compute, a));
  ops::kernels(a).where(expand_to(cond, shape), expand_to(cast(a, compute), shape), expand_to(cast(b, compute), shape),
                        y);
  if (auto node = autograd::record("WhereBackward0", a, b, y))
    node->backward = [ta = GradTarget(a, needs_grad(*node, 0)), tb = GradTarget(b, needs_grad(*node, 1)),
                      c = SavedVariable(cond)](const tensor_list& g) -> tensor_list {
      Tensor cond = c.unpack(), zero = ops::scalar_like(0, g[0]);
      return {ta.needed ? ta(where(cond, g[0], zero)) : Tensor(), tb.needed ? tb(where(cond, zero, g[0])) : Tensor()};
    };
  return y;
}

// ---- comparisons and logic ----

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, a, b, result_type(a, b), "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ne, a, b, result_type(a, b), "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Lt, a, b, result_type(a, b), "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Le, a, b, result_type(a, b), "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Gt, a, b, result_type(a, b), "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ge, a, b, result_type(a, b), "ge"); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return compare(BinaryOp::LogicalAnd, a, b, result_type(a, b), "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return compare(BinaryOp::LogicalOr, a, b, result_type(a, b), "logical_or");
}
Tensor logical_not(const Tensor& a) {
  Tensor out = empty(a.sizes(), options_of(kBool, a));
  ops::kernels(a).unary(UnaryOp::LogicalNot, a, out);
  return out;
}

namespace {
// a op s, computed in result_type(a, s) (Note [type promotion]).
Tensor compare_scalar(BinaryOp op, const Tensor& a, const Scalar& s, const char* name) {
  const ScalarType compute = result_type(a, s);
  return compare(op, a, wrap(s, compute, a), compute, name);
}
}  // namespace

// Bitwise ops: integers and bool only (on bool they are logical), in the promoted dtype; no gradient.
namespace {
Tensor bitwise(BinaryOp op, const Tensor& a, const Tensor& b, ScalarType compute, const char* name) {
  STRATA_CHECK(!is_floating_point(compute), name, ": expected integer or bool operands, got ", a.dtype(), " and ",
               b.dtype());
  return binary_kernel(op, a, b, compute, compute, name);
}
}  // namespace

Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  return bitwise(BinaryOp::BitwiseAnd, a, b, result_type(a, b), "bitwise_and");
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  return bitwise(BinaryOp::BitwiseOr, a, b, result_type(a, b), "bitwise_or");
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  return bitwise(BinaryOp::BitwiseXor, a, b, result_type(a, b), "bitwise_xor");
}
Tensor bitwise_and(const Tensor& a, Scalar b) {
  const ScalarType c = result_type(a, b);
  return bitwise(BinaryOp::BitwiseAnd, a, wrap(b, c, a), c, "bitwise_and");
}
Tensor bitwise_or(const Tensor& a, Scalar b) {
  const ScalarType c = result_type(a, b);
  return bitwise(BinaryOp::BitwiseOr, a, wrap(b, c, a), c, "bitwise_or");
}
Tensor bitwise_xor(const Tensor& a, Scalar b) {
  const ScalarType c = result_type(a, b);
  return bitwise(BinaryOp::BitwiseXor, a, wrap(b, c, a), c, "bitwise_xor");
}
Tensor bitwise_not(const Tensor& a) {
  STRATA_CHECK(!a.is_floating_point(), "bitwise_not: expected an integer or bool tensor, got ", a.dtype());
  return unary_kernel(UnaryOp::BitwiseNot, a, a.dtype());
}

Tensor eq(const Tensor& a, Scalar b) { return compare_scalar(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, Scalar b) { return compare_scalar(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, Scalar b) { return compare_scalar(BinaryOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, Scalar b) { return compare_scalar(BinaryOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, Scalar b) { return compare_scalar(BinaryOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, Scalar b) { return compare_scalar(BinaryOp::Ge, a, b, "ge"); }

// ---- Tensor methods and operators ----

Tensor Tensor::add(const Tensor& o, Scalar alpha) const { return strata::add(*this, o, alpha); }
Tensor Tensor::add(Scalar o) const { return strata::add(*this, o); }
Tensor Tensor::sub(const Tensor& o, Scalar alpha) const { return strata::sub(*this, o, alpha); }
Tensor Tensor::sub(Scalar o) const { return strata::sub(*this, o); }
Tensor Tensor::mul(const Tensor& o) const { return strata::mul(*this, o); }
Tensor Tensor::mul(Scalar o) const { return strata::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return strata::div(*this, o); }
Tensor Tensor::div(Scalar o) const { return strata::div(*this, o); }
Tensor Tensor::neg() const { return strata::neg(*this); }
Tensor Tensor::pow(const Tensor& e) const { return strata::pow(*this, e); }
Tensor Tensor::pow(Scalar e) const { return strata::pow(*this, e); }
Tensor Tensor::exp() const { return strata::exp(*this); }
Tensor Tensor::log() const { return strata::log(*this); }
Tensor Tensor::sqrt() const { return strata::sqrt(*this); }
Tensor Tensor::rsqrt() const { return strata::rsqrt(*this); }
Tensor Tensor::abs() const { return strata::abs(*this); }
Tensor Tensor::tanh() const { return strata::tanh(*this); }
Tensor Tensor::sigmoid() const { return strata::sigmoid(*this); }
Tensor Tensor::relu() const { return strata::relu(*this); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return strata::clamp(*this, min, max);
}
Tensor Tensor::maximum(const Tensor& o) const { return strata::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return strata::minimum(*this, o); }
Tensor Tensor::eq(const Tensor& o) const { return strata::eq(*this, o); }
Tensor Tensor::eq(Scalar o) const { return strata::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return strata::ne(*this, o); }
Tensor Tensor::ne(Scalar o) const { return strata::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return strata::lt(*this, o); }
Tensor Tensor::lt(Scalar o) const { return strata::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return strata::le(*this, o); }
Tensor Tensor::le(Scalar o) const { return strata::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return strata::gt(*this, o); }
Tensor Tensor::gt(Scalar o) const { return strata::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return strata::ge(*this, o); }
Tensor Tensor::ge(Scalar o) const { return strata::ge(*this, o); }
Tensor Tensor::logical_and(const Tensor& o) const { return strata::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return strata::logical_or(*this, o); }
Tensor Tensor::logical_not() const { return strata::logical_not(*this); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) {
  check_sub_operands(a.type(), b.dtype(), "sub");
  const ScalarType c = result_type(b, a);
  return add_impl(BinaryOp::Sub, wrap(a, c, b), b, 1, c, "sub", "RsubBackward1");
}
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) {
  const ScalarType c = result_type(b, a);
  return div_impl(wrap(a, c, b), b, c);
}
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
Tensor operator==(Scalar a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
Tensor operator!=(Scalar a, const Tensor& b) { return ne(b, a); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
Tensor operator<(Scalar a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
Tensor operator<=(Scalar a, const Tensor& b) { return ge(b, a); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
Tensor operator>(Scalar a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
Tensor operator>=(Scalar a, const Tensor& b) { return le(b, a); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator&(const Tensor& a, Scalar b) { return bitwise_and(a, b); }
Tensor operator&(Scalar a, const Tensor& b) { return bitwise_and(b, a); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator|(const Tensor& a, Scalar b) { return bitwise_or(a, b); }
Tensor operator|(Scalar a, const Tensor& b) { return bitwise_or(b, a); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor operator^(const Tensor& a, Scalar b) { return bitwise_xor(a, b); }
Tensor operator^(Scalar a, const Tensor& b) { return bitwise_xor(b, a); }
Tensor operator~(const Tensor& a) { return bitwise_not(a); }
Tensor operator!(const Tensor& a) { return logical_not(a); }

// ---- in-place methods ----

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  return add_inplace(BinaryOp::Add, *this, o, alpha, result_type(*this, o), "add_");
}
Tensor& Tensor::add_(Scalar o) {
  const ScalarType c = result_type(*this, o);
  return add_inplace(BinaryOp::Add, *this, wrap(o, c, *this), 1, c, "add_");
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  check_sub_operands(dtype(), o.dtype(), "sub_");
  return add_inplace(BinaryOp::Sub, *this, o, alpha, result_type(*this, o), "sub_");
}
Tensor& Tensor::sub_(Scalar o) {
  check_sub_operands(dtype(), o.type(), "sub_");
  const ScalarType c = result_type(*this, o);
  return add_inplace(BinaryOp::Sub, *this, wrap(o, c, *this), 1, c, "sub_");
}
Tensor& Tensor::mul_(const Tensor& o) { return mul_inplace(*this, o, result_type(*this, o)); }
Tensor& Tensor::mul_(Scalar o) {
  const ScalarType c = result_type(*this, o);
  return mul_inplace(*this, wrap(o, c, *this), c);
}
Tensor& Tensor::div_(const Tensor& o) { return div_inplace(*this, o, result_type(*this, o)); }
Tensor& Tensor::div_(Scalar o) {
  const ScalarType c = strata::is_floating_point(result_type(*this, o)) ? result_type(*this, o) : get_default_dtype();
  return div_inplace(*this, wrap(o, c, *this), c);
}

namespace {
// The new values do not depend on the old ones: the node passes no gradient back.
// An integral value into an int64 tensor is copied from its exact wrapped form (fill takes a double).
Tensor& fill_inplace(Tensor& self, const Scalar& value, const char* name) {
  check_fill_value(value, self.dtype(), name);
  autograd::check_inplace(self, name);
  if (self.dtype() == kLong && !value.isFloatingPoint()) {
    ops::kernels(self).copy(wrap(value, kLong, self), self);
  } else {
    ops::kernels(self).fill(self, value.to<double>());
  }
  if (auto node = autograd::record("FillBackward0", tensor_list{self}, {})) {
    // The old values had no effect on the result: their gradient is zero, as in libtorch, not absent.
    node->backward = [](const tensor_list& g) -> tensor_list { return {zeros_like(g[0])}; };
    autograd::rebase_history(self, node);
  }
  return self;
}
}  // namespace

Tensor& Tensor::zero_() { return fill_inplace(*this, 0, "zero_"); }
Tensor& Tensor::fill_(Scalar value) { return fill_inplace(*this, value, "fill_"); }

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  const ScalarType compute = clamp_type(*this, min, max);
  STRATA_CHECK(can_cast(compute, dtype()), "clamp_: result type ", compute,
               " can't be cast to the desired output type ", dtype());
  autograd::check_inplace(*this, "clamp_");
  auto node = autograd::record("ClampBackward1", tensor_list{*this}, {});
  Tensor mask = node ? clamp_mask(*this, min, max) : Tensor();  // from the values before the write
  clamp_kernel(*this, min, max, compute, *this);
  if (node) {
    autograd::rebase_history(*this, node);
    set_clamp_backward(*node, std::move(mask));
  }
  return *this;
}

}  // namespace strata
