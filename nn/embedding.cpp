#include "strata/nn/embedding.h"

#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

// weight [num_embeddings, embedding_dim], as the constructor below registers it.
int64_t EmbeddingImpl::count_parameters(int64_t num_embeddings, int64_t embedding_dim) {
  return num_embeddings * embedding_dim;
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim) : Module("Embedding") {
  STRATA_CHECK(num_embeddings >= 0 && embedding_dim >= 0,
               "Embedding: num_embeddings and embedding_dim must be non-negative, got ", num_embeddings, " and ",
               embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() { init::normal_(weight); }

// strata::embedding checks the dtype and the range of the indices.
Tensor EmbeddingImpl::forward(const Tensor& indices) { return embedding(weight, indices); }

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(num_embeddings=" << weight.size(0) << ", embedding_dim=" << weight.size(1) << ")";
}

Embedding Embedding::from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options) {
  STRATA_CHECK(embeddings.dim() == 2, "Embedding::from_pretrained: embeddings must be 2-D [num_embeddings, ",
               "embedding_dim], got shape ", embeddings.sizes());
  Embedding embedding(embeddings.size(0), embeddings.size(1));
  embedding->weight.set_data(embeddings.detach());
  embedding->weight.requires_grad_(!options.freeze());
  return embedding;
}

}  // namespace strata::nn
