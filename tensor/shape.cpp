#include "strata/tensor/shape.h"

#include <algorithm>
#include <cstdlib>

namespace strata {

bool IntArrayRef::operator==(IntArrayRef o) const { return std::equal(begin(), end(), o.begin(), o.end()); }

std::ostream& operator<<(std::ostream& os, IntArrayRef a) {
  os << '[';
  for (size_t i = 0; i < a.size(); ++i) os << (i ? ", " : "") << a[i];
  return os << ']';
}

DimVector& DimVector::operator=(DimVector&& o) noexcept {
  if (this == &o) return *this;
  heap_ = std::move(o.heap_);
  std::copy(o.inline_, o.inline_ + kInline, inline_);
  size_ = o.size_;
  o.heap_.clear();
  o.size_ = 0;
  return *this;
}

void DimVector::assign(IntArrayRef a) {
  if (a.size() <= kInline) {
    std::copy(a.begin(), a.end(), inline_);
    heap_.clear();
  } else {
    heap_.assign(a.begin(), a.end());
  }
  size_ = a.size();
}

void DimVector::resize(size_t n, int64_t value) {
  if (n > kInline) {
    if (size_ <= kInline) heap_.assign(inline_, inline_ + size_);
    heap_.resize(n, value);
  } else if (size_ > kInline) {
    std::copy(heap_.begin(), heap_.begin() + n, inline_);
    heap_.clear();
  } else {
    for (size_t i = size_; i < n; ++i) inline_[i] = value;
  }
  size_ = n;
}

void DimVector::insert(size_t pos, int64_t v) {
  STRATA_INTERNAL_ASSERT(pos <= size_);
  resize(size_ + 1);
  int64_t* d = data();
  std::move_backward(d + pos, d + size_ - 1, d + size_);
  d[pos] = v;
}

void DimVector::erase(size_t pos) {
  STRATA_INTERNAL_ASSERT(pos < size_);
  int64_t* d = data();
  std::move(d + pos + 1, d + size_, d + pos);
  resize(size_ - 1);
}

int64_t multiply(IntArrayRef a) {
  int64_t n = 1;
  for (int64_t v : a)
    STRATA_CHECK(!__builtin_mul_overflow(n, v, &n), "shape ", a, " has too many elements (overflows int64)");
  return n;
}

DimVector contiguous_strides(IntArrayRef sizes) {
  DimVector strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    STRATA_CHECK(!__builtin_mul_overflow(s, std::max<int64_t>(sizes[i], 1), &s), "shape ", sizes,
                 " has too many elements (overflows int64)");
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;  // 0-dim tensors accept 0 and -1
  STRATA_CHECK(dim >= lo && dim <= hi, op, ": dimension out of range (expected to be in range of [", lo, ", ", hi,
               "], but got ", dim, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

DimVector broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op) {
  if (a == b) return DimVector(a);
  const size_t n = std::max(a.size(), b.size());
  DimVector out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    STRATA_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast together (size ",
                 da, " vs ", db, " at dim ", i, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool is_non_overlapping(IntArrayRef sizes, IntArrayRef strides) {
  DimVector order;  // dims that step, by increasing |stride|
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] > 1) order.push_back(static_cast<int64_t>(d));
  }
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return std::abs(strides[a]) < std::abs(strides[b]); });
  int64_t span = 0;  // the last element the smaller dims reach from the first
  for (int64_t d : order) {
    const int64_t stride = std::abs(strides[d]);
    if (stride <= span) return false;
    span += stride * (sizes[d] - 1);
  }
  return true;
}

}  // namespace strata
