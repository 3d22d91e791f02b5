// Recurrent layers on CUDA against the same code on the CPU: the fused LSTM and GRU cells (tensor/cuda/rnn.cu)
// forward and backward in float64, float32 and the 16-bit floats; RNN, LSTM (with projections) and GRU
// stacks, their outputs, states and every gradient; gradcheck in float64 on the GPU. Every test skips
// without a GPU.

#include <functional>
#include <memory>

#include <strata/autograd/gradcheck.h>
#include <strata/nn/rnn.h>
#include <strata/tensor/cuda.h>

#include "parity.h"

namespace strata {
namespace {

using testing::cuda_matches_cpu;
using testing::matches;
using testing::normal;

/// The cells' outputs, then the gradients of a weighted sum of them for every input (the kernels' backward).
tensor_list cell_values_and_grads(const tensor_list& in, bool lstm) {
  tensor_list inputs;
  for (const Tensor& t : in) inputs.push_back(t.detach().requires_grad_(true));
  tensor_list out;
  if (lstm) {
    auto [h, c] = fused_lstm_cell(inputs[0], inputs[1], inputs[2]);
    out = {h, c};
  } else {
    out = {fused_gru_cell(inputs[0], inputs[1], inputs[2])};
  }
  Tensor loss = (out[0] * out[0]).sum();
  if (lstm) loss = loss + (out[1] * 0.5).sum();
  for (const Tensor& g : autograd::grad({loss}, inputs)) out.push_back(g);
  return out;
}

TEST(CudaRnn, FusedCellsMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kDouble, kFloat}) {
    SCOPED_TRACE(dt);
    const tensor_list lstm_in{normal({5, 28}, dt, 1), normal({5, 28}, dt, 2), normal({5, 7}, dt, 3)};
    EXPECT_TRUE(cuda_matches_cpu([](const tensor_list& in) { return cell_values_and_grads(in, true); }, lstm_in));
    const tensor_list gru_in{normal({5, 21}, dt, 4), normal({5, 21}, dt, 5), normal({5, 7}, dt, 6)};
    EXPECT_TRUE(cuda_matches_cpu([](const tensor_list& in) { return cell_values_and_grads(in, false); }, gru_in));
  }
  // The 16-bit floats compute in float32 on the GPU; the CPU's float32 result, rounded, is the reference.
  for (ScalarType dt : {kHalf, kBFloat16}) {
    SCOPED_TRACE(dt);
    const Tensor ig = normal({4, 12}, kFloat, 7), hg = normal({4, 12}, kFloat, 8), cx = normal({4, 3}, kFloat, 9);
    auto [h, c] = fused_lstm_cell(ig.to(testing::gpu(), dt), hg.to(testing::gpu(), dt), cx.to(testing::gpu(), dt));
    auto [h_ref, c_ref] = fused_lstm_cell(ig.to(dt).to(kFloat), hg.to(dt).to(kFloat), cx.to(dt).to(kFloat));
    EXPECT_TRUE(matches(h, h_ref.to(dt), 1e-2));
    EXPECT_TRUE(matches(c, c_ref.to(dt), 1e-2));
    const Tensor gi = ig.narrow(1, 0, 9).contiguous(), gh = hg.narrow(1, 0, 9).contiguous();
    EXPECT_TRUE(matches(fused_gru_cell(gi.to(testing::gpu(), dt), gh.to(testing::gpu(), dt), cx.to(testing::gpu(), dt)),
                        fused_gru_cell(gi.to(dt).to(kFloat), gh.to(dt).to(kFloat), cx.to(dt).to(kFloat)).to(dt), 1e-2));
  }
}

using Forward = std::function<tensor_list(nn::Module&, const Tensor&)>;

/// forward's outputs on x, then the gradients of their summed squares for x and every parameter of m.
tensor_list outputs_and_grads(nn::Module& m, const Tensor& x, const Forward& forward) {
  const Tensor input = x.detach().requires_grad_(true);
  tensor_list out = forward(m, input);
  Tensor loss = (out[0] * out[0]).sum();
  for (size_t i = 1; i < out.size(); ++i) loss = loss + (out[i] * out[i]).sum();
  tensor_list wrt{input};
  for (const Tensor& p : m.parameters()) wrt.push_back(p);
  for (const Tensor& g : autograd::grad({loss}, wrt)) out.push_back(g);
  return out;
}

/// The module made twice from one seed, run on the CPU and on the GPU in dtype: every output and gradient agrees.
void expect_module_matches_cpu(const std::function<std::shared_ptr<nn::Module>()>& make, const Forward& forward,
                               const Tensor& x, ScalarType dtype) {
  manual_seed(0);
  std::shared_ptr<nn::Module> cpu = make();
  manual_seed(0);
  std::shared_ptr<nn::Module> gpu = make();
  cpu->to(dtype);
  gpu->to(testing::gpu(), dtype);
  const tensor_list ref = outputs_and_grads(*cpu, x.to(dtype), forward);
  testing::poison_gpu_pool();
  const tensor_list out = outputs_and_grads(*gpu, x.to(testing::gpu(), dtype), forward);
  ASSERT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(matches(out[i], ref[i])) << "result " << i;
}

TEST(CudaRnn, StacksMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = testing::normal({6, 3, 5}, kDouble, 10);
  for (ScalarType dt : {kDouble, kFloat}) {
    SCOPED_TRACE(dt);
    expect_module_matches_cpu(
        [] { return nn::LSTM(nn::LSTMOptions(5, 8).num_layers(2).bidirectional(true).proj_size(3)).ptr(); },
        [](nn::Module& m, const Tensor& in) {
          auto [y, state] = static_cast<nn::LSTMImpl&>(m).forward(in);
          return tensor_list{y, std::get<0>(state), std::get<1>(state)};
        },
        x, dt);
    expect_module_matches_cpu([] { return nn::GRU(nn::GRUOptions(5, 8).num_layers(2).batch_first(true)).ptr(); },
                              [](nn::Module& m, const Tensor& in) {
                                auto [y, h] = static_cast<nn::GRUImpl&>(m).forward(in);
                                return tensor_list{y, h};
                              },
                              x, dt);
    expect_module_matches_cpu(
        [] { return nn::RNN(nn::RNNOptions(5, 8).nonlinearity(kReLU).bidirectional(true)).ptr(); },
        [](nn::Module& m, const Tensor& in) {
          auto [y, h] = static_cast<nn::RNNImpl&>(m).forward(in);
          return tensor_list{y, h};
        },
        x, dt);
  }
}

TEST(CudaRnn, Gradcheck) {
  STRATA_REQUIRE_CUDA();
  manual_seed(11);
  const TensorOptions gpu64 = TensorOptions(kDouble).device(testing::gpu()).requires_grad(true);
  nn::LSTM lstm(nn::LSTMOptions(3, 2).bidirectional(true));
  lstm->to(testing::gpu(), kDouble);
  tensor_list inputs{randn({3, 2, 3}, gpu64)};
  for (const Tensor& p : lstm->parameters()) inputs.push_back(p);
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        auto [y, state] = lstm(in[0]);
        return tensor_list{y, std::get<1>(state)};
      },
      inputs);
  nn::GRUCell cell(3, 2);
  cell->to(testing::gpu(), kDouble);
  tensor_list cell_inputs{randn({2, 3}, gpu64), randn({2, 2}, gpu64)};
  for (const Tensor& p : cell->parameters()) cell_inputs.push_back(p);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return cell(in[0], in[1]); }, cell_inputs);
  const tensor_list cell_in{randn({2, 8}, gpu64), randn({2, 8}, gpu64), randn({2, 2}, gpu64)};
  EXPECT_GRADGRADCHECK(
      [](const tensor_list& in) {
        auto [h, c] = fused_lstm_cell(in[0], in[1], in[2]);
        return tensor_list{h, c};
      },
      cell_in);
}

}  // namespace
}  // namespace strata
