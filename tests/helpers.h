#pragma once
// Shared test helpers: value comparison, error-message assertions, gradcheck, and a fixture with a
// fresh folder per test.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/strata.h>

namespace strata::testing {

/// The elements of t in row-major order as doubles, read directly through its strides (a GPU tensor is copied first).
inline std::vector<double> values(const Tensor& t_any) {
  const Tensor t = t_any.is_cpu() ? t_any : t_any.to(Device(kCPU));
  std::vector<double> out;
  out.reserve(t.numel());
  DimVector idx(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.stride(d);
    visit_all_dtypes(t.dtype(), [&]<class T>() {
      out.push_back(static_cast<double>(static_cast<const T*>(t.impl().storage->data)[off]));
    });
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// Same sizes and every |a - b| <= atol + rtol * |b|; the failure message shows the first mismatch.
inline ::testing::AssertionResult allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8) {
  if (a.sizes() != b.sizes()) {
    std::ostringstream os;
    os << "shapes differ: " << a.sizes() << " vs " << b.sizes();
    return ::testing::AssertionFailure() << os.str();
  }
  auto va = values(a), vb = values(b);
  for (size_t i = 0; i < va.size(); ++i) {
    bool both_nan = std::isnan(va[i]) && std::isnan(vb[i]);
    if (!both_nan && !(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  }
  return ::testing::AssertionSuccess();
}

/// Checks t's values equal `expected` (row-major) within tolerance, and optionally its sizes.
inline ::testing::AssertionResult values_are(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  auto v = values(t);
  if (v.size() != expected.size())
    return ::testing::AssertionFailure() << "numel " << v.size() << " vs expected " << expected.size();
  for (size_t i = 0; i < v.size(); ++i)
    if (!(std::abs(v[i] - expected[i]) <= tol * (1 + std::abs(expected[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << v[i] << " vs expected " << expected[i];
  return ::testing::AssertionSuccess();
}

/// Options for a float64 leaf that requires grad.
/// The GPU this process uses: the current CUDA device (distributed::init() makes it local rank % device count).
inline Device gpu() { return cuda::device(); }

inline TensorOptions f64() { return TensorOptions().dtype(kFloat64).requires_grad(true); }
/// A float64 leaf of standard-normal values.
inline Tensor leaf(IntArrayRef sizes) { return randn(sizes, kFloat64).requires_grad_(true); }
/// A float64 leaf with values uniform in [lo, hi), away from kinks and poles.
inline Tensor leaf_in(IntArrayRef sizes, double lo, double hi) {
  return (rand(sizes, kFloat64) * (hi - lo) + lo).requires_grad_(true);
}

/// Base fixture: dir_ is empty when the test starts and gone when it ends.
class TempFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// The path of `name` in the folder.
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  /// The names in the folder, sorted.
  std::vector<std::string> folder_contents() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::filesystem::path dir_;
};

/// Same dtype, sizes and values, bit for bit.
inline ::testing::AssertionResult same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "dtype " << a.dtype() << " vs " << b.dtype();
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << "sizes " << a.sizes() << " vs " << b.sizes();
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  if (a.nbytes() > 0 && std::memcmp(ca.data_ptr(), cb.data_ptr(), a.nbytes()) != 0)
    return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

/// The same names, each with the same tensor (same_tensor).
inline ::testing::AssertionResult same_state(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " tensors vs " << b.size();
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return ::testing::AssertionFailure() << "'" << name << "' is missing";
    if (auto same = same_tensor(t, it->second); !same) return same << " for '" << name << "'";
  }
  return ::testing::AssertionSuccess();
}

/// ||out - ref|| / ||ref|| over all elements, in double on the host (the device tool's METHOD.md measure);
/// NaN or inf anywhere in out gives +inf, so a NaN never passes a threshold.
inline double normalized_error(const Tensor& out, const Tensor& ref) {
  const std::vector<double> o = values(out), r = values(ref);
  if (o.size() != r.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (!std::isfinite(o[i]) && !(std::isinf(o[i]) && o[i] == r[i])) return INFINITY;
    if (o[i] != r[i]) diff += (o[i] - r[i]) * (o[i] - r[i]);
    if (std::isfinite(r[i])) norm += r[i] * r[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

}  // namespace strata::testing

namespace strata {
using testing::f64;
using testing::leaf;
using testing::leaf_in;
}  // namespace strata

/// Skips a GPU test with the reason when no CUDA device is visible (CTest reports it as skipped:
/// tests/CMakeLists.txt matches the message). Use as the first statement of every test that needs a GPU.
#define STRATA_REQUIRE_CUDA()          \
  if (!::strata::cuda::is_available()) \
  GTEST_SKIP() << "no CUDA device is visible (strata::cuda::device_count() == 0): GPU test skipped"

/// Expects a and b to have equal sizes and close values: EXPECT_ALLCLOSE(a, b) or with (rtol, atol).
#define EXPECT_ALLCLOSE(a, b, ...) EXPECT_TRUE(::strata::testing::allclose((a), (b), ##__VA_ARGS__))
/// Expects t's row-major values to equal a braced list: EXPECT_VALUES(t, {1, 2, 3}).
#define EXPECT_VALUES(t, ...) EXPECT_TRUE(::strata::testing::values_are((t), std::vector<double> __VA_ARGS__))

/// Expects `stmt` to throw strata::Error whose message contains `substr`.
#define EXPECT_THROW_MSG(stmt, substr)                                                 \
  do {                                                                                 \
    try {                                                                              \
      stmt;                                                                            \
      ADD_FAILURE() << "expected strata::Error containing \"" << (substr) << "\"";     \
    } catch (const ::strata::Error& e) {                                               \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos)                 \
          << "message \"" << e.what() << "\" does not contain \"" << (substr) << "\""; \
    }                                                                                  \
  } while (0)

/// Expects gradcheck (float64 central differences) to pass for fn over inputs.
#define EXPECT_GRADCHECK(fn, ...)                                  \
  do {                                                             \
    try {                                                          \
      EXPECT_TRUE(::strata::autograd::gradcheck(fn, __VA_ARGS__)); \
    } catch (const ::strata::Error& e) {                           \
      ADD_FAILURE() << e.what();                                   \
    }                                                              \
  } while (0)

/// Expects gradgradcheck to pass for fn over inputs.
#define EXPECT_GRADGRADCHECK(fn, ...)                                  \
  do {                                                                 \
    try {                                                              \
      EXPECT_TRUE(::strata::autograd::gradgradcheck(fn, __VA_ARGS__)); \
    } catch (const ::strata::Error& e) {                               \
      ADD_FAILURE() << e.what();                                       \
    }                                                                  \
  } while (0)
