#pragma once
// Gradient clipping by the global norm, as torch.nn.utils.clip_grad_norm_.
//
//   nn::Linear model(784, 10);
//   optim::SGD optimizer(model->parameters(), optim::SGDOptions(0.1));
//   cross_entropy(model(randn({64, 784})), randint(0, 10, {64})).backward();
//   Tensor norm = nn::utils::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);  // the norm before clipping
//   optimizer.step();

#include <vector>

#include "strata/tensor/tensor.h"

namespace strata::nn::utils {

/// Scales every gradient in place by min(1, max_norm / (total + 1e-6)), where total is the norm_type-norm
/// of all gradients taken together (inf: the largest |g|), and returns total as a 0-dim tensor.
/// Parameters without a gradient are skipped; a NaN or infinite total scales by NaN or 0, as torch.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0);

}  // namespace strata::nn::utils
