#pragma once
// Adam and AdamW with PyTorch's updates (torch.optim.Adam / AdamW, as libtorch writes them).
//
//   nn::Linear model(784, 10);
//   optim::Adam adam(model->parameters(), optim::AdamOptions(1e-3).betas({0.9, 0.95}));
//   optim::AdamW adamw(model->parameters(), optim::AdamWOptions(3e-4));   // weight_decay 1e-2
//   cross_entropy(model(randn({64, 784})), randint(0, 10, {64})).backward();
//   adamw.step();

// The updates, per parameter p with gradient g, at step t = 1, 2, ...:
//
//   Adam:  g = g + weight_decay * p          AdamW:  p = p * (1 - lr * weight_decay)   (decoupled)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                                     (amsgrad; then v_max replaces v below)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p - lr / (1 - beta1^t) * m / denom
//
// The two differ only in how weight decay is applied (as in torch 2, where AdamW is Adam with
// decoupled weight decay), so one template serves both; use the names Adam / AdamW.

#include <tuple>

#include "strata/optim/optimizer.h"

namespace strata::optim {

/// Adam's (kDecoupled false) or AdamW's (true) hyperparameters; use AdamOptions / AdamWOptions.
template <bool kDecoupled>
class BasicAdamOptions : public OptimizerOptions {
 public:
  using betas_t = std::tuple<double, double>;      ///< (beta1, beta2), as libtorch
  BasicAdamOptions(double lr = 1e-3) : lr_(lr) {}  ///< options with learning rate lr (implicit, as libtorch)
  STRATA_ARG(double, lr);                          ///< learning rate
  STRATA_ARG(betas_t, betas) = {0.9, 0.999};       ///< decay rates of the running averages m and v
  STRATA_ARG(double, eps) = 1e-8;                  ///< added to the denominator
  /// Adam: L2 penalty added to the gradient (default 0); AdamW: decoupled decay of p (default 1e-2).
  STRATA_ARG(double, weight_decay) = kDecoupled ? 1e-2 : 0;
  STRATA_ARG(bool, amsgrad) = false;  ///< divide by the running maximum of v (AMSGrad)
  /// One kernel call per dtype and device for every parameter of the group, in float64 bit for bit the per-parameter
  /// update (as torch.optim's fused); not with foreach
  STRATA_ARG(bool, fused) = false;
  STRATA_ARG(bool, foreach) = false;  ///< torch.optim's multi-tensor option: the same single call as fused here

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<BasicAdamOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  StateDict to_tensors() const override;
  void from_tensors(const StateDict& values) override;
  void check(const std::string& where) const override;
};
using AdamOptions = BasicAdamOptions<false>;  ///< Adam's hyperparameters
using AdamWOptions = BasicAdamOptions<true>;  ///< AdamW's hyperparameters (weight_decay 1e-2 by default)

/// Adam (kDecoupled false) or AdamW (true); use Adam / AdamW. State per parameter: "step", "exp_avg" (m),
/// "exp_avg_sq" (v) and with amsgrad "max_exp_avg_sq" (v_max).
template <bool kDecoupled>
class BasicAdam : public Optimizer {
 public:
  using Options = BasicAdamOptions<kDecoupled>;  ///< AdamOptions or AdamWOptions
  /// Each element's update reads only that element's parameter, gradient and state (ZeroRedundancyOptimizer needs it)
  static constexpr bool elementwise_update = true;
  /// One group of parameters with `options`.
  BasicAdam(std::vector<Tensor> params, const Options& options)
      : BasicAdam({OptimizerParamGroup(std::move(params))}, options) {}
  /// Several groups; a group without options takes `defaults`.
  BasicAdam(std::vector<OptimizerParamGroup> groups, const Options& defaults)
      : Optimizer(kDecoupled ? "AdamW" : "Adam", std::move(groups), defaults) {}
  void step() override;  ///< one update of every parameter that has a gradient

 protected:
  std::vector<std::string> state_names(const OptimizerOptions& options) const override;
  std::vector<std::string> optional_state_names() const override { return {"max_exp_avg_sq"}; }
};
using Adam = BasicAdam<false>;  ///< Adam, with L2 weight decay
using AdamW = BasicAdam<true>;  ///< AdamW: Adam with decoupled weight decay

extern template class BasicAdamOptions<false>;
extern template class BasicAdamOptions<true>;
extern template class BasicAdam<false>;
extern template class BasicAdam<true>;

}  // namespace strata::optim
