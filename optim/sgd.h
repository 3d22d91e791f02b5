#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay, with
// PyTorch's update (torch.optim.SGD).
//
//   nn::Linear model(784, 10);
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
//   cross_entropy(model(randn({64, 784})), randint(0, 10, {64})).backward();
//   opt.step();

// The update, per parameter p with gradient g, each step:
//
//   d = g + weight_decay * p
//   buf = d                                         on the first step (no dampening)
//   buf = momentum * buf + (1 - dampening) * d      afterwards           (when momentum != 0)
//   d = nesterov ? d + momentum * buf : buf                              (when momentum != 0)
//   p = p - lr * d

#include "strata/optim/optimizer.h"

namespace strata::optim {

/// SGD's hyperparameters; the learning rate has no default.
class SGDOptions : public OptimizerOptions {
 public:
  SGDOptions(double lr) : lr_(lr) {}     ///< options with learning rate lr (implicit, as libtorch: SGD(params, 0.1))
  STRATA_ARG(double, lr);                ///< learning rate
  STRATA_ARG(double, momentum) = 0;      ///< momentum factor (0: none)
  STRATA_ARG(double, dampening) = 0;     ///< scales the gradient's share of the momentum buffer by 1 - dampening
  STRATA_ARG(double, weight_decay) = 0;  ///< L2 penalty added to the gradient
  STRATA_ARG(bool, nesterov) = false;    ///< Nesterov momentum (needs momentum > 0 and dampening 0)
  /// One kernel call per dtype and device for every parameter of the group, in float64 bit for bit the per-parameter
  /// update (as torch.optim's fused); not with foreach
  STRATA_ARG(bool, fused) = false;
  STRATA_ARG(bool, foreach) = false;  ///< torch.optim's multi-tensor option: the same single call as fused here

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  StateDict to_tensors() const override;
  void from_tensors(const StateDict& values) override;
  void check(const std::string& where) const override;
};

/// Stochastic gradient descent; state per parameter: "momentum_buffer" (when momentum != 0).
class SGD : public Optimizer {
 public:
  using Options = SGDOptions;  ///< SGD's hyperparameters
  /// Each element's update reads only that element's parameter, gradient and state (ZeroRedundancyOptimizer needs it)
  static constexpr bool elementwise_update = true;
  /// One group of parameters with `options`.
  SGD(std::vector<Tensor> params, const SGDOptions& options) : SGD({OptimizerParamGroup(std::move(params))}, options) {}
  /// Several groups; a group without options takes `defaults`.
  SGD(std::vector<OptimizerParamGroup> groups, const SGDOptions& defaults)
      : Optimizer("SGD", std::move(groups), defaults) {}
  void step() override;  ///< one update of every parameter that has a gradient

 protected:
  std::vector<std::string> state_names(const OptimizerOptions& options) const override;
};

}  // namespace strata::optim
