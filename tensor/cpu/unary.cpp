// CPU kernels: elementwise functions of one tensor, and GELU's backward. Transcendental functions run
// through Eigen array maps on contiguous runs so they use Eigen's SIMD implementations.

#include "strata/tensor/cpu/eigen.h"
#include <unsupported/Eigen/SpecialFunctions>

#include <cmath>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

/// out = f(in) with simple per-element code the compiler vectorises.
template <class Out, class T, class F>
void unary_loop(const Tensor& in, const Tensor& out, const F& f) {
  auto loop = make_loop<2>({&out, &in});
  for_each(loop, [&](char* const* d, const int64_t* s, int64_t n) { map_inner<Out, T>(d, s, n, f); });
}

/// out = f(in): contiguous runs use the Eigen expression array_f(map), the rest the scalar f.
template <class T, class F, class ArrayF>
void eigen_loop(const Tensor& in, const Tensor& out, const F& f, const ArrayF& array_f) {
  auto loop = make_loop<2>({&out, &in});
  for_each(loop, [&](char* const* d, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      ArrayMap<T> o(reinterpret_cast<T*>(d[0]), n);
      ConstArrayMap<T> a(reinterpret_cast<const T*>(d[1]), n);
      o = array_f(a);
    } else {
      map_inner<T, T>(d, s, n, f);
    }
  });
}

/// out = f(a, b): contiguous runs use the Eigen expression array_f(map_a, map_b), the rest the scalar f.
template <class T, class F, class ArrayF>
void eigen_loop(const Tensor& a, const Tensor& b, const Tensor& out, const F& f, const ArrayF& array_f) {
  auto loop = make_loop<3>({&out, &a, &b});
  for_each(loop, [&](char* const* d, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
      ArrayMap<T> o(reinterpret_cast<T*>(d[0]), n);
      o = array_f(ConstArrayMap<T>(reinterpret_cast<const T*>(d[1]), n),
                  ConstArrayMap<T>(reinterpret_cast<const T*>(d[2]), n));
    } else {
      map_inner<T, T, T>(d, s, n, f);
    }
  });
}

// GELU and its derivative: exact, x * Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2 and
// d/dx = Phi(x) + x * phi(x); tanh form, 0.5 x (1 + t) with t = tanh(sqrt(2/pi) (x + 0.044715 x^3)) and
// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). The array forms repeat the scalar ones.
template <class T>
T gelu(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(kGeluSqrtHalf)));
}
template <class T>
T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + std::tanh(T(kGeluBeta) * (x + T(kGeluKappa) * x * x * x)));
}
template <class T>
T gelu_grad(T g, T x) {
  return g * (T(0.5) * (T(1) + std::erf(x * T(kGeluSqrtHalf))) + x * std::exp(T(-0.5) * x * x) * T(kGeluInvSqrt2Pi));
}
template <class T>
T gelu_tanh_grad(T g, T x) {
  const T x2 = x * x, t = std::tanh(T(kGeluBeta) * (x + T(kGeluKappa) * x2 * x));
  return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kGeluBeta) * (T(1) + T(3 * kGeluKappa) * x2));
}

template <class T>
void floating(UnaryOp op, const Tensor& in, const Tensor& out) {
  switch (op) {
    case UnaryOp::Exp:
      return eigen_loop<T>(
          in, out, [](T x) { return std::exp(x); }, [](const auto& a) { return exp_or_zero(a); });
    case UnaryOp::Log:
      return eigen_loop<T>(
          in, out, [](T x) { return std::log(x); }, [](const auto& a) { return a.log(); });
    case UnaryOp::Sqrt:
      return eigen_loop<T>(
          in, out, [](T x) { return std::sqrt(x); }, [](const auto& a) { return a.sqrt(); });
    case UnaryOp::Rsqrt:
      return eigen_loop<T>(
          in, out, [](T x) { return T(1) / std::sqrt(x); }, [](const auto& a) { return a.rsqrt(); });
    case UnaryOp::Tanh:
      return eigen_loop<T>(
          in, out, [](T x) { return std::tanh(x); }, [](const auto& a) { return a.tanh(); });
    case UnaryOp::Sigmoid:
      return eigen_loop<T>(
          in, out, [](T x) { return T(1) / (T(1) + std::exp(-x)); }, [](const auto& a) { return a.logistic(); });
    case UnaryOp::Erf:
      return eigen_loop<T>(
          in, out, [](T x) { return std::erf(x); }, [](const auto& a) { return a.erf(); });
    case UnaryOp::Gelu:
      return eigen_loop<T>(in, out, gelu<T>,
                           [](const auto& a) { return T(0.5) * a * (T(1) + (a * T(kGeluSqrtHalf)).erf()); });
    case UnaryOp::GeluTanh:
      return eigen_loop<T>(in, out, gelu_tanh<T>, [](const auto& a) {
        return T(0.5) * a * (T(1) + (T(kGeluBeta) * (a + T(kGeluKappa) * a.cube())).tanh());
      });
    default:
      STRATA_INTERNAL_ASSERT(false);
  }
}

}  // namespace

void gelu_backward(BinaryOp op, const Tensor& grad, const Tensor& x, const Tensor& out) {
  visit_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      if (op == BinaryOp::GeluBackward)
        return eigen_loop<T>(grad, x, out, gelu_grad<T>, [](const auto& g, const auto& a) {
          return g * (T(0.5) * (T(1) + (a * T(kGeluSqrtHalf)).erf()) +
                      a * (T(-0.5) * a.square()).exp() * T(kGeluInvSqrt2Pi));
        });
      return eigen_loop<T>(grad, x, out, gelu_tanh_grad<T>, [](const auto& g, const auto& a) {
        const Eigen::Array<T, Eigen::Dynamic, 1> t = (T(kGeluBeta) * (a + T(kGeluKappa) * a.cube())).tanh();
        return (g * (T(0.5) * (T(1) + t) +
                     T(0.5) * a * (T(1) - t.square()) * T(kGeluBeta) * (T(1) + T(3 * kGeluKappa) * a.square())))
            .eval();
      });
    }
    STRATA_CHECK(false, to_string(op), " does not support ", x.dtype());
  });
}

void CpuKernels::unary(UnaryOp op, const Tensor& in, const Tensor& out) const {
  const ScalarType out_dtype = op == UnaryOp::LogicalNot ? kBool : in.dtype();
  STRATA_CHECK(out.dtype() == out_dtype, to_string(op), ": expected a ", out_dtype, " output, got ", out.dtype());
  if (in_float32(*this, {&in}, {&out}, [&](const tensor_list& t) { unary(op, t[0], t[1]); })) return;
  visit_dtype(in.dtype(), [&]<class T>() {
    constexpr bool kFloating = std::is_floating_point_v<T>;
    constexpr bool kBool = std::is_same_v<T, bool>;
    switch (op) {
      case UnaryOp::LogicalNot:
        return unary_loop<bool, T>(in, out, [](T x) { return x == T(0); });
      case UnaryOp::Sign:
        if constexpr (kBool)
          return unary_loop<T, T>(in, out, [](T x) { return x; });
        else
          return unary_loop<T, T>(in, out, [](T x) { return static_cast<T>((T(0) < x) - (x < T(0))); });
      case UnaryOp::BitwiseNot:
        if constexpr (kBool)
          return unary_loop<T, T>(in, out, [](T x) { return !x; });
        else if constexpr (std::is_integral_v<T>)
          return unary_loop<T, T>(in, out, [](T x) { return T(~x); });
        else
          STRATA_CHECK(false, to_string(op), " does not support ", in.dtype());
        break;
      default:
        break;
    }
    if constexpr (!kBool) {
      switch (op) {
        case UnaryOp::Neg:
          return unary_loop<T, T>(in, out, [](T x) { return static_cast<T>(-x); });
        case UnaryOp::Abs:
          if constexpr (kFloating)
            return unary_loop<T, T>(in, out, [](T x) { return std::abs(x); });
          else if constexpr (std::is_unsigned_v<T>)
            return unary_loop<T, T>(in, out, [](T x) { return x; });
          else  // abs(INT_MIN) wraps to itself, as libtorch
            return unary_loop<T, T>(in, out, [](T x) { return x < T(0) ? static_cast<T>(-x) : x; });
        case UnaryOp::Relu:
          return unary_loop<T, T>(in, out, [](T x) { return x < T(0) ? T(0) : x; });  // keeps NaN
        default:
          break;
      }
    }
    if constexpr (kFloating) return floating<T>(op, in, out);
    STRATA_CHECK(false, to_string(op), " does not support ", in.dtype());
  });
}

}  // namespace strata::cpu
