#pragma once
// Activation modules, for Sequential: ReLU, LeakyReLU, GELU, Tanh, Sigmoid, Softmax and LogSoftmax
// (the functions are strata::relu, ...), with libtorch's options classes.
//
//   nn::Sequential mlp(nn::Linear(784, 256), nn::GELU(), nn::Linear(256, 10), nn::LogSoftmax(1));
//   nn::GELU gelu_tanh(nn::GELUOptions().approximate("tanh"));   // the tanh approximation, as GPT-2
//   nn::LeakyReLU leaky(nn::LeakyReLUOptions().negative_slope(0.2));
//   std::cout << *mlp;               // ... (1): GELU() ...

#include <ostream>
#include <string>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// ReLU's options: ReLUOptions(true) overwrites its input, as libtorch's.
class ReLUOptions {
 public:
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}  ///< inplace: write the result into the input
  STRATA_ARG(bool, inplace);                                ///< whether forward overwrites its input
};

/// max(x, 0).
class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(const ReLUOptions& options = {}) : Module("ReLU"), options(options) {}  ///< from options
  Tensor forward(const Tensor& input);                 ///< relu(input), into input itself when inplace
  void pretty_print(std::ostream& os) const override;  ///< "ReLU()" or "ReLU(inplace=true)"

  ReLUOptions options;  ///< what it was made with
};
STRATA_MODULE(ReLU);

/// LeakyReLU's options: LeakyReLUOptions().negative_slope(0.2).
class LeakyReLUOptions {
 public:
  STRATA_ARG(double, negative_slope) = 0.01;  ///< the slope for x < 0
  STRATA_ARG(bool, inplace) = false;          ///< whether forward overwrites its input
};

/// x where x > 0, else negative_slope * x.
class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {}) : Module("LeakyReLU"), options(options) {}  ///< options
  Tensor forward(const Tensor& input);                 ///< leaky_relu(input), into input itself when inplace
  void pretty_print(std::ostream& os) const override;  ///< "LeakyReLU(negative_slope=0.2)"

  LeakyReLUOptions options;  ///< what it was made with
};
STRATA_MODULE(LeakyReLU);

/// GELU's options: GELUOptions().approximate("tanh").
class GELUOptions {
 public:
  STRATA_ARG(std::string, approximate) = "none";  ///< "none" (exact) or "tanh"
};

/// x * Phi(x), exact (approximate "none") or with torch's tanh formula ("tanh").
class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {});  ///< from options
  /// With approximate "none" or "tanh"
  explicit GELUImpl(std::string approximate) : GELUImpl(GELUOptions().approximate(std::move(approximate))) {}
  Tensor forward(const Tensor& input);                 ///< gelu(input, approximate)
  void pretty_print(std::ostream& os) const override;  ///< "GELU()" or "GELU(approximate='tanh')"

  GELUOptions options;  ///< what it was made with
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

/// Softmax's and LogSoftmax's options: the dim they normalise along.
class SoftmaxOptions {
 public:
  SoftmaxOptions(int64_t dim) : dim_(dim) {}  ///< along dim
  STRATA_ARG(int64_t, dim);                   ///< the dim normalised along
};
using LogSoftmaxOptions = SoftmaxOptions;  ///< LogSoftmax's options

/// exp(x) / sum(exp(x)) along a dim.
class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(const SoftmaxOptions& options) : Module("Softmax"), options(options) {}  ///< along a dim
  Tensor forward(const Tensor& input);                                                          ///< softmax(input, dim)
  void pretty_print(std::ostream& os) const override;                                           ///< "Softmax(dim=1)"

  SoftmaxOptions options;  ///< what it was made with
};
STRATA_MODULE(Softmax);

/// log(softmax(x)) along a dim, computed stably.
class LogSoftmaxImpl : public Module {
 public:
  explicit LogSoftmaxImpl(const LogSoftmaxOptions& options) : Module("LogSoftmax"), options(options) {}  ///< along dim
  Tensor forward(const Tensor& input);                 ///< log_softmax(input, dim)
  void pretty_print(std::ostream& os) const override;  ///< "LogSoftmax(dim=1)"

  LogSoftmaxOptions options;  ///< what it was made with
};
STRATA_MODULE(LogSoftmax);

}  // namespace strata::nn
