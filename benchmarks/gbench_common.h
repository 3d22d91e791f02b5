#pragma once
// What strata_bench's two files (bench_strata.cpp, bench_torch.cpp) share on top of bench_common.h:
// how a case registers at 1 and 2 threads, and how it reports its FLOP rate.
//
//   BENCHMARK(matmul_strata)->Name("matmul_1024/strata")->Apply(at_1_and_2_threads);

#include <benchmark/benchmark.h>

namespace strata_bench {

/// Runs a case with state.range(0) = 1 and 2 threads, in real time, printed in milliseconds.
inline void at_1_and_2_threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
}

/// Reports `flops` floating-point operations per iteration as the rate counter FLOPS.
inline void set_flops(benchmark::State& state, double flops) {
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace strata_bench
