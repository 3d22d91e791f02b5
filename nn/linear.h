#pragma once
// Linear, the fully connected layer y = x @ weight^T + bias, initialised as torch.nn.Linear.
//
//   nn::Linear fc(784, 256);                                      // weight [256, 784], bias [256]
//   nn::Linear head(nn::LinearOptions(256, 10).bias(false));      // no bias
//   Tensor x = randn({64, 784});
//   Tensor y = fc(x);                                             // x [..., 784] -> y [..., 256]
//   std::cout << *fc;   // Linear(in_features=784, out_features=256, bias=true)

#include <cstdint>
#include <ostream>

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

}  // namespace strata::nn
