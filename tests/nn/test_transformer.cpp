#include <cmath>
#include <limits>
#include <sstream>

#include "strata/nn/transformer.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::values;

// Attention written out head by head with narrow, bmm and an additive mask: an independent composition
// of the same maths as CausalSelfAttention::forward.
Tensor reference_attention(const Tensor& x, CausalSelfAttentionImpl& attn) {
  const int64_t T = x.size(1), C = attn.embed_dim, D = C / attn.num_heads;
  Tensor qkv = matmul(x, attn.c_attn->weight.t()) + attn.c_attn->bias;
  std::vector<double> mask_values;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask_values.push_back(j <= i ? 0.0 : -std::numeric_limits<double>::infinity());
  Tensor mask = tensor(mask_values, x.dtype()).reshape({T, T});
  tensor_list heads;
  for (int64_t h = 0; h < attn.num_heads; ++h) {
    Tensor q = qkv.narrow(2, h * D, D), k = qkv.narrow(2, C + h * D, D), v = qkv.narrow(2, 2 * C + h * D, D);
    Tensor scores = bmm(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(D)) + mask;  // [B, T, T]
    heads.push_back(bmm(softmax(scores, 2), v));                                           // [B, T, D]
  }
  return matmul(cat(heads, 2), attn.c_proj->weight.t()) + attn.c_proj->bias;
}

Tensor reference_block(const Tensor& x, TransformerBlockImpl& block) {
  const int64_t C = block.attn->embed_dim;
  auto fc = std::dynamic_pointer_cast<LinearImpl>((*block.mlp)[0]);
  auto proj = std::dynamic_pointer_cast<LinearImpl>((*block.mlp)[2]);
  Tensor h = x + reference_attention(layer_norm(x, {C}, block.ln_1->weight, block.ln_1->bias), *block.attn);
  Tensor m = layer_norm(h, {C}, block.ln_2->weight, block.ln_2->bias);
  return h + matmul(gelu(matmul(m, fc->weight.t()) + fc->bias), proj->weight.t()) + proj->bias;
}

TEST(NnTransformer, AttentionMatchesHandComposition) {
  manual_seed(0);
  CausalSelfAttention attn(8, 2);
  attn->to(kFloat64);
  Tensor x = randn({2, 5, 8}, kFloat64);
  Tensor y = attn(x);
  EXPECT_EQ(y.sizes(), IntArrayRef({2, 5, 8}));
  EXPECT_ALLCLOSE(y, reference_attention(x, *attn), 1e-12, 1e-12);
}

TEST(NnTransformer, BlockMatchesHandComposition) {
  manual_seed(1);
  TransformerBlock block(8, 4);
  block->to(kFloat64);
  {
    NoGradGuard g;  // non-trivial norms, so a swapped weight and bias would show
    block->ln_1->weight.copy_(randn({8}, kFloat64));
    block->ln_2->bias.copy_(randn({8}, kFloat64));
  }
  Tensor x = randn({3, 6, 8}, kFloat64);
  EXPECT_ALLCLOSE(block(x), reference_block(x, *block), 1e-12, 1e-12);
}

TEST(NnTransformer, BlockParametersFollowNanoGpt) {
  TransformerBlock block(8, 2);
  std::vector<std::string> names;
  for (auto& [name, p] : block->named_parameters()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}));
  EXPECT_EQ(block->num_parameters(), 12 * 8 * 8 + 13 * 8);
  EXPECT_EQ((*TransformerBlock(8, 2, /*mlp_ratio=*/2)->mlp)[0]->parameters()[0].sizes(), IntArrayRef({16, 8}));
  std::ostringstream os;
  os << *block;
  EXPECT_EQ(os.str(),
            "TransformerBlock(\n"
            "  (ln_1): LayerNorm([8], eps=1e-05, elementwise_affine=true)\n"
            "  (attn): CausalSelfAttention(\n"
            "    (c_attn): Linear(in_features=8, out_features=24, bias=true)\n"
            "    (c_proj): Linear(in_features=8, out_features=8, bias=true)\n"
            "    (attn_dropout): Dropout(p=0)\n"
            "    (resid_dropout): Dropout(p=0)\n"
            "  )\n"
            "  (ln_2): LayerNorm([8], eps=1e-05, elementwise_affine=true)\n"
            "  (mlp): Sequential(\n"
            "    (c_fc): Linear(in_features=8, out_features=32, bias=true)\n"
            "    (gelu): GELU()\n"
            "    (c_proj): Linear(in_features=32, out_features=8, bias=true)\n"
            "    (dropout): Dropout(p=0)\n"
            "  )\n"
            ")");
}

TEST(NnTransformer, OutputDoesNotSeeTheFuture) {
  manual_seed(2);
  TransformerBlock block(8, 2);
  const int64_t T = 6, t = 2;
  Tensor x = randn({2, T, 8});
  Tensor changed = cat({x.narrow(1, 0, t + 1), randn({2, T - t - 1, 8})}, 1);
  Tensor y = block(x), y_changed = block(changed);
  EXPECT_EQ(values(y.narrow(1, 0, t + 1)), values(y_changed.narrow(1, 0, t + 1)));
  EXPECT_NE(values(y.narrow(1, t + 1, T - t - 1)), values(y_changed.narrow(1, t + 1, T - t - 1)));

  Tensor leaf_x = x.detach().requires_grad_(true);
  block(leaf_x).select(1, t).sum().backward();
  for (double g : values(leaf_x.grad().narrow(1, t + 1, T - t - 1))) EXPECT_EQ(g, 0.0);
  for (double g : values(leaf_x.grad().narrow(1, 0, t + 1).abs().sum({2}))) EXPECT_GT(g, 0.0);
}

TEST(NnTransformer, Gradcheck) {
  manual_seed(3);
  CausalSelfAttention attn(4, 2);
  attn->to(kFloat64);
  tensor_list inputs{leaf({2, 3, 4})};
  for (const Tensor& p : attn->parameters()) inputs.push_back(p);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return attn(in[0]); }, inputs);

  TransformerBlock block(4, 2, /*mlp_ratio=*/2);
  block->to(kFloat64);
  inputs = {leaf({1, 3, 4})};
  for (const Tensor& p : block->parameters()) inputs.push_back(p);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return block(in[0]); }, inputs);
}

TEST(NnTransformer, DropoutOnlyWhileTraining) {
  manual_seed(4);
  TransformerBlock block(8, 2, 4, /*dropout=*/0.5);
  Tensor x = randn({2, 4, 8});
  EXPECT_NE(values(block(x)), values(block(x)));
  block->eval();
  EXPECT_EQ(values(block(x)), values(block(x)));
}

TEST(NnTransformer, StacksInASequential) {
  Sequential blocks(TransformerBlock(8, 2), TransformerBlock(8, 2));
  EXPECT_EQ(blocks(ones({1, 3, 8})).sizes(), IntArrayRef({1, 3, 8}));
  EXPECT_EQ(blocks->named_parameters()[12].first, "1.ln_1.weight");
}

TEST(NnTransformer, BadArguments) {
  EXPECT_THROW_MSG(CausalSelfAttention(10, 3), "CausalSelfAttention: embed_dim 10 is not divisible by num_heads 3");
  EXPECT_THROW_MSG(TransformerBlock(10, 4), "embed_dim 10 is not divisible by num_heads 4");
  EXPECT_THROW_MSG(CausalSelfAttention(8, 0),
                   "CausalSelfAttention: embed_dim and num_heads must be positive, got 8 "
                   "and 0");
  EXPECT_THROW_MSG(TransformerBlock(8, 2, 0), "TransformerBlock: mlp_ratio must be positive, got 0");
  EXPECT_THROW_MSG(CausalSelfAttention(8, 2, 1.5), "Dropout: probability has to be between 0 and 1, but got 1.5");
  CausalSelfAttention attn(8, 2);
  EXPECT_THROW_MSG(attn(ones({5, 8})), "CausalSelfAttention: expected input of shape [B, T, 8], got shape [5, 8]");
  EXPECT_THROW_MSG(attn(ones({2, 5, 6})), "got shape [2, 5, 6]");
  TransformerBlock block(8, 2);
  EXPECT_THROW_MSG(block(ones({2, 5, 6})), "TransformerBlock: expected input of shape [B, T, 8], got shape [2, 5, 6]");
}

}  // namespace
}  // namespace strata::nn
