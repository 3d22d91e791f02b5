// The autograd engine: accumulation, retain_graph, hooks, grad(), create_graph, custom
// Functions, version counters, deep graphs and the errors users hit.

#include <thread>

#include "helpers.h"

using namespace strata;

TEST(Autograd, BackwardAccumulatesIntoLeaves) {
  Tensor x = tensor({1.0, 2.0, 3.0}, f64());
  Tensor y = (x * x).sum();
  EXPECT_FALSE(y.is_leaf());
  EXPECT_STREQ(y.grad_fn()->name(), "SumBackward");
  y.backward();
  EXPECT_VALUES(x.grad(), {2, 4, 6});
  (x * 3.0).sum().backward();  // a second graph accumulates
  EXPECT_VALUES(x.grad(), {5, 7, 9});
  x.mutable_grad() = Tensor();
  (x * x * x).sum().backward();
  EXPECT_VALUES(x.grad(), {3, 12, 27});
}

TEST(Autograd, RequiresGradPropagation) {
  Tensor a = ones({2}, f64());
  Tensor b = ones({2}, kFloat64);
  EXPECT_TRUE((a + b).requires_grad());
  EXPECT_FALSE((b + b).requires_grad());
  {
    NoGradGuard no_grad;
    Tensor c = a * 2.0;
    EXPECT_FALSE(c.requires_grad());
    EXPECT_EQ(c.grad_fn(), nullptr);
  }
  EXPECT_FALSE(a.detach().requires_grad());
  EXPECT_TRUE(a.detach().is_alias_of(a));
  Tensor d = a * 2.0;
  d.detach_();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_THROW_MSG((a * 2.0).requires_grad_(false), "you can only change requires_grad flags of leaf variables");
}

TEST(Autograd, RetainGraphAndFreedGraphError) {
  Tensor x = tensor({2.0}, f64());
  Tensor y = (x * x).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_VALUES(x.grad(), {8});
  EXPECT_THROW_MSG(y.backward(), "trying to backward through the graph a second time");
}

TEST(Autograd, BackwardErrors) {
  Tensor x = ones({3}, f64());
  EXPECT_THROW_MSG((x * 2.0).backward(), "grad can be implicitly created only for scalar outputs");
  EXPECT_THROW_MSG(ones({1}).backward(), "does not require grad and does not have a grad_fn");
  EXPECT_THROW_MSG((x * 2.0).backward(ones({2}, kFloat64)),
                   "Mismatch in shape: grad_output[0] has a shape of [2] and output[0] has a shape of [3]");
  Tensor y = x * 2.0;
  y.backward(tensor({1.0, 10.0, 100.0}, kFloat64));
  EXPECT_VALUES(x.grad(), {2, 20, 200});
}

TEST(Autograd, HooksSeeAndReplaceGradients) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor h = x * 3.0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) { seen = strata::testing::values(g); });
  unsigned doubler = h.register_hook([](const Tensor& g) { return g * 2.0; });
  h.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_VALUES(x.grad(), {6, 6});

  x.mutable_grad() = Tensor();
  Tensor h2 = x * 3.0;
  unsigned id = h2.register_hook([](const Tensor& g) { return g * 2.0; });
  h2.remove_hook(id);
  h2.sum().backward();
  EXPECT_VALUES(x.grad(), {3, 3});
  (void)doubler;

  // Leaf hooks run before accumulation.
  Tensor w = tensor({1.0}, f64());
  int calls = 0;
  w.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 10.0;
  });
  (w * 2.0).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_VALUES(w.grad(), {20});
  EXPECT_THROW_MSG(ones({1}).register_hook([](const Tensor&) {}),
                   "cannot register a hook on a tensor that doesn't require gradient");
}

TEST(Autograd, RetainGrad) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor h = x * x;
  h.retain_grad();
  EXPECT_TRUE(h.retains_grad());
  (h * 3.0).sum().backward();
  EXPECT_VALUES(h.grad(), {3, 3});
  Tensor unretained = x * x;
  (unretained * 3.0).sum().backward();
  EXPECT_FALSE(unretained.grad().defined());
}

TEST(Autograd, GradReturnsWithoutAccumulating) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = (x * x * x).sum();
  tensor_list g = autograd::grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  EXPECT_VALUES(g[0], {3, 12});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(g[0].requires_grad());
  tensor_list gg = autograd::grad({g[0].sum()}, {x});
  EXPECT_VALUES(gg[0], {6, 12});  // d2/dx2 x^3 = 6x
  EXPECT_FALSE(gg[0].requires_grad());

  Tensor unused = ones({1}, f64());
  Tensor z = (x * 2.0).sum();
  EXPECT_THROW_MSG(autograd::grad({z}, {unused}, {}, true), "appears to not have been used in the graph");
  tensor_list allowed = autograd::grad({z}, {x, unused}, {}, false, false, /*allow_unused=*/true);
  EXPECT_VALUES(allowed[0], {2, 2});
  EXPECT_FALSE(allowed[1].defined());
  EXPECT_THROW_MSG(autograd::grad({x.sum()}, {ones({1})}), "does not require grad");
}

TEST(Autograd, GradOfIntermediate) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  tensor_list g = autograd::grad({y}, {h});
  EXPECT_VALUES(g[0], {4, 8});  // 2h
}

TEST(Autograd, CreateGraphBackward) {
  Tensor x = tensor({3.0}, f64());
  Tensor y = x * x * x;
  y.backward({}, {}, /*create_graph=*/true);
  Tensor gx = x.grad();  // 3x^2 with history
  EXPECT_VALUES(gx, {27});
  EXPECT_TRUE(gx.requires_grad());
  tensor_list second = autograd::grad({gx.sum()}, {x});
  EXPECT_VALUES(second[0], {18});
}

TEST(Autograd, DeepChainDoesNotOverflowTheStack) {
  Tensor x = tensor({1.0}, f64());
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.00001;
  y.sum().backward();
  EXPECT_NEAR(x.grad().item<double>(), std::pow(1.00001, 100000), 1e-6);
  // Dropping the last handle frees the 100,000-node graph without recursion.
  y = Tensor();
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = z + x;
  z = Tensor();
}

TEST(Autograd, InplaceModificationOfSavedTensorThrows) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor a = x * 2.0;
  Tensor b = a * a;  // saves a
  const uint32_t v = a._version();
  a.mul_(3.0);
  EXPECT_EQ(a._version(), v + 1);
  EXPECT_THROW_MSG(b.sum().backward(), "modified by an inplace operation");

  Tensor e = x.exp();  // saves its output
  e.add_(1.0);
  EXPECT_THROW_MSG(e.sum().backward(), "modified by an inplace operation");
  EXPECT_THROW_MSG(x.add_(1.0), "a leaf Variable that requires grad is being used in an in-place operation");
  {
    NoGradGuard no_grad;
    x.add_(1.0);  // an optimizer step
  }
  EXPECT_VALUES(x, {2, 3});
}

namespace {

struct MulConst : autograd::Function<MulConst> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, double c) {
    ctx->saved_data["c"] = c;
    return x * c;
  }
  static tensor_list backward(autograd::AutogradContext* ctx, tensor_list grads) {
    return {grads[0] * ctx->saved_data["c"].toDouble(), Tensor()};
  }
};

struct Cube : autograd::Function<Cube> {  // saves an input and an output
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    Tensor y = x * x * x;
    ctx->save_for_backward({x, y});
    return y;
  }
  static tensor_list backward(autograd::AutogradContext* ctx, tensor_list grads) {
    tensor_list saved = ctx->get_saved_variables();
    return {grads[0] * 3.0 * saved[1] / saved[0]};
  }
};

struct SplitHalves : autograd::Function<SplitHalves> {  // two outputs, one non-differentiable
  static tensor_list forward(autograd::AutogradContext* ctx, const Tensor& x) {
    Tensor doubled = x * 2.0;
    Tensor index = argmax(x);
    ctx->mark_non_differentiable({index});
    return {doubled, index};
  }
  static tensor_list backward(autograd::AutogradContext*, tensor_list grads) { return {grads[0] * 2.0}; }
};

struct DoubleInPlace : autograd::Function<DoubleInPlace> {  // modifies its input and says so
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x) {
    x.mul_(2.0);
    ctx->mark_dirty({x});
    return x;
  }
  static tensor_list backward(autograd::AutogradContext*, tensor_list grads) { return {grads[0] * 2.0}; }
};

struct CubeWithDetachedBackward : autograd::Function<CubeWithDetachedBackward> {  // right first, wrong second
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static tensor_list backward(autograd::AutogradContext* ctx, tensor_list grads) {
    Tensor x = ctx->get_saved_variables()[0].detach();
    return {grads[0] * 3.0 * x * x};
  }
};

struct WrongCount : autograd::Function<WrongCount> {
  static Tensor forward(autograd::AutogradContext*, const Tensor& x, const Tensor& y) { return x * y; }
  static tensor_list backward(autograd::AutogradContext*, tensor_list grads) { return {grads[0]}; }
};

struct WrongGradient : autograd::Function<WrongGradient> {
  static Tensor forward(autograd::AutogradContext*, const Tensor& x) { return x * x; }
  static tensor_list backward(autograd::AutogradContext*, tensor_list grads) { return {grads[0]}; }  // should be 2x g
};

}  // namespace

TEST(Autograd, CustomFunctions) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = MulConst::apply(x, 5.0);
  EXPECT_VALUES(y, {5, 10});
  y.sum().backward();
  EXPECT_VALUES(x.grad(), {5, 5});

  auto cube = [](const tensor_list& in) { return Cube::apply(in[0]); };
  EXPECT_GRADCHECK(cube, {tensor({0.5, -1.5, 2.0}, f64())});

  tensor_list outs = SplitHalves::apply(x);
  EXPECT_TRUE(outs[0].requires_grad());
  EXPECT_FALSE(outs[1].requires_grad());
  EXPECT_EQ(outs[1].item<int64_t>(), 1);

  Tensor z = WrongCount::apply(x, x);
  EXPECT_THROW_MSG(z.sum().backward(), "returned an incorrect number of gradients (expected 2, got 1)");

  auto wrong = [](const tensor_list& in) { return WrongGradient::apply(in[0]); };
  EXPECT_THROW_MSG(autograd::gradcheck(wrong, {tensor({1.0, 3.0}, f64())}),
                   "gradcheck: Jacobian mismatch for output 0 with respect to input 0 at input element [0] and "
                   "output element [0]: analytical 1 vs numerical 2");
  EXPECT_FALSE(autograd::gradcheck(wrong, {tensor({1.0, 3.0}, f64())}, {.raise_exception = false}));
}

TEST(Autograd, CustomFunctionMarkDirty) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = x * 3.0;
  Tensor out = DoubleInPlace::apply(y);
  EXPECT_TRUE(out.is_same(y));  // the input itself, with the function as its history
  EXPECT_VALUES(y, {6, 12});
  y.sum().backward();
  EXPECT_VALUES(x.grad(), {6, 6});
  EXPECT_THROW_MSG(DoubleInPlace::apply(x), "a leaf Variable that requires grad has been used in an in-place");
  // A dirty view would leave its base's history stale: refused.
  Tensor z = x * 1.0;
  EXPECT_THROW_MSG(DoubleInPlace::apply(z.narrow(0, 0, 1)), "mark_dirty on a view is not supported");
}

// gradgradcheck's messages speak of the user's function: which derivative, with respect to what.
TEST(Autograd, GradgradcheckNamesTheSecondDerivativeThatFailed) {
  auto f = [](const tensor_list& in) { return CubeWithDetachedBackward::apply(in[0]) * in[1]; };
  const tensor_list inputs = {tensor({1.0, 2.0}, f64()), tensor({0.5, 1.5}, f64())};
  EXPECT_GRADCHECK(f, inputs);
  EXPECT_THROW_MSG(autograd::gradgradcheck(f, inputs),
                   "gradgradcheck: Jacobian mismatch for the first derivative (a vector-Jacobian product) with "
                   "respect to input 0 with respect to input 0 at input element [0] and output element [0]");
  auto g = [](const tensor_list& in) { return in[0] * 2.0; };
  EXPECT_THROW_MSG(autograd::gradgradcheck(g, {tensor({1.0}, kFloat64)}), "gradgradcheck: no input requires grad");
}

TEST(Autograd, GradcheckChecksItsInputs) {
  auto f = [](const tensor_list& in) { return in[0] * 2.0; };
  EXPECT_THROW_MSG(autograd::gradcheck(f, {ones({2}, TensorOptions().requires_grad(true))}),
                   "gradcheck: input 0 has dtype Float; gradcheck needs float64 inputs");
  EXPECT_THROW_MSG(autograd::gradcheck(f, {ones({2}, kFloat64)}), "gradcheck: no input requires grad");
}

TEST(Autograd, GradgradcheckComposite) {
  auto f = [](const tensor_list& in) { return (in[0] * in[0] * in[1]).sum(); };
  EXPECT_GRADGRADCHECK(f, {tensor({0.5, 1.5}, f64()), tensor({2.0, -1.0}, f64())});
}

TEST(Autograd, TwoLayerMlpWithCrossEntropy) {
  manual_seed(0);
  Tensor x = randn({4, 3}, f64());
  Tensor w1 = randn({3, 5}, f64()), b1 = randn({5}, f64());
  Tensor w2 = randn({5, 3}, f64()), b2 = randn({3}, f64());
  Tensor target = tensor({0, 2, 1, 2});
  auto mlp = [&](const tensor_list& p) {
    Tensor h = relu(matmul(p[0], p[1]) + p[2]);
    return cross_entropy(matmul(h, p[3]) + p[4], target);
  };
  EXPECT_GRADCHECK(mlp, {x, w1, b1, w2, b2});
}

TEST(Autograd, CreateGraphLeafGradientsAreNotAliased) {
  Tensor x = randn({3}, f64());
  x.sum().backward({}, {}, /*create_graph=*/true);  // the incoming gradient is an expanded (stride 0) view
  (x * 2.0).sum().backward();
  EXPECT_VALUES(x.grad(), {3, 3, 3});
  Tensor a = randn({2}, f64()), b = randn({2}, f64());
  (a + b).sum().backward({}, {}, /*create_graph=*/true);  // one gradient feeds both leaves
  a.mutable_grad().mul_(0.5);
  EXPECT_VALUES(b.grad(), {1, 1});
}

// Note [view history]: a view taken before an in-place op rebased its base follows the base's new history.
TEST(Autograd, StaleViewsFollowTheirBase) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = x * 1.0;
  Tensor v = y.select(0, 0);
  y.mul_(2.0);  // rebases y; v is regenerated as a view of y's new history
  (v * 3.0).sum().backward();
  EXPECT_VALUES(x.grad(), {6, 0});
  EXPECT_VALUES(v, {2});

  // A view taken before its base required grad: after an in-place op with a grad operand, it requires grad.
  Tensor out = zeros({2, 2}, kFloat64);
  Tensor row1 = out.select(0, 1);
  Tensor h = tensor({1.0, 2.0}, f64());
  EXPECT_FALSE(row1.requires_grad());
  out.select(0, 0).copy_(h);
  EXPECT_TRUE(out.requires_grad());
  EXPECT_STREQ(out.grad_fn()->name(), "CopySlices");
  EXPECT_TRUE(row1.requires_grad());
  (out * tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).reshape({2, 2})).sum().backward();
  EXPECT_VALUES(h.grad(), {1, 2});
  {
    NoGradGuard no_grad;
    out.select(0, 1).copy_(h);  // without recording, writing through views is fine
  }
  EXPECT_VALUES(out, {1, 2, 1, 2});
}

TEST(Autograd, MaxIndicesReturnedToTheUserAreNotTheSavedOnes) {
  Tensor x = tensor({1.0, 5.0, 3.0}, f64());
  auto [values, indices] = x.max(0);
  indices.zero_();
  EXPECT_THROW_MSG(values.backward(), "modified by an inplace operation");
}

TEST(Autograd, BackwardOnAnotherThread) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = (x * x).sum();
  y.backward({}, /*retain_graph=*/true);
  std::thread([&] { y.backward(); }).join();
  EXPECT_VALUES(x.grad(), {4, 8});
}

TEST(Autograd, ThrowingHookLeavesTheEngineUsable) {
  Tensor x = tensor({1.0}, f64());
  Tensor h = x * 2.0;
  h.register_hook([](const Tensor&) -> Tensor { throw std::runtime_error("hook failed"); });
  EXPECT_THROW(h.sum().backward(), std::runtime_error);
  (x * 3.0).sum().backward();
  EXPECT_VALUES(x.grad(), {3});
}

TEST(Autograd, StaticTensorsOutliveThreadLocals) {
  // Freed at exit after the thread's caches: must not touch them (ASan checks this).
  static Tensor kept = tensor({1.0, 2.0}, f64()) * 2.0;
  EXPECT_TRUE(kept.requires_grad());
}

namespace {
struct WrongShape : autograd::Function<WrongShape> {
  static Tensor forward(autograd::AutogradContext*, const Tensor& x) { return x * 2.0; }
  static tensor_list backward(autograd::AutogradContext*, tensor_list grads) { return {grads[0].sum()}; }
};
struct OptionalInput : autograd::Function<OptionalInput> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const Tensor& bias) {
    ctx->saved_data["has_bias"] = bias.defined();
    return bias.defined() ? x + bias : x * 1.0;
  }
  static tensor_list backward(autograd::AutogradContext* ctx, tensor_list grads) {
    return {grads[0], ctx->saved_data["has_bias"].toBool() ? grads[0] : Tensor()};
  }
};
}  // namespace

TEST(Autograd, CustomFunctionArgumentChecks) {
  Tensor x = tensor({1.0, 2.0, 3.0}, f64());
  EXPECT_THROW_MSG(WrongShape::apply(x).sum().backward(),
                   "function backward returned a gradient of shape [] for argument 0, whose shape is [3]");
  Tensor y = OptionalInput::apply(x, Tensor());
  y.sum().backward();
  EXPECT_VALUES(x.grad(), {1, 1, 1});
}

namespace {
// A node that stands for a cross-process op: records the gradients it was given and passes
// ones (or nothing, when it got no gradient) to `input`.
std::shared_ptr<autograd::LambdaNode> pending_node(const Tensor& input, std::vector<bool>& got_grad) {
  auto node = std::make_shared<autograd::LambdaNode>("PendingBackward", 1);
  node->next_edges.push_back(autograd::gradient_edge(input));
  node->backward = [&got_grad, sizes = DimVector(input.sizes())](const tensor_list& g) -> tensor_list {
    got_grad.push_back(g[0].defined());
    return {g[0].defined() ? g[0] : ones(sizes, kFloat64)};
  };
  return node;
}
}  // namespace

TEST(Autograd, RunInNextBackwardRunsUnreachedNodesOnce) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor w = tensor({3.0}, f64());
  std::vector<bool> got_grad;
  autograd::run_in_next_backward(pending_node(x, got_grad));
  (w * 2.0).sum().backward();  // does not reach the node, runs it anyway
  EXPECT_EQ(got_grad, std::vector<bool>{false});
  EXPECT_VALUES(x.grad(), {1, 1});
  EXPECT_VALUES(w.grad(), {2});
  (w * 2.0).sum().backward();  // the registration was used up
  EXPECT_EQ(got_grad.size(), 1u);
  EXPECT_VALUES(x.grad(), {1, 1});
}

TEST(Autograd, RunInNextBackwardNodeReachedGetsItsGradient) {
  Tensor x = tensor({1.0, 2.0}, f64());
  std::vector<bool> got_grad;
  auto node = pending_node(x, got_grad);
  Tensor y = zeros({2}, kFloat64);
  autograd::set_history(y, node);
  autograd::run_in_next_backward(node);
  (y * 5.0).sum().backward();
  EXPECT_EQ(got_grad, std::vector<bool>{true});  // once, though it is both reached and registered
  EXPECT_VALUES(x.grad(), {5, 5});
}

TEST(Autograd, BackwardEnteredAtARegisteredNode) {
  // backward starts at the registered node's own output: the node is a root twice, once with the given gradient
  // and once (registered) with none, and must run once with the given one.
  Tensor x = tensor({1.0, 2.0}, f64());
  std::vector<bool> got_grad;
  auto node = pending_node(x, got_grad);
  Tensor y = zeros({2}, kFloat64);
  autograd::set_history(y, node);
  autograd::run_in_next_backward(node);
  autograd::backward({y}, {tensor({3.0, 4.0}, kFloat64)});
  EXPECT_EQ(got_grad, std::vector<bool>{true});
  EXPECT_VALUES(x.grad(), {3, 4});
}

TEST(Autograd, RunInNextBackwardWithRetainGraphStaysRegistered) {
  Tensor x = tensor({1.0}, f64());
  std::vector<bool> got_grad;
  autograd::run_in_next_backward(pending_node(x, got_grad));
  autograd::backward({}, {}, /*retain_graph=*/true);
  autograd::backward({});
  autograd::backward({});
  EXPECT_EQ(got_grad, (std::vector<bool>{false, false}));
  EXPECT_VALUES(x.grad(), {2});
}

TEST(Autograd, BackwardWithNoOutputs) {
  autograd::backward({});  // nothing registered: nothing to do
  Tensor x = tensor({1.0}, f64());
  std::vector<bool> got_grad;
  autograd::run_in_next_backward(pending_node(x, got_grad));
  autograd::backward({});
  EXPECT_EQ(got_grad, std::vector<bool>{false});
  EXPECT_VALUES(x.grad(), {1});
  EXPECT_THROW_MSG(autograd::run_in_next_backward(nullptr), "run_in_next_backward: got a null node");
}

TEST(Autograd, RunInNextBackwardIsPerThread) {
  Tensor x = tensor({1.0}, f64());
  std::vector<bool> got_grad;
  std::thread([&] { autograd::run_in_next_backward(pending_node(x, got_grad)); }).join();
  autograd::backward({});  // this thread has nothing registered
  EXPECT_TRUE(got_grad.empty());
}
