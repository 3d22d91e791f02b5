#include "strata/nn/clip_grad.h"

#include <cmath>

#include "strata/autograd/grad_mode.h"

namespace strata::nn::utils {

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  STRATA_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or inf, got ", norm_type);
  STRATA_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    STRATA_CHECK(parameters[i].defined(), "clip_grad_norm_: parameter ", i, " is undefined");
    if (parameters[i].grad().defined()) grads.push_back(parameters[i].grad());
  }
  if (grads.empty()) return 0.0;

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
  STRATA_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
               " of the gradients is ", total, "; error_if_nonfinite is set, so the gradients were left alone");

  const double clip_coef = max_norm / (total + 1e-6);
  // torch multiplies by the clamped coefficient even when it is 1; skipping that leaves the same values.
  if (!(clip_coef >= 1))
    for (Tensor g : grads) g.mul_(clip_coef);
  return total;
}

double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  STRATA_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters.size(); ++i) {
    STRATA_CHECK(parameters[i].defined(), "clip_grad_value_: parameter ", i, " is undefined");
    Tensor g = parameters[i].grad();
    if (g.defined()) g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace strata::nn::utils
