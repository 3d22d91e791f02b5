#include "strata/nn/activation.h"

#include "strata/autograd/ops.h"

namespace strata::nn {

Tensor ReLUImpl::forward(const Tensor& input) { return relu(input); }
void ReLUImpl::pretty_print(std::ostream& os) const { os << "ReLU()"; }

GELUImpl::GELUImpl(std::string approx) : Module("GELU"), approximate(std::move(approx)) {
  STRATA_CHECK(approximate == "none" || approximate == "tanh", "GELU: approximate must be \"none\" or \"tanh\", got \"",
               approximate, "\"");
}
Tensor GELUImpl::forward(const Tensor& input) { return gelu(input, approximate); }
void GELUImpl::pretty_print(std::ostream& os) const {
  os << "GELU(" << (approximate == "none" ? "" : "approximate='" + approximate + "'") << ")";
}

Tensor TanhImpl::forward(const Tensor& input) { return tanh(input); }
void TanhImpl::pretty_print(std::ostream& os) const { os << "Tanh()"; }

Tensor SigmoidImpl::forward(const Tensor& input) { return sigmoid(input); }
void SigmoidImpl::pretty_print(std::ostream& os) const { os << "Sigmoid()"; }

}  // namespace strata::nn
