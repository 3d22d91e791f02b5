#pragma once
// Chrome traces of pipeline schedules: simulated by the validator, or measured (PipelineEngine::write_trace).
//
//   #include <fstream>
//   std::ofstream file("zbv.json");
//   pipe::write_chrome_trace(file, "zb-v", /*micro_batches=*/8, /*stages=*/4);   // open in ui.perfetto.dev

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "strata/pipe/schedule.h"

namespace strata::pipe {

/// The most stage-steps write_chrome_trace writes: some 800 MB of JSON, past what trace viewers open.
inline constexpr int64_t kMaxTracedStageSteps = int64_t{1} << 22;

/// One instruction as a rank executed it, or the transfers a Send or Recv posted, from posted to first seen
/// complete (PipelineEngineOptions::record_trace).
struct ExecutedInstruction {
  PipeInstruction instruction;  ///< what
  int step;                     ///< the schedule step it belongs to
  int micro_batch;              ///< its micro-batch, -1 for the end-of-batch instructions
  double start;                 ///< seconds on the machine's monotonic clock (one clock for the ranks of a host)
  double end;                   ///< when it ended, on the same clock
};
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

}  // namespace strata::pipe
