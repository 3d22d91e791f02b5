#pragma once
// STRATA_ARG declares an option with a fluent setter, as libtorch's TORCH_ARG, for the options
// classes of layers and optimizers; ExpandingArray<D> is a size option given once or per dim:
//
//   class LinearOptions {
//    public:
//     LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
//     STRATA_ARG(int64_t, in_features);
//     STRATA_ARG(int64_t, out_features);
//     STRATA_ARG(bool, bias) = true;
//   };
//   auto o = LinearOptions(784, 256).bias(false);   // o.bias() == false
//   ExpandingArray<2> k = 3, s = {2, 1};             // *k == {3, 3}, *s == {2, 1}

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "strata/tensor/error.h"
#include "strata/tensor/shape.h"

/// Declares member `name_` of type T with a reader name() and a chaining writer name(value). Reads
/// are name(), writes name(value); the macro leaves the class in `private:`.
#define STRATA_ARG(T, name)                          \
 public:                                             \
  auto name(const T& value)->decltype(*this) {       \
    name##_ = value;                                 \
    return *this;                                    \
  }                                                  \
  const T& name() const noexcept { return name##_; } \
                                                     \
 private:                                            \
  T name##_

namespace strata {

/// D sizes written as one value for every dim or as one per dim, as libtorch's ExpandingArray.
template <size_t D>
class ExpandingArray {
 public:
  ExpandingArray(int64_t value) { values_.fill(value); }  ///< value in every dim
  /// one value per dim
  ExpandingArray(std::initializer_list<int64_t> values) {
    STRATA_CHECK(values.size() == D, "expected ", D, " values, got ", values.size());
    std::copy(values.begin(), values.end(), values_.begin());
  }
  ExpandingArray(const std::array<int64_t, D>& values) : values_(values) {}  ///< one value per dim
  const std::array<int64_t, D>& operator*() const { return values_; }        ///< the values
  const std::array<int64_t, D>* operator->() const { return &values_; }      ///< the values' members
  int64_t operator[](size_t d) const { return values_[d]; }                  ///< the value of dim d
  operator IntArrayRef() const { return {values_.data(), D}; }               ///< as an op's size argument
  bool operator==(const ExpandingArray&) const = default;                    ///< equal in every dim

 private:
  std::array<int64_t, D> values_;
};

}  // namespace strata
