#pragma once
// Embedding, a lookup table of learned vectors, initialised N(0, 1) as torch.nn.Embedding.
//
//   nn::Embedding wte(50257, 768);                 // weight [50257, 768]
//   Tensor tokens = randint(0, 50257, {8, 64});
//   Tensor h = wte(tokens);                        // int64 tokens [B, T] -> [B, T, 768]
//   std::cout << *wte;   // Embedding(num_embeddings=50257, embedding_dim=768)
//   nn::Embedding glove = nn::Embedding::from_pretrained(randn({1000, 50}));   // frozen: no gradient

#include <cstdint>
#include <ostream>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// Row i of `weight` for each int64 index i.
class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim);  ///< a table of num_embeddings vectors
  /// The trainable parameters an Embedding made from the same arguments has, without making it.
  static int64_t count_parameters(int64_t num_embeddings, int64_t embedding_dim);
  void reset_parameters();  ///< draws weight from N(0, 1) again
  /// int64 indices [...] in [0, num_embeddings) -> [..., embedding_dim]; other dtypes or indices throw.
  Tensor forward(const Tensor& indices);
  void pretty_print(std::ostream& os) const override;  ///< "Embedding(num_embeddings=10, embedding_dim=3)"

  Tensor weight;  ///< [num_embeddings, embedding_dim]
};

/// Embedding::from_pretrained's options, as libtorch's EmbeddingFromPretrainedOptions.
class EmbeddingFromPretrainedOptions {
 public:
  STRATA_ARG(bool, freeze) = true;  ///< whether the table stays fixed (its weight does not require grad)
};

/// The handle to an EmbeddingImpl (what STRATA_MODULE(Embedding) declares), with libtorch's from_pretrained.
class Embedding : public ModuleHolder<EmbeddingImpl> {
 public:
  using ModuleHolder<EmbeddingImpl>::ModuleHolder;
  /// An Embedding whose weight is `embeddings` [num_embeddings, embedding_dim] itself (its dtype, device and
  /// storage, as torch), frozen unless options say otherwise
  static Embedding from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options = {});
};

}  // namespace strata::nn
