#pragma once
// Linear, the fully connected layer y = x @ weight^T + bias, initialised as torch.nn.Linear; and
// Flatten and Unflatten, which libtorch keeps beside it.
//
//   nn::Linear fc(784, 256);                                      // weight [256, 784], bias [256]
//   nn::Linear head(nn::LinearOptions(256, 10).bias(false));      // no bias
//   Tensor x = randn({64, 784});
//   Tensor y = fc(x);                                             // x [..., 784] -> y [..., 256]
//   std::cout << *fc;   // Linear(in_features=784, out_features=256, bias=true)
//   nn::Flatten flat;                                             // [N, C, H, W] -> [N, C * H * W]
//   nn::Unflatten unflat(nn::UnflattenOptions(1, {16, 7, 7}));    // [N, 784] -> [N, 16, 7, 7]
//   Tensor maps = unflat(flat(randn({2, 16, 7, 7})));

#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// Linear's sizes and whether it has a bias: LinearOptions(784, 256).bias(false).
class LinearOptions {
 public:
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}  ///< the sizes; bias on
  STRATA_ARG(int64_t, in_features);                                ///< size of each input's last dim
  STRATA_ARG(int64_t, out_features);                               ///< size of each output's last dim
  STRATA_ARG(bool, bias) = true;                                   ///< whether to add a learned bias
};

/// y = x @ weight^T + bias over the last dim of x.
class LinearImpl : public Module {
 public:
  /// in_features -> out_features, with a bias unless told otherwise.
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true)
      : LinearImpl(LinearOptions(in_features, out_features).bias(bias)) {}
  explicit LinearImpl(const LinearOptions& options);  ///< from options
  /// The trainable parameters a Linear made from the same arguments has, without making it (pipeline partitioning).
  static int64_t count_parameters(int64_t in_features, int64_t out_features, bool bias = true);
  /// The trainable parameters of LinearImpl(options), without making it.
  static int64_t count_parameters(const LinearOptions& options);
  /// Draws the parameters again as torch: weight kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)),
  /// and bias U(-1/sqrt(in), 1/sqrt(in)).
  void reset_parameters();
  Tensor forward(const Tensor& input);                 ///< [..., in_features] -> [..., out_features]
  void pretty_print(std::ostream& os) const override;  ///< "Linear(in_features=784, out_features=256, bias=true)"

  LinearOptions options;  ///< the sizes it was made with
  Tensor weight;          ///< [out_features, in_features]
  Tensor bias;            ///< [out_features], undefined without bias
};
STRATA_MODULE(Linear);

/// Flatten's dims: FlattenOptions().start_dim(1).end_dim(-1), as libtorch's defaults.
class FlattenOptions {
 public:
  STRATA_ARG(int64_t, start_dim) = 1;  ///< first dim to merge
  STRATA_ARG(int64_t, end_dim) = -1;   ///< last dim to merge
};

/// Merges dims start_dim..end_dim into one, as torch.nn.Flatten ([N, C, H, W] -> [N, C * H * W] by default).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& options = {});  ///< from options
  Tensor forward(const Tensor& input);                       ///< input.flatten(start_dim, end_dim)
  void pretty_print(std::ostream& os) const override;        ///< "Flatten(start_dim=1, end_dim=-1)"

  FlattenOptions options;  ///< the dims it merges
};
STRATA_MODULE(Flatten);

/// Unflatten's dim and the sizes it becomes: UnflattenOptions(1, {16, 4, 4}).
class UnflattenOptions {
 public:
  UnflattenOptions(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}  ///< dim, sizes
  STRATA_ARG(int64_t, dim);                 ///< the dim to split
  STRATA_ARG(std::vector<int64_t>, sizes);  ///< what it becomes (their product is its size)
};

/// Splits one dim into sizes, as torch.nn.Unflatten ([N, 256] -> [N, 16, 4, 4] with dim 1, sizes {16, 4, 4}).
class UnflattenImpl : public Module {
 public:
  /// Splits `dim` into `sizes`.
  UnflattenImpl(int64_t dim, std::vector<int64_t> sizes) : UnflattenImpl(UnflattenOptions(dim, std::move(sizes))) {}
  explicit UnflattenImpl(const UnflattenOptions& options);  ///< from options
  Tensor forward(const Tensor& input);                      ///< input with dim replaced by sizes
  void pretty_print(std::ostream& os) const override;       ///< "Unflatten(dim=1, unflattened_size=[16, 4, 4])"

  UnflattenOptions options;  ///< the dim and sizes
};
STRATA_MODULE(Unflatten);

}  // namespace strata::nn
