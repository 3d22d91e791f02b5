#include "strata/nn/linear.h"

#include <cmath>

#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

int64_t LinearImpl::count_parameters(int64_t in_features, int64_t out_features, bool bias) {
  return count_parameters(LinearOptions(in_features, out_features).bias(bias));
}

// weight [out, in] and bias [out], as the constructor below registers them.
int64_t LinearImpl::count_parameters(const LinearOptions& o) {
  return o.out_features() * o.in_features() + (o.bias() ? o.out_features() : 0);
}

LinearImpl::LinearImpl(const LinearOptions& opts) : Module("Linear"), options(opts) {
  STRATA_CHECK(options.in_features() >= 0 && options.out_features() >= 0,
               "Linear: in_features and out_features must be non-negative, got ", options.in_features(), " and ",
               options.out_features());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_features()}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (!bias.defined()) return;
  const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  init::uniform_(bias, -bound, bound);
}

Tensor LinearImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.dim() >= 1 && input.size(-1) == options.in_features(), "Linear: expected input with last dim ",
               options.in_features(), ", got shape ", input.sizes());
  return linear(input, weight, bias);
}

FlattenImpl::FlattenImpl(const FlattenOptions& opts) : Module("Flatten"), options(opts) {}

Tensor FlattenImpl::forward(const Tensor& input) { return flatten(input, options.start_dim(), options.end_dim()); }

void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << options.start_dim() << ", end_dim=" << options.end_dim() << ")";
}

UnflattenImpl::UnflattenImpl(const UnflattenOptions& opts) : Module("Unflatten"), options(opts) {
  STRATA_CHECK(!options.sizes().empty(), "Unflatten: unflattened_size must not be empty");
}

Tensor UnflattenImpl::forward(const Tensor& input) {
  const int64_t dim = wrap_dim(options.dim(), input.dim(), "Unflatten");
  DimVector sizes;
  int64_t product = 1;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d != dim) {
      sizes.push_back(input.size(d));
      continue;
    }
    for (int64_t s : options.sizes()) {
      sizes.push_back(s);
      product *= s;
    }
  }
  // One size may be -1 (inferred by reshape); otherwise the sizes must multiply to the dim's size.
  STRATA_CHECK(product < 0 || product == input.size(dim), "Unflatten: unflattened_size ", IntArrayRef(options.sizes()),
               " must multiply to the size of dim ", dim, " of the input of shape ", input.sizes());
  return input.reshape(sizes);
}

void UnflattenImpl::pretty_print(std::ostream& os) const {
  os << "Unflatten(dim=" << options.dim() << ", unflattened_size=" << IntArrayRef(options.sizes()) << ")";
}

void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << options.in_features() << ", out_features=" << options.out_features()
     << ", bias=" << (options.bias() ? "true" : "false") << ")";
}

}  // namespace strata::nn
