#pragma once
// What the CUDA test files share: seeded inputs, the CUDA copies of CPU tensors, the thresholds of
// the device tool's METHOD.md, and "this op gives on CUDA what it gives on the CPU".
//
//   EXPECT_TRUE(cuda_matches_cpu([](const tensor_list& in) { return tensor_list{in[0].exp()}; },
//                                {uniform({4, 5}, -2, 2)}));

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "../helpers.h"

namespace strata::testing {

/// A CPU tensor of values uniform in [lo, hi) from a private stream (never zeros, never the default generator's).
inline Tensor uniform(IntArrayRef sizes, double lo, double hi, ScalarType dt = kFloat, uint64_t seed = 1) {
  Generator gen(seed);
  return (rand(sizes, kDouble, &gen) * (hi - lo) + lo).to(dt);
}
/// A CPU tensor of standard-normal values from a private stream.
inline Tensor normal(IntArrayRef sizes, ScalarType dt = kFloat, uint64_t seed = 1) {
  Generator gen(seed);
  return randn(sizes, kDouble, &gen).to(dt);
}
/// A CPU int64 tensor uniform in [0, high) from a private stream.
inline Tensor indices(IntArrayRef sizes, int64_t high, uint64_t seed = 1) {
  Generator gen(seed);
  return randint(high, sizes, kLong, &gen);
}

/// The normalized_error bound for one result of dtype dt computed in dt on both devices (METHOD.md):
/// float32 arithmetic lands far under 1e-3 and in practice near 1e-7, float64 near 1e-16, the 16-bit
/// floats between 1e-3 and 1e-2. Integers and bools must match exactly (bound 0).
inline double parity_tolerance(ScalarType dt) {
  switch (dt) {
    case kDouble:
      return 1e-12;
    case kFloat:
      return 1e-5;
    case kHalf:
    case kBFloat16:
      return 1e-2;
    default:
      return 0;
  }
}

/// CUDA copies of CPU tensors (undefined ones stay undefined); a leaf that requires grad gives a CUDA leaf that does.
inline tensor_list to_gpu(const tensor_list& xs) {
  tensor_list out;
  for (const Tensor& x : xs) {
    if (!x.defined()) {
      out.push_back(x);
      continue;
    }
    Tensor y = x.detach().to(gpu(), /*non_blocking=*/false, /*copy=*/true);
    if (x.requires_grad()) y.requires_grad_(true);
    out.push_back(y);
  }
  return out;
}

/// Fills the GPU's free memory pool with NaN bytes: what the allocator hands out next holds NaN (float),
/// so an output element a kernel never writes shows up as NaN (normalized_error gives +inf) instead of
/// as a stale right answer.
inline void poison_gpu_pool(int64_t bytes = int64_t{64} << 20) {
  full({bytes / 4}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(kFloat).device(gpu()));
}

/// `out` computed on cuda:0 against `ref` from the CPU: same dtype and sizes, and normalized_error(out, ref)
/// at most `tol` (a negative tol takes parity_tolerance of the dtype; integers and bools compare bit for bit).
inline ::testing::AssertionResult matches(const Tensor& out, const Tensor& ref, double tol = -1) {
  if (out.defined() != ref.defined())
    return ::testing::AssertionFailure() << "one result is undefined: cuda " << out.defined() << ", cpu "
                                         << ref.defined();
  if (!out.defined()) return ::testing::AssertionSuccess();
  if (out.device() != gpu()) return ::testing::AssertionFailure() << "result is on " << out.device() << ", not cuda:0";
  if (out.dtype() != ref.dtype())
    return ::testing::AssertionFailure() << "dtype " << out.dtype() << " on cuda vs " << ref.dtype() << " on cpu";
  if (out.sizes() != ref.sizes())
    return ::testing::AssertionFailure() << "sizes " << out.sizes() << " on cuda vs " << ref.sizes() << " on cpu";
  if (!ref.is_floating_point()) {
    ::testing::AssertionResult same = same_tensor(out.cpu(), ref);  // bytes: int64 beyond 2^53 too
    if (same) return same;
    const std::vector<double> o = values(out), r = values(ref);
    for (size_t i = 0; i < o.size(); ++i)
      if (o[i] != r[i]) return same << ": element " << i << " is " << o[i] << " on cuda, " << r[i] << " on cpu";
    return same;
  }
  const double bound = tol < 0 ? parity_tolerance(ref.dtype()) : tol;
  const double err = normalized_error(out, ref);
  if (err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "normalized error " << err << " > " << bound << " (" << ref.dtype()
                                       << ", sizes " << ref.sizes() << ")";
}

/// A function of several tensors to several tensors, run once with CPU inputs and once with CUDA ones.
using OpFn = std::function<tensor_list(const tensor_list&)>;

/// Runs fn on `inputs` (CPU) and on their CUDA copies and compares every output with `matches`.
inline ::testing::AssertionResult cuda_matches_cpu(const OpFn& fn, const tensor_list& inputs, double tol = -1) {
  const tensor_list ref = fn(inputs);
  poison_gpu_pool();
  const tensor_list out = fn(to_gpu(inputs));
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << out.size() << " outputs on cuda vs " << ref.size() << " on cpu";
  for (size_t i = 0; i < out.size(); ++i)
    if (auto same = matches(out[i], ref[i], tol); !same) return same << " (output " << i << ")";
  return ::testing::AssertionSuccess();
}

/// Restores cuda::allow_tf32() when the scope ends, whatever a test did to it.
class AllowTf32Guard {
 public:
  explicit AllowTf32Guard(bool allow) : saved_(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~AllowTf32Guard() { cuda::set_allow_tf32(saved_); }
  AllowTf32Guard(const AllowTf32Guard&) = delete;
  AllowTf32Guard& operator=(const AllowTf32Guard&) = delete;

 private:
  bool saved_;
};

}  // namespace strata::testing
