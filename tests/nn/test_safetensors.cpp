#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "strata/nn/safetensors.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::same_state;

class Safetensors : public strata::testing::TempFolderTest {};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

// A hand-made file: the header length (the true one unless given), the header text, the data bytes.
std::string raw_file(const std::string& header, const std::string& data = "", std::optional<uint64_t> length = {}) {
  return le64(length.value_or(header.size())) + header + data;
}

// The start of a load_file error: the file, then the tensor or __metadata__ that `key` names ("" for neither).
std::string where(const std::string& path, const std::string& key) {
  const std::string file = "load_file: '" + path + "': ";
  if (key.empty()) return file;
  return file + (key == "__metadata__" ? key + ": " : "tensor '" + key + "': ");
}

// The tensors tests/nn/safetensors_interop.py checks and writes (its TENSORS), some built non-contiguous.
StateDict interop_tensors() {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"f32",
       tensor({-1.0, -0.0, inf, -inf, nan, 1.5}, kFloat).reshape({2, 3}).t().contiguous().t()},  // non-contiguous
      {"f64", tensor({1.0 / 3, -2.5, 1e300}, kFloat64)},
      {"scalar", scalar_tensor(2.75, kFloat64)},
      {"i64", tensor({-(int64_t(1) << 40), int64_t(-1), int64_t(0), (int64_t(1) << 62) + 5}).reshape({2, 2})},
      {"i32", tensor({std::numeric_limits<int32_t>::min(), -1, 7, std::numeric_limits<int32_t>::max()}, kInt32)
                  .reshape({2, 2})},
      {"i16", tensor({-32768, 300, 32767}, kInt16)},
      {"i8", tensor({-128, -1, 5, 0, 127, 9}, kInt8).reshape({3, 2}).t()},  // non-contiguous
      {"u8", tensor({0, 1, 200, 255}, kUInt8)},
      {"mask", tensor({true, false, false, true})},
      {"empty", zeros({0, 3})},
      {"f16",
       tensor({1.5, -2.0, 65504.0, std::ldexp(1.0, -24), -0.333251953125, -0.0}, kFloat64).to(kHalf).reshape({2, 3})},
      {"bf16", tensor({1.0, std::ldexp(1.0, 100), -2.5, -std::ldexp(1.0, -100)}, kFloat64)  // non-contiguous
                   .to(kBFloat16)
                   .reshape({2, 2})
                   .t()}};
}

TEST_F(Safetensors, RoundTripsEveryDtypeShapeAndLayout) {
  manual_seed(0);
  Tensor wide = randn({4, 6}, kFloat64);
  const StateDict saved = {
      {"bool", tensor({true, false, true, true, false})},
      {"long", arange(-3, 9, 1, kLong).reshape({3, 4})},
      {"float", randn({2, 3, 4})},
      {"double", randn({5}, kFloat64)},
      {"scalar_float", scalar_tensor(-1.5)},
      {"scalar_long", scalar_tensor(7, kLong)},
      {"scalar_bool", tensor({true}).reshape({})},
      {"empty", zeros({0})},
      {"empty_3d", zeros({2, 0, 3}, kLong)},
      {"transposed", randn({3, 4}).t()},
      {"strided", wide.slice(1, 0, 6, 2)},
      {"offset_row", wide[2]},
      {"expanded", tensor({1.0, 2.0}).unsqueeze(0).expand({3, 2})},
      {"requires_grad", randn({3, 2}, requires_grad()).t()},
      {"half", randn({3, 5}).to(kHalf)},
      {"bfloat16_strided", randn({4, 6}).to(kBFloat16).slice(1, 1, 6, 2)},
      {"scalar_half", scalar_tensor(-0.5).to(kHalf)},
      {"uint8", tensor({0, 1, 200, 255}, kUInt8)},
      {"int8_strided", tensor({-128, 5, 127, -1, 0, 9}, kInt8).reshape({2, 3}).t()},
      {"int16", tensor({-32768, 300, 32767}, kInt16)},
      {"int32", arange(-5, 7, 1, kInt32).reshape({3, 4})},
      {"scalar_int32", scalar_tensor(-7, kInt32)},
  };
  const std::string path = file("all.safetensors");
  save_file(saved, path);
  const StateDict loaded = load_file(path);
  EXPECT_TRUE(same_state(saved, loaded));
  for (const auto& [name, t] : loaded) {
    EXPECT_TRUE(t.is_contiguous()) << name;
    EXPECT_FALSE(t.requires_grad()) << name;
  }
  EXPECT_EQ(folder_contents(), std::vector<std::string>{"all.safetensors"});  // no temporary file left

  save_file({}, path);
  EXPECT_TRUE(load_file(path).empty());
}

// A file as Python's safetensors writes one with the integer dtypes (reference order I32 > I16 > I8 > U8, by
// alignment): each loads with its libtorch dtype and values.
TEST_F(Safetensors, LoadsTheIntegerDtypesOfAReferenceFile) {
  const std::string path = file("ints.safetensors");
  save_file({{"u", tensor({7, 255}, kUInt8)},
             {"i", tensor({-1, 2}, kInt32)},
             {"c", tensor({-2, 3}, kInt8)},
             {"s", tensor({-3, 4}, kInt16)}},
            path);
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(bytes.substr(8, bytes.find("}}") + 2 - 8), R"({"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                                                       R"("s":{"dtype":"I16","shape":[2],"data_offsets":[8,12]},)"
                                                       R"("c":{"dtype":"I8","shape":[2],"data_offsets":[12,14]},)"
                                                       R"("u":{"dtype":"U8","shape":[2],"data_offsets":[14,16]}})");
  const std::string data =
      std::string("\xff\xff\xff\xff\x02\0\0\0", 8) + std::string("\xfd\xff\x04\0", 4) + "\xfe\x03\x07\xff";
  EXPECT_EQ(bytes.substr(bytes.size() - 16), data);
  const StateDict loaded = load_file(path);
  EXPECT_EQ(loaded.at("u").dtype(), kUInt8);
  EXPECT_EQ(loaded.at("c").dtype(), kInt8);
  EXPECT_EQ(loaded.at("s").dtype(), kInt16);
  EXPECT_EQ(loaded.at("i").dtype(), kInt32);
  EXPECT_EQ(loaded.at("u")[1].item<int>(), 255);
  EXPECT_EQ(loaded.at("c")[0].item<int>(), -2);
}

// F16 and BF16 travel as their bits: infinities, NaN, subnormals and negative zero come back unchanged.
TEST_F(Safetensors, SixteenBitFloatsRoundTripBitForBit) {
  const std::vector<double> special = {0.0, -0.0, INFINITY, -INFINITY, NAN, std::ldexp(1.0, -24), -65504.0, 0.1};
  const StateDict saved = {{"h", tensor(special, kFloat64).to(kHalf)}, {"b", tensor(special, kFloat64).to(kBFloat16)}};
  const std::string path = file("bits.safetensors");
  save_file(saved, path);
  const StateDict loaded = load_file(path);
  EXPECT_TRUE(same_state(saved, loaded));
  EXPECT_EQ(loaded.at("h").dtype(), kHalf);
  EXPECT_EQ(loaded.at("b").dtype(), kBFloat16);
  const std::string bytes = read_bytes(path);
  const uint16_t half_inf = 0x7c00, bf16_inf = 0x7f80;  // the data area ends with h (F16 sorts after BF16)
  EXPECT_EQ(std::memcmp(bytes.data() + bytes.size() - 16 + 2 * 2, &half_inf, 2), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + bytes.size() - 32 + 2 * 2, &bf16_inf, 2), 0);
}

TEST_F(Safetensors, MetadataRoundTrips) {
  const std::string path = file("meta.safetensors");
  const std::map<std::string, std::string> metadata = {
      {"epoch", "3"}, {"format", "pt"}, {"empty", ""}, {"quote\"and\\slash", "line\nbreak \xc3\xa9"}};
  save_file({{"w", ones({2})}}, path, metadata);
  std::map<std::string, std::string> read{{"stale", "entry"}};
  EXPECT_TRUE(same_state(load_file(path, &read), {{"w", ones({2})}}));
  EXPECT_EQ(read, metadata);

  save_file({{"w", ones({2})}}, path);
  load_file(path, &read);
  EXPECT_TRUE(read.empty());
  EXPECT_EQ(read_bytes(path).find("__metadata__"), std::string::npos);  // none written, as the reference writer
}

// Byte-exact against the reference implementation's own serialization tests.
TEST_F(Safetensors, WritesWhatTheReferenceWriterWrites) {
  const std::string path = file("ref.safetensors");
  save_file({}, path);
  EXPECT_EQ(read_bytes(path), le64(8) + "{}      ");

  save_file({}, path, {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(path), le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");

  save_file({{"attn0", arange(6, kFloat).reshape({1, 1, 2, 3})}}, path);
  std::string data(24, '\0');
  std::memcpy(data.data(), arange(6, kFloat).data_ptr(), 24);
  EXPECT_EQ(read_bytes(path),
            le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " + data);

  // Laid out by dtype alignment (the reference order I64, F64, F32, BF16, F16, BOOL), then by name.
  save_file({{"b", ones({1})},
             {"a", tensor({true})},
             {"c", ones({1}, kLong)},
             {"d", ones({1}, kFloat64)},
             {"a2", ones({1})},
             {"e", ones({1}).to(kHalf)},
             {"f", ones({1}).to(kBFloat16)}},
            path);
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(bytes.substr(8, bytes.find("}}") + 2 - 8), R"({"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                                                       R"("d":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},)"
                                                       R"("a2":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
                                                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[20,24]},)"
                                                       R"("f":{"dtype":"BF16","shape":[1],"data_offsets":[24,26]},)"
                                                       R"("e":{"dtype":"F16","shape":[1],"data_offsets":[26,28]},)"
                                                       R"("a":{"dtype":"BOOL","shape":[1],"data_offsets":[28,29]}})");
}

TEST_F(Safetensors, SaveChecksItsArguments) {
  const std::string path = file("bad.safetensors");
  EXPECT_THROW_MSG(save_file({{"__metadata__", ones({1})}}, path),
                   "save_file: '" + path + "': __metadata__: the name is reserved");
  EXPECT_THROW_MSG(save_file({{"w", Tensor()}}, path),
                   "save_file: '" + path + "': tensor 'w': the tensor is undefined");
  EXPECT_THROW_MSG(save_file({{"w\xff", ones({1})}}, path), "save_file: '" + path + "': a tensor name or metadata");
  EXPECT_THROW_MSG(save_file({}, path, {{"k", "\xc3"}}), "is not valid UTF-8");
  const std::string nowhere = file("missing/x.safetensors");
  EXPECT_THROW_MSG(save_file({{"w", ones({1})}}, nowhere),
                   "save_file: '" + nowhere + "': cannot create the temporary file '" + nowhere + ".tmp.");
  EXPECT_TRUE(folder_contents().empty());
}

TEST_F(Safetensors, EveryTruncationThrows) {
  const std::string whole = file("whole.safetensors"), cut = file("cut.safetensors");
  save_file(interop_tensors(), whole, {{"epoch", "1"}});
  const std::string bytes = read_bytes(whole);
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(cut, bytes.substr(0, n));
    SCOPED_TRACE("truncated to " + std::to_string(n) + " bytes");
    EXPECT_THROW_MSG(load_file(cut), "load_file: '" + cut + "': ");
  }
}

// A damaged file either loads or throws strata::Error; a crash, another exception or (under ASan) a read out of
// bounds fails the test.
TEST_F(Safetensors, BitFlipsLoadOrThrow) {
  const std::string whole = file("whole.safetensors"), bad = file("bad.safetensors");
  save_file(interop_tensors(), whole, {{"epoch", "1"}});
  const std::string bytes = read_bytes(whole);
  int loaded = 0, rejected = 0;
  auto attempt = [&](const std::string& damaged) {
    write_bytes(bad, damaged);
    try {
      load_file(bad);
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    }
  };
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {  // every single-bit flip
    std::string damaged = bytes;
    damaged[bit / 8] = static_cast<char>(damaged[bit / 8] ^ (1 << (bit % 8)));
    attempt(damaged);
  }
  for (unsigned seed = 0; seed < 500; ++seed) {  // several flips and overwritten bytes at once
    std::mt19937 rng(seed);
    std::string damaged = bytes;
    const int flips = 2 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % damaged.size();
      damaged[at] = static_cast<char>(seed % 2 ? rng() : damaged[at] ^ (1 << (rng() % 8)));
    }
    attempt(damaged);
  }
  EXPECT_GT(loaded, 0);    // flips in the data area only change values
  EXPECT_GT(rejected, 0);  // flips in the header are caught
}

// A file load_file refuses, one per validation rule: its bytes, what the message names after the file (a tensor,
// __metadata__ or "" for neither, as where()), the message, and, where Hugging Face's library loads the file all the
// same, why the two differ (SafetensorsLibrary.RejectsWhatStrataRejects holds the library to this list).
struct RefusedFile {
  std::string bytes, key, message, library_loads_it_because = {};
};

std::vector<RefusedFile> refused_files() {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string duplicate =
      "the library reads the header into a map, which keeps the last of two equal keys; "
      "strata refuses a file that could mean two things";
  return {
      {"abc", "", "the file has 3 bytes, fewer than the 8-byte header length"},
      {raw_file("{}", "", 1000), "", "the header length 1000 runs past the end of the file (10 bytes)"},
      {raw_file("{}", "", 200'000'000), "", "the header length 200000000 exceeds the limit of 100000000 bytes"},
      {raw_file(R"({"w":)"), "", "the header is not valid JSON: "},
      {raw_file("{\"w\xff\":1}"), "", "the header is not valid JSON: "},
      // A number past double's range is nlohmann's out_of_range, not a parse error: in a shape, an offset or the
      // metadata, it is a strata::Error all the same (issue 16).
      {raw_file(R"({"w":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", std::string(4, '\0')), "",
       "the header is not valid JSON: "},
      {raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,1e400]}})", std::string(4, '\0')), "",
       "the header is not valid JSON: "},
      {raw_file(R"({"__metadata__":{"a":"b"},"x":-1e400})", std::string(4, '\0')), "",
       "the header is not valid JSON: "},
      {raw_file("[1,2]"), "", "the header must be a JSON object, got an array of 2"},
      {raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})" + std::string(2, '\0'), "\x05"), "",
       "the header has a NUL byte at offset 53 (JSON holds none, and only spaces may pad the header)"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcdefgh"), "",
       "the last 4 of the 8 bytes of the data area belong to no tensor"},
      {raw_file(R"({"w":3})"), "w", "the entry must be an object with dtype, shape and data_offsets, got 3"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2]}})"), "w", "missing field 'data_offsets'"},
      {raw_file("{\"w\":{" + f32x2 + R"(,"offsets":[0,8]}})", "12345678"), "w", "unknown field 'offsets'",
       "the library ignores fields it does not know; strata refuses them, so that a misspelt field is not passed over"},
      {raw_file(R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", "12345678"), "w",
       "dtype must be a string, got 4"},
      {raw_file(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", "12345678"), "w", "unknown dtype 'Q7'"},
      {raw_file(R"({"w":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", "12345678"), "w",
       "dtype U16 is not supported by strata (it holds BOOL, U8, I8, I16, I32, I64, F16, BF16, F32 and F64)",
       "the library holds every safetensors dtype; strata has no U16, U32, U64, C64 or 8-, 6- and 4-bit floats"},
      {raw_file(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", "12345678"), "w",
       "shape must be an array of non-negative integers, got 2"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[1,-2],"data_offsets":[0,8]}})", "12345678"), "w",
       "shape entry 1 must be a non-negative integer, got -2"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", "12345678"), "w",
       "shape entry 0 must be a non-negative integer, got 2.5"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"), "w",
       "shape [0,4294967296,4294967296] has too many elements (overflows int64)",
       "the library checks the byte count only (0 here), and its numpy.load_file then fails in numpy (the array is "
       "too big); strata's strides need the product of the sizes, a 0 counted as 1, to fit in int64"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", "12345678"), "w",
       "data_offsets must be two non-negative integers [begin, end], got [0]"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", "12345678"), "w",
       "data_offsets must be two non-negative integers [begin, end], got [-8,0]"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "12345678"), "w",
       "data_offsets [8, 0] end before they begin"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"), "w",
       "data_offsets [0, 8] span 8 bytes but shape [3] of F32 needs 12"},
      {raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678"), "w",
       "data_offsets [0, 16] run past the end of the data area (8 bytes)"},
      {raw_file("{\"a\":{" + f32x2 + R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", "123456789012"),
       "b", "data_offsets [4, 12] overlap tensor 'a', which ends at 8"},
      {raw_file(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           "123456789012"),
       "b", "bytes 4 to 8 of the data area, before this tensor, belong to no tensor"},
      {raw_file("{\"w\":{" + f32x2 + "},\"w\":{" + f32x2 + "}}", "12345678"), "w",
       "the name appears twice in the header", duplicate},
      {raw_file(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "12345678"), "w",
       "duplicate key 'dtype'"},
      {raw_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3)), "m",
       "BOOL element 2 holds the byte 2 (only 0 and 1 are booleans)",
       "the library hands the bytes to numpy, which reads 2 as true; a C++ bool holding 2 is undefined behaviour"},
      {raw_file(R"({"__metadata__":[1]})"), "__metadata__", "must be an object of strings, got an array of 1"},
      {raw_file(R"({"__metadata__":null})"), "__metadata__", "must be an object of strings, got null",
       "the library reads null as no metadata; strata wants an object, as both writers write"},
      {raw_file(R"({"__metadata__":{"epoch":3}})"), "__metadata__", "the value of 'epoch' must be a string, got 3"},
      {raw_file(R"({"__metadata__":{"epoch":"3","epoch":"4"}})"), "__metadata__", "duplicate key 'epoch'", duplicate},
  };
}

TEST_F(Safetensors, BadFilesNameTheFileAndTheKey) {
  const std::string path = file("bad.safetensors");
  EXPECT_THROW_MSG(load_file(path), where(path, "") + "cannot open the file: No such file or directory");
  EXPECT_THROW_MSG(load_file(dir_.string()), where(dir_.string(), "") + "not a regular file");
  for (const RefusedFile& refused : refused_files()) {
    SCOPED_TRACE(::testing::PrintToString(refused.bytes));
    write_bytes(path, refused.bytes);
    EXPECT_THROW_MSG(load_file(path), where(path, refused.key) + refused.message);
  }
}

TEST_F(Safetensors, ReadsFilesLaidOutInAnyOrder) {
  // Offsets need not follow the header's order or alignment: only the tiling of the data area matters.
  const std::string path = file("any.safetensors");
  std::string data(13, '\0');
  const float f = 1.5f;
  const int64_t l = -7;
  data[0] = 1;
  std::memcpy(&data[1], &f, 4);
  std::memcpy(&data[5], &l, 8);
  write_bytes(path, raw_file(R"({"l":{"dtype":"I64","shape":[],"data_offsets":[5,13]},)"
                             R"("e":{"dtype":"F64","shape":[0],"data_offsets":[5,5]},)"
                             R"("b":{"dtype":"BOOL","shape":[1,1],"data_offsets":[0,1]},)"
                             R"("f":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
                             data));
  EXPECT_TRUE(same_state(load_file(path), {{"l", scalar_tensor(-7, kLong)},
                                           {"e", zeros({0}, kFloat64)},
                                           {"b", tensor({true}).reshape({1, 1})},
                                           {"f", tensor({1.5})}}));
}

// Note [killed writer]: a child saves one of three complete versions after another until it is killed at a
// random moment. Whatever the moment, the checkpoint loads and is one complete version. A kill mid-save leaves
// the child's temporary file behind (load_file never reads it) until a later save of the path removes it.
TEST_F(Safetensors, KilledWriterNeverDestroysTheCheckpoint) {
  constexpr int kVersions = 3;
  std::vector<StateDict> versions(kVersions);
  for (int v = 0; v < kVersions; ++v)
    for (int i = 0; i < 4; ++i) versions[v][std::string{'t', char('0' + i)}] = full({1 << 20}, v + 10.0 * i);  // 16 MB
  const std::string target = file("ckpt.safetensors");
  save_file(versions[0], target, {{"version", "0"}});

  std::mt19937 rng(2024);
  int interrupted = 0;
  for (int round = 0; round < 8; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // only save_file of ready tensors here: no threads, no gtest
      for (int k = 1;; ++k) {
        try {
          save_file(versions[k % kVersions], target, {{"version", std::to_string(k % kVersions)}});
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 150));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer failed: status " << status;

    std::map<std::string, std::string> metadata;
    const StateDict loaded = load_file(target, &metadata);
    const int version = std::stoi(metadata.at("version"));
    ASSERT_TRUE(version >= 0 && version < kVersions);
    EXPECT_TRUE(same_state(loaded, versions[version])) << "round " << round;
    for (const std::string& name : folder_contents()) {
      if (name == "ckpt.safetensors") continue;
      EXPECT_EQ(name.rfind("ckpt.safetensors.tmp.", 0), 0u) << name;
      ++interrupted;
    }
  }
  EXPECT_GT(interrupted, 0);       // some kills did land mid-save (saving is nearly all the child does)
  save_file(versions[1], target);  // every writer is dead now: their leftovers go
  EXPECT_EQ(folder_contents(), std::vector<std::string>{"ckpt.safetensors"});
}

// Leftovers of dead writers on this host go with the next save of the same path; a live writer's, another
// host's, another path's and names of another form stay.
TEST_F(Safetensors, SaveRemovesTheTemporariesOfDeadWriters) {
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::string ours = std::string("ckpt.safetensors.tmp.") + host + ".";
  const std::vector<std::string> kept = {
      ours + std::to_string(::getppid()) + ".0",                           // a live pid
      "ckpt.safetensors.tmp.another-host." + std::to_string(dead) + ".0",  // pids of other hosts mean nothing here
      "other.safetensors.tmp." + std::string(host) + "." + std::to_string(dead) + ".0",
      ours + std::to_string(dead) + ".x",
      ours + std::to_string(dead),
      "ckpt.safetensors.tmp." + std::to_string(dead) + ".0"};
  const std::vector<std::string> stale = {ours + std::to_string(dead) + ".0", ours + std::to_string(dead) + ".17"};
  for (const auto& names : {kept, stale})
    for (const std::string& name : names) std::ofstream(file(name)) << "partial";
  save_file({{"w", ones({2})}}, file("ckpt.safetensors"));
  std::vector<std::string> want = kept;
  want.push_back("ckpt.safetensors");
  std::sort(want.begin(), want.end());
  std::vector<std::string> have = folder_contents();
  std::sort(have.begin(), have.end());
  EXPECT_EQ(have, want);
}

// A write that fails midway (the file size limit here) throws, removes its temporary file and leaves the old
// checkpoint as it was. Run in a child so that the limit stays there.
TEST_F(Safetensors, FailedWriteLeavesTheOldFile) {
  const std::string target = file("ckpt.safetensors");
  const StateDict old = {{"w", full({8}, 1.0)}};
  save_file(old, target);
  const StateDict big = {{"w", ones({1 << 16})}};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // over the limit, write() then fails with EFBIG instead of killing us
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      save_file(big, target);
    } catch (const Error& e) {
      ::_exit(std::strstr(e.what(), ("save_file: '" + target + "': write failed: File too large").c_str()) ? 0 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_TRUE(same_state(load_file(target), old));
  EXPECT_EQ(folder_contents(), std::vector<std::string>{"ckpt.safetensors"});
}

// Hugging Face's safetensors library (PyPI), through tests/nn/safetensors_interop.py run by the Python of the
// virtual environment STRATA_PYTHON_VENV (a CMake setting; scripts/test makes it, with safetensors and numpy). Without
// that environment, or without the library in it, these tests are skipped with the reason.
class SafetensorsLibrary : public Safetensors {
 protected:
  void SetUp() override {
    Safetensors::SetUp();
    if (::access(kPython.c_str(), X_OK) != 0)
      GTEST_SKIP() << "no Python virtual environment at " STRATA_PYTHON_VENV
                      " (scripts/test makes one, with safetensors and numpy from PyPI)";
    static const std::pair<int, std::string> version = run_interop({"version"});
    if (version.first == kSkipStatus) GTEST_SKIP() << version.second;
    ASSERT_EQ(version.first, 0) << version.second;
    std::cout << "[ library  ] " << version.second << std::flush;
  }

  // Runs the script with `args`: its exit status (-1 when it did not exit) and what it printed.
  static std::pair<int, std::string> run_interop(const std::vector<std::string>& args) {
    std::string command = "'" + kPython + "' '" STRATA_SAFETENSORS_INTEROP "'";
    for (const std::string& arg : args) command += " '" + arg + "'";
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) return {-1, "popen failed: " + std::string(std::strerror(errno))};
    std::string output;
    char buffer[256];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
    const int status = ::pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
  }

  // The script's metadata(): the note is "größe ✓" in UTF-8.
  static std::map<std::string, std::string> interop_metadata(const std::string& source) {
    return {{"note",
             "gr\xc3\xb6\xc3\x9f"
             "e \xe2\x9c\x93"},
            {"source", source}};
  }

  static inline const std::string kPython = STRATA_PYTHON_VENV "/bin/python";
  static constexpr int kSkipStatus = 77;  // the script's exit status when it cannot import the library
};

// The library reads what strata writes: names, dtypes, shapes, values bit for bit, and metadata. numpy has no
// bfloat16, so safetensors.numpy.load_file reads a file without BF16, and the script reads the BF16 tensor's bytes
// through the library's parser (safetensors.deserialize), and through safetensors.torch when torch is installed.
TEST_F(SafetensorsLibrary, ReadsWhatStrataWrites) {
  StateDict tensors = interop_tensors();
  const std::string full = file("full.safetensors"), without_bf16 = file("numpy.safetensors");
  save_file(tensors, full, interop_metadata("strata"));
  tensors.erase("bf16");
  save_file(tensors, without_bf16, interop_metadata("strata"));
  const auto [status, output] = run_interop({"read", full, without_bf16});
  EXPECT_EQ(status, 0) << output;
}

// strata reads what the library writes: safetensors.numpy.save_file's file (in its own order and alignment) and
// the one its raw writer makes with BF16 too, which holds the very bytes strata writes for the same tensors.
TEST_F(SafetensorsLibrary, WritesWhatStrataReads) {
  const auto [status, output] = run_interop({"write", dir_.string()});
  ASSERT_EQ(status, 0) << output;
  StateDict expected = interop_tensors();
  std::map<std::string, std::string> metadata;
  const std::string raw = file("raw.safetensors");
  EXPECT_TRUE(same_state(load_file(raw, &metadata), expected));
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"source", "python"}}));
  const std::string ours = file("strata.safetensors");
  save_file(expected, ours, metadata);
  EXPECT_EQ(read_bytes(ours), read_bytes(raw));  // the same order, offsets and padding

  expected.erase("bf16");
  EXPECT_TRUE(same_state(load_file(file("numpy.safetensors"), &metadata), expected));
  EXPECT_EQ(metadata, interop_metadata("python"));
}

// Every file strata refuses (refused_files()) the library rejects too, except the differences listed there with
// their reasons. A difference that goes away (a new version of the library) fails the test, so that the list stays
// true.
TEST_F(SafetensorsLibrary, RejectsWhatStrataRejects) {
  const std::vector<RefusedFile> refused = refused_files();
  std::vector<std::string> args = {"verdicts"};
  for (size_t i = 0; i < refused.size(); ++i) {
    args.push_back(file("refused_" + std::to_string(i) + ".safetensors"));
    write_bytes(args.back(), refused[i].bytes);
    EXPECT_THROW(load_file(args.back()), Error) << refused[i].message;
  }
  const auto [status, output] = run_interop(args);
  ASSERT_EQ(status, 0) << output;
  std::map<std::string, std::string> verdicts;  // file: "accepted (n tensors)" or "rejected: <the library's message>"
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) verdicts[line.substr(0, colon)] = line.substr(colon + 2);
  }
  // output = output: clang before 16 cannot capture a structured binding.
  auto verdict = [&, output = output](size_t arg) {
    return verdicts.count(args[arg]) ? verdicts[args[arg]] : "none in:\n" + output;
  };

  for (size_t i = 0; i < refused.size(); ++i) {
    const std::string got = verdict(1 + i);
    if (refused[i].library_loads_it_because.empty()) {
      EXPECT_TRUE(got.starts_with("rejected"))
          << "strata refuses a file (" << refused[i].message << ") that the library loads: " << got
          << "\nthe file: " << ::testing::PrintToString(refused[i].bytes);
    } else {
      EXPECT_TRUE(got.starts_with("accepted"))
          << "the library no longer loads a file strata refuses (" << refused[i].message << "): " << got
          << "\nthe expected difference is gone: " << refused[i].library_loads_it_because;
    }
  }
}

}  // namespace
}  // namespace strata::nn
