// autograd::checkpoint: the same gradients as running the function directly, random numbers replayed,
// parameters reaching their gradients (and hooks) through the outer pass once, and the errors.

#include <strata/autograd/checkpoint.h>

#include <vector>

#include "helpers.h"

using namespace strata;
using strata::testing::same_tensor;

namespace {

// A float64 MLP; fn runs it on inputs[0], with dropout when p > 0.
struct Mlp {
  explicit Mlp(double p = 0) : p(p) {
    fc1->to(kFloat64);
    fc2->to(kFloat64);
  }
  tensor_list operator()(const tensor_list& in) const { return {fc2(dropout(tanh(fc1(in[0])), p))}; }
  tensor_list parameters() const {
    tensor_list ps = fc1->parameters();
    for (const Tensor& w : fc2->parameters()) ps.push_back(w);
    return ps;
  }
  nn::Linear fc1{4, 6}, fc2{6, 3};
  double p;
};

// The output, then the grads of x and every parameter, after (y * y).sum().backward().
tensor_list run(const Mlp& mlp, const Tensor& x, bool checkpointed) {
  tensor_list params = mlp.parameters();
  autograd::zero_grad(params);
  autograd::zero_grad({x});
  const Tensor y = checkpointed ? autograd::checkpoint(mlp, {x}, params)[0] : mlp({x})[0];
  (y * y).sum().backward();
  tensor_list out = {y.detach(), x.grad()};
  for (const Tensor& p : params) out.push_back(p.grad());
  return out;
}

}  // namespace

TEST(Checkpoint, GradientsEqualTheDirectRun) {
  Mlp mlp;
  const Tensor x = leaf({5, 4});
  const tensor_list direct = run(mlp, x, false), checkpointed = run(mlp, x, true);
  ASSERT_EQ(direct.size(), checkpointed.size());
  for (size_t i = 0; i < direct.size(); ++i) EXPECT_TRUE(same_tensor(direct[i], checkpointed[i])) << "tensor " << i;
}

TEST(Checkpoint, Gradcheck) {
  manual_seed(2);
  const Tensor x = leaf({3, 4}), w = leaf({4, 2}), b = leaf({2});
  auto fn = [](const tensor_list& in) {
    const Tensor w = in[1], b = in[2];
    return autograd::checkpoint(
        [w, b](const tensor_list& v) {
          return tensor_list{tanh(matmul(v[0], w) + b), (v[0] * v[0]).sum(1)};
        },
        {in[0]}, {w, b});
  };
  EXPECT_GRADCHECK(fn, {x, w, b});
}

TEST(Checkpoint, DropoutReplaysTheSameMask) {
  Mlp mlp(0.5);
  const Tensor x = leaf({8, 4});
  manual_seed(3);
  const tensor_list direct = run(mlp, x, false);
  manual_seed(3);
  const tensor_list checkpointed = run(mlp, x, true);
  for (size_t i = 0; i < direct.size(); ++i) EXPECT_TRUE(same_tensor(direct[i], checkpointed[i])) << "tensor " << i;
  // The mask did drop something: the same run under another seed differs.
  manual_seed(4);
  EXPECT_FALSE(same_tensor(direct[0], run(mlp, x, true)[0]));
}

TEST(Checkpoint, GeneratorEndsWhereItWouldWithoutTheRecomputation) {
  Mlp mlp(0.5);
  const Tensor x = leaf({8, 4});
  auto position_after = [&](bool checkpointed) {
    manual_seed(5);
    const Tensor y = checkpointed ? autograd::checkpoint(mlp, {x}, mlp.parameters())[0] : mlp({x})[0];
    randn({7});  // draws between forward and backward
    y.sum().backward();
    return std::pair(default_generator().get_offset(), randn({3}));
  };
  const auto [direct_offset, direct_next] = position_after(false);
  const auto [checkpointed_offset, checkpointed_next] = position_after(true);
  EXPECT_EQ(direct_offset, checkpointed_offset);
  EXPECT_EQ(default_generator().seed(), 5u);
  EXPECT_TRUE(same_tensor(direct_next, checkpointed_next));
}

TEST(Checkpoint, IntegerAndNoGradTensorsPassThrough) {
  const Tensor x = leaf({2, 3}), w = leaf({3, 3});
  const Tensor mask = tensor({1, 0}), scale = full({2, 3}, 2.0, kFloat64);
  const tensor_list out = autograd::checkpoint(
      [w](const tensor_list& in) {
        return tensor_list{matmul(in[0], w) * in[2], in[1], in[1] + 1, in[2]};
      },
      {x, mask, scale}, {w});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_TRUE(out[1].is_same(mask));  // handed back as it came
  EXPECT_EQ(out[2].dtype(), kLong);
  EXPECT_FALSE(out[2].requires_grad());
  EXPECT_VALUES(out[2], {2, 1});
  EXPECT_TRUE(out[3].is_same(scale));
  EXPECT_FALSE(out[3].requires_grad());
  out[0].sum().backward();
  EXPECT_ALLCLOSE(x.grad(), matmul(full({2, 3}, 2.0, kFloat64), w.detach().t()), 1e-15, 1e-15);
  EXPECT_ALLCLOSE(w.grad(), matmul(x.detach().t(), full({2, 3}, 2.0, kFloat64)), 1e-15, 1e-15);
}

TEST(Checkpoint, AnInputThatNeedsGradComesBackAsItsOwnTensor) {
  const Tensor x = leaf({3});
  const tensor_list out = autograd::checkpoint(
      [](const tensor_list& in) {
        return tensor_list{in[0], in[0] * 2};
      },
      {x});
  EXPECT_FALSE(out[0].is_same(x));
  EXPECT_TRUE(x.is_leaf());
  (out[0] + out[1]).sum().backward();
  EXPECT_VALUES(x.grad(), {3, 3, 3});
}

TEST(Checkpoint, SecondBackwardNeedsRetainGraph) {
  const Tensor x = leaf({3}), w = leaf({3});
  auto fn = [w](const tensor_list& in) { return tensor_list{in[0] * w}; };
  const Tensor y = autograd::checkpoint(fn, {x}, {w})[0];
  y.backward(ones_like(y), /*retain_graph=*/true);
  y.backward(ones_like(y));  // recomputes again
  EXPECT_ALLCLOSE(w.grad(), x.detach() * 2, 1e-15, 1e-15);
  EXPECT_THROW_MSG(y.backward(ones_like(y)), "CheckpointBackward: trying to backward through the graph a second time");
}

TEST(Checkpoint, ParameterHooksAndCallbacksRunOnceInTheOuterPass) {
  Mlp mlp;
  const Tensor x = leaf({5, 4});
  const Tensor w = mlp.fc1->weight;
  int hooks = 0, callbacks = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++hooks;
    EXPECT_TRUE(t.grad().defined());
    autograd::queue_callback([&] {
      ++callbacks;
      EXPECT_TRUE(x.grad().defined());  // the outer pass is over
    });
  });
  const Tensor y = autograd::checkpoint(mlp, {x}, mlp.parameters())[0];
  y.sum().backward();
  EXPECT_EQ(hooks, 1);
  EXPECT_EQ(callbacks, 1);
}

TEST(Checkpoint, ParameterAlsoUsedOutsideTheCheckpoint) {
  // The parameter's accumulator is in both the outer pass and the recomputation's (Note [nested passes]).
  Mlp mlp;
  const Tensor x = leaf({5, 4});
  auto loss = [&](bool checkpointed) {
    autograd::zero_grad(mlp.parameters());
    const Tensor y = checkpointed ? autograd::checkpoint(mlp, {x}, mlp.parameters())[0] : mlp({x})[0];
    (y.sum() + matmul(x, mlp.fc1->weight.t()).sum()).backward();
    return mlp.fc1->weight.grad();
  };
  const Tensor direct = loss(false);
  EXPECT_ALLCLOSE(loss(true), direct, 1e-15, 1e-15);
}

TEST(Checkpoint, Nested) {
  Mlp mlp;
  const Tensor x = leaf({5, 4});
  auto grads = [&](bool checkpointed) {
    autograd::zero_grad(mlp.parameters());
    auto inner = [&](const tensor_list& in) { return mlp(in); };
    auto outer = [&](const tensor_list& in) {
      return tensor_list{tanh(autograd::checkpoint(inner, in, mlp.parameters())[0])};
    };
    const Tensor y = checkpointed ? autograd::checkpoint(outer, {x}, mlp.parameters())[0] : tanh(mlp({x})[0]);
    y.sum().backward();
    return mlp.fc2->weight.grad();
  };
  const Tensor direct = grads(false);
  EXPECT_TRUE(same_tensor(grads(true), direct));
}

TEST(Checkpoint, WithoutGradModeRecordsNothing) {
  Mlp mlp;
  NoGradGuard no_grad;
  const Tensor y = autograd::checkpoint(mlp, {leaf({2, 4})}, mlp.parameters())[0];
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, Errors) {
  const Tensor x = leaf({3}), w = leaf({3});
  auto fn = [w](const tensor_list& in) { return tensor_list{in[0] * w}; };
  EXPECT_THROW_MSG(autograd::checkpoint(fn, {x}, {w * 2}), "checkpoint: parameter 0 is not a leaf that requires grad");
  EXPECT_THROW_MSG(autograd::checkpoint(fn, {x}, {w, zeros({3})}),
                   "checkpoint: parameter 1 is not a leaf that requires grad");
  EXPECT_THROW_MSG(autograd::checkpoint(fn, {x}, {w, w}), "checkpoint: parameter 1 is given twice");
  EXPECT_THROW_MSG(autograd::checkpoint({}, {x}, {w}), "checkpoint: fn is empty");
  EXPECT_THROW_MSG(autograd::checkpoint([](const tensor_list&) { return tensor_list{}; }, {x}),
                   "checkpoint: fn returned no tensors");
  EXPECT_THROW_MSG(autograd::checkpoint([](const tensor_list&) { return tensor_list{Tensor()}; }, {x}),
                   "checkpoint: fn returned an undefined tensor at position 0");

  const Tensor y = autograd::checkpoint(fn, {x}, {w})[0];
  EXPECT_THROW_MSG(autograd::grad({y.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true),
                   "checkpoint: backward with create_graph=true is not supported");

  const Tensor z = autograd::checkpoint(fn, {x}, {w})[0];
  {
    NoGradGuard no_grad;
    Tensor(w).add_(1);  // an optimizer step between forward and backward
  }
  EXPECT_THROW_MSG(z.sum().backward(), "modified by an inplace operation");
}
