#pragma once
// Learning-rate schedules: each sets every param group's lr from its base lr (the group's lr when the
// scheduler was made) and the epoch count. Call step() once per epoch (or per iteration, for a
// schedule counted in iterations), after the optimizer's step().
//
//   nn::Linear model(784, 10);
//   optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-4));
//   optim::WarmupCosineLR sched(opt, /*warmup_steps=*/100, /*total_steps=*/5000);
//   for (int it = 0; it < 5000; ++it) {
//     cross_entropy(model(randn({64, 784})), randint(0, 10, {64})).backward();
//     opt.step();
//     opt.zero_grad();
//     sched.step();
//   }
//
// As in torch, making a scheduler already sets the lrs of epoch 0. Its state_dict ("last_epoch", int64
// 0-dim, and "base_lrs", float64 [groups]) goes into the checkpoint beside the optimizer's.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/optim/optimizer.h"

namespace strata::optim {

/// Base of the schedules: lr of each group = schedule(last_epoch, base_lr of the group).
class LRScheduler {
 public:
  /// The lr of a group at an epoch, from the group's base lr.
  using Schedule = std::function<double(int64_t epoch, double base_lr)>;

  virtual ~LRScheduler() = default;
  void step();                                                         ///< advances one epoch and sets every group's lr
  const std::vector<double>& get_last_lr() const { return last_lr_; }  ///< the lrs step() (or the constructor) set
  int64_t last_epoch() const { return last_epoch_; }                   ///< steps taken since the scheduler was made
  StateDict state_dict() const;                                        ///< "last_epoch" and "base_lrs"
  /// Restores last_epoch and base_lrs and sets the lrs they give; checks every key first.
  void load_state_dict(const StateDict& dict);

 protected:
  /// Takes each group's current lr as its base lr and sets the lrs of epoch 0; `name` starts messages. The
  /// optimizer must outlive the scheduler.
  LRScheduler(std::string name, Optimizer& optimizer, Schedule schedule);

 private:
  void apply();

  std::string name_;
  Optimizer& optimizer_;
  Schedule schedule_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

/// lr = base_lr * gamma^floor(epoch / step_size): decays by gamma every step_size epochs, as Python torch's
/// StepLR. libtorch's C++ StepLR (1.13 and 2.x) counts its step() calls from 0 and decays on the call that
/// finds the count a multiple of step_size, so its first decay comes one step() call later (with step_size 2,
/// Python and strata decay at the 2nd call, libtorch at the 3rd); strata keeps Python's schedule.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);  ///< step_size > 0
};

/// Linear warm-up, then cosine decay to min_lr. With W = warmup_steps, T = total_steps, epoch e:
///   e < W:       lr = base_lr * (e + 1) / W
///   W <= e < T:  lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * (e - W) / (T - W))) / 2
///   e >= T:      lr = min_lr
/// So the first step already uses base_lr / W, step W - 1 and W use base_lr, and the lr reaches min_lr at T.
class WarmupCosineLR : public LRScheduler {
 public:
  /// 0 <= warmup_steps <= total_steps, total_steps > 0, min_lr >= 0.
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr = 0);
};

}  // namespace strata::optim
