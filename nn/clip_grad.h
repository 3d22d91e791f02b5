#pragma once
// Gradient clipping by the global norm, as torch.nn.utils.clip_grad_norm_.
//
//   nn::Linear model(784, 10);
//   optim::SGD optimizer(model->parameters(), optim::SGDOptions(0.1));
//   cross_entropy(model(randn({64, 784})), randint(0, 10, {64})).backward();
//   double norm = nn::utils::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);  // the norm before clipping
//   nn::utils::clip_grad_value_(model->parameters(), /*clip_value=*/0.5);            // each element into [-0.5, 0.5]
//   optimizer.step();

#include <vector>

#include "strata/tensor/tensor.h"

/// Gradient clipping, as torch.nn.utils.
namespace strata::nn::utils {

/// Scales every gradient in place by min(1, max_norm / (total + 1e-6)), where total is the norm_type-norm
/// of all gradients taken together (inf: the largest |g|), and returns total, as libtorch's (a double).
/// Parameters without a gradient are skipped; a NaN or infinite total scales by NaN or 0, as torch, or
/// throws (leaving the gradients alone) with error_if_nonfinite.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// clip_grad_norm_ of one parameter's gradient.
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// Clamps every gradient element into [-clip_value, clip_value] in place; parameters without a gradient are skipped.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace strata::nn::utils
