#pragma once
// Tensor-parallel layers, as Megatron's: each rank of a tensor-parallel group holds a slice of the weights, and the
// slices meet in the region mappings of distributed/tensor_parallel.h. They follow its replicated-loss convention:
// every rank of the group runs the same model on the same batch and computes the same loss.
//
//   namespace dist = strata::distributed;
//   dist::Group group = dist::get_world_group();                     // the tensor-parallel group
//   nn::VocabParallelEmbedding wte(nn::VocabParallelEmbeddingOptions(64, 8).group(group));  // 64 / n rows here
//   nn::ColumnParallelLinear up(nn::ColumnParallelLinearOptions(8, 32).group(group));       // 32 / n outputs here
//   nn::RowParallelLinear down(nn::RowParallelLinearOptions(32, 8).group(group));           // input_is_parallel
//   nn::ColumnParallelLinear head(nn::ColumnParallelLinearOptions(8, 64).bias(false).group(group));
//   Tensor ids = strata::randint(0, 64, {4, 5});
//   Tensor h = down(up(wte(ids)).relu());                              // [4, 5, 8], the same on every rank
//   Tensor loss = nn::vocab_parallel_cross_entropy(head(h), ids, group).mean();  // logits stay split by vocabulary
//   loss.backward();
//
//   nn::ParallelTransformerBlock block(nn::ParallelTransformerBlockOptions(8, 4).sequence_parallel(true).group(group));
//   Tensor x = strata::randn({2, 6 * group->size(), 8}).narrow(1, 6 * group->rank(), 6);  // this rank's 6 positions
//   Tensor y = block(x);                                                 // [2, 6, 8]: still split along T
//   nn::StateDict whole = nn::whole_state_dict(*block);                  // every rank: the unsplit block's tensors
//   block->load_state_dict(nn::slice_state_dict(*block, whole));         // and back to this rank's slices
//
// With the same seed on every rank, each rank's weights are exactly its slice of what the layer without parallelism
// (nn::Linear, nn::Embedding, nn::TransformerBlock) draws, so a tensor-parallel model equals the one-process model
// from its first step. Slices are in group-rank order.
//
// Sequence parallelism (Megatron's): the activations between blocks are split along the sequence dimension
// (`sequence_dim`, 1 in strata's [B, T, C]) instead of replicated, so LayerNorm and the residual stream cost 1 / n of
// their memory. A ColumnParallelLinear then all-gathers its input along T (reduce-scatter in backward) and a
// RowParallelLinear reduce-scatters its sum along T instead of all-reducing it: the same volume as the all-reduce.
// Parameters used on a split sequence (LayerNorm's, a RowParallelLinear's bias) get partial gradients on each rank;
// they pass through copy_to_region, whose backward sums them over the group, so every rank holds the whole gradient.

#include <map>
#include <ostream>
#include <string>

#include "strata/distributed/process_group.h"
#include "strata/nn/linear.h"
#include "strata/nn/module.h"
#include "strata/nn/normalization.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// How a tensor-parallel layer cuts a parameter: along `dim` over the ranks of `group`, as `stride` blocks each cut
/// in group-rank order (Megatron's partition stride: a fused q, k, v projection has 3 blocks, so each rank holds
/// q, k and v of its heads).
struct ParameterSplit {
  int64_t dim = 0;                ///< the dimension that is cut
  int64_t stride = 1;             ///< blocks along dim, each cut over the group
  distributed::Group group = {};  ///< the tensor-parallel group
};

/// A layer whose parameters are slices over a tensor-parallel group: ColumnParallelLinear, RowParallelLinear,
/// VocabParallelEmbedding. Checkpoints use it to save whole tensors (whole_state_dict) and load any group size.
class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;
  /// Its own cut parameters by name ("weight"); the others are the same on every rank.
  virtual std::map<std::string, ParameterSplit> parameter_splits() const = 0;
};

/// Every cut parameter of `module` and its descendants, by the dotted name state_dict gives it.
std::map<std::string, ParameterSplit> parameter_splits(const Module& module);
/// The whole tensor this rank's `slice` is part of (a parameter, or state shaped as one): the group's slices
/// all-gathered and put back in place. Every rank of split.group calls it.
Tensor whole_tensor(const Tensor& slice, const ParameterSplit& split);
/// This rank's slice of `whole`, as `split` cuts it (a copy); throws when the group does not divide it.
Tensor slice_tensor(const Tensor& whole, const ParameterSplit& split);
/// module.state_dict() with every cut parameter whole: what the one-process model's state dict holds. Every rank of
/// each group calls it.
StateDict whole_state_dict(const Module& module);
/// `whole` (a whole_state_dict, or a one-process model's state dict) with each of `module`'s cut parameters
/// replaced by this rank's slice, ready for module.load_state_dict; other entries pass through.
StateDict slice_state_dict(const Module& module, const StateDict& whole);

/// ColumnParallelLinear's sizes and group: ColumnParallelLinearOptions(8, 32).gather_output(true).group(g).
class ColumnParallelLinearOptions {
 public:
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}  ///< the whole layer's sizes
  STRATA_ARG(int64_t, in_features);                                ///< size of each input's last dim
  STRATA_ARG(int64_t, out_features);                               ///< the whole layer's outputs, split over ranks
  STRATA_ARG(bool, bias) = true;                                   ///< whether to add a learned bias (split too)
  STRATA_ARG(bool, gather_output) = false;  ///< all-gather the outputs, else each rank keeps its out_features / n
  /// The input is split along sequence_dim (sequence parallelism): all-gather it first
  STRATA_ARG(bool, sequence_parallel) = false;
  STRATA_ARG(int64_t, sequence_dim) = 1;  ///< the sequence dimension, T of [B, T, C]
  /// The outputs are this many blocks, each split over the group (Megatron's stride; 3 for a fused q, k, v)
  STRATA_ARG(int64_t, stride) = 1;
  STRATA_ARG(distributed::Group, group) = {};  ///< the tensor-parallel group (required)
};

/// y = x @ weight^T + bias with weight's rows (the outputs) split over the group: Megatron's ColumnParallelLinear.
class ColumnParallelLinearImpl : public Module, public TensorParallelLayer {
 public:
  explicit ColumnParallelLinearImpl(const ColumnParallelLinearOptions& options);  ///< from options
  /// This rank's rows of `whole`, a Linear of the options' sizes (a block that splits a layer it drew itself).
  ColumnParallelLinearImpl(const ColumnParallelLinearOptions& options, const LinearImpl& whole);
  /// Replicated [..., in_features] (split along sequence_dim under sequence_parallel) -> [..., out_features / n],
  /// or [..., out_features] with gather_output.
  Tensor forward(const Tensor& input);
  /// "ColumnParallelLinear(in_features=8, out_features=32, bias=true, gather_output=false, tensor_parallel=2)"
  void pretty_print(std::ostream& os) const override;
  std::map<std::string, ParameterSplit> parameter_splits() const override;  ///< weight and bias along dim 0

  ColumnParallelLinearOptions options;  ///< the sizes it was made with
  Tensor weight;                        ///< [out_features / n, in_features]: this rank's rows
  Tensor bias;                          ///< [out_features / n], undefined without bias
};
STRATA_MODULE(ColumnParallelLinear);

/// RowParallelLinear's sizes and group: RowParallelLinearOptions(32, 8).input_is_parallel(false).group(g).
class RowParallelLinearOptions {
 public:
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}  ///< the whole layer's sizes
  STRATA_ARG(int64_t, in_features);                                ///< the whole layer's inputs, split over ranks
  STRATA_ARG(int64_t, out_features);                               ///< size of each output's last dim
  STRATA_ARG(bool, bias) = true;  ///< whether to add a learned bias (replicated, added after the sum)
  /// The input is already split (a ColumnParallelLinear's output), else this layer splits it
  STRATA_ARG(bool, input_is_parallel) = true;
  /// Reduce-scatter the sum along sequence_dim instead of all-reducing it (sequence parallelism)
  STRATA_ARG(bool, sequence_parallel) = false;
  STRATA_ARG(int64_t, sequence_dim) = 1;       ///< the sequence dimension, T of [B, T, C]
  STRATA_ARG(distributed::Group, group) = {};  ///< the tensor-parallel group (required)
};

/// y = x @ weight^T + bias with weight's columns (the inputs) split over the group, the partial products summed:
/// Megatron's RowParallelLinear.
class RowParallelLinearImpl : public Module, public TensorParallelLayer {
 public:
  explicit RowParallelLinearImpl(const RowParallelLinearOptions& options);  ///< from options
  /// This rank's columns of `whole`, a Linear of the options' sizes, and its whole bias.
  RowParallelLinearImpl(const RowParallelLinearOptions& options, const LinearImpl& whole);
  /// [..., in_features / n] (or replicated [..., in_features] without input_is_parallel) -> replicated
  /// [..., out_features] (split along sequence_dim under sequence_parallel)
  Tensor forward(const Tensor& input);
  /// "RowParallelLinear(in_features=32, out_features=8, bias=true, input_is_parallel=true, tensor_parallel=2)"
  void pretty_print(std::ostream& os) const override;
  std::map<std::string, ParameterSplit> parameter_splits() const override;  ///< weight along dim 1

  RowParallelLinearOptions options;  ///< the sizes it was made with
  Tensor weight;                     ///< [out_features, in_features / n]: this rank's columns
  Tensor bias;                       ///< [out_features], the same on every rank; undefined without bias
};
STRATA_MODULE(RowParallelLinear);

/// VocabParallelEmbedding's sizes and group: VocabParallelEmbeddingOptions(50304, 768).group(g).
class VocabParallelEmbeddingOptions {
 public:
  VocabParallelEmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}  ///< the whole table's size
  STRATA_ARG(int64_t, num_embeddings);                                     ///< rows of the table, split over ranks
  STRATA_ARG(int64_t, embedding_dim);                                      ///< size of each vector
  STRATA_ARG(distributed::Group, group) = {};                              ///< the tensor-parallel group (required)
};

/// An embedding table whose rows (the vocabulary) are split over the group: Megatron's VocabParallelEmbedding.
class VocabParallelEmbeddingImpl : public Module, public TensorParallelLayer {
 public:
  explicit VocabParallelEmbeddingImpl(const VocabParallelEmbeddingOptions& options);  ///< from options
  /// Replicated int64 indices [...] in [0, num_embeddings) -> replicated [..., embedding_dim]
  Tensor forward(const Tensor& indices);
  /// "VocabParallelEmbedding(num_embeddings=64, embedding_dim=8, tensor_parallel=2)"
  void pretty_print(std::ostream& os) const override;
  std::map<std::string, ParameterSplit> parameter_splits() const override;  ///< weight along dim 0

  VocabParallelEmbeddingOptions options;  ///< the sizes it was made with
  Tensor weight;                          ///< [num_embeddings / n, embedding_dim]: this rank's rows
};
STRATA_MODULE(VocabParallelEmbedding);

/// ParallelTransformerBlock's sizes and group: ParallelTransformerBlockOptions(768, 12).sequence_parallel(true).group(g).
class ParallelTransformerBlockOptions {
 public:
  ParallelTransformerBlockOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}  ///< the whole block's sizes
  STRATA_ARG(int64_t, embed_dim);                        ///< C
  STRATA_ARG(int64_t, num_heads);                        ///< heads, split over the group (which must divide them)
  STRATA_ARG(int64_t, mlp_ratio) = 4;                    ///< the MLP's hidden size is mlp_ratio * C, split too
  /// [B, T / n, C] in and out, LayerNorm and the residual stream split along T; else replicated [B, T, C]
  STRATA_ARG(bool, sequence_parallel) = false;
  STRATA_ARG(double, dropout) = 0;             ///< TransformerBlock's: on attention's weights, its output and the MLP's
  STRATA_ARG(distributed::Group, group) = {};  ///< the tensor-parallel group (required)
};

/// nn::TransformerBlock split over a tensor-parallel group, as Megatron's: each rank runs num_heads / n heads and
/// mlp_ratio * C / n of the MLP; one all-reduce after attention and one after the MLP in forward, two in backward
/// (all-gathers and reduce-scatters of the same volume under sequence parallelism, whose backward also all-reduces
/// the gradients of LayerNorm's parameters and the row-parallel biases, C each, where Megatron does so once a step).
/// Parameters carry TransformerBlock's names (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj). Dropout
/// drops what TransformerBlock drops from the same generator state, on every layout: attention keys its stream by
/// the whole block's heads (AttentionHeads), and under sequence parallelism each rank keeps its positions of the
/// whole [B, T, C] mask. So the generator must be in one state on every rank of the group, as manual_seed leaves it.
class ParallelTransformerBlockImpl : public Module {
 public:
  explicit ParallelTransformerBlockImpl(const ParallelTransformerBlockOptions& options);  ///< from options
  /// [B, T, C] replicated, or [B, T / n, C] this rank's positions under sequence_parallel -> the same layout
  Tensor forward(const Tensor& x);

  ParallelTransformerBlockOptions options;  ///< what it was made with
  LayerNorm ln_1{nullptr};                  ///< before attention, the same on every rank
  ColumnParallelLinear c_attn{nullptr};     ///< attn.c_attn, C -> 3C / n: this rank's heads' q, k, v side by side
  RowParallelLinear c_proj{nullptr};        ///< attn.c_proj, C / n -> C, summed over the group
  LayerNorm ln_2{nullptr};                  ///< before the MLP, the same on every rank
  ColumnParallelLinear c_fc{nullptr};       ///< mlp.c_fc, C -> mlp_ratio * C / n
  RowParallelLinear mlp_proj{nullptr};      ///< mlp.c_proj, mlp_ratio * C / n -> C, summed over the group
};
STRATA_MODULE(ParallelTransformerBlock);

/// Cross entropy of logits split by vocabulary over `group` (a ColumnParallelLinear's output without gather_output):
/// [..., V / n] and replicated int64 targets [...] in [0, V) -> the replicated loss per target [...], unreduced, as
/// Megatron's. The maximum and the sum of exponentials meet across ranks; the logits are never gathered.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& target, const distributed::Group& group);

}  // namespace strata::nn
