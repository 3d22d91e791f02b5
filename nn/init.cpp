#include "strata/nn/init.h"

#include <cmath>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/kernels.h"

namespace strata::nn::init {
namespace {

void check_defined(const Tensor& t, const char* op) {
  STRATA_CHECK(t.defined(), "nn::init::", op, ": the tensor is undefined");
}

// Draws straight into t through the kernel table (any strides), so initialising a parameter needs no
// temporary. The in-place check bumps t's version; under no-grad it records nothing.
template <class Draw>
Tensor fill_random(Tensor t, const char* op, Generator* gen, const Draw& draw) {
  check_defined(t, op);
  STRATA_CHECK(t.is_floating_point(), "nn::init::", op, ": expected a floating point tensor, got ", t.dtype());
  NoGradGuard no_grad;
  autograd::check_inplace(t, op);
  Generator& g = gen ? *gen : default_generator();
  draw(kernels_for(t.device()), t, g.seed(), g.advance(static_cast<uint64_t>(t.numel())));
  return t;
}

int64_t fan(const Tensor& t, FanMode mode) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::FanIn ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  if (nonlinearity == Nonlinearity::Tanh) return 5.0 / 3.0;
  if (nonlinearity == Nonlinearity::ReLU) return std::sqrt(2.0);
  if (nonlinearity == Nonlinearity::LeakyReLU) return std::sqrt(2.0 / (1.0 + param * param));
  return 1.0;  // Linear, Sigmoid
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  check_defined(tensor, "calculate_fan_in_and_fan_out");
  STRATA_CHECK(tensor.dim() >= 2,
               "nn::init: fan in and fan out can not be computed for a tensor with fewer than 2 "
               "dimensions, got shape ",
               tensor.sizes());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor uniform_(Tensor tensor, double a, double b, Generator* gen) {
  STRATA_CHECK(a <= b, "nn::init::uniform_: expected a <= b, got a=", a, " b=", b);
  return fill_random(
      std::move(tensor), "uniform_", gen,
      [&](const Kernels& k, const Tensor& t, uint64_t seed, uint64_t offset) { k.uniform(t, a, b, seed, offset); });
}

Tensor normal_(Tensor tensor, double mean, double std, Generator* gen) {
  STRATA_CHECK(std >= 0, "nn::init::normal_: expected std >= 0, got ", std);
  return fill_random(
      std::move(tensor), "normal_", gen,
      [&](const Kernels& k, const Tensor& t, uint64_t seed, uint64_t offset) { k.normal(t, mean, std, seed, offset); });
}

Tensor constant_(Tensor tensor, Scalar value) {
  check_defined(tensor, "constant_");
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0); }

Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1); }

Tensor xavier_uniform_(Tensor tensor, double gain, Generator* gen) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(std::move(tensor), -bound, bound, gen);
}

Tensor xavier_normal_(Tensor tensor, double gain, Generator* gen) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  return normal_(std::move(tensor), 0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  const int64_t n = fan(tensor, mode);
  if (tensor.numel() == 0) return tensor;  // as torch: nothing to fill, and the fan may be 0
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(n));
  return uniform_(std::move(tensor), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  const int64_t n = fan(tensor, mode);
  if (tensor.numel() == 0) return tensor;
  return normal_(std::move(tensor), 0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(n)), gen);
}

}  // namespace strata::nn::init
