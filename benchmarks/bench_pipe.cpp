// strata_bench_pipe: the pipeline's planning cost (schedules, validation, partitioning) and the engine's cost at
// run time (overhead per instruction, the measured bubble against the schedule's prediction).
//
//   strata_bench_pipe --part schedule              # no processes
//   strata_bench_pipe --part partition             # no processes
//   mpirun -np 4 strata_bench_pipe --part engine [--reps R]   # S = world size stages; -np 1: no p2p
//   mpirun -np 4 strata_bench_pipe --part bubble [--reps R]
//   mpirun -np 4 strata_bench_pipe --part schedules [--reps R] [--trace DIR]
//
// schedule: TrainSchedule (1F1B) generation alone (step(t) of every stage and step) and
//   validate_schedule("train", M, S) (which generates and checks every stage in lockstep), at several S x M;
//   time per stage-step = time / (S x steps) stays flat when the cost is linear in steps. Memory is the peak
//   resident set during the call minus the resident set before it (VmHWM reset through /proc/self/clear_refs,
//   with free heap trimmed first), so it counts what the call touched, not what earlier rows left behind.
// partition: 10,000 layers with seeded random weights into 512 stages, partition_balanced (exact) and
//   partition_uniform; the median time of repeated calls and each split's heaviest stage against the lower bound
//   max(heaviest layer, ceil(total / stages)).
// engine: S stages of one Linear(4, 4) each, many tiny micro-batches, so nearly all time is the engine's own.
//   From engine.timings(), per stage: overhead = (batch - forward - backward) / instructions; p2p = the mean
//   time of a Send/Recv instruction (blocking: it includes waiting for the peer); other = the mean time of
//   LoadMicroBatch, Reduce* and OptimizerStep; loop = the batch time outside every instruction (step
//   generation, clocks, the end-of-batch loss broadcast) per instruction. With 1 stage there is no p2p, so the
//   1-stage overhead is bookkeeping alone and the difference is what p2p adds; a ping-pong between neighbour
//   ranks gives the raw p2p latency next to it.
// bubble: S equal stages of 2 x (Linear(1024, 1024), tanh), micro-batches of 64 rows, M = 4, 8 and 16. Measured
//   bubble of a stage = 1 - (forward + backward seconds) / (batch seconds), from engine.timings(). Predicted:
//   the validator's (S - 1) / (M + S - 1) (every step one unit of time), and an event simulation of the
//   schedule's instruction streams (Note [bubble model]) with each stage's forward and backward CPU times
//   measured outside the pipeline, once with a processor per stage and once with the stages sharing this
//   machine's cores; both also predict the batch time.
// schedules: the bubble model trained with every pipelined training schedule of the registry (its own chunks) at
//   M = 2S; the batch time measured beside the validator's clock (strata-pipe simulate's) fed with that run's own
//   compute times per stage, chunk and kind, and beside Note [bubble model] with the stages sharing the machine's
//   cores; the ratios to 1F1B, predicted and measured, and measured over predicted.
// --reps: batches timed per figure in engine, bubble and schedules (default 5), after warm-up batches.
// --trace DIR: schedules writes DIR/<schedule>.json, the Chrome trace of each schedule's last timed batch
//   (PipelineEngine::write_trace: every rank's instructions, and its transfers in flight beside them).

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <strata/autograd/engine.h>
#include <strata/autograd/ops.h>
#include <strata/distributed/collectives.h>
#include <strata/nn/linear.h>
#include <strata/optim/sgd.h>
#include <strata/pipe/engine.h>
#include <strata/pipe/partition.h>
#include <strata/pipe/schedule.h>
#include <strata/pipe/schedule_validator.h>
#include <strata/tensor/creation.h>

#include "bench_common.h"

// Inside namespace strata, `pipe` names strata::pipe rather than POSIX's pipe().
namespace strata {
namespace {

namespace dist = distributed;
using Kind = pipe::PipeInstruction::Kind;

using strata_bench::Clock, strata_bench::median, strata_bench::seconds_since;

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// This process's CPU seconds so far.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Median CPU and wall seconds of f, run at least 3 times and again until 0.3 CPU seconds have gone (at most 1000
// runs). CPU time is the cost to compare on a shared machine: wall time also counts other processes' turns.
struct Cost {
  double cpu, wall;
};
template <class F>
Cost median_cost(F&& f) {
  std::vector<double> cpu, wall;
  double spent = 0;
  while (cpu.size() < 3 || (spent < 0.3 && cpu.size() < 1000)) {
    const double cpu_start = cpu_seconds();
    const auto start = Clock::now();
    f();
    wall.push_back(seconds_since(start));
    cpu.push_back(cpu_seconds() - cpu_start);
    spent += cpu.back();
  }
  return {median(cpu), median(wall)};
}

struct Options {
  std::string part;
  int reps = 5;
  std::string trace;  // schedules: a folder for each schedule's measured Chrome trace
};

Options parse_options(int argc, char** argv) {
  const std::string usage =
      "usage: strata_bench_pipe --part schedule|partition|engine|bubble|schedules [--reps R] [--trace DIR]";
  Options opt;
  strata_bench::parse_flags(argc, argv, usage, {{"--part", &opt.part}, {"--reps", &opt.reps}, {"--trace", &opt.trace}});
  if (opt.part != "schedule" && opt.part != "partition" && opt.part != "engine" && opt.part != "bubble" &&
      opt.part != "schedules")
    throw std::invalid_argument(usage + "; got --part '" + opt.part + "'");
  if (opt.reps < 1) throw std::invalid_argument("strata_bench_pipe: --reps must be >= 1");
  return opt;
}

// ---- schedule --------------------------------------------------------------------------------------------------

// A field of /proc/self/status in bytes (VmRSS, VmHWM), or -1 when it cannot be read.
double status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::atof(line.c_str() + field.size() + 1) * 1024;
  return -1;
}

// Runs f and returns how far the resident set rose above its size before, at its peak (0 when it never rose);
// nullopt where /proc cannot tell.
template <class F>
std::optional<double> peak_rss_growth(F&& f) {
  malloc_trim(0);  // free heap left by earlier work would otherwise hide this call's growth
  const double before = status_bytes("VmRSS");
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS
  const bool reset = before >= 0 && status_bytes("VmHWM") <= before + 64 * 1024;
  f();
  if (!reset) return std::nullopt;
  return std::max(0.0, status_bytes("VmHWM") - before);
}

void part_schedule() {
  struct Size {
    int stages, micro_batches;
  };
  const std::vector<Size> sizes = {{64, 512}, {1024, 2048}, {1024, 4096}, {1024, 8192}, {256, 8192}, {512, 8192}};
  std::printf(
      "TrainSchedule (1F1B): generation alone (step(t) of every stage and step) and validate_schedule(\"train\", "
      "M, S)\n(generation + lockstep check). ms: CPU time of the call (median of at least 3 runs), wall time next "
      "to it;\nns/st-stp = CPU time / (S x steps), flat when the cost is linear in steps; peak MB: the resident "
      "set's peak\nduring validation minus its size before; buffers: the stages' num_pipe_buffers() summed (the "
      "validator keeps\nO(buffers) state)\n");
  std::printf("%5s %5s %6s %9s %7s | %8s %9s | %8s %8s %9s %7s | %6s\n", "S", "M", "steps", "instr", "buffers",
              "gen ms", "ns/st-stp", "val ms", "wall ms", "ns/st-stp", "peak MB", "bubble");
  for (const Size& size : sizes) {
    const int S = size.stages, M = size.micro_batches;
    int64_t instructions = 0, buffers = 0;
    int steps = 0;
    const Cost generate = median_cost([&] {
      instructions = buffers = 0;
      for (int s = 0; s < S; ++s) {
        pipe::TrainSchedule sched(M, S, s);
        steps = sched.num_steps();
        buffers += sched.num_pipe_buffers();
        for (int t = 0; t < steps; ++t) instructions += sched.step(t).size();
      }
    });
    pipe::ScheduleReport report;
    Cost validate{};
    const std::optional<double> peak =
        peak_rss_growth([&] { validate = median_cost([&] { report = pipe::validate_schedule("train", M, S); }); });
    const double stage_steps = static_cast<double>(S) * steps;
    char peak_mb[16] = "?";
    if (peak) std::snprintf(peak_mb, sizeof peak_mb, "%.1f", *peak / 1e6);
    std::printf("%5d %5d %6d %9lld %7lld | %8.1f %9.1f | %8.1f %8.1f %9.1f %7s | %6.4f\n", S, M, steps,
                static_cast<long long>(instructions), static_cast<long long>(buffers), generate.cpu * 1e3,
                generate.cpu / stage_steps * 1e9, validate.cpu * 1e3, validate.wall * 1e3,
                validate.cpu / stage_steps * 1e9, peak_mb, report.bubble_fraction);
  }
}

// ---- partition -------------------------------------------------------------------------------------------------

void part_partition() {
  constexpr int kLayers = 10000, kStages = 512;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> weight(1, 1000000);
  std::vector<int64_t> weights(kLayers);
  for (int64_t& w : weights) w = weight(rng);
  int64_t total = 0;
  for (int64_t w : weights) total += w;
  const int64_t bound = std::max(*std::max_element(weights.begin(), weights.end()), (total + kStages - 1) / kStages);

  std::printf(
      "partitioning %d layers (weights uniform in [1, 1e6], seed 5) into %d stages; CPU time, median of "
      "repeated calls;\nlower bound on the heaviest stage = max(heaviest layer, ceil(total / stages)) = %lld;\n"
      "optimal: no split has a lighter heaviest stage (greedy packing under a cap 1 lighter needs more than %d "
      "stages)\n",
      kLayers, kStages, static_cast<long long>(bound), kStages);
  std::printf("%-20s %12s %16s %14s %9s\n", "", "us per call", "heaviest stage", "/ lower bound", "optimal");
  // The fewest stages any split needs when no stage may weigh more than cap (greedy filling is optimal for this).
  auto stages_needed = [&](int64_t cap) {
    int stages = 1;
    int64_t load = 0;
    for (int64_t w : weights) {
      if (w > cap) return kLayers + 1;
      if (load + w > cap) ++stages, load = 0;
      load += w;
    }
    return stages;
  };
  auto row = [&](const char* name, auto&& partition) {
    std::vector<int> parts;
    const double t = median_cost([&] { parts = partition(); }).cpu;
    pipe::check_partition(parts, kLayers, kStages, name);
    const std::vector<int64_t> w = pipe::part_weights(weights, parts);
    const int64_t heaviest = *std::max_element(w.begin(), w.end());
    std::printf("%-20s %12.1f %16lld %14.5f %9s\n", name, t * 1e6, static_cast<long long>(heaviest),
                static_cast<double>(heaviest) / bound, stages_needed(heaviest - 1) > kStages ? "yes" : "no");
  };
  row("partition_balanced", [&] { return pipe::partition_balanced(weights, kStages); });
  row("partition_uniform", [&] { return pipe::partition_uniform(kLayers, kStages); });
}

// ---- engine and bubble (under mpirun) ----------------------------------------------------------------------------

// "load average 1.23 on 2 cores": how much else wants the cores, which wall-time figures depend on.
std::string machine_load() {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  char text[64];
  std::snprintf(text, sizeof text, "load average %.2f on %u cores", load, std::thread::hardware_concurrency());
  return text;
}

// Every rank's `values` (the same count on each), rank-major; meaningful on every rank.
std::vector<double> gather(const std::vector<double>& values) {
  const int world = dist::get_world_size();
  Tensor mine = tensor(values, kDouble);
  Tensor all = empty({static_cast<int64_t>(values.size()) * world}, kDouble);
  dist::all_gather_into_tensor(all, mine);
  const double* p = all.data_ptr<double>();
  return {p, p + all.numel()};
}

// Always the same micro-batches, cycled: the engine draws M per batch on the first and last stage.
pipe::DataIterator cycling(std::vector<pipe::MicroBatch> batches) {
  auto next = std::make_shared<size_t>(0);
  auto all = std::make_shared<std::vector<pipe::MicroBatch>>(std::move(batches));
  return [next, all]() -> std::optional<pipe::MicroBatch> { return (*all)[(*next)++ % all->size()]; };
}

std::vector<pipe::MicroBatch> random_micro_batches(int count, int64_t rows, int64_t features, int64_t classes) {
  Generator gen(7);
  std::vector<pipe::MicroBatch> out;
  for (int i = 0; i < count; ++i)
    out.push_back({{randn({rows, features}, {}, &gen)}, {randint(classes, {rows}, kLong, &gen)}});
  return out;
}

struct Pipeline {
  std::unique_ptr<pipe::PipelineParallelGrid> grid;
  std::shared_ptr<pipe::PipelineModule> module;
  std::shared_ptr<optim::SGD> sgd;
};

// One stage per rank over `layers`, split uniformly (into chunks per stage, in a V when v_shape).
Pipeline make_pipeline(std::vector<pipe::Layer> layers, int chunks = 1, bool v_shape = false) {
  Pipeline p;
  p.grid = std::make_unique<pipe::PipelineParallelGrid>(dist::get_world_size());
  p.module = std::make_shared<pipe::PipelineModule>(std::move(layers), *p.grid,
                                                    pipe::PipelineModuleOptions{.partition_method = "uniform",
                                                                                .partition = {},
                                                                                .loss_fn = pipe::cross_entropy_loss,
                                                                                .seed_layers = true,
                                                                                .chunks = chunks,
                                                                                .v_shape = v_shape});
  p.sgd = std::make_shared<optim::SGD>(p.module->parameters(), optim::SGDOptions(1e-3));
  return p;
}

// How many instructions of each kind the schedule's stage runs in one batch.
std::vector<int> kind_counts(const pipe::PipeSchedule& sched) {
  std::vector<int> counts(pipe::PipeInstruction::kNumKinds, 0);
  for (int t = 0; t < sched.num_steps(); ++t)
    for (const pipe::PipeInstruction& ins : sched.step(t)) ++counts[ins.kind];
  return counts;
}

// Half the round trip of a one-float message between ranks 2k and 2k + 1, every pair at once (median of reps
// blocks of 200 round trips): the p2p latency the machine gives, next to the engine's Send/Recv instructions.
double ping_pong_seconds(int reps) {
  const int rank = dist::get_rank(), peer = rank ^ 1;
  const bool paired = peer < dist::get_world_size();
  Tensor t = zeros({1});
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    dist::barrier();
    const auto start = Clock::now();
    for (int i = 0; i < 200 && paired; ++i) {
      if (rank % 2 == 0)
        dist::send(t, peer), dist::recv(t, peer);
      else
        dist::recv(t, peer), dist::send(t, peer);
    }
    times.push_back(seconds_since(start) / 400);
  }
  return median(times);
}

void part_engine(int reps) {
  constexpr int kMicroBatches = 256;
  constexpr int64_t kRows = 2, kWidth = 4;
  const int S = dist::get_world_size();
  std::vector<pipe::Layer> layers;
  for (int s = 0; s < S; ++s) layers.push_back(pipe::LayerSpec::of<nn::Linear>(kWidth, kWidth));
  Pipeline p = make_pipeline(std::move(layers));
  pipe::PipelineEngine engine(p.module, *p.grid, p.sgd, {.micro_batches = kMicroBatches});
  const pipe::DataIterator data = cycling(random_micro_batches(kMicroBatches, kRows, kWidth, kWidth));
  const std::vector<int> counts = kind_counts(pipe::TrainSchedule(kMicroBatches, S, p.grid->get_stage_id()));
  int p2p_ops = 0, other_ops = 0;
  for (int k = 0; k <= Kind::OptimizerStep; ++k) {
    if (k == Kind::ForwardPass || k == Kind::BackwardPass) continue;
    const bool p2p = k >= Kind::SendActivation && k <= Kind::RecvGrad;
    (p2p ? p2p_ops : other_ops) += counts[k];
  }

  const double latency = S > 1 ? ping_pong_seconds(reps) : 0;
  for (int i = 0; i < 2; ++i) engine.train_batch(data);  // warm-up: allocator caches, metadata exchange
  std::vector<double> total, compute, overhead, p2p, other, loop;
  for (int rep = 0; rep < reps; ++rep) {
    engine.train_batch(data);
    const pipe::PipelineTimings& t = engine.timings();
    double p2p_s = 0, all_s = 0;
    for (int k = Kind::SendActivation; k <= Kind::RecvGrad; ++k) p2p_s += t.seconds[k];
    for (double s : t.seconds) all_s += s;
    const double n = static_cast<double>(t.instructions);
    total.push_back(t.total);
    compute.push_back(t.compute());
    overhead.push_back((t.total - t.compute()) / n);
    p2p.push_back(p2p_ops ? p2p_s / p2p_ops : 0);
    other.push_back((all_s - t.compute() - p2p_s) / other_ops);
    loop.push_back((t.total - all_s) / n);
  }
  const std::vector<double> all = gather({static_cast<double>(engine.timings().instructions), median(total),
                                          median(compute), median(overhead), median(p2p), median(other), median(loop)});
  if (dist::get_rank() != 0) return;
  std::printf(
      "engine overhead: %d stage%s (mpirun -np %d), one Linear(%lld, %lld) per stage, M = %d micro-batches of "
      "%lld rows, 1F1B;\nmedians of %d batches, %s; us per instruction of the stage (p2p: per "
      "Send/Recv,\nother: per Load/Reduce/OptimizerStep)\n",
      S, S > 1 ? "s" : "", S, static_cast<long long>(kWidth), static_cast<long long>(kWidth), kMicroBatches,
      static_cast<long long>(kRows), reps, machine_load().c_str());
  std::printf("%5s %6s %9s %11s | %12s | %7s %7s %7s\n", "stage", "instr", "batch ms", "fwd+bwd ms", "overhead us",
              "p2p us", "other", "loop");
  std::vector<double> overheads;
  for (int s = 0; s < S; ++s) {
    const double* v = &all[s * 7];
    overheads.push_back(v[3]);
    char p2p_us[16] = "-";
    if (S > 1) std::snprintf(p2p_us, sizeof p2p_us, "%.2f", v[4] * 1e6);
    std::printf("%5d %6.0f %9.2f %11.2f | %12.2f | %7s %7.2f %7.2f\n", s, v[0], v[1] * 1e3, v[2] * 1e3, v[3] * 1e6,
                p2p_us, v[5] * 1e6, v[6] * 1e6);
  }
  std::printf("mean overhead: %.2f us per instruction\n", mean(overheads) * 1e6);
  if (S > 1)
    std::printf(
        "raw p2p latency: %.2f us (half a ping-pong of one float between neighbour ranks, pairs at once). A "
        "Send/Recv\ninstruction also waits for its peer to get there, so with more ranks than free cores it "
        "mostly measures\nhow soon the OS runs the peer.\n",
        latency * 1e6);
}

// Note [bubble model]: each stage runs its instruction stream in order; a compute instruction takes the
// stage's measured CPU time for its kind (divided by the schedule's chunks), everything else none; a Send and
// the peer's matching Recv complete together, when the later of the two arrives (blocking p2p, no latency).
// This is the validator's clock (pipe::validate_schedule) plus one thing it leaves out: with `cores` shared by
// the stages, the k stages computing at a moment each progress at min(1, cores / k) (a waiting stage takes
// no CPU), so a computation takes longer in wall time while more stages compute than there are cores, as on
// an oversubscribed machine.
struct Simulated {
  double batch_seconds;        // the makespan
  std::vector<double> bubble;  // per stage: 1 - (wall seconds spent computing) / makespan
};
// `cost(s, ins)`: what compute instruction `ins` of stage s takes.
using CostOf = std::function<double(int, const pipe::PipeInstruction&)>;
Simulated simulate(const std::function<std::unique_ptr<pipe::PipeSchedule>(int)>& make_stage, int S, const CostOf& cost,
                   double cores) {
  struct Stream {
    std::vector<pipe::PipeInstruction> ins;
    size_t next = 0;
    double left = -1, busy = 0;  // left: work remaining in the current computation, -1 before it starts
  };
  std::vector<Stream> st(S);
  pipe::StageLayout layout;
  for (int s = 0; s < S; ++s) {
    const auto sched = make_stage(s);
    layout = sched->layout();
    for (const pipe::PipeStep& step : sched->steps()) st[s].ins.insert(st[s].ins.end(), step.begin(), step.end());
  }
  auto done = [&](int s) { return st[s].next == st[s].ins.size(); };
  auto at = [&](int s) { return st[s].ins[st[s].next]; };
  auto computing = [&](int s) { return !done(s) && pipe::is_compute(at(s).kind); };
  // The stage and instruction a p2p instruction of stage s meets.
  auto partner = [&](int s, const pipe::PipeInstruction& in) -> std::pair<int, pipe::PipeInstruction> {
    const int vs = layout.virtual_stage(s, in.chunk);
    const bool next = in.kind == Kind::SendActivation || in.kind == Kind::RecvGrad;
    const int peer_vs = next ? vs + 1 : vs - 1;
    const Kind want = in.kind == Kind::SendActivation   ? Kind::RecvActivation
                      : in.kind == Kind::RecvActivation ? Kind::SendActivation
                      : in.kind == Kind::SendGrad       ? Kind::RecvGrad
                                                        : Kind::SendGrad;
    return {layout.stage_of(peer_vs), {want, 0, static_cast<int16_t>(layout.chunk_of(peer_vs))}};
  };
  double now = 0;
  for (;;) {
    for (bool moved = true; moved;) {  // every zero-time instruction that can complete now
      moved = false;
      for (int s = 0; s < S; ++s) {
        while (!done(s) && !computing(s)) {
          if (pipe::is_p2p(at(s).kind)) {
            const auto [peer, want] = partner(s, at(s));
            if (done(peer) || at(peer).kind != want.kind || at(peer).chunk != want.chunk) break;
            ++st[peer].next;
          }
          ++st[s].next;
          moved = true;
        }
      }
    }
    std::vector<int> active;
    for (int s = 0; s < S; ++s)
      if (computing(s)) active.push_back(s);
    if (active.empty()) break;
    const double rate = std::min(1.0, cores / static_cast<double>(active.size()));
    int first = active[0];
    for (int s : active) {
      if (st[s].left < 0) st[s].left = cost(s, at(s));
      if (st[s].left < st[first].left) first = s;
    }
    const double dt = st[first].left / rate;
    now += dt;
    for (int s : active) {
      st[s].busy += dt;
      st[s].left -= dt * rate;
      if (s == first || st[s].left <= 1e-12) st[s].next++, st[s].left = -1;
    }
  }
  Simulated out{now, std::vector<double>(S)};
  for (int s = 0; s < S; ++s) {
    if (!done(s)) throw std::logic_error("bubble model: the schedule deadlocked");
    out.bubble[s] = 1 - st[s].busy / now;
  }
  return out;
}

// S stages of per_stage x (Linear(width, width), tanh).
std::vector<pipe::Layer> bubble_layers(int S, int64_t width, int per_stage) {
  std::vector<pipe::Layer> layers;
  for (int i = 0; i < S * per_stage; ++i) {
    layers.push_back(pipe::LayerSpec::of<nn::Linear>(width, width));
    layers.push_back([](const Tensor& x) { return tanh(x); });
  }
  return layers;
}

// The stage's forward and backward CPU seconds for one micro-batch outside the pipeline, as the engine runs them:
// the last stage's forward includes the loss, the others' backward starts from output grads. CPU time, so that
// ranks sharing a core do not count, and the least of 20 runs, as other load on the machine (a busy sibling
// hyperthread, evicted caches) only ever adds to it.
std::pair<double, double> stage_compute(pipe::PipelineModule& module, const pipe::MicroBatch& mb) {
  std::vector<double> fwd, bwd;
  const bool last = module.stage_id() == module.num_stages() - 1;
  for (int rep = 0; rep <= 20; ++rep) {
    Tensor x = mb.inputs[0];
    if (module.stage_id() > 0) x = randn(x.sizes()).requires_grad_(true);
    double start = cpu_seconds();
    tensor_list out = module.forward({x});
    Tensor loss = last ? module.compute_loss(out, mb.labels) : Tensor();
    if (rep > 0) fwd.push_back(cpu_seconds() - start);  // the first run warms the allocator
    start = cpu_seconds();
    autograd::backward(last ? tensor_list{loss} : out, last ? tensor_list{} : tensor_list{ones_like(out[0])});
    if (rep > 0) bwd.push_back(cpu_seconds() - start);
    module.zero_grad();
  }
  return {*std::min_element(fwd.begin(), fwd.end()), *std::min_element(bwd.begin(), bwd.end())};
}

void part_bubble(int reps) {
  constexpr int64_t kWidth = 1024, kRows = 64;
  constexpr int kLayersPerStage = 2;
  const int S = dist::get_world_size(), rank = dist::get_rank();
  Pipeline p = make_pipeline(bubble_layers(S, kWidth, kLayersPerStage));
  const std::vector<pipe::MicroBatch> batches = random_micro_batches(16, kRows, kWidth, kWidth);

  const std::pair<double, double> cost = stage_compute(*p.module, batches[0]);
  const std::vector<double> costs = gather({cost.first, cost.second});
  std::vector<double> forward(S), backward(S);
  for (int s = 0; s < S; ++s) forward[s] = costs[s * 2], backward[s] = costs[s * 2 + 1];
  const double cores = std::max(1u, std::thread::hardware_concurrency());

  if (rank == 0) {
    std::printf(
        "bubble: %d stages of %d x (Linear(%lld, %lld), tanh), micro-batches of %lld rows, 1F1B; medians of "
        "%d batches,\n%s\nforward / backward CPU ms per micro-batch outside the pipeline (least of 20):",
        S, kLayersPerStage, static_cast<long long>(kWidth), static_cast<long long>(kWidth),
        static_cast<long long>(kRows), reps, machine_load().c_str());
    for (int s = 0; s < S; ++s)
      std::printf(" stage %d %.2f / %.2f%s", s, forward[s] * 1e3, backward[s] * 1e3, s + 1 < S ? "," : "\n");
    std::printf("%3s | %-33s | %-38s | %-25s\n", "M", "predicted bubble", "measured bubble", "batch ms");
    std::printf("%3s | %10s %10s %11s | %7s  %-29s | %7s %7s %9s\n", "", "unit steps", "own cores", "shared", "mean",
                "per stage", "own", "shared", "measured");
  }
  for (int M : {4, 8, 16}) {
    pipe::PipelineEngine engine(p.module, *p.grid, p.sgd, {.micro_batches = M});
    const pipe::DataIterator data = cycling({batches.begin(), batches.begin() + M});
    engine.train_batch(data);  // warm-up
    std::vector<double> bubble, total;
    for (int rep = 0; rep < reps; ++rep) {
      engine.train_batch(data);
      bubble.push_back(1 - engine.timings().compute() / engine.timings().total);
      total.push_back(engine.timings().total);
    }
    const std::vector<double> measured = gather({median(bubble), median(total)});
    if (rank != 0) continue;
    std::vector<double> per_stage(S);
    std::string cells;
    double batch = 0;
    for (int s = 0; s < S; ++s) {
      per_stage[s] = measured[s * 2];
      batch = std::max(batch, measured[s * 2 + 1]);
      char cell[16];
      std::snprintf(cell, sizeof cell, "%s%.3f", s ? " " : "", per_stage[s]);
      cells += cell;
    }
    // The backward is one BackwardPass: its cost is B + W, here all of it in B.
    std::vector<pipe::ScheduleCosts> per_stage_costs;
    for (int s = 0; s < S; ++s) per_stage_costs.push_back({forward[s], backward[s], 0, 0});
    auto train = [&](int s) { return std::make_unique<pipe::TrainSchedule>(M, S, s); };
    const CostOf cost = [&](int s, const pipe::PipeInstruction& ins) { return per_stage_costs[s].of(ins.kind); };
    const Simulated own = simulate(train, S, cost, S), shared = simulate(train, S, cost, cores);
    std::printf("%3d | %10.3f %10.3f %11.3f | %7.3f  %-29s | %7.1f %7.1f %9.1f\n", M,
                pipe::validate_schedule("train", M, S).bubble_fraction, mean(own.bubble), mean(shared.bubble),
                mean(per_stage), cells.c_str(), own.batch_seconds * 1e3, shared.batch_seconds * 1e3, batch * 1e3);
  }
  if (rank == 0)
    std::printf(
        "unit steps: the validator's bubble, every step one unit of time. own cores: Note [bubble model] "
        "in\nbenchmarks/bench_pipe.cpp with the CPU times above and a processor per stage; shared: the same "
        "with\nthe stages sharing the %d cores. measured: 1 - (forward + backward) / batch seconds from "
        "engine.timings()\n(wall time), per stage and their mean; batch: the slowest stage's. With more ranks "
        "than cores, a rank's\nforward and backward take longer in wall time whenever other ranks hold the "
        "cores, so compare the measured\nbubble and batch time with the shared columns, not with own cores; "
        "and as a waiting rank still polls\n(MPI_Wait, even with mpi_yield_when_idle) where the model gives "
        "it no CPU, shared is a lower bound.\n",
        static_cast<int>(cores));
}

// schedules: the model of part_bubble trained with every schedule at M = 2S; per schedule the batch time
// measured beside the validator's clock fed with that run's own compute times: each stage's mean time per chunk
// and kind of compute instruction (from record_trace), so what is compared is the clock's model of the schedule
// and its overlapped transfers, not a calibration. To that the prediction adds the slowest stage's end-of-batch
// instructions (reductions, optimizer step). Also Note [bubble model] with the same times and the stages sharing
// this machine's cores.
void part_schedules(int reps, const std::string& trace_dir) {
  constexpr int64_t kWidth = 1024, kRows = 64;
  constexpr int kLayersPerStage = 2;
  constexpr int kComputeKinds = 4;  // ForwardPass, BackwardPass, BackwardInput, BackwardWeight
  const int S = dist::get_world_size(), M = 2 * S;
  const std::vector<pipe::MicroBatch> batches = random_micro_batches(M, kRows, kWidth, kWidth);
  const pipe::DataIterator data = cycling(batches);
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  auto compute_index = [](Kind k) {
    return k == Kind::ForwardPass ? 0 : k == Kind::BackwardPass ? 1 : k == Kind::BackwardInput ? 2 : 3;
  };

  if (dist::get_rank() == 0) {
    std::printf(
        "schedules: %d stages of %d x (Linear(%lld, %lld), tanh), M = %d micro-batches of %lld rows; medians of %d "
        "batches,\n%s\n",
        S, kLayersPerStage, static_cast<long long>(kWidth), static_cast<long long>(kWidth), M,
        static_cast<long long>(kRows), reps, machine_load().c_str());
    std::printf("%-14s | %10s %12s | %11s | %9s %9s | %10s\n", "schedule", "pred ms", "pred shared", "measured ms",
                "/1F1B pred", "/1F1B meas", "meas/pred");
  }
  double train_predicted = 0, train_measured = 0;
  for (const pipe::ScheduleEntry& entry : pipe::schedule_registry()) {
    if (!entry.training || !entry.pipelined || !entry.why_not(M, S, entry.chunks).empty()) continue;
    const std::string name(entry.name);
    Pipeline p = make_pipeline(bubble_layers(S, kWidth, kLayersPerStage), entry.chunks, entry.v_shape);
    pipe::PipelineEngine engine(p.module, *p.grid, p.sgd, {.micro_batches = M, .schedule = name, .record_trace = true});
    engine.train_batch(data);  // warm-up
    std::vector<double> total, tail;
    std::vector<double> sum(entry.chunks * kComputeKinds), count(sum.size());
    for (int rep = 0; rep < reps; ++rep) {
      engine.train_batch(data);
      const pipe::PipelineTimings& t = engine.timings();
      total.push_back(t.total);
      tail.push_back(t.seconds[Kind::ReduceTiedGrads] + t.seconds[Kind::ReduceGrads] + t.seconds[Kind::OptimizerStep]);
      for (const pipe::ExecutedInstruction& e : t.executed) {
        if (!pipe::is_compute(e.instruction.kind)) continue;
        const size_t i = e.instruction.chunk * kComputeKinds + compute_index(e.instruction.kind);
        sum[i] += e.end - e.start;
        ++count[i];
      }
    }
    if (!trace_dir.empty()) engine.write_trace(trace_dir + "/" + name + ".json");
    std::vector<double> mine{median(total), median(tail)};
    for (size_t i = 0; i < sum.size(); ++i) mine.push_back(count[i] > 0 ? sum[i] / count[i] : 0);
    const std::vector<double> all = gather(mine);
    const size_t fields = mine.size();
    double measured = 0, end_of_batch = 0;
    for (int s = 0; s < S; ++s) {
      measured = std::max(measured, all[s * fields]);
      end_of_batch = std::max(end_of_batch, all[s * fields + 1]);
    }
    const CostOf cost = [&](int s, const pipe::PipeInstruction& ins) {
      return all[s * fields + 2 + ins.chunk * kComputeKinds + compute_index(ins.kind)];
    };
    pipe::ValidateOptions options;
    options.compute_cost = cost;
    const double predicted = pipe::validate_schedule(name, M, S, options).time + end_of_batch;
    const Simulated shared = simulate([&](int s) { return pipe::make_schedule(name, M, S, s); }, S, cost, cores);
    if (name == "train") train_predicted = predicted, train_measured = measured;
    if (dist::get_rank() == 0)
      std::printf("%-14s | %10.1f %12.1f | %11.1f | %9.3f %9.3f | %10.3f\n", name.c_str(), predicted * 1e3,
                  (shared.batch_seconds + end_of_batch) * 1e3, measured * 1e3, predicted / train_predicted,
                  measured / train_measured, measured / predicted);
  }
  if (dist::get_rank() == 0)
    std::printf(
        "pred: the validator's clock (ValidateOptions::compute_cost) with each stage's mean time per chunk and kind of "
        "compute\ninstruction in that schedule's timed batches and free transfers, plus the slowest stage's "
        "reductions and optimizer\nstep. pred shared: Note [bubble model] with the same times and the stages "
        "sharing the %d cores. With more\nranks than cores compare the measured time with pred shared.\n",
        static_cast<int>(cores));
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::Options opt;
  try {
    opt = strata::parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  try {
    if (opt.part == "schedule") strata::part_schedule();
    if (opt.part == "partition") strata::part_partition();
    if (opt.part == "engine" || opt.part == "bubble" || opt.part == "schedules") {
      strata::distributed::init();
      if (opt.part == "engine") strata::part_engine(opt.reps);
      if (opt.part == "bubble") strata::part_bubble(opt.reps);
      if (opt.part == "schedules") strata::part_schedules(opt.reps, opt.trace);
      strata::distributed::finalize();
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata_bench_pipe: %s\n", e.what());
    return 1;
  }
}
