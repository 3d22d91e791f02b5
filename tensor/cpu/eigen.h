#pragma once
// Eigen for the CPU kernels (internal; nothing above tensor/cpu/ includes Eigen).
// GCC 12 reports false (maybe-)uninitialized warnings inside Eigen's AVX-512 intrinsics at the
// places they are inlined, so they are switched off for the files that include this header.

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>

namespace strata::cpu {

/// n contiguous elements of T as a writable Eigen array, for the SIMD expressions of the kernels.
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
/// n contiguous elements of T as a read-only Eigen array.
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace strata::cpu
