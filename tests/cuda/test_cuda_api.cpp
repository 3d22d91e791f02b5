// The losses, leaky_relu and tensor conveniences that pytorch/examples' programs use, on CUDA tensors
// against the CPU: values and gradients in float64 and float32, nested tensor() lists made on the GPU,
// item() as a Scalar, all/any, and uniform_/normal_ filling GPU memory. Every test skips without a GPU.

#include <strata/autograd/gradcheck.h>
#include <strata/tensor/cuda.h>

#include "parity.h"

namespace strata {
namespace {

using testing::cuda_matches_cpu;
using testing::gpu;
using testing::normal;
using testing::uniform;

// The losses and their gradients with respect to the input (and the weights where they have one).
tensor_list losses(const tensor_list& in) {
  const Tensor &x = in[0], &target = in[1], &probs = in[2], &pos = in[3];
  Tensor total = l1_loss(x, target) + smooth_l1_loss(x, target, kSum, 0.5) + huber_loss(x, target, kMean, 0.7) +
                 binary_cross_entropy(x.sigmoid(), probs) + binary_cross_entropy_with_logits(x, probs, {}, pos) +
                 leaky_relu(x, 0.2).sum();
  tensor_list grads = autograd::grad({total}, {x, pos});
  return {total, grads[0], grads[1]};
}

TEST(CudaApi, LossesMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kDouble, kFloat}) {
    Tensor x = normal({4, 5}, dt, 1).requires_grad_(true), pos = uniform({5}, 0.5, 2, dt, 4).requires_grad_(true);
    EXPECT_TRUE(cuda_matches_cpu(losses, {x, normal({4, 5}, dt, 2), uniform({4, 5}, 0, 1, dt, 3), pos})) << dt;
  }
  const TensorOptions gpu64 = TensorOptions(kDouble).device(gpu()).requires_grad(true);
  Tensor probs = rand({3, 4}, TensorOptions(kDouble).device(gpu()));
  EXPECT_GRADCHECK([&](const tensor_list& in) { return binary_cross_entropy_with_logits(in[0], probs); },
                   {randn({3, 4}, gpu64)});
  EXPECT_THROW_MSG(binary_cross_entropy(full({2}, 1.5, TensorOptions().device(gpu())), zeros({2}).to(gpu())),
                   "binary_cross_entropy: all elements of input should be between 0 and 1");
}

TEST(CudaApi, TensorConveniences) {
  STRATA_REQUIRE_CUDA();
  Tensor m = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions(kDouble).device(gpu()));
  EXPECT_TRUE(m.is_cuda());
  EXPECT_EQ(m.sizes(), IntArrayRef({2, 2}));
  EXPECT_EQ(m[1][0].item().toDouble(), 3.0);
  EXPECT_TRUE(m.gt(0.0).all().item<bool>());
  EXPECT_EQ(testing::values(m.gt(2.5).any(1)), (std::vector<double>{0, 1}));
  Tensor u = empty({4096}, TensorOptions(kFloat).device(gpu()));
  u.uniform_(0.8, 1.0);
  EXPECT_GE(u.min().item<double>(), 0.8);
  EXPECT_LT(u.max().item<double>(), 1.0);
  u.normal_(2.0, 0.5);
  EXPECT_NEAR(u.mean().item<double>(), 2.0, 0.05);
}

}  // namespace
}  // namespace strata
