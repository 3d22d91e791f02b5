#pragma once
// Dropout: in training mode zeroes each element with probability p and scales the rest by
// 1 / (1 - p); in eval mode it is the identity. Dropout2d zeroes whole channels of [N, C, H, W] (or
// [C, H, W]). Masks come from the default generator.
//
//   Tensor x = randn({64, 256});
//   nn::Dropout drop(0.1);
//   Tensor y = drop(x);       // training (the default): random mask
//   drop->eval();
//   Tensor z = drop(x);       // z is x
//   nn::Dropout light(nn::DropoutOptions().p(0.05));
//   nn::Dropout2d channels(0.2);
//   Tensor maps = channels(randn({8, 16, 5, 5}));   // each of the 8 x 16 channels kept or zeroed whole

#include <ostream>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// Dropout's and Dropout2d's options: DropoutOptions(0.2), DropoutOptions().p(0.2).inplace(true).
class DropoutOptions {
 public:
  DropoutOptions(double p = 0.5) : p_(p) {}  ///< implicit, as libtorch's: Dropout(0.2)
  STRATA_ARG(double, p);                     ///< probability of zeroing, in [0, 1]
  STRATA_ARG(bool, inplace) = false;         ///< whether forward overwrites its input
};
using Dropout2dOptions = DropoutOptions;  ///< Dropout2d's options

/// Randomly zeroes elements while training, as torch.nn.Dropout.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});  ///< p: probability of zeroing an element
  Tensor forward(const Tensor& input);                 ///< masked and scaled when is_training(), else input itself
  void pretty_print(std::ostream& os) const override;  ///< "Dropout(p=0.5)"

  DropoutOptions options;  ///< what it was made with
};
STRATA_MODULE(Dropout);

/// Randomly zeroes whole channels while training, as torch.nn.Dropout2d.
class Dropout2dImpl : public Module {
 public:
  explicit Dropout2dImpl(const Dropout2dOptions& options = {});  ///< p: probability of zeroing a channel
  /// [N, C, H, W] or [C, H, W]: channels masked and scaled when is_training(), else input itself
  Tensor forward(const Tensor& input);
  void pretty_print(std::ostream& os) const override;  ///< "Dropout2d(p=0.5)"

  Dropout2dOptions options;  ///< what it was made with
};
STRATA_MODULE(Dropout2d);

namespace functional {
/// F::dropout's options, as libtorch's.
class DropoutFuncOptions {
 public:
  STRATA_ARG(double, p) = 0.5;        ///< probability of zeroing an element
  STRATA_ARG(bool, training) = true;  ///< whether to drop (false: the identity)
};
/// Zeroes elements with probability p while training, as torch::nn::functional::dropout
Tensor dropout(const Tensor& input, const DropoutFuncOptions& options = {});

/// F::dropout2d's options, as libtorch's.
class Dropout2dFuncOptions {
 public:
  STRATA_ARG(double, p) = 0.5;        ///< probability of zeroing a channel
  STRATA_ARG(bool, training) = true;  ///< whether to drop (false: the identity)
};
/// Zeroes whole channels of [N, C, H, W] or [C, H, W] while training, as torch::nn::functional::dropout2d
Tensor dropout2d(const Tensor& input, const Dropout2dFuncOptions& options = {});
}  // namespace functional

}  // namespace strata::nn
