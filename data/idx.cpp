// The IDX reader. zlib's gzread reads gzip streams and passes plain files through unchanged, so
// one path serves both.
//
// Note [no trust in the header]: a corrupt header may declare any shape, up to terabytes. The
// header is checked for overflow first, then the data buffer grows only with bytes the file
// really delivers (reading stops one byte past the declared size, to detect trailing data), so a
// lying header costs memory in proportion to the real data, never an allocation of the declared size.

#include "strata/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "strata/tensor/creation.h"

namespace strata::data {
namespace {

constexpr int64_t kChunk = int64_t{1} << 20;  // bytes per gzread call and per growth of the data buffer

struct GzClose {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzClose>;

std::string hex(uint32_t value, int digits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%0*X", digits, value);
  return text;
}

[[noreturn]] void throw_gzip_error(const std::string& path, std::string message, int errnum) {
  // zlib's messages start with the path; ours does already.
  if (message.starts_with(path + ": ")) message.erase(0, path.size() + 2);
  detail::throw_error(__FILE__, __LINE__, "read_idx: ", path, ": ", message,
                      errnum == Z_BUF_ERROR    ? " (the gzip stream is truncated)"
                      : errnum == Z_DATA_ERROR ? " (the gzip stream is corrupt)"
                                               : "");
}

/// Reads up to n bytes into dst; fewer only at the end of the data. Throws on a read or gzip error.
int64_t read_some(gzFile f, unsigned char* dst, int64_t n, const std::string& path) {
  int64_t done = 0;
  while (done < n) {
    const int got = gzread(f, dst + done, static_cast<unsigned>(std::min(n - done, kChunk)));
    int errnum = Z_OK;
    const char* message = gzerror(f, &errnum);
    if (got < 0 || errnum != Z_OK) throw_gzip_error(path, message, errnum);
    if (got == 0) break;
    done += got;
  }
  return done;
}

/// Calls f.template operator()<S>(name) with S the C++ element type of IDX type `code`.
template <class F>
Tensor visit_idx_type(uint8_t code, const std::string& path, F&& f) {
  switch (code) {
    case 0x08:
      return f.template operator()<uint8_t>("ubyte");
    case 0x09:
      return f.template operator()<int8_t>("byte");
    case 0x0B:
      return f.template operator()<int16_t>("short");
    case 0x0C:
      return f.template operator()<int32_t>("int");
    case 0x0D:
      return f.template operator()<float>("float");
    case 0x0E:
      return f.template operator()<double>("double");
  }
  detail::throw_error(__FILE__, __LINE__, "read_idx: ", path, ": unknown element type code ", hex(code, 2),
                      " in the magic number (IDX has 0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int, 0x0D float, "
                      "0x0E double)");
}

/// The unsigned integer as wide as S.
template <class S>
using Bits = std::conditional_t<
    sizeof(S) == 1, uint8_t,
    std::conditional_t<sizeof(S) == 2, uint16_t, std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>>;

/// n big-endian elements of type S at src, converted to T at dst.
template <class S, class T>
void decode(const unsigned char* src, T* dst, int64_t n, const std::string& path) {
  for (int64_t i = 0; i < n; ++i, src += sizeof(S)) {
    Bits<S> bits = 0;
    for (size_t k = 0; k < sizeof(S); ++k) bits = static_cast<Bits<S>>((uint64_t{bits} << 8) | src[k]);
    const S value = std::bit_cast<S>(bits);
    // element_cast takes a float into an integer type through int64, which NaN, infinities and values past
    // int64's range leave undefined.
    if constexpr (std::is_floating_point_v<S> && std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      constexpr double kTwo63 = 9223372036854775808.0;
      if (!(value >= -kTwo63 && value < kTwo63))
        detail::throw_error(__FILE__, __LINE__, "read_idx: ", path, ": element ", i, " (in row-major order) is ", value,
                            ", which ", scalar_type_of<T>(), " cannot hold; read the file as a floating dtype");
    }
    dst[i] = element_cast<T>(value);
  }
}

}  // namespace

Tensor read_idx(const std::string& path, std::optional<ScalarType> dtype) {
  GzFile file(gzopen(path.c_str(), "rb"));
  STRATA_CHECK(file, "read_idx: cannot open ", path, ": ", std::strerror(errno));
  gzbuffer(file.get(), 1 << 18);

  unsigned char magic[4];
  const int64_t magic_bytes = read_some(file.get(), magic, 4, path);
  STRATA_CHECK(magic_bytes == 4, "read_idx: ", path,
               ": truncated header: the magic number needs 4 bytes, the file "
               "holds ",
               magic_bytes);
  const uint32_t magic_number = uint32_t{magic[0]} << 24 | uint32_t{magic[1]} << 16 | magic[2] << 8 | magic[3];
  STRATA_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: ", path, ": bad magic number ", hex(magic_number, 8),
               " (an IDX file starts with two zero bytes, the element type code and the number of dims)");
  const int ndims = magic[3];
  STRATA_CHECK(ndims > 0, "read_idx: ", path, ": the magic number ", hex(magic_number, 8), " declares 0 dims");

  return visit_idx_type(magic[2], path, [&]<class S>(const char* type_name) {
    unsigned char size_bytes[4 * 255];
    const int64_t size_count = read_some(file.get(), size_bytes, 4 * ndims, path);
    STRATA_CHECK(size_count == 4 * ndims, "read_idx: ", path, ": truncated header: ", ndims, " dims need ", 4 * ndims,
                 " bytes of sizes, the file holds ", size_count);
    DimVector sizes;
    int64_t numel = 1;
    bool overflow = false;
    for (int d = 0; d < ndims; ++d) {
      const unsigned char* b = size_bytes + 4 * d;
      sizes.push_back(int64_t{b[0]} << 24 | int64_t{b[1]} << 16 | int64_t{b[2]} << 8 | b[3]);
      overflow = overflow || __builtin_mul_overflow(numel, sizes.back(), &numel);
    }
    // Converted to int64 or float64, every element takes 8 bytes.
    STRATA_CHECK(!overflow && numel <= std::numeric_limits<int64_t>::max() / 8, "read_idx: ", path,
                 ": the header declares shape ", sizes, ", too many elements for a tensor");

    // Note [no trust in the header].
    const int64_t expected = numel * static_cast<int64_t>(sizeof(S));
    std::vector<unsigned char> bytes;
    int64_t have = 0;
    for (int64_t want = std::min(expected + 1, kChunk); want > 0; want = std::min(expected + 1 - have, kChunk)) {
      bytes.resize(have + want);
      const int64_t got = read_some(file.get(), bytes.data() + have, want, path);
      have += got;
      if (got < want) break;
    }
    STRATA_CHECK(have >= expected, "read_idx: ", path, ": truncated: shape ", sizes, " of ", type_name, " needs ",
                 expected, " data bytes, the file holds ", have);
    int64_t trailing = have - expected;
    if (trailing > 0) {
      std::vector<unsigned char> scratch(kChunk);
      while (const int64_t got = read_some(file.get(), scratch.data(), kChunk, path)) trailing += got;
    }
    STRATA_CHECK(trailing == 0, "read_idx: ", path, ": ", trailing, " trailing bytes after the ", expected,
                 " data bytes that shape ", sizes, " of ", type_name, " needs");

    ScalarType natural = kLong;
    if constexpr (std::is_floating_point_v<S>) natural = scalar_type_of<S>();
    Tensor out = empty(sizes, dtype.value_or(natural));
    visit_dtype(out.dtype(), [&]<class T>() { decode<S>(bytes.data(), out.data_ptr<T>(), numel, path); });
    return out;
  });
}

}  // namespace strata::data
