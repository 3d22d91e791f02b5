#include "strata/nn/clip_grad.h"

#include <cmath>

#include "strata/autograd/grad_mode.h"
#include "strata/tensor/creation.h"

namespace strata::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  STRATA_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or inf, got ", norm_type);
  STRATA_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  ScalarType dtype = kFloat;  // of the result: float64 when any gradient is
  for (size_t i = 0; i < parameters.size(); ++i) {
    STRATA_CHECK(parameters[i].defined(), "clip_grad_norm_: parameter ", i, " is undefined");
    const Tensor& g = parameters[i].grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    dtype = promote_types(dtype, g.dtype());
  }
  if (grads.empty()) return scalar_tensor(0.0);

  // The norm of the per-gradient norms is the norm of everything together.
  const bool max_norm_type = std::isinf(norm_type);
  double total = 0;
  for (const Tensor& g : grads) {
    const double n = g.norm(norm_type).item<double>();
    if (!max_norm_type)
      total += std::pow(n, norm_type);
    else if (n > total || std::isnan(n))
      total = n;  // a NaN stays: n > NaN is false
  }
  if (!max_norm_type) total = std::pow(total, 1 / norm_type);

  const double clip_coef = max_norm / (total + 1e-6);
  // torch multiplies by the clamped coefficient even when it is 1; skipping that leaves the same values.
  if (!(clip_coef >= 1))
    for (Tensor g : grads) g.mul_(clip_coef);
  return scalar_tensor(total, dtype);
}

}  // namespace strata::nn::utils
