// strata_bench_allreduce: strata's distributed::all_reduce against a raw MPI_Allreduce of the same
// buffer, float32 from 4 B to 64 MiB, in one run. Prints latency, algbw and busbw of both, their
// ratio and difference, and checks the targets: strata within 3% of raw MPI from 64 KiB up and
// within 1 us up to 64 B. Also times strata with the consistency checks OFF, to show what the default
// INFO check costs.
//
//   mpirun -np 2 ./strata_bench_allreduce [--seconds S] [--reps R]
//
// --seconds: timed time per size and side (default 0.5); --reps: timed blocks per size and side
// (default 15), run in pairs, one block of each side. scripts/bench runs it.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/distributed/collectives.h>
#include <strata/distributed/comm_logger.h>
#include <strata/strata.h>

#include "bench_common.h"

namespace dist = strata::distributed;

namespace {

using strata_bench::median;

constexpr int64_t kMinBytes = 4;
constexpr int64_t kMaxBytes = int64_t{64} << 20;
constexpr int64_t kSizeStep = 4;
constexpr int64_t kLatencyTargetMaxBytes = 64;  // sizes judged by the difference
constexpr double kLatencyTargetS = 1e-6;
constexpr int64_t kBandwidthTargetMinBytes = 64 << 10;  // sizes judged by the ratio
constexpr double kBandwidthTargetRatio = 1.03;

struct Options {
  double seconds = 0.5;
  int reps = 15;
};

Options parse_options(int argc, char** argv) {
  Options opt;
  strata_bench::parse_flags(argc, argv, "usage: strata_bench_allreduce [--seconds S] [--reps R]",
                            {{"--seconds", &opt.seconds}, {"--reps", &opt.reps}});
  if (!(opt.seconds > 0) || opt.reps < 1)
    throw std::invalid_argument("strata_bench_allreduce: --seconds must be > 0 and --reps >= 1");
  return opt;
}

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) [[unlikely]]
    throw std::runtime_error(std::string("strata_bench_allreduce: ") + what + " failed");
}

// Seconds per call of `iters` back-to-back calls, on the slowest rank. Ranks start together.
template <class Op>
double seconds_per_call(const Op& op, int64_t iters) {
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) op();
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  double slowest = 0;
  check_mpi(MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return slowest;
}

// Warms `op` up with growing blocks until one lasts a quarter of `block_s`; returns the last
// block's seconds per call. Every rank takes the same decisions since the times are maxima.
template <class Op>
double warm_up(const Op& op, double block_s) {
  for (int64_t iters = 1;; iters *= 2) {
    const double per_call = seconds_per_call(op, iters);
    if (per_call * iters >= block_s / 4) return per_call;
  }
}

struct Timing {
  double strata_s = 0;  // median seconds per call, at the debug level in effect
  double raw_s = 0;
  double diff_s = 0;       // median over neighbouring blocks of strata - raw
  double ratio = 0;        // median over neighbouring blocks of strata / raw
  double check_s = 0;      // median over neighbouring blocks of strata - strata with the checks OFF
  double check_ratio = 0;  // ... and of strata / strata OFF
  int64_t iters = 0;       // calls per timed block
};

// The three sides reduce the same zero-filled buffer in place (zeros stay zeros: no overflow, no
// denormals) in back-to-back blocks, whose order rotates each repetition: strata at the debug level in
// effect (INFO by default, Note [call windows]), strata with the checks OFF, and raw MPI. Differences and
// ratios are taken within each repetition's neighbouring blocks, so load that comes and goes on a shared
// machine hits the sides alike, and their medians drop the repetitions a burst split.
Timing time_size(int64_t bytes, const Options& opt, dist::DebugLevel level) {
  const int64_t numel = bytes / static_cast<int64_t>(sizeof(float));
  strata::Tensor t = strata::zeros({numel}, strata::kFloat32);
  float* data = t.data_ptr<float>();
  const int count = static_cast<int>(numel);
  auto through_strata = [&] { dist::all_reduce(t); };
  auto raw_mpi = [&] {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  };
  auto time_side = [&](int side, int64_t iters) {
    if (side == 2) return seconds_per_call(raw_mpi, iters);
    dist::set_debug_level(side == 0 ? level : dist::DebugLevel::OFF);
    const double seconds = seconds_per_call(through_strata, iters);
    dist::set_debug_level(level);
    return seconds;
  };

  const double block_s = opt.seconds / opt.reps;
  const double estimate = std::max(warm_up(through_strata, block_s), warm_up(raw_mpi, block_s));
  Timing timing;
  timing.iters = std::max<int64_t>(1, std::llround(block_s / estimate));
  std::vector<double> strata_s, raw_s, diff_s, ratio, check_s, check_ratio;
  for (int rep = 0; rep < opt.reps; ++rep) {
    double seconds[3];
    for (int k = 0; k < 3; ++k) {
      const int side = (rep + k) % 3;
      seconds[side] = time_side(side, timing.iters);
    }
    strata_s.push_back(seconds[0]);
    raw_s.push_back(seconds[2]);
    diff_s.push_back(seconds[0] - seconds[2]);
    ratio.push_back(seconds[0] / seconds[2]);
    check_s.push_back(seconds[0] - seconds[1]);
    check_ratio.push_back(seconds[0] / seconds[1]);
  }
  timing.strata_s = median(strata_s);
  timing.raw_s = median(raw_s);
  timing.diff_s = median(diff_s);
  timing.ratio = median(ratio);
  timing.check_s = median(check_s);
  timing.check_ratio = median(check_ratio);
  return timing;
}

const char* level_name(dist::DebugLevel level) {
  return level == dist::DebugLevel::OFF ? "OFF" : level == dist::DebugLevel::INFO ? "INFO" : "DETAIL";
}

// Fails loudly if strata's all_reduce is not reducing (a profiling switch left on, say).
void check_all_reduce_sums(int world_size) {
  strata::Tensor t = strata::ones({3}, strata::kFloat32);
  dist::all_reduce(t);
  for (int64_t i = 0; i < 3; ++i)
    if (t.data_ptr<float>()[i] != static_cast<float>(world_size))
      throw std::runtime_error("strata_bench_allreduce: all_reduce of ones did not give the world size");
}

std::string size_label(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (int64_t{1} << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

std::string first_line_of_mpi_version() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  check_mpi(MPI_Get_library_version(version, &length), "MPI_Get_library_version");
  std::string s(version, static_cast<size_t>(length));
  return s.substr(0, s.find_first_of("\n,"));
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    opt = parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  dist::init();
  const int rank = dist::get_rank();
  const int world = dist::get_world_size();
  check_all_reduce_sums(world);

  const double bus_factor = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  const dist::DebugLevel level = dist::get_debug_level();
  if (rank == 0) {
    std::printf("all_reduce, float32, SUM, in place: strata vs MPI_Allreduce(MPI_IN_PLACE)\n");
    std::printf("%d ranks, %s; %d block pairs per size, %.2f s per size and side%s\n", world,
                first_line_of_mpi_version().c_str(), opt.reps, opt.seconds,
                dist::comm_logging() ? "; comm logging ON (STRATA_COMM_LOG)" : "");
    if (world == 1) std::printf("one rank: nothing crosses a process; run it as mpirun -np 2 %s\n", argv[0]);
    std::printf(
        "us: median per call (slowest rank); diff, ratio: medians over neighbouring blocks; GB/s = 1e9 B/s\n"
        "strata runs with STRATA_DISTRIBUTED_DEBUG=%s; check us, check ratio: strata against strata with the "
        "checks OFF\n",
        level_name(level));
    std::printf("targets: ratio <= %.2f from %s up, diff <= %.1f us up to %s\n\n", kBandwidthTargetRatio,
                size_label(kBandwidthTargetMinBytes).c_str(), kLatencyTargetS * 1e6,
                size_label(kLatencyTargetMaxBytes).c_str());
    std::printf("%8s %8s | %10s %10s %9s %7s | %9s %7s | %12s %12s | %12s %12s | %s\n", "size", "calls", "strata us",
                "raw us", "diff us", "ratio", "check us", "check", "strata algbw", "strata busbw", "raw algbw",
                "raw busbw", "target");
  }

  int latency_pass = 0, latency_rows = 0, bandwidth_pass = 0, bandwidth_rows = 0;
  for (int64_t bytes = kMinBytes; bytes <= kMaxBytes; bytes *= kSizeStep) {
    const Timing t = time_size(bytes, opt, level);
    if (rank != 0) continue;
    const char* verdict = "-";
    if (bytes <= kLatencyTargetMaxBytes) {
      const bool pass = t.diff_s <= kLatencyTargetS;
      ++latency_rows;
      latency_pass += pass;
      verdict = pass ? "PASS (diff <= 1 us)" : "MISS (diff <= 1 us)";
    } else if (bytes >= kBandwidthTargetMinBytes) {
      const bool pass = t.ratio <= kBandwidthTargetRatio;
      ++bandwidth_rows;
      bandwidth_pass += pass;
      verdict = pass ? "PASS (ratio <= 1.03)" : "MISS (ratio <= 1.03)";
    }
    const double strata_algbw = bytes / t.strata_s / 1e9, raw_algbw = bytes / t.raw_s / 1e9;
    std::printf("%8s %8lld | %10.2f %10.2f %+9.2f %7.3f | %+9.3f %7.3f | %12.3f %12.3f | %12.3f %12.3f | %s\n",
                size_label(bytes).c_str(), static_cast<long long>(t.iters), t.strata_s * 1e6, t.raw_s * 1e6,
                t.diff_s * 1e6, t.ratio, t.check_s * 1e6, t.check_ratio, strata_algbw, strata_algbw * bus_factor,
                raw_algbw, raw_algbw * bus_factor, verdict);
    std::fflush(stdout);
  }
  if (rank == 0)
    std::printf("\nsummary: %s (%d/%d sizes >= %s within 3%%, %d/%d sizes <= %s within 1 us)\n",
                latency_pass + bandwidth_pass == latency_rows + bandwidth_rows ? "PASS" : "MISS", bandwidth_pass,
                bandwidth_rows, size_label(kBandwidthTargetMinBytes).c_str(), latency_pass, latency_rows,
                size_label(kLatencyTargetMaxBytes).c_str());
  dist::finalize();
  return 0;
}
