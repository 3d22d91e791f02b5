// strata_bench_ddp: the data-parallel training step of the Fashion-MNIST example's MLP
// (784-256-256-10, ReLU, cross entropy, SGD; batch 128 per rank) under nn::DistributedDataParallel,
// and how much of the gradient all-reduce backward hides.
//
//   mpirun -np 2 ./strata_bench_ddp [--steps S] [--reps R]
//
// Method. Three kinds of timed blocks of S back-to-back operations, interleaved R times (so load that
// comes and goes on a shared machine hits all three alike); each block's time is the slowest rank's,
// and the table shows medians over the R blocks:
//   step     a whole step: zero_grad, forward, loss, backward (with the bucketed all_reduces), SGD update;
//   compute  the same step with distributed::all_reduce_comm_off(true): every hook, copy and wait still
//            runs, but each all_reduce returns at once (the results are wrong; only the time matters);
//   comm     the step's all_reduces alone: one buffer per bucket, of the bucket's size and dtype, all
//            started async in bucket order and then waited, as the end of a backward does when nothing
//            overlapped: the all-reduce time without overlap.
// wait is how long the end of backward waits for the all_reduces: the time from the last gradient (a
// post-accumulate hook on the first layer's weight, registered after DDP's own) to the return of
// backward(), minus the same span in compute blocks (the write-back without communication). It is
// the smallest over the ranks: the rank that finishes its backward last waits for communication only,
// the others for it too (rank skew, which is not communication). hidden = 1 - wait / comm is the fraction of the all-reduce time
// that overlapped backward (clamped to [0, 1]). overhead = step - compute is what communication
// costs the step in all: the wait, plus rank skew and the CPU the progress thread takes from compute
// (Note [progress thread] in distributed/mpi/backend.cpp), which shows when ranks fill every core. With one
// rank nothing crosses a process, so hidden is not shown.
// --steps: operations per block (default 20); --reps: blocks of each kind (default 15).
// scripts/bench ddp runs it under mpirun -np 1 and -np 2, and benchmarks/ddp_torch.py, PyTorch's DDP the same way.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <strata/nn/activation.h>
#include <strata/nn/container.h>
#include <strata/nn/data_parallel.h>
#include <strata/nn/linear.h>
#include <strata/optim/sgd.h>
#include <strata/strata.h>

#include "bench_common.h"

namespace dist = strata::distributed;
namespace nn = strata::nn;
using strata::Tensor;

namespace {

constexpr int64_t kBatchPerRank = 128;
using strata_bench::Clock, strata_bench::kIn, strata_bench::kHidden, strata_bench::kClasses, strata_bench::kLr;
using strata_bench::median, strata_bench::seconds_since;

struct Options {
  int steps = 20;
  int reps = 15;
};

Options parse_options(int argc, char** argv) {
  Options opt;
  strata_bench::parse_flags(argc, argv, "usage: strata_bench_ddp [--steps S] [--reps R]",
                            {{"--steps", &opt.steps}, {"--reps", &opt.reps}});
  if (opt.steps < 1 || opt.reps < 1) throw std::invalid_argument("strata_bench_ddp: --steps and --reps must be >= 1");
  return opt;
}

// The ranks' largest (MAX) or smallest (MIN) `seconds`.
double across_ranks(double seconds, dist::ReduceOp op) {
  Tensor t = strata::full({1}, seconds, strata::kDouble);
  dist::all_reduce(t, op);
  return t.item<double>();
}

// Seconds per call of `n` back-to-back calls, on the slowest rank. Ranks start together.
template <class Op>
double seconds_per_call(const Op& op, int n) {
  dist::barrier();
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) op();
  return across_ranks(seconds_since(start) / n, dist::ReduceOp::MAX);
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
  const int rank = dist::get_rank(), world = dist::get_world_size();

  strata::manual_seed(0);
  nn::Sequential model(nn::Linear(kIn, kHidden), nn::ReLU(), nn::Linear(kHidden, kHidden), nn::ReLU(),
                       nn::Linear(kHidden, kClasses));
  nn::DistributedDataParallel ddp(model);
  strata::optim::SGD sgd(model->parameters(), strata::optim::SGDOptions(kLr));
  strata::Generator gen(100 + rank);
  const Tensor x = strata::randn({kBatchPerRank, kIn}, {}, &gen);
  const Tensor y = strata::randint(0, kClasses, {kBatchPerRank}, strata::kLong, &gen);
  // The span from the last gradient to the end of backward: DDP's wait and write-back (its hook ran first).
  Clock::time_point last_grad;
  model->parameters()[0].register_post_accumulate_grad_hook([&](const Tensor&) { last_grad = Clock::now(); });
  double tail_s = 0;  // summed over the steps of a block
  auto step = [&] {
    sgd.zero_grad();
    strata::cross_entropy(model(x), y).backward();
    tail_s += seconds_since(last_grad);
    sgd.step();
  };
  // Times a block of steps; `tails` gets the block's mean tail on the rank where it is shortest.
  auto timed_steps = [&](auto&& op, std::vector<double>& tails) {
    tail_s = 0;
    const double per_step = seconds_per_call(op, opt.steps);
    tails.push_back(across_ranks(tail_s / opt.steps, dist::ReduceOp::MIN));
    return per_step;
  };

  std::vector<Tensor> buffers;  // the buckets' buffers: gradients plus one flag per parameter
  for (const nn::DDPBucket& b : ddp.buckets())
    buffers.push_back(strata::zeros({b.numel + static_cast<int64_t>(b.parameter_names.size())}, b.dtype));
  auto comm = [&] {
    std::vector<std::shared_ptr<dist::Work>> works;
    for (const Tensor& b : buffers) works.push_back(dist::all_reduce(b, dist::ReduceOp::AVG, {}, /*async_op=*/true));
    for (const auto& w : works) w->wait();
  };
  auto compute = [&] {
    dist::all_reduce_comm_off(true);
    step();
    dist::all_reduce_comm_off(false);
  };

  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator caches, first-touch pages
  std::vector<double> step_s, compute_s, comm_s, step_tail_s, compute_tail_s;
  for (int rep = 0; rep < opt.reps; ++rep) {
    step_s.push_back(timed_steps(step, step_tail_s));
    compute_s.push_back(timed_steps(compute, compute_tail_s));
    comm_s.push_back(seconds_per_call(comm, opt.steps));
  }

  if (rank == 0) {
    const double t_step = median(step_s), t_compute = median(compute_s), t_comm = median(comm_s);
    const double wait = std::max(0.0, median(step_tail_s) - median(compute_tail_s));
    int64_t bytes = 0;
    for (const Tensor& b : buffers) bytes += static_cast<int64_t>(b.nbytes());
    std::printf(
        "DDP step, 784-256-256-10 MLP, batch %lld per rank, SGD; %zu buckets, %.2f MB all-reduced per step; "
        "medians of %d blocks of %d steps\n",
        static_cast<long long>(kBatchPerRank), buffers.size(), bytes / 1e6, opt.reps, opt.steps);
    std::printf("%5s | %8s %10s %11s %12s | %8s %8s %7s\n", "ranks", "step ms", "samples/s", "compute ms",
                "overhead ms", "comm ms", "wait ms", "hidden");
    const std::string hidden =
        world > 1 ? std::to_string(static_cast<int>(std::clamp(1 - wait / t_comm, 0.0, 1.0) * 100 + 0.5)) + "%" : "-";
    std::printf("%5d | %8.3f %10.0f %11.3f %12.3f | %8.3f %8.3f %7s\n", world, t_step * 1e3,
                world * kBatchPerRank / t_step, t_compute * 1e3, (t_step - t_compute) * 1e3, t_comm * 1e3, wait * 1e3,
                hidden.c_str());
    std::printf("step_ms=%.4f\n", t_step * 1e3);  // for scripts/bench's ratio to PyTorch's DDP
  }
  dist::finalize();
  return 0;
}
