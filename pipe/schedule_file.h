#pragma once
// Schedules as text users can write: PyTorch's action notation (torch.distributed.pipelining), one line per
// stage, actions separated by commas, as _PipelineScheduleRuntime's _dump_csv writes them.
//
//   pipe::ScheduleTable zbv = pipe::ScheduleTable::from_schedule("zb-v", /*micro_batches=*/4, /*stages=*/2);
//   std::cout << zbv;   // line 1 (stage 0): "0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3I0,3W0,..."
//   pipe::ScheduleTable mine = pipe::ScheduleTable::parse("0F0,0SEND_F0,0RECV_B0,0B0\n"
//                                                         "1RECV_F0,1F0,1B0,1SEND_B0\n", "mine.csv");
//   std::unique_ptr<pipe::PipeSchedule> stage1 = mine.schedule(1);   // what PipelineEngine runs on stage 1
//
// An action is [virtual stage][kind][micro-batch]: F forward, B whole backward, I and W its input and weight
// halves (zero bubble), SEND_F / RECV_F an activation and SEND_B / RECV_B a gradient leaving or reaching that
// virtual stage. Empty cells are idle slots. A line may be a comment starting with '#'. The transfers are
// optional (PyTorch's "compute_only" form); where a file lists any it must list all, each after what it sends
// and before what uses it. PyTorch's UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD, WAIT_SEND_F and
// WAIT_SEND_B are read and skipped: strata's stages hold whole parameters, reduce gradients after the last
// backward and finish each transfer in its step. OVERLAP_F_B, "(1F6;6B2)OVERLAP_F_B", runs its actions in turn.
//
// Reading checks every stage's line for missing, repeated and misordered actions, transfers without a partner,
// chunks the loop or the V cannot place and (with max_activations) memory; then it plans the steps, each
// stage's computes in the file's order (plan_compute_orders), which proves the file free of deadlock. Errors
// name the line and the action. The steps are lockstep as every PipeSchedule's: where a file places a transfer
// only its order against the computes counts.

#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "strata/pipe/planned_schedule.h"

namespace strata::pipe {

/// One action of PyTorch's notation: "1F0", "0SEND_B3".
struct ScheduleAction {
  int stage;                   ///< the virtual stage it runs on (PyTorch's stage_index)
  PipeInstruction::Kind kind;  ///< a compute kind, or SendActivation (SEND_F) ... RecvGrad (RECV_B)
  int micro_batch;             ///< the micro-batch
  bool operator==(const ScheduleAction&) const = default;  ///< same stage, kind and micro-batch
};
/// PyTorch's notation: "1F0", "1B0", "1I0", "1W0", "0SEND_F0", "1RECV_F0", "1SEND_B0", "0RECV_B0".
std::ostream& operator<<(std::ostream& os, const ScheduleAction& action);

/// How a schedule file is read.
struct ScheduleTableOptions {
  /// Refuse a stage holding more than this many stages' worth of activations at once (a micro-batch's
  /// activations on one of c chunks count 1/c); 1F1B holds `stages`. 0 for no limit.
  double max_activations = 0;
};

/// A training schedule as every stage's actions in order: read from text, or made from a named schedule.
class ScheduleTable {
 public:
  /// Reads `text` (module comment above); `source` names it in errors. Throws strata::Error naming the line and
  /// the action of the first problem.
  static ScheduleTable parse(std::string_view text, std::string_view source = "schedule",
                             const ScheduleTableOptions& options = {});
  /// Reads the file at `path`, as parse.
  static ScheduleTable load(const std::string& path, const ScheduleTableOptions& options = {});
  /// The pipelined training schedule `name` of schedule_registry() (chunks as make_schedule takes them), with
  /// every transfer: what `strata-pipe export` writes.
  static ScheduleTable from_schedule(std::string_view name, int micro_batches, int stages, int chunks = 0);

  int stages() const { return layout_.stages; }          ///< lines, one per stage
  int micro_batches() const { return micro_batches_; }   ///< one more than the largest micro-batch
  StageLayout layout() const { return layout_; }         ///< the loop or the V, as the file places its chunks
  const std::string& source() const { return source_; }  ///< as given to parse, the path or the schedule's name
  /// Every stage's actions in order, computes and transfers (the skipped kinds left out).
  const std::vector<std::vector<ScheduleAction>>& actions() const { return actions_; }
  /// Stage stage_id's steps: a PipeSchedule named "file" that the engine and the validator run.
  std::unique_ptr<PipeSchedule> schedule(int stage_id) const;

 private:
  ScheduleTable() = default;
  std::string source_;
  StageLayout layout_;
  int micro_batches_ = 0;
  std::vector<std::vector<ScheduleAction>> actions_;
  std::shared_ptr<const SchedulePlan> plan_;
};
/// One line per stage, its actions separated by commas: text parse reads back, and PyTorch's
/// _PipelineScheduleRuntime._load_csv(path, format="compute_comms") too.
std::ostream& operator<<(std::ostream& os, const ScheduleTable& table);

}  // namespace strata::pipe
