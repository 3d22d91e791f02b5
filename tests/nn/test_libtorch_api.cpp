// What pytorch/examples' C++ programs (mnist, dcgan, regression, autograd) use beyond the layers
// themselves: the losses they call (values by hand, gradients by gradcheck), leaky_relu, the
// Options classes of the older layers, named_parameters() as an ordered dict, torch::save/load's forms,
// optimizers made from a bare learning rate, and DataLoaderOptions with workers.

#include <cmath>
#include <sstream>
#include <tuple>

#include "strata/strata.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::leaf;
using strata::testing::leaf_in;
using strata::testing::values;

std::string printed(const Module& m) {
  std::ostringstream os;
  m.pretty_print(os);
  return os.str();
}

TEST(LibtorchApi, RegressionLossesByHand) {
  Tensor x = tensor({0.0, 0.5, 3.0}, kDouble), y = tensor({0.2, 0.0, 0.0}, kDouble);  // d = -0.2, 0.5, 3
  EXPECT_VALUES(l1_loss(x, y), {(0.2 + 0.5 + 3.0) / 3}, 1e-12);
  EXPECT_VALUES(smooth_l1_loss(x, y, kSum), {0.5 * 0.04 + 0.5 * 0.25 + 2.5}, 1e-12);
  EXPECT_VALUES(smooth_l1_loss(x, y, kNone, 0.4), {0.5 * 0.04 / 0.4, 0.5 - 0.2, 3 - 0.2}, 1e-12);
  EXPECT_VALUES(smooth_l1_loss(x, y, kSum, 0.0), {3.7}, 1e-12);  // beta 0: l1_loss
  EXPECT_VALUES(huber_loss(x, y, kNone, 2.0), {0.02, 0.125, 2 * (3 - 1)}, 1e-12);
  EXPECT_THROW_MSG(smooth_l1_loss(x, y, kMean, -1), "smooth_l1_loss: beta must be non-negative, got -1");
  EXPECT_THROW_MSG(huber_loss(x, y, kMean, 0), "huber_loss: delta must be positive, got 0");
}

TEST(LibtorchApi, BinaryCrossEntropyByHand) {
  Tensor p = tensor({0.9, 0.2, 1.0}, kDouble), t = tensor({1.0, 0.0, 0.0}, kDouble);
  // -log(0.9), -log(0.8), and log(0) clamped at -100 as torch
  EXPECT_VALUES(binary_cross_entropy(p, t, {}, kNone), {-std::log(0.9), -std::log(0.8), 100}, 1e-12);
  Tensor w = tensor({2.0, 1.0, 0.0}, kDouble);
  EXPECT_VALUES(binary_cross_entropy(p, t, w, kSum), {-2 * std::log(0.9) - std::log(0.8)}, 1e-12);
  EXPECT_THROW_MSG(binary_cross_entropy(tensor({1.5}), tensor({1.0})),
                   "binary_cross_entropy: all elements of input should be between 0 and 1");
  EXPECT_THROW_MSG(binary_cross_entropy(tensor({0.5}), tensor({1.0, 0.0})),
                   "binary_cross_entropy: target of shape [2] does not match input of shape [1]");
  Tensor logits = tensor({-30.0, 0.0, 40.0}, kDouble), target = tensor({1.0, 0.5, 0.0}, kDouble);
  // Stable where log(sigmoid) would overflow: -log(sigmoid(-30)) = 30 + log1p(e^-30), ...
  EXPECT_VALUES(binary_cross_entropy_with_logits(logits, target, {}, {}, kNone),
                {30 + std::log1p(std::exp(-30.0)), std::log(2.0), 40 + std::log1p(std::exp(-40.0))}, 1e-12);
  Tensor pos = full({3}, 3.0, kDouble);  // positives count 3 times
  EXPECT_VALUES(
      binary_cross_entropy_with_logits(logits, target, {}, pos, kNone),
      {3 * (30 + std::log1p(std::exp(-30.0))), 0.5 * 0 + 2.0 * std::log(2.0), 40 + std::log1p(std::exp(-40.0))}, 1e-12);
}

TEST(LibtorchApi, LossAndActivationGradients) {
  manual_seed(3);
  Tensor target = randn({3, 4}, kDouble), probs = rand({3, 4}, kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return l1_loss(in[0], target); }, {leaf({3, 4})});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return smooth_l1_loss(in[0], target, kSum, 0.7); }, {leaf({3, 4})});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return huber_loss(in[0], target, kMean, 0.6); }, {leaf({3, 4})});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return binary_cross_entropy(in[0], probs, in[1]); },
                   {leaf_in({3, 4}, 0.05, 0.95), leaf({3, 4})});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return binary_cross_entropy_with_logits(in[0], probs, {}, in[1]); },
                   {leaf({3, 4}), leaf_in({4}, 0.5, 2)});
  EXPECT_GRADCHECK([](const tensor_list& in) { return leaky_relu(in[0].t(), 0.2); }, {leaf({4, 3})});
  EXPECT_GRADGRADCHECK([&](const tensor_list& in) { return binary_cross_entropy_with_logits(in[0], probs); },
                       {leaf({3, 4})});
  EXPECT_VALUES(leaky_relu(tensor({-2.0, 0.0, 3.0})), {-0.02, 0, 3});
  EXPECT_THROW_MSG(leaky_relu(tensor({1, 2})), "leaky_relu: expected a floating point tensor, got Long");
}

TEST(LibtorchApi, LossModulesTakeLibtorchOptions) {
  Tensor x = tensor({0.0, 0.5, 3.0}, kDouble), y = tensor({0.2, 0.0, 0.0}, kDouble);
  EXPECT_VALUES(MSELoss(MSELossOptions(kSum))(x, y), {0.04 + 0.25 + 9}, 1e-12);
  EXPECT_VALUES(MSELoss(kSum)(x, y), {0.04 + 0.25 + 9}, 1e-12);
  EXPECT_VALUES(L1Loss(L1LossOptions().reduction(kSum))(x, y), {3.7}, 1e-12);
  EXPECT_VALUES(SmoothL1Loss(SmoothL1LossOptions().beta(0.4).reduction(kSum))(x, y), {0.05 + 0.3 + 2.8}, 1e-12);
  EXPECT_VALUES(HuberLoss(HuberLossOptions().delta(2.0).reduction(kSum))(x, y), {0.02 + 0.125 + 4}, 1e-12);
  Tensor p = tensor({0.9, 0.2}, kDouble), t = tensor({1.0, 0.0}, kDouble);
  EXPECT_VALUES(BCELoss()(p, t), {-(std::log(0.9) + std::log(0.8)) / 2}, 1e-12);
  BCELoss weighted(BCELossOptions().weight(tensor({2.0, 0.0})).reduction(kSum));
  EXPECT_EQ(weighted->named_buffers().keys(), std::vector<std::string>{"weight"});
  weighted->to(kDouble);
  EXPECT_VALUES(weighted(p, t), {-2 * std::log(0.9)}, 1e-12);
  BCEWithLogitsLoss with_logits(BCEWithLogitsLossOptions().pos_weight(tensor({2.0, 2.0}, kDouble)));
  EXPECT_VALUES(with_logits(tensor({0.0, 0.0}, kDouble), t), {(2 * std::log(2.0) + std::log(2.0)) / 2}, 1e-12);
  EXPECT_VALUES(CrossEntropyLoss(CrossEntropyLossOptions().reduction(kSum).ignore_index(1))(
                    tensor({{0.0, 0.0}, {0.0, 0.0}}, kDouble), tensor({0, 1})),
                {std::log(2.0)}, 1e-12);
  EXPECT_VALUES(NLLLoss(NLLLossOptions().reduction(kSum))(tensor({{-1.0, -2.0}}, kDouble), tensor({1})), {2}, 1e-12);
  EXPECT_EQ(printed(*BCEWithLogitsLoss()), "BCEWithLogitsLoss()");
  EXPECT_THROW_MSG(BCELoss(BCELossOptions().weight(tensor({1, 2}))), "BCELoss: weight must be a floating point tensor");
  EXPECT_THROW_MSG(HuberLoss(HuberLossOptions().delta(-1)), "HuberLoss: delta must be positive, got -1");
}

TEST(LibtorchApi, ActivationModules) {
  Tensor x = tensor({-2.0, 0.5});
  EXPECT_VALUES(LeakyReLU(LeakyReLUOptions().negative_slope(0.2))(x), {-0.4, 0.5});
  EXPECT_EQ(printed(*LeakyReLU(LeakyReLUOptions().negative_slope(0.2))), "LeakyReLU(negative_slope=0.2)");
  EXPECT_VALUES(Softmax(SoftmaxOptions(0))(tensor({0.0, 0.0})), {0.5, 0.5});
  EXPECT_VALUES(LogSoftmax(1)(tensor({{0.0, 0.0}})), {-std::log(2.0), -std::log(2.0)});
  EXPECT_EQ(printed(*LogSoftmax(1)), "LogSoftmax(dim=1)");
  EXPECT_EQ(printed(*GELU(GELUOptions().approximate("tanh"))), "GELU(approximate='tanh')");
  Tensor y = tensor({-1.0, 2.0});
  Tensor r = ReLU(ReLUOptions(true))(y);  // inplace: y itself is overwritten
  EXPECT_VALUES(y, {0, 2});
  EXPECT_EQ(r.data_ptr(), y.data_ptr());
  EXPECT_EQ(printed(*ReLU(true)), "ReLU(inplace=true)");
}

TEST(LibtorchApi, OlderLayersTakeOptions) {
  Dropout drop(DropoutOptions().p(0.25));
  EXPECT_EQ(drop->options.p(), 0.25);
  EXPECT_EQ(printed(*drop), "Dropout(p=0.25)");
  EXPECT_EQ(printed(*Dropout2d(Dropout2dOptions(0.1).inplace(true))), "Dropout2d(p=0.1, inplace=true)");
  EXPECT_THROW_MSG(Dropout(DropoutOptions(1.5)), "Dropout: probability has to be between 0 and 1, but got 1.5");
  Tensor ones4 = ones({4, 8});
  EXPECT_EQ(values(functional::dropout(ones4, functional::DropoutFuncOptions().p(0.5).training(false))), values(ones4));
  LayerNorm ln(LayerNormOptions({2, 3}).eps(1e-3).elementwise_affine(false));
  EXPECT_EQ(ln->options.eps(), 1e-3);
  EXPECT_EQ(ln->parameters().size(), 0u);
  EXPECT_EQ(LayerNormImpl::count_parameters(LayerNormOptions({2, 3})), 12);
  EXPECT_EQ(printed(*ln), "LayerNorm([2, 3], eps=0.001, elementwise_affine=false)");
  EXPECT_EQ(LayerNorm(5)->options.normalized_shape(), std::vector<int64_t>{5});
}

TEST(LibtorchApi, EmbeddingPaddingRowStartsAtZeroAndGetsNoGradient) {
  Embedding emb(EmbeddingOptions(5, 3).padding_idx(-1));  // counted from the end: row 4
  EXPECT_EQ(*emb->options.padding_idx(), 4);
  EXPECT_EQ(values(emb->weight[4]), (std::vector<double>{0, 0, 0}));
  Tensor idx = tensor({{4, 1}, {1, 4}});
  emb(idx).sum().backward();
  EXPECT_EQ(values(emb->weight.grad()[4]), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(values(emb->weight.grad()[1]), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(printed(*emb), "Embedding(num_embeddings=5, embedding_dim=3, padding_idx=4)");
  EXPECT_THROW_MSG(Embedding(EmbeddingOptions(5, 3).padding_idx(5)),
                   "Embedding: padding_idx must be within num_embeddings (5), got 5");
  Embedding frozen = Embedding::from_pretrained(ones({3, 2}), EmbeddingFromPretrainedOptions().padding_idx(0));
  EXPECT_EQ(*frozen->options.padding_idx(), 0);
  EXPECT_EQ(values(frozen->weight[0]), (std::vector<double>{1, 1}));  // the given values stay
}

TEST(LibtorchApi, NamedParametersIsAnOrderedDict) {
  Sequential net(Linear(2, 3), ReLU(), Linear(3, 1));
  auto params = net->named_parameters();
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(params["2.weight"].sizes(), IntArrayRef({1, 3}));
  EXPECT_TRUE(params.contains("0.bias"));
  EXPECT_EQ(params.find("1.weight"), nullptr);
  EXPECT_THROW_MSG(params["1.weight"], "OrderedDict: no such key: '1.weight'");
  EXPECT_EQ(params[size_t{1}].key(), "0.bias");
  EXPECT_EQ(params[size_t{1}].value().sizes(), IntArrayRef({3}));
  size_t name_chars = 0;
  int64_t elements = 0;
  for (auto& [name, p] : params) {
    name_chars += name.size();
    elements += p.numel();
  }
  EXPECT_EQ(name_chars, 8u + 6u + 8u + 6u);
  EXPECT_EQ(elements, 6 + 3 + 3 + 1);
  EXPECT_THROW_MSG(params.insert("0.bias", Tensor()), "OrderedDict: key '0.bias' already defined");
}

class LibtorchSaveLoad : public strata::testing::TempFolderTest {};

TEST_F(LibtorchSaveLoad, HoldersOptimizersAndTensors) {
  manual_seed(1);
  Linear a(3, 2), b(3, 2);
  strata::save(a, file("a.safetensors"));
  strata::load(b, file("a.safetensors"));
  EXPECT_EQ(values(b->weight), values(a->weight));

  optim::Adam opt(a->parameters(), optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  a(ones({1, 3})).sum().backward();
  opt.step();
  strata::save(opt, file("opt.safetensors"));
  optim::Adam restored(b->parameters(), optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  strata::load(restored, file("opt.safetensors"));
  EXPECT_TRUE(strata::testing::same_state(restored.state_dict(), opt.state_dict()));

  Tensor t = randn({2, 3}), u;
  strata::save((t + 1.0) / 2.0, file(str("sample-", 1, ".safetensors")));
  strata::load(u, file("sample-1.safetensors"));
  EXPECT_EQ(values(u), values((t + 1.0) / 2.0));
  EXPECT_THROW_MSG(strata::load(u, file("a.safetensors")), "holds 2 tensors (the first named 'bias'), not the one");
}

TEST(LibtorchApi, OptimizersFromABareLearningRate) {
  Linear fc(4, 1);
  optim::SGD sgd(fc->parameters(), 0.1);  // as regression.cpp
  optim::Adam adam(fc->parameters(), 1e-3);
  EXPECT_EQ(sgd.param_groups()[0].options().get_lr(), 0.1);
  EXPECT_EQ(adam.param_groups()[0].options().get_lr(), 1e-3);
}

// Example i is data [i] with target i; example fail_at throws.
struct Numbers : data::Dataset {
  int64_t size() const override { return 23; }
  data::Example<> get(int64_t i) const override {
    STRATA_CHECK(i != fail_at, "no example ", i);
    return {full({1}, static_cast<double>(i)), full({}, i, kLong)};
  }
  int64_t fail_at = -1;
};

std::vector<double> epoch_targets(data::DataLoader& loader) {
  std::vector<double> seen;
  for (data::Example<>& batch : loader)
    for (double v : values(batch.target)) seen.push_back(v);
  return seen;
}

TEST(LibtorchApi, DataLoaderWorkersKeepTheOrder) {
  const auto options = data::DataLoaderOptions(4).shuffle(true).seed(9);
  data::DataLoader alone(Numbers(), options), parallel(Numbers(), data::DataLoaderOptions(options).workers(3));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    alone.set_epoch(epoch);
    parallel.set_epoch(epoch);
    EXPECT_EQ(epoch_targets(parallel), epoch_targets(alone)) << "epoch " << epoch;
  }
  int64_t first_batches = 0;
  for (auto it = parallel.begin(); it != parallel.end() && first_batches < 2; ++it) ++first_batches;  // leave early
  EXPECT_EQ(first_batches, 2);
  Numbers broken;
  broken.fail_at = 13;
  data::DataLoader failing(broken, data::DataLoaderOptions(4).workers(2));
  EXPECT_THROW_MSG(epoch_targets(failing), "no example 13");
  EXPECT_THROW_MSG(data::DataLoader(Numbers(), data::DataLoaderOptions(4).workers(-1)),
                   "DataLoader: workers must be non-negative, got -1");
}

}  // namespace
}  // namespace strata::nn
