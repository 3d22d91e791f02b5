#pragma once
// Activation modules, for Sequential: ReLU, GELU, Tanh, Sigmoid (the functions are strata::relu, ...).
//
//   nn::Sequential mlp(nn::Linear(784, 256), nn::GELU(), nn::Linear(256, 10));
//   nn::GELU gelu_tanh("tanh");      // the tanh approximation, as GPT-2
//   std::cout << *mlp;               // ... (1): GELU() ...

#include <ostream>
#include <string>

#include "strata/nn/module.h"

namespace strata::nn {

/// max(x, 0).
class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}                       ///< no options
  Tensor forward(const Tensor& input);                 ///< relu(input)
  void pretty_print(std::ostream& os) const override;  ///< "ReLU()"
};
STRATA_MODULE(ReLU);

/// x * Phi(x), exact (approximate "none") or with torch's tanh formula ("tanh").
class GELUImpl : public Module {
 public:
  explicit GELUImpl(std::string approximate = "none");  ///< "none" or "tanh"
  Tensor forward(const Tensor& input);                  ///< gelu(input, approximate)
  void pretty_print(std::ostream& os) const override;   ///< "GELU()" or "GELU(approximate='tanh')"

  std::string approximate;  ///< "none" or "tanh"
};
STRATA_MODULE(GELU);

/// Hyperbolic tangent.
class TanhImpl : public Module {
 public:
  TanhImpl() : Module("Tanh") {}                       ///< no options
  Tensor forward(const Tensor& input);                 ///< tanh(input)
  void pretty_print(std::ostream& os) const override;  ///< "Tanh()"
};
STRATA_MODULE(Tanh);

/// 1 / (1 + exp(-x)).
class SigmoidImpl : public Module {
 public:
  SigmoidImpl() : Module("Sigmoid") {}                 ///< no options
  Tensor forward(const Tensor& input);                 ///< sigmoid(input)
  void pretty_print(std::ostream& os) const override;  ///< "Sigmoid()"
};
STRATA_MODULE(Sigmoid);

}  // namespace strata::nn
