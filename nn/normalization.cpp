#include "strata/nn/normalization.h"

#include <algorithm>

#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

// weight and bias of normalized_shape with elementwise_affine, as the constructor below registers them.
int64_t LayerNormImpl::count_parameters(const std::vector<int64_t>& normalized_shape, double, bool elementwise_affine) {
  int64_t n = 1;
  for (int64_t d : normalized_shape) n *= d;
  return elementwise_affine ? 2 * n : 0;
}

LayerNormImpl::LayerNormImpl(std::vector<int64_t> shape, double epsilon, bool affine)
    : Module("LayerNorm"), normalized_shape(std::move(shape)), eps(epsilon), elementwise_affine(affine) {
  STRATA_CHECK(!normalized_shape.empty() &&
                   std::all_of(normalized_shape.begin(), normalized_shape.end(), [](int64_t d) { return d > 0; }),
               "LayerNorm: normalized_shape must be a non-empty list of positive sizes, got ",
               IntArrayRef(normalized_shape));
  STRATA_CHECK(eps >= 0, "LayerNorm: eps must be non-negative, got ", eps);
  if (!elementwise_affine) return;
  weight = register_parameter("weight", strata::empty(normalized_shape));
  bias = register_parameter("bias", strata::empty(normalized_shape));
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (!elementwise_affine) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& input) { return layer_norm(input, normalized_shape, weight, bias, eps); }

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << IntArrayRef(normalized_shape) << ", eps=" << eps
     << ", elementwise_affine=" << (elementwise_affine ? "true" : "false") << ")";
}

}  // namespace strata::nn
