#pragma once
// A temporary folder that every rank of WORLD shares, for the distributed tests' checkpoints: rank 0 makes it and
// tells the others where it is; it is removed once every rank is done with it.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include <strata/distributed/collectives.h>

namespace strata::testing {

class SharedTempDir {
 public:
  /// Every rank of WORLD makes it together: rank 0 creates <temp>/<prefix>_XXXXXX.
  explicit SharedTempDir(const std::string& prefix)
      : path_((std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string()) {
    if (distributed::get_rank() == 0) {
      EXPECT_NE(mkdtemp(path_.data()), nullptr) << path_;
    }
    distributed::broadcast_object(path_, 0);
  }
  /// Waits for every rank, then rank 0 removes the folder.
  ~SharedTempDir() {
    distributed::barrier();
    if (distributed::get_rank() == 0) std::filesystem::remove_all(path_);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;

  const std::string& path() const { return path_; }  ///< the folder, the same on every rank

 private:
  std::string path_;
};

}  // namespace strata::testing
