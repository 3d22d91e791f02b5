#include "strata/nn/dropout.h"

#include "strata/autograd/ops.h"

namespace strata::nn {

namespace {

void print(std::ostream& os, const char* name, const DropoutOptions& o) {
  os << name << "(p=" << o.p() << (o.inplace() ? ", inplace=true)" : ")");
}
}  // namespace

DropoutImpl::DropoutImpl(const DropoutOptions& opts) : Module("Dropout"), options(opts) {
  STRATA_CHECK(options.p() >= 0 && options.p() <= 1, "Dropout: probability has to be between 0 and 1, but got ",
               options.p());
}

Tensor DropoutImpl::forward(const Tensor& input) {
  return impl::maybe_inplace(input, dropout(input, options.p(), is_training()), options.inplace());
}

void DropoutImpl::pretty_print(std::ostream& os) const { print(os, "Dropout", options); }

Dropout2dImpl::Dropout2dImpl(const Dropout2dOptions& opts) : Module("Dropout2d"), options(opts) {
  STRATA_CHECK(options.p() >= 0 && options.p() <= 1, "Dropout2d: probability has to be between 0 and 1, but got ",
               options.p());
}

Tensor Dropout2dImpl::forward(const Tensor& input) {
  const auto f = functional::Dropout2dFuncOptions().p(options.p()).training(is_training());
  return impl::maybe_inplace(input, functional::dropout2d(input, f), options.inplace());
}

void Dropout2dImpl::pretty_print(std::ostream& os) const { print(os, "Dropout2d", options); }

Tensor functional::dropout(const Tensor& input, const DropoutFuncOptions& options) {
  return strata::dropout(input, options.p(), options.training());
}

// An unbatched [C, H, W] is one sample: feature_dropout's channel dim is dim 1.
Tensor functional::dropout2d(const Tensor& input, const Dropout2dFuncOptions& options) {
  STRATA_CHECK(input.dim() == 3 || input.dim() == 4, "dropout2d: expected a 3-D (unbatched) or 4-D input, got shape ",
               input.sizes());
  if (input.dim() == 4) return feature_dropout(input, options.p(), options.training());
  return feature_dropout(input.unsqueeze(0), options.p(), options.training()).squeeze(0);
}

}  // namespace strata::nn
