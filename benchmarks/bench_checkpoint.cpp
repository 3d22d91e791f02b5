// strata_bench_checkpoint: nn::save_file and nn::load_file of a 100 MB state dict (25 float32 tensors of
// 1000 x 1000) against a plain write (one fwrite + fsync) and a plain read (one fread) of the same bytes.
// Prints the median throughput of each and strata's ratio to the plain side. Reads hit the page cache (the
// file was just written), so load measures strata's own work rather than the disk. The plain read is timed
// twice: into new memory (page faults included, as a process loading a checkpoint once pays them) and into a
// buffer reused across runs (the copy alone). load_file lies between: strata's block cache (Note [CPU block
// cache]) hands back up to 64 MB of the previous run's tensors.
//
//   strata_bench_checkpoint [--dir D] [--reps R]
//
// --dir: where the files go (default "."; not a tmpfs if the disk is what you want to see);
// --reps: timed runs per side (default 5), alternating strata and plain. scripts/bench checkpoint runs it.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/nn/safetensors.h>
#include <strata/strata.h>

#include "bench_common.h"

namespace {

constexpr int kTensors = 25;
constexpr int64_t kRows = 1000, kCols = 1000;  // 4 MB of float32 each

struct Options {
  std::string dir = ".";
  int reps = 5;
};

Options parse_options(int argc, char** argv) {
  Options opt;
  strata_bench::parse_flags(argc, argv, "usage: strata_bench_checkpoint [--dir D] [--reps R]",
                            {{"--dir", &opt.dir}, {"--reps", &opt.reps}});
  if (opt.reps < 1) throw std::invalid_argument("strata_bench_checkpoint: --reps must be >= 1");
  return opt;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("strata_bench_checkpoint: " + what + " failed");
}

template <class F>
double seconds(F&& f) {
  const auto start = strata_bench::Clock::now();
  f();
  return strata_bench::seconds_since(start);
}

void plain_write(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr, "fopen of " + path);
  check(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(), "fwrite");
  check(std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0, "fsync");
  check(std::fclose(f) == 0, "fclose");
}

void plain_read(const std::string& path, char* buffer, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  check(f != nullptr, "fopen of " + path);
  check(std::fread(buffer, 1, n, f) == n, "fread");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse_options(argc, argv);
    strata::manual_seed(0);
    strata::nn::StateDict dict;
    for (int i = 0; i < kTensors; ++i) dict["layers." + std::to_string(i) + ".weight"] = strata::randn({kRows, kCols});
    const std::string strata_path = (std::filesystem::path(opt.dir) / "bench_checkpoint.safetensors").string();
    const std::string plain_path = (std::filesystem::path(opt.dir) / "bench_checkpoint.bin").string();

    strata::nn::save_file(dict, strata_path);  // the same bytes for the plain side
    std::string bytes(std::filesystem::file_size(strata_path), '\0');
    plain_read(strata_path, bytes.data(), bytes.size());
    std::string reused(bytes.size(), '\0');
    const double mb = static_cast<double>(bytes.size()) / 1e6;

    std::vector<double> save_strata, save_plain, load_strata, load_new, load_reused;
    for (int rep = 0; rep < opt.reps; ++rep) {
      save_strata.push_back(seconds([&] { strata::nn::save_file(dict, strata_path); }));
      save_plain.push_back(seconds([&] { plain_write(plain_path, bytes); }));
      size_t loaded = 0;
      load_strata.push_back(seconds([&] { loaded = strata::nn::load_file(strata_path).size(); }));
      check(loaded == kTensors, "load_file's tensor count");
      load_new.push_back(seconds([&] {
        std::unique_ptr<char[]> fresh(new char[bytes.size()]);  // not zeroed: the read touches it first
        plain_read(plain_path, fresh.get(), bytes.size());
      }));
      load_reused.push_back(seconds([&] { plain_read(plain_path, reused.data(), reused.size()); }));
    }
    std::filesystem::remove(strata_path);
    std::filesystem::remove(plain_path);

    std::printf("checkpoint: %d float32 tensors of %lldx%lld, %.1f MB, in %s, median of %d\n", kTensors,
                static_cast<long long>(kRows), static_cast<long long>(kCols), mb, opt.dir.c_str(), opt.reps);
    std::printf("%-30s %8s %14s\n", "", "MB/s", "strata/this");
    auto row = [&](const char* name, const std::vector<double>& times, const std::vector<double>* strata_times) {
      const double rate = mb / strata_bench::median(times);
      std::printf("%-30s %8.0f", name, rate);
      if (strata_times) std::printf(" %14.2f", mb / strata_bench::median(*strata_times) / rate);
      std::printf("\n");
    };
    row("strata save_file", save_strata, nullptr);
    row("plain fwrite + fsync", save_plain, &save_strata);
    row("strata load_file", load_strata, nullptr);
    row("plain fread, new buffer", load_new, &load_strata);
    row("plain fread, reused buffer", load_reused, &load_strata);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
