#pragma once
// GradScaler: dynamic loss scaling, as PyTorch's torch.amp.GradScaler (libtorch's C++ API has none). The loss
// is multiplied by a scale before backward, so that small gradients of float16 activations do not flush to
// zero; the gradients are divided by it again before the optimizer step, and a step whose gradients hold an
// inf or NaN is skipped. The scale halves after a skipped step and doubles after growth_interval clean ones.
//
//   nn::Linear model(8, 2);
//   optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
//   optim::GradScaler scaler;  // or .process_group(group): the ranks whose gradients decide together
//   for (int it = 0; it < 3; ++it) {
//     opt.zero_grad();
//     scaler.scale(mse_loss(model(randn({4, 8})), randn({4, 2}))).backward();
//     scaler.unscale_(opt);                         // optional: to clip the true gradients
//     nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//     bool stepped = scaler.step(opt);              // skipped when a gradient is inf or NaN
//     scaler.update();
//   }
//   optim::StateDict saved = scaler.state_dict();   // checkpoint it beside the optimizer's
//
// Across processes every rank that holds gradients of the model must skip together, or replicas drift apart:
// with process_group set, unscale_ all-reduces (MAX) whether an inf was found over that group. Under DDP the
// gradients are already averaged, so the group only guards against a rank overflowing alone; the pipeline
// engine (PipelineEngineOptions::grad_scaler) syncs over every stage and replica itself.
//
// Master weights stay float32 (or float64): unscale_ refuses float16 gradients, as PyTorch does, because
// dividing them by the scale in float16 loses the very digits the scale saved. With the default powers of two
// for the scale and its factors, scaling and unscaling are exact unless a value overflows or underflows, so a
// run that skips no step trains the same numbers as one without a scaler.
//
// state_dict() layout, every value 0-dim on the CPU: "scale" float32, "growth_factor" and "backoff_factor"
// float64, "growth_interval" and "_growth_tracker" int64 (clean steps since the scale last changed).

#include <cstdint>
#include <map>

#include "strata/distributed/process_group.h"
#include "strata/optim/optimizer.h"

namespace strata::optim {

/// GradScaler's settings, PyTorch's defaults.
struct GradScalerOptions {
  STRATA_ARG(double, init_scale) = 65536.0;     ///< the first scale (2^16)
  STRATA_ARG(double, growth_factor) = 2.0;      ///< multiplies the scale after growth_interval clean steps (> 1)
  STRATA_ARG(double, backoff_factor) = 0.5;     ///< multiplies the scale after a skipped step (in (0, 1))
  STRATA_ARG(int64_t, growth_interval) = 2000;  ///< clean steps before the scale grows (>= 1)
  STRATA_ARG(bool, enabled) = true;             ///< off: scale() is the identity and step() is the optimizer's step
  /// The ranks that decide together whether a step is skipped; unset (the default) means this process alone.
  /// Unlike a collective's group argument, an empty handle here is not WORLD: pass get_world_group() for that.
  STRATA_ARG(distributed::Group, process_group);
};

/// Dynamic loss scaling for mixed-precision training (torch.amp.GradScaler).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});  ///< checks the options

  /// outputs * scale (the loss before backward); outputs unchanged when disabled.
  Tensor scale(const Tensor& outputs) const;
  /// Divides the gradients of `optimizer`'s parameters by the scale, in place, and records whether any is inf
  /// or NaN (over process_group when set). At most once per optimizer between update() calls, and before step.
  void unscale_(Optimizer& optimizer);
  /// unscale_ unless done, then optimizer.step() unless an inf or NaN was found; returns whether it stepped.
  bool step(Optimizer& optimizer);
  /// After every step of an iteration: backs the scale off when a step was skipped, grows it after
  /// growth_interval clean iterations, and forgets this iteration's checks. With `new_scale`, sets it instead.
  void update();
  void update(double new_scale);  ///< sets the scale to new_scale (> 0) and forgets this iteration's checks

  double get_scale() const;                                      ///< the current scale; 1 when disabled
  bool is_enabled() const { return options_.enabled(); }         ///< whether scaling is on
  const GradScalerOptions& options() const { return options_; }  ///< as given, factors as set since
  void set_growth_factor(double factor);                         ///< a new growth factor (> 1)
  void set_backoff_factor(double factor);                        ///< a new backoff factor (in (0, 1))
  void set_growth_interval(int64_t interval);                    ///< a new growth interval (>= 1)
  int64_t growth_tracker() const { return growth_tracker_; }     ///< clean steps since the scale last changed

  /// Scale, factors, interval and tracker, laid out as the header comment says.
  StateDict state_dict() const;
  /// Restores what state_dict saved; checks every key, shape and dtype first and changes nothing on a bad dict.
  void load_state_dict(const StateDict& dict);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    bool found_inf = false;
  };

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, OptimizerState> per_optimizer_;  // this iteration's, cleared by update()
};

}  // namespace strata::optim
