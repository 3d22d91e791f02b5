#pragma once
// SyncBatchNorm: batch normalisation whose training statistics cover the whole data-parallel batch,
// as torch.nn.SyncBatchNorm. Each rank sums its part of every channel, the sums meet in
// differentiable all_reduces (distributed/functional.h), so the backward's all_reduce is the
// autograd of the forward's; in eval mode it is BatchNorm with the running statistics. Every rank of
// the group calls forward the same number of times in training (they meet in collectives).
//
//   strata::distributed::init();                                 // under mpirun
//   nn::SyncBatchNorm bn(nn::BatchNormOptions(16));             // over the world; or give a group
//   Tensor local = randn({8, 16, 5, 5});                         // this rank's samples
//   Tensor y = bn(local);          // normalised with the mean and variance of every rank's samples
//   y.sum().backward();

#include <ostream>

#include "strata/distributed/process_group.h"
#include "strata/nn/normalization.h"

namespace strata::nn {

/// Batch normalisation over the samples of every rank of a group, as torch.nn.SyncBatchNorm.
class SyncBatchNormImpl : public BatchNormImplBase {
 public:
  /// Statistics over `group` (the world when empty).
  explicit SyncBatchNormImpl(const BatchNormOptions& options, distributed::Group group = {});
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(BatchNormOptions(num_features)) {}  ///< world
  /// [N, C, ...]: the group's batch statistics when training (updating the running ones), else the running ones
  Tensor forward(const Tensor& input);

  distributed::Group process_group;  ///< the ranks whose samples share the statistics
};
STRATA_MODULE(SyncBatchNorm);

}  // namespace strata::nn
