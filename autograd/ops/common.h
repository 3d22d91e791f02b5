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

}  // namespace strata::ops
