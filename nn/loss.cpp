#include "strata/nn/loss.h"

namespace strata::nn {
namespace {

// Registers an optional weight as a buffer, so that to() converts it and checkpoints hold it; the options
// keep the same handle. Class weights are 1-D; others must be floating point.
void register_weight(Module& module, const char* name, const Tensor& w, bool per_class) {
  STRATA_CHECK(!w.defined() || (w.is_floating_point() && (!per_class || w.dim() == 1)), module.name(), ": ", name,
               " must be a ", per_class ? "1-D " : "", "floating point tensor",
               per_class ? " of per-class weights" : "", ", got ", w.dtype(), " of shape ", w.sizes());
  if (w.defined()) module.register_buffer(name, w);
}

}  // namespace

CrossEntropyLossImpl::CrossEntropyLossImpl(const CrossEntropyLossOptions& opts)
    : Module("CrossEntropyLoss"), options(opts) {
  STRATA_CHECK(options.label_smoothing() >= 0 && options.label_smoothing() <= 1,
               "CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got ", options.label_smoothing());
  register_weight(*this, "weight", options.weight(), true);
}
Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, options.loss_options());
}
void CrossEntropyLossImpl::pretty_print(std::ostream& os) const { os << "CrossEntropyLoss()"; }

NLLLossImpl::NLLLossImpl(const NLLLossOptions& opts) : Module("NLLLoss"), options(opts) {
  STRATA_CHECK(
      options.label_smoothing() == 0,
      "NLLLoss: label_smoothing is a CrossEntropyLoss option, got label_smoothing=", options.label_smoothing());
  register_weight(*this, "weight", options.weight(), true);
}
Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) {
  return nll_loss(input, target, options.loss_options());
}
void NLLLossImpl::pretty_print(std::ostream& os) const { os << "NLLLoss()"; }

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, options.reduction());
}
void MSELossImpl::pretty_print(std::ostream& os) const { os << "MSELoss()"; }

Tensor L1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return l1_loss(input, target, options.reduction());
}
void L1LossImpl::pretty_print(std::ostream& os) const { os << "L1Loss()"; }

SmoothL1LossImpl::SmoothL1LossImpl(const SmoothL1LossOptions& opts) : Module("SmoothL1Loss"), options(opts) {
  STRATA_CHECK(options.beta() >= 0, "SmoothL1Loss: beta must be non-negative, got ", options.beta());
}
Tensor SmoothL1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return smooth_l1_loss(input, target, options.reduction(), options.beta());
}
void SmoothL1LossImpl::pretty_print(std::ostream& os) const { os << "SmoothL1Loss()"; }

HuberLossImpl::HuberLossImpl(const HuberLossOptions& opts) : Module("HuberLoss"), options(opts) {
  STRATA_CHECK(options.delta() > 0, "HuberLoss: delta must be positive, got ", options.delta());
}
Tensor HuberLossImpl::forward(const Tensor& input, const Tensor& target) {
  return huber_loss(input, target, options.reduction(), options.delta());
}
void HuberLossImpl::pretty_print(std::ostream& os) const { os << "HuberLoss()"; }

BCELossImpl::BCELossImpl(const BCELossOptions& opts) : Module("BCELoss"), options(opts) {
  register_weight(*this, "weight", options.weight(), false);
}
Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, options.weight(), options.reduction());
}
void BCELossImpl::pretty_print(std::ostream& os) const { os << "BCELoss()"; }

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& opts)
    : Module("BCEWithLogitsLoss"), options(opts) {
  register_weight(*this, "weight", options.weight(), false);
  register_weight(*this, "pos_weight", options.pos_weight(), false);
}
Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, options.weight(), options.pos_weight(), options.reduction());
}
void BCEWithLogitsLossImpl::pretty_print(std::ostream& os) const { os << "BCEWithLogitsLoss()"; }

}  // namespace strata::nn
