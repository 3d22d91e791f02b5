#pragma once
// Embedding, a lookup table of learned vectors, initialised N(0, 1) as torch.nn.Embedding.
//
//   nn::Embedding wte(50257, 768);                 // weight [50257, 768]
//   Tensor tokens = randint(0, 50257, {8, 64});
//   Tensor h = wte(tokens);                        // int64 tokens [B, T] -> [B, T, 768]
//   std::cout << *wte;   // Embedding(num_embeddings=50257, embedding_dim=768)

#include <cstdint>
#include <ostream>

#include "strata/nn/module.h"

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
STRATA_MODULE(Embedding);

}  // namespace strata::nn
