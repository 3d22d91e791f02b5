#pragma once
// A GPT-style pre-norm transformer block (nanoGPT's Block) and its causal multi-head
// self-attention. Both map [B, T, C] to [B, T, C], so blocks stack in a Sequential or a pipeline.
// Children carry nanoGPT's names (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj), so
// state dicts line up with nanoGPT checkpoints.
//
//   nn::TransformerBlock block(/*embed_dim=*/64, /*num_heads=*/4);
//   Tensor x = randn({8, 32, 64});
//   Tensor y = block(x);                               // x [B, T, 64] -> [B, T, 64]
//   nn::Sequential blocks(nn::TransformerBlock(64, 4), nn::TransformerBlock(64, 4));

#include <cstdint>

#include "strata/nn/container.h"
#include "strata/nn/dropout.h"
#include "strata/nn/linear.h"
#include "strata/nn/module.h"
#include "strata/nn/normalization.h"

namespace strata::nn {

/// Multi-head self-attention where position t attends to positions <= t: q, k, v from one fused Linear
/// (c_attn, C -> 3C), softmax(q k^T / sqrt(C / num_heads)) v causal through scaled_dot_product_attention (fused:
/// memory linear in T), then c_proj (C -> C).
class CausalSelfAttentionImpl : public Module {
 public:
  /// embed_dim C split into num_heads heads (C must divide evenly); dropout on the attention weights and output.
  CausalSelfAttentionImpl(int64_t embed_dim, int64_t num_heads, double dropout = 0);
  Tensor forward(const Tensor& x);  ///< [B, T, C] -> [B, T, C]

  int64_t embed_dim;               ///< C
  int64_t num_heads;               ///< heads, each of size C / num_heads
  Linear c_attn{nullptr};          ///< C -> 3C: q, k, v side by side
  Linear c_proj{nullptr};          ///< C -> C, after the heads are merged
  Dropout attn_dropout{nullptr};   ///< its p is the attention weights' dropout_p while training
  Dropout resid_dropout{nullptr};  ///< on the output
};
STRATA_MODULE(CausalSelfAttention);

/// Pre-norm block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)), mlp = c_fc (C -> mlp_ratio C), GELU, c_proj, dropout.
class TransformerBlockImpl : public Module {
 public:
  /// embed_dim C, num_heads dividing C, hidden size mlp_ratio * C, dropout in attention and MLP.
  TransformerBlockImpl(int64_t embed_dim, int64_t num_heads, int64_t mlp_ratio = 4, double dropout = 0);
  Tensor forward(const Tensor& x);  ///< [B, T, C] -> [B, T, C]

  LayerNorm ln_1{nullptr};            ///< before attention
  CausalSelfAttention attn{nullptr};  ///< causal self-attention
  LayerNorm ln_2{nullptr};            ///< before the MLP
  Sequential mlp{nullptr};            ///< c_fc, gelu, c_proj, dropout
};
STRATA_MODULE(TransformerBlock);

}  // namespace strata::nn
