#include "strata/nn/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/autograd/grad_mode.h"
#include "strata/tensor/creation.h"

namespace strata::nn {
namespace {

// Tensor memory is written and read as is; a big-endian host would need a byte swap on both paths.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

// The dtypes strata holds, in the reference implementation's enum order (ascending alignment). Its writer lays
// tensors out from the last of these to the first, then by name, which keeps every tensor aligned in the file.
struct DtypeName {
  ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {{kBool, "BOOL"},     {kByte, "U8"}, {kChar, "I8"},   {kShort, "I16"},  {kHalf, "F16"},
                                 {kBFloat16, "BF16"}, {kInt, "I32"}, {kFloat, "F32"}, {kDouble, "F64"}, {kLong, "I64"}};
// The other safetensors dtypes, named as such when a file holds one.
constexpr const char* kForeignDtypes[] = {"F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3",
                                          "F6_E3M2", "U16",     "U32",     "U64", "C64"};

size_t dtype_rank(ScalarType t) {
  for (size_t i = 0; i < std::size(kDtypes); ++i)
    if (kDtypes[i].type == t) return i;
  STRATA_INTERNAL_ASSERT(false);
}

// What every message starts with: "load_file: 'model.safetensors': tensor 'fc.weight': ".
struct Where {
  const char* op;
  const std::string& path;
  const std::string* key = nullptr;
};

std::ostream& operator<<(std::ostream& os, const Where& w) {
  os << w.op << ": '" << w.path << "': ";
  if (w.key == nullptr) return os;
  if (*w.key == kMetadataKey) return os << kMetadataKey << ": ";
  return os << "tensor '" << *w.key << "': ";
}

// A JSON value for a message: scalars as written, containers by kind (they may be large).
std::string describe(const Json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object() || v.is_string()) return std::string("a ") + v.type_name();
  return v.dump();
}

std::string os_error() { return std::strerror(errno); }

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void write_all(int fd, const void* data, size_t n, const Where& where) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t written = ::write(fd, p, n);
    if (written < 0 && errno == EINTR) continue;
    STRATA_CHECK(written > 0, where, "write failed: ", os_error());
    p += written;
    n -= static_cast<size_t>(written);
  }
}

void read_all(int fd, void* data, size_t n, uint64_t offset, const Where& where) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    STRATA_CHECK(got >= 0, where, "read failed: ", os_error());
    STRATA_CHECK(got > 0, where, "the file ended at byte ", offset, " while being read (it changed under us)");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// Note [atomic save]: the bytes go to a new file beside the target (the same filesystem, so rename replaces the
// target in one step). It is fsynced before the rename, so the name never points at data still in the page
// cache, and the folder is fsynced after it, so the rename itself survives a crash. Until the rename the target
// is untouched; on any error the destructor removes the temporary file. A killed writer cannot clean up: its
// "<path>.tmp.<host>.<pid>.<n>" stays behind, and load_file never reads it. The next save of the same path
// removes those whose writer is gone: written on this host (a shared filesystem may hold another host's,
// whose pids mean nothing here) by a pid that no longer exists. A reused pid only keeps a file a while longer.
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Removes "<prefix><pid>.<n>" files of pids that no longer exist (Note [atomic save]). Best effort: a file that
// cannot be listed or removed stays, as it would have without the clean-up.
void remove_stale(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(prefix).parent_path().empty() ? fs::path(".") : fs::path(prefix).parent_path();
  const std::string name_prefix = fs::path(prefix).filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(name_prefix)) continue;
    const std::string rest = name.substr(name_prefix.size());  // "<pid>.<n>"
    const size_t dot = rest.find('.');
    const auto digits = [](std::string_view text) {
      return !text.empty() && std::ranges::all_of(text, [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot == std::string::npos || dot > 9 || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

class TempFile {
 public:
  TempFile(const std::string& target, const Where& where) {
    static std::atomic<uint64_t> counter{0};
    const std::string prefix = target + ".tmp." + host_name() + ".";
    remove_stale(prefix);
    for (;;) {
      path_ = prefix + std::to_string(::getpid()) + "." + std::to_string(counter++);
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) break;
      STRATA_CHECK(errno == EEXIST, where, "cannot create the temporary file '", path_, "': ", os_error());
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }

  // Makes the written bytes durable and moves them to `target`.
  void commit(const std::string& target, const Where& where) {
    STRATA_CHECK(::fsync(fd_) == 0, where, "fsync of '", path_, "' failed: ", os_error());
    STRATA_CHECK(::close(std::exchange(fd_, -1)) == 0, where, "closing '", path_, "' failed: ", os_error());
    STRATA_CHECK(::rename(path_.c_str(), target.c_str()) == 0, where, "renaming '", path_, "' failed: ", os_error());
    committed_ = true;
    std::string folder = std::filesystem::path(target).parent_path().string();
    if (folder.empty()) folder = ".";
    FileDescriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    STRATA_CHECK(dir.get() >= 0, where, "cannot open the folder '", folder, "' to sync it: ", os_error());
    STRATA_CHECK(::fsync(dir.get()) == 0, where, "fsync of the folder '", folder, "' failed: ", os_error());
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// nlohmann::json keeps the last of duplicate keys without a word; in a header a duplicate means a corrupted or
// ambiguous file, so the parser callback tracks the keys of every object being parsed.
Json parse_header(const std::string& text, const std::string& path) {
  const Where file{"load_file", path};
  std::vector<std::set<std::string>> open_objects;  // innermost last
  std::string top_key;                              // the header entry being parsed
  auto check_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == Json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      const bool top = open_objects.size() == 1;
      if (top) top_key = key;
      STRATA_CHECK(open_objects.back().insert(key).second, Where{"load_file", path, &top_key},
                   top ? "the name appears twice in the header" : "duplicate key '" + key + "'");
    }
    return true;
  };
  // nlohmann's parser takes a NUL for the end of its input and would pass over whatever follows it.
  const size_t nul = text.find('\0');
  STRATA_CHECK(nul == std::string::npos, file, "the header has a NUL byte at offset ", nul,
               " (JSON holds none, and only spaces may pad the header)");
  try {
    return Json::parse(text, check_keys);
  } catch (const Json::exception& e) {
    // parse_error for bad syntax, out_of_range for a number past double's range ("1e400"), in any field.
    detail::throw_error(__FILE__, __LINE__, file, "the header is not valid JSON: ", e.what());
  }
}

struct TensorEntry {
  const std::string* name;
  ScalarType dtype;
  DimVector shape;
  uint64_t begin, end;  // in the data area
};

ScalarType parse_dtype(const Json& v, const Where& where) {
  STRATA_CHECK(v.is_string(), where, "dtype must be a string, got ", describe(v));
  const auto& name = v.get_ref<const std::string&>();
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  STRATA_CHECK(std::ranges::find(kForeignDtypes, name) == std::end(kForeignDtypes), where, "dtype ", name,
               " is not supported by strata (it holds BOOL, U8, I8, I16, I32, I64, F16, BF16, F32 and F64)");
  detail::throw_error(__FILE__, __LINE__, where, "unknown dtype '", name, "'");
}

// Checks what strata's strides need too: the product of the sizes (zeros counted as ones) fits in int64.
DimVector parse_shape(const Json& v, const Where& where) {
  STRATA_CHECK(v.is_array(), where, "shape must be an array of non-negative integers, got ", describe(v));
  DimVector shape;
  int64_t extent = 1;
  for (size_t i = 0; i < v.size(); ++i) {
    STRATA_CHECK(v[i].is_number_unsigned(), where, "shape entry ", i, " must be a non-negative integer, got ",
                 describe(v[i]));
    const uint64_t size = v[i].get<uint64_t>();
    STRATA_CHECK(size <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                     !__builtin_mul_overflow(extent, std::max<int64_t>(static_cast<int64_t>(size), 1), &extent),
                 where, "shape ", v.dump(), " has too many elements (overflows int64)");
    shape.push_back(static_cast<int64_t>(size));
  }
  return shape;
}

TensorEntry parse_entry(const std::string& name, const Json& v, uint64_t data_size, const Where& where) {
  STRATA_CHECK(v.is_object(), where, "the entry must be an object with dtype, shape and data_offsets, got ",
               describe(v));
  for (const auto& [field, value] : v.items())
    STRATA_CHECK(field == "dtype" || field == "shape" || field == "data_offsets", where, "unknown field '", field, "'");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    STRATA_CHECK(v.contains(field), where, "missing field '", field, "'");
  TensorEntry e{&name, parse_dtype(v["dtype"], where), parse_shape(v["shape"], where), 0, 0};

  const Json& offsets = v["data_offsets"];
  STRATA_CHECK(
      offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      where, "data_offsets must be two non-negative integers [begin, end], got ",
      offsets.is_array() && offsets.size() <= 4 ? offsets.dump() : describe(offsets));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  STRATA_CHECK(e.begin <= e.end, where, "data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  STRATA_CHECK(e.end <= data_size, where, "data_offsets [", e.begin, ", ", e.end,
               "] run past the end of the data area (", data_size, " bytes)");
  uint64_t nbytes = 0;
  const bool overflow =
      __builtin_mul_overflow(static_cast<uint64_t>(multiply(e.shape)), element_size(e.dtype), &nbytes);
  STRATA_CHECK(!overflow && nbytes == e.end - e.begin, where, "data_offsets [", e.begin, ", ", e.end, "] span ",
               e.end - e.begin, " bytes but shape ", IntArrayRef(e.shape), " of ", v["dtype"].get<std::string>(),
               " needs ", overflow ? std::string("more than 2^64") : std::to_string(nbytes));
  return e;
}

}  // namespace

void save_file(const StateDict& tensors, const std::string& path, const std::map<std::string, std::string>& metadata) {
  const Where file{"save_file", path};
  struct Item {
    const std::string* name;
    const Tensor* tensor;
  };
  std::vector<Item> items;
  for (const auto& [name, t] : tensors) {
    const Where where{"save_file", path, &name};
    STRATA_CHECK(name != kMetadataKey, where, "the name is reserved for the file's metadata");
    STRATA_CHECK(t.defined(), where, "the tensor is undefined");
    items.push_back({&name, &t});
  }
  // The map iterates by name, so a stable sort by dtype gives the reference writer's order.
  std::ranges::stable_sort(items, std::greater<>(), [](const Item& i) { return dtype_rank(i.tensor->dtype()); });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : items) {
    const uint64_t begin = offset;
    offset += t->nbytes();
    header[*name] = {{"dtype", kDtypes[dtype_rank(t->dtype())].name},
                     {"shape", t->sizes().vec()},
                     {"data_offsets", {begin, offset}}};
  }
  std::string bytes(8, '\0');
  try {
    bytes += header.dump();
  } catch (const nlohmann::ordered_json::type_error& e) {
    detail::throw_error(__FILE__, __LINE__, file, "a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  bytes.append((8 - bytes.size() % 8) % 8, ' ');
  const uint64_t header_size = bytes.size() - 8;
  std::memcpy(bytes.data(), &header_size, 8);

  TempFile out(path, file);
  write_all(out.fd(), bytes.data(), bytes.size(), file);
  NoGradGuard no_grad;  // contiguous() of a tensor that requires grad would record a graph
  for (const auto& [name, t] : items) {
    const Tensor data = t->to(Device(kCPU)).contiguous();  // a GPU tensor is copied to the host, one at a time
    write_all(out.fd(), data.data_ptr(), data.nbytes(), file);
  }
  out.commit(path, file);
}

StateDict load_file(const std::string& path, std::map<std::string, std::string>* metadata) {
  const Where file{"load_file", path};
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  STRATA_CHECK(fd.get() >= 0, file, "cannot open the file: ", os_error());
  struct stat st {};
  STRATA_CHECK(::fstat(fd.get(), &st) == 0, file, "cannot stat the file: ", os_error());
  STRATA_CHECK(S_ISREG(st.st_mode), file, "not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  STRATA_CHECK(file_size >= 8, file, "the file has ", file_size, " bytes, fewer than the 8-byte header length");
  uint64_t header_size = 0;
  read_all(fd.get(), &header_size, 8, 0, file);
  STRATA_CHECK(header_size <= kMaxHeaderBytes, file, "the header length ", header_size, " exceeds the limit of ",
               kMaxHeaderBytes, " bytes");
  STRATA_CHECK(header_size <= file_size - 8, file, "the header length ", header_size,
               " runs past the end of the file (", file_size, " bytes)");
  std::string text(header_size, '\0');
  read_all(fd.get(), text.data(), text.size(), 8, file);
  const Json header = parse_header(text, path);
  STRATA_CHECK(header.is_object(), file, "the header must be a JSON object, got ", describe(header));

  const uint64_t data_start = 8 + header_size, data_size = file_size - data_start;
  std::map<std::string, std::string> found_metadata;
  std::vector<TensorEntry> entries;
  for (const auto& [key, value] : header.items()) {
    const Where where{"load_file", path, &key};
    if (key == kMetadataKey) {
      STRATA_CHECK(value.is_object(), where, "must be an object of strings, got ", describe(value));
      for (const auto& [name, text] : value.items()) {
        STRATA_CHECK(text.is_string(), where, "the value of '", name, "' must be a string, got ", describe(text));
        found_metadata.emplace(name, text.get<std::string>());
      }
    } else {
      entries.push_back(parse_entry(key, value, data_size, where));
    }
  }

  // Note [data area]: as in the reference implementation, the tensors must tile the data area exactly: sorted by
  // offset, each begins where the previous one ended and the last ends with the file. That rules out overlaps
  // (two names for the same bytes) and bytes no tensor claims (a sign of a truncated or spliced file).
  std::ranges::sort(entries, {}, [](const TensorEntry& e) { return std::pair(e.begin, e.end); });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& e : entries) {
    const Where where{"load_file", path, e.name};
    STRATA_CHECK(e.begin >= covered, where, "data_offsets [", e.begin, ", ", e.end, "] overlap tensor '", *previous,
                 "', which ends at ", covered);
    STRATA_CHECK(e.begin == covered, where, "bytes ", covered, " to ", e.begin,
                 " of the data area, before this tensor, belong to no tensor");
    covered = e.end;
    previous = e.name;
  }
  STRATA_CHECK(covered == data_size, file, "the last ", data_size - covered, " of the ", data_size,
               " bytes of the data area belong to no tensor");

  StateDict out;
  for (const auto& e : entries) {
    const Where where{"load_file", path, e.name};
    Tensor t = empty(e.shape, e.dtype);
    read_all(fd.get(), t.data_ptr(), t.nbytes(), data_start + e.begin, where);
    if (e.dtype == kBool) {  // any byte but 0 and 1 would be an invalid bool
      const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
      const auto* bad = std::find_if(bytes, bytes + t.nbytes(), [](unsigned char b) { return b > 1; });
      STRATA_CHECK(bad == bytes + t.nbytes(), where, "BOOL element ", bad - bytes, " holds the byte ",
                   static_cast<int>(*bad), " (only 0 and 1 are booleans)");
    }
    out.emplace(*e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(found_metadata);
  return out;
}

}  // namespace strata::nn
