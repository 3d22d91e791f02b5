// strata_bench_attention: scaled_dot_product_attention's forward and backward at one sequence length, as
// benchmarks/attention_torch.py measures PyTorch's. One T per process, so that the peak memory is that T's:
// it prints the median time of --reps steps after one warm-up, and the peak resident memory the steps added
// to what the inputs took (VmHWM minus VmRSS before the first step, in MiB).
//
//   strata_bench_attention [--t T] [--batch B] [--heads H] [--dim D] [--causal 0|1] [--reps R] [--threads N]
//                          [--backward 0|1]
//
// Defaults: T 1024, B 8, H 8, D 64, causal, 3 reps, 1 thread, forward and backward (--backward 0: forward
// alone). scripts/bench attention runs T = 64 to 4096.

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/strata.h>

#include "bench_common.h"

namespace {

/// A line "Name:   123 kB" of /proc/self/status, in MiB.
double status_mib(const std::string& name) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(name + ":", 0) == 0) return std::stod(line.substr(name.size() + 1)) / 1024.0;
  throw std::runtime_error("strata_bench_attention: no " + name + " in /proc/self/status");
}

}  // namespace

int main(int argc, char** argv) try {
  int t = 1024, batch = 8, heads = 8, dim = 64, causal = 1, reps = 3, threads = 1, backward = 1;
  strata_bench::parse_flags(
      argc, argv,
      "usage: strata_bench_attention [--t T] [--batch B] [--heads H] [--dim D] [--causal 0|1] [--reps R] "
      "[--threads N] [--backward 0|1]",
      {{"--t", &t},
       {"--batch", &batch},
       {"--heads", &heads},
       {"--dim", &dim},
       {"--causal", &causal},
       {"--reps", &reps},
       {"--threads", &threads},
       {"--backward", &backward}});
  strata::set_num_threads(threads);
  using strata::Tensor;
  const Tensor q = strata::randn({batch, heads, t, dim}).requires_grad_(true);
  const Tensor k = strata::randn({batch, heads, t, dim}).requires_grad_(true);
  const Tensor v = strata::randn({batch, heads, t, dim}).requires_grad_(true);
  const Tensor grad = strata::randn({batch, heads, t, dim});
  const double base_mib = status_mib("VmRSS");
  std::vector<double> ms;
  for (int rep = 0; rep <= reps; ++rep) {
    const auto start = strata_bench::Clock::now();
    const Tensor y = strata::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, causal != 0);
    if (backward) y.backward(grad);
    if (rep > 0) ms.push_back(1e3 * strata_bench::seconds_since(start));
  }
  std::printf("strata T=%d ms=%.3f peak_mib=%.1f path=%s\n", t, strata_bench::median(ms),
              status_mib("VmHWM") - base_mib, strata::last_dispatch("scaled_dot_product_attention").c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
