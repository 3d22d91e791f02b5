// The pipeline engine under mpirun -np 1, 2 and 4: for every stages x replicas layout that fills the world
// (2x1, 4x1, 2x2, and the pure data-parallel and single-stage ones), several steps of pipelined training
// give the same losses and parameters as single-process training on the whole batch, which every rank
// computes itself. The same with tied layers, activation checkpointing, the GPipe schedule and tuple
// activations holding integer and no-grad tensors, schedule files (strata's own, exported, and PyTorch's); then
// evaluation, checkpoints across stage counts, variable shapes and the errors.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <fstream>

#include <nlohmann/json.hpp>
#include <strata/optim/adam.h>
#include <strata/pipe/schedule_validator.h>

#include "forwarding_backend.h"
#include "pipe_training.h"
#include "shared_dir.h"

namespace dist = strata::distributed;
using namespace strata;
using namespace strata::testing::pipe_training;

TEST(PipeEngine, MatchesSingleProcessTrainingFloat64) { expect_matches_single_process({mlp_layers()}); }

TEST(PipeEngine, MatchesSingleProcessTrainingFloat32) { expect_matches_single_process({mlp_layers(), kFloat, 1e-5}); }

TEST(PipeEngine, MatchesWithTiedLayers) {
  expect_matches_single_process({tied_layers()});
  expect_matches_single_process({tied_layers(), kFloat, 1e-5});
}

TEST(PipeEngine, MatchesWithActivationCheckpointing) {
  expect_matches_single_process({.layers = mlp_layers(), .checkpoint_interval = 2});
  expect_matches_single_process({.layers = tied_layers(), .checkpoint_interval = 3});
}

TEST(PipeEngine, MatchesWithTheGPipeSchedule) {
  expect_matches_single_process({.layers = mlp_layers(), .schedule = "gpipe"});
  expect_matches_single_process({.layers = tied_layers(), .dtype = kFloat, .tolerance = 1e-5, .schedule = "gpipe"});
}

// Megatron's interleaving: the layers cut into stages x chunks pieces on the loop; p2p wraps from the last
// stage to the first between chunks.
TEST(PipeEngine, MatchesWithTheInterleavedSchedule) {
  expect_matches_single_process({.layers = deep_layers(false), .schedule = "interleaved", .chunks = 2});
  expect_matches_single_process({.layers = deep_layers(true), .schedule = "interleaved", .chunks = 2});
  expect_matches_single_process(
      {.layers = deep_layers(true), .dtype = kFloat, .tolerance = 1e-5, .schedule = "interleaved", .chunks = 2});
  expect_matches_single_process(
      {.layers = deep_layers(false), .schedule = "interleaved", .checkpoint_interval = 1, .chunks = 2});
}

// Zero bubble: BackwardInput now, BackwardWeight later, through autograd::backward_input.
TEST(PipeEngine, MatchesWithTheZeroBubbleH1Schedule) {
  expect_matches_single_process({.layers = mlp_layers(), .schedule = "zb-h1"});
  expect_matches_single_process({.layers = tied_layers(), .schedule = "zb-h1"});
  expect_matches_single_process({.layers = tied_layers(), .dtype = kFloat, .tolerance = 1e-5, .schedule = "zb-h1"});
  expect_matches_single_process({.layers = mlp_layers(), .schedule = "zb-h1", .checkpoint_interval = 2});
  expect_matches_single_process({.layers = tuple_layers(), .schedule = "zb-h1"});
}

// The V: stage 0 holds the first and the last piece (and the loss), the last stage turns around locally.
TEST(PipeEngine, MatchesWithTheZeroBubbleVSchedule) {
  expect_matches_single_process({.layers = deep_layers(false), .schedule = "zb-v", .chunks = 2, .v_shape = true});
  expect_matches_single_process({.layers = deep_layers(true), .schedule = "zb-v", .chunks = 2, .v_shape = true});
  expect_matches_single_process({.layers = deep_layers(true),
                                 .dtype = kFloat,
                                 .tolerance = 1e-5,
                                 .schedule = "zb-v",
                                 .chunks = 2,
                                 .v_shape = true});
  expect_matches_single_process(
      {.layers = deep_layers(false), .schedule = "zb-v", .checkpoint_interval = 1, .chunks = 2, .v_shape = true});
}

// The loop with B and W split: two chunks per stage, W filling the bubble.
TEST(PipeEngine, MatchesWithTheZeroBubbleInterleavedSchedule) {
  expect_matches_single_process({.layers = deep_layers(false), .schedule = "zb-interleaved", .chunks = 2});
  expect_matches_single_process({.layers = deep_layers(true), .schedule = "zb-interleaved", .chunks = 2});
  expect_matches_single_process(
      {.layers = deep_layers(true), .dtype = kFloat, .tolerance = 1e-5, .schedule = "zb-interleaved", .chunks = 2});
}

// DualPipeV: whole backwards paired with forwards of the other chunk, B and W split in the cool-down; it needs
// at least twice as many micro-batches as stages.
TEST(PipeEngine, MatchesWithTheDualPipeVSchedule) {
  for (const bool tied : {false, true})
    expect_matches_single_process({.layers = deep_layers(tied),
                                   .schedule = "dualpipe-v",
                                   .chunks = 2,
                                   .v_shape = true,
                                   .micro_batches = 2 * kMicroBatches});
  expect_matches_single_process({.layers = deep_layers(false),
                                 .schedule = "dualpipe-v",
                                 .checkpoint_interval = 1,
                                 .chunks = 2,
                                 .v_shape = true,
                                 .micro_batches = 2 * kMicroBatches});
}

// Every pipelined training schedule, exported as a file and read back by every rank, trains as one process.
TEST(PipeEngine, MatchesWithScheduleFiles) {
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("strata_schedule_files_" + std::to_string(::getpid()) + "_" + std::to_string(dist::get_rank())))
          .string();
  std::filesystem::create_directories(dir);
  for (const pipe::ScheduleEntry& entry : pipe::schedule_registry()) {
    if (!entry.training || !entry.pipelined) continue;
    // The fewest micro-batches from kMicroBatches up that the schedule takes on 4 stages, the most layouts() has.
    int M = kMicroBatches;
    while (!entry.why_not(M, 4, entry.chunks).empty()) ++M;
    auto file = [&](int stages) {
      const std::string path = dir + "/" + std::string(entry.name) + "_" + std::to_string(stages) + ".csv";
      std::ofstream(path) << pipe::ScheduleTable::from_schedule(entry.name, M, stages);
      return path;
    };
    const bool chunked = entry.chunks > 1;
    expect_matches_single_process({.layers = chunked ? deep_layers(true) : tied_layers(),
                                   .chunks = entry.chunks,
                                   .v_shape = entry.v_shape,
                                   .micro_batches = M,
                                   .schedule_file = file});
  }
  std::filesystem::remove_all(dir);
}

// The schedules of PyTorch's torch.distributed.pipelining, in the files PyTorch writes for them
// (tests/pipe/torch_schedules.py, run by CTest into $STRATA_TORCH_SCHEDULES), train as one process; where PyTorch
// writes a wrong schedule, reading it is an error on every rank.
TEST(PipeEngine, RunsPyTorchsScheduleFiles) {
  const char* dir = std::getenv("STRATA_TORCH_SCHEDULES");
  if (!dir || !std::filesystem::exists(std::string(dir) + "/layouts.txt"))
    GTEST_SKIP() << "no schedule files from PyTorch (STRATA_TORCH_SCHEDULES: " << (dir ? dir : "unset")
                 << "): PyTorch is not installed in the build's virtual environment";
  std::ifstream listing(std::string(dir) + "/layouts.txt");
  std::string name, placement;
  int chunks = 0, ran = 0;
  while (listing >> name >> chunks >> placement) {
    SCOPED_TRACE(name);
    const std::string base = std::string(dir) + "/" + name + "_S";
    if (name == "1f1b") {
      // PyTorch 2.15's Schedule1F1B lists its last rank's forwards as 1 to M, not 0 to M - 1 (its
      // _get_pipeline_order increments the micro-batch before the first steady-state forward).
      for (auto [stages, replicas] : layouts()) {
        pipe::PipelineParallelGrid grid(stages);
        auto model = std::make_shared<pipe::PipelineModule>(tied_layers(), grid, module_options());
        auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
        const std::string path = base + std::to_string(stages) + ".csv";
        EXPECT_THROW_MSG(
            pipe::PipelineEngine(model, grid, sgd, {.micro_batches = kMicroBatches, .schedule_file = path}),
            path + ": line ");
      }
      continue;
    }
    auto file = [&](int stages) {
      const std::string path = base + std::to_string(stages) + ".csv";
      if (!std::filesystem::exists(path)) {  // PyTorch refused the counts, and says why
        EXPECT_TRUE(std::filesystem::exists(base + std::to_string(stages) + ".refused")) << path;
      }
      return path;
    };
    bool every_file = true;
    for (auto [stages, replicas] : layouts()) every_file &= std::filesystem::exists(file(stages));
    if (!every_file) continue;
    expect_matches_single_process({.layers = chunks > 1 ? deep_layers(true) : tied_layers(),
                                   .chunks = chunks,
                                   .v_shape = placement == "v",
                                   .schedule_file = file});
    ++ran;
  }
  EXPECT_GE(ran, 4) << "every schedule but 1F1B (and DualPipeV where PyTorch refuses the counts) trains";
}

namespace {
// Checks each file of a sweep PyTorch 2.15 wrote (tests/pipe/torch_schedules.py) against strata's schedule `name`
// for the same shape: both reports at F = B = W = 1 and free transfers, PyTorch's order run by strata's planner
// from PyTorch's file. Files named *_v<chunks>.csv give the chunks. Rank 0 checks; skips where PyTorch did not
// write them.
void compare_with_pytorchs(
    const char* sweep, const char* name,
    const std::function<void(const pipe::ScheduleReport& mine, const pipe::ScheduleReport& pytorch)>& check) {
  const char* dir = std::getenv("STRATA_TORCH_SCHEDULES");
  if (!dir || !std::filesystem::exists(std::string(dir) + "/layouts.txt"))
    GTEST_SKIP() << "no schedule files from PyTorch (STRATA_TORCH_SCHEDULES: " << (dir ? dir : "unset")
                 << "): PyTorch is not installed in the build's virtual environment";
  if (dist::get_rank() != 0) return;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(dir) + "/" + sweep)) {
    const pipe::ScheduleTable theirs = pipe::ScheduleTable::load(entry.path().string());
    const int S = theirs.stages(), M = theirs.micro_batches();
    const std::string file = entry.path().stem().string();
    const size_t v = file.find("_v");
    const int chunks = v == std::string::npos ? 0 : std::stoi(file.substr(v + 2));
    SCOPED_TRACE(::testing::Message() << file);
    check(pipe::validate_schedule(name, M, S, {chunks, {}, {}}),
          pipe::validate_schedule([&](int s) { return theirs.schedule(s); }, S));
  }
}
}  // namespace

// zb-v is never slower than PyTorch's ZBV and never holds more, and is faster at some shapes, among them M = S.
// The test run's sweep is S <= 16 and a few shapes of 24 and 32 stages; a directory written with
// torch_schedules.py --zbv-stages 32 holds every shape up to 32 stages, and this test checks it the same way.
TEST(PipeSchedules, ZeroBubbleVIsAtOrBelowPyTorchs) {
  int shapes = 0, ahead = 0;
  compare_with_pytorchs("zbv", "zb-v", [&](const pipe::ScheduleReport& mine, const pipe::ScheduleReport& pytorch) {
    EXPECT_LE(mine.time, pytorch.time);
    EXPECT_LE(mine.peak_activations(), pytorch.peak_activations());
    if (mine.micro_batches == mine.stages) {
      EXPECT_LT(mine.time, pytorch.time);
    }
    ++shapes;
    ahead += mine.time < pytorch.time;
  });
  if (dist::get_rank() != 0 || IsSkipped()) return;
  EXPECT_GE(shapes, 420 + 12);
  EXPECT_GE(ahead, 68);
}

// The looped zero bubble never holds more than PyTorch's, and at 1F1B's peak (M a multiple of S) both reach the
// lower bound. Past that PyTorch's takes longer warm-ups, up to 3/4 of a stage more activations, to reach it;
// strata's stays at 1F1B's peak, within 0.65 (S - 1) of the bound.
TEST(PipeSchedules, ZeroBubbleInterleavedIsAtOrBelowPyTorchs) {
  int shapes = 0, same_memory = 0, more_memory = 0;
  compare_with_pytorchs("interleaved_zb", "zb-interleaved",
                        [&](const pipe::ScheduleReport& mine, const pipe::ScheduleReport& pytorch) {
                          EXPECT_LE(mine.peak_activations(), pytorch.peak_activations());
                          EXPECT_NEAR(pytorch.time, pytorch.lower_bound, 1e-9);
                          if (pytorch.peak_activations() <= mine.peak_activations()) {
                            EXPECT_LE(mine.time, pytorch.time + 1e-9);
                            ++same_memory;
                          } else {
                            EXPECT_LE(mine.time - mine.lower_bound, 0.65 * (mine.stages - 1) + 1e-9);
                            ++more_memory;
                          }
                          ++shapes;
                        });
  if (dist::get_rank() != 0 || IsSkipped()) return;
  EXPECT_EQ(shapes, 316);
  EXPECT_GT(same_memory, 0);
  EXPECT_GT(more_memory, 0);
}

// dualpipe-v takes PyTorch's DualPipeV's time at its memory.
TEST(PipeSchedules, DualPipeVIsPyTorchs) {
  int shapes = 0;
  compare_with_pytorchs("dualpipev", "dualpipe-v",
                        [&](const pipe::ScheduleReport& mine, const pipe::ScheduleReport& pytorch) {
                          EXPECT_NEAR(mine.time, pytorch.time, 1e-9);
                          EXPECT_EQ(mine.peak_activations(), pytorch.peak_activations());
                          ++shapes;
                        });
  if (dist::get_rank() != 0 || IsSkipped()) return;
  EXPECT_EQ(shapes, 77);
}

namespace {
using Seconds = std::chrono::duration<double>;
double now() { return Seconds(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A transfer of SlowLink: done once its inner ops are and `delay` has passed since it could start, the later of
// its own posting and (for a receive) the sender's, whose time travels with the data.
class DelayedWork final : public dist::Work {
 public:
  DelayedWork(std::vector<std::shared_ptr<dist::Work>> inner, double posted, double delay, Tensor sent_at = {})
      : inner_(std::move(inner)), posted_(posted), delay_(delay), sent_at_(std::move(sent_at)) {}
  bool is_completed() override {
    for (const auto& w : inner_)
      if (!w->is_completed()) return false;
    return now() >= ready();
  }
  void wait() override {
    for (const auto& w : inner_) w->wait();
    std::this_thread::sleep_for(Seconds(std::max(0.0, ready() - now())));
  }

 private:
  double ready() const { return std::max(posted_, sent_at_.defined() ? sent_at_.item<double>() : posted_) + delay_; }
  std::vector<std::shared_ptr<dist::Work>> inner_;
  double posted_, delay_;
  Tensor sent_at_;
};

// WORLD's MPI backend behind a link on which every transfer takes `delay` (the processes of one machine share
// the steady clock, so a sender's time means the same to the receiver). Each transfer is delayed on its own, so
// those in flight together overlap their delays: the validator's latency (ScheduleCosts::p2p), no bandwidth limit.
class SlowLink final : public strata::testing::ForwardingBackend {
 public:
  SlowLink(std::unique_ptr<dist::Backend> inner, double delay) : ForwardingBackend(std::move(inner)), delay_(delay) {}
  const char* name() const override { return "slow link"; }
  Op send(const Tensor& t, int dst, int tag, bool a) override {
    const double posted = now();
    Tensor stamp = full({1}, posted, kDouble);
    auto work = std::make_shared<DelayedWork>(
        std::vector<Op>{inner_->send(stamp, dst, tag + kStampTag, true), inner_->send(t, dst, tag, true)}, posted,
        delay_);
    if (!a) work->wait();
    return work;
  }
  Op recv(const Tensor& t, int src, int tag, bool a) override {
    Tensor stamp = empty({1}, kDouble);
    auto work = std::make_shared<DelayedWork>(
        std::vector<Op>{inner_->recv(stamp, src, tag + kStampTag, true), inner_->recv(t, src, tag, true)}, now(),
        delay_, stamp);
    if (!a) work->wait();
    return work;
  }

 private:
  static constexpr int kStampTag = 100;  // above the engine's tags
  double delay_;
};

// WORLD's MPI backend, but one whose receives must be posted in their turn, as NCCL's.
class InOrderReceives final : public strata::testing::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "in-order receives"; }
  bool receives_post_ahead() const override { return false; }
};

// A group of WORLD's ranks, with its own id, over a Link (a ForwardingBackend) made of WORLD's backend and `args`.
template <class Link, class... Args>
dist::Group forwarding_group(int id, Args... args) {
  const dist::Group& world = dist::get_world_group();
  dist::Backends backends;
  backends[static_cast<size_t>(kCPU)] =
      std::make_unique<Link>(world->backend(kCPU, "test").split(world->rank()), args...);
  return std::make_shared<dist::ProcessGroup>(id, world->ranks(), world->rank(), std::move(backends));
}

// A group whose transfers travel over a SlowLink of `delay`.
dist::Group slow_link_group(int id, double delay) { return forwarding_group<SlowLink>(id, delay); }
}  // namespace

// A Chrome trace as write_trace wrote it: its rows, its slices, and whether every row's slices nest (trace viewers
// drop slices of one row that overlap; the JSON keeps 6 significant digits).
struct ParsedTrace {
  int rows = 0, slices = 0;
  bool nested = true;
  nlohmann::json events;
};
ParsedTrace parse_trace(const std::string& path) {
  ParsedTrace out;
  out.events = nlohmann::json::parse(std::ifstream(path)).at("traceEvents");
  std::map<int, std::vector<std::pair<double, double>>> by_row;  // (start, end) of each slice, per row
  for (const nlohmann::json& e : out.events) {
    if (e.at("ph") == "M") {
      ++out.rows;
      continue;
    }
    ++out.slices;
    const double ts = e.at("ts").get<double>();
    by_row[e.at("tid").get<int>()].emplace_back(ts, ts + e.at("dur").get<double>());
  }
  for (auto& [row, spans] : by_row) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      out.nested &= spans[i - 1].second <= spans[i].first + 1e-5 * spans[i].first + 1e-3;
  }
  return out;
}

// Transfers overlap compute: over a link on which every transfer takes 20 ms, 2-stage 1F1B with early receives
// pays one round trip per two micro-batches, M transfers in all for an even M, as the validator's clock predicts
// with that latency and no compute (ScheduleValidator.EarlyReceivesLetTwoMicroBatchesShareARoundTrip), not the
// M + 1 of receives posted in their turn, nor the 2M and more of an engine that blocks on each transfer where the
// schedule names it.
TEST(PipeEngine, TransfersOverlapCompute) {
  if (dist::get_world_size() != 2) GTEST_SKIP() << "two stages on two ranks";
  constexpr double kDelay = 0.02;
  constexpr int M = 8;
  const dist::Group slow = slow_link_group(1001, kDelay);
  pipe::PipelineParallelGrid grid(2);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  model->to(kDouble);
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = M, .p2p_group = slow});
  auto [x, y] = whole_batch(0, 1, kDouble, kRows, M);
  engine.train_batch(micro_batches(x, y, 0, kRows, M));  // the first batch also sends the metadata
  engine.train_batch(micro_batches(x, y, 0, kRows, M));
  Tensor times = tensor({engine.timings().total, engine.timings().compute()});
  dist::all_reduce(times, dist::ReduceOp::MAX);
  const double total = times[0].item<double>(), compute = times[1].item<double>();
  RecordProperty("batch_ms", std::to_string(total * 1e3));
  RecordProperty("compute_ms", std::to_string(compute * 1e3));
  const double predicted = pipe::validate_schedule("train", M, 2, {0, {0, 0, 0, /*p2p=*/kDelay}, {}}).time;
  ASSERT_NEAR(predicted, M * kDelay, 1e-12);
  EXPECT_GT(total, predicted) << "compute " << compute;
  EXPECT_LT(total, predicted + 2 * compute + 4 * kDelay) << "compute " << compute;
  EXPECT_LT(total, 2 * M * kDelay) << "compute " << compute;
}

// A 10 ms link and 5 ms of compute in each stage's forward, GPipe: the measured trace shows stage 0 computing the
// next forwards while the activations of the last are in flight, which a transfer that blocks where the schedule
// names it never is.
TEST(PipeEngine, TraceShowsTransfersInFlightDuringCompute) {
  if (dist::get_world_size() != 2) GTEST_SKIP() << "two stages on two ranks";
  constexpr double kDelay = 0.01, kCompute = 0.005;
  constexpr int M = 8;
  const dist::Group slow = slow_link_group(1002, kDelay);
  const pipe::Layer busy = [](const Tensor& x) {
    for (const double until = now() + kCompute; now() < until;) {
    }
    return x;
  };
  std::vector<pipe::Layer> layers = mlp_layers();
  layers.insert(layers.begin(), busy);
  layers.push_back(busy);  // one on each stage
  pipe::PipelineParallelGrid grid(2);
  auto model = std::make_shared<pipe::PipelineModule>(layers, grid, module_options());
  model->to(kDouble);
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd,
                              {.micro_batches = M, .schedule = "gpipe", .p2p_group = slow, .record_trace = true});
  auto [x, y] = whole_batch(0, 1, kDouble, kRows, M);
  engine.train_batch(micro_batches(x, y, 0, kRows, M));
  engine.train_batch(micro_batches(x, y, 0, kRows, M));
  const std::vector<pipe::ExecutedInstruction>& transfers = engine.timings().transfers;
  int overlapped = 0;
  for (const pipe::ExecutedInstruction& e : engine.timings().executed)
    overlapped += e.instruction.kind == pipe::PipeInstruction::ForwardPass &&
                  std::any_of(transfers.begin(), transfers.end(),
                              [&](const pipe::ExecutedInstruction& t) { return t.start < e.start && e.end < t.end; });
  // In the merged trace stage 0's sends take two rows, as two are in flight at once, and each row nests.
  const std::string path = (std::filesystem::temp_directory_path() / "strata_pipe_overlap_trace.json").string();
  engine.write_trace(path);
  if (grid.get_stage_id() > 0) return;
  RecordProperty("overlapped_forwards", overlapped);
  EXPECT_GE(overlapped, M / 2) << "of " << M << " forwards";
  const ParsedTrace trace = parse_trace(path);
  EXPECT_GE(trace.rows, 5);  // rank 0: instructions and two rows of transfers; rank 1: instructions, transfers
  EXPECT_TRUE(trace.nested);
  std::filesystem::remove(path);
}

// Note [early receives]: over MPI a stage posts each receive before the compute that comes before it in its stream
// (a RecvActivation one micro-batch ahead, a RecvGrad once its outputs were sent), so the message can move during
// that compute; over a backend whose receives must wait their turn (NCCL's), each is posted at its instruction.
// Both train as before (PipeEngine.*EqualsOneProcess cover every schedule over MPI).
TEST(PipeEngine, ReceivesArePostedAheadWhereTheBackendAllows) {
  if (dist::get_world_size() != 2) GTEST_SKIP() << "two stages on two ranks";
  constexpr int M = 4;
  for (const bool ahead : {true, false}) {
    SCOPED_TRACE(ahead ? "MPI" : "in-order receives");
    const dist::Group group = ahead ? dist::Group() : forwarding_group<InOrderReceives>(1003);
    pipe::PipelineParallelGrid grid(2);
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    model->to(kDouble);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
    pipe::PipelineEngine engine(model, grid, sgd,
                                {.micro_batches = M, .schedule = "train", .p2p_group = group, .record_trace = true});
    auto [x, y] = whole_batch(0, 1, kDouble, kRows, M);
    engine.train_batch(micro_batches(x, y, 0, kRows, M));
    engine.train_batch(micro_batches(x, y, 0, kRows, M));  // the first batch's first receive learns the shapes
    // Each receive against the last compute before it in the stream: posted before it started, or after it ended.
    int early = 0, in_turn = 0, receives = 0;
    const std::vector<pipe::ExecutedInstruction>& executed = engine.timings().executed;
    for (const pipe::ExecutedInstruction& t : engine.timings().transfers) {
      if (!pipe::is_receive(t.instruction.kind)) continue;
      auto own = std::find_if(executed.begin(), executed.end(), [&](const pipe::ExecutedInstruction& e) {
        return e.instruction == t.instruction && e.step == t.step;
      });
      ASSERT_NE(own, executed.end());
      auto compute =
          std::find_if(std::make_reverse_iterator(own), executed.rend(),
                       [](const pipe::ExecutedInstruction& e) { return pipe::is_compute(e.instruction.kind); });
      if (compute == executed.rend()) continue;
      ++receives;
      early += t.start < compute->start;
      in_turn += t.start >= compute->end;
    }
    // Stage 1 receives M activations, M - 1 of them ahead; stage 0 receives M gradients, each ahead of the forward
    // or backward that comes between its send and its receive.
    EXPECT_EQ(receives, grid.get_stage_id() == 0 ? M : M - 1);
    EXPECT_EQ(early, ahead ? receives : 0);
    EXPECT_EQ(in_turn, ahead ? 0 : receives);
  }
}

// record_trace keeps every instruction as it ran, in schedule order; write_trace merges every rank's into one
// Chrome trace.
TEST(PipeEngine, TraceRecordsWhatEveryRankExecuted) {
  for (auto [stages, replicas] : layouts()) {
    SCOPED_TRACE(::testing::Message() << stages << " stages x " << replicas << " replicas");
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    model->to(kDouble);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
    pipe::PipelineEngine engine(model, grid, sgd,
                                {.micro_batches = kMicroBatches, .schedule = "zb-h1", .record_trace = true});
    auto [x, y] = whole_batch(0, replicas, kDouble);
    engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));

    const std::vector<pipe::ExecutedInstruction>& executed = engine.timings().executed;
    const pipe::ZeroBubbleH1Schedule schedule(kMicroBatches, stages, grid.get_stage_id());
    size_t k = 0;
    for (int t = 0; t < schedule.num_steps(); ++t)
      for (const pipe::PipeInstruction& ins : schedule.step(t)) {
        ASSERT_LT(k, executed.size());
        const pipe::ExecutedInstruction& e = executed[k++];
        EXPECT_EQ(e.instruction, ins);
        EXPECT_EQ(e.step, t);
        EXPECT_LE(e.start, e.end);
        if (k > 1) {
          EXPECT_LE(executed[k - 2].end, e.start);
        }
        // The planned schedules name buffers by micro-batch.
        EXPECT_EQ(e.micro_batch, ins.has_buffer() ? ins.buffer_id : -1) << ins;
      }
    EXPECT_EQ(k, executed.size());
    // Each Send and Recv's transfers, in the order posted (a receive may come early: Note [early receives]).
    const std::vector<pipe::ExecutedInstruction>& transfers = engine.timings().transfers;
    size_t p2p = 0;
    for (const pipe::ExecutedInstruction& e : executed) {
      if (!pipe::is_p2p(e.instruction.kind)) continue;
      ++p2p;
      auto t = std::find_if(transfers.begin(), transfers.end(), [&](const pipe::ExecutedInstruction& t) {
        return t.instruction == e.instruction && t.step == e.step;
      });
      ASSERT_NE(t, transfers.end()) << e.instruction << " at step " << e.step;
      EXPECT_EQ(t->micro_batch, e.micro_batch);
      EXPECT_LE(t->start, e.end);  // posted by the end of the instruction (its start leaves out what it waited)
      EXPECT_LE(t->start, t->end);
    }
    EXPECT_EQ(p2p, transfers.size());
    for (size_t j = 1; j < transfers.size(); ++j) EXPECT_LE(transfers[j - 1].start, transfers[j].start);

    const std::string path = (std::filesystem::temp_directory_path() /
                              ("strata_pipe_trace_" + std::to_string(dist::get_world_size()) + ".json"))
                                 .string();
    engine.write_trace(path);
    Tensor total = tensor({static_cast<int64_t>(executed.size() + transfers.size())});
    dist::all_reduce(total);
    if (dist::get_rank() == 0) {
      const ParsedTrace trace = parse_trace(path);
      bool stage0_input_grad = false;
      for (const nlohmann::json& e : trace.events) {
        if (e.at("ph") == "M") continue;
        EXPECT_GE(e.at("ts").get<double>(), 0.0);
        stage0_input_grad |= e.at("name") == "BI0" && e.at("tid") == 0;
      }
      // Each rank's instructions, and with stages to talk to, its transfers in as many rows as keep them nested.
      EXPECT_GE(trace.rows, (stages > 1 ? 2 : 1) * dist::get_world_size());
      EXPECT_EQ(trace.slices, total.item<int64_t>());
      EXPECT_TRUE(trace.nested);
      EXPECT_TRUE(stage0_input_grad);
      std::filesystem::remove(path);
    }
    dist::barrier();
  }
}

TEST(PipeEngine, MatchesWithTupleActivationsOfIntegerAndNoGradTensors) {
  expect_matches_single_process({tuple_layers()});
}

TEST(PipeEngine, EvalBatchMatchesSingleProcessAndReturnsOutputsOnTheLastStage) {
  struct Chunking {
    int chunks;
    bool v_shape;
    const char* schedule;
  };
  // One chunk runs DeepSpeed's InferenceSchedule, more a ForwardSchedule over the module's layout.
  for (const Chunking& chunking :
       {Chunking{1, false, "train"}, Chunking{2, false, "interleaved"}, Chunking{2, true, "zb-v"}})
    for (auto [stages, replicas] : layouts()) {
      SCOPED_TRACE(::testing::Message() << stages << " stages, " << chunking.schedule);
      pipe::PipelineParallelGrid grid(stages);
      const std::vector<pipe::Layer> layers = chunking.chunks == 1 ? mlp_layers() : deep_layers(false);
      auto model =
          std::make_shared<pipe::PipelineModule>(layers, grid, module_options(0, chunking.chunks, chunking.v_shape));
      model->to(kDouble);
      pipe::PipelineEngine engine(model, grid,
                                  std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)),
                                  {.micro_batches = kMicroBatches, .schedule = chunking.schedule});
      pipe::PipelineModule reference(layers, 1, 0, module_options());
      reference.to(kDouble);

      auto [x, y] = whole_batch(0, replicas, kDouble);
      std::vector<tensor_list> outputs;
      const double loss = engine.eval_batch(micro_batches(x, y, grid.get_data_parallel_id()), &outputs);
      Tensor logits = reference.forward({x})[0];
      EXPECT_NEAR(loss, reference.compute_loss({logits}, {y}).item<double>(), 1e-12);
      EXPECT_FALSE(model->is_training());
      // The stage holding the model's last piece: the last stage, or the first in a V.
      const pipe::StageLayout& layout = model->layout();
      if (grid.get_stage_id() != layout.stage_of(layout.num_virtual_stages() - 1)) {
        EXPECT_TRUE(outputs.empty());
        continue;
      }
      ASSERT_EQ(outputs.size(), size_t{kMicroBatches});
      for (int k = 0; k < kMicroBatches; ++k) {
        const int64_t start = (grid.get_data_parallel_id() * kMicroBatches + k) * kRows;
        EXPECT_ALLCLOSE(outputs[k].at(0), logits.narrow(0, start, kRows), 1e-12, 1e-12);
        EXPECT_FALSE(outputs[k].at(0).requires_grad());
      }
    }
}

// Without seed_layers every rank initialises differently; the engine starts each replica from replica 0's values.
TEST(PipeEngine, ReplicasStartFromReplicaZero) {
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    pipe::PipelineModuleOptions options = module_options();
    options.seed_layers = false;
    manual_seed(1000 + dist::get_rank());
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, options);
    pipe::PipelineEngine engine(model, grid, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
    for (const Tensor& p : model->parameters()) {
      Tensor low = p.detach().clone(), high = p.detach().clone();
      dist::all_reduce(low, dist::ReduceOp::MIN, grid.get_data_parallel_group());
      dist::all_reduce(high, dist::ReduceOp::MAX, grid.get_data_parallel_group());
      EXPECT_TRUE(strata::testing::same_tensor(low, high)) << stages << " stages x " << replicas << " replicas";
    }
  }
}

// Trained in every layout, saved, then loaded into one process: the same parameters as training there.
TEST(PipeEngine, CheckpointsLoadIntoAnyNumberOfStages) {
  const strata::testing::SharedTempDir shared("strata_pipe_ckpt");
  const std::string& dir = shared.path();
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(tied_layers(), grid, module_options());
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches});
    auto [x, y] = whole_batch(0, replicas, kFloat);
    engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
    engine.save_checkpoint(dir);

    pipe::PipelineModule whole(tied_layers(), 1, 0, module_options());
    whole.load_state_dir(dir);
    EXPECT_EQ(max_relative_error(*model, whole), 0);

    // The same layout resumes with its optimizer state: one more step on both gives the same values.
    auto model2 = std::make_shared<pipe::PipelineModule>(tied_layers(), grid, module_options());
    auto sgd2 = std::make_shared<optim::SGD>(model2->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine2(model2, grid, sgd2, {.micro_batches = kMicroBatches});
    engine2.load_checkpoint(dir);
    auto [x1, y1] = whole_batch(1, replicas, kFloat);
    EXPECT_EQ(engine.train_batch(micro_batches(x1, y1, grid.get_data_parallel_id())),
              engine2.train_batch(micro_batches(x1, y1, grid.get_data_parallel_id())));
    EXPECT_EQ(max_relative_error(*model2, *model), 0);
  }
}

// Universal checkpoints: 2 steps of AdamW in one layout (every stage of this world in a V), saved; then 2 more
// in every other layout, with and without chunks, and in one process: each equals 4 uninterrupted steps of one
// process, optimizer state included. The global batch stays 16 rows: replicas take 4 / D rows per micro-batch.
TEST(PipeEngine, UniversalCheckpointsResumeInAnyLayout) {
  constexpr int64_t kGlobalRows = 4;  // rows per micro-batch with one replica
  const strata::testing::SharedTempDir shared("strata_pipe_universal");
  const std::string& dir = shared.path();
  const std::vector<pipe::Layer> layers = deep_layers(true);
  const optim::AdamWOptions adamw = optim::AdamWOptions(0.01).weight_decay(0.1);
  auto batch = [](int step) { return whole_batch(step, 1, kDouble, kGlobalRows); };

  pipe::PipelineModule reference(layers, 1, 0, module_options());
  reference.to(kDouble);
  optim::AdamW reference_adamw(reference.parameters(), adamw);
  std::vector<double> reference_losses;
  for (int step = 0; step < 4; ++step) {
    auto [x, y] = batch(step);
    reference_adamw.zero_grad();
    Tensor loss = reference.compute_loss(reference.forward({x}), {y});
    loss.backward();
    reference_adamw.step();
    reference_losses.push_back(loss.item<double>());
  }

  {
    const int stages = dist::get_world_size();
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(layers, grid, module_options(0, 2, true));
    model->to(kDouble);
    auto opt = std::make_shared<optim::AdamW>(model->parameters(), adamw);
    pipe::PipelineEngine engine(model, grid, opt, {.micro_batches = kMicroBatches, .schedule = "zb-v"});
    for (int step = 0; step < 2; ++step) {
      auto [x, y] = batch(step);
      EXPECT_NEAR(engine.train_batch(micro_batches(x, y, 0, kGlobalRows)), reference_losses[step],
                  1e-12 * reference_losses[step]);
    }
    engine.save_checkpoint(dir);
  }

  struct Resume {
    const char* schedule;
    int chunks;
    bool v_shape;
  };
  for (auto [stages, replicas] : layouts())
    for (const Resume& r : {Resume{"train", 1, false}, Resume{"interleaved", 2, false}, Resume{"zb-h1", 1, false}}) {
      if (kGlobalRows % replicas != 0) continue;  // at 8 replicas a micro-batch would have no rows
      SCOPED_TRACE(::testing::Message() << stages << " stages x " << replicas << " replicas, " << r.schedule);
      pipe::PipelineParallelGrid grid(stages);
      manual_seed(7);  // other starting values than the saved run's: the load must replace them all
      auto model = std::make_shared<pipe::PipelineModule>(layers, grid, module_options(0, r.chunks, r.v_shape));
      model->to(kDouble);
      auto opt = std::make_shared<optim::AdamW>(model->parameters(), adamw);
      pipe::PipelineEngine engine(model, grid, opt, {.micro_batches = kMicroBatches, .schedule = r.schedule});
      engine.load_checkpoint(dir);
      const int64_t rows = kGlobalRows / replicas;
      for (int step = 2; step < 4; ++step) {
        auto [x, y] = batch(step);
        EXPECT_NEAR(engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id(), rows)), reference_losses[step],
                    1e-12 * reference_losses[step])
            << "step " << step;
      }
      EXPECT_LE(max_relative_error(*model, reference), 1e-12);
    }

  // One process: the whole model and its optimizer from the same files.
  pipe::PipelineModule whole(layers, 1, 0, module_options());
  whole.to(kDouble);
  optim::AdamW whole_adamw(whole.parameters(), adamw);
  whole.load_state_dir(dir);
  pipe::load_optimizer_states(dir, whole, whole_adamw);
  for (int step = 2; step < 4; ++step) {
    auto [x, y] = batch(step);
    whole_adamw.zero_grad();
    whole.compute_loss(whole.forward({x}), {y}).backward();
    whole_adamw.step();
  }
  EXPECT_LE(max_relative_error(whole, reference), 1e-12);
}

// Micro-batches of 3 rows, then of 2: the shapes travel again when they change.
TEST(PipeEngine, DynamicShapesLetActivationsChangeBetweenBatches) {
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    model->to(kDouble);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches, .dynamic_shapes = true});
    pipe::PipelineModule reference(mlp_layers(), 1, 0, module_options());
    reference.to(kDouble);
    optim::SGD reference_sgd(reference.parameters(), optim::SGDOptions(0.1));
    for (int64_t rows : {3, 2, 2, 4}) {
      auto [x, y] = whole_batch(static_cast<int>(rows), replicas, kDouble, rows);
      const double loss = engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id(), rows));
      reference_sgd.zero_grad();
      Tensor reference_loss = reference.compute_loss(reference.forward({x}), {y});
      reference_loss.backward();
      reference_sgd.step();
      EXPECT_NEAR(loss, reference_loss.item<double>(), 1e-12);
    }
    EXPECT_LE(max_relative_error(*model, reference), 1e-12);
  }
}

// Without dynamic_shapes, a change is an error on both sides of the transfer (layouts of two stages, where
// every rank is on one side).
TEST(PipeEngine, ShapeChangeWithoutDynamicShapesIsAnErrorOnBothSides) {
  if (dist::get_world_size() % 2 != 0) GTEST_SKIP() << "needs an even world size for two stages";
  pipe::PipelineParallelGrid grid(2);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches});
  const int replicas = grid.get_data_parallel_world_size();
  auto [x, y] = whole_batch(0, replicas, kFloat);
  engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
  auto [x2, y2] = whole_batch(1, replicas, kFloat, 2);
  EXPECT_THROW_MSG(engine.train_batch(micro_batches(x2, y2, grid.get_data_parallel_id(), 2)),
                   "the activations stage 0 sends to stage 1 changed from [Float [3, 12] grad] to "
                   "[Float [2, 12] grad] at micro-batch 0; set PipelineEngineOptions::dynamic_shapes = true");
  dist::barrier();
}

// Layouts of one stage only: there every rank draws from its iterator, so every rank sees the error.
TEST(PipeEngine, DataIteratorThatRunsDryIsAnError) {
  pipe::PipelineParallelGrid grid(1);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches});
  auto [x, y] = whole_batch(0, 1, kFloat);
  auto three = [it = micro_batches(x, y, 0), n = 0]() mutable -> std::optional<pipe::MicroBatch> {
    return n++ < 3 ? it() : std::nullopt;
  };
  EXPECT_THROW_MSG(engine.train_batch(three), "the data iterator ran dry after 3 of 4 micro-batches");
}

TEST(PipeEngine, ChecksItsArguments) {
  pipe::PipelineParallelGrid grid(1);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.micro_batches = 0}), "micro_batches must be at least 1");
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.schedule = "zigzag"}),
                   "make_schedule: unknown schedule \"zigzag\"");
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.schedule = "inference"}),
                   "PipelineEngine: schedule must be a pipelined training schedule (train, gpipe, interleaved, zb-h1, "
                   "zb-interleaved, zb-v, dualpipe-v), got \"inference\"");
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.schedule = "dataparallel"}),
                   "PipelineEngine: schedule must be a pipelined training schedule");
  // Schedule files: the stages, micro-batches and chunks must be the engine's and the module's, and a bad file
  // fails on every rank as it is read.
  const std::string file =
      (std::filesystem::temp_directory_path() /
       ("strata_engine_file_" + std::to_string(::getpid()) + "_" + std::to_string(dist::get_rank())))
          .string();
  std::ofstream(file) << "0F0,1F0,1B0,0B0\n";
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.micro_batches = 1, .schedule_file = file}),
                   "PipelineEngine: the " + file +
                       " schedule runs 2 model chunks per stage, but the PipelineModule was "
                       "built with chunks = 1");
  std::ofstream(file) << "0F0,0B0\n";
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.micro_batches = 4, .schedule_file = file}),
                   "PipelineEngine: " + file +
                       " schedules 1 stages x 1 micro-batches, but the engine runs 1 stages x "
                       "4 (PipelineEngineOptions::micro_batches)");
  std::ofstream(file) << "0F0,0F1,0B0\n";
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.micro_batches = 2, .schedule_file = file}),
                   file + ": line 1 (stage 0): no backward of 0F1 (0B1, or 0I1 and 0W1)");
  std::ofstream(file) << "0F0,0F1,0B0,0B1\n";
  EXPECT_THROW_MSG(
      pipe::PipelineEngine(model, grid, sgd, {.micro_batches = 2, .schedule_file = file, .max_activations = 1}),
      file +
          ": line 1, action 2 (0F1): stage 0 then holds 2 stages' worth of activations, more than "
          "max_activations (1)");
  std::filesystem::remove(file);
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.schedule = "zb-v"}),
                   "PipelineEngine: the zb-v schedule runs 2 model chunks per stage in a V, but the PipelineModule was "
                   "built with chunks = 1; set PipelineModuleOptions::chunks = 2 and v_shape = true");
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.schedule = "interleaved"}),
                   "the interleaved schedule needs a PipelineModule of 2 or more chunks per stage on the loop; set "
                   "PipelineModuleOptions::chunks >= 2 and v_shape = false (the module has chunks = 1)");
  pipe::PipelineModule other(mlp_layers(), 1, 0, module_options());
  auto foreign = std::make_shared<optim::SGD>(other.parameters(), optim::SGDOptions(0.1));
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, foreign), "that is not a parameter of stage 0's module");
  auto stage1 = std::make_shared<pipe::PipelineModule>(mlp_layers(), 2, 1, module_options());
  EXPECT_THROW_MSG(pipe::PipelineEngine(stage1, grid, sgd), "the module was built as stage 1 of 2 stages");
  auto no_loss = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, pipe::PipelineModuleOptions{});
  pipe::PipelineEngine engine(no_loss, grid,
                              std::make_shared<optim::SGD>(no_loss->parameters(), optim::SGDOptions(0.1)));
  EXPECT_THROW_MSG(engine.train_batch([] { return std::optional<pipe::MicroBatch>(); }), "has no loss_fn");
}
