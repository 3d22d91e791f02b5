#include <cmath>
#include <numbers>
#include <sstream>

#include "strata/nn/activation.h"
#include "strata/nn/container.h"
#include "strata/nn/dropout.h"
#include "strata/nn/embedding.h"
#include "strata/nn/functional.h"
#include "strata/nn/linear.h"
#include "strata/nn/loss.h"
#include "strata/nn/normalization.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::values;

std::string printed(const Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

void set(const Tensor& t, std::initializer_list<double> v) {
  NoGradGuard g;
  Tensor(t).copy_(tensor(v, t.dtype()).reshape(t.sizes()));
}

// ---- Linear ----

TEST(NnLayers, CountParametersMatchesTheBuiltLayer) {
  // What LayerSpec::of counts without building (pipeline partitioning) is what the constructor registers.
  EXPECT_EQ(LinearImpl::count_parameters(7, 3), Linear(7, 3)->num_parameters());
  EXPECT_EQ(LinearImpl::count_parameters(7, 3, false), Linear(7, 3, false)->num_parameters());
  EXPECT_EQ(LinearImpl::count_parameters(LinearOptions(5, 2).bias(false)),
            Linear(LinearOptions(5, 2).bias(false))->num_parameters());
  EXPECT_EQ(EmbeddingImpl::count_parameters(11, 4), Embedding(11, 4)->num_parameters());
  EXPECT_EQ(LayerNormImpl::count_parameters(6), LayerNorm(6)->num_parameters());
  EXPECT_EQ(LayerNormImpl::count_parameters(6, 1e-5, false), LayerNorm(6, 1e-5, false)->num_parameters());
  EXPECT_EQ(LayerNormImpl::count_parameters(std::vector<int64_t>{2, 3}),
            LayerNorm(std::vector<int64_t>{2, 3})->num_parameters());
}

TEST(NnLayers, LinearComputesXWTransposePlusBias) {
  Linear fc(3, 2);
  set(fc->weight, {1, 2, 3, 4, 5, 6});
  set(fc->bias, {0.5, -1});
  EXPECT_VALUES(fc(tensor({1.0, 0.0, -1.0, 2.0, 1.0, 0.0}).reshape({2, 3})), {-1.5, -3, 4.5, 12});
  EXPECT_VALUES(fc(tensor({1.0, 0.0, -1.0})), {-1.5, -3});  // 1-D input
  Tensor y = fc(ones({4, 5, 3}));                           // batch dims are kept
  EXPECT_EQ(y.sizes(), IntArrayRef({4, 5, 2}));
  EXPECT_VALUES(y.select(0, 3).select(0, 4), {6.5, 14});
}

TEST(NnLayers, LinearOptionsAndParameters) {
  Linear fc(784, 256);
  EXPECT_EQ(fc->weight.sizes(), IntArrayRef({256, 784}));
  EXPECT_EQ(fc->bias.sizes(), IntArrayRef({256}));
  EXPECT_EQ(printed(*fc), "Linear(in_features=784, out_features=256, bias=true)");
  Linear head(LinearOptions(256, 10).bias(false));
  EXPECT_FALSE(head->bias.defined());
  EXPECT_EQ(head->named_parameters().size(), 1u);
  EXPECT_EQ(head->named_parameters()[0].first, "weight");
  EXPECT_EQ(printed(*head), "Linear(in_features=256, out_features=10, bias=false)");
  EXPECT_EQ(printed(*Linear(4, 2, false)), "Linear(in_features=4, out_features=2, bias=false)");
}

TEST(NnLayers, LinearInitBoundsAreTorchs) {
  manual_seed(0);
  Linear fc(100, 400);
  const double bound = 1 / std::sqrt(100.0);  // weight and bias: U(-1/sqrt(in), 1/sqrt(in))
  EXPECT_LE(fc->weight.abs().max().item<double>(), bound);
  EXPECT_GT(fc->weight.abs().max().item<double>(), 0.99 * bound);
  EXPECT_LE(fc->bias.abs().max().item<double>(), bound);
  EXPECT_GT(fc->bias.abs().max().item<double>(), 0.9 * bound);
  Tensor before = fc->weight.clone();
  fc->reset_parameters();
  EXPECT_NE(values(fc->weight), values(before));
}

TEST(NnLayers, LinearGradcheck) {
  Linear fc(3, 2);
  fc->to(kFloat64);
  Tensor x = leaf({2, 4, 3});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return fc(in[0]); }, {x, fc->weight, fc->bias});
}

TEST(NnLayers, LinearBadArguments) {
  Linear fc(784, 256);
  EXPECT_THROW_MSG(fc(ones({2, 783})), "Linear: expected input with last dim 784, got shape [2, 783]");
  EXPECT_THROW_MSG(fc(ones({})), "Linear: expected input with last dim 784, got shape []");
  EXPECT_THROW_MSG(Linear(-1, 2), "Linear: in_features and out_features must be non-negative, got -1 and 2");
}

// ---- Embedding ----

TEST(NnLayers, EmbeddingLooksUpRows) {
  Embedding emb(4, 2);
  set(emb->weight, {0, 1, 10, 11, 20, 21, 30, 31});
  EXPECT_VALUES(emb(tensor({2, 0, 2})), {20, 21, 0, 1, 20, 21});
  Tensor y = emb(tensor({3, 1, 0, 2}).reshape({2, 2}));
  EXPECT_EQ(y.sizes(), IntArrayRef({2, 2, 2}));
  EXPECT_VALUES(y, {30, 31, 10, 11, 0, 1, 20, 21});
  EXPECT_EQ(printed(*emb), "Embedding(num_embeddings=4, embedding_dim=2)");
}

TEST(NnLayers, EmbeddingInitAndGradcheck) {
  manual_seed(0);
  Embedding big(1000, 200);  // N(0, 1), as torch
  EXPECT_NEAR(big->weight.mean().item<double>(), 0, 0.01);
  EXPECT_NEAR(big->weight.std().item<double>(), 1, 0.01);
  Embedding emb(5, 3);
  emb->to(kFloat64);
  Tensor idx = tensor({4, 1, 4, 0});  // a repeated index accumulates
  EXPECT_GRADCHECK([&](const tensor_list&) { return emb(idx); }, {emb->weight});
}

TEST(NnLayers, EmbeddingBadIndices) {
  Embedding emb(4, 2);
  EXPECT_THROW_MSG(emb(tensor({1.0, 2.0})), "Expected dtype int32 or int64 for indices, got Float");
  EXPECT_THROW_MSG(emb(tensor({1, 4})), "embedding: index 4 is out of range for num_embeddings V = 4");
  EXPECT_THROW_MSG(emb(tensor({-1})), "index -1 is out of range");
}

// max_norm renorms, in place and before the lookup, each row looked up (once, however often) whose norm
// exceeds it to max_norm / (norm + 1e-7) times itself, as torch; the other rows stay as they were.
TEST(NnLayers, EmbeddingMaxNormRenormsTheRowsLookedUp) {
  Embedding emb(EmbeddingOptions(4, 2).max_norm(5.0));
  emb->to(kFloat64);
  set(emb->weight, {3, 4, 6, 8, 0.3, 0.4, 30, 40});  // norms 5, 10, 0.5, 50
  Tensor y = emb(tensor({1, 1, 2, 0}));
  const double s = 5.0 / (10 + 1e-7);
  EXPECT_VALUES(emb->weight, {3, 4, 6 * s, 8 * s, 0.3, 0.4, 30, 40}, 1e-15);
  EXPECT_VALUES(y, {6 * s, 8 * s, 6 * s, 8 * s, 0.3, 0.4, 3, 4}, 1e-15);
  EXPECT_EQ(printed(*emb), "Embedding(num_embeddings=4, embedding_dim=2, max_norm=5)");
  // The 1-norm, through F::embedding, changes the table it is given.
  Tensor table = tensor({1.0, -3.0, 0.5, 0.5}, kFloat64).reshape({2, 2});
  functional::embedding(tensor({0}), table, functional::EmbeddingFuncOptions().max_norm(2.0).norm_type(1));
  EXPECT_VALUES(table, {2.0 / (4 + 1e-7), -6.0 / (4 + 1e-7), 0.5, 0.5}, 1e-15);
  EXPECT_THROW_MSG(embedding_renorm_(table, tensor({2}), 1, 2), "embedding_renorm_: index 2 is out of range");
}

// scale_grad_by_freq divides each row's gradient by how often the batch looked it up; the padding row gets none.
TEST(NnLayers, EmbeddingScaleGradByFreqAndPadding) {
  Embedding emb(EmbeddingOptions(4, 2).scale_grad_by_freq(true).padding_idx(3));
  emb->to(kFloat64);
  Tensor idx = tensor({1, 2, 1, 1, 3});
  Tensor g = tensor({1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10}, kFloat64).reshape({5, 2});
  emb(idx).backward(g);
  EXPECT_VALUES(emb->weight.grad(), {0, 0, (1 + 5 + 7) / 3.0, (2 + 6 + 8) / 3.0, 3, 4, 0, 0}, 1e-15);
  EXPECT_EQ(printed(*emb), "Embedding(num_embeddings=4, embedding_dim=2, padding_idx=3, scale_grad_by_freq=true)");
  // F::embedding counts a negative padding_idx from the end, as libtorch's.
  Tensor table = zeros({5, 3}, kFloat64).requires_grad_(true);
  functional::embedding(tensor({4, 1, 4, 0}), table, functional::EmbeddingFuncOptions().padding_idx(-1))
      .sum()
      .backward();
  EXPECT_VALUES(table.grad(), {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_THROW_MSG(Embedding(EmbeddingOptions(4, 2).sparse(true)), "Embedding: sparse gradients are not supported");
  EXPECT_THROW_MSG(functional::embedding(idx, table, functional::EmbeddingFuncOptions().padding_idx(5)),
                   "embedding: padding_idx must be within num_embeddings (5), got 5");
}

// ---- LayerNorm ----

TEST(NnLayers, LayerNormValues) {
  LayerNorm ln(2);
  EXPECT_VALUES(ln->weight, {1, 1});
  EXPECT_VALUES(ln->bias, {0, 0});
  const double s = 1 / std::sqrt(1 + 1e-5);  // mean 2, biased variance 1
  EXPECT_VALUES(ln(tensor({1.0, 3.0, 0.0, 0.0}).reshape({2, 2})), {-s, s, 0, 0});
  set(ln->weight, {2, 3});
  set(ln->bias, {1, -1});
  EXPECT_VALUES(ln(tensor({1.0, 3.0})), {1 - 2 * s, -1 + 3 * s});
  EXPECT_EQ(printed(*ln), "LayerNorm([2], eps=1e-05, elementwise_affine=true)");

  LayerNorm plain(std::vector<int64_t>{2, 2}, 1e-6, false);
  EXPECT_TRUE(plain->parameters().empty());
  EXPECT_EQ(printed(*plain), "LayerNorm([2, 2], eps=1e-06, elementwise_affine=false)");
  EXPECT_VALUES(plain(tensor({0.0, 0.0, 2.0, 2.0}).reshape({1, 2, 2})),
                {-1 / std::sqrt(1 + 1e-6), -1 / std::sqrt(1 + 1e-6), 1 / std::sqrt(1 + 1e-6), 1 / std::sqrt(1 + 1e-6)});
}

TEST(NnLayers, LayerNormGradcheckAndErrors) {
  LayerNorm ln(std::vector<int64_t>{2, 3});
  ln->to(kFloat64);
  set(ln->weight, {1, 2, 3, -1, 0.5, 2});
  set(ln->bias, {0, 1, 0, -1, 0, 1});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return ln(in[0]); }, {leaf({4, 2, 3}), ln->weight, ln->bias});
  EXPECT_THROW_MSG(ln(ones({2, 4}, kFloat64)),
                   "layer_norm: normalized_shape [2, 3] does not match the trailing dims of input shape [2, 4]");
  EXPECT_THROW_MSG(LayerNorm(std::vector<int64_t>{}),
                   "LayerNorm: normalized_shape must be a non-empty list of positive sizes, got []");
  EXPECT_THROW_MSG(LayerNorm(0), "positive sizes, got [0]");
  EXPECT_THROW_MSG(LayerNorm(4, -1.0), "LayerNorm: eps must be non-negative, got -1");
}

// ---- Dropout ----

TEST(NnLayers, DropoutTrainAndEval) {
  manual_seed(0);
  Dropout drop(0.25);
  EXPECT_TRUE(drop->is_training());
  Tensor x = full({200, 500}, 3.0);
  Tensor y = drop(x);
  const auto v = values(y);
  int64_t zeros_seen = 0;
  for (double e : v) {
    if (e == 0)
      ++zeros_seen;
    else
      EXPECT_FLOAT_EQ(e, 4.0);  // survivors scaled by 1 / (1 - p)
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / v.size(), 0.25, 0.005);
  EXPECT_NE(values(drop(x)), v);  // a fresh mask per call
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x));
  EXPECT_EQ(printed(*drop), "Dropout(p=0.25)");
  EXPECT_EQ(printed(*Dropout()), "Dropout(p=0.5)");
}

TEST(NnLayers, DropoutGradcheckAndErrors) {
  Dropout drop(0.5);
  // The mask must be the same in every forward that gradcheck runs: reseed before each.
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        manual_seed(11);
        return drop(in[0]);
      },
      {leaf({3, 4})});
  EXPECT_THROW_MSG(Dropout(-0.1), "Dropout: probability has to be between 0 and 1, but got -0.1");
  EXPECT_THROW_MSG(Dropout(1.5), "but got 1.5");
}

// ---- activations ----

TEST(NnLayers, ActivationsValuesAndPrinting) {
  Tensor x = tensor({-1.0, 0.0, 1.0, 2.0}, kFloat64);
  EXPECT_VALUES(ReLU()(x), {0, 0, 1, 2});
  EXPECT_VALUES(Tanh()(x), {std::tanh(-1.0), 0, std::tanh(1.0), std::tanh(2.0)});
  EXPECT_VALUES(Sigmoid()(x), {1 / (1 + std::exp(1.0)), 0.5, 1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(-2.0))});
  auto exact = [](double v) { return v * 0.5 * (1 + std::erf(v / std::sqrt(2.0))); };
  auto approx = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  };
  EXPECT_VALUES(GELU()(x), {exact(-1), 0, exact(1), exact(2)});
  EXPECT_VALUES(GELU("tanh")(x), {approx(-1), 0, approx(1), approx(2)});
  EXPECT_EQ(printed(*ReLU()), "ReLU()");
  EXPECT_EQ(printed(*GELU()), "GELU()");
  EXPECT_EQ(printed(*GELU("tanh")), "GELU(approximate='tanh')");
  EXPECT_EQ(printed(*Tanh()), "Tanh()");
  EXPECT_EQ(printed(*Sigmoid()), "Sigmoid()");
  EXPECT_THROW_MSG(GELU("exact"), "GELU: approximate must be \"none\" or \"tanh\", got \"exact\"");
}

TEST(NnLayers, ActivationsGradcheck) {
  Tensor x = tensor({-1.5, -0.3, 0.4, 2.0}, f64());  // away from relu's kink
  EXPECT_GRADCHECK([](const tensor_list& in) { return ReLU()(in[0]); }, {x});
  EXPECT_GRADCHECK([](const tensor_list& in) { return GELU()(in[0]); }, {x});
  EXPECT_GRADCHECK([](const tensor_list& in) { return GELU("tanh")(in[0]); }, {x});
  EXPECT_GRADCHECK([](const tensor_list& in) { return Tanh()(in[0]); }, {x});
  EXPECT_GRADCHECK([](const tensor_list& in) { return Sigmoid()(in[0]); }, {x});
}

TEST(NnLayers, SequentialOfLayersPrintsTheTree) {
  Sequential mlp(Linear(4, 8), ReLU(), Dropout(0.1), Linear(8, 2), LayerNorm(2));
  EXPECT_EQ(mlp(ones({3, 4})).sizes(), IntArrayRef({3, 2}));
  EXPECT_EQ(printed(*mlp),
            "Sequential(\n"
            "  (0): Linear(in_features=4, out_features=8, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Dropout(p=0.1)\n"
            "  (3): Linear(in_features=8, out_features=2, bias=true)\n"
            "  (4): LayerNorm([2], eps=1e-05, elementwise_affine=true)\n"
            ")");
}

// ---- losses ----

TEST(NnLayers, LossModulesMatchHandValues) {
  Tensor logits = tensor({1.0, 2.0, 3.0}).reshape({1, 3});
  Tensor target = tensor({2});
  EXPECT_VALUES(CrossEntropyLoss()(logits, target), {std::log(1 + std::exp(-1.0) + std::exp(-2.0))});
  EXPECT_VALUES(functional::cross_entropy(logits, target), {std::log(1 + std::exp(-1.0) + std::exp(-2.0))});
  // libtorch's argument order: F::embedding(input, weight).
  const Tensor table = arange(6, kFloat).reshape({3, 2});
  EXPECT_VALUES(functional::embedding(tensor({2, 0}), table), {4, 5, 0, 1});

  Tensor log_probs = tensor({-1.0, -2.0, -0.5, -3.0}).reshape({2, 2});
  EXPECT_VALUES(NLLLoss()(log_probs, tensor({1, 0})), {1.25});
  EXPECT_VALUES(NLLLoss(LossOptions{.reduction = Reduction::Sum})(log_probs, tensor({1, 0})), {2.5});
  EXPECT_VALUES(NLLLoss(LossOptions{.ignore_index = 0})(log_probs, tensor({1, 0})), {2});
  EXPECT_VALUES(MSELoss()(tensor({1.0, 2.0}), tensor({0.0, 0.0})), {2.5});
  EXPECT_VALUES(MSELoss(Reduction::None)(tensor({1.0, 2.0}), tensor({0.0, 0.0})), {1, 4});
  EXPECT_EQ(printed(*CrossEntropyLoss()), "CrossEntropyLoss()");
  EXPECT_EQ(printed(*NLLLoss()), "NLLLoss()");
  EXPECT_EQ(printed(*MSELoss()), "MSELoss()");
}

TEST(NnLayers, LossClassWeightsAreABuffer) {
  CrossEntropyLoss weighted(LossOptions{.weight = tensor({1.0, 2.0, 3.0})});
  ASSERT_EQ(weighted->named_buffers().size(), 1u);
  EXPECT_EQ(weighted->named_buffers()[0].first, "weight");
  weighted->to(kFloat64);
  EXPECT_EQ(weighted->options.weight().dtype(), kFloat64);  // the options see the converted buffer
  Tensor logits = tensor({0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, kFloat64).reshape({2, 3});
  // Uniform logits: each sample's loss is log 3, and the weighted mean stays log 3.
  EXPECT_VALUES(weighted(logits, tensor({0, 2})), {std::log(3.0)});
}

TEST(NnLayers, LossGradcheckAndErrors) {
  Tensor target = tensor({0, 2, 1});
  CrossEntropyLoss ce(LossOptions{.label_smoothing = 0.1});
  EXPECT_GRADCHECK([&](const tensor_list& in) { return ce(in[0], target); }, {leaf({3, 4})});
  NLLLoss nll;
  EXPECT_GRADCHECK([&](const tensor_list& in) { return nll(log_softmax(in[0], 1), target); }, {leaf({3, 4})});
  MSELoss mse;
  EXPECT_GRADCHECK([&](const tensor_list& in) { return mse(in[0], in[1]); }, {leaf({2, 3}), leaf({2, 3})});

  EXPECT_THROW_MSG(CrossEntropyLoss(LossOptions{.label_smoothing = 1.5}),
                   "CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got 1.5");
  EXPECT_THROW_MSG(NLLLoss(LossOptions{.label_smoothing = 0.1}),
                   "NLLLoss: label_smoothing is a CrossEntropyLoss option");
  EXPECT_THROW_MSG(NLLLoss(LossOptions{.weight = ones({2, 2})}),
                   "NLLLoss: weight must be a 1-D floating point tensor of per-class weights, got Float of shape "
                   "[2, 2]");
  EXPECT_THROW_MSG(CrossEntropyLoss()(ones({2, 3}), tensor({0.0, 1.0})), "expected target of dtype Long");
}

}  // namespace
}  // namespace strata::nn
