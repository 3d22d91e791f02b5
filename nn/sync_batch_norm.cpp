#include "strata/nn/sync_batch_norm.h"

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/functional.h"

namespace strata::nn {

SyncBatchNormImpl::SyncBatchNormImpl(const BatchNormOptions& opts, distributed::Group group)
    : BatchNormImplBase("SyncBatchNorm", opts), process_group(std::move(group)) {}

// Two passes over the group, as BatchNorm makes over one batch: the channel sums give the mean, then
// the sums of squared deviations give the (biased) variance. Both sums are differentiable all_reduces,
// so the gradient of every rank's loss reaches every rank's input. Normalising with given statistics
// is batch_norm's eval form, which is differentiable in them.
Tensor SyncBatchNormImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.dim() >= 2, "SyncBatchNorm: expected at least 2D input (got ", input.dim(), "D input)");
  const int64_t channels = options.num_features();
  STRATA_CHECK(input.size(1) == channels, "SyncBatchNorm: expected ", channels, " channels in dim 1, got shape ",
               input.sizes());
  const double momentum = next_momentum();
  if (!is_training() && options.track_running_stats())
    return batch_norm(input, weight, bias, running_mean, running_var, /*training=*/false, 0.0, options.eps());
  DimVector dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  Tensor count =
      full({1}, static_cast<double>(input.numel() / channels), TensorOptions(kFloat64).device(input.device()));
  distributed::all_reduce(count, distributed::ReduceOp::SUM, process_group);
  const double n = count.item<double>();
  STRATA_CHECK(n > 1, "SyncBatchNorm: Expected more than 1 value per channel when training, got ", n,
               " over the group");
  namespace F = distributed::functional;
  Tensor mean = F::all_reduce_sum(sum(input, dims), process_group) / n;  // [C]
  DimVector shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = channels;
  Tensor centered = input - mean.reshape(shape);
  Tensor var = F::all_reduce_sum(sum(centered * centered, dims), process_group) / n;  // [C], biased
  if (options.track_running_stats()) {
    NoGradGuard no_grad;
    running_mean.mul_(1 - momentum).add_(mean.detach(), momentum);
    running_var.mul_(1 - momentum).add_(var.detach(), momentum * n / (n - 1));  // unbiased, as torch
  }
  return batch_norm(input, weight, bias, mean, var, /*training=*/false, 0.0, options.eps());
}

}  // namespace strata::nn
