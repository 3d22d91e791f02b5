#include "strata/nn/tensor_parallel.h"

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/tensor_parallel.h"
#include "strata/nn/embedding.h"
#include "strata/nn/linear.h"

namespace strata::nn {

namespace tp = distributed::tensor_parallel;

namespace {

/// The group a layer splits over, checked: set, and this process one of its ranks.
const distributed::Group& checked_group(const distributed::Group& group, const char* layer) {
  STRATA_CHECK(group, layer,
               ": no tensor-parallel group: set .group(...) in its options (a grid's "
               "get_model_parallel_group(), or distributed::get_world_group() for every rank)");
  STRATA_CHECK(group->is_member(), layer, ": this process (global rank ", distributed::get_rank(),
               ") is not a rank of its tensor-parallel group ", group->describe());
  return group;
}

/// The size each rank holds of `whole` split over the group, checked to divide.
int64_t part_of(int64_t whole, const distributed::Group& group, const char* layer, const char* what) {
  STRATA_CHECK(whole >= 0, layer, ": ", what, " must be non-negative, got ", whole);
  STRATA_CHECK(whole % group->size() == 0, layer, ": ", what, " ", whole,
               " is not divisible by the tensor-parallel "
               "size ",
               group->size());
  return whole / group->size();
}

/// This rank's slice of `whole` along `dim`, a copy: its part of the parameter the unsplit layer draws.
Tensor slice(const Tensor& whole, int64_t dim, const distributed::Group& group) {
  const int64_t part = whole.size(dim) / group->size();
  return whole.detach().narrow(dim, group->rank() * part, part).clone();
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& opts)
    : Module("ColumnParallelLinear"), options(opts) {
  const distributed::Group& group = checked_group(options.group(), "ColumnParallelLinear");
  part_of(options.out_features(), group, "ColumnParallelLinear", "out_features");
  Linear whole(LinearOptions(options.in_features(), options.out_features()).bias(options.bias()));
  weight = register_parameter("weight", slice(whole->weight, 0, group));
  if (options.bias()) bias = register_parameter("bias", slice(whole->bias, 0, group));
}

Tensor ColumnParallelLinearImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.dim() >= 1 && input.size(-1) == options.in_features(),
               "ColumnParallelLinear: expected input with last dim ", options.in_features(), ", got shape ",
               input.sizes());
  const Tensor out = linear(tp::copy_to_region(input, options.group()), weight, bias);
  return options.gather_output() ? tp::gather_from_region(out, options.group()) : out;
}

void ColumnParallelLinearImpl::pretty_print(std::ostream& os) const {
  os << std::boolalpha << "ColumnParallelLinear(in_features=" << options.in_features()
     << ", out_features=" << options.out_features() << ", bias=" << options.bias()
     << ", gather_output=" << options.gather_output() << ", tensor_parallel=" << options.group()->size() << ")";
}

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& opts)
    : Module("RowParallelLinear"), options(opts) {
  const distributed::Group& group = checked_group(options.group(), "RowParallelLinear");
  part_of(options.in_features(), group, "RowParallelLinear", "in_features");
  Linear whole(LinearOptions(options.in_features(), options.out_features()).bias(options.bias()));
  weight = register_parameter("weight", slice(whole->weight, 1, group));
  if (options.bias()) bias = register_parameter("bias", whole->bias.detach().clone());
}

Tensor RowParallelLinearImpl::forward(const Tensor& input) {
  const int64_t part = weight.size(1);
  const int64_t expected = options.input_is_parallel() ? part : options.in_features();
  STRATA_CHECK(input.dim() >= 1 && input.size(-1) == expected, "RowParallelLinear: expected input with last dim ",
               expected, options.input_is_parallel() ? " (its part of in_features, input_is_parallel)" : "",
               ", got shape ", input.sizes());
  const Tensor x = options.input_is_parallel() ? input : tp::scatter_to_region(input, options.group());
  // The bias is added once, after the partial products are summed.
  const Tensor out = tp::reduce_from_region(linear(x, weight), options.group());
  return bias.defined() ? out + bias : out;
}

void RowParallelLinearImpl::pretty_print(std::ostream& os) const {
  os << std::boolalpha << "RowParallelLinear(in_features=" << options.in_features()
     << ", out_features=" << options.out_features() << ", bias=" << options.bias()
     << ", input_is_parallel=" << options.input_is_parallel() << ", tensor_parallel=" << options.group()->size() << ")";
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const VocabParallelEmbeddingOptions& opts)
    : Module("VocabParallelEmbedding"), options(opts) {
  const distributed::Group& group = checked_group(options.group(), "VocabParallelEmbedding");
  part_of(options.num_embeddings(), group, "VocabParallelEmbedding", "num_embeddings");
  Embedding whole(options.num_embeddings(), options.embedding_dim());
  weight = register_parameter("weight", slice(whole->weight, 0, group));
}

namespace {

/// Which of the replicated int64 `ids` in [0, whole) fall outside this rank's rows [start, start + part), and the
/// ids as rows of this rank's part (0 where outside). `op` names the caller in errors.
std::pair<Tensor, Tensor> local_ids(const Tensor& ids, int64_t whole, int64_t part, int rank, const char* op) {
  STRATA_CHECK(ids.dtype() == kLong, op, ": expected int64 indices, got ", ids.dtype());
  if (ids.numel() > 0) {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    STRATA_CHECK(lo >= 0 && hi < whole, op, ": index out of range [0, ", whole, "): got indices from ", lo, " to ", hi);
  }
  const int64_t start = rank * part;
  const Tensor outside = ids.lt(start).logical_or(ids.ge(start + part));
  return {outside, (ids - start).masked_fill(outside, 0)};
}

}  // namespace

Tensor VocabParallelEmbeddingImpl::forward(const Tensor& indices) {
  const auto [outside, rows] =
      local_ids(indices, options.num_embeddings(), weight.size(0), options.group()->rank(), "VocabParallelEmbedding");
  // Each id's vector comes from the one rank that holds its row; the others add zeros.
  const Tensor mine = embedding(weight, rows).masked_fill(outside.unsqueeze(-1), 0.0);
  return tp::reduce_from_region(mine, options.group());
}

void VocabParallelEmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "VocabParallelEmbedding(num_embeddings=" << options.num_embeddings()
     << ", embedding_dim=" << options.embedding_dim() << ", tensor_parallel=" << options.group()->size() << ")";
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& target, const distributed::Group& group) {
  const char* op = "vocab_parallel_cross_entropy";
  checked_group(group, op);
  STRATA_CHECK(logits.dim() >= 1 && IntArrayRef(logits.sizes().data(), logits.dim() - 1) == target.sizes(), op,
               ": expected logits [..., V / n] and targets [...], got shapes ", logits.sizes(), " and ",
               target.sizes());
  const int64_t part = logits.size(-1);
  const auto [outside, columns] = local_ids(target, part * group->size(), part, group->rank(), op);
  // The maximum only keeps exp() in range: it needs no gradient, and the loss does not depend on it.
  Tensor max;
  {
    NoGradGuard no_grad;
    max = std::get<0>(logits.max(-1, true));
    distributed::all_reduce(max, distributed::ReduceOp::MAX, group);
  }
  const Tensor shifted = logits - max;
  // log(sum over every rank's exp) - the target's logit, which one rank holds and the others count as 0.
  const Tensor sum_exp = tp::reduce_from_region(shifted.exp().sum(-1), group);
  const Tensor picked = shifted.gather(-1, columns.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0);
  return sum_exp.log() - tp::reduce_from_region(picked, group);
}

}  // namespace strata::nn
