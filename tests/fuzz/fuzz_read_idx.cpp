// libFuzzer target: data::read_idx of arbitrary bytes, plain or gzip-compressed, into its natural dtype or
// a requested one, returns a tensor or throws strata::Error; anything else is a bug. The first byte picks
// the variant: bit 0 the encoding (plain bytes, or the rest gzip-compressed so the IDX parser sees them
// through zlib), bits 1-3 the dtype. Raw corrupt gzip streams come from the plain variant, since read_idx
// sniffs the gzip magic itself.

#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "strata/data/idx.h"

namespace {

const std::string& scratch_file() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("strata_fuzz_read_idx_" + std::to_string(::getpid()))).string();
  return path;
}

bool write_bytes(const std::string& path, const uint8_t* data, size_t size, bool gzip) {
  gzFile f = gzopen(path.c_str(), gzip ? "wb" : "wbT");  // "T": written as is, without compression
  if (!f) return false;
  const bool written = size == 0 || gzwrite(f, data, static_cast<unsigned>(size)) == static_cast<int>(size);
  return gzclose(f) == Z_OK && written;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1u << 20)) return 0;
  const uint8_t variant = data[0];
  static const std::optional<strata::ScalarType> kDtypes[] = {std::nullopt,   strata::kLong,   strata::kUInt8,
                                                              strata::kFloat, strata::kDouble, strata::kInt,
                                                              strata::kBool,  strata::kHalf};
  if (!write_bytes(scratch_file(), data + 1, size - 1, variant & 1)) return 0;
  try {
    const strata::Tensor t = strata::data::read_idx(scratch_file(), kDtypes[(variant >> 1) & 7]);
    if (t.numel() > 0) (void)t.flatten()[0].to(strata::kDouble).item<double>();
  } catch (const strata::Error&) {
  }
  return 0;
}
