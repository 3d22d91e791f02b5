#include "model.h"

#include <numeric>

namespace char_gpt {

using namespace strata;
namespace tp = strata::distributed::tensor_parallel;

namespace {

// A learned position embedding added to the token embedding: [B, T, C] + weight[:T]; under sequence parallelism
// each rank keeps its part of T.
class AddPositionImpl : public nn::Module {
 public:
  AddPositionImpl(int64_t block, int64_t embed, Parallelism parallel) : parallel(std::move(parallel)) {
    weight = register_parameter("weight", nn::init::normal_(empty({block, embed}), 0, 0.02));
  }
  Tensor forward(const Tensor& x) {
    const Tensor out = x + weight.narrow(0, 0, x.size(1));
    return parallel.sequence_parallel ? tp::scatter_to_sequence_region(out, parallel.group, 1) : out;
  }
  Tensor weight;
  Parallelism parallel;
};
STRATA_MODULE(AddPosition);

// The token embedding, initialised as GPT-2's (N(0, 0.02)) since the LM head reuses it; split by vocabulary over a
// tensor-parallel group (each rank's rows are its slice of what one process draws).
pipe::LayerSpec token_embedding(int64_t vocab, int64_t embed, const Parallelism& parallel) {
  return pipe::LayerSpec(
      "Embedding",
      [vocab, embed, parallel]() -> pipe::BuiltLayer {
        if (!parallel.split()) {
          nn::Embedding e(vocab, embed);
          {
            NoGradGuard no_grad;
            nn::init::normal_(e->weight, 0, 0.02);
          }
          return {e.ptr(), [e](const tensor_list& x) { return tensor_list{e(x[0])}; }};
        }
        nn::Embedding whole(vocab, embed);  // drawn as one process draws it, then cut
        {
          NoGradGuard no_grad;
          nn::init::normal_(whole->weight, 0, 0.02);
        }
        nn::VocabParallelEmbedding e(nn::VocabParallelEmbeddingOptions(vocab, embed).group(parallel.group));
        e->load_state_dict(nn::slice_state_dict(*e, whole->state_dict()));
        return {e.ptr(), [e](const tensor_list& x) { return tensor_list{e(x[0])}; }};
      },
      vocab* embed);
}

// The final LayerNorm, after gathering a split sequence (its backward keeps this rank's part of the gradient:
// LayerNorm and the head run on every rank alike).
pipe::LayerSpec final_norm(int64_t embed, const Parallelism& parallel) {
  return pipe::LayerSpec(
      "LayerNorm",
      [embed, parallel] {
        nn::LayerNorm ln(embed);
        return pipe::BuiltLayer{
            ln.ptr(), [ln, parallel](const tensor_list& x) {
              return tensor_list{ln(
                  parallel.sequence_parallel ? tp::gather_from_sequence_region(x[0], parallel.group, 1, false) : x[0])};
            }};
      },
      2 * embed);
}

}  // namespace

std::vector<pipe::Layer> make_layers(const ModelShape& a, const Parallelism& parallel) {
  const int64_t vocab = a.vocab_size;
  std::vector<pipe::Layer> layers;
  layers.push_back(pipe::TiedLayerSpec("embed", token_embedding(vocab, a.embed, parallel)));
  layers.push_back(pipe::LayerSpec::of<AddPosition>(a.block, a.embed, parallel));
  for (int64_t i = 0; i < a.layers; ++i)
    layers.push_back(parallel.split() ? pipe::LayerSpec::of<nn::ParallelTransformerBlock>(
                                            nn::ParallelTransformerBlockOptions(a.embed, a.heads)
                                                .sequence_parallel(parallel.sequence_parallel)
                                                .group(parallel.group))
                                      : pipe::LayerSpec::of<nn::TransformerBlock>(a.embed, a.heads));
  layers.push_back(final_norm(a.embed, parallel));
  // The LM head: the token embedding's weight, transposed, maps [B, T, C] to logits [B, T, vocab] (this rank's
  // part of the vocabulary when split; copy_to_region sums the input's gradient over the group).
  layers.push_back(pipe::TiedLayerSpec(
      "embed", token_embedding(vocab, a.embed, parallel), [parallel](nn::Module& m, const tensor_list& x) {
        const Tensor input = parallel.split() ? tp::copy_to_region(x[0], parallel.group) : x[0];
        return tensor_list{matmul(input, m.named_parameters()[0].second.t())};
      }));
  return layers;
}

pipe::LossFn lm_loss(const Parallelism& parallel) {
  return [parallel](const tensor_list& outputs, const tensor_list& labels) {
    const Tensor& logits = outputs[0];
    const Tensor targets = labels[0].to(logits.device());
    if (parallel.split()) return nn::vocab_parallel_cross_entropy(logits, targets, parallel.group).mean();
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  };
}

int64_t padded_vocab(int64_t characters, int64_t vocab_multiple, int64_t tensor_parallel) {
  const int64_t multiple = std::lcm(vocab_multiple, tensor_parallel);
  return (characters + multiple - 1) / multiple * multiple;
}

}  // namespace char_gpt
