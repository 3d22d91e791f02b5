// strata's convolution, pooling, normalisation, embedding, loss and recurrent ops next to libtorch's (Debian's
// libtorch-dev) on the same float64 inputs: outputs, and the gradients of every input for one random upstream
// gradient, agree to 1e-10 relative; float32 convolutions, oneDNN's on both sides, to 1e-5. Built only when CMake
// finds libtorch.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "strata/strata.h"

namespace {

using StrataFn = std::function<strata::Tensor(const strata::tensor_list&)>;
using TorchFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// A float64 or float32 tensor with the same values and dtype.
torch::Tensor to_torch(const strata::Tensor& t) {
  strata::Tensor c = t.detach().to(strata::kDouble).contiguous();
  const std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(c.data_ptr<double>(), sizes, torch::kDouble)
      .to(t.dtype() == strata::kFloat ? torch::kFloat : torch::kDouble);
}

// The largest |a - b| over the largest |b| (at least 1), so values near zero compare absolutely.
double relative_difference(const strata::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(std::vector<int64_t>(a.sizes().begin(), a.sizes().end()), b.sizes().vec());
  torch::Tensor diff = (to_torch(a) - b).abs().max();
  return diff.item<double>() / std::max(1.0, b.abs().max().item<double>());
}

// Runs both functions on copies of the same inputs, compares the outputs, backpropagates one random
// upstream gradient through both and compares the gradient of every input.
void expect_twins(const StrataFn& mine, const TorchFn& theirs, const std::vector<strata::Tensor>& inputs,
                  double tolerance = 1e-10) {
  strata::tensor_list s_in;
  std::vector<torch::Tensor> t_in;
  for (const strata::Tensor& x : inputs) {
    s_in.push_back(x.detach().clone().requires_grad_(true));
    t_in.push_back(to_torch(x).requires_grad_(true));
  }
  strata::Tensor s_out = mine(s_in);
  torch::Tensor t_out = theirs(t_in);
  EXPECT_LT(relative_difference(s_out, t_out), tolerance) << "output";
  strata::Tensor upstream = strata::randn(s_out.sizes(), s_out.dtype());
  s_out.backward(upstream);
  t_out.backward(to_torch(upstream));
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_LT(relative_difference(s_in[i].grad(), t_in[i].grad()), tolerance) << "gradient of input " << i;
}

strata::Tensor randn(std::vector<int64_t> sizes) { return strata::randn(sizes, strata::kDouble); }

TEST(TorchTwin, Conv2dStridedPaddedDilatedGrouped) {
  strata::manual_seed(1);
  expect_twins(
      [](const strata::tensor_list& x) {
        return strata::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2);
      },
      [](const std::vector<torch::Tensor>& x) {
        return torch::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2);
      },
      {randn({2, 4, 9, 8}), randn({6, 2, 3, 3}), randn({6})});
  expect_twins([](const strata::tensor_list& x) { return strata::conv2d(x[0].transpose(2, 3), x[1]); },
               [](const std::vector<torch::Tensor>& x) { return torch::conv2d(x[0].transpose(2, 3), x[1]); },
               {randn({1, 3, 5, 7}), randn({2, 3, 2, 4})});  // non-contiguous input, no bias
}

// Float32 convolutions run on oneDNN in both libraries, each with its own reorders and plan.
TEST(TorchTwin, Float32ConvolutionsOnOneDnn) {
  strata::manual_seed(11);
  auto f32 = [](std::vector<int64_t> sizes) { return strata::randn(sizes, strata::kFloat); };
  expect_twins(
      [](const strata::tensor_list& x) {
        return strata::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2);
      },
      [](const std::vector<torch::Tensor>& x) {
        return torch::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2);
      },
      {f32({2, 4, 9, 8}), f32({6, 2, 3, 3}), f32({6})}, 1e-5);
  expect_twins([](const strata::tensor_list& x) { return strata::conv2d(x[0], x[1], {}, 1, 1); },
               [](const std::vector<torch::Tensor>& x) { return torch::conv2d(x[0], x[1], {}, 1, 1); },
               {f32({4, 16, 12, 12}), f32({16, 16, 3, 3})}, 1e-5);
  expect_twins([](const strata::tensor_list& x) { return strata::conv_transpose2d(x[0], x[1], x[2], 2, 1, 1); },
               [](const std::vector<torch::Tensor>& x) { return torch::conv_transpose2d(x[0], x[1], x[2], 2, 1, 1); },
               {f32({2, 4, 5, 5}), f32({4, 3, 3, 3}), f32({3})}, 1e-5);
}

// Embedding's libtorch options: max_norm renorms the table in place first (norm_type 3 here), scale_grad_by_freq
// divides by the counts, the padding row gets no gradient.
TEST(TorchTwin, EmbeddingOptions) {
  strata::manual_seed(12);
  const strata::Tensor s_idx = strata::tensor({1, 4, 1, 2, 0, 1});
  const torch::Tensor t_idx = torch::tensor({1, 4, 1, 2, 0, 1});
  expect_twins(
      [&](const strata::tensor_list& x) {
        return strata::nn::functional::embedding(s_idx, x[0],
                                                 strata::nn::functional::EmbeddingFuncOptions()
                                                     .max_norm(1.5)
                                                     .norm_type(3)
                                                     .scale_grad_by_freq(true)
                                                     .padding_idx(2));
      },
      [&](const std::vector<torch::Tensor>& x) {
        return torch::nn::functional::embedding(t_idx, x[0],
                                                torch::nn::functional::EmbeddingFuncOptions()
                                                    .max_norm(1.5)
                                                    .norm_type(3)
                                                    .scale_grad_by_freq(true)
                                                    .padding_idx(2));
      },
      {randn({6, 4})});
}

TEST(TorchTwin, Conv1dAndSamePadding) {
  strata::manual_seed(2);
  expect_twins([](const strata::tensor_list& x) { return strata::conv1d(x[0], x[1], x[2], 1, strata::kSame, 2); },
               [](const std::vector<torch::Tensor>& x) { return torch::conv1d(x[0], x[1], x[2], 1, "same", 2); },
               {randn({2, 3, 11}), randn({4, 3, 4}), randn({4})});
}

TEST(TorchTwin, ConvTranspose2d) {
  strata::manual_seed(3);
  expect_twins(
      [](const strata::tensor_list& x) {
        return strata::conv_transpose2d(x[0], x[1], x[2], 2, 1, 1, 2, {1, 2});
      },
      [](const std::vector<torch::Tensor>& x) {
        return torch::conv_transpose2d(x[0], x[1], x[2], 2, 1, 1, 2, {1, 2});
      },
      {randn({2, 4, 5, 4}), randn({4, 3, 3, 2}), randn({6})});
}

TEST(TorchTwin, Pooling) {
  strata::manual_seed(4);
  expect_twins(
      [](const strata::tensor_list& x) {
        return strata::max_pool2d(x[0], {3, 2}, {2, 2}, {1, 0}, {1, 2}, true);
      },
      [](const std::vector<torch::Tensor>& x) {
        return torch::max_pool2d(x[0], {3, 2}, {2, 2}, {1, 0}, {1, 2}, true);
      },
      {randn({2, 3, 9, 10})});
  expect_twins([](const strata::tensor_list& x) { return strata::max_pool1d(x[0], 3, 2, 1); },
               [](const std::vector<torch::Tensor>& x) { return torch::max_pool1d(x[0], 3, 2, 1); },
               {randn({2, 3, 10})});
  expect_twins([](const strata::tensor_list& x) { return strata::avg_pool2d(x[0], 3, 2, 1, true, false); },
               [](const std::vector<torch::Tensor>& x) { return torch::avg_pool2d(x[0], 3, 2, 1, true, false); },
               {randn({2, 3, 8, 9})});
  expect_twins([](const strata::tensor_list& x) { return strata::avg_pool2d(x[0], 2, 2, 0, false, true, 3); },
               [](const std::vector<torch::Tensor>& x) { return torch::avg_pool2d(x[0], 2, 2, 0, false, true, 3); },
               {randn({1, 2, 6, 6})});
  expect_twins(
      [](const strata::tensor_list& x) {
        return strata::adaptive_avg_pool2d(x[0], {3, 4});
      },
      [](const std::vector<torch::Tensor>& x) {
        return torch::adaptive_avg_pool2d(x[0], {3, 4});
      },
      {randn({2, 3, 7, 10})});
}

TEST(TorchTwin, BatchNormTrainingUpdatesTheSameRunningStatistics) {
  strata::manual_seed(5);
  strata::Tensor mean0 = randn({3}), var0 = strata::rand({3}, strata::kDouble) + 0.5;
  strata::Tensor s_mean = mean0.clone(), s_var = var0.clone();
  torch::Tensor t_mean = to_torch(mean0), t_var = to_torch(var0);
  expect_twins(
      [&](const strata::tensor_list& x) {
        return strata::batch_norm(x[0], x[1], x[2], s_mean, s_var, true, 0.3, 1e-4);
      },
      [&](const std::vector<torch::Tensor>& x) {
        return torch::batch_norm(x[0], x[1], x[2], t_mean, t_var, true, 0.3, 1e-4, false);
      },
      {randn({4, 3, 5, 2}), randn({3}), randn({3})});
  EXPECT_LT(relative_difference(s_mean, t_mean), 1e-12);
  EXPECT_LT(relative_difference(s_var, t_var), 1e-12);  // the unbiased variance, as torch
  expect_twins([&](const strata::tensor_list& x) { return strata::batch_norm(x[0], x[1], {}, s_mean, s_var, false); },
               [&](const std::vector<torch::Tensor>& x) {
                 return torch::batch_norm(x[0], x[1], {}, t_mean, t_var, false, 0.1, 1e-5, false);
               },
               {randn({4, 3}), randn({3})});
}

TEST(TorchTwin, GroupNorm) {
  strata::manual_seed(6);
  expect_twins([](const strata::tensor_list& x) { return strata::group_norm(x[0], 2, x[1], x[2], 1e-3); },
               [](const std::vector<torch::Tensor>& x) { return torch::group_norm(x[0], 2, x[1], x[2], 1e-3); },
               {randn({3, 4, 5}), randn({4}), randn({4})});
}

TEST(TorchTwin, Losses) {
  strata::manual_seed(7);
  strata::Tensor target = randn({4, 5}), probs = strata::rand({4, 5}, strata::kDouble);
  torch::Tensor t_target = to_torch(target), t_probs = to_torch(probs);
  expect_twins([&](const strata::tensor_list& x) { return strata::smooth_l1_loss(x[0], target, strata::kSum, 0.5); },
               [&](const std::vector<torch::Tensor>& x) {
                 return torch::smooth_l1_loss(x[0], t_target, at::Reduction::Sum, 0.5);
               },
               {randn({4, 5})});
  expect_twins(
      [&](const strata::tensor_list& x) { return strata::huber_loss(x[0], target, strata::kNone, 0.7); },
      [&](const std::vector<torch::Tensor>& x) { return torch::huber_loss(x[0], t_target, at::Reduction::None, 0.7); },
      {randn({4, 5})});
  expect_twins([&](const strata::tensor_list& x) { return strata::l1_loss(x[0], target); },
               [&](const std::vector<torch::Tensor>& x) { return torch::l1_loss(x[0], t_target); }, {randn({4, 5})});
  // libtorch does not differentiate the binary cross entropies with respect to their weights (strata does), so
  // the weights are constants here.
  strata::Tensor weight = randn({5}), pos_weight = strata::rand({5}, strata::kDouble) + 0.5;
  torch::Tensor t_weight = to_torch(weight), t_pos_weight = to_torch(pos_weight);
  expect_twins(
      [&](const strata::tensor_list& x) { return strata::binary_cross_entropy(x[0].sigmoid(), probs, weight); },
      [&](const std::vector<torch::Tensor>& x) {
        return torch::binary_cross_entropy(x[0].sigmoid(), t_probs, t_weight);
      },
      {randn({4, 5})});
  expect_twins(
      [&](const strata::tensor_list& x) {
        return strata::binary_cross_entropy_with_logits(x[0] * 10, probs, weight, pos_weight, strata::kSum);
      },
      [&](const std::vector<torch::Tensor>& x) {
        return torch::binary_cross_entropy_with_logits(x[0] * 10, t_probs, t_weight, t_pos_weight, at::Reduction::Sum);
      },
      {randn({4, 5})});
  expect_twins([](const strata::tensor_list& x) { return strata::leaky_relu(x[0], 0.3); },
               [](const std::vector<torch::Tensor>& x) { return torch::leaky_relu(x[0], 0.3); }, {randn({3, 4})});
}

// The recurrent stacks as ATen's functions, the ones nn::LSTM, nn::GRU and nn::RNN run, with every state and
// parameter an input; outputs and final states compared as one flat tensor.
TEST(TorchTwin, RecurrentStacks) {
  strata::manual_seed(8);
  // Parameters of `layers` layers and `directions` directions: w_ih [rows, in], w_hh [rows, h], then the biases
  // [rows] and LSTM's w_hr [h, hidden] where given, as torch's _flat_weights.
  auto params = [](int64_t layers, int64_t directions, int64_t rows, int64_t input, int64_t h, bool biases,
                   int64_t hidden_for_proj) {
    std::vector<strata::Tensor> p;
    for (int64_t layer = 0; layer < layers; ++layer)
      for (int64_t d = 0; d < directions; ++d) {
        p.push_back(randn({rows, layer == 0 ? input : h * directions}));
        p.push_back(randn({rows, h}));
        if (biases) {
          p.push_back(randn({rows}));
          p.push_back(randn({rows}));
        }
        if (hidden_for_proj > 0) p.push_back(randn({h, hidden_for_proj}));
      }
    return p;
  };
  auto with = [](std::vector<strata::Tensor> head, const std::vector<strata::Tensor>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  // LSTM: 2 layers, both directions, batch_first, hidden 5 projected to 3.
  expect_twins(
      [](const strata::tensor_list& x) {
        auto [y, h, c] = strata::lstm(x[0], {x[1], x[2]}, strata::tensor_list(x.begin() + 3, x.end()), true, 2, 0.0,
                                      true, true, true);
        return strata::cat({y.flatten(), h.flatten(), c.flatten()});
      },
      [](const std::vector<torch::Tensor>& x) {
        const std::vector<torch::Tensor> p(x.begin() + 3, x.end());
        auto [y, h, c] = torch::lstm(x[0], {x[1], x[2]}, p, true, 2, 0.0, true, true, true);
        return torch::cat({y.flatten(), h.flatten(), c.flatten()});
      },
      with({randn({2, 4, 3}), randn({4, 2, 3}), randn({4, 2, 5})}, params(2, 2, 20, 3, 3, true, 5)));
  // GRU: 2 layers, one direction, seq-first.
  expect_twins(
      [](const strata::tensor_list& x) {
        auto [y, h] =
            strata::gru(x[0], x[1], strata::tensor_list(x.begin() + 2, x.end()), true, 2, 0.0, true, false, false);
        return strata::cat({y.flatten(), h.flatten()});
      },
      [](const std::vector<torch::Tensor>& x) {
        const std::vector<torch::Tensor> p(x.begin() + 2, x.end());
        auto [y, h] = torch::gru(x[0], x[1], p, true, 2, 0.0, true, false, false);
        return torch::cat({y.flatten(), h.flatten()});
      },
      with({randn({4, 2, 3}), randn({2, 2, 4})}, params(2, 1, 12, 3, 4, true, 0)));
  // Elman RNNs: relu in both directions; tanh without biases.
  expect_twins(
      [](const strata::tensor_list& x) {
        auto [y, h] =
            strata::rnn_relu(x[0], x[1], strata::tensor_list(x.begin() + 2, x.end()), true, 1, 0.0, true, true, false);
        return strata::cat({y.flatten(), h.flatten()});
      },
      [](const std::vector<torch::Tensor>& x) {
        const std::vector<torch::Tensor> p(x.begin() + 2, x.end());
        auto [y, h] = torch::rnn_relu(x[0], x[1], p, true, 1, 0.0, true, true, false);
        return torch::cat({y.flatten(), h.flatten()});
      },
      with({randn({4, 2, 3}), randn({2, 2, 4})}, params(1, 2, 4, 3, 4, true, 0)));
  expect_twins(
      [](const strata::tensor_list& x) {
        auto [y, h] =
            strata::rnn_tanh(x[0], x[1], strata::tensor_list(x.begin() + 2, x.end()), false, 2, 0.0, true, false, true);
        return strata::cat({y.flatten(), h.flatten()});
      },
      [](const std::vector<torch::Tensor>& x) {
        const std::vector<torch::Tensor> p(x.begin() + 2, x.end());
        auto [y, h] = torch::rnn_tanh(x[0], x[1], p, false, 2, 0.0, true, false, true);
        return torch::cat({y.flatten(), h.flatten()});
      },
      with({randn({2, 4, 3}), randn({2, 2, 4})}, params(2, 1, 4, 3, 4, false, 0)));
}

TEST(TorchTwin, RecurrentCells) {
  strata::manual_seed(9);
  expect_twins(
      [](const strata::tensor_list& x) {
        auto [h, c] = strata::lstm_cell(x[0], {x[1], x[2]}, x[3], x[4], x[5], x[6]);
        return strata::cat({h.flatten(), c.flatten()});
      },
      [](const std::vector<torch::Tensor>& x) {
        auto [h, c] = torch::lstm_cell(x[0], {x[1], x[2]}, x[3], x[4], x[5], x[6]);
        return torch::cat({h.flatten(), c.flatten()});
      },
      {randn({3, 4}), randn({3, 5}), randn({3, 5}), randn({20, 4}), randn({20, 5}), randn({20}), randn({20})});
  expect_twins([](const strata::tensor_list& x) { return strata::gru_cell(x[0], x[1], x[2], x[3], x[4], x[5]); },
               [](const std::vector<torch::Tensor>& x) { return torch::gru_cell(x[0], x[1], x[2], x[3], x[4], x[5]); },
               {randn({3, 4}), randn({3, 5}), randn({15, 4}), randn({15, 5}), randn({15}), randn({15})});
  expect_twins([](const strata::tensor_list& x) { return strata::rnn_tanh_cell(x[0], x[1], x[2], x[3]); },
               [](const std::vector<torch::Tensor>& x) { return torch::rnn_tanh_cell(x[0], x[1], x[2], x[3]); },
               {randn({3, 4}), randn({3, 5}), randn({5, 4}), randn({5, 5})});
  expect_twins(
      [](const strata::tensor_list& x) { return strata::rnn_relu_cell(x[0], x[1], x[2], x[3], x[4], x[5]); },
      [](const std::vector<torch::Tensor>& x) { return torch::rnn_relu_cell(x[0], x[1], x[2], x[3], x[4], x[5]); },
      {randn({3, 4}), randn({3, 5}), randn({5, 4}), randn({5, 5}), randn({5}), randn({5})});
}

}  // namespace

// scaled_dot_product_attention's fused CPU kernel next to libtorch 1.13's composite (its private
// _scaled_dot_product_attention: the public one came in 2.0 with the same semantics). Causal, a float mask broadcast
// over heads and a bool mask, in float64 and float32. 1.13 gives NaN for a query that sees no key, strata 0 (as
// PyTorch 2.5 and later do), so every mask here leaves each query a key.
TEST(TorchTwin, ScaledDotProductAttention) {
  strata::manual_seed(13);
  const strata::Tensor float_mask = randn({2, 1, 7, 9});
  const strata::Tensor bool_mask =
      strata::rand({7, 9}, strata::kDouble).gt(0.4).logical_or(strata::eye(7, 9, strata::kBool));
  for (bool single : {false, true}) {
    const auto as = [&](std::vector<int64_t> sizes) {
      return single ? strata::randn(sizes, strata::kFloat) : randn(sizes);
    };
    const double tolerance = single ? 1e-5 : 1e-10;
    const strata::tensor_list inputs = {as({2, 3, 7, 5}), as({2, 3, 9, 5}), as({2, 3, 9, 4})};
    const strata::tensor_list square = {as({2, 3, 9, 5}), as({2, 3, 9, 5}), as({2, 3, 9, 4})};
    expect_twins(
        [](const strata::tensor_list& x) {
          return strata::scaled_dot_product_attention(x[0], x[1], x[2], std::nullopt, 0.0, true);
        },
        [](const std::vector<torch::Tensor>& x) {
          return std::get<0>(at::_scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, false, true));
        },
        square, tolerance);
    const strata::Tensor fm = single ? float_mask.to(strata::kFloat) : float_mask;
    const torch::Tensor t_fm = to_torch(fm);
    expect_twins(
        [&](const strata::tensor_list& x) { return strata::scaled_dot_product_attention(x[0], x[1], x[2], fm); },
        [&](const std::vector<torch::Tensor>& x) {
          return std::get<0>(at::_scaled_dot_product_attention(x[0], x[1], x[2], t_fm));
        },
        inputs, tolerance);
    const torch::Tensor t_bm = to_torch(bool_mask.to(strata::kDouble)).to(torch::kBool);
    expect_twins(
        [&](const strata::tensor_list& x) { return strata::scaled_dot_product_attention(x[0], x[1], x[2], bool_mask); },
        [&](const std::vector<torch::Tensor>& x) {
          return std::get<0>(at::_scaled_dot_product_attention(x[0], x[1], x[2], t_bm));
        },
        inputs, tolerance);
  }
}
