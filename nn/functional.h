#pragma once
// nn::functional, where libtorch users look for the stateless functions (torch::nn::functional,
// usually aliased F). They are strata's own ops (autograd/ops.h), named here once more.
//
//   namespace F = strata::nn::functional;
//   Tensor logits = randn({64, 10}), labels = randint(0, 10, {64});
//   Tensor loss = F::cross_entropy(F::gelu(logits), labels, {.ignore_index = 0});

#include "strata/autograd/ops.h"
#include "strata/nn/conv.h"
#include "strata/nn/dropout.h"
#include "strata/nn/embedding.h"
#include "strata/nn/normalization.h"
#include "strata/nn/pooling.h"

/// The layers as functions with options, as libtorch's torch::nn::functional (F::).
namespace strata::nn::functional {

using strata::LossOptions;  ///< options of cross_entropy and nll_loss
using strata::Reduction;    ///< None, Mean or Sum

using strata::adaptive_avg_pool2d;               ///< mean over windows tiling [H, W] into an output size
using strata::avg_pool2d;                        ///< mean over sliding windows
using strata::batch_norm;                        ///< normalisation of each channel over a batch
using strata::binary_cross_entropy;              ///< cross entropy of probabilities in [0, 1]
using strata::binary_cross_entropy_with_logits;  ///< cross entropy of sigmoid(logits), stably
using strata::conv1d;                            ///< 1-D convolution
using strata::conv2d;                            ///< 2-D convolution
using strata::conv_transpose2d;                  ///< transposed 2-D convolution
using strata::cross_entropy;                     ///< log_softmax over dim 1, then nll_loss
using strata::dropout;                           ///< random zeroing while training
using strata::gelu;                              ///< x * Phi(x), exact or tanh
using strata::group_norm;                        ///< normalisation over groups of channels
using strata::huber_loss;                        ///< quadratic up to delta, then linear
using strata::l1_loss;                           ///< absolute error
using strata::layer_norm;                        ///< normalisation over trailing dims
using strata::leaky_relu;                        ///< x, or negative_slope * x below 0
using strata::linear;                            ///< input @ weight^T + bias
using strata::log_softmax;                       ///< log of softmax
using strata::max_pool1d;                        ///< max over sliding windows of [N, C, L]
using strata::max_pool2d;                        ///< max over sliding windows of [N, C, H, W]
using strata::mse_loss;                          ///< squared error
using strata::nll_loss;                          ///< negative log likelihood
using strata::one_hot;                           ///< class indices to one-hot
using strata::relu;                              ///< max(x, 0)
using strata::rms_norm;                          ///< x / sqrt(mean(x^2) + eps) over trailing dims
using strata::scaled_dot_product_attention;      ///< softmax(q k^T scale + mask) v, fused
using strata::sigmoid;                           ///< 1 / (1 + exp(-x))
using strata::silu;                              ///< x * sigmoid(x)
using strata::smooth_l1_loss;                    ///< quadratic below beta, then linear
using strata::softmax;                           ///< exp normalised along a dim
using strata::tanh;                              ///< hyperbolic tangent

}  // namespace strata::nn::functional
