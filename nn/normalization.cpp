#include "strata/nn/normalization.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

// weight and bias of normalized_shape with elementwise_affine, as the constructor below registers them.
int64_t LayerNormImpl::count_parameters(const LayerNormOptions& options) {
  int64_t n = 1;
  for (int64_t d : options.normalized_shape()) n *= d;
  return options.elementwise_affine() ? 2 * n : 0;
}

LayerNormImpl::LayerNormImpl(const LayerNormOptions& opts) : Module("LayerNorm"), options(opts) {
  const std::vector<int64_t>& shape = options.normalized_shape();
  STRATA_CHECK(!shape.empty() && std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d > 0; }),
               "LayerNorm: normalized_shape must be a non-empty list of positive sizes, got ", IntArrayRef(shape));
  STRATA_CHECK(options.eps() >= 0, "LayerNorm: eps must be non-negative, got ", options.eps());
  if (!options.elementwise_affine()) return;
  weight = register_parameter("weight", strata::empty(shape));
  bias = register_parameter("bias", strata::empty(shape));
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (!options.elementwise_affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& input) {
  return layer_norm(input, options.normalized_shape(), weight, bias, options.eps());
}

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << IntArrayRef(options.normalized_shape()) << ", eps=" << options.eps()
     << ", elementwise_affine=" << (options.elementwise_affine() ? "true" : "false") << ")";
}

BatchNormImplBase::BatchNormImplBase(std::string type_name, const BatchNormOptions& opts)
    : Module(std::move(type_name)), options(opts) {
  const int64_t c = options.num_features();
  STRATA_CHECK(c > 0, name(), ": num_features must be positive, got ", c);
  STRATA_CHECK(options.eps() >= 0, name(), ": eps must be non-negative, got ", options.eps());
  if (options.affine()) {
    weight = register_parameter("weight", strata::empty({c}));
    bias = register_parameter("bias", strata::empty({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", strata::empty({c}));
    running_var = register_buffer("running_var", strata::empty({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", strata::zeros({}, kLong));
  }
  reset_parameters();
}

void BatchNormImplBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

double BatchNormImplBase::next_momentum() {
  if (!is_training() || !options.track_running_stats()) return options.momentum().value_or(0.0);
  NoGradGuard no_grad;
  num_batches_tracked.add_(1);
  if (options.momentum()) return *options.momentum();
  return 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
}

void BatchNormImplBase::pretty_print(std::ostream& os) const {
  os << name() << "(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum())
    os << *options.momentum();
  else
    os << "None";
  os << ", affine=" << (options.affine() ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false") << ")";
}

// As torch's _BatchNorm.forward: without running statistics the batch's own are used in eval mode too.
template <size_t D>
Tensor BatchNormImpl<D>::forward(const Tensor& input) {
  if constexpr (D == 1)
    STRATA_CHECK(input.dim() == 2 || input.dim() == 3, name(), ": expected 2D or 3D input (got ", input.dim(),
                 "D input)");
  else
    STRATA_CHECK(input.dim() == 4, name(), ": expected 4D input (got ", input.dim(), "D input)");
  const double momentum = next_momentum();
  return batch_norm(input, weight, bias, running_mean, running_var, is_training() || !options.track_running_stats(),
                    momentum, options.eps());
}

template class BatchNormImpl<1>;
template class BatchNormImpl<2>;

GroupNormImpl::GroupNormImpl(const GroupNormOptions& opts) : Module("GroupNorm"), options(opts) {
  STRATA_CHECK(
      options.num_groups() > 0 && options.num_channels() > 0 && options.num_channels() % options.num_groups() == 0,
      "GroupNorm: num_channels must be divisible by num_groups, got ", options.num_channels(), " and ",
      options.num_groups());
  if (!options.affine()) return;
  weight = register_parameter("weight", strata::empty({options.num_channels()}));
  bias = register_parameter("bias", strata::empty({options.num_channels()}));
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (!options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.dim() >= 2 && input.size(1) == options.num_channels(), "GroupNorm: expected an input with ",
               options.num_channels(), " channels in dim 1, got shape ", input.sizes());
  return group_norm(input, options.num_groups(), weight, bias, options.eps());
}

void GroupNormImpl::pretty_print(std::ostream& os) const {
  os << "GroupNorm(" << options.num_groups() << ", " << options.num_channels() << ", eps=" << options.eps()
     << ", affine=" << (options.affine() ? "true" : "false") << ")";
}

RMSNormImpl::RMSNormImpl(const RMSNormOptions& opts) : Module("RMSNorm"), options(opts) {
  const std::vector<int64_t>& shape = options.normalized_shape();
  STRATA_CHECK(!shape.empty() && std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d > 0; }),
               "RMSNorm: normalized_shape must be a non-empty list of positive sizes, got ", IntArrayRef(shape));
  if (!options.elementwise_affine()) return;
  weight = register_parameter("weight", strata::empty(shape));
  reset_parameters();
}

void RMSNormImpl::reset_parameters() {
  if (options.elementwise_affine()) init::ones_(weight);
}

Tensor RMSNormImpl::forward(const Tensor& input) {
  return rms_norm(input, options.normalized_shape(), weight, options.eps());
}

void RMSNormImpl::pretty_print(std::ostream& os) const {
  os << "RMSNorm(" << IntArrayRef(options.normalized_shape()) << ", eps=";
  if (options.eps())
    os << *options.eps();
  else
    os << "None";
  os << ", elementwise_affine=" << (options.elementwise_affine() ? "true" : "false") << ")";
}

namespace functional {

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& o) {
  return strata::batch_norm(input, o.weight(), o.bias(), running_mean, running_var, o.training(), o.momentum(),
                            o.eps());
}

Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& o) {
  return strata::group_norm(input, o.num_groups(), o.weight(), o.bias(), o.eps());
}

}  // namespace functional
}  // namespace strata::nn
