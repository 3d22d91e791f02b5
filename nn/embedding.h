#pragma once
// Embedding, a lookup table of learned vectors, initialised N(0, 1) as torch.nn.Embedding.
//
//   nn::Embedding wte(50257, 768);                 // weight [50257, 768]
//   Tensor tokens = randint(0, 50257, {8, 64});
//   Tensor h = wte(tokens);                        // int64 tokens [B, T] -> [B, T, 768]
//   std::cout << *wte;   // Embedding(num_embeddings=50257, embedding_dim=768)
//   nn::Embedding glove = nn::Embedding::from_pretrained(randn({1000, 50}));   // frozen: no gradient
//   nn::Embedding words(nn::EmbeddingOptions(1000, 32).padding_idx(0));        // row 0: zeros, no gradient
//   nn::Embedding capped(nn::EmbeddingOptions(1000, 32).max_norm(1.0));        // rows looked up renormed to <= 1
//   Tensor e = nn::functional::embedding(tokens, randn({50257, 16}),
//                                        nn::functional::EmbeddingFuncOptions().scale_grad_by_freq(true));

#include <cstdint>
#include <optional>
#include <ostream>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// Embedding's options, as libtorch's: EmbeddingOptions(10000, 64).padding_idx(0).max_norm(1.0).
class EmbeddingOptions {
 public:
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}  ///< the table's size
  STRATA_ARG(int64_t, num_embeddings);                                     ///< rows of the table
  STRATA_ARG(int64_t, embedding_dim);                                      ///< size of each vector
  /// A row that starts as zeros and gets no gradient (negative: counted from the end), as torch's
  STRATA_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
  /// Each forward first scales the rows it looks up whose norm exceeds this to this norm, in place
  STRATA_ARG(std::optional<double>, max_norm) = std::nullopt;
  STRATA_ARG(double, norm_type) = 2.0;           ///< the p of max_norm's p-norm
  STRATA_ARG(bool, scale_grad_by_freq) = false;  ///< divides each row's gradient by its count in the batch
  STRATA_ARG(bool, sparse) = false;              ///< sparse gradients: strata has none, so true throws
};

/// Row i of `weight` for each int64 index i.
class EmbeddingImpl : public Module {
 public:
  explicit EmbeddingImpl(const EmbeddingOptions& options);  ///< from options
  /// A table of num_embeddings vectors
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  /// The trainable parameters an Embedding made from the same options has, without making it.
  static int64_t count_parameters(const EmbeddingOptions& options);
  /// The same from the sizes.
  static int64_t count_parameters(int64_t num_embeddings, int64_t embedding_dim) {
    return count_parameters(EmbeddingOptions(num_embeddings, embedding_dim));
  }
  void reset_parameters();  ///< draws weight from N(0, 1) again (the padding row zeros)
  /// int64 indices [...] in [0, num_embeddings) -> [..., embedding_dim]; other dtypes or indices throw.
  Tensor forward(const Tensor& indices);
  void pretty_print(std::ostream& os) const override;  ///< "Embedding(num_embeddings=10, embedding_dim=3)"

  EmbeddingOptions options;  ///< what it was made with (padding_idx made non-negative)
  Tensor weight;             ///< [num_embeddings, embedding_dim]
};

/// Embedding::from_pretrained's options, as libtorch's EmbeddingFromPretrainedOptions.
class EmbeddingFromPretrainedOptions {
 public:
  STRATA_ARG(bool, freeze) = true;  ///< whether the table stays fixed (its weight does not require grad)
  STRATA_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;  ///< a row that gets no gradient
  STRATA_ARG(std::optional<double>, max_norm) = std::nullopt;      ///< as EmbeddingOptions::max_norm
  STRATA_ARG(double, norm_type) = 2.0;                             ///< as EmbeddingOptions::norm_type
  STRATA_ARG(bool, scale_grad_by_freq) = false;                    ///< as EmbeddingOptions::scale_grad_by_freq
  STRATA_ARG(bool, sparse) = false;                                ///< as EmbeddingOptions::sparse
};

/// The handle to an EmbeddingImpl (what STRATA_MODULE(Embedding) declares), with libtorch's from_pretrained.
class Embedding : public ModuleHolder<EmbeddingImpl> {
 public:
  using ModuleHolder<EmbeddingImpl>::ModuleHolder;
  /// An Embedding whose weight is `embeddings` [num_embeddings, embedding_dim] itself (its dtype, device and
  /// storage, as torch), frozen unless options say otherwise
  static Embedding from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options = {});
};

namespace functional {

/// F::embedding's options, as libtorch's: padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse.
class EmbeddingFuncOptions {
 public:
  STRATA_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;  ///< a row that gets no gradient
  STRATA_ARG(std::optional<double>, max_norm) = std::nullopt;      ///< renorms the looked-up rows first
  STRATA_ARG(double, norm_type) = 2.0;                             ///< the p of max_norm's p-norm
  STRATA_ARG(bool, scale_grad_by_freq) = false;                    ///< divides each row's gradient by its count
  STRATA_ARG(bool, sparse) = false;                                ///< sparse gradients: true throws
};

/// Rows of `weight` picked by `input`, in libtorch's argument order (strata::embedding, like ATen's, takes the
/// weight first); with max_norm the picked rows of weight are renormed in place first.
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options = {});

}  // namespace functional

}  // namespace strata::nn
