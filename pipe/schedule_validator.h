#pragma once
// The validator: runs every stage's instruction stream in lockstep before any process starts, proves that it is
// correct and times it on a simulated clock, beside the critical-path lower bound of its layout.
//
//   auto report = pipe::validate_schedule("train", /*micro_batches=*/8, /*stages=*/4);
//   std::cout << report;   // steps, bubble fraction, simulated time and its lower bound, peak buffers per stage

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "strata/pipe/schedule.h"

namespace strata::pipe {

/// What each compute instruction costs on the validator's clock: times for one micro-batch through one
/// stage's share of the model (a chunk's instruction takes 1/chunks of it), and what a transfer takes. A transfer
/// occupies its link (one direction between two stages), not the stages: it starts once both sides have posted it
/// and the link has sent the bytes before it, holds the link for link_time() and arrives p2p later, so messages
/// in flight on one link overlap their latency, as MPI and NCCL pipeline them; only what uses the data waits.
struct ScheduleCosts {
  double forward = 1;          ///< ForwardPass
  double backward_input = 1;   ///< BackwardInput (B)
  double backward_weight = 1;  ///< BackwardWeight (W); BackwardPass costs B + W
  double p2p = 0;              ///< a transfer's latency, beyond the time its bytes take on the link
  double p2p_bytes = 0;        ///< the bytes of one transfer: a micro-batch's activations (or their gradients)
  double bandwidth = 0;        ///< bytes per second of one link; 0 for unlimited

  /// What one compute instruction of a whole stage costs (BackwardPass: B + W); 0 for the other kinds.
  double of(PipeInstruction::Kind kind) const;
  /// How long one transfer holds its link: p2p_bytes / bandwidth, 0 at unlimited bandwidth.
  double link_time() const;
  /// One transfer's time from its start to its arrival: link_time() + p2p.
  double transfer_time() const;
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
  /// instruction takes its cost once what it uses has arrived, a transfer costs.transfer_time() (ScheduleCosts).
  double time = 0;
  double idle_fraction = 0;  ///< 1 - (busy time summed over stages) / (S x time)
  /// lower_bound() for the schedule's layout where it trains a pipeline (without ValidateOptions::compute_cost);
  /// 0 for the others
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
  /// When it started on the simulated clock (a transfer: once both sides posted it and its link was free)
  double start = 0;
  double end = 0;  ///< when it ended (a transfer: when it arrived)
};

/// The most stage-steps (stages x steps per stage) validate_schedule simulates by default: some 10 s, 1 GB.
inline constexpr int64_t kMaxValidatedStageSteps = int64_t{1} << 26;

/// How validate_schedule runs.
struct ValidateOptions {
  int chunks = 0;       ///< for the named schedule: model chunks per stage, 0 for the schedule's own
  ScheduleCosts costs;  ///< the simulated clock's costs
  std::function<void(const TraceEvent&)> on_event;    ///< sees every instruction as it runs, when given
  int64_t max_stage_steps = kMaxValidatedStageSteps;  ///< a larger run is refused before it allocates
  /// When given, what compute instruction `ins` of `stage` takes, in place of costs' compute times (stages that
  /// differ, a measured run's times); costs still times the transfers, and the report then has no lower_bound
  std::function<double(int stage, const PipeInstruction& ins)> compute_cost = {};
  /// Receives posted as early as the schedule allows, as the engine posts them over MPI (Note [early receives] in
  /// pipe/stage.cpp); false: each at its instruction, as over NCCL
  bool early_receives = true;
};

/// Runs all stages' instruction streams in lockstep with blocking p2p, the strictest order transfers may keep
/// (the engine's overlapped transfers relax it without reordering), and proves: every send meets the
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

}  // namespace strata::pipe
