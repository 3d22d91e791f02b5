// Autocast on CUDA (autograd/autocast.h): under AutocastGuard(kCUDA) a linear layer in float16 and in bfloat16
// equals the explicit casts bit for bit and its float32 weight gets a float32 gradient, the float32 ops come back
// in float32, and a CUDA guard leaves CPU tensors alone; a small model trains in float16 with a GradScaler to the
// loss float32 reaches. Every test skips without a GPU.

#include <vector>

#include "parity.h"

namespace strata {
namespace {

using testing::gpu;
using testing::same_tensor;

TEST(CudaAutocast, LinearEqualsTheExplicitCastsBitForBit) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType low : {kHalf, kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << low);
    manual_seed(1);
    nn::Linear fc(64, 32);
    fc->to(gpu());
    const Tensor x = randn({8, 64}).to(gpu());
    Tensor y;
    {
      AutocastGuard autocast(kCUDA, low);
      y = fc(x);
      EXPECT_EQ(softmax(y, 1).dtype(), kFloat);
      EXPECT_EQ(matmul(randn({2, 3}), randn({3, 2})).dtype(), kFloat);  // CPU tensors: not this guard's device
    }
    ASSERT_EQ(y.dtype(), low);
    y.to(kFloat).pow(2).sum().backward();
    const Tensor w_grad = fc->weight.grad().clone();
    EXPECT_EQ(w_grad.dtype(), kFloat);
    fc->zero_grad();
    const Tensor expected = linear(x.to(low), fc->weight.to(low), fc->bias.to(low));
    expected.to(kFloat).pow(2).sum().backward();
    EXPECT_TRUE(same_tensor(y.detach().cpu(), expected.detach().cpu()));
    EXPECT_TRUE(same_tensor(w_grad.cpu(), fc->weight.grad().cpu()));
  }
}

// 200 steps of a small regression from one start in float32 and under float16 autocast with a GradScaler.
TEST(CudaAutocast, TrainsInFloat16WithAGradScalerAsInFloat32) {
  STRATA_REQUIRE_CUDA();
  std::vector<double> final_losses;
  for (bool mixed : {false, true}) {
    manual_seed(5);
    nn::Sequential model(nn::Linear(16, 64), nn::GELU(), nn::LayerNorm(nn::LayerNormOptions({64})), nn::Linear(64, 1));
    model->to(gpu());
    optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2));
    optim::GradScaler scaler(optim::GradScalerOptions().enabled(mixed));
    Generator data(7);
    const Tensor x = randn({256, 16}, {}, &data).to(gpu());
    const Tensor y = (x.narrow(1, 0, 4).sum(1, true) - x.narrow(1, 4, 4).pow(2).mean(1, true)).tanh();
    double loss_value = 0;
    for (int step = 0; step < 200; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(kCUDA, kHalf, mixed);
        loss = mse_loss(model->forward(x), y);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      loss_value = loss.item<double>();
    }
    for (const Tensor& p : model->parameters()) EXPECT_EQ(p.dtype(), kFloat);
    final_losses.push_back(loss_value);
  }
  EXPECT_LT(final_losses[0], 0.02);
  EXPECT_NEAR(final_losses[1], final_losses[0], 0.01);
}

}  // namespace
}  // namespace strata
