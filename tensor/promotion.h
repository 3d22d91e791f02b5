#pragma once
// Type promotion: the dtype of a binary op's result, libtorch's result_type (promote_types in
// dtype.h is the lattice of two dtypes; this adds 0-dim tensors and wrapped numbers).
//
//   using namespace strata;
//   ScalarType a = result_type(ones({2}, kLong), 2.5);               // Float: a floating number raises the category
//   ScalarType b = result_type(ones({2}, kFloat), ones({}, kDouble)); // Float: a 0-dim tensor only raises the category

#include "strata/tensor/scalar.h"
#include "strata/tensor/tensor.h"

namespace strata {

/// The dtype of a binary op's result under libtorch's promotion rules (Note [type promotion]).
ScalarType result_type(const Tensor& a, const Tensor& b);
/// The dtype of `a op b` for a wrapped number b: a's, unless b's kind (bool < integer < floating) is
/// higher, then Long or Float (the default dtype): an Int tensor plus 1 stays Int.
ScalarType result_type(const Tensor& a, const Scalar& b);
/// The same for a tensor of dtype t.
ScalarType result_type(ScalarType t, const Scalar& b);
/// Throws unless the fill value s fits the integer dtype t, as libtorch's checked conversion: within t's
/// range, or for the unsigned uint8 down to -255 (which wraps); op names the caller in the message.
void check_fill_value(const Scalar& s, ScalarType t, const char* op);

}  // namespace strata
