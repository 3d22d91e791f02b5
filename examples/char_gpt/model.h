#pragma once
// char_gpt's model as a pipe::Layer list: token and position embeddings, pre-norm transformer blocks, a final
// LayerNorm and an LM head tied to the token embedding; with a tensor-parallel group of more than one rank,
// Megatron's layers (vocabulary-parallel embedding and cross entropy, ParallelTransformerBlock) and optionally
// sequence parallelism. Each rank's weights are its slice of what one process draws.

#include <strata/strata.h>

#include <cstdint>
#include <vector>

namespace char_gpt {

/// The model's sizes.
struct ModelShape {
  int64_t vocab_size = 0;  ///< the (padded) vocabulary
  int64_t block = 64;      ///< context length T
  int64_t embed = 128;     ///< C
  int64_t heads = 4;       ///< attention heads
  int64_t layers = 4;      ///< transformer blocks
};

/// The tensor-parallel group the layers split over, and whether the sequence is split too.
struct Parallelism {
  strata::distributed::Group group;  ///< the tensor-parallel group (null or of one rank: none)
  bool sequence_parallel = false;    ///< split the sequence between the embeddings and the final LayerNorm
  bool split() const { return group && group->size() > 1; }  ///< whether the layers are split
};

/// The layer list, the same in every layout (layer indices, and so seeds, do not depend on the parallelism).
std::vector<strata::pipe::Layer> make_layers(const ModelShape& shape, const Parallelism& parallel);
/// The mean next-token cross entropy over the logits (vocabulary-parallel when the group splits them).
strata::pipe::LossFn lm_loss(const Parallelism& parallel);
/// Megatron's padding (--make-vocab-size-divisible-by): `characters` rounded up to a multiple of vocab_multiple and
/// of the tensor-parallel size; the extra tokens never occur.
int64_t padded_vocab(int64_t characters, int64_t vocab_multiple, int64_t tensor_parallel);

}  // namespace char_gpt
