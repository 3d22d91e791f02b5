#pragma once
// Which schedule to run: every training schedule's predicted time for per-stage costs, and the fastest that fits.
//
//   auto predictions = pipe::simulate_schedules(/*micro_batches=*/8, /*stages=*/4, {1, 1, 1, /*p2p=*/0.1});
//   std::cout << predictions[pipe::recommend(predictions)].schedule;   // the fastest within 1F1B's memory

#include <cstddef>
#include <string>
#include <vector>

#include "strata/pipe/schedule_validator.h"

namespace strata::pipe {

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
