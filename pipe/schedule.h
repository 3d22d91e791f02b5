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
//   std::cout << report;   // steps, bubble fraction, simulated time, peak live buffers per stage
//   pipe::ZeroBubbleVSchedule zbv(/*micro_batches=*/8, /*stages=*/4, /*stage_id=*/1);   // two chunks in a V
//   std::cout << zbv.step(6);   // "RecvActivation(5) SendActivation(4) RecvActivation(0, chunk 1)
//                               //  ForwardPass(0, chunk 1)": chunk 1 of stage 1 is virtual stage 6 of 8
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
  X(BackwardInput, true)    /* the input-gradient half of BackwardPass (zero-bubble "B"): what SendGrad sends */     \
  X(BackwardWeight, true)   /* the parameter-gradient half (zero-bubble "W"), after the buffer's BackwardInput */    \
  X(SendActivation, true)   /* sends the buffer's outputs to the next stage */                                       \
  X(RecvActivation, true)   /* receives the previous stage's outputs into the buffer */                              \
  X(SendGrad, true)         /* sends the gradient of the buffer's inputs to the previous stage */                    \
  X(RecvGrad, true)         /* receives the gradient of the buffer's outputs from the next stage */                  \
  X(ReduceTiedGrads, false) /* all-reduces tied parameters' grads across the stages that share them */               \
  X(ReduceGrads, false)     /* averages grads across the data-parallel group */                                      \
  X(OptimizerStep, false)   /* one optimizer step, then zeroes the grads */

/// One thing a stage does (DeepSpeed's PipeInstruction subclasses); buffer ops name a pipe buffer.
struct PipeInstruction {
/// X of STRATA_PIPE_INSTRUCTION_KINDS that makes each kind an enumerator of Kind (undefined after use).
#define STRATA_PIPE_KIND_ENUMERATOR(kind, names_a_buffer) kind,
  /// The instruction's type (STRATA_PIPE_INSTRUCTION_KINDS lists and describes them).
  enum Kind : uint8_t { STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_ENUMERATOR) };
#undef STRATA_PIPE_KIND_ENUMERATOR
/// X of STRATA_PIPE_INSTRUCTION_KINDS that counts the kinds (undefined after use).
#define STRATA_PIPE_KIND_COUNT(kind, names_a_buffer) +1
  /// The number of kinds: tables indexed by Kind are this long.
  static constexpr size_t kNumKinds = 0 STRATA_PIPE_INSTRUCTION_KINDS(STRATA_PIPE_KIND_COUNT);
#undef STRATA_PIPE_KIND_COUNT
  Kind kind;               ///< what to do
  int32_t buffer_id = -1;  ///< the pipe buffer of a buffer op, -1 for the others
  int16_t chunk = 0;       ///< the stage's model chunk it works on (interleaved and V schedules; 0 otherwise)

  bool has_buffer() const;                                  ///< whether this kind names a buffer
  bool operator==(const PipeInstruction&) const = default;  ///< same kind, buffer and chunk
};
/// The instruction's name, e.g. "RecvGrad".
std::string_view name(PipeInstruction::Kind kind);
/// Whether the kind computes: ForwardPass, BackwardPass, BackwardInput or BackwardWeight.
bool is_compute(PipeInstruction::Kind kind);
/// Whether the kind moves data between stages: SendActivation, RecvActivation, SendGrad or RecvGrad.
bool is_p2p(PipeInstruction::Kind kind);
/// "RecvGrad(0)" for buffer ops, "OptimizerStep()" for the others; "RecvGrad(0, chunk 1)" past chunk 0.
std::ostream& operator<<(std::ostream& os, const PipeInstruction& instruction);

/// The instructions of one step, in order (at most twelve; no allocation).
class PipeStep {
 public:
  static constexpr int kCapacity = 12;          ///< the most instructions any schedule puts in one step
  void push_back(PipeInstruction instruction);  ///< appends; throws past kCapacity
  int size() const { return size_; }            ///< number of instructions
  bool empty() const { return size_ == 0; }     ///< no instructions
  const PipeInstruction* begin() const { return items_.data(); }        ///< first instruction
  const PipeInstruction* end() const { return items_.data() + size_; }  ///< past the last
  const PipeInstruction& operator[](int i) const { return items_[i]; }  ///< instruction i
  bool operator==(const PipeStep& other) const;                         ///< the same instructions in the same order

 private:
  std::array<PipeInstruction, kCapacity> items_{};
  int size_ = 0;
};
/// The instructions separated by single spaces: "RecvGrad(0) SendActivation(2) BackwardPass(0)"; empty when none.
std::ostream& operator<<(std::ostream& os, const PipeStep& step);

/// Where a model cut into stages x chunks pieces (virtual stages, in model order) lives. Without chunks,
/// virtual stage s is stage s. Megatron's interleaving loops: virtual stage c * stages + s is chunk c of
/// stage s. The V goes down and back up: chunk 0 of stage s is virtual stage s, chunk 1 is 2 * stages - 1 - s,
/// so the first and the last virtual stage share stage 0 and the turn is local to the last stage.
struct StageLayout {
  int stages = 1;                                             ///< pipeline stages (ranks along the pipe axis)
  int chunks = 1;                                             ///< model chunks per stage
  bool v_shape = false;                                       ///< the V placement (two chunks) instead of the loop
  int num_virtual_stages() const { return stages * chunks; }  ///< stages x chunks
  int virtual_stage(int stage, int chunk) const;              ///< where chunk `chunk` of `stage` is in the model
  int stage_of(int virtual_stage) const;                      ///< the stage holding a virtual stage
  int chunk_of(int virtual_stage) const;                      ///< its chunk there
  bool operator==(const StageLayout&) const = default;        ///< same stages, chunks and placement
};

/// The steps one stage runs for one batch of micro_batches; step(t) is computed on demand.
class PipeSchedule {
 public:
  /// The most micro_batches + stages: steps, up to 2 (M + S - 1), are counted in an int.
  static constexpr int64_t kMaxMicroBatchesPlusStages = int64_t{1} << 30;
  /// Checks micro_batches >= 1, stages >= 1, 0 <= stage_id < stages and M + S <= kMaxMicroBatchesPlusStages.
  PipeSchedule(int micro_batches, int stages, int stage_id);
  virtual ~PipeSchedule() = default;

  virtual std::string_view name() const = 0;         ///< as make_schedule takes it, e.g. "train"
  virtual int num_steps() const = 0;                 ///< number of steps in one batch
  virtual PipeStep step(int step_id) const = 0;      ///< the instructions of step step_id
  virtual int num_pipe_buffers() const = 0;          ///< buffers this stage needs; ids are 0..n-1
  virtual bool is_training() const { return true; }  ///< whether it runs backward passes
  /// Whether stages pass activations and grads to each other; false when every stage is a whole-model replica.
  virtual bool is_pipelined() const { return true; }
  /// Where the model's chunks live; one chunk per stage unless the schedule interleaves.
  virtual StageLayout layout() const { return {stages(), 1, false}; }
  std::vector<PipeStep> steps() const;  ///< every step, in order

  int micro_batches() const { return micro_batches_; }             ///< micro-batches per batch
  int stages() const { return stages_; }                           ///< number of stages
  int stage_id() const { return stage_id_; }                       ///< the stage this schedule is for
  bool is_first_stage() const { return stage_id_ == 0; }           ///< stage 0
  bool is_last_stage() const { return stage_id_ == stages_ - 1; }  ///< the last stage

 protected:
  /// Whether micro_batch_id is one of this batch's, 0 to micro_batches - 1.
  bool valid_micro_batch(int micro_batch_id) const { return 0 <= micro_batch_id && micro_batch_id < micro_batches_; }
  bool valid_stage(int stage_id) const { return 0 <= stage_id && stage_id < stages_; }  ///< 0 <= stage_id < stages

 private:
  int micro_batches_, stages_, stage_id_;
};

/// 1F1B training with hybrid pipeline and data parallelism, instruction for instruction DeepSpeed's
/// TrainSchedule: 2(M + S - 1) steps; micro-batch m is forwarded at step 2m + s and backwarded at step
/// 2m + 2S - 1 - s; sends are deferred one step to meet the neighbour's receive.
class TrainSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  static constexpr std::string_view kName = "train";  ///< its name in the registry
  std::string_view name() const override { return kName; }
  int num_steps() const override;
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override;  ///< max(2, min(S - s, M))
};

/// Forward-only pipelining (DeepSpeed's InferenceSchedule): M + S - 1 steps over two alternating buffers.
class InferenceSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  static constexpr std::string_view kName = "inference";  ///< its name in the registry
  std::string_view name() const override { return kName; }
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
  static constexpr std::string_view kName = "dataparallel";  ///< its name in the registry
  std::string_view name() const override { return kName; }
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
  static constexpr std::string_view kName = "gpipe";  ///< its name in the registry
  std::string_view name() const override { return kName; }
  int num_steps() const override;
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override { return micro_batches(); }
};

/// Every stage's steps, as a planner made them.
struct SchedulePlan {
  std::vector<std::vector<PipeStep>> steps;  ///< [stage][step]
};

/// How PlannedSchedule orders each stage's compute (Note [planned schedules] in schedule_plan.cpp).
enum class PlanAlgorithm { kInterleaved, kZeroBubbleH1, kZeroBubble, kDualPipeV, kForward };

/// A schedule planned for all stages at once (the interleaved, zero-bubble and forward-only ones). Each
/// stage's order of compute instructions comes from the algorithm, each runs in the first step after
/// everything it needs was computed (one per stage and step, or a forward and a backward in the steady state
/// of interleaving), and a result crosses to
/// another stage in the step after it was computed: the sender's SendActivation or SendGrad meets the
/// receiver's Recv there. Within a step every stage orders its p2p by (lower stage, higher stage, direction),
/// one order for all, so no two stages wait on each other. Buffer ids are micro-batch ids, one set per chunk.
/// A chunk whose neighbour in the model is on the same stage hands its outputs (and gets its gradients)
/// through the neighbour's buffer of the same id, without p2p.
class PlannedSchedule : public PipeSchedule {
 public:
  int num_steps() const override;
  PipeStep step(int step_id) const override;
  int num_pipe_buffers() const override { return micro_batches(); }  ///< per chunk
  StageLayout layout() const override { return layout_; }

 protected:
  /// Plans (or takes from a cache shared by the stages) the steps of every stage; `name` is for errors.
  PlannedSchedule(int micro_batches, int stages, int stage_id, StageLayout layout, PlanAlgorithm algorithm,
                  std::string_view name);
  /// Runs a plan made elsewhere (plan_compute_orders), of layout.stages stages.
  PlannedSchedule(int micro_batches, int stage_id, StageLayout layout, std::shared_ptr<const SchedulePlan> plan);

 private:
  StageLayout layout_;
  std::shared_ptr<const SchedulePlan> plan_;
};

/// Megatron's interleaved 1F1B: `chunks` model chunks per stage on the loop layout, micro-batches taken in
/// groups of S through the chunks in turn, warm-up of 2(S - s - 1) + (chunks - 1)S forward passes, then one
/// forward and one whole backward pass alternating. The bubble shrinks by the number of chunks at the cost of
/// more p2p. micro_batches must be a multiple of stages (Megatron's rule; an error says so).
class Interleaved1F1BSchedule : public PlannedSchedule {
 public:
  /// Stage stage_id's steps for M micro_batches over S stages of `chunks` chunks each.
  Interleaved1F1BSchedule(int micro_batches, int stages, int stage_id, int chunks = 2);
  static constexpr std::string_view kName = "interleaved";  ///< its name in the registry
  std::string_view name() const override { return kName; }
  /// Whether Megatron's order is defined for the counts: micro_batches a multiple of stages.
  static bool defined_for(int micro_batches, int stages) { return micro_batches % stages == 0; }
};

/// Zero bubble ZB-H1 (Qi et al., 2024): 1F1B with the backward split into BackwardInput (B) and
/// BackwardWeight (W), in 1F1B's order of F and B; W fills the time a stage would wait. Every stage keeps at
/// most min(S, M) micro-batches between forward and W: 1F1B's peak, which its stage 0 reaches (later stages
/// hold more than under 1F1B, to leave their W for the tail). With forward, B and W one unit each the bubble
/// is a third of 1F1B's once M >= S.
class ZeroBubbleH1Schedule : public PlannedSchedule {
 public:
  ZeroBubbleH1Schedule(int micro_batches, int stages, int stage_id);  ///< stage stage_id's steps for M over S
  static constexpr std::string_view kName = "zb-h1";                  ///< its name in the registry
  std::string_view name() const override { return kName; }
};

/// Looped zero bubble (the ZB paper's ZB-1P on Megatron's loop layout, PyTorch's ScheduleInterleavedZeroBubble):
/// `chunks` model chunks per stage, B and W split as in ZB-H1, in the greedy order of zb-v or the paper's fixed
/// one (interleaved 1F1B's with each pair followed by a W), whichever finishes first at unit costs. Each stage keeps
/// at most S stages' worth of activations, 1F1B's peak. Any number of micro-batches.
class ZeroBubbleInterleavedSchedule : public PlannedSchedule {
 public:
  /// Stage stage_id's steps for M micro_batches over S stages of `chunks` chunks each.
  ZeroBubbleInterleavedSchedule(int micro_batches, int stages, int stage_id, int chunks = 2);
  static constexpr std::string_view kName = "zb-interleaved";  ///< its name in the registry
  std::string_view name() const override { return kName; }
};

/// Zero bubble ZB-V: two chunks per stage in a V (StageLayout::v_shape), B and W split as in ZB-H1, in the
/// greedy order (chunk 1's work first when both chunks could go on) or the ZB-V paper's, whichever finishes
/// first at unit costs. Each stage keeps at most 2S chunk activations (S stages' worth, 1F1B's peak) and
/// idles (S - 1) / 2 once micro-batches outnumber stages twice over.
class ZeroBubbleVSchedule : public PlannedSchedule {
 public:
  ZeroBubbleVSchedule(int micro_batches, int stages, int stage_id);  ///< stage stage_id's steps for M over S
  static constexpr std::string_view kName = "zb-v";                  ///< its name in the registry
  std::string_view name() const override { return kName; }
};

/// DeepSeek's DualPipe folded into a V (DualPipeV, PyTorch's ScheduleDualPipeV): two chunks per stage placed as
/// zb-v's, whose steady state pairs one chunk's forward with the other chunk's whole backward. DualPipe overlaps a
/// pair on two streams to hide its all-to-all; the engine runs the pair in turn, the forward first, as PyTorch
/// does. B and W are split only in the cool-down; it holds S + 1/2 stages' activations. At least 2S micro-batches.
class DualPipeVSchedule : public PlannedSchedule {
 public:
  DualPipeVSchedule(int micro_batches, int stages, int stage_id);  ///< stage stage_id's steps for M over S
  static constexpr std::string_view kName = "dualpipe-v";          ///< its name in the registry
  std::string_view name() const override { return kName; }
  /// Whether DualPipe's order is defined for the counts: micro_batches at least twice the stages.
  static bool defined_for(int micro_batches, int stages) { return micro_batches >= 2 * stages; }
};

/// Forward passes only, over any StageLayout: what eval_batch runs for a module cut into chunks
/// (InferenceSchedule is DeepSpeed's, for one chunk per stage).
class ForwardSchedule : public PlannedSchedule {
 public:
  /// Stage stage_id's forward passes for M micro_batches over S stages placed as `layout`.
  ForwardSchedule(int micro_batches, int stages, int stage_id, StageLayout layout);
  static constexpr std::string_view kName = "forward";  ///< its name in the registry
  std::string_view name() const override { return kName; }
  bool is_training() const override { return false; }
};

/// Every stage's steps for compute orders given per stage: ForwardPass, BackwardPass, BackwardInput and
/// BackwardWeight instructions whose buffer_id is the micro-batch. Each stage runs its next compute in the first
/// step whose inputs were computed in an earlier one, and transfers are added as for every PlannedSchedule.
/// Where every stage waits, throws naming each stage's waiting compute: `position(stage, index)` names the
/// compute at that index of the stage's order (its place in a file, say).
SchedulePlan plan_compute_orders(const std::vector<std::vector<PipeInstruction>>& orders, int micro_batches,
                                 StageLayout layout, const std::function<std::string(int, size_t)>& position);

/// One schedule make_schedule knows: a row of schedule_registry(), the one place a name is matched.
struct ScheduleEntry {
  std::string_view name;  ///< as make_schedule, PipelineEngineOptions::schedule and strata-pipe take it
  bool training;          ///< runs backward passes: PipelineEngine trains with it
  bool pipelined;         ///< stages pass activations on; false where every stage holds the whole model
  int chunks;             ///< model chunks per stage when the caller gives 0
  bool more_chunks;       ///< whether it also takes more chunks than that (interleaved, forward)
  bool v_shape;           ///< its chunks sit in a V rather than the loop
  /// Why it is not defined for the counts (chunks resolved, never 0), or empty where it is.
  std::string (*why_not)(int micro_batches, int stages, int chunks);
  /// Stage stage_id's schedule for the counts (chunks resolved).
  std::unique_ptr<PipeSchedule> (*make)(int micro_batches, int stages, int stage_id, int chunks);
};
/// Every schedule, in a stable order: train, inference, dataparallel, gpipe, interleaved, zb-h1, zb-interleaved, zb-v,
/// dualpipe-v, forward.
const std::vector<ScheduleEntry>& schedule_registry();
/// The registry's row for `name`; throws listing the known names otherwise.
const ScheduleEntry& schedule_entry(std::string_view name);
/// The schedule names make_schedule takes, in the registry's order.
const std::vector<std::string_view>& schedule_names();
/// The schedule `name` (a row of schedule_registry()); throws listing the names otherwise. chunks: model chunks
/// per stage, 0 for the schedule's own (2 for interleaved, zb-interleaved, zb-v and dualpipe-v, 1 for the others);
/// only interleaved and zb-interleaved (2 or more) and forward (1 or more, on the loop) take another number.
std::unique_ptr<PipeSchedule> make_schedule(std::string_view name, int micro_batches, int stages, int stage_id,
                                            int chunks = 0);

/// One line per step: "5: RecvGrad(0) SendActivation(2) BackwardPass(0)", "8:" for an empty step.
std::ostream& operator<<(std::ostream& os, const PipeSchedule& schedule);

/// What each compute instruction costs on the validator's clock: times for one micro-batch through one
/// stage's share of the model (a chunk's instruction takes 1/chunks of it), and what a transfer adds.
struct ScheduleCosts {
  double forward = 1;          ///< ForwardPass
  double backward_input = 1;   ///< BackwardInput (B)
  double backward_weight = 1;  ///< BackwardWeight (W); BackwardPass costs B + W
  double p2p = 0;              ///< from the later of sender and receiver reaching a transfer to both going on

  /// What one compute instruction of a whole stage costs (BackwardPass: B + W); 0 for the other kinds.
  double of(PipeInstruction::Kind kind) const;
};

/// The critical-path lower bound on a training batch's time for any schedule of this layout, at any memory: the
/// largest over stages s of s chunk forwards and transfers before the stage can start (its first virtual stage is
/// s on the loop and in the V), then either all of its F, B and W, or all of its F and B and then the B of the
/// s virtual stages below (with their transfers) and one W.
double lower_bound(StageLayout layout, int micro_batches, const ScheduleCosts& costs);

/// What the validator found for one stage.
struct StageReport {
  int compute_steps = 0;  ///< steps with a compute instruction (ForwardPass, BackwardPass, BackwardInput/Weight)
  /// The most buffers, over all chunks, at any moment holding a micro-batch still needed (or labels awaiting
  /// their forward); a chunk's buffer holds 1/chunks of a stage's activations
  int peak_live_buffers = 0;
  int num_pipe_buffers = 0;  ///< the buffers the schedule declares per chunk
  /// Training: the most micro-batches, over all chunks, between their forward and their weight gradients,
  /// each keeping the activations backward needs (a chunk's are 1/chunks of a stage's)
  int peak_activations = 0;
  double busy = 0;  ///< time spent computing on the simulated clock
};
/// What the validator found for a whole schedule.
struct ScheduleReport {
  std::string schedule;   ///< the schedule's name
  int micro_batches = 0;  ///< M
  int stages = 0;         ///< S
  int steps = 0;          ///< the number of steps
  int chunks = 1;         ///< model chunks per stage
  /// Idle stage-steps over all stage-steps: 1 - (steps with a compute instruction, summed over stages)
  /// / (S x steps), each step one unit of time; (S - 1) / (M + S - 1) for train, inference and gpipe, 0 for
  /// dataparallel.
  double bubble_fraction = 0;
  /// The batch's time on the simulated clock: each stage runs its instructions in order, a compute
  /// instruction takes its cost, a transfer starts when both sides have reached it and takes costs.p2p.
  double time = 0;
  double idle_fraction = 0;  ///< 1 - (busy time summed over stages) / (S x time)
  /// lower_bound() for the schedule's layout where it trains a pipeline; 0 for the others
  double lower_bound = 0;
  ScheduleCosts costs;                 ///< the costs the clock used
  std::vector<StageReport> per_stage;  ///< indexed by stage
  /// The largest peak_activations over stages, in stages' worth of activations (divided by chunks).
  double peak_activations() const;
};
/// Several lines: the schedule, M, S, chunks, steps and bubble fraction; the simulated time, its lower bound and idle
/// fraction; then one line per stage.
std::ostream& operator<<(std::ostream& os, const ScheduleReport& report);

/// One executed instruction, as the validator saw it: what a trace shows.
struct TraceEvent {
  int stage;                    ///< the stage it ran on
  int step;                     ///< the step it belongs to
  int position;                 ///< its index in its step
  PipeInstruction instruction;  ///< what
  int micro_batch;              ///< the micro-batch it worked on, -1 for the end-of-batch instructions
  double start = 0;             ///< when it started on the simulated clock (a transfer: when its side reached it)
  double end = 0;               ///< when it ended
};

/// The most stage-steps (stages x steps per stage) validate_schedule simulates by default: some 10 s, 1 GB.
inline constexpr int64_t kMaxValidatedStageSteps = int64_t{1} << 26;
/// The most stage-steps write_chrome_trace writes: some 800 MB of JSON, past what trace viewers open.
inline constexpr int64_t kMaxTracedStageSteps = int64_t{1} << 22;

/// How validate_schedule runs.
struct ValidateOptions {
  int chunks = 0;       ///< for the named schedule: model chunks per stage, 0 for the schedule's own
  ScheduleCosts costs;  ///< the simulated clock's costs
  std::function<void(const TraceEvent&)> on_event;    ///< sees every instruction as it runs, when given
  int64_t max_stage_steps = kMaxValidatedStageSteps;  ///< a larger run is refused before it allocates
};

/// Runs all stages' instruction streams in lockstep with blocking p2p, and proves: every send meets the
/// matching receive of the same micro-batch and the neighbouring chunk in the same step (no deadlock); every
/// micro-batch is forwarded (and, when training, then backwarded, B before W when split) exactly once per
/// stage and chunk; no buffer is overwritten while still needed; buffer and chunk ids are in range; the
/// end-of-batch instructions come after the last backward. Throws strata::Error naming the stage, step and
/// instruction of the first violation. Memory stays O(stages x chunks x buffers) beyond the schedules'; a run
/// of more than options.max_stage_steps stages x steps is refused once stage 0's schedule is made.
ScheduleReport validate_schedule(std::string_view name, int micro_batches, int stages,
                                 const ValidateOptions& options = {});
/// The same for any schedule: make_stage(s) gives stage s's schedule (tests validate hand-broken ones with it);
/// options.chunks is unused.
ScheduleReport validate_schedule(const std::function<std::unique_ptr<PipeSchedule>(int stage_id)>& make_stage,
                                 int stages, const ValidateOptions& options = {});

/// One instruction as a slice of a Chrome trace (what write_chrome_trace and PipelineEngine::write_trace write).
struct TraceSlice {
  int row;                      ///< the trace's row ("tid"): a stage, or a rank
  double start_us;              ///< where on the timeline, in microseconds
  double duration_us;           ///< how long, in microseconds
  PipeInstruction instruction;  ///< what
  int micro_batch;              ///< the micro-batch it worked on, -1 for the end-of-batch instructions
  int step;                     ///< the schedule step it belongs to
};
/// Chrome trace JSON: one named row per entry of `rows`, then the slices. Compute slices are labelled F3, B3,
/// BI3 (BackwardInput) and W3, with " chunk c" past chunk 0; the others by their instruction, "RecvGrad(0)".
void write_trace_json(std::ostream& os, const std::vector<std::string>& rows, const std::vector<TraceSlice>& slices);

/// Writes the simulated schedule as a Chrome trace (JSON; chrome://tracing or ui.perfetto.dev open it):
/// one row per stage, one step per millisecond, each instruction a slice labelled with its micro-batch (and
/// chunk, for interleaved schedules). Refuses a schedule of more than kMaxTracedStageSteps stages x steps.
void write_chrome_trace(std::ostream& os, std::string_view name, int micro_batches, int stages, int chunks = 0);
/// The same for any schedule: make_stage(s) gives stage s's (a schedule file's, say).
void write_chrome_trace(std::ostream& os, const std::function<std::unique_ptr<PipeSchedule>(int stage_id)>& make_stage,
                        int stages);

/// One schedule's prediction from simulate_schedules.
struct SchedulePrediction {
  std::string schedule;   ///< its name
  std::string why_not;    ///< why it is not defined for the shape (then the report is empty)
  ScheduleReport report;  ///< the validator's report with the given costs
};
/// Validates every training schedule for S stages and M micro-batches with `costs` and predicts its time,
/// idle fraction and peak activations (interleaved with `chunks`, 0 for its own 2).
std::vector<SchedulePrediction> simulate_schedules(int micro_batches, int stages, const ScheduleCosts& costs,
                                                   int chunks = 0);
/// The fastest prediction whose peak activations stay within 1F1B's ("train"); its index in `predictions`.
size_t recommend(const std::vector<SchedulePrediction>& predictions);

}  // namespace strata::pipe
