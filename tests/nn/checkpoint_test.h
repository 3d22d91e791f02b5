#pragma once
// Shared by the checkpoint tests (test_safetensors.cpp, test_serialize.cpp): a fixture that gives each test a
// fresh folder for its files, and an exact comparison of state dicts.
// (tests/data/test_data.cpp has its own folder fixture; both could move to tests/helpers.h.)
//
//   class Checkpoints : public strata::testing::TempFolderTest {};
//   TEST_F(Checkpoints, RoundTrip) {
//     nn::save_file(dict, file("model.safetensors"));
//     EXPECT_TRUE(same_state(nn::load_file(file("model.safetensors")), dict));
//   }

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "strata/nn/module.h"

namespace strata::testing {

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

}  // namespace strata::testing
