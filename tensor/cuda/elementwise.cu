// CUDA kernels: unary, binary (GELU's and ReLU's backward among them), add_scaled and where. One kernel template
// runs all of them: each thread loads its inputs, converts them to acc_t (float for Half and BFloat16), applies a
// functor and stores the result converted to the output type. The functors repeat the CPU's expressions
// (cpu/unary.cpp, cpu/elementwise.cpp), so NaN, signed zero and integer results agree, and the
// launchers accept and reject the same dtypes with the same messages; Half and BFloat16, which
// the CPU only converts, compute as libtorch's CUDA kernels do.

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

// ---- kernels ----

/// x != x, as the CPU's is_nan: Maximum and Minimum propagate NaN.
template <class T>
__device__ inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

/// out = op(in...) at one position: inputs load as acc_t, the result stores converted to Out.
template <class Out, class... In, class Op, int N, size_t... K>
__device__ inline void apply_at(const Op& op, const Loop<N>& loop, const int64_t (&off)[N], std::index_sequence<K...>) {
  *at<Out>(loop, off, 0) = convert<Out>(op(convert<acc_t<In>>(*at<const In>(loop, off, K + 1))...));
}

/// out = op(in...) over loop, operand 0 the output; a grid-stride loop, offsets computed the kInd way.
template <Indexing kInd, class Op, class Out, class... In>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Loop<1 + sizeof...(In)> loop, Op op) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < loop.numel; i += step) {
    int64_t off[1 + sizeof...(In)];
    offsets_at<kInd>(loop, i, off);
    apply_at<Out, In...>(op, loop, off, std::index_sequence_for<In...>{});
  }
}

// Note [vectorised elementwise]: when make_loop leaves one dim in which the output and every input
// is dense and aligned to kVec elements, or an input is one broadcast value (stride 0, as a
// wrapped scalar is), each thread loads and stores kVec elements at once: 16-byte accesses for
// float, the access width memory-bound kernels need on the GPU. The last numel % kVec elements
// go one per thread.
constexpr int kVec = 4;

/// kVec elements of T, aligned so that one access moves them all.
template <class T>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

/// Pack p of operand k: kVec dense elements, or its one value kVec times where its stride is 0.
template <class T, int N>
__device__ inline Pack<T> load_pack(const Loop<N>& loop, int k, int64_t p) {
  if (loop.strides[0][k] != 0) return reinterpret_cast<const Pack<T>*>(loop.data[k])[p];
  Pack<T> r;
  const T value = *reinterpret_cast<const T*>(loop.data[k]);
#pragma unroll
  for (int j = 0; j < kVec; ++j) r.v[j] = value;
  return r;
}

/// out = op(in...) over pack p of each operand.
template <class Out, class... In, class Op, int N, size_t... K>
__device__ inline void apply_pack(const Op& op, const Loop<N>& loop, int64_t p, std::index_sequence<K...>) {
  const std::tuple<Pack<In>...> in{load_pack<In>(loop, K + 1, p)...};
  Pack<Out> out;
#pragma unroll
  for (int j = 0; j < kVec; ++j) out.v[j] = convert<Out>(op(convert<acc_t<In>>(std::get<K>(in).v[j])...));
  reinterpret_cast<Pack<Out>*>(loop.data[0])[p] = out;
}

/// elementwise_kernel for a loop that vectorizable() accepted: packs on a grid-stride loop, then the tail.
template <class Op, class Out, class... In>
__global__ void __launch_bounds__(kThreads) vector_kernel(Loop<1 + sizeof...(In)> loop, Op op) {
  const int64_t packs = loop.numel / kVec, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += step) apply_pack<Out, In...>(op, loop, p, std::index_sequence_for<In...>{});
  if (const int64_t i = packs * kVec + first; i < loop.numel) {
    int64_t off[1 + sizeof...(In)];
    offsets_at<Indexing::kFlat>(loop, i, off);
    apply_at<Out, In...>(op, loop, off, std::index_sequence_for<In...>{});
  }
}

/// Whether vector_kernel<Op, Out, In...> may run loop (Note [vectorised elementwise]).
template <class Out, class... In>
bool vectorizable(const Loop<1 + sizeof...(In)>& loop) {
  if (loop.ndim != 1) return false;
  constexpr int64_t kSizes[] = {int64_t{sizeof(Out)}, int64_t{sizeof(In)}...};
  for (int k = 0; k <= static_cast<int>(sizeof...(In)); ++k) {
    const bool broadcast = k > 0 && loop.strides[0][k] == 0;
    const bool dense =
        loop.strides[0][k] == kSizes[k] && reinterpret_cast<uintptr_t>(loop.data[k]) % (kVec * kSizes[k]) == 0;
    if (!broadcast && !dense) return false;
  }
  return true;
}

// Unary functors. T is the acc type of the input.
struct LogicalNot {
  template <class T>
  __device__ bool operator()(T x) const {
    return x == T(0);
  }
};
struct Sign {
  template <class T>
  __device__ T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)  // bool and uint8
      return static_cast<T>(x != T(0));
    else
      return static_cast<T>((T(0) < x) - (x < T(0)));  // 0 for 0 and NaN
  }
};
struct Neg {
  template <class T>
  __device__ T operator()(T x) const {
    return static_cast<T>(-x);
  }
};
struct Abs {
  template <class T>
  __device__ T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return fabs(x);
    else if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? static_cast<T>(-x) : x;
  }
};
struct Relu {
  template <class T>
  __device__ T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? T(0) : x;
  }  // keeps NaN
};
struct Exp {
  template <class T>
  __device__ T operator()(T x) const {
    return exp(x);
  }
};
struct Log {
  template <class T>
  __device__ T operator()(T x) const {
    return log(x);
  }
};
struct Sqrt {
  template <class T>
  __device__ T operator()(T x) const {
    return sqrt(x);
  }
};
struct Rsqrt {
  template <class T>
  __device__ T operator()(T x) const {
    return rsqrt(x);
  }
};
struct Tanh {
  template <class T>
  __device__ T operator()(T x) const {
    return tanh(x);
  }
};
struct Sigmoid {
  template <class T>
  __device__ T operator()(T x) const {
    return T(1) / (T(1) + exp(-x));
  }
};
struct Erf {
  template <class T>
  __device__ T operator()(T x) const {
    return erf(x);
  }
};
struct BitwiseNot {
  template <class T>
  __device__ T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>)
      return !x;
    else
      return static_cast<T>(~x);
  }
};
struct Gelu {
  template <class T>
  __device__ T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf(x * T(kGeluSqrtHalf)));
  }
};
struct GeluTanh {
  template <class T>
  __device__ T operator()(T x) const {
    return T(0.5) * x * (T(1) + tanh(T(kGeluBeta) * (x + T(kGeluKappa) * x * x * x)));
  }
};

// Binary functors. Add and Mul on bool are logical or and and, as on the CPU.
struct Add {
  template <class T>
  __device__ T operator()(T x, T y) const {
    if constexpr (std::is_same_v<T, bool>)
      return x || y;
    else
      return x + y;
  }
};
struct Sub {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return x - y;
  }
};
struct Mul {
  template <class T>
  __device__ T operator()(T x, T y) const {
    if constexpr (std::is_same_v<T, bool>)
      return x && y;
    else
      return x * y;
  }
};
struct Div {
  template <class T>
  __device__ T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {  // as the CPU's int_div: truncates, x / 0 = 0, x / -1 wraps
      if constexpr (std::is_signed_v<T>)
        if (y == -1) return static_cast<T>(0 - static_cast<uint64_t>(x));
      return y ? static_cast<T>(x / y) : T(0);
    } else
      return x / y;
  }
};
struct IntPow {
  __device__ int64_t operator()(int64_t base, int64_t e) const {
    if (e < 0) return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;
    uint64_t result = 1, b = static_cast<uint64_t>(base);  // unsigned: overflow wraps, as in libtorch
    for (; e; e >>= 1, b *= b)
      if (e & 1) result *= b;
    return static_cast<int64_t>(result);
  }
};
/// Floating pow. When the exponent is one broadcast scalar (uniform across the grid), 2, 0.5 and 1
/// take the CPU's shortcuts x * x, sqrt(x) and x, which differ from pow at -0 and -inf.
struct Pow {
  bool scalar_exponent;
  template <class T>
  __device__ T operator()(T x, T y) const {
    if (scalar_exponent) {
      if (y == T(2)) return x * x;
      if (y == T(0.5)) return sqrt(x);
      if (y == T(1)) return x;
    }
    return pow(x, y);
  }
};
struct Maximum {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return (x > y || is_nan(x)) ? x : y;
  }
};
struct Minimum {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return (x < y || is_nan(x)) ? x : y;
  }
};
struct Eq {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x == y;
  }
};
struct Ne {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x != y;
  }
};
struct Lt {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x < y;
  }
};
struct Le {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x <= y;
  }
};
struct Gt {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x > y;
  }
};
struct Ge {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x >= y;
  }
};
struct LogicalAnd {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x != T(0) && y != T(0);
  }
};
struct LogicalOr {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return x != T(0) || y != T(0);
  }
};
// Bitwise ops on integers; on bool, and, or and xor.
struct BitwiseAnd {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return static_cast<T>(x & y);
  }
};
struct BitwiseOr {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return static_cast<T>(x | y);
  }
};
struct BitwiseXor {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return static_cast<T>(x ^ y);
  }
};
/// grad * gelu'(x), exact and tanh form.
struct GeluBackward {
  template <class T>
  __device__ T operator()(T g, T x) const {
    return g * (T(0.5) * (T(1) + erf(x * T(kGeluSqrtHalf))) + x * exp(T(-0.5) * x * x) * T(kGeluInvSqrt2Pi));
  }
};
struct GeluTanhBackward {
  template <class T>
  __device__ T operator()(T g, T x) const {
    const T x2 = x * x, t = tanh(T(kGeluBeta) * (x + T(kGeluKappa) * x2 * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kGeluBeta) * (T(1) + T(3 * kGeluKappa) * x2));
  }
};
/// grad where relu's output y is positive or NaN, else 0.
struct ReluBackward {
  template <class T>
  __device__ T operator()(T g, T y) const {
    return y <= T(0) ? T(0) : g;
  }
};
/// x + alpha * y, alpha already in the acc type A (truncated for int64, as the CPU's static_cast).
template <class A>
struct AddScaled {
  A alpha;
  __device__ A operator()(A x, A y) const { return x + alpha * y; }
};
/// where on raw element bits: the condition is read as a byte.
struct Select {
  template <class U>
  __device__ U operator()(uint8_t c, U x, U y) const {
    return c != 0 ? x : y;
  }
};

// ---- launchers ----

/// Launches vector_kernel or elementwise_kernel<Op, Out, In...> over loop on the device's current stream.
template <class Out, class... In, class Op>
void launch(const Op& op, const Loop<1 + sizeof...(In)>& loop, int device) {
  if (loop.numel == 0) return;
  DeviceGuard guard(device);
  if (vectorizable<Out, In...>(loop)) {
    vector_kernel<Op, Out, In...>
        <<<blocks_for((loop.numel + kVec - 1) / kVec), kThreads, 0, current_stream(device)>>>(loop, op);
    STRATA_CUDA_LAUNCH_CHECK();
    return;
  }
  visit_indexing(loop, [&]<Indexing kInd>() {
    elementwise_kernel<kInd, Op, Out, In...><<<blocks_for(loop.numel), kThreads, 0, current_stream(device)>>>(loop, op);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

/// True when every stride of t is 0: one value broadcast (the CPU's test for pow's scalar exponent).
bool is_broadcast_scalar(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

// Arithmetic ops: out has the inputs' dtype T.
template <class T>
void arithmetic(BinaryOp op, const Tensor& b, const Loop<3>& loop, int device) {
  constexpr bool kBool = std::is_same_v<T, bool>;
  switch (op) {
    case BinaryOp::Add:
      return launch<T, T, T>(Add{}, loop, device);
    case BinaryOp::Mul:
      return launch<T, T, T>(Mul{}, loop, device);
    case BinaryOp::Maximum:
      return launch<T, T, T>(Maximum{}, loop, device);
    case BinaryOp::Minimum:
      return launch<T, T, T>(Minimum{}, loop, device);
    case BinaryOp::BitwiseAnd:
      if constexpr (std::is_integral_v<T>) return launch<T, T, T>(BitwiseAnd{}, loop, device);
      break;
    case BinaryOp::BitwiseOr:
      if constexpr (std::is_integral_v<T>) return launch<T, T, T>(BitwiseOr{}, loop, device);
      break;
    case BinaryOp::BitwiseXor:
      if constexpr (std::is_integral_v<T>) return launch<T, T, T>(BitwiseXor{}, loop, device);
      break;
    default:
      break;
  }
  if constexpr (!kBool) {
    switch (op) {
      case BinaryOp::Sub:
        return launch<T, T, T>(Sub{}, loop, device);
      case BinaryOp::Div:
        return launch<T, T, T>(Div{}, loop, device);
      case BinaryOp::GeluBackward:
        if constexpr (is_floating_v<T>) return launch<T, T, T>(GeluBackward{}, loop, device);
        break;
      case BinaryOp::GeluTanhBackward:
        if constexpr (is_floating_v<T>) return launch<T, T, T>(GeluTanhBackward{}, loop, device);
        break;
      case BinaryOp::ReluBackward:
        return launch<T, T, T>(ReluBackward{}, loop, device);
      case BinaryOp::Pow:
        if constexpr (std::is_integral_v<T>)
          return launch<T, T, T>(IntPow{}, loop, device);
        else
          return launch<T, T, T>(Pow{is_broadcast_scalar(b)}, loop, device);
      default:
        break;
    }
  }
  STRATA_CHECK(false, to_string(op), " does not support ", b.dtype());
}

// Comparisons and logical ops: out is bool.
template <class T>
void predicate(BinaryOp op, const Loop<3>& loop, int device) {
  switch (op) {
    case BinaryOp::Eq:
      return launch<bool, T, T>(Eq{}, loop, device);
    case BinaryOp::Ne:
      return launch<bool, T, T>(Ne{}, loop, device);
    case BinaryOp::Lt:
      return launch<bool, T, T>(Lt{}, loop, device);
    case BinaryOp::Le:
      return launch<bool, T, T>(Le{}, loop, device);
    case BinaryOp::Gt:
      return launch<bool, T, T>(Gt{}, loop, device);
    case BinaryOp::Ge:
      return launch<bool, T, T>(Ge{}, loop, device);
    case BinaryOp::LogicalAnd:
      return launch<bool, T, T>(LogicalAnd{}, loop, device);
    case BinaryOp::LogicalOr:
      return launch<bool, T, T>(LogicalOr{}, loop, device);
    default:
      STRATA_INTERNAL_ASSERT(false);
  }
}

}  // namespace

void CudaKernels::unary(UnaryOp op, const Tensor& in, const Tensor& out) const {
  const ScalarType out_dtype = op == UnaryOp::LogicalNot ? kBool : in.dtype();
  STRATA_CHECK(out.dtype() == out_dtype, to_string(op), ": expected a ", out_dtype, " output, got ", out.dtype());
  const auto loop = make_loop<2>({&out, &in});
  const int device = out.device().index;
  visit_cuda_dtype(in.dtype(), [&]<class T>() {
    switch (op) {
      case UnaryOp::LogicalNot:
        return launch<bool, T>(LogicalNot{}, loop, device);
      case UnaryOp::Sign:
        return launch<T, T>(Sign{}, loop, device);
      case UnaryOp::BitwiseNot:
        if constexpr (std::is_integral_v<T>) return launch<T, T>(BitwiseNot{}, loop, device);
        break;
      default:
        break;
    }
    if constexpr (!std::is_same_v<T, bool>) {
      switch (op) {
        case UnaryOp::Neg:
          return launch<T, T>(Neg{}, loop, device);
        case UnaryOp::Abs:
          return launch<T, T>(Abs{}, loop, device);
        case UnaryOp::Relu:
          return launch<T, T>(Relu{}, loop, device);
        default:
          break;
      }
    }
    if constexpr (is_floating_v<T>) {
      switch (op) {
        case UnaryOp::Exp:
          return launch<T, T>(Exp{}, loop, device);
        case UnaryOp::Log:
          return launch<T, T>(Log{}, loop, device);
        case UnaryOp::Sqrt:
          return launch<T, T>(Sqrt{}, loop, device);
        case UnaryOp::Rsqrt:
          return launch<T, T>(Rsqrt{}, loop, device);
        case UnaryOp::Tanh:
          return launch<T, T>(Tanh{}, loop, device);
        case UnaryOp::Sigmoid:
          return launch<T, T>(Sigmoid{}, loop, device);
        case UnaryOp::Erf:
          return launch<T, T>(Erf{}, loop, device);
        case UnaryOp::Gelu:
          return launch<T, T>(Gelu{}, loop, device);
        case UnaryOp::GeluTanh:
          return launch<T, T>(GeluTanh{}, loop, device);
        default:
          break;
      }
    }
    STRATA_CHECK(false, to_string(op), " does not support ", in.dtype());
  });
}

void CudaKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) const {
  STRATA_CHECK(a.dtype() == b.dtype(), to_string(op), ": expected operands of one dtype, got ", a.dtype(), " and ",
               b.dtype());
  const ScalarType out_dtype = writes_bool(op) ? kBool : a.dtype();
  STRATA_CHECK(out.dtype() == out_dtype, to_string(op), ": expected a ", out_dtype, " output, got ", out.dtype());
  const auto loop = make_loop<3>({&out, &a, &b});
  const int device = out.device().index;
  visit_cuda_dtype(a.dtype(), [&]<class T>() {
    if (writes_bool(op))
      predicate<T>(op, loop, device);
    else
      arithmetic<T>(op, b, loop, device);
  });
}

void CudaKernels::add_scaled(const Tensor& a, const Tensor& b, double alpha, const Tensor& out) const {
  STRATA_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "add: expected operands of one dtype, got ",
               a.dtype(), ", ", b.dtype(), " and ", out.dtype());
  const auto loop = make_loop<3>({&out, &a, &b});
  visit_cuda_dtype(a.dtype(), [&]<class T>() {
    STRATA_CHECK((!std::is_same_v<T, bool>), "add with alpha does not support ", a.dtype());
    if constexpr (!std::is_same_v<T, bool>) {
      using A = acc_t<T>;
      launch<T, T, T>(AddScaled<A>{static_cast<A>(alpha)}, loop, out.device().index);
    }
  });
}

void CudaKernels::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) const {
  STRATA_CHECK(cond.dtype() == kBool, "where: expected a Bool condition, got ", cond.dtype());
  STRATA_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "where: expected operands of dtype ", out.dtype(),
               ", got ", a.dtype(), " and ", b.dtype());
  const auto loop = make_loop<4>({&out, &cond, &a, &b});
  visit_bits_type(out.dtype(), [&]<class U>() { launch<U, uint8_t, U, U>(Select{}, loop, out.device().index); });
}

}  // namespace strata::cuda
