#pragma once
// Dropout: in training mode zeroes each element with probability p and scales the rest by
// 1 / (1 - p); in eval mode it is the identity. Masks come from the default generator.
//
//   Tensor x = randn({64, 256});
//   nn::Dropout drop(0.1);
//   Tensor y = drop(x);       // training (the default): random mask
//   drop->eval();
//   Tensor z = drop(x);       // z is x

#include <ostream>

#include "strata/nn/module.h"

namespace strata::nn {

/// Randomly zeroes elements while training, as torch.nn.Dropout.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);                ///< p: probability of zeroing an element, in [0, 1]
  Tensor forward(const Tensor& input);                 ///< masked and scaled when is_training(), else input itself
  void pretty_print(std::ostream& os) const override;  ///< "Dropout(p=0.5)"

  double p;  ///< probability of zeroing an element
};
STRATA_MODULE(Dropout);

}  // namespace strata::nn
