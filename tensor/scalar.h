#pragma once
// Scalar: a C++ number passed to a tensor op, remembering whether it was a bool, an integer or a
// floating-point value, as c10::Scalar. Ops use the kind for type promotion (an integer keeps an
// int64 tensor int64, a double makes it float32) and read the value exactly in the dtype they
// compute in, so int64 arithmetic never goes through a double.
//
//   Tensor i = arange(3, kLong);
//   Tensor j = i + 1;                  // Long: [1, 2, 3]
//   Tensor f = i * 2.5;                // Float: [0, 2.5, 5]
//   Scalar s = 3;  s.to<double>();     // 3.0; s.isIntegral() is true

#include <concepts>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "strata/tensor/dtype.h"

namespace strata {

/// A bool, int64 or double value that converts implicitly from any C++ arithmetic type.
class Scalar {
 public:
  Scalar() : Scalar(int64_t{0}) {}  ///< integer 0
  /// A bool (a template so pointers do not convert to it silently).
  template <std::same_as<bool> B>
  Scalar(B v) : kind_(Kind::Bool), i_(v) {}
  /// Any integer type: stored as int64.
  template <std::integral I>
  requires(!std::same_as<I, bool>) Scalar(I v) : kind_(Kind::Integral), i_(static_cast<int64_t>(v)) {}
  /// float or double: stored as double.
  template <std::floating_point F>
  Scalar(F v) : kind_(Kind::Floating), d_(static_cast<double>(v)) {}

  bool isFloatingPoint() const { return kind_ == Kind::Floating; }  ///< made from float or double
  bool isIntegral() const { return kind_ == Kind::Integral; }       ///< made from an integer type (not bool)
  bool isBoolean() const { return kind_ == Kind::Bool; }            ///< made from bool
  /// The value converted to T (bool, int32_t, int64_t, float, double, ...), as element_cast (dtype.h) would.
  template <class T>
  T to() const {
    return isFloatingPoint() ? element_cast<T>(d_) : static_cast<T>(i_);
  }
  double toDouble() const { return to<double>(); }  ///< to<double>(), as c10::Scalar
  float toFloat() const { return to<float>(); }     ///< to<float>()
  int64_t toLong() const { return to<int64_t>(); }  ///< to<int64_t>()
  int toInt() const { return to<int>(); }           ///< to<int>()
  bool toBool() const { return to<bool>(); }        ///< to<bool>()
  /// The dtype a 1-element tensor made from this value gets: Bool, Long or Double.
  ScalarType type() const { return isFloatingPoint() ? kDouble : isIntegral() ? kLong : kBool; }
  /// True when the value equals the integer v exactly.
  bool equal(int64_t v) const { return isFloatingPoint() ? d_ == static_cast<double>(v) : i_ == v; }

 private:
  enum class Kind : int8_t { Bool, Integral, Floating };
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

/// Prints the value: "3", "2.5", "true".
inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.isBoolean()) return os << (s.to<bool>() ? "true" : "false");
  if (s.isIntegral()) return os << s.to<int64_t>();
  return os << s.to<double>();
}

}  // namespace strata
