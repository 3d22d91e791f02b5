#include "strata/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/optim/zero_redundancy.h"

namespace strata::optim {

namespace {

void check_factors(double growth, double backoff, int64_t interval, const char* where) {
  STRATA_CHECK(growth > 1 && std::isfinite(growth), where, ": growth_factor must be finite and > 1, got ", growth);
  STRATA_CHECK(backoff > 0 && backoff < 1, where, ": backoff_factor must lie in (0, 1), got ", backoff);
  STRATA_CHECK(interval >= 1, where, ": growth_interval must be >= 1, got ", interval);
}

void check_scale(double scale, const char* where) {
  STRATA_CHECK(scale > 0 && std::isfinite(static_cast<float>(scale)), where,
               ": the scale must be positive and finite in float32, got ", scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), scale_(static_cast<float>(options_.init_scale())) {
  check_scale(options_.init_scale(), "GradScaler");
  check_factors(options_.growth_factor(), options_.backoff_factor(), options_.growth_interval(), "GradScaler");
  const distributed::Group& group = options_.process_group();
  STRATA_CHECK(!group || group->is_member(), "GradScaler: this process is not a member of its process_group");
}

Tensor GradScaler::scale(const Tensor& outputs) const {
  STRATA_CHECK(outputs.defined(), "GradScaler.scale: the outputs are undefined");
  if (!is_enabled()) return outputs;
  STRATA_CHECK(is_floating_point(outputs.dtype()), "GradScaler.scale: expected floating outputs, got ",
               outputs.dtype());
  return outputs * static_cast<double>(scale_);
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!is_enabled()) return;
  const auto* sharded = dynamic_cast<const ShardedOptimizer*>(&optimizer);
  STRATA_CHECK(!sharded || sharded->stage() == 1, "GradScaler.unscale_: a ZeroRedundancyOptimizer at stage 2 keeps ",
               "no parameter gradients to unscale (its shards hold them); use stage 1 with a GradScaler");
  OptimizerState& state = per_optimizer_[&optimizer];
  STRATA_CHECK(state.stage != Stage::kUnscaled,
               "GradScaler.unscale_: already called on this optimizer since the last update()");
  STRATA_CHECK(state.stage != Stage::kStepped, "GradScaler.unscale_: called after step(); call update() first");
  NoGradGuard no_grad;
  // The reciprocal as PyTorch takes it: in double, then rounded to float32 (exact for a power of two).
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  // Every gradient is checked before any changes, so a refused one leaves them all as they were.
  std::vector<Tensor> grads;
  int64_t index = 0;
  for (const OptimizerParamGroup& group : optimizer.param_groups()) {
    for (Tensor p : group.params()) {
      if (const Tensor& grad = p.grad(); grad.defined()) {
        STRATA_CHECK(grad.dtype() != kHalf, "GradScaler.unscale_: parameter ", index, " (shape ", p.sizes(),
                     ") has a float16 gradient, which unscaling would round away; keep float32 master weights");
        grads.push_back(p.mutable_grad());
      }
      ++index;
    }
  }
  // Per device, the sum of each gradient's max and min times 0: 0 while every element is finite, NaN once one is
  // not (max and min propagate NaN, +-inf reaches one of them, and inf * 0 is NaN). Unlike a plain sum of the
  // gradients it cannot overflow, and the reductions allocate nothing of the gradient's size. One read per device.
  std::vector<Tensor> probes;  // one per device, in order of first appearance
  for (Tensor& grad : grads) {
    grad.mul_(inv_scale);
    if (grad.numel() == 0) continue;
    Tensor probe = (grad.max() * 0 + grad.min() * 0).to(kFloat);
    auto same_device = [&](const Tensor& t) { return t.device() == grad.device(); };
    if (auto it = std::find_if(probes.begin(), probes.end(), same_device); it != probes.end())
      *it = *it + probe;
    else
      probes.push_back(probe);
  }
  bool found_inf = false;
  for (const Tensor& probe : probes) found_inf = found_inf || std::isnan(probe.item<float>());
  if (const distributed::Group& group = options_.process_group()) {
    Tensor flag = full({1}, found_inf ? 1.0 : 0.0, kDouble);
    distributed::all_reduce(flag, distributed::ReduceOp::MAX, group);
    found_inf = flag.item<double>() != 0;
  }
  state.found_inf = found_inf;
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!is_enabled()) {
    optimizer.step();
    return true;
  }
  STRATA_CHECK(per_optimizer_[&optimizer].stage != Stage::kStepped,
               "GradScaler.step: already called on this optimizer since the last update()");
  if (per_optimizer_[&optimizer].stage == Stage::kReady) unscale_(optimizer);
  OptimizerState& state = per_optimizer_[&optimizer];
  state.stage = Stage::kStepped;
  if (state.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!is_enabled()) return;
  STRATA_CHECK(!per_optimizer_.empty(), "GradScaler.update: no unscale_() or step() ran since the last update()");
  bool found_inf = false;
  for (const auto& [optimizer, state] : per_optimizer_) found_inf = found_inf || state.found_inf;
  per_optimizer_.clear();
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor());
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval()) {
    // Grows only to a finite float32 scale, as PyTorch's _amp_update_scale_.
    const float grown = static_cast<float>(scale_ * options_.growth_factor());
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

void GradScaler::update(double new_scale) {
  if (!is_enabled()) return;
  check_scale(new_scale, "GradScaler.update");
  scale_ = static_cast<float>(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return is_enabled() ? scale_ : 1.0; }

void GradScaler::set_growth_factor(double factor) {
  check_factors(factor, options_.backoff_factor(), options_.growth_interval(), "GradScaler.set_growth_factor");
  options_.growth_factor(factor);
}

void GradScaler::set_backoff_factor(double factor) {
  check_factors(options_.growth_factor(), factor, options_.growth_interval(), "GradScaler.set_backoff_factor");
  options_.backoff_factor(factor);
}

void GradScaler::set_growth_interval(int64_t interval) {
  check_factors(options_.growth_factor(), options_.backoff_factor(), interval, "GradScaler.set_growth_interval");
  options_.growth_interval(interval);
}

StateDict GradScaler::state_dict() const {
  if (!is_enabled()) return {};  // as PyTorch's: a disabled scaler has no state
  return {{"scale", full({}, scale_, kFloat)},
          {"growth_factor", full({}, options_.growth_factor(), kDouble)},
          {"backoff_factor", full({}, options_.backoff_factor(), kDouble)},
          {"growth_interval", full({}, options_.growth_interval(), kLong)},
          {"_growth_tracker", full({}, growth_tracker_, kLong)}};
}

void GradScaler::load_state_dict(const StateDict& dict) {
  if (!is_enabled()) return;
  constexpr const char* kWhere = "GradScaler.load_state_dict";
  STRATA_CHECK(!dict.empty(), kWhere, ": the state dict is empty (was it saved from a disabled GradScaler?)");
  const double scale = detail::state_entry(dict, "scale", {}, kFloat, kWhere).item<double>();
  const double growth = detail::state_entry(dict, "growth_factor", {}, kDouble, kWhere).item<double>();
  const double backoff = detail::state_entry(dict, "backoff_factor", {}, kDouble, kWhere).item<double>();
  const int64_t interval = detail::state_entry(dict, "growth_interval", {}, kLong, kWhere).item<int64_t>();
  const int64_t tracker = detail::state_entry(dict, "_growth_tracker", {}, kLong, kWhere).item<int64_t>();
  check_scale(scale, kWhere);
  check_factors(growth, backoff, interval, kWhere);
  STRATA_CHECK(tracker >= 0 && tracker < interval, kWhere,
               ": \"_growth_tracker\" must lie in [0, growth_interval = ", interval, "), got ", tracker);
  scale_ = static_cast<float>(scale);
  options_.growth_factor(growth).backoff_factor(backoff).growth_interval(interval);
  growth_tracker_ = tracker;
}

}  // namespace strata::optim
