#pragma once
// Schedules planned for all stages at once (planned_schedule.cpp, Note [planned schedules]): Megatron's interleaved
// 1F1B, the zero-bubble ZB-H1, looped ZB and ZB-V, DualPipeV, forward passes over any layout, and compute orders
// given per stage, which schedule files run.
//
//   pipe::ZeroBubbleVSchedule zbv(/*micro_batches=*/8, /*stages=*/4, /*stage_id=*/1);   // two chunks in a V
//   std::cout << zbv.step(6);   // "RecvActivation(5) SendActivation(4) RecvActivation(0, chunk 1)
//                               //  ForwardPass(0, chunk 1)": chunk 1 of stage 1 is virtual stage 6 of 8

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/pipe/schedule.h"

namespace strata::pipe {

/// Every stage's steps, as a planner made them.
struct SchedulePlan {
  std::vector<std::vector<PipeStep>> steps;  ///< [stage][step]
};

/// How PlannedSchedule orders each stage's compute (Note [planned schedules] in planned_schedule.cpp).
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
/// `chunks` model chunks per stage, B and W split as in ZB-H1, in whichever of three orders finishes first at unit
/// costs: the greedy one of zb-v, the paper's fixed one (interleaved 1F1B's with each pair followed by a W), and that
/// order's F and B with W filling every wait. Each stage keeps at most S stages' worth of activations, 1F1B's peak.
/// Any number of micro-batches.
class ZeroBubbleInterleavedSchedule : public PlannedSchedule {
 public:
  /// Stage stage_id's steps for M micro_batches over S stages of `chunks` chunks each.
  ZeroBubbleInterleavedSchedule(int micro_batches, int stages, int stage_id, int chunks = 2);
  static constexpr std::string_view kName = "zb-interleaved";  ///< its name in the registry
  std::string_view name() const override { return kName; }
};

/// Zero bubble ZB-V: two chunks per stage in a V (StageLayout::v_shape), B and W split as in ZB-H1, in whichever
/// of three orders finishes first at unit costs: the greedy one (chunk 1's work first when both chunks could go
/// on), the ZB-V paper's, and that order's F and B with W filling every wait. Each stage keeps at most 2S chunk activations (S stages' worth, 1F1B's peak) and
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

}  // namespace strata::pipe
