#pragma once
// Internal helpers shared by the op families in autograd/ops/. Not installed.

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/autograd/ops.h"
#include "strata/tensor/kernels.h"

namespace strata::ops {

/// The kernel table of t's device.
inline const Kernels& kernels(const Tensor& t) { return kernels_for(t.device()); }
/// Sums a broadcast gradient back to `sizes` (reduce.cpp); returns grad itself when sizes already match.
Tensor sum_to(const Tensor& grad, IntArrayRef sizes);
/// `operand` of an in-place write into `target` (elementwise.cpp), or, when it shares target's memory in
/// another layout (a.add_(a.t()), x.div_(x[0])), a copy of it, so that no element is read after it was written.
Tensor unaliased(const Tensor& operand, const Tensor& target);
/// Makes a view's history an as_strided view of its base's current history (Note [view history]; shape.cpp).
void set_view_history(const Tensor& view);
/// After in-place op `fn` wrote into a view: its base's history becomes CopySlices over fn, the view's a view
/// of that (Note [CopySlices]; shape.cpp).
void rebase_view_history(const Tensor& view, const std::shared_ptr<autograd::Node>& fn);
/// A 0-dim tensor holding v (converted exactly) with t's dtype and device.
Tensor scalar_like(Scalar v, const Tensor& t);

/// An op's operands as autocast's registry casts them (Note [autocast] in autograd/autocast.cpp). Empty unless
/// autocast is on for the operands' device; then it holds the casts and keeps autocast off until destroyed, so
/// that the op, called again with them, runs as written:
///   if (ops::AutocastArgs cast{"matmul", {a, b}}) return matmul(cast[0], cast[1]);
class AutocastArgs {
 public:
  /// `op` is the op's name in the registry; undefined operands stay undefined.
  AutocastArgs(const char* op, std::initializer_list<Tensor> operands) {
    if (active()) cast(op, operands.begin(), operands.end());
  }
  /// The same for a list of operands.
  AutocastArgs(const char* op, const tensor_list& operands) {
    if (active()) cast(op, operands.data(), operands.data() + operands.size());
  }
  ~AutocastArgs();
  AutocastArgs(const AutocastArgs&) = delete;
  AutocastArgs& operator=(const AutocastArgs&) = delete;
  explicit operator bool() const { return applied_; }             ///< whether the operands were cast
  const Tensor& operator[](size_t i) const { return casts_[i]; }  ///< operand i, cast
  const tensor_list& operands() const { return casts_; }          ///< every operand, cast

 private:
  static bool active();  // autocast is on for some device and no AutocastArgs holds casts on this thread
  void cast(const char* op, const Tensor* begin, const Tensor* end);
  tensor_list casts_;
  bool applied_ = false;
};

}  // namespace strata::ops
