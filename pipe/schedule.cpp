#include "strata/pipe/schedule.h"

#include <algorithm>
#include <array>

#include "strata/pipe/planned_schedule.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

PipeSchedule::PipeSchedule(int micro_batches, int stages, int stage_id)
    : micro_batches_(micro_batches), stages_(stages), stage_id_(stage_id) {
  STRATA_CHECK(micro_batches >= 1, "PipeSchedule: micro_batches must be at least 1, got ", micro_batches);
  STRATA_CHECK(stages >= 1, "PipeSchedule: stages must be at least 1, got ", stages);
  STRATA_CHECK(0 <= stage_id && stage_id < stages, "PipeSchedule: stage_id ", stage_id, " is out of range for ", stages,
               " stages");
  // Step counts run up to 2 (M + S - 1) and are ints: refuse, rather than wrap into a negative count.
  STRATA_CHECK(int64_t{micro_batches} + stages <= kMaxMicroBatchesPlusStages, "PipeSchedule: ", micro_batches,
               " micro-batches + ", stages, " stages is more than the ", kMaxMicroBatchesPlusStages,
               " a schedule's step count holds");
}

std::vector<PipeStep> PipeSchedule::steps() const {
  std::vector<PipeStep> out;
  out.reserve(num_steps());
  for (int t = 0; t < num_steps(); ++t) out.push_back(step(t));
  return out;
}

namespace {

void check_step(const PipeSchedule& schedule, int step_id) {
  STRATA_CHECK(0 <= step_id && step_id < schedule.num_steps(), schedule.name(), " schedule: step ", step_id,
               " is out of range [0, ", schedule.num_steps(), ")");
}

void append_end_of_batch(PipeStep& step, bool reduce_tied_grads) {
  if (reduce_tied_grads) step.push_back({Instr::ReduceTiedGrads});
  step.push_back({Instr::ReduceGrads});
  step.push_back({Instr::OptimizerStep});
}

// DeepSpeed's TrainSchedule._step_to_micro_batch: a stage alternates forward and backward steps, with
// odd stages shifted by one step so that a send on one stage meets a receive on its neighbour.
struct TrainSlot {
  int micro_batch;
  bool is_forward;
};
TrainSlot train_slot(int step_id, int stages, int stage_id) {
  const bool even_step = step_id % 2 == 0, even_stage = stage_id % 2 == 0;
  if (even_step && even_stage) return {step_id / 2 - stage_id / 2, true};
  if (!even_step && !even_stage) return {(step_id - 1) / 2 - stage_id / 2, true};
  if (even_step) return {step_id / 2 - stages + (stage_id + 1) / 2, false};
  return {(step_id - 1) / 2 - stages + 1 + stage_id / 2, false};
}

}  // namespace

int TrainSchedule::num_steps() const { return 2 * (micro_batches() + stages() - 1); }

int TrainSchedule::num_pipe_buffers() const { return std::max(2, std::min(stages() - stage_id(), micro_batches())); }

PipeStep TrainSchedule::step(int step_id) const {
  check_step(*this, step_id);
  const int s = stage_id();
  const auto [micro_batch, is_forward] = train_slot(step_id, stages(), s);
  const int prev_micro_batch = step_id == 0 ? -1 : train_slot(step_id - 1, stages(), s).micro_batch;
  const bool valid = valid_micro_batch(micro_batch), prev_valid = valid_micro_batch(prev_micro_batch);
  const int buffer = valid ? micro_batch % num_pipe_buffers() : -1;
  const int prev_buffer = prev_valid ? prev_micro_batch % num_pipe_buffers() : -1;

  PipeStep out;
  // The previous step's result goes out in the same step as this one's input comes in.
  if (is_forward) {
    if (prev_valid && valid_stage(s - 1)) out.push_back({Instr::SendGrad, prev_buffer});
    if (valid && valid_stage(s - 1)) out.push_back({Instr::RecvActivation, buffer});
  } else {
    if (valid && valid_stage(s + 1)) out.push_back({Instr::RecvGrad, buffer});
    if (prev_valid && valid_stage(s + 1)) out.push_back({Instr::SendActivation, prev_buffer});
  }
  if ((is_first_stage() || is_last_stage()) && is_forward && valid) out.push_back({Instr::LoadMicroBatch, buffer});
  if (valid) out.push_back({is_forward ? Instr::ForwardPass : Instr::BackwardPass, buffer});
  if (step_id == num_steps() - 1) append_end_of_batch(out, /*reduce_tied_grads=*/true);
  return out;
}

int InferenceSchedule::num_steps() const { return micro_batches() + stages() - 1; }

PipeStep InferenceSchedule::step(int step_id) const {
  check_step(*this, step_id);
  const int s = stage_id(), micro_batch = step_id - s;
  // Two buffers alternate, out of phase on neighbouring stages: one receives while the other sends.
  const bool even_stage = s % 2 == 0;
  const int recv_buffer = even_stage ? step_id % 2 : (step_id + 1) % 2;
  const int send_buffer = even_stage ? (step_id + 1) % 2 : step_id % 2;
  const bool send = valid_stage(s + 1) && valid_micro_batch(micro_batch - 1);
  const bool recv = valid_stage(s - 1) && valid_micro_batch(micro_batch);

  PipeStep out;
  if ((is_first_stage() || is_last_stage()) && valid_micro_batch(micro_batch))
    out.push_back({Instr::LoadMicroBatch, recv_buffer});
  // Even stages send first and odd stages receive first, so every pair meets without deadlock.
  if (even_stage) {
    if (send) out.push_back({Instr::SendActivation, send_buffer});
    if (recv) out.push_back({Instr::RecvActivation, recv_buffer});
  } else {
    if (recv) out.push_back({Instr::RecvActivation, recv_buffer});
    if (send) out.push_back({Instr::SendActivation, send_buffer});
  }
  if (valid_micro_batch(micro_batch)) out.push_back({Instr::ForwardPass, recv_buffer});
  return out;
}

PipeStep DataParallelSchedule::step(int step_id) const {
  check_step(*this, step_id);
  PipeStep out;
  out.push_back({Instr::LoadMicroBatch, 0});
  out.push_back({Instr::ForwardPass, 0});
  out.push_back({Instr::BackwardPass, 0});
  if (step_id == num_steps() - 1) append_end_of_batch(out, /*reduce_tied_grads=*/false);
  return out;
}

int GPipeSchedule::num_steps() const { return 2 * (micro_batches() + stages() - 1); }

PipeStep GPipeSchedule::step(int step_id) const {
  check_step(*this, step_id);
  const int s = stage_id(), half = num_steps() / 2;
  PipeStep out;
  if (step_id < half) {
    // Forward of m at step m + s. A stage receives before it sends, so the chain of sends resolves
    // from stage 0 (which receives nothing) towards the last stage.
    const int m = step_id - s;
    if (valid_stage(s - 1) && valid_micro_batch(m)) out.push_back({Instr::RecvActivation, m});
    if (valid_stage(s + 1) && valid_micro_batch(m - 1)) out.push_back({Instr::SendActivation, m - 1});
    if ((is_first_stage() || is_last_stage()) && valid_micro_batch(m)) out.push_back({Instr::LoadMicroBatch, m});
    if (valid_micro_batch(m)) out.push_back({Instr::ForwardPass, m});
  } else {
    // Backward of m at step half + (M - 1 - m) + (S - 1 - s); the chain resolves from the last stage down.
    const int m = 2 * half - 1 - s - step_id;
    if (valid_stage(s + 1) && valid_micro_batch(m)) out.push_back({Instr::RecvGrad, m});
    if (valid_stage(s - 1) && valid_micro_batch(m + 1)) out.push_back({Instr::SendGrad, m + 1});
    if (valid_micro_batch(m)) out.push_back({Instr::BackwardPass, m});
  }
  if (step_id == num_steps() - 1) append_end_of_batch(out, /*reduce_tied_grads=*/true);
  return out;
}

namespace {

std::string always_defined(int, int, int) { return {}; }

std::string looped_defined(int, int, int chunks) {
  return chunks < 2 ? str("the loop needs 2 or more chunks per stage, got ", chunks) : "";
}

std::string interleaving_defined(int micro_batches, int stages, int chunks) {
  if (chunks < 2) return looped_defined(micro_batches, stages, chunks);
  if (!Interleaved1F1BSchedule::defined_for(micro_batches, stages))
    return str("micro-batches (", micro_batches, ") must be a multiple of stages (", stages, ")");
  return {};
}

std::string dualpipe_defined(int micro_batches, int stages, int) {
  if (DualPipeVSchedule::defined_for(micro_batches, stages)) return {};
  return str("micro-batches (", micro_batches, ") must be at least twice the stages (", stages, ")");
}

/// The registry's factory for a schedule class constructed from (micro_batches, stages, stage_id).
template <class Schedule>
std::unique_ptr<PipeSchedule> make_plain(int micro_batches, int stages, int stage_id, int) {
  return std::make_unique<Schedule>(micro_batches, stages, stage_id);
}

}  // namespace

const std::vector<ScheduleEntry>& schedule_registry() {
  static const std::vector<ScheduleEntry> kRegistry = {
      {TrainSchedule::kName, true, true, 1, false, false, always_defined, make_plain<TrainSchedule>},
      {InferenceSchedule::kName, false, true, 1, false, false, always_defined, make_plain<InferenceSchedule>},
      {DataParallelSchedule::kName, true, false, 1, false, false, always_defined, make_plain<DataParallelSchedule>},
      {GPipeSchedule::kName, true, true, 1, false, false, always_defined, make_plain<GPipeSchedule>},
      {Interleaved1F1BSchedule::kName, true, true, 2, true, false, interleaving_defined,
       [](int micro_batches, int stages, int stage_id, int chunks) -> std::unique_ptr<PipeSchedule> {
         return std::make_unique<Interleaved1F1BSchedule>(micro_batches, stages, stage_id, chunks);
       }},
      {ZeroBubbleH1Schedule::kName, true, true, 1, false, false, always_defined, make_plain<ZeroBubbleH1Schedule>},
      {ZeroBubbleInterleavedSchedule::kName, true, true, 2, true, false, looped_defined,
       [](int micro_batches, int stages, int stage_id, int chunks) -> std::unique_ptr<PipeSchedule> {
         return std::make_unique<ZeroBubbleInterleavedSchedule>(micro_batches, stages, stage_id, chunks);
       }},
      {ZeroBubbleVSchedule::kName, true, true, 2, false, true, always_defined, make_plain<ZeroBubbleVSchedule>},
      {DualPipeVSchedule::kName, true, true, 2, false, true, dualpipe_defined, make_plain<DualPipeVSchedule>},
      {ForwardSchedule::kName, false, true, 1, true, false, always_defined,
       [](int micro_batches, int stages, int stage_id, int chunks) -> std::unique_ptr<PipeSchedule> {
         return std::make_unique<ForwardSchedule>(micro_batches, stages, stage_id, StageLayout{stages, chunks, false});
       }},
  };
  return kRegistry;
}

const std::vector<std::string_view>& schedule_names() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names;
    for (const ScheduleEntry& entry : schedule_registry()) names.push_back(entry.name);
    return names;
  }();
  return kNames;
}

namespace {
// "a, b or c" (last = " or "): the names of the registry's rows that `keep` keeps.
std::string list_names(bool (*keep)(const ScheduleEntry&), const char* last) {
  std::vector<std::string_view> names;
  for (const ScheduleEntry& entry : schedule_registry())
    if (keep(entry)) names.push_back(entry.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == names.size() ? last : ", ") + std::string(names[i]);
  return out;
}
}  // namespace

const ScheduleEntry& schedule_entry(std::string_view name) {
  for (const ScheduleEntry& entry : schedule_registry())
    if (entry.name == name) return entry;
  STRATA_CHECK(false, "make_schedule: unknown schedule \"", name, "\"; expected ",
               list_names([](const ScheduleEntry&) { return true; }, " or "));
}

std::unique_ptr<PipeSchedule> make_schedule(std::string_view name, int micro_batches, int stages, int stage_id,
                                            int chunks) {
  const ScheduleEntry& entry = schedule_entry(name);
  STRATA_CHECK(chunks == 0 || chunks == entry.chunks || entry.more_chunks, "make_schedule: the ", name,
               " schedule has ", entry.chunks, entry.more_chunks ? " or more" : "", " chunk",
               entry.chunks == 1 && !entry.more_chunks ? "" : "s", " per stage, got chunks = ", chunks, "; only ",
               list_names([](const ScheduleEntry& e) { return e.more_chunks; }, " and "), " take another number");
  return entry.make(micro_batches, stages, stage_id, chunks == 0 ? entry.chunks : chunks);
}

std::ostream& operator<<(std::ostream& os, const PipeSchedule& schedule) {
  for (int t = 0; t < schedule.num_steps(); ++t) {
    const PipeStep step = schedule.step(t);
    os << t << ':';
    if (!step.empty()) os << ' ' << step;
    os << '\n';
  }
  return os;
}

}  // namespace strata::pipe
