#include "strata/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "strata/tensor/creation.h"

namespace strata::optim {

LRScheduler::LRScheduler(std::string name, Optimizer& optimizer, Schedule schedule)
    : name_(std::move(name)), optimizer_(optimizer), schedule_(std::move(schedule)) {
  for (const OptimizerParamGroup& group : optimizer_.param_groups()) base_lrs_.push_back(group.options().get_lr());
  apply();
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  last_lr_.clear();
  size_t g = 0;
  for (OptimizerParamGroup& group : optimizer_.param_groups()) {
    last_lr_.push_back(schedule_(last_epoch_, base_lrs_[g++]));
    group.options().set_lr(last_lr_.back());
  }
}

StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kLong)},
          {"base_lrs", tensor(base_lrs_, kDouble)}};
}

void LRScheduler::load_state_dict(const StateDict& dict) {
  const std::string where = name_ + "::load_state_dict";
  for (const auto& [key, value] : dict)
    STRATA_CHECK(key == "last_epoch" || key == "base_lrs", where, ": unexpected key \"", key, "\"");
  const int64_t last_epoch = detail::state_entry(dict, "last_epoch", {}, kLong, where).item<int64_t>();
  STRATA_CHECK(last_epoch >= 0, where, ": \"last_epoch\" holds a negative epoch ", last_epoch);
  const Tensor& base = detail::state_entry(dict, "base_lrs", {static_cast<int64_t>(base_lrs_.size())}, kDouble, where);
  std::vector<double> base_lrs(base_lrs_.size());
  for (size_t g = 0; g < base_lrs.size(); ++g) {
    base_lrs[g] = base[g].item<double>();
    STRATA_CHECK(base_lrs[g] >= 0, where, ": \"base_lrs\" holds an invalid lr ", base_lrs[g], " for group ", g);
  }
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base_lrs);
  apply();
}

namespace {

LRScheduler::Schedule step_schedule(int64_t step_size, double gamma) {
  STRATA_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  STRATA_CHECK(gamma >= 0, "StepLR: gamma must be >= 0, got ", gamma);
  return [step_size, gamma](int64_t epoch, double base_lr) {
    return base_lr * std::pow(gamma, static_cast<double>(epoch / step_size));
  };
}

LRScheduler::Schedule warmup_cosine_schedule(int64_t warmup_steps, int64_t total_steps, double min_lr) {
  STRATA_CHECK(total_steps > 0 && warmup_steps >= 0 && warmup_steps <= total_steps,
               "WarmupCosineLR: expected 0 <= warmup_steps <= total_steps and total_steps > 0, got warmup_steps ",
               warmup_steps, " and total_steps ", total_steps);
  STRATA_CHECK(min_lr >= 0, "WarmupCosineLR: min_lr must be >= 0, got ", min_lr);
  return [=](int64_t epoch, double base_lr) {
    if (epoch < warmup_steps) return base_lr * static_cast<double>(epoch + 1) / static_cast<double>(warmup_steps);
    if (epoch >= total_steps) return min_lr;
    const double progress = static_cast<double>(epoch - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return min_lr + (base_lr - min_lr) * (1 + std::cos(std::numbers::pi * progress)) / 2;
  };
}

}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler("StepLR", optimizer, step_schedule(step_size, gamma)) {}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : LRScheduler("WarmupCosineLR", optimizer, warmup_cosine_schedule(warmup_steps, total_steps, min_lr)) {}

}  // namespace strata::optim
