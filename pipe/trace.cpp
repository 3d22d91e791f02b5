// Chrome traces: the JSON writer (the engine's measured traces use it too) and the validator's simulated trace.

#include "strata/pipe/trace.h"

#include <algorithm>
#include <sstream>

#include "strata/pipe/schedule_validator.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

void write_trace_json(std::ostream& os, const std::vector<std::string>& rows, const std::vector<TraceSlice>& slices) {
  std::ostringstream body;
  for (size_t r = 0; r < rows.size(); ++r)
    body << (r ? "," : "") << "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" << r
         << ",\"args\":{\"name\":\"" << rows[r] << "\"}}";
  for (const TraceSlice& e : slices) {
    body << ",\n{\"name\":\"";
    // Compute slices by their short names (zero bubble's B is BackwardInput), the rest in full.
    const Instr::Kind kind = e.instruction.kind;
    if (is_compute(kind)) {
      body << (kind == Instr::ForwardPass     ? "F"
               : kind == Instr::BackwardPass  ? "B"
               : kind == Instr::BackwardInput ? "BI"
                                              : "W")
           << e.micro_batch;
      if (e.instruction.chunk != 0) body << " chunk " << e.instruction.chunk;
    } else {
      body << e.instruction;
    }
    body << "\",\"ph\":\"X\",\"pid\":0,\"tid\":" << e.row << ",\"ts\":" << e.start_us << ",\"dur\":" << e.duration_us
         << ",\"args\":{";
    if (e.instruction.has_buffer())
      body << "\"micro_batch\":" << e.micro_batch << ",\"buffer\":" << e.instruction.buffer_id
           << ",\"chunk\":" << e.instruction.chunk << ",";
    body << "\"step\":" << e.step << "}}";
  }
  os << "{\"traceEvents\":[" << body.str() << "\n]}\n";
}

void write_chrome_trace(std::ostream& os, std::string_view name, int micro_batches, int stages, int chunks) {
  write_chrome_trace(
      os, [&](int s) { return make_schedule(name, micro_batches, stages, s, chunks); }, stages);
}

void write_chrome_trace(std::ostream& os, const std::function<std::unique_ptr<PipeSchedule>(int stage_id)>& make_stage,
                        int stages) {
  // The slices are collected first, so a schedule that fails validation throws before anything is written.
  constexpr int kStepMicros = 1000;
  std::vector<TraceSlice> slices;
  // The events of one step arrive together (all stages finish step t before step t + 1 starts); they are
  // held until the step ends, when each stage's count of instructions is known.
  std::vector<TraceEvent> pending;
  std::vector<int> count(stages);
  auto flush = [&] {
    std::fill(count.begin(), count.end(), 0);
    for (const TraceEvent& e : pending) ++count[e.stage];
    for (const TraceEvent& e : pending) {
      const int dur = kStepMicros / count[e.stage];
      slices.push_back({e.stage, static_cast<double>(static_cast<int64_t>(e.step) * kStepMicros + e.position * dur),
                        static_cast<double>(dur), e.instruction, e.micro_batch, e.step});
    }
    pending.clear();
  };
  ValidateOptions options;
  options.max_stage_steps = kMaxTracedStageSteps;
  options.on_event = [&](const TraceEvent& e) {
    if (!pending.empty() && e.step != pending.front().step) flush();
    pending.push_back(e);
  };
  validate_schedule(make_stage, stages, options);
  flush();
  std::vector<std::string> rows;
  for (int s = 0; s < stages; ++s) rows.push_back("stage " + std::to_string(s));
  write_trace_json(os, rows, slices);
}

}  // namespace strata::pipe
