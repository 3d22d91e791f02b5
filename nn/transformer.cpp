#include "strata/nn/transformer.h"

#include "strata/autograd/ops.h"
#include "strata/nn/activation.h"

namespace strata::nn {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t dim, int64_t heads, double dropout)
    : Module("CausalSelfAttention"), embed_dim(dim), num_heads(heads) {
  STRATA_CHECK(embed_dim > 0 && num_heads > 0, "CausalSelfAttention: embed_dim and num_heads must be positive, got ",
               embed_dim, " and ", num_heads);
  STRATA_CHECK(embed_dim % num_heads == 0, "CausalSelfAttention: embed_dim ", embed_dim,
               " is not divisible by num_heads ", num_heads);
  c_attn = register_module("c_attn", Linear(embed_dim, 3 * embed_dim));
  c_proj = register_module("c_proj", Linear(embed_dim, embed_dim));
  attn_dropout = register_module("attn_dropout", Dropout(dropout));
  resid_dropout = register_module("resid_dropout", Dropout(dropout));
}

Tensor CausalSelfAttentionImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == embed_dim, "CausalSelfAttention: expected input of shape [B, T, ",
               embed_dim, "], got shape ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), C = embed_dim, H = num_heads, D = C / H;
  const tensor_list qkv = c_attn(x).split(C, 2);                                          // q, k, v: [B, T, C] each
  auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };  // [B, H, T, D]
  // The fused attention never holds the [B, H, T, T] weights; their dropout is its dropout_p, as nanoGPT's.
  const double dropout_p = is_training() ? attn_dropout->options.p() : 0.0;
  Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), std::nullopt, dropout_p,
                                          /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, C});  // heads side by side again
  return resid_dropout(c_proj(y));
}

TransformerBlockImpl::TransformerBlockImpl(int64_t embed_dim, int64_t num_heads, int64_t mlp_ratio, double dropout)
    : Module("TransformerBlock") {
  CausalSelfAttention attention(embed_dim, num_heads, dropout);  // checks embed_dim and num_heads first
  STRATA_CHECK(mlp_ratio > 0, "TransformerBlock: mlp_ratio must be positive, got ", mlp_ratio);
  ln_1 = register_module("ln_1", LayerNorm(embed_dim));
  attn = register_module("attn", attention);
  ln_2 = register_module("ln_2", LayerNorm(embed_dim));
  Sequential m;
  m->push_back("c_fc", Linear(embed_dim, mlp_ratio * embed_dim));
  m->push_back("gelu", GELU());
  m->push_back("c_proj", Linear(mlp_ratio * embed_dim, embed_dim));
  m->push_back("dropout", Dropout(dropout));
  mlp = register_module("mlp", m);
}

Tensor TransformerBlockImpl::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == attn->embed_dim, "TransformerBlock: expected input of shape [B, T, ",
               attn->embed_dim, "], got shape ", x.sizes());
  Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

}  // namespace strata::nn
