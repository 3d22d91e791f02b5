#include "strata/nn/activation.h"

#include "strata/autograd/ops.h"

namespace strata::nn {

Tensor ReLUImpl::forward(const Tensor& input) { return impl::maybe_inplace(input, relu(input), options.inplace()); }
void ReLUImpl::pretty_print(std::ostream& os) const { os << (options.inplace() ? "ReLU(inplace=true)" : "ReLU()"); }

Tensor LeakyReLUImpl::forward(const Tensor& input) {
  return impl::maybe_inplace(input, leaky_relu(input, options.negative_slope()), options.inplace());
}
void LeakyReLUImpl::pretty_print(std::ostream& os) const {
  os << "LeakyReLU(negative_slope=" << options.negative_slope() << (options.inplace() ? ", inplace=true)" : ")");
}

GELUImpl::GELUImpl(const GELUOptions& opts) : Module("GELU"), options(opts) {
  STRATA_CHECK(options.approximate() == "none" || options.approximate() == "tanh",
               "GELU: approximate must be \"none\" or \"tanh\", got \"", options.approximate(), "\"");
}
Tensor GELUImpl::forward(const Tensor& input) { return gelu(input, options.approximate()); }
void GELUImpl::pretty_print(std::ostream& os) const {
  os << "GELU(" << (options.approximate() == "none" ? "" : "approximate='" + options.approximate() + "'") << ")";
}

Tensor TanhImpl::forward(const Tensor& input) { return tanh(input); }
void TanhImpl::pretty_print(std::ostream& os) const { os << "Tanh()"; }

Tensor SigmoidImpl::forward(const Tensor& input) { return sigmoid(input); }
void SigmoidImpl::pretty_print(std::ostream& os) const { os << "Sigmoid()"; }

Tensor SoftmaxImpl::forward(const Tensor& input) { return softmax(input, options.dim()); }
void SoftmaxImpl::pretty_print(std::ostream& os) const { os << "Softmax(dim=" << options.dim() << ")"; }

Tensor LogSoftmaxImpl::forward(const Tensor& input) { return log_softmax(input, options.dim()); }
void LogSoftmaxImpl::pretty_print(std::ostream& os) const { os << "LogSoftmax(dim=" << options.dim() << ")"; }

}  // namespace strata::nn
