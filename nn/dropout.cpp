#include "strata/nn/dropout.h"

#include "strata/autograd/ops.h"

namespace strata::nn {

DropoutImpl::DropoutImpl(double probability) : Module("Dropout"), p(probability) {
  STRATA_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
}

Tensor DropoutImpl::forward(const Tensor& input) { return dropout(input, p, is_training()); }

void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << p << ")"; }

Dropout2dImpl::Dropout2dImpl(double probability) : Module("Dropout2d"), p(probability) {
  STRATA_CHECK(p >= 0 && p <= 1, "Dropout2d: probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout2dImpl::forward(const Tensor& input) {
  return functional::dropout2d(input, functional::Dropout2dFuncOptions().p(p).training(is_training()));
}

void Dropout2dImpl::pretty_print(std::ostream& os) const { os << "Dropout2d(p=" << p << ")"; }

// An unbatched [C, H, W] is one sample: feature_dropout's channel dim is dim 1.
Tensor functional::dropout2d(const Tensor& input, const Dropout2dFuncOptions& options) {
  STRATA_CHECK(input.dim() == 3 || input.dim() == 4, "dropout2d: expected a 3-D (unbatched) or 4-D input, got shape ",
               input.sizes());
  if (input.dim() == 4) return feature_dropout(input, options.p(), options.training());
  return feature_dropout(input.unsqueeze(0), options.p(), options.training()).squeeze(0);
}

}  // namespace strata::nn
