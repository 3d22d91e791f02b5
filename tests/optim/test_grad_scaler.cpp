// GradScaler in one process: scaled training equals unscaled training bit for bit while no step overflows; an
// inf or NaN skips the step and backs the scale off; growth after growth_interval clean steps, capped at the
// float32 range; several optimizers; the state dict through a safetensors file; disabled; every error.

#include <cmath>
#include <limits>

#include "strata/nn/linear.h"
#include "strata/nn/safetensors.h"
#include "strata/optim/adam.h"
#include "strata/optim/grad_scaler.h"
#include "strata/optim/sgd.h"
#include "../helpers.h"

namespace strata::optim {
namespace {

using strata::testing::same_state;
using strata::testing::same_tensor;

/// A float64 model and its batches, built the same way for each run.
struct Trainer {
  nn::Linear model{nn::LinearOptions(5, 3)};
  std::unique_ptr<Optimizer> opt;
  Generator gen{11};

  explicit Trainer(double weight = 0.5) {
    model->to(kDouble);
    NoGradGuard no_grad;
    model->weight.fill_(weight);
    model->bias.fill_(0.25);
    opt = std::make_unique<Adam>(model->parameters(), AdamOptions(1e-2));
  }
  /// loss * factor on a fresh batch; the batch is drawn either way, so runs stay in step.
  Tensor loss(double factor = 1) {
    Tensor x = randn({4, 5}, kDouble, &gen), y = randn({4, 3}, kDouble, &gen);
    return mse_loss(model(x), y) * factor;
  }
};

TEST(GradScaler, ScaledTrainingIsUnscaledTrainingBitForBit) {
  Trainer plain, scaled;
  GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(2));
  for (int step = 0; step < 5; ++step) {
    plain.opt->zero_grad();
    plain.loss().backward();
    plain.opt->step();
    scaled.opt->zero_grad();
    Tensor loss = scaled.loss();
    Tensor big = scaler.scale(loss);
    EXPECT_EQ(big.item<double>(), loss.item<double>() * scaler.get_scale());
    big.backward();
    EXPECT_TRUE(scaler.step(*scaled.opt));
    scaler.update();
  }
  EXPECT_TRUE(same_tensor(scaled.model->weight, plain.model->weight));
  EXPECT_TRUE(same_tensor(scaled.model->bias, plain.model->bias));
  EXPECT_TRUE(same_state(scaled.opt->state_dict(), plain.opt->state_dict()));
  // Clean steps 2 and 4 each doubled the scale; step 5 is one into the next interval.
  EXPECT_EQ(scaler.get_scale(), 4096);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, UnscaleGivesTheTrueGradientsForClipping) {
  Trainer plain, scaled;
  GradScaler scaler(GradScalerOptions().init_scale(std::ldexp(1.0, 20)));
  plain.loss().backward();
  scaler.scale(scaled.loss()).backward();
  EXPECT_FALSE(same_tensor(scaled.model->weight.grad(), plain.model->weight.grad()));
  scaler.unscale_(*scaled.opt);
  EXPECT_TRUE(same_tensor(scaled.model->weight.grad(), plain.model->weight.grad()));
  EXPECT_TRUE(same_tensor(scaled.model->bias.grad(), plain.model->bias.grad()));
  // step() does not unscale a second time.
  EXPECT_TRUE(scaler.step(*scaled.opt));
  plain.opt->step();
  EXPECT_TRUE(same_tensor(scaled.model->weight, plain.model->weight));
}

TEST(GradScaler, InfOrNanSkipsTheStepAndBacksOff) {
  for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(::testing::Message() << bad);
    Trainer run;
    GradScaler scaler(GradScalerOptions().init_scale(256).growth_interval(3));
    for (int step = 0; step < 2; ++step) {  // two clean steps: the tracker stands at 2
      run.opt->zero_grad();
      scaler.scale(run.loss()).backward();
      scaler.step(*run.opt);
      scaler.update();
    }
    ASSERT_EQ(scaler.growth_tracker(), 2);
    const Tensor weight = run.model->weight.clone(), bias = run.model->bias.clone();
    const StateDict state = run.opt->state_dict();
    run.opt->zero_grad();
    scaler.scale(run.loss()).backward();
    {
      NoGradGuard no_grad;
      run.model->bias.mutable_grad()[1].fill_(bad);  // one element of one gradient
    }
    EXPECT_FALSE(scaler.step(*run.opt));
    scaler.update();
    EXPECT_TRUE(same_tensor(run.model->weight, weight));
    EXPECT_TRUE(same_tensor(run.model->bias, bias));
    EXPECT_EQ(run.opt->state_dict().at("state.0.step").item<int64_t>(), state.at("state.0.step").item<int64_t>());
    EXPECT_EQ(scaler.get_scale(), 128);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, LargeFiniteGradientsAreNotAnOverflow) {
  Trainer run;
  GradScaler scaler(GradScalerOptions().init_scale(1));
  run.loss().backward();
  {
    NoGradGuard no_grad;
    run.model->weight.mutable_grad().fill_(1e308);  // their sum overflows; each is finite
  }
  EXPECT_TRUE(scaler.step(*run.opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1);
}

TEST(GradScaler, GrowthStopsAtTheLargestFiniteFloatScale) {
  Trainer run;
  GradScaler scaler(GradScalerOptions().init_scale(std::ldexp(1.0, 127)).growth_interval(1));
  scaler.scale(run.loss()).backward();
  scaler.step(*run.opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 127));  // 2^128 is no float32
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.update(3.0);
  EXPECT_EQ(scaler.get_scale(), 3.0);
}

TEST(GradScaler, EachOptimizerStepsOnItsOwnGradientsAndUpdateSeesThemAll) {
  Trainer a, b;
  SGD sgd_a(a.model->parameters(), SGDOptions(0.1)), sgd_b(b.model->parameters(), SGDOptions(0.1));
  GradScaler scaler(GradScalerOptions().init_scale(64));
  scaler.scale(a.loss()).backward();
  scaler.scale(b.loss()).backward();
  {
    NoGradGuard no_grad;
    b.model->weight.mutable_grad()[0][0].fill_(NAN);
  }
  const Tensor b_weight = b.model->weight.clone();
  const Tensor a_weight = a.model->weight.clone();
  EXPECT_TRUE(scaler.step(sgd_a));
  EXPECT_FALSE(scaler.step(sgd_b));
  scaler.update();
  EXPECT_FALSE(same_tensor(a.model->weight, a_weight));
  EXPECT_TRUE(same_tensor(b.model->weight, b_weight));
  EXPECT_EQ(scaler.get_scale(), 32);
}

class GradScalerFile : public testing::TempFolderTest {};

TEST_F(GradScalerFile, StateSurvivesACheckpointAndResume) {
  Trainer run;
  GradScaler scaler(GradScalerOptions().init_scale(512).growth_factor(4).backoff_factor(0.25).growth_interval(2));
  auto iteration = [&](GradScaler& s, bool overflow) {
    run.opt->zero_grad();
    s.scale(run.loss()).backward();
    if (overflow) {
      NoGradGuard no_grad;
      run.model->bias.mutable_grad().fill_(INFINITY);
    }
    s.step(*run.opt);
    s.update();
  };
  for (bool overflow : {false, false, true, false}) iteration(scaler, overflow);
  ASSERT_EQ(scaler.get_scale(), 512);  // x4 after two clean steps, x0.25 after the overflow
  ASSERT_EQ(scaler.growth_tracker(), 1);
  nn::save_file(scaler.state_dict(), file("scaler.safetensors"));

  GradScaler resumed;
  resumed.load_state_dict(nn::load_file(file("scaler.safetensors")));
  EXPECT_TRUE(same_state(resumed.state_dict(), scaler.state_dict()));
  EXPECT_EQ(resumed.options().growth_factor(), 4);
  EXPECT_EQ(resumed.options().growth_interval(), 2);
  for (GradScaler* s : {&scaler, &resumed}) iteration(*s, false);  // both grow on their second clean step
  EXPECT_EQ(resumed.get_scale(), 2048);
  EXPECT_EQ(scaler.get_scale(), resumed.get_scale());
}

TEST(GradScaler, DisabledScalesNothingAndSteps) {
  Trainer run;
  GradScaler scaler(GradScalerOptions().enabled(false));
  Tensor loss = run.loss();
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.get_scale(), 1);
  loss.backward();
  const Tensor weight = run.model->weight.clone();
  scaler.unscale_(*run.opt);
  EXPECT_TRUE(scaler.step(*run.opt));
  scaler.update();
  EXPECT_FALSE(same_tensor(run.model->weight, weight));
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, CallsOutOfOrderAreErrors) {
  Trainer run;
  GradScaler scaler;
  EXPECT_THROW_MSG(scaler.update(), "no unscale_() or step() ran since the last update()");
  scaler.scale(run.loss()).backward();
  scaler.unscale_(*run.opt);
  EXPECT_THROW_MSG(scaler.unscale_(*run.opt), "already called on this optimizer since the last update()");
  scaler.step(*run.opt);
  EXPECT_THROW_MSG(scaler.step(*run.opt), "step: already called on this optimizer since the last update()");
  EXPECT_THROW_MSG(scaler.unscale_(*run.opt), "called after step(); call update() first");
  scaler.update();
  EXPECT_NO_THROW(scaler.unscale_(*run.opt));
}

TEST(GradScaler, Float16GradientsAreRefusedAndLeftAsTheyWere) {
  Tensor w = zeros({2, 3}, kFloat).requires_grad_(true), h = zeros({4}, kHalf).requires_grad_(true);
  w.mutable_grad() = ones({2, 3}, kFloat);
  h.mutable_grad() = ones({4}, kHalf);
  SGD sgd({w, h}, SGDOptions(0.1));
  GradScaler scaler(GradScalerOptions().init_scale(8));
  EXPECT_THROW_MSG(scaler.unscale_(sgd), "parameter 1 (shape [4]) has a float16 gradient");
  EXPECT_TRUE(testing::values_are(w.grad(), std::vector<double>(6, 1.0)));
}

TEST(GradScaler, BadOptionsAndStateDictsAreErrors) {
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().init_scale(0)), "scale must be positive and finite in float32");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().init_scale(1e39)), "finite in float32, got 1e+39");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().growth_factor(1)), "growth_factor must be finite and > 1, got 1");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().backoff_factor(1)), "backoff_factor must lie in (0, 1), got 1");
  EXPECT_THROW_MSG(GradScaler(GradScalerOptions().growth_interval(0)), "growth_interval must be >= 1, got 0");
  GradScaler scaler;
  EXPECT_THROW_MSG(scaler.set_growth_factor(0.5), "set_growth_factor: growth_factor must be finite and > 1");
  EXPECT_THROW_MSG(scaler.update(-1.0), "update: the scale must be positive");
  EXPECT_THROW_MSG(scaler.scale(zeros({1}, kLong)), "expected floating outputs, got Long");

  const StateDict good = scaler.state_dict();
  EXPECT_THROW_MSG(scaler.load_state_dict({}), "the state dict is empty");
  StateDict missing = good;
  missing.erase("_growth_tracker");
  EXPECT_THROW_MSG(scaler.load_state_dict(missing), "_growth_tracker");
  StateDict wrong_dtype = good;
  wrong_dtype["scale"] = full({}, 2.0, kDouble);
  EXPECT_THROW_MSG(scaler.load_state_dict(wrong_dtype), "scale");
  StateDict bad_tracker = good;
  bad_tracker["_growth_tracker"] = full({}, 2000, kLong);
  EXPECT_THROW_MSG(scaler.load_state_dict(bad_tracker), "must lie in [0, growth_interval = 2000), got 2000");
  EXPECT_EQ(scaler.get_scale(), 65536);  // unchanged by the refused loads
}

}  // namespace
}  // namespace strata::optim
