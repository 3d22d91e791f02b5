// Learning-rate schedules against their formulas worked out by hand, and their state dicts.

#include <cmath>
#include <numbers>

#include "strata/optim/lr_scheduler.h"
#include "strata/optim/sgd.h"
#include "../helpers.h"

namespace strata::optim {
namespace {

Tensor param() { return zeros({1}, kDouble).requires_grad_(true); }

// The lrs of epochs 0 .. n-1: the one set at construction, then after each step().
std::vector<double> lr_sequence(LRScheduler& sched, const Optimizer& opt, int n) {
  std::vector<double> lrs;
  for (int e = 0; e < n; ++e) {
    if (e > 0) sched.step();
    EXPECT_EQ(sched.last_epoch(), e);
    EXPECT_EQ(sched.get_last_lr().front(), opt.lr());
    lrs.push_back(opt.lr());
  }
  return lrs;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-15) << "epoch " << i;
}

TEST(OptimStepLR, DecaysEveryStepSize) {
  SGD opt({param()}, SGDOptions(1.0));
  StepLR sched(opt, 2, 0.5);
  expect_near(lr_sequence(sched, opt, 6), {1, 1, 0.5, 0.5, 0.25, 0.25});
}

TEST(OptimStepLR, ScalesEachGroupsOwnLr) {
  SGD opt({OptimizerParamGroup({param()}), OptimizerParamGroup({param()}, SGDOptions(0.2))}, SGDOptions(1.0));
  StepLR sched(opt, 1);  // gamma 0.1
  sched.step();
  sched.step();
  expect_near(sched.get_last_lr(), {1.0 * 0.1 * 0.1, 0.2 * 0.1 * 0.1});
  EXPECT_NEAR(opt.param_groups()[1].options().get_lr(), 0.002, 1e-15);
}

TEST(OptimWarmupCosineLR, WarmsUpThenFollowsTheCosine) {
  // warmup W = 2, total T = 6, base 1, min 0.1: (e + 1) / W, then 0.1 + 0.9 * (1 + cos(pi * (e - 2) / 4)) / 2.
  SGD opt({param()}, SGDOptions(1.0));
  WarmupCosineLR sched(opt, 2, 6, 0.1);
  const double pi = std::numbers::pi;
  expect_near(lr_sequence(sched, opt, 8), {0.5, 1.0, 1.0, 0.1 + 0.9 * (1 + std::cos(pi / 4)) / 2, 0.55,
                                           0.1 + 0.9 * (1 + std::cos(3 * pi / 4)) / 2, 0.1, 0.1});
}

TEST(OptimWarmupCosineLR, WithoutWarmupStartsAtBase) {
  SGD opt({param()}, SGDOptions(2.0));
  WarmupCosineLR sched(opt, 0, 2);
  expect_near(lr_sequence(sched, opt, 3), {2.0, 1.0, 0.0});  // 2 * (1 + cos(pi / 2)) / 2 = 1
}

TEST(OptimLRScheduler, ChecksArguments) {
  SGD opt({param()}, SGDOptions(1.0));
  EXPECT_THROW_MSG(StepLR(opt, 0), "StepLR: step_size must be positive, got 0");
  EXPECT_THROW_MSG(StepLR(opt, 1, -0.5), "StepLR: gamma must be >= 0, got -0.5");
  EXPECT_THROW_MSG(WarmupCosineLR(opt, 5, 4), "warmup_steps 5 and total_steps 4");
  EXPECT_THROW_MSG(WarmupCosineLR(opt, 0, 0), "WarmupCosineLR: expected 0 <= warmup_steps <= total_steps");
  EXPECT_THROW_MSG(WarmupCosineLR(opt, 1, 4, -1), "WarmupCosineLR: min_lr must be >= 0, got -1");
  EXPECT_EQ(opt.lr(), 1.0);  // a rejected scheduler sets nothing
}

TEST(OptimLRScheduler, StateDictRoundTrip) {
  SGD opt({param()}, SGDOptions(1.0));
  WarmupCosineLR sched(opt, 2, 10);
  for (int i = 0; i < 3; ++i) sched.step();
  const StateDict dict = sched.state_dict();
  EXPECT_VALUES(dict.at("last_epoch"), {3});
  EXPECT_VALUES(dict.at("base_lrs"), {1.0});

  SGD fresh_opt({param()}, SGDOptions(5.0));
  WarmupCosineLR fresh(fresh_opt, 2, 10);
  fresh.load_state_dict(dict);
  EXPECT_EQ(fresh.last_epoch(), 3);
  EXPECT_EQ(fresh_opt.lr(), opt.lr());
  sched.step();
  fresh.step();
  EXPECT_EQ(fresh.get_last_lr(), sched.get_last_lr());
}

TEST(OptimLRScheduler, BadStateDictsNameTheKey) {
  SGD opt({param()}, SGDOptions(1.0));
  StepLR sched(opt, 2);
  sched.step();
  const StateDict good = sched.state_dict();
  auto expect_rejected = [&](const std::function<void(StateDict&)>& spoil, const std::string& message) {
    StateDict bad = good;
    spoil(bad);
    EXPECT_THROW_MSG(sched.load_state_dict(bad), message);
    EXPECT_EQ(sched.last_epoch(), 1);
  };
  expect_rejected([](StateDict& d) { d.erase("last_epoch"); }, "StepLR::load_state_dict: missing key \"last_epoch\"");
  expect_rejected([](StateDict& d) { d["extra"] = zeros({1}); }, "unexpected key \"extra\"");
  expect_rejected(
      [](StateDict& d) {
        d["base_lrs"] = tensor({1.0, 2.0}, kDouble);
      },
      "\"base_lrs\" has shape [2] and dtype Double, expected shape [1] and dtype Double");
  expect_rejected([](StateDict& d) { d["last_epoch"] = scalar_tensor(-2, kLong); },
                  "\"last_epoch\" holds a negative epoch -2");
  expect_rejected([](StateDict& d) { d["base_lrs"] = tensor({-1.0}, kDouble); }, "\"base_lrs\" holds an invalid lr -1");
}

}  // namespace
}  // namespace strata::optim
