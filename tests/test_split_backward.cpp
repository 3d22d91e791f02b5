// autograd::backward_input and DeferredWeightGrad (the zero-bubble split of backward into B and W): B then W
// gives backward()'s gradients bit for bit over a table of ops, tied weights, custom Functions, activation
// checkpointing and several micro-batches in flight; B computes the inputs' gradients and leaves the
// parameters' (with their hooks) to W; matmul and convolution compute their weight gradient in W.

#include <strata/autograd/checkpoint.h>

#include <functional>
#include <vector>

#include "helpers.h"

using namespace strata;
using strata::testing::same_tensor;

namespace {

// One differentiable function of a stage input (inputs[0]) and parameters (the rest).
struct Case {
  const char* name;
  std::function<Tensor(const tensor_list&)> fn;
  std::function<tensor_list()> inputs;
};
Tensor gaussian(IntArrayRef sizes, uint64_t seed, ScalarType dtype = kDouble) {
  manual_seed(seed);
  return randn(sizes, TensorOptions(dtype));
}

struct MulConst : autograd::Function<MulConst> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, Tensor w) {
    ctx->save_for_backward({x, w});
    return x * w;
  }
  static tensor_list backward(autograd::AutogradContext* ctx, tensor_list grads) {
    const tensor_list saved = ctx->get_saved_variables();
    return {grads[0] * saved[1], (grads[0] * saved[0]).sum(0)};
  }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"linear_relu_linear", [](const tensor_list& in) { return linear(relu(linear(in[0], in[1], in[2])), in[3]); },
       [] {
         return tensor_list{gaussian({5, 4}, 1), gaussian({6, 4}, 2), gaussian({6}, 3), gaussian({3, 6}, 4)};
       }},
      {"tied_weight_used_twice",
       [](const tensor_list& in) { return matmul(tanh(matmul(in[0], in[1])), in[1].t()) + in[2]; },
       [] {
         return tensor_list{gaussian({5, 4}, 5), gaussian({4, 4}, 6), gaussian({4}, 7)};
       }},
      {"weight_used_three_times",  // its gradient sums three products, in backward()'s order
       [](const tensor_list& in) {
         return matmul(in[0], in[1]) + matmul(tanh(in[0]), in[1]) * 3 + matmul(in[0] * in[0], in[1]);
       },
       [] {
         return tensor_list{gaussian({5, 4}, 32), gaussian({4, 3}, 33)};
       }},
      {"batched_matmul_bmm", [](const tensor_list& in) { return bmm(matmul(in[0], in[1]), in[2]); },
       [] {
         return tensor_list{gaussian({2, 3, 4}, 8), gaussian({4, 5}, 9), gaussian({2, 5, 2}, 10)};
       }},
      {"elementwise_and_reductions",
       [](const tensor_list& in) {
         return (exp(in[0] * in[1]) / (1 + in[2] * in[2])).sum(1) + logsumexp(in[0] - in[2], {1});
       },
       [] {
         return tensor_list{gaussian({4, 5}, 11), gaussian({5}, 12), gaussian({4, 5}, 13)};
       }},
      {"layer_norm_softmax", [](const tensor_list& in) { return softmax(layer_norm(in[0], {6}, in[1], in[2]), -1); },
       [] {
         return tensor_list{gaussian({3, 6}, 14), gaussian({6}, 15), gaussian({6}, 16)};
       }},
      {"conv2d_float64", [](const tensor_list& in) { return relu(conv2d(in[0], in[1], in[2], 1, 1)); },
       [] {
         return tensor_list{gaussian({2, 3, 5, 5}, 17), gaussian({4, 3, 3, 3}, 18), gaussian({4}, 19)};
       }},
      {"conv2d_float32_direct",
       [](const tensor_list& in) { return conv2d(relu(conv2d(in[0], in[1], {}, 2)), in[2], {}, 1, 1); },
       [] {
         return tensor_list{gaussian({2, 3, 8, 8}, 20, kFloat), gaussian({4, 3, 3, 3}, 21, kFloat),
                            gaussian({2, 4, 3, 3}, 22, kFloat)};
       }},
      {"batch_norm_training",
       [](const tensor_list& in) { return batch_norm(in[0], in[1], in[2], {}, {}, true, 0.1, 1e-5); },
       [] {
         return tensor_list{gaussian({4, 3, 2}, 23), gaussian({3}, 24), gaussian({3}, 25)};
       }},
      {"embedding_then_input",
       [](const tensor_list& in) {
         return embedding(in[1], tensor({0L, 2L, 2L, 1L})) * in[0];
       },
       [] {
         return tensor_list{gaussian({4, 3}, 26), gaussian({3, 3}, 27)};
       }},
      {"custom_function", [](const tensor_list& in) { return MulConst::apply(tanh(in[0]), in[1]); },
       [] {
         return tensor_list{gaussian({3, 4}, 28), gaussian({4}, 29)};
       }},
      {"input_unused_by_a_parameter_path", [](const tensor_list& in) { return in[0].sum() + (in[1] * in[1]).sum(); },
       [] {
         return tensor_list{gaussian({3}, 30), gaussian({2}, 31)};
       }},
  };
  return all;
}

tensor_list leaves(const Case& c) {
  tensor_list in = c.inputs();
  for (Tensor& t : in) t.requires_grad_(true);
  return in;
}

tensor_list grads_of(const tensor_list& in) {
  tensor_list g;
  for (const Tensor& t : in) g.push_back(t.grad());
  return g;
}

class SplitBackward : public ::testing::TestWithParam<Case> {};

TEST_P(SplitBackward, BThenWIsBackwardBitForBit) {
  const Case& c = GetParam();
  const tensor_list whole = leaves(c);
  const Tensor out = c.fn(whole);
  const Tensor weights = gaussian(out.sizes(), 99, out.scalar_type());
  autograd::backward({out}, {weights});
  const tensor_list expected = grads_of(whole);

  const tensor_list split = leaves(c);
  autograd::DeferredWeightGrad w = autograd::backward_input({c.fn(split)}, {weights}, {split[0]});
  ASSERT_TRUE(same_tensor(split[0].grad(), expected[0])) << "the input's gradient after B";
  for (size_t i = 1; i < split.size(); ++i) EXPECT_FALSE(split[i].grad().defined()) << "parameter " << i << " in B";
  EXPECT_TRUE(w.pending());
  w.run();
  EXPECT_FALSE(w.pending());
  for (size_t i = 0; i < split.size(); ++i) EXPECT_TRUE(same_tensor(split[i].grad(), expected[i])) << "input " << i;
}

INSTANTIATE_TEST_SUITE_P(Ops, SplitBackward, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// Several micro-batches in flight over the same parameters: B(0) B(1) W(0) W(1), as a zero-bubble stage runs
// them, accumulates what backward(0) then backward(1) does.
TEST(SplitBackwardPipeline, MicroBatchesInFlightShareTheAccumulators) {
  nn::Linear fc1(4, 8), fc2(8, 3);
  fc1->to(kDouble);
  fc2->to(kDouble);
  auto stage = [&](const Tensor& x) { return fc2(gelu(fc1(x))).pow(2).sum(); };
  const Tensor x0 = gaussian({5, 4}, 40).requires_grad_(true), x1 = gaussian({5, 4}, 41).requires_grad_(true);
  autograd::backward({stage(x0)});
  autograd::backward({stage(x1)});
  std::vector<Tensor> expected;
  for (const Tensor& p : fc1->parameters()) expected.push_back(p.grad().clone());
  for (const Tensor& p : fc2->parameters()) expected.push_back(p.grad().clone());
  const Tensor gx0 = x0.grad(), gx1 = x1.grad();
  fc1->zero_grad();
  fc2->zero_grad();

  const Tensor y0 = gaussian({5, 4}, 40).requires_grad_(true), y1 = gaussian({5, 4}, 41).requires_grad_(true);
  const Tensor loss0 = stage(y0), loss1 = stage(y1);
  autograd::DeferredWeightGrad w0 = autograd::backward_input({loss0}, {}, {y0});
  autograd::DeferredWeightGrad w1 = autograd::backward_input({loss1}, {}, {y1});
  EXPECT_TRUE(same_tensor(y0.grad(), gx0));
  EXPECT_TRUE(same_tensor(y1.grad(), gx1));
  w0.run();
  w1.run();
  size_t k = 0;
  for (const Tensor& p : fc1->parameters()) EXPECT_TRUE(same_tensor(p.grad(), expected[k++]));
  for (const Tensor& p : fc2->parameters()) EXPECT_TRUE(same_tensor(p.grad(), expected[k++]));
}

TEST(SplitBackwardHooks, InputHooksFireInBParameterHooksInW) {
  nn::Linear fc(3, 2);
  const Tensor x = randn({4, 3}, requires_grad());
  std::vector<std::string> fired;
  x.register_hook([&](const Tensor&) { fired.push_back("x"); });
  fc->weight.register_post_accumulate_grad_hook([&](const Tensor&) { fired.push_back("weight accumulated"); });
  fc->bias.register_hook([&](const Tensor&) { fired.push_back("bias"); });
  autograd::DeferredWeightGrad w = autograd::backward_input({fc(x).sum()}, {}, {x});
  EXPECT_EQ(fired, std::vector<std::string>{"x"});
  w.run();
  EXPECT_EQ(fired.size(), 3u);
  EXPECT_EQ(fired[0], "x");
  EXPECT_NE(std::find(fired.begin(), fired.end(), "weight accumulated"), fired.end());
  EXPECT_NE(std::find(fired.begin(), fired.end(), "bias"), fired.end());
}

TEST(SplitBackwardMatmul, TheWeightGradientIsComputedInW) {
  // W computes a matmul's weight gradient from the incoming gradient B kept: with the saved input changed in
  // place between B and W, W's unpack sees it, where a gradient computed in B would not have.
  const Tensor x = randn({4, 3}, requires_grad());
  const Tensor w = randn({3, 2}, requires_grad());
  Tensor h = x * 1.0;  // a non-leaf the matmul saves for the weight's gradient
  autograd::DeferredWeightGrad weight = autograd::backward_input({matmul(h, w).sum()}, {}, {x});
  EXPECT_TRUE(x.grad().defined());
  {
    NoGradGuard no_grad;
    h.add_(1.0);
  }
  EXPECT_THROW_MSG(weight.run(), "modified by an inplace operation");
}

TEST(SplitBackwardCheckpoint, RecomputesOnceAndMatchesBackward) {
  nn::Linear fc1(4, 6), fc2(6, 3);
  fc1->to(kDouble);
  fc2->to(kDouble);
  int runs = 0;
  auto block = [&](const tensor_list& in) {
    ++runs;
    return tensor_list{fc2(tanh(fc1(in[0])))};
  };
  tensor_list params = fc1->parameters();
  for (const Tensor& p : fc2->parameters()) params.push_back(p);
  const Tensor x = gaussian({5, 4}, 50).requires_grad_(true);
  autograd::backward({autograd::checkpoint(block, {x}, params)[0].sum()});
  tensor_list expected;
  for (const Tensor& p : params) expected.push_back(p.grad().clone());
  const Tensor gx = x.grad();
  for (Tensor p : params) p.mutable_grad() = Tensor();

  const Tensor y = gaussian({5, 4}, 50).requires_grad_(true);
  runs = 0;
  const Tensor loss = autograd::checkpoint(block, {y}, params)[0].sum();
  autograd::DeferredWeightGrad w = autograd::backward_input({loss}, {}, {y});
  w.run();
  EXPECT_EQ(runs, 2);  // the forward and one recomputation
  EXPECT_TRUE(same_tensor(y.grad(), gx));
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(same_tensor(params[i].grad(), expected[i])) << i;
}

TEST(SplitBackward, RetainGraphRunsTwiceAndErrorsName) {
  const Tensor x = randn({3}, requires_grad());
  const Tensor w = randn({3}, requires_grad());
  const Tensor loss = (x * w).sum();
  autograd::backward_input({loss}, {}, {x}, /*retain_graph=*/true).run();
  autograd::backward_input({loss}, {}, {x}).run();
  EXPECT_TRUE(same_tensor(w.grad(), x.detach() * 2));
  EXPECT_THROW_MSG(autograd::backward_input({loss}, {}, {x}), "trying to backward through the graph a second time");

  const Tensor y = randn({3}, requires_grad());
  autograd::DeferredWeightGrad once = autograd::backward_input({(y * w).sum()}, {}, {y});
  once.run();
  EXPECT_THROW_MSG(once.run(), "DeferredWeightGrad::run: the weight gradients were already computed");
  EXPECT_THROW_MSG(autograd::DeferredWeightGrad().run(), "DeferredWeightGrad::run: this object holds no split");
  EXPECT_THROW_MSG(autograd::backward_input({(y * w).sum()}, {}, {randn({3})}),
                   "backward_input: input 0 does not require grad");
}

}  // namespace
