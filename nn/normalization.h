#pragma once
// LayerNorm over the trailing dims, as torch.nn.LayerNorm (weight ones, bias zeros).
//
//   nn::LayerNorm ln(256);                                   // normalises the last dim of size 256
//   nn::LayerNorm ln2(std::vector<int64_t>{8, 8}, 1e-6);      // the last two dims, eps 1e-6
//   Tensor x = randn({64, 256});
//   Tensor y = ln(x);                                        // x [..., 256] -> same shape
//   std::cout << *ln;   // LayerNorm([256], eps=1e-05, elementwise_affine=true)

#include <cstdint>
#include <ostream>
#include <vector>

#include "strata/nn/module.h"

namespace strata::nn {

/// (x - mean) / sqrt(var + eps) over the trailing normalized_shape dims, then * weight + bias.
class LayerNormImpl : public Module {
 public:
  /// Normalises the trailing dims `normalized_shape`; elementwise_affine adds a learned weight and bias.
  explicit LayerNormImpl(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  /// Normalises the last dim, of size `normalized_size` (as torch.nn.LayerNorm(256)).
  explicit LayerNormImpl(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNormImpl(std::vector<int64_t>{normalized_size}, eps, elementwise_affine) {}
  /// The trainable parameters a LayerNorm made from the same arguments has, without making it.
  static int64_t count_parameters(const std::vector<int64_t>& normalized_shape, double eps = 1e-5,
                                  bool elementwise_affine = true);
  /// The same for a LayerNorm over the last dim.
  static int64_t count_parameters(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true) {
    return count_parameters(std::vector<int64_t>{normalized_size}, eps, elementwise_affine);
  }
  void reset_parameters();                             ///< weight to ones, bias to zeros
  Tensor forward(const Tensor& input);                 ///< [..., *normalized_shape] -> same shape
  void pretty_print(std::ostream& os) const override;  ///< "LayerNorm([256], eps=1e-05, elementwise_affine=true)"

  std::vector<int64_t> normalized_shape;  ///< the trailing dims normalised over
  double eps;                             ///< added to the variance
  bool elementwise_affine;                ///< whether weight and bias exist
  Tensor weight;                          ///< normalized_shape, undefined without elementwise_affine
  Tensor bias;                            ///< normalized_shape, undefined without elementwise_affine
};
STRATA_MODULE(LayerNorm);

}  // namespace strata::nn
