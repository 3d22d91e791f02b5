// Autocast (autograd/autocast.h): the policy registry op by op, the guard's settings, the weight-cast cache,
// backward and checkpointing under it, the errors, and training in bfloat16.

#include <functional>
#include <map>
#include <string>

#include "helpers.h"

namespace strata {
namespace {

Tensor f32(IntArrayRef sizes) { return randn(sizes); }
Tensor bf16(IntArrayRef sizes) { return randn(sizes).to(kBFloat16); }
Tensor first(const std::tuple<Tensor, Tensor>& t) { return std::get<0>(t); }
Tensor first(const std::tuple<Tensor, Tensor, Tensor>& t) { return std::get<0>(t); }

// One call per registry row. The lower-precision ops get float32 operands and the float32 ops bfloat16 ones, so
// that each result's dtype shows the cast.
std::map<std::string, std::function<Tensor()>> calls() {
  const Tensor target = randint(0, 5, {4});
  const tensor_list lstm_params{f32({12, 4}), f32({12, 3}), f32({12}), f32({12})};
  const tensor_list gru_params{f32({9, 4}), f32({9, 3}), f32({9}), f32({9})};
  const tensor_list rnn_params{f32({3, 4}), f32({3, 3}), f32({3}), f32({3})};
  return {
      {"matmul",
       [] {
         return matmul(f32({3, 4}), f32({4, 2}));
       }},
      {"mm",
       [] {
         return mm(f32({3, 4}), f32({4, 2}));
       }},
      {"bmm",
       [] {
         return bmm(f32({2, 3, 4}), f32({2, 4, 2}));
       }},
      {"linear",
       [] {
         return linear(f32({3, 4}), f32({2, 4}), f32({2}));
       }},
      {"conv1d",
       [] {
         return conv1d(f32({1, 2, 8}), f32({3, 2, 3}), f32({3}));
       }},
      {"conv2d",
       [] {
         return conv2d(f32({1, 2, 6, 6}), f32({3, 2, 3, 3}), f32({3}));
       }},
      {"conv_transpose2d",
       [] {
         return conv_transpose2d(f32({1, 2, 4, 4}), f32({2, 3, 3, 3}), f32({3}));
       }},
      {"scaled_dot_product_attention",
       [] {
         return scaled_dot_product_attention(f32({1, 2, 4, 8}), f32({1, 2, 4, 8}), f32({1, 2, 4, 8}));
       }},
      {"lstm_cell",
       [] {
         return first(lstm_cell(f32({2, 4}), {f32({2, 3}), f32({2, 3})}, f32({12, 4}), f32({12, 3})));
       }},
      {"gru_cell",
       [] {
         return gru_cell(f32({2, 4}), f32({2, 3}), f32({9, 4}), f32({9, 3}));
       }},
      {"rnn_tanh_cell",
       [] {
         return rnn_tanh_cell(f32({2, 4}), f32({2, 3}), f32({3, 4}), f32({3, 3}));
       }},
      {"rnn_relu_cell",
       [] {
         return rnn_relu_cell(f32({2, 4}), f32({2, 3}), f32({3, 4}), f32({3, 3}));
       }},
      {"lstm",
       [=] {
         return first(
             lstm(f32({5, 2, 4}), {f32({1, 2, 3}), f32({1, 2, 3})}, lstm_params, true, 1, 0, false, false, false));
       }},
      {"gru",
       [=] {
         return first(gru(f32({5, 2, 4}), f32({1, 2, 3}), gru_params, true, 1, 0, false, false, false));
       }},
      {"rnn_tanh",
       [=] {
         return first(rnn_tanh(f32({5, 2, 4}), f32({1, 2, 3}), rnn_params, true, 1, 0, false, false, false));
       }},
      {"rnn_relu",
       [=] {
         return first(rnn_relu(f32({5, 2, 4}), f32({1, 2, 3}), rnn_params, true, 1, 0, false, false, false));
       }},
      {"softmax",
       [] {
         return softmax(bf16({4, 5}), 1);
       }},
      {"log_softmax",
       [] {
         return log_softmax(bf16({4, 5}), 1);
       }},
      {"layer_norm",
       [] {
         return layer_norm(bf16({4, 5}), {5}, bf16({5}), bf16({5}));
       }},
      {"group_norm",
       [] {
         return group_norm(bf16({2, 4, 3}), 2, bf16({4}), bf16({4}));
       }},
      {"rms_norm",
       [] {
         return rms_norm(bf16({4, 5}), {5}, bf16({5}));
       }},
      {"batch_norm",
       [] {
         return batch_norm(bf16({4, 3}), bf16({3}), bf16({3}), zeros({3}), ones({3}), true, 0.1, 1e-5);
       }},
      {"avg_pool2d",
       [] {
         return avg_pool2d(bf16({1, 2, 4, 4}), {2});
       }},
      {"adaptive_avg_pool2d",
       [] {
         return adaptive_avg_pool2d(bf16({1, 2, 4, 4}), {2});
       }},
      {"norm",
       [] {
         return norm(bf16({4, 5}));
       }},
      {"sum",
       [] {
         return sum(bf16({4, 5}));
       }},
      {"mean",
       [] {
         return mean(bf16({4, 5}));
       }},
      {"prod",
       [] {
         return prod(bf16({4, 5}));
       }},
      {"var",
       [] {
         return var(bf16({4, 5}));
       }},
      {"std",
       [] {
         return strata::std(bf16({4, 5}));
       }},
      {"logsumexp",
       [] {
         return logsumexp(bf16({4, 5}), {1});
       }},
      {"nll_loss",
       [=] {
         return nll_loss(bf16({4, 5}), target);
       }},
      {"cross_entropy",
       [=] {
         return cross_entropy(bf16({4, 5}), target);
       }},
      {"mse_loss",
       [] {
         return mse_loss(bf16({4, 5}), bf16({4, 5}));
       }},
      {"l1_loss",
       [] {
         return l1_loss(bf16({4, 5}), bf16({4, 5}));
       }},
      {"smooth_l1_loss",
       [] {
         return smooth_l1_loss(bf16({4, 5}), bf16({4, 5}));
       }},
      {"huber_loss",
       [] {
         return huber_loss(bf16({4, 5}), bf16({4, 5}));
       }},
      {"binary_cross_entropy_with_logits",
       [] {
         return binary_cross_entropy_with_logits(bf16({4, 5}), rand({4, 5}).to(kBFloat16));
       }},
      {"binary_cross_entropy",
       [] {
         return binary_cross_entropy(rand({4, 5}).to(kBFloat16), rand({4, 5}).to(kBFloat16));
       }},
  };
}

TEST(Autocast, EveryRegistryRowCastsItsOp) {
  auto ops = calls();
  ASSERT_EQ(ops.size(), autocast::policies().size()) << "a registry row without a call here, or a call without one";
  AutocastGuard autocast(kCPU);
  for (const auto& [name, policy] : autocast::policies()) {
    SCOPED_TRACE(std::string(name));
    ASSERT_TRUE(ops.count(std::string(name)));
    const auto& call = ops.at(std::string(name));
    switch (policy) {
      case CastPolicy::kLowerPrecision:
        EXPECT_EQ(call().dtype(), kBFloat16);
        break;
      case CastPolicy::kFloat32:
        EXPECT_EQ(call().dtype(), kFloat);
        break;
      case CastPolicy::kBanned:
        EXPECT_THROW(call(), Error);
        break;
      case CastPolicy::kNone:
        ADD_FAILURE() << "the registry lists an op it does not cast";
        break;
    }
  }
  EXPECT_EQ(autocast::policy("relu"), CastPolicy::kNone);
  std::ostringstream os;
  os << autocast::policy("linear") << " " << autocast::policy("softmax") << " " << autocast::policy("relu");
  EXPECT_EQ(os.str(), "lower_precision float32 none");
}

TEST(Autocast, LinearEqualsTheExplicitCastsBitForBit) {
  manual_seed(1);
  nn::Linear fc(16, 8);
  const Tensor x = randn({4, 16});
  Tensor y;
  {
    AutocastGuard autocast(kCPU);
    y = fc(x);
  }
  ASSERT_EQ(y.dtype(), kBFloat16);
  y.to(kFloat).pow(2).sum().backward();
  const Tensor w_grad = fc->weight.grad().clone(), b_grad = fc->bias.grad().clone();
  EXPECT_EQ(w_grad.dtype(), kFloat);  // master weights get float32 gradients

  fc->zero_grad();
  const Tensor expected = linear(x.to(kBFloat16), fc->weight.to(kBFloat16), fc->bias.to(kBFloat16));
  expected.to(kFloat).pow(2).sum().backward();
  EXPECT_TRUE(testing::same_tensor(y.detach(), expected.detach()));
  EXPECT_TRUE(testing::same_tensor(w_grad, fc->weight.grad()));
  EXPECT_TRUE(testing::same_tensor(b_grad, fc->bias.grad()));
}

TEST(Autocast, Float64IntegersAndDisabledGuardsAreNotCast) {
  AutocastGuard autocast(kCPU);
  EXPECT_EQ(matmul(randn({3, 4}, kFloat64), randn({4, 2}, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(sum(randint(0, 5, {4})).dtype(), kLong);
  EXPECT_EQ(softmax(randn({3, 4}, kFloat64), 1).dtype(), kFloat64);
  {
    AutocastGuard off(kCPU, std::nullopt, /*enabled=*/false);
    EXPECT_EQ(matmul(f32({3, 4}), f32({4, 2})).dtype(), kFloat);
  }
  EXPECT_EQ(matmul(f32({3, 4}), f32({4, 2})).dtype(), kBFloat16);
  // The op a user called is cast once; the ops it is built from run as it wrote them.
  EXPECT_EQ(cross_entropy(f32({4, 5}), randint(0, 5, {4})).dtype(), kFloat);
  // Mixed dtypes elsewhere promote as usual: a float32 residual plus a bfloat16 branch is float32.
  EXPECT_EQ((f32({3, 2}) + matmul(f32({3, 4}), f32({4, 2}))).dtype(), kFloat);
}

TEST(Autocast, GuardsNestAndRestoreTheSettings) {
  EXPECT_FALSE(autocast::is_autocast_enabled(kCPU));
  EXPECT_EQ(autocast::get_autocast_dtype(kCPU), kBFloat16);
  EXPECT_EQ(autocast::get_autocast_dtype(kCUDA), kHalf);
  {
    AutocastGuard outer(kCPU);
    EXPECT_TRUE(autocast::is_autocast_enabled(kCPU));
    EXPECT_FALSE(autocast::is_autocast_enabled(kCUDA));
    {
      AutocastGuard inner(kCPU, kHalf, true, /*cache_enabled=*/false);
      EXPECT_EQ(autocast::get_autocast_dtype(kCPU), kHalf);
      EXPECT_FALSE(autocast::is_autocast_cache_enabled());
      EXPECT_EQ(matmul(f32({3, 4}), f32({4, 2})).dtype(), kHalf);
    }
    EXPECT_EQ(autocast::get_autocast_dtype(kCPU), kBFloat16);
    EXPECT_TRUE(autocast::is_autocast_cache_enabled());
  }
  EXPECT_FALSE(autocast::is_autocast_enabled(kCPU));
  // libtorch's functions, without a guard.
  autocast::set_autocast_enabled(kCPU, true);
  EXPECT_EQ(matmul(f32({3, 4}), f32({4, 2})).dtype(), kBFloat16);
  autocast::set_autocast_enabled(kCPU, false);
  autocast::clear_cache();
  EXPECT_EQ(autocast::increment_nesting(), 1);
  EXPECT_EQ(autocast::decrement_nesting(), 0);
  EXPECT_THROW_MSG(autocast::decrement_nesting(), "called more often than increment_nesting");
}

// The node a bias-free linear's output reaches its weight's cast through: matmul, then the transpose view.
const autograd::Node* weight_cast_node(const Tensor& y) {
  return y.grad_fn()->next_edges[1].fn->next_edges[0].fn.get();
}

TEST(Autocast, ACachedWeightCastServesEveryMicroBatchAndFollowsInPlaceWrites) {
  manual_seed(2);
  nn::Linear fc(8, 4);
  const Tensor x1 = randn({3, 8}), x2 = randn({3, 8});
  Tensor w = randn({4, 8}).requires_grad_(true);
  {
    AutocastGuard autocast(kCPU);
    const autograd::Node* cast = weight_cast_node(linear(x1, w));
    EXPECT_STREQ(cast->name(), "ToCopyBackward");
    EXPECT_EQ(weight_cast_node(linear(x2, w)), cast);  // cached
    {
      NoGradGuard no_grad;
      w.add_(1.0);
    }
    EXPECT_NE(weight_cast_node(linear(x2, w)), cast);  // cast again after the write
    // Two backward passes, each without retain_graph, through the one cached cast of the weight.
    fc(x1).to(kFloat).sum().backward();
    fc(x2).to(kFloat).sum().backward();
    {
      NoGradGuard no_grad;  // a cast without history is cached apart from the one with it
      EXPECT_FALSE(fc(x1).requires_grad());
    }
    Tensor y = fc(x1);
    EXPECT_TRUE(y.requires_grad());
    // A write in place inside the guard (an optimizer step) makes the next op cast the weight again.
    {
      NoGradGuard no_grad;
      fc->weight.add_(1.0);
    }
    EXPECT_TRUE(testing::same_tensor(
        fc(x1).detach(), linear(x1.to(kBFloat16), fc->weight.detach().to(kBFloat16), fc->bias.detach().to(kBFloat16))));
  }
  NoGradGuard no_grad;
  fc->weight.sub_(1.0);
  // Each pass delivered its gradient: the sum of both batches' (bias gradient 3 + 3 per output).
  EXPECT_VALUES(fc->bias.grad(), {6, 6, 6, 6});
}

// A backward called inside a guard computes what it would outside: each op in the dtypes its forward saw. A
// float32 forward's matmul backward cast to bfloat16 would differ.
TEST(Autocast, BackwardRunsWithAutocastOff) {
  manual_seed(3);
  nn::Linear fc(8, 4);
  const Tensor x = randn({3, 8}), target = randint(0, 4, {3});
  for (bool mixed_forward : {false, true}) {
    tensor_list grads;
    for (bool inside : {false, true}) {
      fc->zero_grad();
      AutocastGuard autocast(kCPU);
      Tensor loss;
      {
        AutocastGuard forward(kCPU, std::nullopt, mixed_forward);
        loss = cross_entropy(fc(x), target);
      }
      if (inside) {
        loss.backward();
      } else {
        AutocastGuard off(kCPU, std::nullopt, false);
        loss.backward();
      }
      grads.push_back(fc->weight.grad().clone());
      grads.push_back(fc->bias.grad().clone());
    }
    EXPECT_EQ(grads[0].dtype(), kFloat);
    EXPECT_TRUE(testing::same_tensor(grads[0], grads[2])) << mixed_forward;
    EXPECT_TRUE(testing::same_tensor(grads[1], grads[3])) << mixed_forward;
  }
}

// A bias-free convolution into batch norm, ResNet's pattern: batch norm runs whole in float32, so its backward
// hands the convolution's bfloat16 output a gradient the convolution's backward takes; the running statistics
// are updated in place, not on a cast copy.
TEST(Autocast, BatchNormAfterABiasFreeConvolutionTrains) {
  manual_seed(6);
  nn::Conv2d conv(nn::Conv2dOptions(2, 4, 3).bias(false));
  nn::BatchNorm2d bn(4);
  const Tensor x = randn({2, 2, 6, 6});
  Tensor y;
  {
    AutocastGuard autocast(kCPU);
    y = avg_pool2d(relu(bn(conv(x))), {2});
  }
  EXPECT_EQ(y.dtype(), kFloat);
  y.sum().backward();
  EXPECT_EQ(conv->weight.grad().dtype(), kFloat);
  EXPECT_EQ(bn->weight.grad().dtype(), kFloat);
  EXPECT_GT(bn->running_mean.abs().sum().item<double>(), 0);
}

TEST(Autocast, CheckpointRecomputesUnderItsForwardsAutocast) {
  manual_seed(4);
  nn::Linear fc1(8, 16), fc2(16, 4);
  const Tensor x = randn({3, 8});
  const tensor_list params{fc1->weight, fc1->bias, fc2->weight, fc2->bias};
  const auto fn = [&](const tensor_list& in) -> tensor_list { return {fc2(gelu(fc1(in[0])))}; };
  tensor_list direct, checkpointed;
  for (bool use_checkpoint : {false, true}) {
    autograd::zero_grad(params);
    Tensor y;
    {
      AutocastGuard autocast(kCPU);
      y = use_checkpoint ? autograd::checkpoint(fn, {x}, params)[0] : fn({x})[0];
    }
    EXPECT_EQ(y.dtype(), kBFloat16);
    y.to(kFloat).pow(2).sum().backward();  // outside the guard: the recomputation must turn it back on
    for (const Tensor& p : params) (use_checkpoint ? checkpointed : direct).push_back(p.grad().clone());
  }
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(testing::same_tensor(direct[i], checkpointed[i])) << i;
}

TEST(Autocast, ADtypeTheDeviceCannotRunIsAnError) {
  EXPECT_THROW_MSG(AutocastGuard(kCPU, kFloat), "autocast: the CPU runs autocast in Half or BFloat16, got Float");
  EXPECT_THROW_MSG(autocast::set_autocast_dtype(kCUDA, kDouble),
                   "autocast: the CUDA runs autocast in Half or BFloat16, got Double");
  EXPECT_FALSE(autocast::is_autocast_enabled(kCPU));  // a refused guard changed nothing
  EXPECT_EQ(autocast::get_autocast_dtype(kCUDA), kHalf);
  if (!cuda::is_available())
    EXPECT_THROW_MSG(AutocastGuard{kCUDA}, "CUDA autocast needs a GPU, and this process sees none");
  AutocastGuard autocast(kCPU);
  EXPECT_THROW_MSG(binary_cross_entropy(sigmoid(f32({4})), rand({4})),
                   "binary_cross_entropy is unsafe under autocast: its input is a probability already rounded to "
                   "BFloat16");
}

// A small regression trained 200 steps in float32 and under bfloat16 autocast from the same start: the float32
// master weights stay float32 and both runs reach nearly the same loss.
TEST(Autocast, TrainsInBFloat16AsInFloat32) {
  std::vector<double> final_losses;
  for (bool mixed : {false, true}) {
    manual_seed(5);
    nn::Sequential model(nn::Linear(16, 64), nn::GELU(), nn::LayerNorm(nn::LayerNormOptions({64})), nn::Linear(64, 1));
    optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2));
    Generator data(7);
    const Tensor x = randn({256, 16}, {}, &data);
    const Tensor y = (x.narrow(1, 0, 4).sum(1, true) - x.narrow(1, 4, 4).pow(2).mean(1, true)).tanh();
    double loss_value = 0;
    for (int step = 0; step < 200; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(kCPU, std::nullopt, mixed);
        const Tensor out = model->forward(x);
        EXPECT_EQ(out.dtype(), mixed ? kBFloat16 : kFloat);  // autocast ran
        loss = mse_loss(out, y);
      }
      EXPECT_EQ(loss.dtype(), kFloat);
      loss.backward();
      opt.step();
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
