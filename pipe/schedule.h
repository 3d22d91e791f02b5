#pragma once
// Pipeline schedules as plain data (DeepSpeed's PipeSchedule family) and the registry of every schedule by name.
//
//   pipe::TrainSchedule sched(/*micro_batches=*/4, /*stages=*/2, /*stage_id=*/0);   // 1F1B
//   for (int t = 0; t < sched.num_steps(); ++t) std::cout << t << ": " << sched.step(t) << "\n";
//   // 0: LoadMicroBatch(0) ForwardPass(0)
//   // 1: SendActivation(0)
//   // 2: LoadMicroBatch(1) ForwardPass(1) ...
//   auto zbv = pipe::make_schedule("zb-v", /*micro_batches=*/8, /*stages=*/4, /*stage_id=*/1);   // by name
//
// A step's instructions run in order; p2p instructions are blocking and meet their peer's in the same step.

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "strata/pipe/instruction.h"
#include "strata/pipe/layout.h"

namespace strata::pipe {

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

}  // namespace strata::pipe
