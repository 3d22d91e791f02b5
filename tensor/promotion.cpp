// Note [type promotion]: libtorch's result_type. Categories are bool < integer < floating.
// Tensors with dims decide the dtype (the highest among them); a 0-dim tensor only raises it
// when its category is higher (then its own dtype wins). A Scalar is a "wrapped number" whose
// kind (bool, integral, floating: how it was constructed, not its value) only raises the
// category, to the default dtype of that category: an integral Scalar keeps any integer tensor's
// dtype and turns a bool tensor into int64 (`int_t + 1` is Int, `bool_t + 1` is Long); a
// floating Scalar turns an integer or bool tensor into the default dtype (`long_t * 2.5` is Float
// unless set_default_dtype named another) and
// leaves a floating tensor's dtype alone (`float32_t * 2.0` stays float32). The ops' scalar
// overloads pass result_type(Tensor, Scalar) down explicitly, and read the number exactly in
// that dtype (Scalar::to<T>), so int64 math with an integral Scalar never goes through a double:
// `long_t * 3` and `long_t.eq(2^53 + 1)` are exact, and so is clamp on an int64 tensor with
// integral bounds.

#include "strata/tensor/promotion.h"

#include <atomic>
#include <limits>

namespace strata {

namespace {
int category(ScalarType t) { return t == kBool ? 0 : (is_integral(t, false) ? 1 : 2); }
}  // namespace

ScalarType result_type(ScalarType t, const Scalar& b) {
  const int kind = b.isFloatingPoint() ? 2 : b.isIntegral() ? 1 : 0;
  if (kind <= category(t)) return t;
  return kind == 2 ? get_default_dtype() : kLong;
}

namespace {
std::atomic<ScalarType> default_dtype{kFloat};
}  // namespace

ScalarType get_default_dtype() { return default_dtype.load(std::memory_order_relaxed); }

void set_default_dtype(ScalarType t) {
  STRATA_CHECK(is_floating_point(t), "set_default_dtype: only floating point dtypes are supported as the default, got ",
               t);
  default_dtype.store(t, std::memory_order_relaxed);
}

ScalarType result_type(const Tensor& a, const Scalar& b) { return result_type(a.dtype(), b); }

void check_fill_value(const Scalar& s, ScalarType t, const char* op) {
  if (!is_integral(t, false)) return;
  visit_dtype(t, [&]<class T>() {
    using L = std::numeric_limits<T>;
    bool fits;
    if (s.isFloatingPoint()) {
      const double d = s.toDouble();
      fits = d >= static_cast<double>(L::lowest()) && d <= static_cast<double>(L::max());  // NaN fails
    } else {
      const int64_t v = s.toLong();
      fits = v <= static_cast<int64_t>(L::max()) && (v >= static_cast<int64_t>(L::lowest()) ||
                                                     (std::is_unsigned_v<T> && v >= -static_cast<int64_t>(L::max())));
    }
    STRATA_CHECK(fits, op, ": value ", s, " cannot be converted to type ", t, " without overflow");
  });
}

ScalarType result_type(const Tensor& a, const Tensor& b) {
  const ScalarType ta = a.dtype(), tb = b.dtype();
  if (ta == tb) return ta;
  const bool a_dims = a.dim() > 0, b_dims = b.dim() > 0;
  if (a_dims == b_dims) return promote_types(ta, tb);
  const ScalarType dimmed = a_dims ? ta : tb, zero_dim = a_dims ? tb : ta;
  return category(zero_dim) > category(dimmed) ? zero_dim : dimmed;
}

}  // namespace strata
