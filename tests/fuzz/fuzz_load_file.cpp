// libFuzzer target: nn::load_file of arbitrary bytes returns the tensors or throws strata::Error; anything
// else (a crash, a sanitizer report, another exception escaping, a hang) is a bug. load_file reads a path,
// so the bytes go to a file of this process's own first.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "strata/nn/safetensors.h"

namespace {

const std::string& scratch_file() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("strata_fuzz_load_file_" + std::to_string(::getpid()))).string();
  return path;
}

bool write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool written = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && written;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!write_bytes(scratch_file(), data, size)) return 0;
  try {
    std::map<std::string, std::string> metadata;
    const strata::nn::StateDict tensors = strata::nn::load_file(scratch_file(), &metadata);
    for (const auto& [name, t] : tensors)
      if (t.numel() > 0) (void)t.flatten()[0].to(strata::kDouble).item<double>();  // the data is really there
  } catch (const strata::Error&) {
  }
  return 0;
}
