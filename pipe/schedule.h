#pragma once
// Pipeline schedules as plain data (DeepSpeed's PipeSchedule family) and a validator that runs every
// stage's instruction stream in lockstep before any process starts.
//
//   pipe::TrainSchedule sched(/*micro_batches=*/4, /*stages=*/2, /*stage_id=*/0);   // 1F1B
//   for (int t = 0; t < sched.num_steps(); ++t) std::cout << t << ": " << sched.step(t) << "\n";
//   // 0: LoadMicroBatch(0) ForwardPass(0)
//   // 1: SendActivation(0)
//   // 2: LoadMicroBatch(1) ForwardPass(1) ...
//   auto report = pipe::validate_schedule("train", /*micro_batches=*/8, /*stages=*/4);
//   std::cout << report;   // steps, bubble fraction, peak live buffers per stage
//
// A step's instructions run in order; p2p instructions are blocking and meet their peer's in the same step.

#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace strata::pipe {

/// Every instruction kind, in order, as X(kind, names_a_buffer): the one list that PipeInstruction::Kind, its names,
/// has_buffer() and kind-indexed tables come from. The names are DeepSpeed's class names.
#define STRATA_PIPE_INSTRUCTION_KINDS(X)                                                                             \
  X(LoadMicroBatch, true)   /* the next micro-batch's inputs (first stage) or labels (last stage) into the buffer */ \
  X(ForwardPass, true)      /* runs this stage's layers on the buffer's inputs */                                    \
  X(BackwardPass, true)     /* backpropagates the buffer's outputs (loss on the last stage, received grads) */       \
  X(SendActivation, true)   /* sends the buffer's outputs to the next stage */                                       \
  X(RecvActivation, true)   /* receives the previous stage's outputs into the buffer */                              \
  X(SendGrad, true)         /* sends the gradient of the buffer's inputs to the previous stage */                    \
  X(RecvGrad, true)         /* receives the gradient of the buffer's outputs from the next stage */                  \
  X(ReduceTiedGrads, false) /* all-reduces tied parameters' grads across the stages that share them */               \
  X(ReduceGrads, false)     /* averages grads across the data-parallel group */                                      \
  X(OptimizerStep, false)   /* one optimizer step, then zeroes the grads */

/// One thing a stage does (DeepSpeed's PipeInstruction subclasses); buffer ops name a pipe buffer.
struct PipeInstruction {
#define STRATA_PIPE_KIND_ENUMERATOR(kind, names_a_buffer) kind,
  /// The instruction's type (STRATA_PIPE_INSTRUCTION_KINDS lists and describes them).
  enum Kind : uint8_t { STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_ENUMERATOR) };
#undef STRATA_PIPE_KIND_ENUMERATOR
#define STRATA_PIPE_KIND_COUNT(kind, names_a_buffer) +1
  /// The number of kinds: tables indexed by Kind are this long.
  static constexpr size_t kNumKinds = 0 STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_COUNT);
#undef STRATA_PIPE_KIND_COUNT
  Kind kind;               ///< what to do
  int32_t buffer_id = -1;  ///< the pipe buffer of a buffer op, -1 for the others

  bool has_buffer() const;  ///< whether this kind names a buffer
  bool operator==(const PipeInstruction&) const = default;
};
/// The instruction's name, e.g. "RecvGrad".
std::string_view name(PipeInstruction::Kind kind);
/// "RecvGrad(0)" for buffer ops, "OptimizerStep()" for the others.
std::ostream& operator<<(std::ostream& os, const PipeInstruction& instruction);

/// The instructions of one step, in order (at most six; no allocation).
class PipeStep {
 public:
  static constexpr int kCapacity = 6;           ///< the most instructions any schedule puts in one step
  void push_back(PipeInstruction instruction);  ///< appends; throws past kCapacity
  int size() const { return size_; }            ///< number of instructions
  bool empty() const { return size_ == 0; }     ///< no instructions
  const PipeInstruction* begin() const { return items_.data(); }        ///< first instruction
  const PipeInstruction* end() const { return items_.data() + size_; }  ///< past the last
  const PipeInstruction& operator[](int i) const { return items_[i]; }  ///< instruction i
  bool operator==(const PipeStep& other) const;

 private:
  std::array<PipeInstruction, kCapacity> items_{};
  int size_ = 0;
};
/// The instructions separated by single spaces: "RecvGrad(0) SendActivation(2) BackwardPass(0)"; empty when none.
std::ostream& operator<<(std::ostream& os, const PipeStep& step);

/// The steps one stage runs for one batch of micro_batches; step(t) is computed on demand.
class PipeSchedule {
 public:
  /// Checks micro_batches >= 1, stages >= 1 and 0 <= stage_id < stages.
  PipeSchedule(int micro_batches, int stages, int stage_id);
  virtual ~PipeSchedule() = default;

  virtual std::string_view name() const = 0;         ///< "train", "inference", "dataparallel" or "gpipe"
  virtual int num_steps() const = 0;                 ///< number of steps in one batch
  virtual PipeStep step(int step_id) const = 0;      ///< the instructions of step step_id
  virtual int num_pipe_buffers() const = 0;          ///< buffers this stage needs; ids are 0..n-1
  virtual bool is_training() const { return true; }  ///< whether it runs backward passes
  /// Whether stages pass activations and grads to each other; false when every stage is a whole-model replica.
  virtual bool is_pipelined() const { return true; }
  std::vector<PipeStep> steps() const;  ///< every step, in order

  int micro_batches() const { return micro_batches_; }             ///< micro-batches per batch
  int stages() const { return stages_; }                           ///< number of stages
  int stage_id() const { return stage_id_; }                       ///< the stage this schedule is for
  bool is_first_stage() const { return stage_id_ == 0; }           ///< stage 0
  bool is_last_stage() const { return stage_id_ == stages_ - 1; }  ///< the last stage

 protected:
  bool valid_micro_batch(int micro_batch_id) const { return 0 <= micro_batch_id && micro_batch_id < micro_batches_; }
  bool valid_stage(int stage_id) const { return 0 <= stage_id && stage_id < stages_; }

 private:
  int micro_batches_, stages_, stage_id_;
};

/// 1F1B training with hybrid pipeline and data parallelism, instruction for instruction DeepSpeed's
/// TrainSchedule: 2(M + S - 1) steps; micro-batch m is forwarded at step 2m + s and backwarded at step
/// 2m + 2S - 1 - s; sends are deferred one step to meet the neighbour's receive.
class TrainSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::string_view name() const override { return "train"; }
  int num_steps() const override;
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override;  ///< max(2, min(S - s, M))
};

/// Forward-only pipelining (DeepSpeed's InferenceSchedule): M + S - 1 steps over two alternating buffers.
class InferenceSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::string_view name() const override { return "inference"; }
  int num_steps() const override;
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override { return 2; }
  bool is_training() const override { return false; }
};

/// Plain data parallelism with gradient accumulation (DeepSpeed's DataParallelSchedule): each stage holds the
/// whole model, so every stage loads, forwards and backwards each micro-batch itself; M steps, one buffer.
class DataParallelSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::string_view name() const override { return "dataparallel"; }
  int num_steps() const override { return micro_batches(); }
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override { return 1; }
  bool is_pipelined() const override { return false; }
};

/// GPipe: every forward, then every backward (last micro-batch first); 2(M + S - 1) steps and M buffers.
/// As TrainSchedule, sends are deferred one step, and the last step reduces and steps the optimizer.
class GPipeSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::string_view name() const override { return "gpipe"; }
  int num_steps() const override;
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override { return micro_batches(); }
};

/// The schedule named "train", "inference", "dataparallel" or "gpipe"; throws naming the choices otherwise.
std::unique_ptr<PipeSchedule> make_schedule(std::string_view name, int micro_batches, int stages, int stage_id);

/// One line per step: "5: RecvGrad(0) SendActivation(2) BackwardPass(0)", "8:" for an empty step.
std::ostream& operator<<(std::ostream& os, const PipeSchedule& schedule);

/// What the validator found for one stage.
struct StageReport {
  int compute_steps = 0;  ///< steps with a ForwardPass or BackwardPass
  /// The most buffers at any moment holding a micro-batch still needed (or labels awaiting their forward)
  int peak_live_buffers = 0;
  int num_pipe_buffers = 0;  ///< the buffers the schedule declares
};
/// What the validator found for a whole schedule.
struct ScheduleReport {
  std::string schedule;                          ///< the schedule's name
  int micro_batches = 0, stages = 0, steps = 0;  ///< M, S and the number of steps
  /// Idle stage-steps over all stage-steps: 1 - (steps with a forward or backward pass, summed over stages)
  /// / (S x steps), each step one unit of time; (S - 1) / (M + S - 1) for train, inference and gpipe, 0 for
  /// dataparallel.
  double bubble_fraction = 0;
  std::vector<StageReport> per_stage;  ///< indexed by stage
};
/// Several lines: the schedule, M, S, steps and bubble fraction, then one line per stage.
std::ostream& operator<<(std::ostream& os, const ScheduleReport& report);

/// One executed instruction, as the validator saw it: what a trace shows.
struct TraceEvent {
  int stage, step, position;    ///< where: the stage, the step, the instruction's index in its step
  PipeInstruction instruction;  ///< what
  int micro_batch;              ///< the micro-batch it worked on, -1 for the end-of-batch instructions
};

/// Runs all stages' instruction streams in lockstep with blocking p2p, and proves: every send meets the
/// matching receive of the same micro-batch in the same step (no deadlock); every micro-batch is forwarded
/// (and, when training, then backwarded) exactly once per stage; no buffer is overwritten while still needed;
/// buffer ids are within num_pipe_buffers(); the end-of-batch instructions come after the last backward.
/// Throws strata::Error naming the stage, step and instruction of the first violation. Memory stays
/// O(stages x buffers): steps are generated one at a time. `on_event`, when given, sees every instruction.
ScheduleReport validate_schedule(std::string_view name, int micro_batches, int stages,
                                 const std::function<void(const TraceEvent&)>& on_event = {});
/// The same for any schedule: make_stage(s) gives stage s's schedule (tests validate hand-broken ones with it).
ScheduleReport validate_schedule(const std::function<std::unique_ptr<PipeSchedule>(int stage_id)>& make_stage,
                                 int stages, const std::function<void(const TraceEvent&)>& on_event = {});

/// Writes the simulated schedule as a Chrome trace (JSON; chrome://tracing or ui.perfetto.dev open it):
/// one row per stage, one step per millisecond, each instruction a slice labelled with its micro-batch.
void write_chrome_trace(std::ostream& os, std::string_view name, int micro_batches, int stages);

}  // namespace strata::pipe
