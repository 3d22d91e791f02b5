#pragma once
// Eigen for the CPU kernels (internal; nothing above tensor/cpu/ includes Eigen).
// GCC 12 reports false (maybe-)uninitialized warnings inside Eigen's AVX-512 intrinsics at the
// places they are inlined, so they are switched off for the files that include this header.

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>

#include <type_traits>

namespace strata::cpu {

/// n contiguous elements of T as a writable Eigen array, for the SIMD expressions of the kernels.
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
/// n contiguous elements of T as a read-only Eigen array.
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
/// A kernel's own array of n elements (a thread's scratch row).
template <class T>
using Scratch = Eigen::Array<T, Eigen::Dynamic, 1>;

/// exp(a) through Eigen's SIMD exp, but 0 below the smallest normal result: there Eigen 3.4 returns 2^-128 for
/// float (2^-1022 for double) whatever the input, even -inf, where a masked weight must be exactly 0. The factor
/// that is 0 below and 1 above is arithmetic because Eigen 3.4's select() does not vectorise.
template <class Derived>
auto exp_or_zero(const Eigen::ArrayBase<Derived>& a) {
  using T = typename Derived::Scalar;
  const T lowest = std::is_same_v<T, float> ? T(-87.33654475f) : T(-708.3964185322641);  // log of the smallest normal
  return a.exp() * ((a - lowest) * T(1e30)).max(T(0)).min(T(1));
}

}  // namespace strata::cpu
