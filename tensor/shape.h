#pragma once
// Sizes and strides: IntArrayRef borrows a list of int64_t, DimVector owns one.
//
//   auto f = [](strata::IntArrayRef sizes) { return sizes.size(); };   // a function taking sizes
//   strata::Tensor t = strata::zeros({2, 3});
//   f({2, 3});  f(t.sizes());  f(std::vector<int64_t>{4});  f(5);

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

#include "strata/tensor/error.h"

namespace strata {

/// A non-owning view of int64_t values, like c10::IntArrayRef; valid while its source lives.
class IntArrayRef {
 public:
  IntArrayRef() = default;
  IntArrayRef(const int64_t& one) : data_(&one), size_(1) {}                   ///< a single value
  IntArrayRef(const int64_t* data, size_t size) : data_(data), size_(size) {}  ///< pointer and length
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"  // borrowing a braced list for one call is the intent
#endif
  IntArrayRef(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}  ///< a braced list
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}  ///< a vector
  const int64_t* data() const { return data_; }                                     ///< first element
  size_t size() const { return size_; }                                             ///< number of values
  bool empty() const { return size_ == 0; }                                         ///< true when there are no values
  const int64_t* begin() const { return data_; }                                    ///< iterator to the first value
  const int64_t* end() const { return data_ + size_; }                              ///< iterator past the last value
  int64_t operator[](size_t i) const { return data_[i]; }                           ///< unchecked element access
  int64_t back() const { return data_[size_ - 1]; }                                 ///< last value
  std::vector<int64_t> vec() const { return {begin(), end()}; }                     ///< an owning copy
  bool operator==(IntArrayRef o) const;                                             ///< element-wise equality

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};
/// Prints "[2, 3]".
std::ostream& operator<<(std::ostream& os, IntArrayRef a);

/// An owning list of dims that stores up to kInline values without allocating.
class DimVector {
 public:
  static constexpr size_t kInline = 6;  ///< dims stored without allocating
  DimVector() = default;
  explicit DimVector(size_t n, int64_t value = 0) { resize(n, value); }    ///< n copies of value
  DimVector(IntArrayRef a) { assign(a); }                                  ///< copies a
  DimVector(std::initializer_list<int64_t> l) { assign(IntArrayRef(l)); }  ///< copies the list
  DimVector(const DimVector& o) { assign(o); }                             ///< copies o
  /// Copies o.
  DimVector& operator=(const DimVector& o) {
    if (this != &o) assign(o);
    return *this;
  }
  DimVector(DimVector&& o) noexcept { *this = std::move(o); }  ///< takes o's values, leaving o empty
  DimVector& operator=(DimVector&& o) noexcept;                ///< takes o's values, leaving o empty
  operator IntArrayRef() const { return {data(), size_}; }     ///< borrow as IntArrayRef

  size_t size() const { return size_; }                                             ///< number of values
  bool empty() const { return size_ == 0; }                                         ///< true when there are no values
  int64_t* data() { return size_ > kInline ? heap_.data() : inline_; }              ///< first value
  const int64_t* data() const { return size_ > kInline ? heap_.data() : inline_; }  ///< first value
  int64_t* begin() { return data(); }                                               ///< iterator to the first value
  int64_t* end() { return data() + size_; }                                         ///< iterator past the last value
  const int64_t* begin() const { return data(); }                                   ///< iterator to the first value
  const int64_t* end() const { return data() + size_; }                             ///< iterator past the last value
  int64_t& operator[](size_t i) { return data()[i]; }                               ///< unchecked element access
  int64_t operator[](size_t i) const { return data()[i]; }                          ///< unchecked element access
  int64_t& back() { return data()[size_ - 1]; }                                     ///< last value
  void resize(size_t n, int64_t value = 0);                                         ///< grows with `value` or shrinks
  void push_back(int64_t v) { resize(size_ + 1, v); }                               ///< appends one value
  void insert(size_t pos, int64_t v);                                               ///< inserts v before index pos
  void erase(size_t pos);                                                           ///< removes the value at index pos
  std::vector<int64_t> vec() const { return {begin(), end()}; }                     ///< an owning std::vector copy
  bool operator==(const DimVector& o) const { return IntArrayRef(*this) == IntArrayRef(o); }  ///< same values

 private:
  void assign(IntArrayRef a);
  int64_t inline_[kInline] = {};
  std::vector<int64_t> heap_;  // used once size exceeds kInline
  size_t size_ = 0;
};

/// Product of the values (1 for an empty list).
int64_t multiply(IntArrayRef a);
/// Row-major contiguous strides for `sizes`.
DimVector contiguous_strides(IntArrayRef sizes);
/// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
/// NumPy broadcast of two shapes; throws naming `op` and both shapes when they do not broadcast.
DimVector broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op);
/// True when no two elements of the geometry share a memory location, by a sufficient test: ordered by
/// stride, each dim steps past everything the smaller ones span (false for any stride 0 of a dim of size > 1).
bool is_non_overlapping(IntArrayRef sizes, IntArrayRef strides);

}  // namespace strata
