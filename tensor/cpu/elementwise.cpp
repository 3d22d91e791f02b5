// CPU kernels: copy, fill, binary, where, arange.

#include <cmath>
#include <cstring>
#include <concepts>
#include <functional>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

template <class Out, class T, class F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, const F& f) {
  auto loop = make_loop<3>({&out, &a, &b});
  for_each(loop, [&](char* const* d, const int64_t* s, int64_t n) { map_inner<Out, T, T>(d, s, n, f); });
}

// Integer division as the ops define it: truncating, x / 0 = 0, and x / -1 negated with wrap-around
// (INT64_MIN / -1 would trap on x86 instead).
int64_t int_div(int64_t x, int64_t y) {
  if (y == -1) return static_cast<int64_t>(0 - static_cast<uint64_t>(x));
  return y ? x / y : 0;
}

int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;
  uint64_t result = 1, b = static_cast<uint64_t>(base);  // unsigned: overflow wraps, as in libtorch
  for (; e; e >>= 1, b *= b)
    if (e & 1) result *= b;
  return static_cast<int64_t>(result);
}

/// The scalar exponent when b is a broadcast scalar (all strides 0), else NaN.
double scalar_exponent(const Tensor& b) {
  for (int64_t s : b.strides())
    if (s != 0) return NAN;
  return visit_dtype(b.dtype(), [&]<class T>() { return static_cast<double>(*static_cast<const T*>(b.data_ptr())); });
}

// Integer +, - and * wrap in two's complement, as libtorch's. They are computed in an unsigned type at least as
// wide as int, where wrapping is defined: signed overflow is undefined behaviour, and unsigned short operands
// would promote to int and overflow there.
template <class T>
struct WrapType {
  using type = T;
};
template <std::integral T>
requires(!std::is_same_v<T, bool>) struct WrapType<T> {
  using type = std::make_unsigned_t<std::common_type_t<T, int>>;
};
template <class T>
using Wrap = typename WrapType<T>::type;
template <class T, class Op>
T wrapping(T x, T y, Op op) {
  return static_cast<T>(op(static_cast<Wrap<T>>(x), static_cast<Wrap<T>>(y)));
}

// Arithmetic ops: out has the inputs' dtype T.
template <class T>
void arithmetic(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr bool kBool = std::is_same_v<T, bool>;
  switch (op) {
    case BinaryOp::Add:
      if constexpr (kBool)
        return binary_loop<T, T>(a, b, out, [](T x, T y) { return x || y; });
      else
        return binary_loop<T, T>(a, b, out, [](T x, T y) { return wrapping(x, y, std::plus<>()); });
    case BinaryOp::Mul:
      if constexpr (kBool)
        return binary_loop<T, T>(a, b, out, [](T x, T y) { return x && y; });
      else
        return binary_loop<T, T>(a, b, out, [](T x, T y) { return wrapping(x, y, std::multiplies<>()); });
    case BinaryOp::Maximum:
      return binary_loop<T, T>(a, b, out, [](T x, T y) { return (x > y || is_nan(x)) ? x : y; });
    case BinaryOp::Minimum:
      return binary_loop<T, T>(a, b, out, [](T x, T y) { return (x < y || is_nan(x)) ? x : y; });
    case BinaryOp::BitwiseAnd:
      if constexpr (std::is_integral_v<T>) return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x & y); });
      break;
    case BinaryOp::BitwiseOr:
      if constexpr (std::is_integral_v<T>) return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x | y); });
      break;
    case BinaryOp::BitwiseXor:
      if constexpr (std::is_integral_v<T>) return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x ^ y); });
      break;
    default:
      break;
  }
  if constexpr (!kBool) {
    switch (op) {
      case BinaryOp::Sub:
        return binary_loop<T, T>(a, b, out, [](T x, T y) { return wrapping(x, y, std::minus<>()); });
      case BinaryOp::Div:
        // Integer division truncates (ops promote to float first); x / 0 gives 0 instead of a trap.
        if constexpr (std::is_integral_v<T>)
          return binary_loop<T, T>(a, b, out, [](T x, T y) { return int_div(x, y); });
        else
          return binary_loop<T, T>(a, b, out, [](T x, T y) { return x / y; });
      case BinaryOp::GeluBackward:
      case BinaryOp::GeluTanhBackward:
        if constexpr (std::is_floating_point_v<T>) return gelu_backward(op, a, b, out);
        break;
      case BinaryOp::ReluBackward:
        return binary_loop<T, T>(a, b, out, [](T g, T y) { return y <= T(0) ? T(0) : g; });
      case BinaryOp::Pow:
        if constexpr (std::is_integral_v<T>) {
          return binary_loop<T, T>(a, b, out, [](T x, T y) { return int_pow(x, y); });
        } else {
          double e = scalar_exponent(b);
          if (e == 2) return binary_loop<T, T>(a, b, out, [](T x, T) { return x * x; });
          if (e == 0.5) return binary_loop<T, T>(a, b, out, [](T x, T) { return std::sqrt(x); });
          if (e == 1) return binary_loop<T, T>(a, b, out, [](T x, T) { return x; });
          return binary_loop<T, T>(a, b, out, [](T x, T y) { return std::pow(x, y); });
        }
      default:
        break;
    }
  }
  STRATA_CHECK(false, to_string(op), " does not support ", a.dtype());
}

// Comparisons and logical ops: out is bool.
template <class T>
void predicate(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::Eq:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x == y; });
    case BinaryOp::Ne:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x != y; });
    case BinaryOp::Lt:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x < y; });
    case BinaryOp::Le:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x <= y; });
    case BinaryOp::Gt:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x > y; });
    case BinaryOp::Ge:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x >= y; });
    case BinaryOp::LogicalAnd:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x != T(0) && y != T(0); });
    case BinaryOp::LogicalOr:
      return binary_loop<bool, T>(a, b, out, [](T x, T y) { return x != T(0) || y != T(0); });
    default:
      STRATA_INTERNAL_ASSERT(false);
  }
}

}  // namespace

void CpuKernels::copy(const Tensor& src, const Tensor& dst) const {
  STRATA_CHECK(src.sizes() == dst.sizes(), "copy: expected equal sizes, got ", src.sizes(), " and ", dst.sizes());
  auto loop = make_loop<2>({&dst, &src});
  visit_all_dtypes(src.dtype(), [&]<class S>() {
    visit_all_dtypes(dst.dtype(), [&]<class D>() {
      for_each(loop, [](char* const* d, const int64_t* s, int64_t n) {
        if constexpr (std::is_same_v<S, D>) {
          if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
            std::memmove(d[0], d[1], n * sizeof(D));
            return;
          }
        }
        map_inner<D, S>(d, s, n, [](S x) { return element_cast<D>(x); });
      });
    });
  });
}

void CpuKernels::fill(const Tensor& dst, double value) const {
  auto loop = make_loop<1>({&dst});
  visit_all_dtypes(dst.dtype(), [&]<class T>() {
    const T v = element_cast<T>(value);
    for_each(loop, [v](char* const* d, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        std::fill_n(reinterpret_cast<T*>(d[0]), n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(d[0] + i * s[0]) = v;
      }
    });
  });
}

void CpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) const {
  STRATA_CHECK(a.dtype() == b.dtype(), to_string(op), ": expected operands of one dtype, got ", a.dtype(), " and ",
               b.dtype());
  const ScalarType out_dtype = writes_bool(op) ? kBool : a.dtype();
  STRATA_CHECK(out.dtype() == out_dtype, to_string(op), ": expected a ", out_dtype, " output, got ", out.dtype());
  if (in_float32(*this, {&a, &b}, {&out}, [&](const tensor_list& t) { binary(op, t[0], t[1], t[2]); })) return;
  visit_dtype(a.dtype(), [&]<class T>() {
    if (writes_bool(op))
      predicate<T>(op, a, b, out);
    else
      arithmetic<T>(op, a, b, out);
  });
}

void CpuKernels::add_scaled(const Tensor& a, const Tensor& b, double alpha, const Tensor& out) const {
  STRATA_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "add: expected operands of one dtype, got ",
               a.dtype(), ", ", b.dtype(), " and ", out.dtype());
  if (in_float32(*this, {&a, &b}, {&out}, [&](const tensor_list& t) { add_scaled(t[0], t[1], alpha, t[2]); })) return;
  visit_dtype(a.dtype(), [&]<class T>() {
    STRATA_CHECK((!std::is_same_v<T, bool>), "add with alpha does not support ", a.dtype());
    if constexpr (!std::is_same_v<T, bool>)
      binary_loop<T, T>(a, b, out, [al = static_cast<T>(alpha)](T x, T y) {
        if constexpr (std::is_floating_point_v<T>)
          return multiply_add(al, y, x);
        else
          return wrapping(x, wrapping(al, y, std::multiplies<>()), std::plus<>());
      });
  });
}

void CpuKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) const {
  STRATA_CHECK(cond.dtype() == kBool, "where: expected a Bool condition, got ", cond.dtype());
  STRATA_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "where: expected operands of dtype ", out.dtype(),
               ", got ", a.dtype(), " and ", b.dtype());
  if (in_float32(*this, {&cond, &a, &b}, {&out}, [&](const tensor_list& t) { where(t[0], t[1], t[2], t[3]); })) return;
  auto loop = make_loop<4>({&out, &cond, &a, &b});
  visit_dtype(out.dtype(), [&]<class T>() {
    for_each(loop, [](char* const* d, const int64_t* s, int64_t n) {
      // The condition is read as bytes: GCC does not vectorise loads of bool.
      map_inner<T, uint8_t, T, T>(d, s, n, [](uint8_t c, T x, T y) { return c != 0 ? x : y; });
    });
  });
}

void CpuKernels::arange(const Tensor& out, double start, double step) const {
  STRATA_CHECK(out.dim() <= 1, "arange: expected a 1-D output, got shape ", out.sizes());
  if (in_float32(*this, {}, {&out}, [&](const tensor_list& t) { arange(t[0], start, step); })) return;
  const int64_t n = out.numel();
  const int64_t stride = out.dim() == 1 ? out.stride(0) : 1;
  visit_dtype(out.dtype(), [&]<class T>() {
    STRATA_CHECK((!std::is_same_v<T, bool>), "arange does not support ", out.dtype());
    T* p = static_cast<T*>(out.data_ptr());
    if constexpr (std::is_integral_v<T>) {
      // Exact integer steps when start and step are whole numbers (large int64 values stay exact).
      if (start == std::floor(start) && step == std::floor(step)) {
        const auto s0 = static_cast<int64_t>(start), st = static_cast<int64_t>(step);
        for (int64_t i = 0; i < n; ++i) p[i * stride] = s0 + i * st;
        return;
      }
    }
    // One rounding, as the CUDA kernel (Note [fused multiply-add] in tensor/cuda/random.cu).
    parallel_for(n, use_threads(n),
                 [&](int64_t i) { p[i * stride] = static_cast<T>(std::fma(static_cast<double>(i), step, start)); });
  });
}

}  // namespace strata::cpu
