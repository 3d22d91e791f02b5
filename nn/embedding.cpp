#include "strata/nn/embedding.h"

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

// weight [num_embeddings, embedding_dim], as the constructor below registers it.
int64_t EmbeddingImpl::count_parameters(const EmbeddingOptions& options) {
  return options.num_embeddings() * options.embedding_dim();
}

namespace {

/// padding_idx made non-negative, after checking it lies within the table's n rows (`op` names the caller).
std::optional<int64_t> checked_padding(std::optional<int64_t> pad, int64_t n, const char* op) {
  if (!pad) return pad;
  STRATA_CHECK(*pad >= -n && *pad < n, op, ": padding_idx must be within num_embeddings (", n, "), got ", *pad);
  return *pad < 0 ? *pad + n : *pad;
}

/// The rows of weight that input picks, renormed first when max_norm is given: nn::Embedding's forward and F's.
Tensor lookup(const Tensor& input, Tensor weight, std::optional<int64_t> padding_idx, std::optional<double> max_norm,
              double norm_type, bool scale_grad_by_freq, bool sparse) {
  if (max_norm) {
    NoGradGuard no_grad;
    embedding_renorm_(weight, input, *max_norm, norm_type);
  }
  return embedding(weight, input, padding_idx.value_or(-1), scale_grad_by_freq, sparse);
}

}  // namespace

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& opts) : Module("Embedding"), options(opts) {
  const int64_t n = options.num_embeddings();
  STRATA_CHECK(n >= 0 && options.embedding_dim() >= 0,
               "Embedding: num_embeddings and embedding_dim must be non-negative, got ", n, " and ",
               options.embedding_dim());
  options.padding_idx(checked_padding(options.padding_idx(), n, "Embedding"));
  STRATA_CHECK(!options.sparse(),
               "Embedding: sparse gradients are not supported (strata has no sparse tensors); "
               "use sparse(false)");
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

// strata::embedding checks the dtype and the range of the indices; the padding row gets no gradient while its
// value (zeros unless changed) is still returned, as torch.
Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return lookup(indices, weight, options.padding_idx(), options.max_norm(), options.norm_type(),
                options.scale_grad_by_freq(), options.sparse());
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(num_embeddings=" << weight.size(0) << ", embedding_dim=" << weight.size(1);
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  if (options.max_norm()) os << ", max_norm=" << *options.max_norm();
  if (options.norm_type() != 2) os << ", norm_type=" << options.norm_type();
  if (options.scale_grad_by_freq()) os << ", scale_grad_by_freq=true";
  os << ")";
}

Embedding Embedding::from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options) {
  STRATA_CHECK(embeddings.dim() == 2, "Embedding::from_pretrained: embeddings must be 2-D [num_embeddings, ",
               "embedding_dim], got shape ", embeddings.sizes());
  Embedding embedding(EmbeddingOptions(embeddings.size(0), embeddings.size(1))
                          .padding_idx(options.padding_idx())
                          .max_norm(options.max_norm())
                          .norm_type(options.norm_type())
                          .scale_grad_by_freq(options.scale_grad_by_freq())
                          .sparse(options.sparse()));
  embedding->weight.set_data(embeddings.detach());
  embedding->weight.requires_grad_(!options.freeze());
  return embedding;
}

namespace functional {

// As libtorch's F::embedding: padding_idx checked against the table and counted from the end when negative.
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options) {
  STRATA_CHECK(weight.dim() == 2, "embedding: expected weight of shape [num_embeddings, embedding_dim], got shape ",
               weight.sizes());
  return lookup(input, weight, checked_padding(options.padding_idx(), weight.size(0), "embedding"), options.max_norm(),
                options.norm_type(), options.scale_grad_by_freq(), options.sparse());
}

}  // namespace functional

}  // namespace strata::nn
