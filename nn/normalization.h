#pragma once
// Normalisation layers, as torch.nn's (weights ones, biases zeros): LayerNorm over the trailing dims,
// BatchNorm1d / BatchNorm2d over each channel of a batch (with running statistics for eval mode),
// GroupNorm over groups of channels of each sample, and RMSNorm.
//
//   nn::LayerNorm ln(256);                                   // normalises the last dim of size 256
//   nn::LayerNorm ln2(nn::LayerNormOptions({8, 8}).eps(1e-6));   // the last two dims, eps 1e-6
//   Tensor x = randn({64, 256});
//   Tensor y = ln(x);                                        // x [..., 256] -> same shape
//   std::cout << *ln;   // LayerNorm([256], eps=1e-05, elementwise_affine=true)
//   nn::BatchNorm2d bn(nn::BatchNormOptions(16).momentum(0.01));
//   Tensor maps = bn(randn({8, 16, 5, 5}));                  // updates bn->running_mean and running_var
//   bn->eval();                                              // now normalises with the running statistics
//   nn::GroupNorm gn(4, 16);
//   nn::RMSNorm rms(nn::RMSNormOptions({256}).eps(1e-6));
//   Tensor z = rms(y) + gn(maps).mean();

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// LayerNorm's options: LayerNormOptions({256}).eps(1e-6).elementwise_affine(false).
class LayerNormOptions {
 public:
  LayerNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  ///< dims
  STRATA_ARG(std::vector<int64_t>, normalized_shape);  ///< the trailing dims normalised over
  STRATA_ARG(double, eps) = 1e-5;                      ///< added to the variance
  STRATA_ARG(bool, elementwise_affine) = true;         ///< whether weight and bias exist
};

/// (x - mean) / sqrt(var + eps) over the trailing normalized_shape dims, then * weight + bias.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);  ///< from options
  /// Normalises the trailing dims `normalized_shape`; elementwise_affine adds a learned weight and bias.
  explicit LayerNormImpl(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNormImpl(LayerNormOptions(std::move(normalized_shape)).eps(eps).elementwise_affine(elementwise_affine)) {}
  /// Normalises the last dim, of size `normalized_size` (as torch.nn.LayerNorm(256)).
  explicit LayerNormImpl(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNormImpl(std::vector<int64_t>{normalized_size}, eps, elementwise_affine) {}
  /// The trainable parameters a LayerNorm made from the same options has, without making it.
  static int64_t count_parameters(const LayerNormOptions& options);
  /// The same from the dims and flags.
  static int64_t count_parameters(const std::vector<int64_t>& normalized_shape, double eps = 1e-5,
                                  bool elementwise_affine = true) {
    return count_parameters(LayerNormOptions(normalized_shape).eps(eps).elementwise_affine(elementwise_affine));
  }
  /// The same for a LayerNorm over the last dim.
  static int64_t count_parameters(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true) {
    return count_parameters(std::vector<int64_t>{normalized_size}, eps, elementwise_affine);
  }
  void reset_parameters();                             ///< weight to ones, bias to zeros
  Tensor forward(const Tensor& input);                 ///< [..., *normalized_shape] -> same shape
  void pretty_print(std::ostream& os) const override;  ///< "LayerNorm([256], eps=1e-05, elementwise_affine=true)"

  LayerNormOptions options;  ///< what it was made with
  Tensor weight;             ///< normalized_shape, undefined without elementwise_affine
  Tensor bias;               ///< normalized_shape, undefined without elementwise_affine
};
STRATA_MODULE(LayerNorm);

/// BatchNorm1d's and BatchNorm2d's options: BatchNormOptions(num_features).momentum(0.01).
class BatchNormOptions {
 public:
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  ///< channels (dim 1 of the input)
  STRATA_ARG(int64_t, num_features);                                       ///< channels (dim 1 of the input)
  STRATA_ARG(double, eps) = 1e-5;                                          ///< added to the variance
  STRATA_ARG(std::optional<double>, momentum) = 0.1;  ///< running-stat update weight; none: cumulative average
  STRATA_ARG(bool, affine) = true;                    ///< whether weight and bias exist
  STRATA_ARG(bool, track_running_stats) = true;       ///< whether running statistics are kept and used in eval
};

/// What BatchNorm1d, BatchNorm2d and SyncBatchNorm share, as torch's _NormBase: options, parameters, buffers.
class BatchNormImplBase : public Module {
 public:
  BatchNormImplBase(std::string name, const BatchNormOptions& options);  ///< `name` is the type name printed
  void reset_running_stats();                          ///< running_mean 0, running_var 1, num_batches_tracked 0
  void reset_parameters();                             ///< the running stats, and weight to ones, bias to zeros
  void pretty_print(std::ostream& os) const override;  ///< "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=true, ...)"

  BatchNormOptions options;    ///< what it was made with
  Tensor weight;               ///< [num_features], undefined without affine
  Tensor bias;                 ///< [num_features], undefined without affine
  Tensor running_mean;         ///< buffer [num_features], undefined without track_running_stats
  Tensor running_var;          ///< buffer [num_features], undefined without track_running_stats
  Tensor num_batches_tracked;  ///< buffer: int64 count of training batches, undefined without track_running_stats

 protected:
  /// The running statistics' update weight for this forward: in training mode (when tracking) counts the batch,
  /// then momentum, or 1 / batches so far without one (a cumulative average), as torch.
  double next_momentum();
};

/// Batch normalisation over each channel, as torch.nn.BatchNorm1d ([N, C] or [N, C, L]) and BatchNorm2d ([N, C, H, W]).
template <size_t D>
class BatchNormImpl : public BatchNormImplBase {
 public:
  explicit BatchNormImpl(int64_t num_features) : BatchNormImpl(BatchNormOptions(num_features)) {}  ///< channels
  /// From options
  explicit BatchNormImpl(const BatchNormOptions& options)
      : BatchNormImplBase(D == 1 ? "BatchNorm1d" : "BatchNorm2d", options) {}
  /// Batch statistics in training mode (updating the running ones) or without them; else the running ones
  Tensor forward(const Tensor& input);
};
/// Batch normalisation of [N, C] or [N, C, L], as torch.nn.BatchNorm1d.
class BatchNorm1dImpl : public BatchNormImpl<1> {
 public:
  using BatchNormImpl<1>::BatchNormImpl;
};
/// Batch normalisation of [N, C, H, W], as torch.nn.BatchNorm2d.
class BatchNorm2dImpl : public BatchNormImpl<2> {
 public:
  using BatchNormImpl<2>::BatchNormImpl;
};
STRATA_MODULE(BatchNorm1d);
STRATA_MODULE(BatchNorm2d);

/// GroupNorm's options: GroupNormOptions(num_groups, num_channels).eps(1e-6).
class GroupNormOptions {
 public:
  /// num_channels split into num_groups groups
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  STRATA_ARG(int64_t, num_groups);    ///< groups the channels are split into
  STRATA_ARG(int64_t, num_channels);  ///< channels (dim 1 of the input)
  STRATA_ARG(double, eps) = 1e-5;     ///< added to the variance
  STRATA_ARG(bool, affine) = true;    ///< whether a per-channel weight and bias exist
};

/// Normalisation over groups of channels of each sample, as torch.nn.GroupNorm.
class GroupNormImpl : public Module {
 public:
  GroupNormImpl(int64_t num_groups, int64_t num_channels)
      : GroupNormImpl(GroupNormOptions(num_groups, num_channels)) {}  ///< groups and channels
  explicit GroupNormImpl(const GroupNormOptions& options);            ///< from options
  void reset_parameters();                                            ///< weight to ones, bias to zeros
  Tensor forward(const Tensor& input);                                ///< [N, C, ...] -> same shape
  void pretty_print(std::ostream& os) const override;                 ///< "GroupNorm(4, 16, eps=1e-05, affine=true)"

  GroupNormOptions options;  ///< what it was made with
  Tensor weight;             ///< [num_channels], undefined without affine
  Tensor bias;               ///< [num_channels], undefined without affine
};
STRATA_MODULE(GroupNorm);

/// RMSNorm's options: RMSNormOptions({256}).eps(1e-6); no eps means the dtype's machine epsilon, as torch.
class RMSNormOptions {
 public:
  RMSNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  ///< dims
  STRATA_ARG(std::vector<int64_t>, normalized_shape);     ///< the trailing dims normalised over
  STRATA_ARG(std::optional<double>, eps) = std::nullopt;  ///< added to the mean square
  STRATA_ARG(bool, elementwise_affine) = true;            ///< whether a learned weight exists
};

/// x / sqrt(mean(x^2) + eps) over the trailing dims, times a learned weight, as torch.nn.RMSNorm.
class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& options);  ///< from options
  void reset_parameters();                              ///< weight to ones
  Tensor forward(const Tensor& input);                  ///< [..., *normalized_shape] -> same shape
  void pretty_print(std::ostream& os) const override;   ///< "RMSNorm([256], eps=1e-06, elementwise_affine=true)"

  RMSNormOptions options;  ///< what it was made with
  Tensor weight;           ///< normalized_shape, undefined without elementwise_affine
};
STRATA_MODULE(RMSNorm);

namespace functional {

/// F::batch_norm's options: F::BatchNormFuncOptions().weight(w).bias(b).training(true).
class BatchNormFuncOptions {
 public:
  STRATA_ARG(Tensor, weight);          ///< optional per-channel scale
  STRATA_ARG(Tensor, bias);            ///< optional per-channel shift
  STRATA_ARG(bool, training) = false;  ///< batch statistics (true) or the running ones
  STRATA_ARG(double, momentum) = 0.1;  ///< running-stat update weight
  STRATA_ARG(double, eps) = 1e-5;      ///< added to the variance
};
/// Batch normalisation with libtorch's argument order, as torch::nn::functional::batch_norm
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& options = {});

/// F::group_norm's options: F::GroupNormFuncOptions(num_groups).weight(w).bias(b).
class GroupNormFuncOptions {
 public:
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}  ///< the groups
  STRATA_ARG(int64_t, num_groups);                                       ///< groups the channels are split into
  STRATA_ARG(Tensor, weight);                                            ///< optional per-channel scale
  STRATA_ARG(Tensor, bias);                                              ///< optional per-channel shift
  STRATA_ARG(double, eps) = 1e-5;                                        ///< added to the variance
};
/// Group normalisation with options, as torch::nn::functional::group_norm
Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& options);

}  // namespace functional

}  // namespace strata::nn
