#include <sstream>

#include "strata/nn/container.h"
#include "strata/nn/module.h"
#include "strata/tensor/cuda.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::values;

// A small hand-made layer, so these tests depend on nothing but Module itself.
struct AffineImpl : Module {
  AffineImpl(int64_t in, int64_t out) : Module("Affine") {
    weight = register_parameter("weight", ones({out, in}));
    bias = register_parameter("bias", zeros({out}));
    steps = register_buffer("steps", zeros({1}, kLong));
  }
  Tensor forward(const Tensor& x) { return matmul(x, weight.t()) + bias; }
  void pretty_print(std::ostream& os) const override {
    os << "Affine(" << weight.size(1) << " -> " << weight.size(0) << ")";
  }
  Tensor weight, bias, steps;
};
STRATA_MODULE(Affine);

struct NetImpl : Module {
  NetImpl() : Module("Net") {
    first = register_module("first", Affine(3, 4));
    body =
        register_module("body", Sequential(Affine(4, 4), Functional([](const Tensor& x) { return relu(x); }, "ReLU")));
    last = register_module("last", Affine(4, 2));
  }
  Tensor forward(const Tensor& x) { return last(body(first(x))); }
  Affine first{nullptr}, last{nullptr};
  Sequential body{nullptr};
};
STRATA_MODULE(Net);

TEST(Module, NamedParametersAreDottedAndInOrder) {
  Net net;
  std::vector<std::string> names;
  for (auto& [name, p] : net->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"first.weight", "first.bias", "body.0.weight", "body.0.bias",
                                             "last.weight", "last.bias"}));
  EXPECT_EQ(net->parameters().size(), 6u);
  EXPECT_EQ(net->parameters(false).size(), 0u);
  EXPECT_EQ(net->named_buffers().size(), 3u);
  EXPECT_EQ(net->named_buffers()[1].first, "body.0.steps");
  EXPECT_EQ(net->num_parameters(), 3 * 4 + 4 + 4 * 4 + 4 + 4 * 2 + 2);
  EXPECT_EQ(net->children().size(), 3u);
  std::vector<std::string> modules;
  for (auto& [name, m] : net->named_modules()) modules.push_back(name + ":" + m->name());
  EXPECT_EQ(modules, (std::vector<std::string>{":Net", "first:Affine", "body:Sequential", "body.0:Affine",
                                               "body.1:ReLU", "last:Affine"}));
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, ForwardBackwardAndZeroGrad) {
  Net net;
  Tensor y = net(ones({5, 3}));
  EXPECT_EQ(y.sizes(), IntArrayRef({5, 2}));
  y.sum().backward();
  EXPECT_TRUE(net->first->weight.grad().defined());
  net->zero_grad(false);
  EXPECT_VALUES(net->first->bias.grad(), {0, 0, 0, 0});
  net->zero_grad();
  EXPECT_FALSE(net->first->weight.grad().defined());
  net->last->weight.mutable_grad() = Tensor();  // an undefined grad stays undefined
  net->zero_grad(false);
  EXPECT_FALSE(net->last->weight.grad().defined());
}

TEST(Module, TrainEvalRecurses) {
  Net net;
  EXPECT_TRUE(net->is_training());
  net->eval();
  EXPECT_FALSE(net->is_training());
  EXPECT_FALSE(net->body->children()[0]->is_training());
  net->train();
  EXPECT_TRUE(net->body->children()[1]->is_training());
}

TEST(Module, ToDtypeKeepsHandles) {
  Net net;
  net(ones({1, 3})).sum().backward();
  Tensor w = net->first->weight;
  net->to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64);  // the same handle sees the new data
  EXPECT_EQ(net->parameters()[0].dtype(), kFloat64);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(net->first->steps.dtype(), kLong);  // integer buffers stay
  EXPECT_EQ(net(ones({1, 3}, kFloat64)).dtype(), kFloat64);
  EXPECT_THROW_MSG(net->to(kLong), "Net::to: modules convert only to floating point dtypes, got Long");
}

TEST(Module, ToTheDeviceItIsOnKeepsHandlesDataAndGrads) {
  Net net;
  net(ones({1, 3})).sum().backward();
  Tensor w = net->first->weight;
  const void* data = w.data_ptr();
  const Tensor grad = w.grad();
  net->to(Device(kCPU));
  EXPECT_EQ(w.data_ptr(), data);  // nothing copied
  EXPECT_TRUE(w.grad().is_same(grad));
  EXPECT_EQ(parameters_device(*net, "test").value_or(Device(kCUDA, 3)), Device(kCPU));
  EXPECT_FALSE(parameters_device(Module("Empty"), "test").has_value());

  net->to(Device(kCPU), kFloat64);  // one copy per tensor; the dtype change drops grads as to(dtype) does
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(net->first->steps.dtype(), kLong);
  EXPECT_THROW_MSG(net->to(Device(kCPU), kLong), "Net::to: modules convert only to floating point dtypes, got Long");
}

TEST(Module, ToAGpuThatIsNotThereThrowsAndChangesNothing) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is visible: tests/cuda covers Module::to(kCUDA)";
  Net net;
  net(ones({1, 3})).sum().backward();
  const StateDict before = net->state_dict();
  std::vector<const void*> data;
  for (const Tensor& t : net->parameters()) data.push_back(t.data_ptr());
  const Tensor w = net->first->weight, grad = w.grad();
  // The stub says "this build of strata has no CUDA backend"; a CUDA build without a GPU names the device.
  EXPECT_THROW_MSG(net->to(Device(kCUDA, 0)), "CUDA");
  EXPECT_THROW_MSG(net->to(Device(kCUDA, 0), kFloat64), "CUDA");
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(net->parameters()[i].data_ptr(), data[i]);
  EXPECT_TRUE(strata::testing::same_state(net->state_dict(), before));
  EXPECT_TRUE(w.is_cpu());
  EXPECT_EQ(w.dtype(), kFloat);
  EXPECT_TRUE(w.grad().is_same(grad));
}

TEST(Module, StateDictRoundTripAndChecks) {
  Net a, b;
  {
    NoGradGuard g;
    a->first->weight.fill_(3);
    a->last->steps.fill_(7);
  }
  StateDict dict = a->state_dict();
  EXPECT_EQ(dict.size(), 9u);
  b->load_state_dict(dict);
  EXPECT_EQ(values(b->first->weight), values(a->first->weight));
  EXPECT_VALUES(b->last->steps, {7});

  StateDict missing = dict;
  missing.erase("body.0.bias");
  EXPECT_THROW_MSG(b->load_state_dict(missing), "Net::load_state_dict: missing keys: \"body.0.bias\"");
  Tensor body_bias = b->named_parameters()[3].second;  // "body.0.bias"
  {
    NoGradGuard g;
    body_bias.fill_(5);
    b->first->weight.fill_(0);
  }
  b->load_state_dict(missing, /*strict=*/false);  // as torch: a partial dict loads, the rest stays
  EXPECT_VALUES(body_bias, {5, 5, 5, 5});
  EXPECT_EQ(values(b->first->weight), values(a->first->weight));
  StateDict extra = dict;
  extra["head.weight"] = zeros({1});
  EXPECT_THROW_MSG(b->load_state_dict(extra), "unexpected keys: \"head.weight\"");
  b->load_state_dict(extra, /*strict=*/false);
  StateDict wrong = dict;
  wrong["last.weight"] = zeros({3, 4});
  {
    NoGradGuard g;
    b->first->weight.fill_(1);
  }
  EXPECT_THROW_MSG(b->load_state_dict(wrong),
                   "size mismatch for \"last.weight\": the state dict has [3, 4], the module has [2, 4]");
  EXPECT_VALUES(b->first->weight.select(0, 0), {1, 1, 1});  // nothing was written before the check failed
}

TEST(Module, RegistrationErrors) {
  Module m("Custom");
  m.register_parameter("w", zeros({2}));
  EXPECT_THROW_MSG(m.register_parameter("w", zeros({2})), "Custom::register_parameter: \"w\" is already registered");
  EXPECT_THROW_MSG(m.register_buffer("a.b", zeros({2})), "name must be non-empty and contain no dot, got \"a.b\"");
  EXPECT_THROW_MSG(m.register_parameter("i", zeros({2}, kLong)), "must be floating point to require grad, got Long");
  Tensor x = ones({2}, requires_grad());
  EXPECT_THROW_MSG(m.register_parameter("h", x * 2), "parameter \"h\" has history");
  EXPECT_THROW_MSG(m.register_module("s", std::shared_ptr<Module>()), "module \"s\" is null");
  EXPECT_THROW_MSG(m.named_modules(), "Custom::named_modules: the module must be owned by a shared_ptr");
  Affine empty{nullptr};
  EXPECT_THROW_MSG(empty->forward(x), "the module is empty");
  EXPECT_THROW_MSG(Sequential()->forward(x), "Sequential::forward: the Sequential is empty");
}

TEST(Module, PrintsTheTree) {
  Net net;
  std::ostringstream os;
  os << *net;
  EXPECT_EQ(os.str(),
            "Net(\n"
            "  (first): Affine(3 -> 4)\n"
            "  (body): Sequential(\n"
            "    (0): Affine(4 -> 4)\n"
            "    (1): ReLU\n"
            "  )\n"
            "  (last): Affine(4 -> 2)\n"
            ")");
}

TEST(Module, SharedChildListsParametersOnce) {
  Module parent("Parent");
  Affine shared(2, 2);
  parent.register_module("a", shared);
  parent.register_module("b", shared);
  EXPECT_EQ(parent.parameters().size(), 2u);
  EXPECT_EQ(parent.named_parameters()[0].first, "a.weight");
}

}  // namespace
}  // namespace strata::nn
