#pragma once
// Element types and devices, with libtorch's names.
//
//   auto t = strata::zeros({2, 3}, strata::TensorOptions().dtype(strata::kFloat64));
//   strata::visit_dtype(t.dtype(), [&]<class T>() { T* p = t.data_ptr<T>(); p[0] = T(1); });

#include <bit>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "strata/tensor/error.h"

namespace strata {

/// Element type of a tensor. The integer types after BFloat16 came later; the codes already in use
/// (sent between processes) keep their values.
enum class ScalarType : int8_t { Bool, Long, Float, Double, Half, BFloat16, Byte, Char, Short, Int };

constexpr ScalarType kBool = ScalarType::Bool;          ///< bool, one byte
constexpr ScalarType kLong = ScalarType::Long;          ///< int64_t
constexpr ScalarType kInt64 = ScalarType::Long;         ///< int64_t
constexpr ScalarType kFloat = ScalarType::Float;        ///< float
constexpr ScalarType kFloat32 = ScalarType::Float;      ///< float
constexpr ScalarType kDouble = ScalarType::Double;      ///< double
constexpr ScalarType kFloat64 = ScalarType::Double;     ///< double
constexpr ScalarType kHalf = ScalarType::Half;          ///< IEEE binary16 (strata::Half)
constexpr ScalarType kFloat16 = ScalarType::Half;       ///< IEEE binary16 (strata::Half)
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;  ///< bfloat16 (strata::BFloat16)
constexpr ScalarType kByte = ScalarType::Byte;          ///< uint8_t
constexpr ScalarType kUInt8 = ScalarType::Byte;         ///< uint8_t
constexpr ScalarType kChar = ScalarType::Char;          ///< int8_t
constexpr ScalarType kInt8 = ScalarType::Char;          ///< int8_t
constexpr ScalarType kShort = ScalarType::Short;        ///< int16_t
constexpr ScalarType kInt16 = ScalarType::Short;        ///< int16_t
constexpr ScalarType kInt = ScalarType::Int;            ///< int32_t
constexpr ScalarType kInt32 = ScalarType::Int;          ///< int32_t
/// The number of ScalarTypes, whose values are 0 to kNumScalarTypes - 1 (Int stays the last one).
constexpr int kNumScalarTypes = static_cast<int>(ScalarType::Int) + 1;

/// IEEE 754 binary16 as stored bits, as c10::Half: converts to and from float, rounding to nearest even.
/// Arithmetic on Half tensors runs in float32 and rounds its results to Half, on CUDA and on the CPU.
struct Half {
  uint16_t bits = 0;  ///< sign, 5 exponent bits, 10 mantissa bits
  Half() = default;
  Half(float f) : bits(from_float(f)) {}             ///< rounds f to the nearest Half (overflow gives inf)
  operator float() const { return to_float(bits); }  ///< the exact float value

  /// The bits of the Half nearest to f (ties to even; NaN stays NaN).
  static uint16_t from_float(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
    const uint32_t mag = x & 0x7fffffff;
    if (mag > 0x7f800000) return sign | 0x7e00;   // NaN
    if (mag >= 0x477ff000) return sign | 0x7c00;  // 65520 and above round to inf
    if (mag < 0x38800000)                         // below 2^-14: a subnormal Half, counted in units of 2^-24
      return sign | static_cast<uint16_t>(std::nearbyint(std::bit_cast<float>(mag) * 16777216.0f));
    const uint32_t rebiased = mag - (112u << 23);  // exponent bias 127 -> 15
    return sign | static_cast<uint16_t>((rebiased + 0xfff + ((rebiased >> 13) & 1)) >> 13);
  }
  /// The float value of Half bits h.
  static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
      const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000 | (man << 13));
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
  }
};

/// bfloat16 (the top half of a float32) as stored bits, as c10::BFloat16; rounds to nearest even.
/// Arithmetic on BFloat16 tensors runs in float32 and rounds its results to BFloat16, on CUDA and on the CPU.
struct BFloat16 {
  uint16_t bits = 0;  ///< sign, 8 exponent bits, 7 mantissa bits
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  ///< rounds f to the nearest BFloat16
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }  ///< the exact float value

  /// The bits of the BFloat16 nearest to f (ties to even; NaN stays NaN).
  static uint16_t from_float(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
    return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
  }
};

/// The largest Half or BFloat16 below x: one step down in sign-magnitude bit order (from either zero, the
/// negative value nearest zero).
template <class T>
T next_below(T x) {
  static_assert(std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, "next_below: a 16-bit float only");
  T r;
  r.bits = static_cast<uint16_t>((x.bits & 0x7fff) == 0 ? 0x8001 : (x.bits & 0x8000) ? x.bits + 1 : x.bits - 1);
  return r;
}

/// Bytes per element.
constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case kBool:
    case kByte:
    case kChar:
      return 1;
    case kShort:
    case kHalf:
    case kBFloat16:
      return 2;
    case kInt:
    case kFloat:
      return 4;
    case kLong:
    case kDouble:
      return 8;
  }
  return 8;
}
/// True for float32, float64, float16 and bfloat16.
constexpr bool is_floating_point(ScalarType t) { return t == kFloat || t == kDouble || t == kHalf || t == kBFloat16; }
/// True for the integer types (uint8, int8, int16, int32, int64), with bool only when include_bool, as
/// c10::isIntegralType.
constexpr bool is_integral(ScalarType t, bool include_bool) {
  return t == kByte || t == kChar || t == kShort || t == kInt || t == kLong || (include_bool && t == kBool);
}
/// The dtype factories give floating values when no dtype is named (Float until set_default_dtype), as
/// torch::get_default_dtype; integer operands of true division and of floating Scalars promote to it.
ScalarType get_default_dtype();
/// Sets get_default_dtype() for the whole process; a floating dtype only, as torch.set_default_dtype.
void set_default_dtype(ScalarType t);
/// True for the 16-bit floats (Half, BFloat16), which compute in float32.
constexpr bool is_reduced_floating_point(ScalarType t) { return t == kHalf || t == kBFloat16; }
/// The dtype both a and b convert to in libtorch's lattice, as at::promote_types: Bool < Byte, Char <
/// Short < Int < Long < Half, BFloat16 < Float < Double; Byte with Char gives Short, Half with BFloat16 Float.
constexpr ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  auto rank = [](ScalarType t) {
    switch (t) {
      case kBool:
        return 0;
      case kByte:
      case kChar:
        return 1;
      case kShort:
        return 2;
      case kInt:
        return 3;
      case kLong:
        return 4;
      case kHalf:
      case kBFloat16:
        return 5;
      case kFloat:
        return 6;
      case kDouble:
        return 7;
    }
    return 7;
  };
  if (rank(a) == rank(b)) return rank(a) == 1 ? kShort : kFloat;  // {Byte, Char} or {Half, BFloat16}
  return rank(a) > rank(b) ? a : b;
}
/// libtorch's name for the type: "Bool", "Byte", "Char", "Short", "Int", "Long", "Float", "Double", "Half",
/// "BFloat16".
const char* to_string(ScalarType t);
/// Prints to_string(t).
std::ostream& operator<<(std::ostream& os, ScalarType t);

/// The ScalarType of a C++ element type: bool, uint8_t, int8_t, int16_t, int32_t, int64_t, float, double, Half
/// or BFloat16.
template <class T>
constexpr ScalarType scalar_type_of() {
  if constexpr (std::is_same_v<T, bool>) return kBool;
  if constexpr (std::is_same_v<T, uint8_t>) return kByte;
  if constexpr (std::is_same_v<T, int8_t>) return kChar;
  if constexpr (std::is_same_v<T, int16_t>) return kShort;
  if constexpr (std::is_same_v<T, int32_t>) return kInt;
  if constexpr (std::is_same_v<T, int64_t>) return kLong;
  if constexpr (std::is_same_v<T, float>) return kFloat;
  if constexpr (std::is_same_v<T, double>) return kDouble;
  if constexpr (std::is_same_v<T, Half>) return kHalf;
  if constexpr (std::is_same_v<T, BFloat16>) return kBFloat16;
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> ||
                    std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                    std::is_same_v<T, BFloat16>,
                "scalar_type_of: no ScalarType holds this C++ type");
}

/// x as a To, the way every copy and fill in strata converts (CPU and CUDA alike): static_cast, except that a
/// floating x goes through int64_t into the integer types narrower than 64 bits, so a value out of their range
/// wraps (two's complement) after truncation, as libtorch converts to uint8 on every device (it leaves int8,
/// int16 and int32 to the hardware). NaN, infinities and values beyond int64 stay undefined, as in C++.
template <class To, class From>
constexpr To element_cast(From x) {
  if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>)
    return element_cast<To>(static_cast<float>(x));
  else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool> &&
                     sizeof(To) < sizeof(int64_t))
    return static_cast<To>(static_cast<int64_t>(x));
  else
    return static_cast<To>(x);
}

/// Calls `f.template operator()<T>()` with T the C++ type of `t`, for code that does arithmetic on the
/// host: bool, uint8_t, int8_t, int16_t, int32_t, int64_t, float or double. Half and BFloat16 throw (the CPU
/// kernels compute on float32 copies of those: in_float32, tensor/cpu/cpu_kernels.h).
template <class F>
decltype(auto) visit_dtype(ScalarType t, F&& f) {
  switch (t) {
    case kBool:
      return f.template operator()<bool>();
    case kByte:
      return f.template operator()<uint8_t>();
    case kChar:
      return f.template operator()<int8_t>();
    case kShort:
      return f.template operator()<int16_t>();
    case kInt:
      return f.template operator()<int32_t>();
    case kLong:
      return f.template operator()<int64_t>();
    case kFloat:
      return f.template operator()<float>();
    case kDouble:
      return f.template operator()<double>();
    case kHalf:
    case kBFloat16:
      break;
  }
  STRATA_CHECK(false, "no host arithmetic on ", t, " elements: convert with .to(kFloat) first");
}

/// visit_dtype over every dtype, Half and BFloat16 included, for code that only stores and converts.
template <class F>
decltype(auto) visit_all_dtypes(ScalarType t, F&& f) {
  if (t == kHalf) return f.template operator()<Half>();
  if (t == kBFloat16) return f.template operator()<BFloat16>();
  return visit_dtype(t, std::forward<F>(f));
}

/// Where a tensor's memory lives.
enum class DeviceType : int8_t { CPU, CUDA };
constexpr DeviceType kCPU = DeviceType::CPU;    ///< host memory
constexpr DeviceType kCUDA = DeviceType::CUDA;  ///< a CUDA device (needs STRATA_WITH_CUDA)
/// The number of DeviceTypes, whose values are 0 to kNumDeviceTypes - 1 (CUDA stays the last one).
constexpr int kNumDeviceTypes = static_cast<int>(DeviceType::CUDA) + 1;

/// A device type and index, as in libtorch: Device(kCUDA, 1).
struct Device {
  DeviceType type = kCPU;                                           ///< CPU or CUDA
  int8_t index = 0;                                                 ///< device ordinal; 0 for the CPU
  Device(DeviceType t = kCPU, int8_t i = 0) : type(t), index(i) {}  ///< device i of type t; the CPU by default
  bool is_cpu() const { return type == kCPU; }                      ///< true for host memory
  bool operator==(const Device&) const = default;                   ///< same type and index
};
/// Prints "cpu" or "cuda:N".
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace strata
