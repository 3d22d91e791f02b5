#include "strata/nn/tensor_parallel.h"

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/tensor_parallel.h"
#include "strata/nn/embedding.h"
#include "strata/nn/transformer.h"

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

/// Checks that `whole` (the layer's `what`) splits evenly over the group.
void check_divisible(int64_t whole, const distributed::Group& group, const char* layer, const char* what) {
  STRATA_CHECK(whole >= 0, layer, ": ", what, " must be non-negative, got ", whole);
  STRATA_CHECK(whole % group->size() == 0, layer, ": ", what, " ", whole,
               " is not divisible by the tensor-parallel size ", group->size());
}

void collect_splits(const Module& module, const std::string& prefix, std::map<std::string, ParameterSplit>& out) {
  if (const auto* layer = dynamic_cast<const TensorParallelLayer*>(&module))
    for (const auto& [name, split] : layer->parameter_splits()) out.emplace(prefix + name, split);
  for (const auto& [name, child] : module.named_children()) collect_splits(*child, prefix + name + ".", out);
}

/// The whole layer a tensor-parallel linear layer of these sizes splits, drawn as nn::Linear draws it.
template <class Options>
Linear whole_linear(const Options& o) {
  return Linear(LinearOptions(o.in_features(), o.out_features()).bias(o.bias()));
}

/// Checks that `whole` has the sizes `o` says.
template <class Options>
void check_whole(const Options& o, const LinearImpl& whole, const char* layer) {
  STRATA_CHECK(whole.options.in_features() == o.in_features() && whole.options.out_features() == o.out_features() &&
                   whole.options.bias() == o.bias(),
               layer, ": the whole layer is a ", whole.options.in_features(), " -> ", whole.options.out_features(),
               " Linear (bias ", whole.options.bias(), "), its options say ", o.in_features(), " -> ", o.out_features(),
               " (bias ", o.bias(), ")");
}

}  // namespace

std::map<std::string, ParameterSplit> parameter_splits(const Module& module) {
  std::map<std::string, ParameterSplit> splits;
  collect_splits(module, "", splits);
  return splits;
}

Tensor slice_tensor(const Tensor& whole, const ParameterSplit& split) {
  const int64_t n = split.group->size(), blocks = split.stride;
  STRATA_CHECK(split.dim >= 0 && split.dim < whole.dim() && whole.size(split.dim) % (n * blocks) == 0,
               "slice_tensor: a tensor of shape ", whole.sizes(), " does not cut along dim ", split.dim, " into ",
               blocks, " block(s) over ", n, " ranks");
  NoGradGuard no_grad;
  tensor_list mine;
  for (const Tensor& block : whole.detach().chunk(blocks, split.dim)) {
    const int64_t part = block.size(split.dim) / n;
    mine.push_back(block.narrow(split.dim, split.group->rank() * part, part));
  }
  return cat(mine, split.dim).contiguous().clone();
}

Tensor whole_tensor(const Tensor& slice, const ParameterSplit& split) {
  const int64_t n = split.group->size();
  NoGradGuard no_grad;
  tensor_list slices;
  for (int64_t r = 0; r < n; ++r) slices.push_back(empty_like(slice));
  distributed::all_gather(slices, slice.detach().contiguous(), split.group);
  // Block b of the whole is block b of every rank's slice, in rank order.
  std::vector<tensor_list> blocks;
  for (const Tensor& part : slices) blocks.push_back(part.chunk(split.stride, split.dim));
  tensor_list pieces;
  for (int64_t b = 0; b < split.stride; ++b)
    for (int64_t r = 0; r < n; ++r) pieces.push_back(blocks[r][b]);
  return cat(pieces, split.dim);
}

StateDict whole_state_dict(const Module& module) {
  StateDict state = module.state_dict();
  for (const auto& [name, split] : parameter_splits(module)) state.at(name) = whole_tensor(state.at(name), split);
  return state;
}

StateDict slice_state_dict(const Module& module, const StateDict& whole) {
  StateDict state = whole;
  const NamedTensors params = module.named_parameters();
  for (const auto& [name, split] : parameter_splits(module)) {
    auto it = state.find(name);
    if (it == state.end()) continue;  // load_state_dict names what is missing
    const Tensor* mine = params.find(name);
    const int64_t n = split.group->size();
    STRATA_CHECK(mine && it->second.dim() == mine->dim() && it->second.size(split.dim) == mine->size(split.dim) * n,
                 "slice_state_dict: \"", name, "\" has shape ", it->second.sizes(), ", but this rank holds ",
                 (mine ? mine->sizes() : IntArrayRef{}), ", a slice along dim ", split.dim, " of ", n,
                 " (the whole tensor, not a slice of another group size, is expected)");
    it->second = slice_tensor(it->second, split);
  }
  return state;
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& opts)
    : ColumnParallelLinearImpl(opts, *whole_linear(opts)) {}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& opts, const LinearImpl& whole)
    : Module("ColumnParallelLinear"), options(opts) {
  const distributed::Group& group = checked_group(options.group(), "ColumnParallelLinear");
  STRATA_CHECK(options.stride() >= 1 && options.out_features() % options.stride() == 0,
               "ColumnParallelLinear: stride must be at least 1 and divide out_features ", options.out_features(),
               ", got ", options.stride());
  STRATA_CHECK(options.stride() == 1 || !options.gather_output(), "ColumnParallelLinear: gather_output with stride ",
               options.stride(),
               " would put each rank's blocks side by side, not in the whole layer's order; keep "
               "the outputs split (gather_output false) or use stride 1");
  check_divisible(options.out_features() / options.stride(), group, "ColumnParallelLinear",
                  options.stride() == 1 ? "out_features" : "out_features / stride");
  check_whole(options, whole, "ColumnParallelLinear");
  const ParameterSplit rows{0, options.stride(), group};
  weight = register_parameter("weight", slice_tensor(whole.weight, rows));
  if (options.bias()) bias = register_parameter("bias", slice_tensor(whole.bias, rows));
}

std::map<std::string, ParameterSplit> ColumnParallelLinearImpl::parameter_splits() const {
  const ParameterSplit rows{0, options.stride(), options.group()};
  if (!bias.defined()) return {{"weight", rows}};
  return {{"weight", rows}, {"bias", rows}};
}

Tensor ColumnParallelLinearImpl::forward(const Tensor& input) {
  STRATA_CHECK(input.dim() >= 1 && input.size(-1) == options.in_features(),
               "ColumnParallelLinear: expected input with last dim ", options.in_features(), ", got shape ",
               input.sizes());
  const Tensor x = options.sequence_parallel()
                       ? tp::gather_from_sequence_region(input, options.group(), options.sequence_dim())
                       : tp::copy_to_region(input, options.group());
  const Tensor out = linear(x, weight, bias);
  return options.gather_output() ? tp::gather_from_region(out, options.group()) : out;
}

void ColumnParallelLinearImpl::pretty_print(std::ostream& os) const {
  os << std::boolalpha << "ColumnParallelLinear(in_features=" << options.in_features()
     << ", out_features=" << options.out_features() << ", bias=" << options.bias()
     << ", gather_output=" << options.gather_output() << ", tensor_parallel=" << options.group()->size() << ")";
}

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& opts)
    : RowParallelLinearImpl(opts, *whole_linear(opts)) {}

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& opts, const LinearImpl& whole)
    : Module("RowParallelLinear"), options(opts) {
  const distributed::Group& group = checked_group(options.group(), "RowParallelLinear");
  check_divisible(options.in_features(), group, "RowParallelLinear", "in_features");
  check_whole(options, whole, "RowParallelLinear");
  weight = register_parameter("weight", slice_tensor(whole.weight, {1, 1, group}));
  if (options.bias()) bias = register_parameter("bias", whole.bias.detach().clone());
}

std::map<std::string, ParameterSplit> RowParallelLinearImpl::parameter_splits() const {
  return {{"weight", {1, 1, options.group()}}};
}

Tensor RowParallelLinearImpl::forward(const Tensor& input) {
  const int64_t part = weight.size(1);
  const int64_t expected = options.input_is_parallel() ? part : options.in_features();
  STRATA_CHECK(input.dim() >= 1 && input.size(-1) == expected, "RowParallelLinear: expected input with last dim ",
               expected, options.input_is_parallel() ? " (its part of in_features, input_is_parallel)" : "",
               ", got shape ", input.sizes());
  const Tensor x = options.input_is_parallel() ? input : tp::scatter_to_region(input, options.group());
  // The bias is added once, after the partial products are summed. On a split sequence each rank adds it to its
  // positions only, so its gradient is summed over the group.
  const distributed::Group& group = options.group();
  if (!options.sequence_parallel()) {
    const Tensor out = tp::reduce_from_region(linear(x, weight), group);
    return bias.defined() ? out + bias : out;
  }
  const Tensor out = tp::reduce_scatter_to_sequence_region(linear(x, weight), group, options.sequence_dim());
  return bias.defined() ? out + tp::copy_to_region(bias, group) : out;
}

void RowParallelLinearImpl::pretty_print(std::ostream& os) const {
  os << std::boolalpha << "RowParallelLinear(in_features=" << options.in_features()
     << ", out_features=" << options.out_features() << ", bias=" << options.bias()
     << ", input_is_parallel=" << options.input_is_parallel() << ", tensor_parallel=" << options.group()->size() << ")";
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const VocabParallelEmbeddingOptions& opts)
    : Module("VocabParallelEmbedding"), options(opts) {
  const distributed::Group& group = checked_group(options.group(), "VocabParallelEmbedding");
  check_divisible(options.num_embeddings(), group, "VocabParallelEmbedding", "num_embeddings");
  Embedding whole(options.num_embeddings(), options.embedding_dim());
  weight = register_parameter("weight", slice_tensor(whole->weight, {0, 1, group}));
}

std::map<std::string, ParameterSplit> VocabParallelEmbeddingImpl::parameter_splits() const {
  return {{"weight", {0, 1, options.group()}}};
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

/// dropout of x, this rank's part along `dim` of a tensor split over `group`, by its part of the whole tensor's mask:
/// what one process drops there, with the generator advanced as by the whole.
Tensor split_dropout(const Tensor& x, double p, int64_t dim, const distributed::Group& group) {
  if (p == 0) return x;
  DimVector whole = x.sizes();
  whole[dim] *= group->size();
  const Tensor mask = dropout(ones(whole, TensorOptions(x.dtype()).device(x.device())), p);  // 1 * the whole's mask
  return x * mask.narrow(dim, group->rank() * x.size(dim), x.size(dim));
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

ParallelTransformerBlockImpl::ParallelTransformerBlockImpl(const ParallelTransformerBlockOptions& opts)
    : Module("ParallelTransformerBlock"), options(opts) {
  const char* layer = "ParallelTransformerBlock";
  const distributed::Group& group = checked_group(options.group(), layer);
  const int64_t C = options.embed_dim();
  // The block without parallelism, drawn as one process draws it, then split (it checks the sizes first).
  TransformerBlock whole(C, options.num_heads(), options.mlp_ratio(), options.dropout());
  check_divisible(options.num_heads(), group, layer, "num_heads");
  // c_attn's rows are q, k, v of every head: as 3 blocks cut over the group, rank r keeps q, k and v of its heads.
  const bool sp = options.sequence_parallel();
  ln_1 = register_module("ln_1", LayerNorm(C));
  auto attn = register_module("attn", std::make_shared<Module>("ParallelCausalSelfAttention"));
  c_attn = attn->register_module(
      "c_attn", ColumnParallelLinear(ColumnParallelLinearOptions(C, 3 * C).sequence_parallel(sp).stride(3).group(group),
                                     *whole->attn->c_attn));
  c_proj = attn->register_module(
      "c_proj",
      RowParallelLinear(RowParallelLinearOptions(C, C).sequence_parallel(sp).group(group), *whole->attn->c_proj));
  ln_2 = register_module("ln_2", LayerNorm(C));
  const int64_t hidden = options.mlp_ratio() * C;
  auto mlp = register_module("mlp", std::make_shared<Module>("ParallelMLP"));
  auto linears = whole->mlp->children();  // c_fc, gelu, c_proj, dropout
  c_fc = mlp->register_module(
      "c_fc", ColumnParallelLinear(ColumnParallelLinearOptions(C, hidden).sequence_parallel(sp).group(group),
                                   *std::dynamic_pointer_cast<LinearImpl>(linears[0])));
  mlp_proj = mlp->register_module(
      "c_proj", RowParallelLinear(RowParallelLinearOptions(hidden, C).sequence_parallel(sp).group(group),
                                  *std::dynamic_pointer_cast<LinearImpl>(linears[2])));
}

Tensor ParallelTransformerBlockImpl::forward(const Tensor& x) {
  const distributed::Group& group = options.group();
  const int64_t C = options.embed_dim(), n = group->size();
  STRATA_CHECK(x.dim() == 3 && x.size(2) == C, "ParallelTransformerBlock: expected input of shape [B, T",
               options.sequence_parallel() ? " / n" : "", ", ", C, "], got shape ", x.sizes());
  // On a split sequence LayerNorm's parameters get partial gradients: copy_to_region sums them over the group.
  auto norm = [&](const LayerNorm& ln, const Tensor& t) {
    if (!options.sequence_parallel()) return ln(t);
    return layer_norm(t, {C}, tp::copy_to_region(ln->weight, group), tp::copy_to_region(ln->bias, group),
                      ln->options.eps());
  };
  const double p = is_training() ? options.dropout() : 0.0;
  auto drop = [&](const Tensor& t) {
    return options.sequence_parallel() ? split_dropout(t, p, 1, group) : dropout(t, p);
  };
  auto attention = [&](const Tensor& t) {
    const Tensor qkv = c_attn(t);  // [B, T, 3C / n], T whole also under sequence parallelism
    const int64_t B = qkv.size(0), T = qkv.size(1), H = options.num_heads() / n, D = C / options.num_heads();
    const tensor_list parts = qkv.split(C / n, 2);
    auto heads = [&](const Tensor& p) { return p.reshape({B, T, H, D}).transpose(1, 2); };  // [B, H, T, D]
    const Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), std::nullopt, p,
                                                  /*is_causal=*/true, std::nullopt, false,
                                                  AttentionHeads{group->rank() * H, options.num_heads()});
    return drop(c_proj(y.transpose(1, 2).reshape({B, T, C / n})));
  };
  const Tensor h = x + attention(norm(ln_1, x));
  return h + drop(mlp_proj(gelu(c_fc(norm(ln_2, h)))));
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
