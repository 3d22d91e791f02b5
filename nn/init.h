#pragma once
// Parameter initialisation, as torch.nn.init: each function fills a tensor in place (without
// recording history) and returns it. Random ones draw from `gen`, or the default generator when
// it is null, so manual_seed(s) before building a model gives the same parameters on every run
// and every rank.
//
//   manual_seed(0);
//   Tensor w = empty({256, 784});
//   nn::init::kaiming_uniform_(w, std::sqrt(5.0));           // what nn::Linear does
//   nn::init::xavier_normal_(w, nn::init::calculate_gain(nn::init::Nonlinearity::Tanh));
//   nn::init::kaiming_normal_(w, 0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);

#include <cstdint>
#include <utility>

#include "strata/tensor/creation.h"
#include "strata/tensor/tensor.h"

/// Parameter initialisers (torch.nn.init), in place, from the default generator or a given one.
namespace strata::nn::init {

/// Which fan kaiming_* preserves the variance of: the forward pass's (FanIn) or the backward's (FanOut).
enum class FanMode { FanIn, FanOut };
/// The nonlinearity that follows a layer, for calculate_gain.
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU };

/// The recommended gain for a nonlinearity: 1 (Linear, Sigmoid), 5/3 (Tanh), sqrt(2) (ReLU),
/// sqrt(2 / (1 + param^2)) (LeakyReLU, param = negative slope).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
/// (fan_in, fan_out) of a weight of at least 2 dims: size(1) and size(0), times the product of dims 2...
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

/// Fills with values uniform in [a, b).
Tensor uniform_(Tensor tensor, double a = 0, double b = 1, Generator* gen = nullptr);
/// Fills with values from N(mean, std^2).
Tensor normal_(Tensor tensor, double mean = 0, double std = 1, Generator* gen = nullptr);
/// Fills with `value`.
Tensor constant_(Tensor tensor, Scalar value);
/// Fills with 0.
Tensor zeros_(Tensor tensor);
/// Fills with 1.
Tensor ones_(Tensor tensor);
/// Glorot uniform: U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1, Generator* gen = nullptr);
/// Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1, Generator* gen = nullptr);
/// He uniform: U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(Tensor tensor, double a = 0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* gen = nullptr);
/// He normal: N(0, std^2), std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_normal_(Tensor tensor, double a = 0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* gen = nullptr);

}  // namespace strata::nn::init
