#include "strata/optim/zero_redundancy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/grad_reducer.h"
#include "strata/tensor/creation.h"

namespace strata::optim {

namespace dist = strata::distributed;

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";

// Throws on every rank of the group when the ranks' partitions differ (different parameters would pair unrelated
// slices in every collective) or when some rank found `error` in its parameters, so that none waits for the others.
void check_same_partition(const std::vector<ZeroBucket>& buckets, const std::string& error, const dist::Group& group) {
  std::string layout;
  for (const ZeroBucket& b : buckets) layout += str(b.dtype, ":", b.numel, " ");
  const auto hash = static_cast<int64_t>(std::hash<std::string>{}(layout) >> 1);
  Tensor facts = tensor({hash, -hash, int64_t{error.empty() ? 0 : 1}});
  dist::all_reduce(facts, dist::ReduceOp::MAX, group);
  const std::string where = group ? group->describe() : "WORLD";
  STRATA_CHECK(error.empty(), kName, ": ", error);
  STRATA_CHECK(facts[2].item<int64_t>() == 0, kName, ": another rank of ", where,
               " refused its parameters (its error says why)");
  STRATA_CHECK(facts[0].item<int64_t>() == -facts[1].item<int64_t>(), kName, ": the ranks of ", where,
               " pass different parameters (this rank's buckets, dtype:numel: ", layout,
               "); every rank must pass the same parameters in the same order");
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<OptimizerParamGroup> groups, const OptimizerOptions& defaults,
                                   ZeroOptions options, const Factory& factory)
    : Optimizer(kName, std::move(groups), defaults), options_(std::move(options)) {
  STRATA_CHECK(options_.stage == 1 || options_.stage == 2, kName, ": stage must be 1 (optimizer state) or 2 ",
               "(also gradients), got ", options_.stage);
  STRATA_CHECK(options_.bucket_cap_mb > 0, kName, ": bucket_cap_mb must be positive, got ", options_.bucket_cap_mb);
  STRATA_CHECK(dist::is_initialized(), kName, ": distributed::init() has not been called");
  rank_ = dist::get_rank(options_.group);
  STRATA_CHECK(rank_ >= 0, kName, ": this process (global rank ", dist::get_rank(), ") is not a member of ",
               options_.group->describe());
  const int64_t size = dist::get_world_size(options_.group);

  std::vector<size_t> group_of;
  std::string error;  // found in this rank's parameters; every rank of the group learns that one did
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const Tensor& p : groups_[g].params()) {
      if (error.empty() && p.device() != groups_[0].params()[0].device())
        error = str("parameter ", params_.size(), " is on ", p.device(), " but parameter 0 on ",
                    groups_[0].params()[0].device(), "; the partition lives on one device");
      params_.push_back(p);
      group_of.push_back(g);
    }
  const Device device = params_.front().device();
  for (std::vector<size_t>& members : dist::GradReducer::make_buckets(params_, options_.bucket_cap_mb, group_of)) {
    ZeroBucket b{params_[members.front()].dtype(), group_of[members.front()], std::move(members), {}, 0, 0, 0};
    for (size_t i : b.params) {
      b.offsets.push_back(b.numel);
      b.numel += params_[i].numel();
    }
    b.padded = (b.numel + size - 1) / size * size;
    b.shard_numel = b.padded / size;
    buckets_.push_back(std::move(b));
  }
  check_same_partition(buckets_, error, options_.group);
  {  // Replicas start from group rank 0's values, as DistributedDataParallel's do.
    NoGradGuard no_grad;
    std::vector<std::shared_ptr<dist::Work>> works;
    const int root = dist::get_global_rank(options_.group, 0);
    for (const Tensor& p : params_) works.push_back(dist::broadcast(p, root, options_.group, /*async_op=*/true));
    for (const auto& work : works) work->wait();
  }

  std::vector<OptimizerParamGroup> inner_groups;
  for (const ZeroBucket& b : buckets_) {
    Tensor shard = zeros({b.shard_numel}, TensorOptions(b.dtype).device(device));
    shard.requires_grad_(true);
    shards_.push_back(shard);
    inner_groups.emplace_back(std::vector<Tensor>{shard}, groups_[b.param_group].options());
  }
  inner_ = factory(std::move(inner_groups), defaults);

  if (options_.stage == 2) {
    sending_.resize(buckets_.size());
    received_.resize(buckets_.size());
    seen_ = zeros({static_cast<int64_t>(params_.size())}, kDouble);
    std::vector<std::string> names;
    for (size_t i = 0; i < params_.size(); ++i) names.push_back("parameter " + std::to_string(i));
    std::vector<std::vector<size_t>> members;
    for (const ZeroBucket& b : buckets_) members.push_back(b.params);
    reducer_ = std::make_unique<dist::GradReducer>(
        kName, params_, std::move(names), std::move(members),
        dist::GradReducer::Callbacks{.launch = [this](size_t b) { return launch_reduce_scatter(b); },
                                     .complete =
                                         [this](size_t b) {
                                           Tensor& grad = shards_[b].mutable_grad();
                                           if (grad.defined())
                                             grad.add_(received_[b]);
                                           else
                                             grad = received_[b];
                                           sending_[b] = Tensor();
                                           received_[b] = Tensor();
                                           // After the last bucket: which parameters had a gradient anywhere.
                                           if (b + 1 == buckets_.size())
                                             dist::all_reduce(seen_, dist::ReduceOp::MAX, options_.group);
                                         }},
        "use stage 1, whose gradients DistributedDataParallel reduces (under no_sync() for such a backward)");
  }
}

ShardedOptimizer::~ShardedOptimizer() = default;

// Calls f(i, from, to, n) for each parameter i of bucket b that overlaps this rank's slice: elements
// [from, from + n) of the flattened parameter are elements [to, to + n) of the shard.
template <class F>
void ShardedOptimizer::for_each_overlap(size_t b, F&& f) const {
  const ZeroBucket& bucket = buckets_[b];
  const int64_t lo = rank_ * bucket.shard_numel, hi = lo + bucket.shard_numel;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const size_t i = bucket.params[k];
    const int64_t start = bucket.offsets[k], end = start + params_[i].numel();
    const int64_t a = std::max(start, lo), e = std::min(end, hi);
    if (a < e) f(i, a - start, a - lo, e - a);
  }
}

// Stage 2's launch: the bucket's gradients end to end (zeros for a parameter without one, and for the padding),
// each parameter's grad() freed, and the reduce-scatter of their average started.
std::shared_ptr<dist::Work> ShardedOptimizer::launch_reduce_scatter(size_t b) {
  const ZeroBucket& bucket = buckets_[b];
  Tensor send = empty({bucket.padded}, TensorOptions(bucket.dtype).device(shards_[b].device()));
  send.narrow(0, bucket.numel, bucket.padded - bucket.numel).zero_();
  double* seen = seen_.data_ptr<double>();
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const size_t i = bucket.params[k];
    Tensor& grad = params_[i].mutable_grad();
    Tensor slot = send.narrow(0, bucket.offsets[k], params_[i].numel());
    if (!grad.defined()) {
      slot.zero_();
      continue;
    }
    STRATA_CHECK(grad.sizes() == params_[i].sizes() && grad.dtype() == bucket.dtype, kName, ": parameter ", i,
                 " has shape ", params_[i].sizes(), " and dtype ", params_[i].dtype(), " but its gradient ",
                 grad.sizes(), " and ", grad.dtype());
    slot.copy_(grad.reshape({-1}));
    seen[i] = 1;
    grad = Tensor();
  }
  sending_[b] = send;
  received_[b] = empty({bucket.shard_numel}, send.options());
  return dist::reduce_scatter_tensor(received_[b], send, dist::ReduceOp::AVG, options_.group, /*async_op=*/true);
}

// Bucket b's gradient on this rank's slice: of the parameters' averaged grad() (stage 1) or what the reduce-scatters
// accumulated (stage 2). Undefined when no parameter of the bucket has a gradient; an error when some have.
Tensor ShardedOptimizer::shard_gradient(size_t b) const {
  const ZeroBucket& bucket = buckets_[b];
  std::vector<size_t> with, without;
  for (size_t i : bucket.params) {
    const bool has = options_.stage == 1 ? params_[i].grad().defined() : seen_.data_ptr<double>()[i] > 0;
    (has ? with : without).push_back(i);
    STRATA_CHECK(options_.stage == 1 || !params_[i].grad().defined(), kName, "::step: parameter ", i,
                 " has a gradient, but at stage 2 backward hands every gradient to the optimizer's reduce-scatter "
                 "and frees it; do not also wrap the model in DistributedDataParallel, and do not set grad() by hand");
  }
  STRATA_CHECK(with.empty() || without.empty(), kName, "::step: parameter ", with.empty() ? 0 : with.front(),
               " has a gradient but parameter ", without.empty() ? 0 : without.front(),
               ", in the same bucket, has none; a bucket's shard steps as one (Note [flat shards]): give every "
               "parameter a gradient on each step, or freeze the unused ones (requires_grad false) before making "
               "the optimizer");
  if (with.empty()) return Tensor();
  if (options_.stage == 2) return shards_[b].grad();
  NoGradGuard no_grad;
  Tensor grad = zeros({bucket.shard_numel}, shards_[b].options());
  for_each_overlap(b, [&](size_t i, int64_t from, int64_t to, int64_t n) {
    grad.narrow(0, to, n).copy_(params_[i].grad().reshape({-1}).narrow(0, from, n));
  });
  return grad;
}

std::shared_ptr<dist::Work> ShardedOptimizer::launch_all_gather(size_t b, Tensor& flat) const {
  flat = empty({buckets_[b].padded}, shards_[b].options());
  return dist::all_gather_into_tensor(flat, shards_[b], options_.group, /*async_op=*/true);
}

void ShardedOptimizer::step() {
  check_grads();
  for (size_t b = 0; b < buckets_.size(); ++b) shards_[b].mutable_grad() = shard_gradient(b);
  {
    NoGradGuard no_grad;
    // The parameters may have changed since the last step (a model loaded after the optimizer was made).
    for (size_t b = 0; b < buckets_.size(); ++b)
      for_each_overlap(b, [&](size_t i, int64_t from, int64_t to, int64_t n) {
        shards_[b].narrow(0, to, n).copy_(params_[i].reshape({-1}).narrow(0, from, n));
      });
    for (size_t b = 0; b < buckets_.size(); ++b)
      inner_->groups_[b].options_ = groups_[buckets_[b].param_group].options_->clone();
  }
  inner_->step();
  // A state entry other than the step count must be elementwise, shaped as its shard (Note [flat shards]).
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (const auto& [name, value] : inner_->state_[b])
      STRATA_CHECK(name == "step" || value.sizes() == shards_[b].sizes(), kName, "::step: the inner optimizer keeps \"",
                   name, "\" of shape ", value.sizes(), " for a shard of shape ", shards_[b].sizes(),
                   "; ZeRO can partition only state shaped as the parameters (elementwise)");

  // Two all-gathers in flight at a time: the next one runs while this one's parameters are written.
  NoGradGuard no_grad;
  Tensor flat, next_flat;
  std::shared_ptr<dist::Work> next = buckets_.empty() ? nullptr : launch_all_gather(0, next_flat);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::shared_ptr<dist::Work> work = std::move(next);
    flat = std::move(next_flat);
    if (b + 1 < buckets_.size()) next = launch_all_gather(b + 1, next_flat);
    work->wait();
    const ZeroBucket& bucket = buckets_[b];
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      Tensor p = params_[bucket.params[k]];
      p.copy_(flat.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes()));
    }
  }
  for (Tensor& shard : shards_) shard.mutable_grad() = Tensor();
}

void ShardedOptimizer::zero_grad(bool set_to_none) {
  Optimizer::zero_grad(set_to_none);
  autograd::zero_grad(shards_, set_to_none);
  // Zero-filled gradients still count as gradients, as they do for the unsharded optimizer.
  if (seen_.defined() && set_to_none) seen_.zero_();
}

double ShardedOptimizer::clip_grad_norm_(double max_norm, double norm_type, bool error_if_nonfinite) {
  const std::string where = std::string(kName) + "::clip_grad_norm_";
  STRATA_CHECK(norm_type > 0, where, ": norm_type must be positive or inf, got ", norm_type);
  STRATA_CHECK(max_norm >= 0, where, ": max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  // As nn::utils::clip_grad_norm_: the norm of the per-shard norms is the norm of everything together.
  const bool max_norm_type = std::isinf(norm_type);
  double local = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor grad = shard_gradient(b);
    if (!grad.defined()) continue;
    const double n = grad.norm(norm_type).item<double>();
    if (!max_norm_type)
      local += std::pow(n, norm_type);
    else if (n > local || std::isnan(n))
      local = n;
  }
  Tensor reduced = scalar_tensor(local, kDouble);
  dist::all_reduce(reduced, max_norm_type ? dist::ReduceOp::MAX : dist::ReduceOp::SUM, options_.group);
  const double total = max_norm_type ? reduced.item<double>() : std::pow(reduced.item<double>(), 1 / norm_type);
  STRATA_CHECK(!error_if_nonfinite || std::isfinite(total), where, ": the total norm of order ", norm_type,
               " of the gradients is ", total, "; error_if_nonfinite is set, so the gradients were left alone");
  const double clip_coef = max_norm / (total + 1e-6);
  // Stage 1 scales grad() itself (every rank holds the averaged whole), so that step() and a GradScaler see it.
  if (!(clip_coef >= 1))
    for (const Tensor& t : options_.stage == 1 ? params_ : shards_)
      if (Tensor grad = t.grad(); grad.defined()) grad.mul_(clip_coef);
  return total;
}

int64_t ShardedOptimizer::state_numel() const {
  int64_t n = 0;
  for (const ParamState& state : inner_->state_)
    for (const auto& [name, t] : state)
      if (name != "step") n += t.numel();
  return n;
}

std::vector<std::string> ShardedOptimizer::state_names(const OptimizerOptions& options) const {
  return inner_->state_names(options);
}

std::vector<std::string> ShardedOptimizer::optional_state_names() const { return inner_->optional_state_names(); }

// Note [gathered state]: every rank all-gathers each stepped bucket's state, so the collectives must match: the
// ranks first agree (one all-reduce) on which buckets have state, with how many entries and at which step.
std::vector<ParamState> ShardedOptimizer::full_state() const {
  const auto nb = static_cast<int64_t>(buckets_.size());
  std::vector<double> facts;
  for (const ParamState& state : inner_->state_) {
    const double step = state.contains("step") ? static_cast<double>(state.at("step").item<int64_t>()) : -1;
    facts.push_back(static_cast<double>(state.size()));
    facts.push_back(step);
  }
  Tensor agreed = tensor(facts, kDouble);
  Tensor both = cat({agreed, agreed.neg()});
  dist::all_reduce(both, dist::ReduceOp::MAX, options_.group);
  // max(x) == -max(-x) == min(x): every rank has the same facts.
  STRATA_CHECK(both.narrow(0, 0, 2 * nb).add(both.narrow(0, 2 * nb, 2 * nb)).abs().max().item<double>() == 0, kName,
               "::state_dict: the ranks of ", options_.group ? options_.group->describe() : "WORLD",
               " hold shards stepped different numbers of times; they must step together");

  std::vector<ParamState> full(params_.size());
  NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const ZeroBucket& bucket = buckets_[b];
    for (const auto& [name, value] : inner_->state_[b]) {
      if (name == "step") {
        for (size_t i : bucket.params) full[i].emplace(name, value.clone());
        continue;
      }
      Tensor flat = empty({bucket.padded}, value.options());
      dist::all_gather_into_tensor(flat, value, options_.group);
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const Tensor& p = params_[bucket.params[k]];
        full[bucket.params[k]].emplace(name, flat.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes()));
      }
    }
  }
  return full;
}

void ShardedOptimizer::set_full_state(std::vector<ParamState> state) {
  const std::string where = std::string(kName) + "::load_state_dict";
  std::vector<ParamState> shard_state(buckets_.size());
  NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const ZeroBucket& bucket = buckets_[b];
    const size_t first = bucket.params.front();
    for (size_t i : bucket.params) {
      std::vector<std::string> mine, theirs;
      for (const auto& [name, value] : state[i]) mine.push_back(name);
      for (const auto& [name, value] : state[first]) theirs.push_back(name);
      STRATA_CHECK(mine == theirs, where, ": parameters ", first, " and ", i,
                   " lie in one bucket but the state dict gives them different entries (one stepped, the other "
                   "not?); a bucket's shard steps as one (Note [flat shards])");
      if (state[i].contains("step"))
        STRATA_CHECK(state[i].at("step").item<int64_t>() == state[first].at("step").item<int64_t>(), where,
                     ": parameters ", first, " and ", i, " lie in one bucket but took ",
                     state[first].at("step").item<int64_t>(), " and ", state[i].at("step").item<int64_t>(),
                     " steps; a bucket's shard steps as one (Note [flat shards])");
    }
    for (const auto& [name, value] : state[first]) {
      if (name == "step") {
        shard_state[b].emplace(name, value.clone());
        continue;
      }
      Tensor flat = zeros({bucket.padded}, value.options());
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const Tensor& part = state[bucket.params[k]].at(name);
        flat.narrow(0, bucket.offsets[k], part.numel()).copy_(part.reshape({-1}));
      }
      shard_state[b].emplace(name, flat.narrow(0, rank_ * bucket.shard_numel, bucket.shard_numel).clone());
    }
  }
  inner_->state_ = std::move(shard_state);
}

}  // namespace strata::optim
