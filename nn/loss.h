#pragma once
// Loss modules, as torch.nn.CrossEntropyLoss / NLLLoss / MSELoss; the functions themselves are
// strata::cross_entropy, nll_loss and mse_loss (also reachable as nn::functional::..., functional.h).
//
//   Tensor logits = randn({64, 10}), labels = randint(0, 10, {64});
//   nn::CrossEntropyLoss criterion(LossOptions{.label_smoothing = 0.1});
//   Tensor loss = criterion(logits, labels);          // logits [N, C], int64 labels [N] -> 0-dim
//   nn::MSELoss mse(Reduction::Sum);
//   Tensor l2 = mse(logits, zeros({64, 10}));

#include <ostream>

#include "strata/autograd/ops.h"
#include "strata/nn/module.h"

namespace strata::nn {

/// log_softmax over dim 1, then the negative log likelihood of the int64 class targets.
class CrossEntropyLossImpl : public Module {
 public:
  /// With strata::LossOptions (reduction, ignore_index, label_smoothing, per-class weight; the weight
  /// becomes the buffer "weight", as torch).
  explicit CrossEntropyLossImpl(LossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target);  ///< cross_entropy(input, target, options)
  void pretty_print(std::ostream& os) const override;         ///< "CrossEntropyLoss()"

  LossOptions options;  ///< what forward passes to cross_entropy
};
STRATA_MODULE(CrossEntropyLoss);

/// Negative log likelihood of log-probabilities at int64 class targets.
class NLLLossImpl : public Module {
 public:
  /// With strata::LossOptions (reduction, ignore_index, per-class weight as the buffer "weight"; no label_smoothing).
  explicit NLLLossImpl(LossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target);  ///< nll_loss(input, target, options)
  void pretty_print(std::ostream& os) const override;         ///< "NLLLoss()"

  LossOptions options;  ///< what forward passes to nll_loss
};
STRATA_MODULE(NLLLoss);

/// Mean (or sum, or none) of the squared difference.
class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(Reduction reduction = Reduction::Mean);  ///< how to reduce over elements
  Tensor forward(const Tensor& input, const Tensor& target);    ///< mse_loss(input, target, reduction)
  void pretty_print(std::ostream& os) const override;           ///< "MSELoss()"

  Reduction reduction;  ///< what forward passes to mse_loss
};
STRATA_MODULE(MSELoss);

}  // namespace strata::nn
