// Optimizers against updates worked out in plain doubles, the checks on parameters and options, and
// state dicts: a resumed run is bit-identical to an uninterrupted one, a bad dict names its key.

#include <cmath>

#include "strata/optim/adam.h"
#include "strata/optim/lr_scheduler.h"
#include "strata/optim/sgd.h"
#include "../helpers.h"

namespace strata::optim {
namespace {

using strata::testing::values;
using strata::testing::values_are;

// A float64 leaf holding `v`.
Tensor param(std::initializer_list<double> v) { return tensor(v, kDouble).requires_grad_(true); }

// Sets p's gradient directly, so that each step's gradient is known exactly.
void set_grad(Tensor p, const std::vector<double>& g) { p.mutable_grad() = tensor(g, kDouble); }

// Gradients fed at steps 1, 2, 3 to a two-element parameter starting at kStart. The second step's are
// small so that Adam's v falls and amsgrad's running maximum differs from v.
const std::vector<double> kStart = {1.0, -2.0};
const std::vector<std::vector<double>> kGrads = {{0.5, -1.0}, {0.05, 0.1}, {-1.0, 0.5}};

// ---- SGD ----

TEST(OptimSGD, PlainStepByHand) {
  Tensor p = param({1.0, -2.0});
  SGD opt({p}, SGDOptions(0.1));
  set_grad(p, {0.5, 1.0});
  opt.step();
  EXPECT_VALUES(p, {1.0 - 0.1 * 0.5, -2.0 - 0.1 * 1.0});  // p - lr * g
  EXPECT_TRUE(p.is_leaf());
  EXPECT_EQ(p.grad_fn(), nullptr);
}

// Three steps of SGD with `options`, against the update written out for each element in doubles.
void expect_sgd_matches_hand(double lr, double momentum, double dampening, double wd, bool nesterov) {
  Tensor p = param({kStart[0], kStart[1]});
  SGD opt({p}, SGDOptions(lr).momentum(momentum).dampening(dampening).weight_decay(wd).nesterov(nesterov));
  std::vector<double> x = kStart, buf(2);
  for (size_t t = 0; t < kGrads.size(); ++t) {
    set_grad(p, kGrads[t]);
    opt.step();
    for (size_t k = 0; k < 2; ++k) {
      const double d = kGrads[t][k] + wd * x[k];
      buf[k] = t == 0 ? d : momentum * buf[k] + (1 - dampening) * d;  // the first buffer is d, undamped
      x[k] -= lr * (nesterov ? d + momentum * buf[k] : buf[k]);
    }
    EXPECT_TRUE(values_are(p, x, 1e-14)) << "step " << t + 1;
    EXPECT_TRUE(values_are(p.grad(), kGrads[t], 0)) << "the gradient must stay as it was";
  }
}

TEST(OptimSGD, MomentumDampeningWeightDecayByHand) { expect_sgd_matches_hand(0.1, 0.9, 0.2, 0.01, false); }
TEST(OptimSGD, NesterovWeightDecayByHand) { expect_sgd_matches_hand(0.1, 0.9, 0, 0.01, true); }
TEST(OptimSGD, NesterovWithoutWeightDecayByHand) { expect_sgd_matches_hand(0.05, 0.5, 0, 0, true); }
TEST(OptimSGD, WeightDecayWithoutMomentumByHand) { expect_sgd_matches_hand(0.1, 0, 0, 0.1, false); }

TEST(OptimSGD, FirstMomentumStepByHand) {
  // buf = g on the first step (dampening does not apply); the second step damps.
  Tensor p = param({1.0});
  SGD opt({p}, SGDOptions(0.5).momentum(0.9).dampening(0.5));
  set_grad(p, {2.0});
  opt.step();
  EXPECT_VALUES(p, {1.0 - 0.5 * 2.0});
  set_grad(p, {2.0});
  opt.step();
  EXPECT_VALUES(p, {0.0 - 0.5 * (0.9 * 2.0 + 0.5 * 2.0)});
}

TEST(OptimSGD, GradientFromBackward) {
  Tensor w = param({1.0, 3.0});
  SGD opt({w}, SGDOptions(0.25));
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    (w * w).sum().backward();  // grad 2w: w = w - 0.25 * 2w = w / 2
    opt.step();
  }
  EXPECT_VALUES(w, {0.25, 0.75});
  EXPECT_TRUE(w.is_leaf());
}

// ---- Adam and AdamW ----

// Three steps of Adam (or AdamW when decoupled) against the update written out in doubles.
template <class Opt>
void expect_adam_matches_hand(ScalarType dtype, double lr, double beta1, double beta2, double eps, double wd,
                              bool amsgrad, double tol) {
  Tensor p = tensor({kStart[0], kStart[1]}, dtype).requires_grad_(true);
  Opt opt({p}, typename Opt::Options(lr).betas({beta1, beta2}).eps(eps).weight_decay(wd).amsgrad(amsgrad));
  constexpr bool decoupled = std::is_same_v<Opt, AdamW>;
  std::vector<double> x = kStart, m(2), v(2), v_max(2);
  for (size_t t = 0; t < kGrads.size(); ++t) {
    p.mutable_grad() = tensor(kGrads[t], dtype);
    opt.step();
    const double step = static_cast<double>(t + 1);
    for (size_t k = 0; k < 2; ++k) {
      double g = kGrads[t][k];
      if (decoupled)
        x[k] *= 1 - lr * wd;  // AdamW decays the parameter itself
      else
        g += wd * x[k];  // Adam adds the L2 penalty's gradient
      m[k] = beta1 * m[k] + (1 - beta1) * g;
      v[k] = beta2 * v[k] + (1 - beta2) * g * g;
      v_max[k] = std::max(v_max[k], v[k]);
      const double denom = std::sqrt(amsgrad ? v_max[k] : v[k]) / std::sqrt(1 - std::pow(beta2, step)) + eps;
      x[k] -= lr / (1 - std::pow(beta1, step)) * m[k] / denom;
    }
    EXPECT_TRUE(values_are(p, x, tol)) << "step " << t + 1;
  }
}

TEST(OptimAdam, ByHand) { expect_adam_matches_hand<Adam>(kDouble, 0.1, 0.8, 0.9, 1e-8, 0, false, 1e-14); }
TEST(OptimAdam, AmsgradByHand) { expect_adam_matches_hand<Adam>(kDouble, 0.1, 0.8, 0.9, 1e-8, 0, true, 1e-14); }
TEST(OptimAdam, WeightDecayByHand) {
  expect_adam_matches_hand<Adam>(kDouble, 0.1, 0.9, 0.999, 1e-3, 0.1, false, 1e-14);
}
TEST(OptimAdam, Float32ByHand) { expect_adam_matches_hand<Adam>(kFloat, 0.1, 0.8, 0.9, 1e-8, 0.1, true, 1e-6); }
TEST(OptimAdamW, ByHand) { expect_adam_matches_hand<AdamW>(kDouble, 0.1, 0.9, 0.999, 1e-8, 0.1, false, 1e-14); }
TEST(OptimAdamW, AmsgradByHand) { expect_adam_matches_hand<AdamW>(kDouble, 0.01, 0.8, 0.9, 1e-6, 0.5, true, 1e-14); }

TEST(OptimAdam, FirstStepMovesByLr) {
  // Bias correction makes the first step lr * g / (|g| + eps) whatever the betas.
  Tensor p = param({1.0, -2.0});
  Adam opt({p}, AdamOptions(0.1));
  set_grad(p, {4.0, -0.25});
  opt.step();
  EXPECT_VALUES(p, {1.0 - 0.1 * 4.0 / (4.0 + 1e-8), -2.0 + 0.1 * 0.25 / (0.25 + 1e-8)});
}

TEST(OptimAdam, DefaultsAsTorch) {
  const AdamOptions adam;
  const AdamWOptions adamw;
  EXPECT_EQ(adam.lr(), 1e-3);
  EXPECT_EQ(std::get<0>(adam.betas()), 0.9);
  EXPECT_EQ(std::get<1>(adam.betas()), 0.999);
  EXPECT_EQ(adam.eps(), 1e-8);
  EXPECT_EQ(adam.weight_decay(), 0);
  EXPECT_FALSE(adam.amsgrad());
  EXPECT_EQ(adamw.weight_decay(), 1e-2);
}

TEST(OptimAdam, SkipsParametersWithoutGradient) {
  Tensor a = param({1.0}), b = param({2.0});
  Adam opt({a, b}, AdamOptions(0.1));
  set_grad(a, {1.0});
  opt.step();
  EXPECT_VALUES(b, {2.0});
  const StateDict dict = opt.state_dict();
  EXPECT_TRUE(dict.contains("state.0.exp_avg"));
  EXPECT_FALSE(dict.contains("state.1.step"));
}

TEST(OptimAdam, AmsgradSwitchedOnLater) {
  Tensor p = param({1.0});
  Adam opt({p}, AdamOptions(0.1));
  set_grad(p, {1.0});
  opt.step();
  static_cast<AdamOptions&>(opt.param_groups()[0].options()).amsgrad(true);
  opt.step();
  // v_max starts from the v of the step that switched it on: 0.999 * 0.001 + 0.001.
  EXPECT_VALUES(opt.state_dict().at("state.0.max_exp_avg_sq"), {0.999 * 0.001 + 0.001});
}

// ---- the base: parameters, groups, zero_grad, lr ----

TEST(OptimOptimizer, UpdatesInPlaceWithoutHistory) {
  Tensor p = param({1.0, 2.0});
  Tensor y = p * p;  // saves p for backward
  Adam opt({p}, AdamOptions(0.1).weight_decay(0.1));
  void* data = p.data_ptr();
  const uint32_t version = p._version();
  set_grad(p, {1.0, 1.0});
  opt.step();
  EXPECT_EQ(p.data_ptr(), data);
  EXPECT_GT(p._version(), version);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_THROW_MSG(y.sum().backward(), "modified by an inplace operation");
}

TEST(OptimOptimizer, BadGradientChangesNothing) {
  Tensor a = param({1.0}), b = param({2.0});
  SGD opt({a, b}, SGDOptions(0.1));
  set_grad(a, {1.0});
  b.mutable_grad() = tensor({1.0});  // float32 gradient of a float64 parameter
  EXPECT_THROW_MSG(opt.step(),
                   "SGD::step: parameter 1 has shape [1], dtype Double and device cpu but its gradient "
                   "has [1], Float and cpu");
  EXPECT_VALUES(a, {1.0});
}

TEST(OptimOptimizer, ParamGroupsHaveTheirOwnOptions) {
  Tensor w = param({1.0}), b = param({1.0});
  SGD opt({OptimizerParamGroup({w}), OptimizerParamGroup({b}, SGDOptions(0.5))}, SGDOptions(0.1).weight_decay(1));
  set_grad(w, {1.0});
  set_grad(b, {1.0});
  opt.step();
  EXPECT_VALUES(w, {1.0 - 0.1 * (1.0 + 1.0 * 1.0)});  // the defaults: lr 0.1, weight decay 1
  EXPECT_VALUES(b, {1.0 - 0.5 * 1.0});                // its own: lr 0.5, no weight decay
  EXPECT_EQ(opt.lr(), 0.1);
  opt.set_lr(0.25);
  EXPECT_EQ(opt.param_groups()[1].options().get_lr(), 0.25);
  EXPECT_EQ(opt.num_params(), 2u);
  EXPECT_THROW_MSG(opt.set_lr(-1), "SGD::set_lr: invalid learning rate -1");
}

TEST(OptimOptimizer, ZeroGrad) {
  Tensor p = param({1.0, 2.0});
  SGD opt({p}, SGDOptions(0.1));
  set_grad(p, {3.0, 4.0});
  opt.zero_grad(false);
  EXPECT_VALUES(p.grad(), {0.0, 0.0});
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(OptimOptimizer, ChecksParameters) {
  Tensor p = param({1.0});
  EXPECT_THROW_MSG(SGD({p, Tensor()}, SGDOptions(0.1)), "SGD: parameter 1 is undefined");
  EXPECT_THROW_MSG(SGD({p * 2}, SGDOptions(0.1)), "SGD: parameter 0 is not a leaf tensor");
  EXPECT_THROW_MSG(SGD({tensor({1, 2})}, SGDOptions(0.1)), "SGD: parameter 0 has dtype Long");
  EXPECT_THROW_MSG(SGD({tensor({1.0}, kDouble)}, SGDOptions(0.1)), "SGD: parameter 0 does not require grad");
  EXPECT_THROW_MSG(Adam({OptimizerParamGroup({p}), OptimizerParamGroup({param({2.0}), p})}, AdamOptions()),
                   "Adam: parameter 2 is parameter 0 again");
  EXPECT_THROW_MSG(AdamW(std::vector<Tensor>{}, AdamWOptions()), "AdamW: got an empty parameter list");
}

TEST(OptimOptimizer, ChecksOptions) {
  Tensor p = param({1.0});
  EXPECT_THROW_MSG(SGD({p}, SGDOptions(-0.1)), "SGD: param group 0: invalid lr -0.1");
  EXPECT_THROW_MSG(SGD({p}, SGDOptions(0.1).momentum(-1)), "invalid momentum -1");
  EXPECT_THROW_MSG(SGD({p}, SGDOptions(0.1).weight_decay(-1)), "invalid weight_decay -1");
  EXPECT_THROW_MSG(SGD({p}, SGDOptions(0.1).nesterov(true)),
                   "nesterov momentum requires a momentum and zero dampening");
  EXPECT_THROW_MSG(SGD({p}, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)), "dampening 0.1");
  EXPECT_THROW_MSG(Adam({p}, AdamOptions().betas({1.0, 0.9})), "Adam: param group 0: invalid beta1 1");
  EXPECT_THROW_MSG(Adam({p}, AdamOptions().betas({0.9, -0.1})), "invalid beta2 -0.1");
  EXPECT_THROW_MSG(Adam({p}, AdamOptions().eps(-1)), "invalid eps -1");
  EXPECT_THROW_MSG(AdamW({p}, AdamWOptions(std::nan(""))), "AdamW: param group 0: invalid lr nan");
  EXPECT_THROW_MSG(Adam({OptimizerParamGroup({p}, AdamWOptions())}, AdamOptions()),
                   "Adam: param group 0 was given another optimizer's options");
}

// ---- state dicts ----

// A few float32 parameters and a loss whose gradient depends on them, for multi-step runs.
std::vector<Tensor> make_params() {
  Generator gen(7);
  return {randn({3, 2}, kFloat, &gen).requires_grad_(true), randn({2}, kFloat, &gen).requires_grad_(true),
          randn({4}, kFloat, &gen).requires_grad_(true)};
}

void train_step(const std::vector<Tensor>& params, Optimizer& opt, LRScheduler* sched) {
  opt.zero_grad();
  Tensor loss = (params[0].tanh() * params[0]).sum() + (params[1] * params[1] * params[1]).sum();
  loss.backward();  // params[2] gets no gradient: its state stays empty
  opt.step();
  if (sched) sched->step();
}

// A deep copy, as a checkpoint file would hold.
StateDict saved(const StateDict& dict) {
  StateDict copy;
  for (const auto& [key, value] : dict) copy.emplace(key, value.clone());
  return copy;
}

// Five uninterrupted steps against three steps, a checkpoint, a fresh optimizer (made with other
// hyperparameters, which the state dict replaces) and scheduler, and two more steps: bit-identical.
// `make(params, lr)` makes the optimizer: two groups, the second with its own options.
template <class Make>
void expect_resume_is_bit_exact(Make make) {
  std::vector<Tensor> straight = make_params();
  auto opt = make(straight, 0.05);
  WarmupCosineLR sched(*opt, 2, 6, 0.001);
  for (int i = 0; i < 5; ++i) train_step(straight, *opt, &sched);

  std::vector<Tensor> first = make_params();
  StateDict opt_saved, sched_saved;
  std::vector<Tensor> params_saved;
  {
    auto opt1 = make(first, 0.05);
    WarmupCosineLR sched1(*opt1, 2, 6, 0.001);
    for (int i = 0; i < 3; ++i) train_step(first, *opt1, &sched1);
    opt_saved = saved(opt1->state_dict());
    sched_saved = saved(sched1.state_dict());
    for (const Tensor& p : first) params_saved.push_back(p.detach().clone());
  }
  std::vector<Tensor> resumed = make_params();
  for (size_t i = 0; i < resumed.size(); ++i) {
    NoGradGuard no_grad;
    resumed[i].copy_(params_saved[i]);
  }
  auto opt2 = make(resumed, 0.7);
  WarmupCosineLR sched2(*opt2, 2, 6, 0.001);
  opt2->load_state_dict(opt_saved);
  sched2.load_state_dict(sched_saved);
  for (int i = 0; i < 2; ++i) train_step(resumed, *opt2, &sched2);

  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(values(resumed[i]), values(straight[i])) << "param " << i;
  EXPECT_TRUE(strata::testing::same_state(opt2->state_dict(), opt->state_dict()));
  EXPECT_EQ(sched2.get_last_lr(), sched.get_last_lr());
}

TEST(OptimState, SGDResumesBitExactly) {
  expect_resume_is_bit_exact([](const std::vector<Tensor>& p, double lr) {
    return std::make_unique<SGD>(std::vector<OptimizerParamGroup>{OptimizerParamGroup({p[0], p[2]}),
                                                                  OptimizerParamGroup({p[1]}, SGDOptions(lr))},
                                 SGDOptions(lr).momentum(0.9).nesterov(true).weight_decay(0.01));
  });
}

TEST(OptimState, AdamResumesBitExactly) {
  expect_resume_is_bit_exact([](const std::vector<Tensor>& p, double lr) {
    return std::make_unique<Adam>(std::vector<OptimizerParamGroup>{OptimizerParamGroup({p[0], p[2]}),
                                                                   OptimizerParamGroup({p[1]}, AdamOptions(lr))},
                                  AdamOptions(lr).amsgrad(true).weight_decay(0.01));
  });
}

TEST(OptimState, AdamWResumesBitExactly) {
  expect_resume_is_bit_exact([](const std::vector<Tensor>& p, double lr) {
    return std::make_unique<AdamW>(
        std::vector<OptimizerParamGroup>{OptimizerParamGroup({p[0], p[2]}),
                                         OptimizerParamGroup({p[1]}, AdamWOptions(lr).weight_decay(0))},
        AdamWOptions(lr).betas({0.8, 0.95}));
  });
}

TEST(OptimState, Layout) {
  Tensor a = param({1.0, 2.0}), b = param({3.0}), c = param({4.0});
  Adam opt({OptimizerParamGroup({a, b}), OptimizerParamGroup({c}, AdamOptions(0.5).amsgrad(true))}, AdamOptions(0.1));
  set_grad(a, {1.0, 1.0});
  set_grad(c, {1.0});
  opt.step();
  const StateDict dict = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, value] : dict) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"param_groups.0.amsgrad", "param_groups.0.betas", "param_groups.0.eps",
                                            "param_groups.0.lr", "param_groups.0.params", "param_groups.0.weight_decay",
                                            "param_groups.1.amsgrad", "param_groups.1.betas", "param_groups.1.eps",
                                            "param_groups.1.lr", "param_groups.1.params", "param_groups.1.weight_decay",
                                            "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step", "state.2.exp_avg",
                                            "state.2.exp_avg_sq", "state.2.max_exp_avg_sq", "state.2.step"}));
  EXPECT_VALUES(dict.at("param_groups.0.params"), {0, 1});
  EXPECT_VALUES(dict.at("param_groups.1.params"), {2});
  EXPECT_VALUES(dict.at("param_groups.1.lr"), {0.5});
  EXPECT_VALUES(dict.at("param_groups.1.betas"), {0.9, 0.999});
  EXPECT_EQ(dict.at("param_groups.1.amsgrad").dtype(), kBool);
  EXPECT_EQ(dict.at("state.0.step").dtype(), kLong);
  EXPECT_VALUES(dict.at("state.0.step"), {1});
  EXPECT_VALUES(dict.at("state.0.exp_avg"), {0.1, 0.1});
}

// Each bad dict throws naming the key, and the optimizer is unchanged afterwards.
TEST(OptimState, BadDictsNameTheKey) {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  Adam opt({a, b}, AdamOptions(0.1));
  set_grad(a, {1.0, -1.0});
  set_grad(b, {0.5});
  opt.step();
  const StateDict good = saved(opt.state_dict());

  auto expect_rejected = [&](const std::function<void(StateDict&)>& spoil, const std::string& message) {
    StateDict bad = saved(good);
    spoil(bad);
    EXPECT_THROW_MSG(opt.load_state_dict(bad), message);
    EXPECT_TRUE(strata::testing::same_state(opt.state_dict(), good));
  };
  expect_rejected([](StateDict& d) { d.erase("state.0.exp_avg_sq"); },
                  "Adam::load_state_dict: missing key \"state.0.exp_avg_sq\"");
  expect_rejected([](StateDict& d) { d.erase("param_groups.0.lr"); }, "missing key \"param_groups.0.lr\"");
  expect_rejected([](StateDict& d) { d["state.1.exp_avg"] = zeros({2}, kDouble); },
                  "\"state.1.exp_avg\" has shape [2] and dtype Double, expected shape [1] and dtype Double");
  expect_rejected([](StateDict& d) { d["state.0.exp_avg"] = zeros({2}, kFloat); },
                  "\"state.0.exp_avg\" has shape [2] and dtype Float, expected shape [2] and dtype Double");
  expect_rejected([](StateDict& d) { d["state.0.step"] = scalar_tensor(1.0); }, "\"state.0.step\" has shape");
  expect_rejected([](StateDict& d) { d["state.0.step"] = scalar_tensor(-1, kLong); },
                  "\"state.0.step\" holds a negative step count -1");
  expect_rejected([](StateDict& d) { d["state.1.exp_avg"] = Tensor(); }, "\"state.1.exp_avg\" is undefined");
  expect_rejected([](StateDict& d) { d["state.2.step"] = scalar_tensor(1, kLong); },
                  "unexpected key \"state.2.step\" (this optimizer has 2 parameters in 1 param groups)");
  expect_rejected([](StateDict& d) { d["state.0.momentum_buffer"] = zeros({2}, kDouble); },
                  "unexpected key \"state.0.momentum_buffer\"");
  expect_rejected([](StateDict& d) { d["param_groups.0.nesterov"] = scalar_tensor(0, kBool); },
                  "unexpected key \"param_groups.0.nesterov\"");
  expect_rejected([](StateDict& d) { d["param_groups.0.params"] = tensor({1, 0}); }, "\"param_groups.0.params\" holds");
  expect_rejected(
      [](StateDict& d) {
        d["param_groups.0.betas"] = tensor({1.5, 0.9}, kDouble);
      },
      "Adam::load_state_dict: \"param_groups.0\": invalid beta1 1.5");
  expect_rejected([](StateDict& d) { d["state.0.max_exp_avg_sq"] = zeros({3}); }, "\"state.0.max_exp_avg_sq\"");
}

// amsgrad switched on (or off) between steps: the state dict round-trips either way, and the state
// dict of a stepped optimizer loads into a fresh one that then steps identically.
TEST(OptimState, AmsgradSwitchedBetweenStepsRoundTrips) {
  for (bool on_first : {false, true}) {
    Tensor p = param({1.0, -2.0});
    Adam opt({p}, AdamOptions(0.1).amsgrad(on_first));
    set_grad(p, {0.5, 0.25});
    opt.step();
    static_cast<AdamOptions&>(opt.param_groups()[0].options()).amsgrad(!on_first);
    StateDict saved = opt.state_dict();
    opt.load_state_dict(saved);
    Tensor q = param({0.0, 0.0});
    Adam fresh({q}, AdamOptions(0.1));
    {
      NoGradGuard g;
      q.copy_(p);
    }
    fresh.load_state_dict(saved);
    set_grad(p, {0.5, -1.0});
    set_grad(q, {0.5, -1.0});
    opt.step();
    fresh.step();
    EXPECT_EQ(values(p), values(q)) << "amsgrad first " << on_first;
  }
}

TEST(OptimState, LoadCopiesTheDict) {
  Tensor p = param({1.0});
  SGD opt({p}, SGDOptions(0.1).momentum(0.9));
  set_grad(p, {1.0});
  opt.step();
  StateDict dict = saved(opt.state_dict());
  opt.load_state_dict(dict);
  opt.step();  // must not write into the caller's tensors
  EXPECT_VALUES(dict.at("state.0.momentum_buffer"), {1.0});
  EXPECT_VALUES(opt.state_dict().at("state.0.momentum_buffer"), {0.9 * 1.0 + 1.0});
}

// State keyed by parameter name: it follows each name into an optimizer holding the parameters in another
// order, "" leaves a parameter out, and a wrong count of names, a name given twice or (strict) the state of a
// name this optimizer lacks is an error that leaves the optimizer as it was.
TEST(OptimState, NamedStateDictFollowsTheNames) {
  std::vector<Tensor> p = {param({1.0, 2.0}), param({3.0}), param({4.0})};
  Adam opt({OptimizerParamGroup({p[0], p[1]}), OptimizerParamGroup({p[2]}, AdamOptions(0.5))}, AdamOptions(0.1));
  set_grad(p[0], {1.0, -1.0});
  set_grad(p[1], {0.5});
  set_grad(p[2], {2.0});
  opt.step();
  const StateDict named = saved(opt.state_dict({"a", "b", "c"}));
  EXPECT_FALSE(named.contains("param_groups.0.params"));
  EXPECT_TRUE(strata::testing::same_tensor(named.at("state.c.exp_avg"), opt.state_dict().at("state.2.exp_avg")));
  EXPECT_FALSE(opt.state_dict({"a", "", "c"}).contains("state.b.step"));

  std::vector<Tensor> q;
  for (const Tensor& t : p) q.push_back(t.detach().clone().requires_grad_(true));
  Adam moved({OptimizerParamGroup({q[1], q[0]}), OptimizerParamGroup({q[2]}, AdamOptions(0.5))}, AdamOptions(0.7));
  const std::vector<std::string> moved_names = {"b", "a", "c"};
  moved.load_state_dict(named, moved_names);
  EXPECT_TRUE(strata::testing::same_state(moved.state_dict(moved_names), named));
  for (size_t i = 0; i < p.size(); ++i) {
    set_grad(p[i], std::vector<double>(p[i].numel(), 0.25));
    set_grad(q[i], std::vector<double>(q[i].numel(), 0.25));
  }
  opt.step();
  moved.step();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(values(q[i]), values(p[i])) << "param " << i;

  const StateDict before = saved(moved.state_dict(moved_names));
  EXPECT_THROW_MSG(opt.state_dict({"a", "b"}), "Adam::state_dict: got 2 names for 3 parameters");
  EXPECT_THROW_MSG(moved.load_state_dict(named, {"b", "a"}), "Adam::load_state_dict: got 2 names for 3 parameters");
  EXPECT_THROW_MSG(moved.load_state_dict(named, {"b", "a", "b"}),
                   "Adam::load_state_dict: parameters 0 and 2 are both named \"b\"");
  EXPECT_THROW_MSG(moved.load_state_dict(named, {"b", "a", "d"}),
                   "Adam::load_state_dict: unexpected key \"state.c.exp_avg\"");
  EXPECT_TRUE(strata::testing::same_state(moved.state_dict(moved_names), before));
  moved.load_state_dict(named, {"b", "a", "d"}, /*strict=*/false);  // d has no saved state: it starts afresh
  EXPECT_FALSE(moved.state_dict({"b", "a", "d"}).contains("state.d.step"));
  EXPECT_TRUE(strata::testing::same_tensor(moved.state_dict({"b", "a", "d"}).at("state.a.exp_avg"),
                                           named.at("state.a.exp_avg")));
}

}  // namespace
}  // namespace strata::optim
