#include "strata/nn/embedding.h"

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

// weight [num_embeddings, embedding_dim], as the constructor below registers it.
int64_t EmbeddingImpl::count_parameters(const EmbeddingOptions& options) {
  return options.num_embeddings() * options.embedding_dim();
}

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& opts) : Module("Embedding"), options(opts) {
  const int64_t n = options.num_embeddings();
  STRATA_CHECK(n >= 0 && options.embedding_dim() >= 0,
               "Embedding: num_embeddings and embedding_dim must be non-negative, got ", n, " and ",
               options.embedding_dim());
  if (const std::optional<int64_t> pad = options.padding_idx()) {
    STRATA_CHECK(*pad >= -n && *pad < n, "Embedding: padding_idx must be within num_embeddings (", n, "), got ", *pad);
    options.padding_idx(*pad < 0 ? *pad + n : *pad);
  }
  weight = register_parameter("weight", empty({n, options.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx()) {
    NoGradGuard no_grad;
    weight[*options.padding_idx()].fill_(0);
  }
}

// strata::embedding checks the dtype and the range of the indices. The padding row's lookups are detached,
// so it gets no gradient, while its value (zeros unless changed) is still returned, as torch.
Tensor EmbeddingImpl::forward(const Tensor& indices) {
  Tensor out = embedding(weight, indices);
  if (!options.padding_idx()) return out;
  return where(indices.eq(*options.padding_idx()).unsqueeze(-1), out.detach(), out);
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(num_embeddings=" << weight.size(0) << ", embedding_dim=" << weight.size(1);
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

Embedding Embedding::from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options) {
  STRATA_CHECK(embeddings.dim() == 2, "Embedding::from_pretrained: embeddings must be 2-D [num_embeddings, ",
               "embedding_dim], got shape ", embeddings.sizes());
  Embedding embedding(EmbeddingOptions(embeddings.size(0), embeddings.size(1)).padding_idx(options.padding_idx()));
  embedding->weight.set_data(embeddings.detach());
  embedding->weight.requires_grad_(!options.freeze());
  return embedding;
}

}  // namespace strata::nn
