// Schedule files (pipe/schedule_file.h): every training schedule written in PyTorch's notation and read back
// runs the same computes in the same order on every stage; the registry; and every bad file is an error naming
// its line and action.

#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/pipe/schedule_file.h"
#include "strata/pipe/schedule_validator.h"
#include "../helpers.h"

namespace strata::pipe {
namespace {

using Instr = PipeInstruction;

std::string text(const auto& printable) {
  std::ostringstream os;
  os << printable;
  return os.str();
}

/// Each stage's compute instructions in the order its steps run them, micro-batches for buffers.
std::vector<std::vector<ScheduleAction>> computes(const std::function<std::unique_ptr<PipeSchedule>(int)>& make_stage,
                                                  int stages) {
  std::vector<std::vector<ScheduleAction>> out(stages);
  ValidateOptions options;
  StageLayout layout = make_stage(0)->layout();
  options.on_event = [&](const TraceEvent& e) {
    if (is_compute(e.instruction.kind))
      out[e.stage].push_back({layout.virtual_stage(e.stage, e.instruction.chunk), e.instruction.kind, e.micro_batch});
  };
  validate_schedule(make_stage, stages, options);
  return out;
}

TEST(ScheduleRegistry, EveryNameHasOneRowAndEveryScheduleItsName) {
  const std::vector<std::string_view> expected = {"train",       "inference", "dataparallel",   "gpipe",
                                                  "interleaved", "zb-h1",     "zb-interleaved", "zb-v",
                                                  "dualpipe-v",  "forward"};
  EXPECT_EQ(schedule_names(), expected);
  for (const ScheduleEntry& entry : schedule_registry()) {
    SCOPED_TRACE(std::string(entry.name));
    EXPECT_EQ(&schedule_entry(entry.name), &entry);
    // make_schedule takes every name the schedules report, "forward" included.
    const auto schedule = make_schedule(entry.name, 4, 2, 1);  // dualpipe-v's least: twice the stages
    EXPECT_EQ(schedule->name(), entry.name);
    EXPECT_EQ(schedule->is_training(), entry.training);
    EXPECT_EQ(schedule->is_pipelined(), entry.pipelined);
    EXPECT_EQ(schedule->layout(), (StageLayout{2, entry.chunks, entry.v_shape}));
  }
  EXPECT_EQ(make_schedule("forward", 4, 2, 0, 3)->layout(), (StageLayout{2, 3, false}));
  EXPECT_EQ(make_schedule("interleaved", 4, 2, 0, 3)->layout(), (StageLayout{2, 3, false}));
  EXPECT_EQ(make_schedule("zb-interleaved", 5, 2, 0, 3)->layout(), (StageLayout{2, 3, false}));
  EXPECT_THROW_MSG(schedule_entry("1f1b"),
                   "make_schedule: unknown schedule \"1f1b\"; expected train, inference, "
                   "dataparallel, gpipe, interleaved, zb-h1, zb-interleaved, zb-v, dualpipe-v or forward");
  EXPECT_EQ(schedule_entry("interleaved").why_not(6, 4, 2), "micro-batches (6) must be a multiple of stages (4)");
  EXPECT_EQ(schedule_entry("interleaved").why_not(4, 4, 1), "the loop needs 2 or more chunks per stage, got 1");
  EXPECT_EQ(schedule_entry("zb-v").why_not(3, 4, 2), "");
  EXPECT_EQ(schedule_entry("zb-interleaved").why_not(5, 4, 1), "the loop needs 2 or more chunks per stage, got 1");
  EXPECT_EQ(schedule_entry("zb-interleaved").why_not(5, 4, 2), "");
  EXPECT_EQ(schedule_entry("dualpipe-v").why_not(7, 4, 2), "micro-batches (7) must be at least twice the stages (4)");
  EXPECT_THROW_MSG(make_schedule("dualpipe-v", 7, 4, 0),
                   "DualPipeVSchedule: micro_batches (7) must be at least twice the stages (4)");
  EXPECT_THROW_MSG(make_schedule("zb-interleaved", 4, 2, 0, 1),
                   "ZeroBubbleInterleavedSchedule: chunks must be at least 2");
}

TEST(ScheduleFile, ActionsPrintInPyTorchsNotation) {
  EXPECT_EQ(text(ScheduleAction{1, Instr::ForwardPass, 0}), "1F0");
  EXPECT_EQ(text(ScheduleAction{12, Instr::BackwardPass, 3}), "12B3");
  EXPECT_EQ(text(ScheduleAction{1, Instr::BackwardInput, 0}), "1I0");
  EXPECT_EQ(text(ScheduleAction{1, Instr::BackwardWeight, 0}), "1W0");
  EXPECT_EQ(text(ScheduleAction{0, Instr::SendActivation, 2}), "0SEND_F2");
  EXPECT_EQ(text(ScheduleAction{1, Instr::RecvActivation, 2}), "1RECV_F2");
  EXPECT_EQ(text(ScheduleAction{1, Instr::SendGrad, 2}), "1SEND_B2");
  EXPECT_EQ(text(ScheduleAction{0, Instr::RecvGrad, 2}), "0RECV_B2");
  EXPECT_THROW_MSG(text(ScheduleAction{0, Instr::OptimizerStep, 0}),
                   "ScheduleAction: OptimizerStep has no action in PyTorch's notation");
}

TEST(ScheduleFile, GoldenOneFOneBOfTwoStages) {
  const ScheduleTable table = ScheduleTable::from_schedule("train", 3, 2);
  EXPECT_EQ(text(table),
            "0F0,0SEND_F0,0F1,0RECV_B0,0SEND_F1,0B0,0F2,0RECV_B1,0SEND_F2,0B1,0RECV_B2,0B2\n"
            "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RECV_F2,1F2,1B2,1SEND_B2\n");
  EXPECT_EQ(table.stages(), 2);
  EXPECT_EQ(table.micro_batches(), 3);
  EXPECT_EQ(table.layout(), (StageLayout{2, 1, false}));
  EXPECT_EQ(table.source(), "train");
  EXPECT_EQ(table.schedule(0)->name(), "file");
}

// Every pipelined training schedule, exported and read back, computes the same actions in the same order on
// every stage, with the same layout, and validates; reading its own text gives the same table.
TEST(ScheduleFile, EveryTrainingScheduleRoundTrips) {
  for (const ScheduleEntry& entry : schedule_registry()) {
    if (!entry.training || !entry.pipelined) continue;
    for (int S = 1; S <= 5; ++S)
      for (int M = 1; M <= 9; ++M) {
        if (!entry.why_not(M, S, entry.chunks).empty()) continue;
        SCOPED_TRACE(::testing::Message() << entry.name << " S " << S << " M " << M);
        const ScheduleTable table = ScheduleTable::from_schedule(entry.name, M, S);
        // One stage places its chunks alike in the loop and the V; the file reads as the loop then.
        const StageLayout own = make_schedule(entry.name, M, S, 0)->layout();
        EXPECT_EQ(table.layout(), (S == 1 ? StageLayout{1, own.chunks, false} : own));
        EXPECT_EQ(table.micro_batches(), M);
        const auto stage_of_table = [&](int s) { return table.schedule(s); };
        EXPECT_EQ(computes(stage_of_table, S), computes([&](int s) { return make_schedule(entry.name, M, S, s); }, S));
        const ScheduleTable again = ScheduleTable::parse(text(table), "again");
        EXPECT_EQ(again.actions(), table.actions());
        EXPECT_EQ(validate_schedule(stage_of_table, S).schedule, "file");
      }
  }
}

// A file without transfers (PyTorch's compute_only form) gets them added, and idle cells, comments, spaces, a
// Windows line end, skipped PyTorch kinds and OVERLAP_F_B read as they should.
TEST(ScheduleFile, ComputeOnlyFilesAndPyTorchsExtras) {
  const ScheduleTable plain = ScheduleTable::parse("0F0,0F1,,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  const ScheduleTable extras = ScheduleTable::parse(
      "# stage 0, then stage 1\r\n"
      "0UNSHARD, 0F0 ,0F1,,0B0,0B1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\r\n"
      "(1F0;1B0)OVERLAP_F_B,1F1,1WAIT_SEND_B0,1B1,1RESHARD\r\n");
  EXPECT_EQ(plain.actions(), extras.actions());
  EXPECT_EQ(text(plain), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  const ScheduleReport report = validate_schedule([&](int s) { return plain.schedule(s); }, 2);
  // Stage 1: 1F0 at 1, 1B0 (B + W, 2) at 2, 1F1 at 4, 1B1 at 5; then stage 0's 0B1 from 7 to 9.
  EXPECT_EQ(report.time, 9);
  // A V of two stages: stage 0 holds virtual stages 0 and 3.
  const ScheduleTable v = ScheduleTable::parse("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n");
  EXPECT_EQ(v.layout(), (StageLayout{2, 2, true}));
  const ScheduleTable loop = ScheduleTable::parse("0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n");
  EXPECT_EQ(loop.layout(), (StageLayout{2, 2, false}));
  const ScheduleTable split = ScheduleTable::parse("0F0,0I0,0W0\n1F0,1I0,1W0\n");
  EXPECT_EQ(validate_schedule([&](int s) { return split.schedule(s); }, 2).per_stage[0].compute_steps, 3);
}

TEST(ScheduleFile, LoadsFilesAndNamesThem) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "strata_test_schedule.csv";
  {
    std::ofstream out(path);
    out << ScheduleTable::from_schedule("zb-h1", 4, 2);
  }
  const ScheduleTable table = ScheduleTable::load(path.string());
  EXPECT_EQ(table.source(), path.string());
  EXPECT_EQ(table.actions(), ScheduleTable::from_schedule("zb-h1", 4, 2).actions());
  {
    std::ofstream out(path);
    out << "0F0,0B0\n1F0,1B0,1B0\n";
  }
  EXPECT_THROW_MSG(ScheduleTable::load(path.string()),
                   path.string() + ": line 2, action 3 (1B0): a second 1B0 (the first is action 2)");
  std::filesystem::remove(path);
  EXPECT_THROW_MSG(ScheduleTable::load(path.string()), "ScheduleTable::load: cannot open '" + path.string() + "'");
}

TEST(ScheduleFile, BadFilesNameTheLineAndTheAction) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "f: no lines; expected one line of actions per stage"},
      {"0UNSHARD\n", "f: no actions; expected one line per stage of F, B (or I and W) actions"},
      {"0F0,0X0,0B0\n", "f: line 1, action 2 (0X0): unknown kind; expected F, B, I, W, SEND_F, RECV_F, SEND_B"},
      {"F0\n", "f: line 1, action 1 (F0): expected [virtual stage][kind][micro-batch], e.g. 1F0 or 0SEND_B3"},
      {"0F\n", "f: line 1, action 1 (0F): expected a micro-batch number below 2^30 after F"},
      {"0F99999999999\n", "f: line 1, action 1 (0F99999999999): expected a micro-batch number below 2^30 after F"},
      {"0UNSHARD3\n", "f: line 1, action 1 (0UNSHARD3): UNSHARD takes no micro-batch"},
      {"(0F0,0B0)OVERLAP_F_B\n", "f: line 1, action 1 ((0F0): expected (action;action)OVERLAP_F_B"},
      {"(0F0;0SEND_F0)OVERLAP_F_B\n",
       "f: line 1, action 1 ((0F0;0SEND_F0)OVERLAP_F_B): an OVERLAP_F_B holds compute actions (F, B, I, W), got "
       "0SEND_F0"},
      // Missing, repeated and misordered actions.
      {"0F0,0B0\n1F0\n", "f: line 2 (stage 1): no backward of 1F0 (1B0, or 1I0 and 1W0)"},
      {"0F0,0F1,0B0,0B1\n1F0,1B0\n",
       "f: line 2 (stage 1): no 1F1; each virtual stage of the line runs every "
       "micro-batch 0 to 1"},
      {"0F0,0B0\n1F0,1B0,1F0\n", "f: line 2, action 3 (1F0): a second 1F0 (the first is action 1)"},
      {"0B0,0F0\n", "f: line 1, action 1 (0B0): comes before its forward 0F0"},
      {"0F0,0W0,0I0\n", "f: line 1, action 2 (0W0): comes before 0I0, the input half it follows"},
      {"0F0,0I0\n", "f: line 1 (stage 0): no 0W0 after 0I0"},
      {"0F0,0B0,0I0,0W0\n",
       "f: line 1, action 3 (0I0): micro-batch 0 of virtual stage 0 already ran 0B0 (action 2); a backward is B, or "
       "I then W"},
      // Placement: virtual stages the loop or the V put on another line.
      {"0F0,1F0,1B0,0B0\n1F0,1B0\n",
       "f: line 1, action 2 (1F0): its virtual stage is on another line's stage in "
       "the loop layout (1 chunks: virtual stage c * 2 + s on stage s)"},
      {"0F0,0B0\n1F0,2F0,2B0,1B0\n", "f: 3 virtual stages (0 to 2) do not split into chunks of the 2 stages (lines)"},
      // Transfers: a file with some lists all, each in order and with its partner.
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n",
       "f: line 2, action 1 (1F0): its input has not arrived; 1RECV_F0 comes first"},
      {"0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
       "f: line 1, action 1 (0SEND_F0): comes before 0F0, which computes what it sends"},
      {"0F0,0SEND_F0,0B0,0RECV_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
       "f: line 1, action 3 (0B0): its output's gradient has not arrived; 0RECV_B0 comes first"},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1SEND_B0,1B0\n",
       "f: line 2, action 3 (1SEND_B0): comes before the backward (1B0 or 1I0) that computes what it sends"},
      {"0F0,0SEND_F0,0RECV_B0,0B0,0SEND_B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
       "f: line 1, action 5 (0SEND_B0): virtual stage -1 does not exist"},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,1SEND_F0\n",
       "f: line 2, action 5 (1SEND_F0): virtual stage 2 does not exist"},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0,1RECV_F0\n",
       "f: line 2, action 1 (1F0): its input has not arrived; 1RECV_F0 comes first"},
      {"0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
       "f: line 1 (stage 0): no 0SEND_F0, the partner of 1RECV_F0 on stage 1; a file that lists transfers lists every "
       "one"},
      {"0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n",
       "f: line 2 (stage 1): no 1SEND_B0, the partner of 0RECV_B0 on stage 0; a file that lists transfers lists every "
       "one"},
      {"0F0,0SEND_F0,3RECV_F0,3F0,3B0,3SEND_B0,0RECV_B0,0B0\n1RECV_F0,1F0,1SEND_F0,2F0,2B0,1B0\n",
       "f: line 2, action 3 (1SEND_F0): virtual stage 2 is on this stage; nothing to send"},
  };
  for (const auto& [file, message] : cases) {
    SCOPED_TRACE(file);
    EXPECT_THROW_MSG(ScheduleTable::parse(file, "f"), message);
  }
}

TEST(ScheduleFile, DeadlocksAndMemoryAreFoundBeforeAnyProcessStarts) {
  // Stage 0 waits for 1B0 before it forwards micro-batch 1; stage 1 waits for that forward before 1B0.
  EXPECT_THROW_MSG(ScheduleTable::parse("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n", "f"),
                   "f: deadlock: every stage waits for another: line 1, action 2 (0B0), line 2, action 2 (1F1)");
  // The V's stage 0 waits for 3F0 before it forwards what 3F0 needs.
  EXPECT_THROW_MSG(ScheduleTable::parse("3F0,0F0,3B0,0B0\n1F0,2F0,2B0,1B0\n", "f"),
                   "f: deadlock: every stage waits for another: line 1, action 1 (3F0), line 2, action 1 (1F0)");
  // GPipe holds all 4 micro-batches; 1F1B on 2 stages at most 2.
  const std::string gpipe = text(ScheduleTable::from_schedule("gpipe", 4, 2));
  EXPECT_EQ(ScheduleTable::parse(gpipe, "f", {.max_activations = 4}).micro_batches(), 4);
  EXPECT_THROW_MSG(ScheduleTable::parse(gpipe, "f", {.max_activations = 2}),
                   "f: line 1, action 5 (0F2): stage 0 then holds 3 stages' worth of activations, more than "
                   "max_activations (2)");
  const std::string zbv = text(ScheduleTable::from_schedule("zb-v", 4, 2));
  EXPECT_EQ(ScheduleTable::parse(zbv, "f", {.max_activations = 2}).stages(), 2);
  EXPECT_THROW_MSG(ScheduleTable::parse(zbv, "f", {.max_activations = 1}),
                   "stages' worth of activations, more than "
                   "max_activations (1)");
}

}  // namespace
}  // namespace strata::pipe
