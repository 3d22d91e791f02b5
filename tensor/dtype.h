#pragma once
// Element types and devices, with libtorch's names.
//
//   auto t = strata::zeros({2, 3}, strata::TensorOptions().dtype(strata::kFloat64));
//   strata::visit_dtype(t.dtype(), [&]<class T>() { T* p = t.data_ptr<T>(); ... });

#include <cstdint>
#include <ostream>

#include "strata/tensor/error.h"

namespace strata {

/// Element type of a tensor. Half and BFloat16 get their own enumerators when CUDA needs them.
enum class ScalarType : int8_t { Bool, Long, Float, Double };

constexpr ScalarType kBool = ScalarType::Bool;       ///< bool, one byte
constexpr ScalarType kLong = ScalarType::Long;       ///< int64_t
constexpr ScalarType kInt64 = ScalarType::Long;      ///< int64_t
constexpr ScalarType kFloat = ScalarType::Float;     ///< float
constexpr ScalarType kFloat32 = ScalarType::Float;   ///< float
constexpr ScalarType kDouble = ScalarType::Double;   ///< double
constexpr ScalarType kFloat64 = ScalarType::Double;  ///< double

/// Bytes per element.
constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case kBool: return 1;
    case kFloat: return 4;
    default: return 8;
  }
}
/// True for float32 and float64.
constexpr bool is_floating_point(ScalarType t) { return t == kFloat || t == kDouble; }
/// libtorch's name for the type: "Bool", "Long", "Float", "Double".
const char* to_string(ScalarType t);
/// Prints to_string(t).
std::ostream& operator<<(std::ostream& os, ScalarType t);

/// The ScalarType of a C++ element type.
template <class T> constexpr ScalarType scalar_type_of();
template <> constexpr ScalarType scalar_type_of<bool>() { return kBool; }
template <> constexpr ScalarType scalar_type_of<int64_t>() { return kLong; }
template <> constexpr ScalarType scalar_type_of<float>() { return kFloat; }
template <> constexpr ScalarType scalar_type_of<double>() { return kDouble; }

/// Calls f.template operator()<T>() with T the C++ type of `t`.
template <class F>
decltype(auto) visit_dtype(ScalarType t, F&& f) {
  switch (t) {
    case kBool: return f.template operator()<bool>();
    case kLong: return f.template operator()<int64_t>();
    case kFloat: return f.template operator()<float>();
    case kDouble: return f.template operator()<double>();
  }
  STRATA_INTERNAL_ASSERT(false);
}

/// Where a tensor's memory lives.
enum class DeviceType : int8_t { CPU, CUDA };
constexpr DeviceType kCPU = DeviceType::CPU;    ///< host memory
constexpr DeviceType kCUDA = DeviceType::CUDA;  ///< a CUDA device (needs STRATA_WITH_CUDA)

/// A device type and index, as in libtorch: Device(kCUDA, 1).
struct Device {
  DeviceType type = kCPU;  ///< CPU or CUDA
  int8_t index = 0;        ///< device ordinal; 0 for the CPU
  Device(DeviceType t = kCPU, int8_t i = 0) : type(t), index(i) {}
  bool is_cpu() const { return type == kCPU; }  ///< true for host memory
  bool operator==(const Device&) const = default;
};
/// Prints "cpu" or "cuda:N".
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace strata
