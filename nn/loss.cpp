#include "strata/nn/loss.h"

namespace strata::nn {
namespace {

// Checks what can be checked before any input arrives, and registers the class weights as a buffer so
// that to() converts them and checkpoints hold them (the options keep the same handle).
void setup(Module& module, const LossOptions& options) {
  const Tensor& w = options.weight;
  STRATA_CHECK(!w.defined() || (w.dim() == 1 && w.is_floating_point()), module.name(),
               ": weight must be a 1-D floating point tensor of per-class weights, got ", w.dtype(), " of shape ",
               w.sizes());
  if (w.defined()) module.register_buffer("weight", w);
}

}  // namespace

CrossEntropyLossImpl::CrossEntropyLossImpl(LossOptions opts) : Module("CrossEntropyLoss"), options(std::move(opts)) {
  STRATA_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
               "CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got ", options.label_smoothing);
  setup(*this, options);
}

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, options);
}

void CrossEntropyLossImpl::pretty_print(std::ostream& os) const { os << "CrossEntropyLoss()"; }

NLLLossImpl::NLLLossImpl(LossOptions opts) : Module("NLLLoss"), options(std::move(opts)) {
  STRATA_CHECK(options.label_smoothing == 0,
               "NLLLoss: label_smoothing is a CrossEntropyLoss option, got label_smoothing=", options.label_smoothing);
  setup(*this, options);
}

Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) { return nll_loss(input, target, options); }

void NLLLossImpl::pretty_print(std::ostream& os) const { os << "NLLLoss()"; }

MSELossImpl::MSELossImpl(Reduction r) : Module("MSELoss"), reduction(r) {}

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) { return mse_loss(input, target, reduction); }

void MSELossImpl::pretty_print(std::ostream& os) const { os << "MSELoss()"; }

}  // namespace strata::nn
