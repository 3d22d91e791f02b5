#include "strata/pipe/simulate.h"

#include <limits>

#include "strata/tensor/error.h"

namespace strata::pipe {

std::vector<SchedulePrediction> simulate_schedules(int micro_batches, int stages, const ScheduleCosts& costs,
                                                   int chunks) {
  std::vector<SchedulePrediction> out;
  for (const ScheduleEntry& entry : schedule_registry()) {
    if (!entry.training || !entry.pipelined) continue;
    const int own = entry.more_chunks && chunks != 0 ? chunks : entry.chunks;
    SchedulePrediction p{std::string(entry.name), entry.why_not(micro_batches, stages, own), {}};
    if (p.why_not.empty())
      p.report = validate_schedule(entry.name, micro_batches, stages, {entry.more_chunks ? own : 0, costs, {}});
    out.push_back(std::move(p));
  }
  return out;
}

size_t recommend(const std::vector<SchedulePrediction>& predictions) {
  double budget = std::numeric_limits<double>::infinity();
  for (const SchedulePrediction& p : predictions)
    if (p.schedule == TrainSchedule::kName && p.why_not.empty()) budget = p.report.peak_activations();
  size_t best = predictions.size();
  for (size_t i = 0; i < predictions.size(); ++i) {
    const SchedulePrediction& p = predictions[i];
    if (!p.why_not.empty() || p.report.peak_activations() > budget + 1e-9) continue;
    if (best == predictions.size() || p.report.time < predictions[best].report.time) best = i;
  }
  STRATA_CHECK(best < predictions.size(), "recommend: no schedule fits 1F1B's activation memory among ",
               predictions.size(), " predictions");
  return best;
}

}  // namespace strata::pipe
