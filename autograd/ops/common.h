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
/// A 0-dim tensor holding v (converted exactly) with t's dtype and device.
Tensor scalar_like(Scalar v, const Tensor& t);

}  // namespace strata::ops
