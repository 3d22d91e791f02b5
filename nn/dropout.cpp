#include "strata/nn/dropout.h"

#include "strata/autograd/ops.h"

namespace strata::nn {

DropoutImpl::DropoutImpl(double probability) : Module("Dropout"), p(probability) {
  STRATA_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
}

Tensor DropoutImpl::forward(const Tensor& input) { return dropout(input, p, is_training()); }

void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << p << ")"; }

}  // namespace strata::nn
