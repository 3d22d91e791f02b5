// Pipeline schedules against listings worked out by hand from DeepSpeed's rules, their timing properties
// for every small shape, and the validator on every schedule and on hand-broken ones.

#include <algorithm>
#include <climits>
#include <set>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "strata/pipe/planned_schedule.h"
#include "strata/pipe/schedule.h"
#include "strata/pipe/schedule_validator.h"
#include "strata/pipe/simulate.h"
#include "strata/pipe/trace.h"
#include "../helpers.h"

namespace strata::pipe {
namespace {

using Instr = PipeInstruction;

std::string listing(std::string_view name, int micro_batches, int stages, int stage_id) {
  std::ostringstream os;
  os << *make_schedule(name, micro_batches, stages, stage_id);
  return os.str();
}

std::string text(const auto& printable) {
  std::ostringstream os;
  os << printable;
  return os.str();
}

PipeStep make_step(std::initializer_list<Instr> instructions) {
  PipeStep step;
  for (const Instr& in : instructions) step.push_back(in);
  return step;
}

// ---- listings ---------------------------------------------------------------------------------

TEST(PipeSchedule, PrintsInstructionsAndSteps) {
  EXPECT_EQ(text(Instr{Instr::RecvGrad, 0}), "RecvGrad(0)");
  EXPECT_EQ(text(Instr{Instr::OptimizerStep}), "OptimizerStep()");
  EXPECT_EQ(text(make_step({{Instr::RecvGrad, 0}, {Instr::SendActivation, 2}, {Instr::BackwardPass, 0}})),
            "RecvGrad(0) SendActivation(2) BackwardPass(0)");
  EXPECT_EQ(text(PipeStep{}), "");
  EXPECT_EQ(name(Instr::ReduceTiedGrads), "ReduceTiedGrads");
  EXPECT_TRUE(Instr{Instr::LoadMicroBatch}.has_buffer());
  EXPECT_FALSE(Instr{Instr::ReduceGrads}.has_buffer());
}

TEST(PipeSchedule, EveryKindHasItsNameAndBufferFlag) {
  // STRATA_PIPE_INSTRUCTION_KINDS is the one list: the enum, the names, has_buffer() and kNumKinds all follow it.
  const std::vector<std::pair<std::string, bool>> expected = {
      {"LoadMicroBatch", true}, {"ForwardPass", true},      {"BackwardPass", true},   {"BackwardInput", true},
      {"BackwardWeight", true}, {"SendActivation", true},   {"RecvActivation", true}, {"SendGrad", true},
      {"RecvGrad", true},       {"ReduceTiedGrads", false}, {"ReduceGrads", false},   {"OptimizerStep", false}};
  ASSERT_EQ(Instr::kNumKinds, expected.size());
  for (size_t k = 0; k < Instr::kNumKinds; ++k) {
    const auto kind = static_cast<Instr::Kind>(k);
    EXPECT_EQ(name(kind), expected[k].first);
    EXPECT_EQ(Instr{kind}.has_buffer(), expected[k].second) << expected[k].first;
  }
  EXPECT_THROW_MSG(name(static_cast<Instr::Kind>(Instr::kNumKinds)), "PipeInstruction: invalid kind 12");
}

TEST(PipeScheduleTrain, GoldenFourMicroBatchesTwoStages) {
  EXPECT_EQ(listing("train", 4, 2, 0),
            "0: LoadMicroBatch(0) ForwardPass(0)\n"
            "1: SendActivation(0)\n"
            "2: LoadMicroBatch(1) ForwardPass(1)\n"
            "3: RecvGrad(0) SendActivation(1) BackwardPass(0)\n"
            "4: LoadMicroBatch(0) ForwardPass(0)\n"
            "5: RecvGrad(1) SendActivation(0) BackwardPass(1)\n"
            "6: LoadMicroBatch(1) ForwardPass(1)\n"
            "7: RecvGrad(0) SendActivation(1) BackwardPass(0)\n"
            "8:\n"
            "9: RecvGrad(1) BackwardPass(1) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  EXPECT_EQ(listing("train", 4, 2, 1),
            "0:\n"
            "1: RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)\n"
            "2: BackwardPass(0)\n"
            "3: SendGrad(0) RecvActivation(1) LoadMicroBatch(1) ForwardPass(1)\n"
            "4: BackwardPass(1)\n"
            "5: SendGrad(1) RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)\n"
            "6: BackwardPass(0)\n"
            "7: SendGrad(0) RecvActivation(1) LoadMicroBatch(1) ForwardPass(1)\n"
            "8: BackwardPass(1)\n"
            "9: SendGrad(1) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
}

TEST(PipeScheduleTrain, GoldenTwoMicroBatchesThreeStages) {
  EXPECT_EQ(listing("train", 2, 3, 0),
            "0: LoadMicroBatch(0) ForwardPass(0)\n"
            "1: SendActivation(0)\n"
            "2: LoadMicroBatch(1) ForwardPass(1)\n"
            "3: SendActivation(1)\n"
            "4:\n"
            "5: RecvGrad(0) BackwardPass(0)\n"
            "6:\n"
            "7: RecvGrad(1) BackwardPass(1) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  EXPECT_EQ(listing("train", 2, 3, 1),
            "0:\n"
            "1: RecvActivation(0) ForwardPass(0)\n"
            "2: SendActivation(0)\n"
            "3: RecvActivation(1) ForwardPass(1)\n"
            "4: RecvGrad(0) SendActivation(1) BackwardPass(0)\n"
            "5: SendGrad(0)\n"
            "6: RecvGrad(1) BackwardPass(1)\n"
            "7: SendGrad(1) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  EXPECT_EQ(listing("train", 2, 3, 2),
            "0:\n"
            "1:\n"
            "2: RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)\n"
            "3: BackwardPass(0)\n"
            "4: SendGrad(0) RecvActivation(1) LoadMicroBatch(1) ForwardPass(1)\n"
            "5: BackwardPass(1)\n"
            "6: SendGrad(1)\n"
            "7: ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
}

TEST(PipeScheduleTrain, GoldenSingleStage) {
  EXPECT_EQ(listing("train", 1, 1, 0),
            "0: LoadMicroBatch(0) ForwardPass(0)\n"
            "1: BackwardPass(0) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  EXPECT_EQ(TrainSchedule(1, 1, 0).num_pipe_buffers(), 2);
}

TEST(PipeScheduleInference, GoldenTwoMicroBatchesThreeStages) {
  EXPECT_EQ(listing("inference", 2, 3, 0),
            "0: LoadMicroBatch(0) ForwardPass(0)\n"
            "1: LoadMicroBatch(1) SendActivation(0) ForwardPass(1)\n"
            "2: SendActivation(1)\n"
            "3:\n");
  EXPECT_EQ(listing("inference", 2, 3, 1),
            "0:\n"
            "1: RecvActivation(0) ForwardPass(0)\n"
            "2: RecvActivation(1) SendActivation(0) ForwardPass(1)\n"
            "3: SendActivation(1)\n");
  EXPECT_EQ(listing("inference", 2, 3, 2),
            "0:\n"
            "1:\n"
            "2: LoadMicroBatch(0) RecvActivation(0) ForwardPass(0)\n"
            "3: LoadMicroBatch(1) RecvActivation(1) ForwardPass(1)\n");
  const InferenceSchedule sched(2, 3, 1);
  EXPECT_FALSE(sched.is_training());
  EXPECT_EQ(sched.num_pipe_buffers(), 2);
}

TEST(PipeScheduleDataParallel, GoldenEveryStageRunsTheWholeBatch) {
  const std::string expected =
      "0: LoadMicroBatch(0) ForwardPass(0) BackwardPass(0)\n"
      "1: LoadMicroBatch(0) ForwardPass(0) BackwardPass(0) ReduceGrads() OptimizerStep()\n";
  EXPECT_EQ(listing("dataparallel", 2, 2, 0), expected);
  EXPECT_EQ(listing("dataparallel", 2, 2, 1), expected);
  EXPECT_FALSE(DataParallelSchedule(2, 2, 1).is_pipelined());
}

TEST(PipeScheduleGPipe, GoldenTwoMicroBatchesThreeStages) {
  EXPECT_EQ(listing("gpipe", 2, 3, 0),
            "0: LoadMicroBatch(0) ForwardPass(0)\n"
            "1: SendActivation(0) LoadMicroBatch(1) ForwardPass(1)\n"
            "2: SendActivation(1)\n"
            "3:\n"
            "4:\n"
            "5:\n"
            "6: RecvGrad(1) BackwardPass(1)\n"
            "7: RecvGrad(0) BackwardPass(0) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  EXPECT_EQ(listing("gpipe", 2, 3, 1),
            "0:\n"
            "1: RecvActivation(0) ForwardPass(0)\n"
            "2: RecvActivation(1) SendActivation(0) ForwardPass(1)\n"
            "3: SendActivation(1)\n"
            "4:\n"
            "5: RecvGrad(1) BackwardPass(1)\n"
            "6: RecvGrad(0) SendGrad(1) BackwardPass(0)\n"
            "7: SendGrad(0) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  EXPECT_EQ(listing("gpipe", 2, 3, 2),
            "0:\n"
            "1:\n"
            "2: RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)\n"
            "3: RecvActivation(1) LoadMicroBatch(1) ForwardPass(1)\n"
            "4: BackwardPass(1)\n"
            "5: SendGrad(1) BackwardPass(0)\n"
            "6: SendGrad(0)\n"
            "7: ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
}

// ---- properties over every small shape --------------------------------------------------------

// Checks that stage s forwards micro-batch m exactly at forward_step(m) and backwards it exactly at
// backward_step(m), in buffer buffer_of(m), and nowhere else.
void expect_compute_timing(const PipeSchedule& sched, auto forward_step, auto backward_step, auto buffer_of) {
  const int M = sched.micro_batches();
  std::vector<int> forward_at(sched.num_steps(), -1), backward_at(sched.num_steps(), -1);
  for (int m = 0; m < M; ++m) {
    forward_at.at(forward_step(m)) = m;
    backward_at.at(backward_step(m)) = m;
  }
  for (int t = 0; t < sched.num_steps(); ++t) {
    int forwards = 0, backwards = 0;
    for (const Instr& in : sched.step(t)) {
      if (in.kind == Instr::ForwardPass) {
        ++forwards;
        EXPECT_EQ(in.buffer_id, buffer_of(forward_at[t])) << "step " << t;
      }
      if (in.kind == Instr::BackwardPass) {
        ++backwards;
        EXPECT_EQ(in.buffer_id, buffer_of(backward_at[t])) << "step " << t;
      }
    }
    ASSERT_EQ(forwards, forward_at[t] >= 0)
        << sched.name() << " M " << M << " S " << sched.stages() << " stage " << sched.stage_id() << " step " << t;
    ASSERT_EQ(backwards, backward_at[t] >= 0)
        << sched.name() << " M " << M << " S " << sched.stages() << " stage " << sched.stage_id() << " step " << t;
  }
}

TEST(PipeScheduleTrain, ForwardAndBackwardStepsForEveryShape) {
  for (int S = 1; S <= 16; ++S)
    for (int M = 1; M <= 64; ++M)
      for (int s = 0; s < S; ++s) {
        const TrainSchedule sched(M, S, s);
        ASSERT_EQ(sched.num_steps(), 2 * (M + S - 1));
        const int buffers = std::max(2, std::min(S - s, M));
        ASSERT_EQ(sched.num_pipe_buffers(), buffers);
        expect_compute_timing(
            sched, [&](int m) { return 2 * m + s; }, [&](int m) { return 2 * m + 2 * S - 1 - s; },
            [&](int m) { return m % buffers; });
      }
}

TEST(PipeScheduleGPipe, ForwardAndBackwardStepsForEveryShape) {
  for (int S = 1; S <= 16; ++S)
    for (int M = 1; M <= 64; ++M)
      for (int s = 0; s < S; ++s) {
        const GPipeSchedule sched(M, S, s);
        ASSERT_EQ(sched.num_steps(), 2 * (M + S - 1));
        ASSERT_EQ(sched.num_pipe_buffers(), M);
        expect_compute_timing(
            sched, [&](int m) { return m + s; }, [&](int m) { return (M + S - 1) + (M - 1 - m) + (S - 1 - s); },
            [](int m) { return m; });
      }
}

// ---- the validator on every schedule ----------------------------------------------------------

TEST(ScheduleValidator, EveryScheduleForEveryShape) {
  for (const char* name : {"train", "inference", "dataparallel", "gpipe"})
    for (int S = 1; S <= 16; ++S)
      for (int M = 1; M <= 64; ++M) {
        const std::string where = std::string(name) + " M " + std::to_string(M) + " S " + std::to_string(S);
        ScheduleReport report;
        try {
          report = validate_schedule(name, M, S);
        } catch (const Error& e) {
          FAIL() << where << ": " << e.what();
        }
        const std::string_view kind = name;
        ASSERT_EQ(report.schedule, kind);
        ASSERT_EQ(report.micro_batches, M);
        ASSERT_EQ(report.stages, S);
        ASSERT_EQ(report.steps, kind == "dataparallel" ? M : kind == "inference" ? M + S - 1 : 2 * (M + S - 1));
        ASSERT_NEAR(report.bubble_fraction, kind == "dataparallel" ? 0.0 : (S - 1.0) / (M + S - 1), 1e-12) << where;
        ASSERT_EQ(report.per_stage.size(), static_cast<size_t>(S));
        for (int s = 0; s < S; ++s) {
          const StageReport& stage = report.per_stage[s];
          ASSERT_EQ(stage.compute_steps, kind == "train" || kind == "gpipe" ? 2 * M : M) << where;
          ASSERT_LE(stage.peak_live_buffers, stage.num_pipe_buffers) << where << " stage " << s;
          // 1F1B keeps S - s micro-batches in flight on stage s, GPipe all of them, the others one or two.
          const int peak = kind == "train" ? std::min(S - s, M) : kind == "gpipe" ? M : -1;
          if (peak > 0) {
            ASSERT_EQ(stage.peak_live_buffers, peak) << where << " stage " << s;
          } else {
            ASSERT_GE(stage.peak_live_buffers, 1) << where << " stage " << s;
          }
        }
      }
}

TEST(ScheduleValidator, MicroBatchIdsTravelWithTheMessages) {
  for (int S = 1; S <= 6; ++S)
    for (int M = 1; M <= 12; ++M) {
      int forwards = 0, backwards = 0, receives = 0;
      ValidateOptions options;
      options.on_event = [&](const TraceEvent& e) {
        const Instr::Kind kind = e.instruction.kind;
        forwards += kind == Instr::ForwardPass;
        backwards += kind == Instr::BackwardPass;
        receives += kind == Instr::RecvActivation;
        if (kind == Instr::ForwardPass || kind == Instr::RecvActivation) {
          EXPECT_EQ(e.step, 2 * e.micro_batch + e.stage);
        } else if (kind == Instr::BackwardPass) {
          EXPECT_EQ(e.step, 2 * e.micro_batch + 2 * S - 1 - e.stage);
        }
        if (e.instruction.has_buffer()) {
          EXPECT_EQ(e.instruction.buffer_id, e.micro_batch % std::max(2, std::min(S - e.stage, M)));
        } else {
          EXPECT_EQ(e.micro_batch, -1);
        }
      };
      validate_schedule("train", M, S, options);
      EXPECT_EQ(forwards, M * S);
      EXPECT_EQ(backwards, M * S);
      EXPECT_EQ(receives, M * (S - 1));
    }
}

TEST(ScheduleValidator, ReportText) {
  EXPECT_EQ(text(validate_schedule("train", 8, 4)),
            "schedule train  stages 4  micro-batches 8  steps 22  bubble 0.2727\n"
            "time 33 (forward 1, backward input 1, backward weight 1, p2p 0)  lower bound 27  idle 0.2727  peak "
            "activations 4 stages\n"
            "stage 0: compute 16 steps, peak live buffers 4 of 4, busy 24\n"
            "stage 1: compute 16 steps, peak live buffers 3 of 3, busy 24\n"
            "stage 2: compute 16 steps, peak live buffers 2 of 2, busy 24\n"
            "stage 3: compute 16 steps, peak live buffers 1 of 2, busy 24\n");
  ValidateOptions options;
  options.costs = {2, 3, 1, 0.5};
  EXPECT_EQ(text(validate_schedule("zb-v", 4, 2, options)),
            "schedule zb-v  stages 2  micro-batches 4  chunks 2  steps 25  bubble 0.0400\n"
            "time 36.5 (forward 2, backward input 3, backward weight 1, p2p 0.5)  lower bound 25.5  idle 0.3425  peak "
            "activations 2 stages\n"
            "stage 0: compute 24 steps, peak live buffers 6 of 8, busy 24\n"
            "stage 1: compute 24 steps, peak live buffers 5 of 8, busy 24\n");
  // The bytes and the bandwidth appear once either is given; a bandwidth of 0 is unlimited. Each transfer takes
  // 0.25 + 5e8 / 2e9 = 0.5, two of them on the critical path: 9 + 2 x 0.5 (stage 1 receives the second
  // activation early, Note [early receives]).
  options.costs = {1, 1, 1, 0.25, 5e8, 2e9};
  EXPECT_EQ(text(validate_schedule("train", 2, 2, options)),
            "schedule train  stages 2  micro-batches 2  steps 6  bubble 0.3333\n"
            "time 10 (forward 1, backward input 1, backward weight 1, p2p 0.25, bytes 5e+08, bandwidth 2e+09)  lower "
            "bound 8  idle 0.4000  peak activations 2 stages\n"
            "stage 0: compute 4 steps, peak live buffers 2 of 2, busy 6\n"
            "stage 1: compute 4 steps, peak live buffers 1 of 2, busy 6\n");
  options.costs.bandwidth = 0;
  EXPECT_NE(text(validate_schedule("train", 2, 2, options)).find("p2p 0.25, bytes 5e+08, bandwidth unlimited)"),
            std::string::npos);
}

// ---- the validator on hand-broken schedules ----------------------------------------------------

// A schedule whose steps pass through `edit` (stage id, step id, the original step) and that may declare
// another number of buffers.
using Edit = std::function<PipeStep(int stage_id, int step_id, PipeStep step)>;
template <class Base>
class Edited : public Base {
 public:
  Edited(int micro_batches, int stages, int stage_id, Edit edit, int buffers)
      : Base(micro_batches, stages, stage_id), edit_(std::move(edit)), buffers_(buffers) {}
  PipeStep step(int step_id) const override { return edit_(this->stage_id(), step_id, Base::step(step_id)); }
  int num_pipe_buffers() const override { return buffers_ >= 0 ? buffers_ : Base::num_pipe_buffers(); }

 private:
  Edit edit_;
  int buffers_;
};

// Validates the edited schedule; buffers(s) < 0 keeps stage s's own number of buffers.
template <class Base = TrainSchedule>
ScheduleReport validate_edited(
    int micro_batches, int stages, const Edit& edit,
    std::function<int(int stage_id)> buffers = [](int) { return -1; }) {
  return validate_schedule(
      [&](int s) { return std::make_unique<Edited<Base>>(micro_batches, stages, s, edit, buffers(s)); }, stages);
}

// Replaces step `step_id` of stage `stage_id` and leaves every other step as it is.
Edit replace(int stage_id, int step_id, PipeStep with) {
  return [=](int s, int t, PipeStep step) { return s == stage_id && t == step_id ? with : step; };
}

Edit unedited() {
  return [](int, int, PipeStep step) { return step; };
}

TEST(ScheduleValidator, UneditedScheduleValidates) { EXPECT_EQ(validate_edited(4, 2, unedited()).steps, 10); }

TEST(ScheduleValidator, BothStagesSendingFirstDeadlocks) {
  // Stage 1's step 3 is SendGrad(0) RecvActivation(1) ...; stage 0 now also sends before it receives.
  EXPECT_THROW_MSG(
      validate_edited(
          4, 2, replace(0, 3, make_step({{Instr::SendActivation, 1}, {Instr::RecvGrad, 0}, {Instr::BackwardPass, 0}}))),
      "validate_schedule: train schedule deadlocks at step 3: stage 0 waits in SendActivation(1) for stage 1; "
      "stage 1 waits in SendGrad(0) for stage 0");
}

TEST(ScheduleValidator, MissingBackward) {
  EXPECT_THROW_MSG(validate_edited(2, 1, replace(0, 1, PipeStep{})),
                   "validate_schedule: train schedule, stage 0, step 3, ReduceTiedGrads(): comes before every "
                   "micro-batch is backwarded (1 of 2)");
  // On the last of two stages, the grad of the micro-batch that was never backwarded cannot be sent.
  EXPECT_THROW_MSG(validate_edited(4, 2, replace(1, 2, PipeStep{})),
                   "validate_schedule: train schedule, stage 1, step 3, SendGrad(0) (micro-batch 0): micro-batch 0 "
                   "is not backwarded yet");
}

TEST(ScheduleValidator, BufferOverwrittenWhileNeeded) {
  // With one buffer, stage 0 loads micro-batch 1 over micro-batch 0 before backwarding it.
  EXPECT_THROW_MSG(validate_edited(4, 2, unedited(), [](int s) { return s == 0 ? 1 : -1; }),
                   "validate_schedule: train schedule, stage 0, step 2, LoadMicroBatch(0) (micro-batch 1): overwrites "
                   "micro-batch 0, which is not yet backwarded");
  // One buffer is enough for the last stage, but only because it sends a grad before receiving the next
  // activation: swapped (on both sides, so the pair still meets), the receive overwrites the unsent grad.
  const auto swapped = [](int s, int t, PipeStep step) {
    if (t != 3) return step;
    return s == 0 ? make_step({{Instr::SendActivation, 1}, {Instr::RecvGrad, 0}, {Instr::BackwardPass, 0}})
                  : make_step({{Instr::RecvActivation, 0},
                               {Instr::SendGrad, 0},
                               {Instr::LoadMicroBatch, 0},
                               {Instr::ForwardPass, 0}});
  };
  const auto one_on_last = [](int s) { return s == 1 ? 1 : -1; };
  EXPECT_EQ(validate_edited(4, 2, unedited(), one_on_last).per_stage[1].num_pipe_buffers, 1);
  EXPECT_THROW_MSG(validate_edited(4, 2, swapped, one_on_last),
                   "validate_schedule: train schedule, stage 1, step 3, RecvActivation(0) (micro-batch 1): "
                   "overwrites micro-batch 0, which is backwarded but its grad is not yet sent");
}

TEST(ScheduleValidator, SendOfUnforwardedBuffer) {
  EXPECT_THROW_MSG(validate_edited(4, 2, replace(0, 0, make_step({{Instr::LoadMicroBatch, 0}}))),
                   "validate_schedule: train schedule, stage 0, step 1, SendActivation(0) (micro-batch 0): "
                   "micro-batch 0 is not forwarded yet");
  EXPECT_THROW_MSG(validate_edited(4, 2, replace(0, 1, make_step({{Instr::SendActivation, 1}}))),
                   "validate_schedule: train schedule, stage 0, step 1, SendActivation(1): buffer 1 holds no "
                   "micro-batch");
}

TEST(ScheduleValidator, OptimizerStepOutOfPlace) {
  // Stage 0 of M = 2, S = 2 ends with RecvGrad(1) BackwardPass(1) ReduceTiedGrads() ReduceGrads() OptimizerStep().
  const auto last_step = [](std::initializer_list<Instr> instructions) {
    return replace(0, 5, make_step(instructions));
  };
  EXPECT_THROW_MSG(
      validate_edited(2, 2,
                      last_step({{Instr::RecvGrad, 1},
                                 {Instr::OptimizerStep},
                                 {Instr::BackwardPass, 1},
                                 {Instr::ReduceTiedGrads},
                                 {Instr::ReduceGrads}})),
      "validate_schedule: train schedule, stage 0, step 5, OptimizerStep(): comes before every micro-batch is "
      "backwarded (1 of 2)");
  EXPECT_THROW_MSG(
      validate_edited(
          2, 2,
          last_step({{Instr::RecvGrad, 1}, {Instr::BackwardPass, 1}, {Instr::OptimizerStep}, {Instr::ReduceGrads}})),
      "stage 0, step 5, OptimizerStep(): comes before ReduceGrads");
  EXPECT_THROW_MSG(validate_edited(2, 2,
                                   last_step({{Instr::RecvGrad, 1},
                                              {Instr::BackwardPass, 1},
                                              {Instr::ReduceGrads},
                                              {Instr::OptimizerStep},
                                              {Instr::OptimizerStep}})),
                   "stage 0, step 5, OptimizerStep(): comes after the optimizer step");
  EXPECT_THROW_MSG(validate_edited(2, 2, last_step({{Instr::RecvGrad, 1}, {Instr::BackwardPass, 1}})),
                   "validate_schedule: train schedule, stage 0 never runs OptimizerStep");
}

TEST(ScheduleValidator, EveryOtherViolationIsNamed) {
  // Edits of train M = 4, S = 2 (listed in GoldenFourMicroBatchesTwoStages) unless the case says otherwise.
  const auto train = [](Edit edit) { return [edit] { validate_edited(4, 2, edit); }; };
  const auto step = [](std::initializer_list<Instr> instructions) { return make_step(instructions); };
  const Instr load0{Instr::LoadMicroBatch, 0}, load1{Instr::LoadMicroBatch, 1}, forward0{Instr::ForwardPass, 0},
      backward0{Instr::BackwardPass, 0}, recv0{Instr::RecvActivation, 0}, send0{Instr::SendActivation, 0};
  const Instr tied{Instr::ReduceTiedGrads}, reduce{Instr::ReduceGrads}, optimizer_step{Instr::OptimizerStep};
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {train(replace(0, 0, step({{Instr::LoadMicroBatch, 2}}))),
       "stage 0, step 0, LoadMicroBatch(2): buffer 2 is out of range for 2 pipe buffers"},
      {[] { validate_edited(4, 2, unedited(), [](int) { return 0; }); },
       "validate_schedule: stage 0 declares 0 pipe buffers"},
      // Loads.
      {[&] {
         validate_edited(2, 3, replace(1, 1, step({recv0, load0, forward0})));
       },
       "stage 1, step 1, LoadMicroBatch(0): only the first and the last stage load micro-batches"},
      {[&] {
         validate_edited(1, 1, replace(0, 0, step({load0, load1, forward0})));
       },
       "stage 0, step 0, LoadMicroBatch(1) (micro-batch 1): the batch has only 1 micro-batches"},
      {train(replace(1, 1, step({recv0, load0, load0, forward0}))),
       "stage 1, step 1, LoadMicroBatch(0) (micro-batch 1): overwrites the labels of micro-batch 0, not yet used by "
       "a forward pass"},
      // Forward passes.
      {train(replace(1, 1, step({recv0, forward0}))),
       "stage 1, step 1, ForwardPass(0) (micro-batch 0): no labels loaded for the loss"},
      {train(replace(1, 1, step({load1, recv0, load0, forward0}))),
       "stage 1, step 1, ForwardPass(0) (micro-batch 0): the buffer holds the labels of micro-batch 1"},
      {train(replace(1, 2, step({forward0}))),
       "stage 1, step 2, ForwardPass(0) (micro-batch 0): micro-batch 0 was already forwarded"},
      // Backward passes.
      {[&] {
         validate_edited(1, 1, replace(0, 0, step({load0, backward0})));
       },
       "stage 0, step 0, BackwardPass(0) (micro-batch 0): micro-batch 0 is not forwarded yet"},
      {[&] {
         validate_edited(1, 1, replace(0, 1, step({backward0, backward0, tied, reduce, optimizer_step})));
       },
       "stage 0, step 1, BackwardPass(0) (micro-batch 0): micro-batch 0 was already backwarded"},
      {train(replace(0, 3, step({backward0, {Instr::RecvGrad, 0}, {Instr::SendActivation, 1}}))),
       "stage 0, step 3, BackwardPass(0) (micro-batch 0): the grad of micro-batch 0 was not received"},
      {[] { validate_edited(2, 1, replace(0, 3, PipeStep{})); },
       "validate_schedule: train schedule, stage 0 backwarded 1 of 2 micro-batches"},
      // Point-to-point.
      {train(replace(1, 0, step({send0}))), "stage 1, step 0, SendActivation(0): stage 1 has no next stage"},
      {train(replace(0, 3, step({{Instr::RecvGrad, 0}, send0, backward0}))),
       "stage 0, step 3, SendActivation(0) (micro-batch 0): the output of micro-batch 0 was already sent"},
      {train(replace(1, 5, step({{Instr::SendGrad, 0}, recv0, load0, forward0}))),
       "stage 1, step 5, SendGrad(0) (micro-batch 0): the grad of micro-batch 0 was already sent"},
      {train(replace(0, 3, step({{Instr::RecvGrad, 1}, {Instr::SendActivation, 1}, backward0}))),
       "stage 0, step 3, RecvGrad(1) (micro-batch 0): buffer 1 holds micro-batch 1"},
      // Schedules that do not train, or whose stages are replicas.
      {[&] {
         validate_edited<InferenceSchedule>(2, 2, replace(1, 1, step({load0, recv0, forward0, {Instr::SendGrad, 0}})));
       },
       "inference schedule, stage 1, step 1, SendGrad(0): gradients in a schedule that does not train"},
      {[&] {
         validate_edited<InferenceSchedule>(2, 2, replace(0, 0, step({load0, forward0, backward0})));
       },
       "inference schedule, stage 0, step 0, BackwardPass(0) (micro-batch 0): a backward pass in a schedule that "
       "does not train"},
      {[&] {
         validate_edited<InferenceSchedule>(2, 2, replace(0, 0, step({load0, forward0, reduce})));
       },
       "inference schedule, stage 0, step 0, ReduceGrads(): end-of-batch instruction in a schedule that does not "
       "train"},
      {[&] {
         validate_edited<DataParallelSchedule>(
             1, 2, replace(0, 0, step({load0, forward0, send0, backward0, reduce, optimizer_step})));
       },
       "dataparallel schedule, stage 0, step 0, SendActivation(0): the stages of a dataparallel schedule are "
       "replicas and exchange nothing"},
      // Nothing else goes wrong, but stage 0 never forwards its micro-batch.
      {[&] { validate_edited(1, 1, [&](int, int t, PipeStep) { return t == 0 ? step({load0}) : PipeStep{}; }); },
       "validate_schedule: train schedule, stage 0 forwarded 0 of 1 micro-batches"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_THROW_MSG(cases[i].first(), cases[i].second);
  }
}

// ---- bad arguments ----------------------------------------------------------------------------

TEST(PipeSchedule, BadArguments) {
  EXPECT_THROW_MSG(make_schedule("train", 0, 2, 0), "PipeSchedule: micro_batches must be at least 1, got 0");
  EXPECT_THROW_MSG(make_schedule("gpipe", 4, 0, 0), "PipeSchedule: stages must be at least 1, got 0");
  EXPECT_THROW_MSG(make_schedule("inference", 4, 2, 2), "PipeSchedule: stage_id 2 is out of range for 2 stages");
  EXPECT_THROW_MSG(make_schedule("train", 4, 2, -1), "PipeSchedule: stage_id -1 is out of range for 2 stages");
  EXPECT_THROW_MSG(make_schedule("1f1b", 4, 2, 0),
                   "make_schedule: unknown schedule \"1f1b\"; expected train, inference, dataparallel, gpipe, "
                   "interleaved, zb-h1, zb-interleaved, zb-v, dualpipe-v or forward");
  EXPECT_THROW_MSG(make_schedule("train", 4, 2, 0, 2),
                   "make_schedule: the train schedule has 1 chunk per stage, got chunks = 2; only interleaved, "
                   "zb-interleaved and forward take another number");
  EXPECT_THROW_MSG(make_schedule("zb-v", 4, 2, 0, 3), "the zb-v schedule has 2 chunks per stage, got chunks = 3");
  EXPECT_THROW_MSG(make_schedule("interleaved", 6, 4, 0),
                   "Interleaved1F1BSchedule: micro_batches (6) must be a multiple of stages (4)");
  EXPECT_THROW_MSG(make_schedule("interleaved", 4, 4, 0, 1),
                   "Interleaved1F1BSchedule: chunks must be at least 2 (one chunk per stage is TrainSchedule, "
                   "\"train\") and at most 32767, got 1");
  EXPECT_THROW_MSG(make_schedule("interleaved", 4, 1, 0, 40000), "and at most 32767, got 40000");
  EXPECT_THROW_MSG(make_schedule("zb-h1", 1, 1 << 29, 0), "zb-h1 schedule: planning 536870912 stages");
  // 2 (M + S - 1) steps must fit in an int: at INT_MAX micro-batches the count wrapped negative and the
  // schedule was empty.
  for (const char* name : {"train", "inference", "dataparallel", "gpipe", "interleaved", "zb-h1", "zb-v"})
    EXPECT_THROW_MSG(make_schedule(name, INT_MAX, 1, 0),
                     "PipeSchedule: 2147483647 micro-batches + 1 stages is more than the 1073741824 a schedule's "
                     "step count holds");
  EXPECT_THROW_MSG(TrainSchedule(1, INT_MAX, 0), "PipeSchedule: 1 micro-batches + 2147483647 stages is more than");
  const int largest = static_cast<int>(PipeSchedule::kMaxMicroBatchesPlusStages) - 2;
  EXPECT_EQ(TrainSchedule(largest, 2, 1).num_steps(), 2 * (largest + 1));
  EXPECT_EQ(GPipeSchedule(largest, 2, 1).step(2 * (largest + 1) - 1).size(), 4);  // the last step is in range
  EXPECT_THROW_MSG(make_schedule("zb-h1", 0, 4, 0), "PipeSchedule: micro_batches must be at least 1, got 0");
  EXPECT_THROW_MSG(make_schedule("interleaved", 4, 0, 0), "PipeSchedule: stages must be at least 1, got 0");
  EXPECT_THROW_MSG(make_schedule("zb-v", 1 << 20, 64, 0), "zb-v schedule: planning 64 stages x 1048576 micro-batches");
  const std::vector<SchedulePrediction> one_chunk = simulate_schedules(4, 2, {}, 1);
  EXPECT_EQ(one_chunk[2].why_not, "the loop needs 2 or more chunks per stage, got 1");
  EXPECT_THROW_MSG(ZeroBubbleVSchedule(4, 2, 0).step(25), "zb-v schedule: step 25 is out of range [0, 25)");
  EXPECT_THROW_MSG(TrainSchedule(4, 2, 0).step(10), "train schedule: step 10 is out of range [0, 10)");
  EXPECT_THROW_MSG(GPipeSchedule(4, 2, 0).step(-1), "gpipe schedule: step -1 is out of range [0, 10)");
  PipeStep full;
  for (int i = 0; i < PipeStep::kCapacity; ++i) full.push_back({Instr::ReduceGrads});
  EXPECT_THROW_MSG(full.push_back({Instr::OptimizerStep}), "PipeStep: more than 12 instructions in one step");
}

TEST(ScheduleValidator, BadArguments) {
  EXPECT_THROW_MSG(validate_schedule("train", 4, 0), "validate_schedule: stages must be at least 1, got 0");
  EXPECT_THROW_MSG(validate_schedule("zero-bubble", 4, 2), "make_schedule: unknown schedule \"zero-bubble\"");
  EXPECT_THROW_MSG(validate_schedule("train", 0, 2), "PipeSchedule: micro_batches must be at least 1, got 0");
  EXPECT_THROW_MSG(validate_schedule([](int) { return std::make_unique<TrainSchedule>(4, 2, 0); }, 2),
                   "validate_schedule: the factory's schedule for stage 1 of 2 is for stage 0 of 2");
  EXPECT_THROW_MSG(validate_schedule([](int s) { return std::make_unique<TrainSchedule>(4 - s, 2, s); }, 2),
                   "validate_schedule: stage 1's schedule (train, 3 micro-batches, 8 steps) does not match stage "
                   "0's (train, 4 micro-batches, 10 steps)");
  EXPECT_THROW_MSG(validate_schedule([](int) { return std::unique_ptr<PipeSchedule>(); }, 1),
                   "validate_schedule: the factory gave no schedule for stage 0");
  // The size is checked from stage 0's schedule, before the other stages are made or any state allocated.
  int made = 0;
  ValidateOptions small;
  small.max_stage_steps = 39;
  EXPECT_THROW_MSG(validate_schedule(
                       [&](int s) {
                         ++made;
                         return std::make_unique<TrainSchedule>(8, 4, s);
                       },
                       4, small),
                   "validate_schedule: train schedule of 4 stages x 22 steps is 88 stage-steps, more than the 39 it "
                   "simulates");
  EXPECT_EQ(made, 1);
  small.max_stage_steps = 88;
  EXPECT_EQ(validate_schedule("train", 8, 4, small).steps, 22);
  EXPECT_THROW_MSG(validate_schedule("train", 1, 20'000'000),
                   "train schedule of 20000000 stages x 40000000 steps is 800000000000000 stage-steps, more than "
                   "the 67108864 it simulates");
  std::ostringstream trace;
  EXPECT_THROW_MSG(write_chrome_trace(trace, "train", 1 << 21, 2), "more than the 4194304 it simulates");
  EXPECT_EQ(trace.str(), "");
}

// ---- Chrome trace -----------------------------------------------------------------------------

TEST(ScheduleValidator, ChromeTraceIsValidJson) {
  std::ostringstream os;
  write_chrome_trace(os, "train", 4, 2);
  const nlohmann::json trace = nlohmann::json::parse(os.str());
  const nlohmann::json& events = trace.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  int threads = 0, slices = 0;
  for (const nlohmann::json& e : events) {
    if (e.at("ph") == "M") {
      EXPECT_EQ(e.at("name"), "thread_name");
      EXPECT_EQ(e.at("args").at("name"), "stage " + std::to_string(e.at("tid").get<int>()));
      ++threads;
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("pid"), 0);
    ++slices;
  }
  EXPECT_EQ(threads, 2);
  int instructions = 0;
  for (int s = 0; s < 2; ++s)
    for (const PipeStep& step : TrainSchedule(4, 2, s).steps()) instructions += step.size();
  EXPECT_EQ(slices, instructions);

  const auto find = [&](int tid, int step, const std::string& name) {
    for (const nlohmann::json& e : events)
      if (e.at("ph") == "X" && e.at("tid") == tid && e.at("args").at("step") == step && e.at("name") == name) return e;
    ADD_FAILURE() << "no " << name << " on stage " << tid << " at step " << step;
    return nlohmann::json();
  };
  // Stage 0, step 0: LoadMicroBatch(0) ForwardPass(0), half a millisecond each.
  const auto forward = nlohmann::json::parse(R"json({"name":"F0","ph":"X","pid":0,"tid":0,"ts":500,"dur":500,
      "args":{"micro_batch":0,"buffer":0,"chunk":0,"step":0}})json");
  EXPECT_EQ(find(0, 0, "F0"), forward);
  // Stage 1, step 5: SendGrad(1) RecvActivation(0) LoadMicroBatch(0) ForwardPass(0) on micro-batch 2.
  const auto receive = nlohmann::json::parse(R"json({"name":"RecvActivation(0)","ph":"X","pid":0,"tid":1,"ts":5250,
      "dur":250,"args":{"micro_batch":2,"buffer":0,"chunk":0,"step":5}})json");
  EXPECT_EQ(find(1, 5, "RecvActivation(0)"), receive);
  const auto optimizer_step = nlohmann::json::parse(R"json({"name":"OptimizerStep()","ph":"X","pid":0,"tid":0,
      "ts":9800,"dur":200,"args":{"step":9}})json");
  EXPECT_EQ(find(0, 9, "OptimizerStep()"), optimizer_step);
}

TEST(ScheduleValidator, ChromeTraceOfAnUnknownScheduleWritesNothing) {
  std::ostringstream os;
  EXPECT_THROW_MSG(write_chrome_trace(os, "pipedream", 4, 2), "unknown schedule");
  EXPECT_EQ(os.str(), "");
}

// ---- the planned schedules: interleaved 1F1B, ZB-H1, ZB-V ----------------------------------------

TEST(StageLayout, LoopAndVPlaceEveryVirtualStageOnce) {
  EXPECT_EQ(text(Instr{Instr::ForwardPass, 3, 1}), "ForwardPass(3, chunk 1)");
  EXPECT_EQ(text(Instr{Instr::BackwardWeight, 0}), "BackwardWeight(0)");
  for (int S = 1; S <= 16; ++S)
    for (const StageLayout layout : {StageLayout{S, 1, false}, StageLayout{S, 3, false}, StageLayout{S, 2, true}}) {
      std::vector<int> seen(layout.num_virtual_stages(), 0);
      for (int s = 0; s < S; ++s)
        for (int c = 0; c < layout.chunks; ++c) {
          const int vs = layout.virtual_stage(s, c);
          ++seen.at(vs);
          ASSERT_EQ(layout.stage_of(vs), s);
          ASSERT_EQ(layout.chunk_of(vs), c);
        }
      ASSERT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
  // The V: stage 0 holds the first and the last piece, the last stage turns around locally.
  const StageLayout v{4, 2, true};
  EXPECT_EQ(v.virtual_stage(0, 1), 7);
  EXPECT_EQ(v.virtual_stage(3, 0), 3);
  EXPECT_EQ(v.virtual_stage(3, 1), 4);
  const StageLayout loop{4, 2, false};
  EXPECT_EQ(loop.virtual_stage(0, 1), 4);
  EXPECT_EQ(loop.stage_of(5), 1);
  EXPECT_THROW_MSG(loop.stage_of(8), "StageLayout: virtual stage 8 is out of range for 8");
  EXPECT_THROW_MSG(v.virtual_stage(0, 2), "StageLayout: stage 0 chunk 2 is out of range for 4 stages of 2 chunks");
}

TEST(PlannedSchedule, GoldenZeroBubbleH1TwoStages) {
  // 1F1B's order of F and B; stage 0 may hold S = 2 micro-batches, so W(0) must come before F(2).
  EXPECT_EQ(listing("zb-h1", 3, 2, 0),
            "0: LoadMicroBatch(0) ForwardPass(0)\n"
            "1: SendActivation(0) LoadMicroBatch(1) ForwardPass(1)\n"
            "2: SendActivation(1)\n"
            "3: RecvGrad(0) BackwardInput(0)\n"
            "4: BackwardWeight(0)\n"
            "5: RecvGrad(1) LoadMicroBatch(2) ForwardPass(2)\n"
            "6: SendActivation(2) BackwardInput(1)\n"
            "7: BackwardWeight(1)\n"
            "8: RecvGrad(2) BackwardInput(2)\n"
            "9: BackwardWeight(2) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  // The last stage sends each grad right after B and leaves W for when it would wait.
  EXPECT_EQ(listing("zb-h1", 3, 2, 1),
            "0:\n"
            "1: RecvActivation(0) LoadMicroBatch(0) ForwardPass(0)\n"
            "2: RecvActivation(1) BackwardInput(0)\n"
            "3: SendGrad(0) LoadMicroBatch(1) ForwardPass(1)\n"
            "4: BackwardInput(1)\n"
            "5: SendGrad(1) BackwardWeight(0)\n"
            "6: RecvActivation(2) LoadMicroBatch(2) ForwardPass(2)\n"
            "7: BackwardInput(2)\n"
            "8: SendGrad(2) BackwardWeight(1)\n"
            "9: BackwardWeight(2) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
}

TEST(PlannedSchedule, GoldenInterleavedTwoStages) {
  // Megatron's order on stage 1 of 2 with 2 chunks: warm-up F(0) F(1) on chunk 0, then a forward and a
  // backward together in each step, micro-batches in groups of S = 2 through the chunks. Within a step the
  // messages with stage 0 go stage 0 -> 1 first (activations, then grads), then 1 -> 0.
  EXPECT_EQ(listing("interleaved", 4, 2, 1),
            "0:\n"
            "1: RecvActivation(0) ForwardPass(0)\n"
            "2: RecvActivation(1) SendActivation(0) ForwardPass(1)\n"
            "3: RecvActivation(0, chunk 1) SendActivation(1) LoadMicroBatch(0, chunk 1) ForwardPass(0, chunk 1) "
            "BackwardPass(0, chunk 1)\n"
            "4: RecvActivation(1, chunk 1) SendGrad(0, chunk 1) LoadMicroBatch(1, chunk 1) ForwardPass(1, chunk 1) "
            "BackwardPass(1, chunk 1)\n"
            "5: RecvActivation(2) RecvGrad(0) SendGrad(1, chunk 1) ForwardPass(2) BackwardPass(0)\n"
            "6: RecvActivation(3) RecvGrad(1) SendActivation(2) SendGrad(0) ForwardPass(3) BackwardPass(1)\n"
            "7: RecvActivation(2, chunk 1) SendActivation(3) SendGrad(1) LoadMicroBatch(2, chunk 1) "
            "ForwardPass(2, chunk 1) BackwardPass(2, chunk 1)\n"
            "8: RecvActivation(3, chunk 1) SendGrad(2, chunk 1) LoadMicroBatch(3, chunk 1) ForwardPass(3, chunk 1) "
            "BackwardPass(3, chunk 1)\n"
            "9: RecvGrad(2) SendGrad(3, chunk 1) BackwardPass(2)\n"
            "10: RecvGrad(3) SendGrad(2) BackwardPass(3)\n"
            "11: SendGrad(3) ReduceTiedGrads() ReduceGrads() OptimizerStep()\n");
  // With M = S Megatron runs every forward first.
  EXPECT_EQ(listing("interleaved", 2, 2, 1).substr(0, 120).find("BackwardPass"), std::string::npos);
}

TEST(PlannedSchedule, GoldenZeroBubbleVStageOneTurnsAroundLocally) {
  // Stage 1 of 2 holds virtual stages 1 and 2: chunk 1 takes chunk 0's output without p2p.
  const std::string stage1 = listing("zb-v", 2, 2, 1);
  EXPECT_EQ(stage1.substr(0, stage1.find("\n3:")),
            "0:\n"
            "1: RecvActivation(0) ForwardPass(0)\n"
            "2: RecvActivation(1) ForwardPass(0, chunk 1)");
  EXPECT_EQ(ZeroBubbleVSchedule(2, 2, 1).layout(), (StageLayout{2, 2, true}));
  EXPECT_EQ(Interleaved1F1BSchedule(4, 2, 1, 3).layout(), (StageLayout{2, 3, false}));
}

// Every planned schedule validates for every S <= 16 and M <= 64 (the interleaved one where M is a multiple
// of S), with the properties that define it on the simulated clock (forward, B and W one unit each).
TEST(PlannedSchedule, EveryShapeValidatesWithItsBubbleAndMemory) {
  for (int S = 1; S <= 16; ++S)
    for (int M = 1; M <= 64; ++M) {
      const std::string where = " M " + std::to_string(M) + " S " + std::to_string(S);
      ScheduleReport train, h1, v, dual;
      try {
        train = validate_schedule("train", M, S);
        h1 = validate_schedule("zb-h1", M, S);
        v = validate_schedule("zb-v", M, S);
        if (M >= 2 * S) dual = validate_schedule("dualpipe-v", M, S);
      } catch (const Error& e) {
        FAIL() << where << ": " << e.what();
      }
      // No schedule beats the critical path. Once M >= S the last stage's wait for its first input bounds it, S - 1
      // stage forwards on the loop, half as much in the V; ZB-H1 reaches it, as ZB-V does once M >= 2S.
      for (const ScheduleReport* r : {&train, &h1, &v})
        ASSERT_GE(r->time, r->lower_bound - 1e-9) << where << " " << r->schedule;
      if (M >= S) {
        ASSERT_EQ(train.lower_bound, 3.0 * M + S - 1) << where;
        ASSERT_EQ(v.lower_bound, 3.0 * M + (S - 1) / 2.0) << where;
        ASSERT_EQ(h1.time, h1.lower_bound) << where;
      }
      if (M >= 2 * S) {
        ASSERT_NEAR(v.time, v.lower_bound, 1e-9) << where;
        // DualPipeV reaches it too, at S + 1/2 stages' activations.
        ASSERT_NEAR(dual.time, dual.lower_bound, 1e-9) << where;
        ASSERT_EQ(dual.peak_activations(), S + 0.5) << where;
        for (const StageReport& stage : dual.per_stage) ASSERT_EQ(stage.busy, 3.0 * M) << where;
      }
      // 1F1B idles 3(S - 1) units, ZB-H1 a third of that once M >= S: B and W fill what F leaves.
      ASSERT_EQ(train.time, 3.0 * (M + S - 1)) << where;
      if (M >= S) {
        ASSERT_EQ(h1.time - 3 * M, S - 1) << where;
      }
      ASSERT_LE(h1.time, train.time) << where;
      // ZB-V idles (S - 1) / 2, the least a V allows (stage S - 1 starts after S - 1 half-stage forwards),
      // once M >= 2S (as PyTorch 2.15's ZBV) or for S <= 4 once M >= S, and at most 0.9 (S - 1) for S <= 16 once
      // M >= S.
      if (M >= S) {
        ASSERT_LE(v.time - 3 * M, (S <= 4 || M >= 2 * S ? 0.5 : 0.9) * (S - 1) + 1e-9) << where;
      }
      ASSERT_LE(v.time, h1.time) << where;
      // Both keep within 1F1B's peak activation memory: stage 0's min(S, M) micro-batches.
      ASSERT_EQ(train.peak_activations(), std::min(S, M)) << where;
      ASSERT_LE(h1.peak_activations(), std::min(S, M)) << where;
      ASSERT_LE(v.peak_activations(), std::min(S, M)) << where;
      for (const ScheduleReport* r : {&h1, &v})
        for (const StageReport& stage : r->per_stage) ASSERT_EQ(stage.busy, 3.0 * M) << where;
      for (int chunks = 2; chunks <= (S <= 8 ? 4 : 2); ++chunks) {
        ValidateOptions options;
        options.chunks = chunks;
        ScheduleReport interleaved, looped;
        try {
          if (M % S == 0) interleaved = validate_schedule("interleaved", M, S, options);
          looped = validate_schedule("zb-interleaved", M, S, options);
        } catch (const Error& e) {
          FAIL() << where << " chunks " << chunks << ": " << e.what();
        }
        // Megatron's bubble: (S - 1)(F + B + W) / chunks, once past the all-warm-up case M = S.
        if (M % S == 0) {
          ASSERT_EQ(interleaved.chunks, chunks);
          ASSERT_GE(interleaved.time, interleaved.lower_bound - 1e-9) << where << " v " << chunks;
        }
        if (M % S == 0 && M > S) {
          ASSERT_NEAR(interleaved.time - 3 * M, 3.0 * (S - 1) / chunks, 1e-9) << where << " v " << chunks;
        }
        // The looped zero bubble reaches the bound, (S - 1) / chunks above the work, where M is a multiple of S, at
        // 1F1B's peak; at the other M >= S it stays within 0.65 (S - 1) of it, under a fourth of 1F1B's bubble.
        ASSERT_EQ(looped.chunks, chunks);
        if (M >= S) {
          ASSERT_NEAR(looped.lower_bound, 3.0 * M + (S - 1.0) / chunks, 1e-9) << where;
        }
        ASSERT_GE(looped.time, looped.lower_bound - 1e-9) << where << " v " << chunks;
        if (M % S == 0) {
          ASSERT_NEAR(looped.time, looped.lower_bound, 1e-9) << where << " v " << chunks;
        }
        if (M >= S) {
          ASSERT_LE(looped.time - looped.lower_bound, 0.65 * (S - 1) + 1e-9) << where << " v " << chunks;
        }
        ASSERT_LE(looped.peak_activations(), std::min(S, M)) << where << " v " << chunks;
        for (const StageReport& stage : looped.per_stage) ASSERT_NEAR(stage.busy, 3.0 * M, 1e-9) << where;
      }
    }
}

// What eval_batch runs for a module in chunks: forward passes only, validated on the loop and the V.
TEST(PlannedSchedule, ForwardScheduleValidatesOnEveryLayout) {
  for (int S = 1; S <= 8; ++S)
    for (int M = 1; M <= 16; ++M)
      for (const StageLayout layout : {StageLayout{S, 2, false}, StageLayout{S, 3, false}, StageLayout{S, 2, true}}) {
        const std::string where = " M " + std::to_string(M) + " S " + std::to_string(S);
        ScheduleReport report;
        try {
          report = validate_schedule([&](int s) { return std::make_unique<ForwardSchedule>(M, S, s, layout); }, S);
        } catch (const Error& e) {
          FAIL() << where << ": " << e.what();
        }
        ASSERT_EQ(report.schedule, "forward");
        for (const StageReport& stage : report.per_stage) ASSERT_NEAR(stage.busy, M, 1e-9) << where;
      }
  EXPECT_FALSE(ForwardSchedule(2, 2, 0, {2, 2, true}).is_training());
  EXPECT_THROW_MSG(ForwardSchedule(2, 2, 0, {3, 2, true}),
                   "forward schedule: a layout of 3 stages x 2 chunks in a V does not fit 2 stages");
}

// On the hand-broken V: the validator checks what chunks and split backward passes add.
TEST(PlannedSchedule, ValidatorChecksChunksAndSplitBackward) {
  const auto broken = [](int M, int S, std::function<PipeStep(int, int, PipeStep)> edit) {
    return validate_edited<ZeroBubbleVSchedule>(M, S, edit);
  };
  // Stage 0, step 4 is BackwardInput(0, chunk 1): turned into BackwardWeight, it comes before B.
  EXPECT_EQ(text(ZeroBubbleVSchedule(4, 2, 0).step(4)), "BackwardInput(0, chunk 1)");
  EXPECT_THROW_MSG(broken(4, 2, replace(0, 4, make_step({{Instr::BackwardWeight, 0, 1}}))),
                   "validate_schedule: zb-v schedule, stage 0, step 4, BackwardWeight(0, chunk 1) (micro-batch 0): "
                   "comes before the BackwardInput of micro-batch 0");
  // Without its W (step 5 sends the grad and runs W), the buffer stays needed and the end of batch is early.
  EXPECT_THROW_MSG(broken(4, 2, replace(0, 5, make_step({{Instr::SendGrad, 0, 1}, {Instr::RecvActivation, 1, 1}}))),
                   "ReduceTiedGrads(): comes before every weight gradient is computed (7 of 8)");
  // Chunk 2 does not exist; chunk 1's forward on stage 1 has no p2p to its chunk 0, which is local.
  EXPECT_THROW_MSG(broken(4, 2, replace(0, 0, make_step({{Instr::LoadMicroBatch, 0, 2}}))),
                   "LoadMicroBatch(0, chunk 2): chunk 2 is out of range for 2 chunks");
  EXPECT_THROW_MSG(
      broken(4, 2, replace(1, 2, make_step({{Instr::RecvActivation, 1}, {Instr::RecvActivation, 0, 1}}))),
      "validate_schedule: zb-v schedule, stage 1, step 2, RecvActivation(0, chunk 1): chunk 1's previous piece is "
      "on the same stage, which hands it over without p2p");
  // Stage 1's local hand-over needs chunk 0's output.
  EXPECT_THROW_MSG(broken(4, 2, replace(1, 1, make_step({{Instr::RecvActivation, 0}}))),
                   "ForwardPass(0, chunk 1) (micro-batch 0): chunk 0's buffer 0 holds no output to hand over");
  // A p2p whose chunks do not neighbour each other in the model.
  EXPECT_THROW_MSG(
      broken(4, 2,
             replace(0, 1,
                     make_step({{Instr::SendActivation, 0, 1}, {Instr::LoadMicroBatch, 1}, {Instr::ForwardPass, 1}}))),
      "SendActivation(0, chunk 1)");
}

TEST(PlannedSchedule, SimulateRecommendsTheFastestWithinOneFOneBMemory) {
  const std::vector<SchedulePrediction> p = simulate_schedules(8, 4, {});
  std::vector<std::string> names;
  for (const SchedulePrediction& x : p) names.push_back(x.schedule);
  EXPECT_EQ(names, (std::vector<std::string>{"train", "gpipe", "interleaved", "zb-h1", "zb-interleaved", "zb-v",
                                             "dualpipe-v"}));
  // The looped and the V zero bubble tie at the bound; the first in the registry's order wins.
  EXPECT_EQ(p[4].report.time, p[5].report.time);
  EXPECT_EQ(p[recommend(p)].schedule, "zb-interleaved");
  // With a slow transfer the V's and the interleaving's extra hops cost more than their bubbles save; ZB-H1's W
  // still hides some of the transfers' time.
  const std::vector<SchedulePrediction> slow = simulate_schedules(8, 4, {1, 1, 1, 2});
  EXPECT_EQ(slow[recommend(slow)].schedule, "zb-h1");
  EXPECT_GT(slow[5].report.time, slow[0].report.time);
  EXPECT_GT(slow[4].report.time, slow[0].report.time);
  const std::vector<SchedulePrediction> odd = simulate_schedules(6, 4, {});
  EXPECT_EQ(odd[2].why_not, "micro-batches (6) must be a multiple of stages (4)");
  EXPECT_EQ(odd[2].report.steps, 0);
  // GPipe holds every micro-batch: it is never recommended over 1F1B's memory.
  const std::vector<SchedulePrediction> gpipe_only_fast = simulate_schedules(2, 4, {});
  EXPECT_NE(gpipe_only_fast[recommend(gpipe_only_fast)].schedule, "gpipe");
  EXPECT_THROW_MSG(validate_schedule("zb-h1", 4, 2, {0, {1, -1, 1, 0}, {}}), "costs must be non-negative");
  EXPECT_THROW_MSG(validate_schedule("zb-h1", 4, 2, {0, {1, 1, 1, 0, -1, 1}, {}}),
                   "costs must be non-negative, got forward 1, backward_input 1, backward_weight 1, p2p 0, p2p_bytes "
                   "-1, bandwidth 1");
  EXPECT_THROW_MSG(validate_schedule("zb-h1", 4, 2, {0, {1, 1, 1, 0, 1, -1}, {}}), "p2p_bytes 1, bandwidth -1");
  // recommend weighs the times with transfers: at 0.5 of bytes each, zb-h1, with fewer hops and W to hide them,
  // beats the looped zero bubble that wins without transfers.
  const std::vector<SchedulePrediction> narrow = simulate_schedules(8, 4, {1, 1, 1, 0, 1, 2});
  EXPECT_EQ(narrow[recommend(narrow)].schedule, "zb-h1");
}

// The clock models the engine's overlapped transfers: a transfer delays only what uses its data. On two stages,
// ValidateOptions::compute_cost times each compute instruction as given: the same as costs when it returns what
// costs would, and stages that differ where it does not.
TEST(ScheduleValidator, ComputeCostTimesEachInstructionAsGiven) {
  const ScheduleCosts costs{2, 3, 1, 0.5};
  for (const char* name : {"train", "gpipe", "interleaved", "zb-h1", "zb-interleaved", "zb-v", "dualpipe-v"})
    for (const auto& [M, S] : {std::pair{8, 4}, std::pair{12, 3}}) {
      ValidateOptions uniform;
      uniform.costs = costs;
      const ScheduleReport expected = validate_schedule(name, M, S, uniform);
      ValidateOptions given = uniform;
      given.compute_cost = [&](int, const PipeInstruction& ins) { return costs.of(ins.kind) / expected.chunks; };
      const ScheduleReport report = validate_schedule(name, M, S, given);
      EXPECT_DOUBLE_EQ(report.time, expected.time) << name << " M " << M << " S " << S;
      EXPECT_EQ(report.lower_bound, 0) << "the bound assumes equal stages";
    }
  // GPipe, 2 stages, free transfers, stage 1 three times as slow: stage 0's first forward (1), stage 1's M
  // forwards and M backwards (3 each), then stage 0's last backward (1).
  for (int M = 1; M <= 6; ++M) {
    ValidateOptions options;
    options.compute_cost = [](int stage, const PipeInstruction&) { return stage == 0 ? 1.0 : 3.0; };
    EXPECT_DOUBLE_EQ(validate_schedule("gpipe", M, 2, options).time, 6.0 * M + 2) << "M " << M;
  }
  ValidateOptions negative;
  negative.compute_cost = [](int stage, const PipeInstruction&) { return stage == 1 ? -1.0 : 1.0; };
  EXPECT_THROW_MSG(validate_schedule("train", 4, 2, negative), "compute_cost of stage 1's");
}

// With receives posted at their instructions (early_receives off, as over NCCL), 1F1B's stage 0 has one forward
// to hide each gradient's round trip behind, so each micro-batch adds one transfer to the compute (the first two),
// where blocking transfers added two. A link carries one transfer per F + B + L there, so none queues behind
// another: latency or bytes, the time is the same.
TEST(ScheduleValidator, TransfersDelayOnlyWhatUsesThem) {
  for (const double L : {0.25, 0.5, 1.0, 2.0})
    for (int M = 1; M <= 8; ++M) {
      const double expected = 2 * (M + 1) + (M + 1) * L;
      ValidateOptions options;
      options.early_receives = false;
      options.costs = {1, 1, 0, L};
      const ScheduleReport r = validate_schedule("train", M, 2, options);
      EXPECT_DOUBLE_EQ(r.time, expected) << "M " << M << " p2p " << L;
      for (const StageReport& stage : r.per_stage) EXPECT_DOUBLE_EQ(stage.busy, 2.0 * M);
      options.costs = {1, 1, 0, 0, /*p2p_bytes=*/L * 1e9, /*bandwidth=*/1e9};
      EXPECT_DOUBLE_EQ(validate_schedule("train", M, 2, options).time, expected) << "M " << M << " bytes " << L;
      options.costs = {1, 1, 0, L / 4, 3 * L, /*bandwidth=*/4};
      EXPECT_DOUBLE_EQ(validate_schedule("train", M, 2, options).time, expected) << "M " << M << " both " << L;
    }
  // A transfer's slice spans the link, from when both sides posted it and the link was free to its arrival;
  // sends and receives agree.
  ValidateOptions options;
  options.early_receives = false;
  options.costs = {1, 1, 0, 0.25, 1, 4};
  std::vector<TraceEvent> sends, receives;
  options.on_event = [&](const TraceEvent& e) {
    if (e.instruction.kind == Instr::SendActivation) sends.push_back(e);
    if (e.instruction.kind == Instr::RecvActivation) receives.push_back(e);
  };
  validate_schedule("train", 3, 2, options);
  ASSERT_EQ(sends.size(), 3u);
  ASSERT_EQ(receives.size(), 3u);
  for (size_t m = 0; m < sends.size(); ++m) {
    EXPECT_DOUBLE_EQ(sends[m].end - sends[m].start, 0.5);
    EXPECT_DOUBLE_EQ(sends[m].start, receives[m].start);
    EXPECT_DOUBLE_EQ(sends[m].end, receives[m].end);
    if (m > 0) {
      EXPECT_GE(sends[m].start, sends[m - 1].start + 0.25);  // one link sends one transfer's bytes at a time
    }
  }
}

// Note [early receives]: stage 1 posts each activation's receive once the last was reached, and stage 0 each
// gradient's once its activation was sent, so every transfer starts when it is sent. Worked by hand on 2-stage
// 1F1B (F = B = 1, W = 0, latency L): F0 reaches stage 1 at 1 + L, its gradient returns to stage 0 at 3 + 2L; from
// then on stage 0 alternates F, B and stage 1 B, F, and two micro-batches share each round trip: stage 1's next
// forward finds its activation there (sent a step before), stage 0's second backward finds its gradient there. So
// M micro-batches pay ceil(M / 2) round trips, where receives posted in their turn pay M + 1 transfers.
TEST(ScheduleValidator, EarlyReceivesLetTwoMicroBatchesShareARoundTrip) {
  for (const double L : {0.25, 0.5, 1.0, 2.0})
    for (int M = 1; M <= 8; ++M) {
      ValidateOptions options;
      options.costs = {1, 1, 0, L};
      const double expected = 2 * (M + 1) + 2 * ((M + 1) / 2) * L;
      EXPECT_DOUBLE_EQ(validate_schedule("train", M, 2, options).time, expected) << "M " << M << " p2p " << L;
      options.early_receives = false;
      EXPECT_GE(validate_schedule("train", M, 2, options).time, expected) << "M " << M << " p2p " << L;
    }
}

// Two stages, forward only: stage 0 forwards three micro-batches (1 each) and then sends them at once, to
// stage 1, which has posted all three receives from the start; each transfer is ready at 3, and stage 1
// forwards each (1 each) once it arrives.
ScheduleReport burst(const ScheduleCosts& costs, std::vector<double>* arrivals) {
  ValidateOptions options;
  options.costs = costs;
  options.on_event = [&](const TraceEvent& e) {
    if (e.instruction.kind == Instr::RecvActivation) arrivals->push_back(e.end);
  };
  const Edit edit = [](int s, int t, PipeStep) {
    PipeStep step;
    auto add = [&](Instr::Kind kind) {
      for (int b = 0; b < 3; ++b) step.push_back({kind, b});
    };
    if (s == 0 && t == 0) {
      for (int b = 0; b < 3; ++b) {
        step.push_back({Instr::LoadMicroBatch, b});
        step.push_back({Instr::ForwardPass, b});
      }
    } else if (s == 0 && t == 1) {
      add(Instr::SendActivation);
    } else if (s == 1 && t == 1) {
      add(Instr::LoadMicroBatch);
      add(Instr::RecvActivation);
      add(Instr::ForwardPass);
    }
    return step;
  };
  return validate_schedule(
      [&](int s) { return std::make_unique<Edited<InferenceSchedule>>(3, 2, s, edit, /*buffers=*/3); }, 2, options);
}

// A transfer's latency does not hold its link, its bytes do (ScheduleCosts): the messages in flight on one link
// each pay the latency at once, as MPI and NCCL pipeline them, and go out one after another at the bandwidth.
TEST(ScheduleValidator, TransfersOverlapTheirLatencyAndQueueTheirBytes) {
  std::vector<double> arrivals;
  // Latency 2, unlimited bandwidth: all three arrive at 3 + 2, and stage 1 forwards them back to back.
  EXPECT_DOUBLE_EQ(burst({1, 1, 1, 2}, &arrivals).time, 8);
  EXPECT_EQ(arrivals, (std::vector<double>{5, 5, 5}));
  // 2 seconds of bytes each, no latency: the link sends them over [3, 5], [5, 7] and [7, 9].
  arrivals.clear();
  EXPECT_DOUBLE_EQ(burst({1, 1, 1, 0, 4e9, 2e9}, &arrivals).time, 10);
  EXPECT_EQ(arrivals, (std::vector<double>{5, 7, 9}));
  // Both: each arrives 1 after its bytes are out.
  arrivals.clear();
  EXPECT_DOUBLE_EQ(burst({1, 1, 1, 1, 4e9, 2e9}, &arrivals).time, 11);
  EXPECT_EQ(arrivals, (std::vector<double>{6, 8, 10}));
  // Bytes without a bandwidth take no time.
  arrivals.clear();
  EXPECT_DOUBLE_EQ(burst({1, 1, 1, 2, 4e9, 0}, &arrivals).time, 8);
  EXPECT_EQ(arrivals, (std::vector<double>{5, 5, 5}));
}

TEST(ScheduleCosts, TransferTimeIsLatencyPlusBytesOverBandwidth) {
  const ScheduleCosts costs{1, 1, 1, 0.5, 3e9, 2e9};
  EXPECT_DOUBLE_EQ(costs.link_time(), 1.5);
  EXPECT_DOUBLE_EQ(costs.transfer_time(), 2.0);
  EXPECT_DOUBLE_EQ((ScheduleCosts{1, 1, 1, 0.5, 3e9, 0}).link_time(), 0.0);  // unlimited bandwidth
  EXPECT_DOUBLE_EQ((ScheduleCosts{1, 1, 1, 0.5, 3e9, 0}).transfer_time(), 0.5);
  EXPECT_DOUBLE_EQ(ScheduleCosts{}.transfer_time(), 0.0);
  EXPECT_DOUBLE_EQ(costs.of(Instr::BackwardPass), 2.0);
  EXPECT_DOUBLE_EQ(costs.of(Instr::SendActivation), 0.0);  // a transfer costs the link, not the stage
}

// The lower bound holds for every training schedule at any costs: random ones, transfers included.
TEST(PlannedSchedule, NoScheduleBeatsTheLowerBound) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.0, 2.0);
  for (int trial = 0; trial < 80; ++trial) {
    // Every other trial has transfers: a latency, bytes at a bandwidth (0: unlimited), or both.
    ScheduleCosts costs{cost(rng), cost(rng), cost(rng)};
    if (trial % 2) {
      costs.p2p = trial % 3 ? cost(rng) : 0;
      costs.p2p_bytes = trial % 5 ? cost(rng) * 1e9 : 0;
      costs.bandwidth = trial % 7 ? 1e9 / (0.1 + cost(rng)) : 0;
    }
    const int S = 1 + trial % 6, M = S + trial % 7 * S / 2;
    for (const SchedulePrediction& p : simulate_schedules(M, S, costs)) {
      if (!p.why_not.empty()) continue;
      EXPECT_GT(p.report.lower_bound, 0) << p.schedule;
      EXPECT_GE(p.report.time, p.report.lower_bound - 1e-9)
          << p.schedule << " M " << M << " S " << S << " costs " << costs.forward << " " << costs.backward_input << " "
          << costs.backward_weight << " " << costs.p2p << " " << costs.p2p_bytes << " " << costs.bandwidth;
    }
  }
  // Forward-only and replicated schedules have none.
  EXPECT_EQ(validate_schedule("inference", 4, 2).lower_bound, 0);
  EXPECT_EQ(validate_schedule("dataparallel", 4, 2).lower_bound, 0);
}

TEST(PlannedSchedule, ChromeTraceLabelsChunksAndSplitBackward) {
  std::ostringstream os;
  write_chrome_trace(os, "zb-v", 2, 2);
  const nlohmann::json trace = nlohmann::json::parse(os.str());
  std::set<std::string> names;
  for (const nlohmann::json& e : trace.at("traceEvents")) names.insert(e.at("name").get<std::string>());
  for (const char* expected : {"F0", "F0 chunk 1", "BI1 chunk 1", "W1", "SendActivation(0)"})
    EXPECT_TRUE(names.count(expected)) << expected;
}

}  // namespace
}  // namespace strata::pipe
