#pragma once
// Loss modules, as torch.nn's, with libtorch's options classes; the functions themselves are
// strata::cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy
// and binary_cross_entropy_with_logits (also reachable as nn::functional::..., functional.h).
//
//   Tensor logits = randn({64, 10}), labels = randint(0, 10, {64});
//   nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));
//   Tensor loss = criterion(logits, labels);          // logits [N, C], int64 labels [N] -> 0-dim
//   nn::MSELoss mse(nn::MSELossOptions().reduction(kSum));
//   Tensor l2 = mse(logits, zeros({64, 10}));
//   nn::BCEWithLogitsLoss bce(nn::BCEWithLogitsLossOptions().pos_weight(full({10}, 3.0)));
//   Tensor b = bce(logits, rand({64, 10}));

#include <ostream>

#include "strata/autograd/ops.h"
#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// CrossEntropyLoss's options: CrossEntropyLossOptions().ignore_index(0).reduction(kSum); a strata::LossOptions
/// converts to it.
class CrossEntropyLossOptions {
 public:
  CrossEntropyLossOptions() = default;
  /// Implicit: strata's LossOptions{.label_smoothing = 0.1}.
  CrossEntropyLossOptions(const LossOptions& o)
      : weight_(o.weight),
        ignore_index_(o.ignore_index),
        reduction_(o.reduction),
        label_smoothing_(o.label_smoothing) {}
  STRATA_ARG(Tensor, weight) = {};            ///< optional per-class weights [C] (the buffer "weight")
  STRATA_ARG(int64_t, ignore_index) = -100;   ///< targets equal to this contribute nothing
  STRATA_ARG(Reduction, reduction) = kMean;   ///< mean over non-ignored targets, sum or none
  STRATA_ARG(double, label_smoothing) = 0.0;  ///< mix with the uniform distribution (CrossEntropyLoss only)

 public:
  /// These options as strata::LossOptions, what cross_entropy and nll_loss take
  LossOptions loss_options() const { return {reduction_, ignore_index_, label_smoothing_, weight_}; }
};
using NLLLossOptions = CrossEntropyLossOptions;  ///< NLLLoss's options (label_smoothing must stay 0)

/// log_softmax over dim 1, then the negative log likelihood of the int64 class targets.
class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});  ///< weight becomes a buffer
  Tensor forward(const Tensor& input, const Tensor& target);                   ///< cross_entropy(input, target)
  void pretty_print(std::ostream& os) const override;                          ///< "CrossEntropyLoss()"

  CrossEntropyLossOptions options;  ///< what forward passes to cross_entropy
};
STRATA_MODULE(CrossEntropyLoss);

/// Negative log likelihood of log-probabilities at int64 class targets.
class NLLLossImpl : public Module {
 public:
  explicit NLLLossImpl(const NLLLossOptions& options = {});   ///< weight becomes a buffer; no label_smoothing
  Tensor forward(const Tensor& input, const Tensor& target);  ///< nll_loss(input, target, options)
  void pretty_print(std::ostream& os) const override;         ///< "NLLLoss()"

  NLLLossOptions options;  ///< what forward passes to nll_loss
};
STRATA_MODULE(NLLLoss);

/// The options of the losses that only reduce: MSELossOptions(kSum), L1LossOptions().reduction(kNone).
class ReductionOptions {
 public:
  ReductionOptions(Reduction reduction = kMean) : reduction_(reduction) {}  ///< implicit, as libtorch's
  STRATA_ARG(Reduction, reduction);                                         ///< mean, sum or none
};
using MSELossOptions = ReductionOptions;  ///< MSELoss's options
using L1LossOptions = ReductionOptions;   ///< L1Loss's options

/// Mean (or sum, or none) of the squared difference.
class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(const MSELossOptions& options = {}) : Module("MSELoss"), options(options) {}  ///< options
  Tensor forward(const Tensor& input, const Tensor& target);  ///< mse_loss(input, target, reduction)
  void pretty_print(std::ostream& os) const override;         ///< "MSELoss()"

  MSELossOptions options;  ///< what forward passes to mse_loss
};
STRATA_MODULE(MSELoss);

/// Mean (or sum, or none) of the absolute difference.
class L1LossImpl : public Module {
 public:
  explicit L1LossImpl(const L1LossOptions& options = {}) : Module("L1Loss"), options(options) {}  ///< options
  Tensor forward(const Tensor& input, const Tensor& target);  ///< l1_loss(input, target, reduction)
  void pretty_print(std::ostream& os) const override;         ///< "L1Loss()"

  L1LossOptions options;  ///< what forward passes to l1_loss
};
STRATA_MODULE(L1Loss);

/// SmoothL1Loss's options: SmoothL1LossOptions().beta(0.5).
class SmoothL1LossOptions {
 public:
  STRATA_ARG(Reduction, reduction) = kMean;  ///< mean, sum or none
  STRATA_ARG(double, beta) = 1.0;            ///< where the loss turns from quadratic to linear
};

/// smooth_l1_loss: quadratic below beta, linear above.
class SmoothL1LossImpl : public Module {
 public:
  explicit SmoothL1LossImpl(const SmoothL1LossOptions& options = {});  ///< from options
  Tensor forward(const Tensor& input, const Tensor& target);           ///< smooth_l1_loss(input, target, ...)
  void pretty_print(std::ostream& os) const override;                  ///< "SmoothL1Loss()"

  SmoothL1LossOptions options;  ///< what forward passes to smooth_l1_loss
};
STRATA_MODULE(SmoothL1Loss);

/// HuberLoss's options: HuberLossOptions().delta(2.0).
class HuberLossOptions {
 public:
  STRATA_ARG(Reduction, reduction) = kMean;  ///< mean, sum or none
  STRATA_ARG(double, delta) = 1.0;           ///< where the loss turns from quadratic to linear
};

/// huber_loss: quadratic up to delta, linear above.
class HuberLossImpl : public Module {
 public:
  explicit HuberLossImpl(const HuberLossOptions& options = {});  ///< from options
  Tensor forward(const Tensor& input, const Tensor& target);     ///< huber_loss(input, target, ...)
  void pretty_print(std::ostream& os) const override;            ///< "HuberLoss()"

  HuberLossOptions options;  ///< what forward passes to huber_loss
};
STRATA_MODULE(HuberLoss);

/// BCELoss's options: BCELossOptions().weight(w).reduction(kSum).
class BCELossOptions {
 public:
  STRATA_ARG(Tensor, weight) = {};           ///< optional weight, broadcast to the input (the buffer "weight")
  STRATA_ARG(Reduction, reduction) = kMean;  ///< mean, sum or none
};

/// Binary cross entropy of probabilities in [0, 1].
class BCELossImpl : public Module {
 public:
  explicit BCELossImpl(const BCELossOptions& options = {});   ///< weight becomes a buffer
  Tensor forward(const Tensor& input, const Tensor& target);  ///< binary_cross_entropy(input, target, ...)
  void pretty_print(std::ostream& os) const override;         ///< "BCELoss()"

  BCELossOptions options;  ///< what forward passes to binary_cross_entropy
};
STRATA_MODULE(BCELoss);

/// BCEWithLogitsLoss's options: BCEWithLogitsLossOptions().pos_weight(p).
class BCEWithLogitsLossOptions {
 public:
  STRATA_ARG(Tensor, weight) = {};           ///< optional weight, broadcast to the input (the buffer "weight")
  STRATA_ARG(Reduction, reduction) = kMean;  ///< mean, sum or none
  STRATA_ARG(Tensor, pos_weight) = {};       ///< optional weight of positives per class (the buffer "pos_weight")
};

/// Binary cross entropy of sigmoid(logits), computed stably.
class BCEWithLogitsLossImpl : public Module {
 public:
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});  ///< weights become buffers
  Tensor forward(const Tensor& input, const Tensor& target);  ///< binary_cross_entropy_with_logits(input, ...)
  void pretty_print(std::ostream& os) const override;         ///< "BCEWithLogitsLoss()"

  BCEWithLogitsLossOptions options;  ///< what forward passes to binary_cross_entropy_with_logits
};
STRATA_MODULE(BCEWithLogitsLoss);

}  // namespace strata::nn
