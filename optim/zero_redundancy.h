#pragma once
// ZeRO stages 1 and 2 (DeepSpeed's Zero Redundancy Optimizer, under torch.distributed.optim's name): any strata
// optimizer with its state, and at stage 2 also the gradients, partitioned across a data-parallel group.
//
//   namespace dist = strata::distributed;
//   dist::init();
//   nn::Sequential model(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));   // the same on every rank
//   nn::DistributedDataParallel ddp(model);            // stage 1: DDP averages the gradients
//   optim::ZeroRedundancyOptimizer<optim::AdamW> opt(model->parameters(), optim::AdamWOptions(1e-3));
//   opt.zero_grad();
//   cross_entropy(model(randn({64, 784})), randint(0, 10, {64})).backward();
//   double norm = opt.clip_grad_norm_(1.0);            // the global norm, over every rank's shard
//   opt.step();                                        // each rank steps its shard; the parameters are all-gathered
//
//   // Stage 2, without DDP: the optimizer reduce-scatters the gradients in buckets while backward runs.
//   nn::Linear model2(784, 10);
//   optim::ZeroRedundancyOptimizer<optim::SGD> opt2(model2->parameters(), optim::SGDOptions(0.1).momentum(0.9),
//                                                   {.stage = 2});
//   cross_entropy(model2(randn({64, 784})), randint(0, 10, {64})).backward();
//   opt2.step();
//
// Note [flat shards]: the parameters of each param group and dtype lie end to end in buckets
// (distributed::GradReducer::make_buckets: reverse order, at most bucket_cap_mb MiB each), each padded with zeros
// to a multiple of the group size D. Rank r owns the r-th D-th of every bucket: a flat "shard" tensor that an
// inner optimizer of the wrapped type steps with the group's options (set_lr and schedulers reach it). SGD, Adam
// and AdamW are elementwise (T::elementwise_update; ZeroRedundancyOptimizer<T> does not compile for a T without it,
// and a step that leaves state not shaped as its shard throws), so stepping a flat slice equals stepping each
// parameter, bit for bit, as long as every parameter of a bucket steps together: a bucket whose parameters have a
// gradient on this step is stepped, one whose parameters have none is skipped (as the unsharded optimizer skips
// them), and a bucket with some of each is an error (its shard's state cannot advance in part). Per rank the state
// is 1/D of the whole, plus at most D - 1 padding elements per bucket.
//
// A step: the shard's gradient is this rank's slice of the averaged gradients (stage 1: of the parameters'
// grad(), which DistributedDataParallel or the pipeline engine averaged; stage 2: what its reduce-scatters
// accumulated), its values are this rank's slice of the parameters (so a model loaded after the optimizer was
// made is seen), the inner optimizer steps, and one all-gather per bucket writes every rank's slice back into
// the parameters. step() uses up the shards' gradients; at stage 2 the parameters keep no grad() at all (each
// is freed once its bucket's reduce-scatter started), so accumulate by running several backwards before a step.
//
// state_dict() and load_state_dict() are those of the unsharded optimizer, per parameter and full size: saving
// all-gathers the shards' state and loading keeps this rank's slice, so a checkpoint resumes at any group size,
// with or without ZeRO. state_dict() is collective over the group; load_state_dict() is not. GradScaler works with stage 1 (it unscales
// grad()); at stage 2 it is an error.

#include <concepts>
#include <functional>
#include <memory>
#include <vector>

#include "strata/distributed/process_group.h"
#include "strata/optim/optimizer.h"

namespace strata::distributed {
class GradReducer;
}

namespace strata::optim {

/// Options of ZeroRedundancyOptimizer.
struct ZeroOptions {
  distributed::Group group = {};  ///< the data-parallel group the state is partitioned over; WORLD when empty
  int stage = 1;                  ///< 1: optimizer state; 2: also gradients (reduce-scattered during backward)
  double bucket_cap_mb = 25;      ///< the most MiB of parameters in one bucket (one reduce-scatter, one all-gather)
};

/// One bucket of the partition (Note [flat shards]).
struct ZeroBucket {
  ScalarType dtype;              ///< the parameters' dtype
  size_t param_group;            ///< the param group its parameters belong to
  std::vector<size_t> params;    ///< parameter numbers (across groups), in the order they lie in the bucket
  std::vector<int64_t> offsets;  ///< where each of them starts in the bucket
  int64_t numel;                 ///< parameter elements
  int64_t padded;                ///< numel rounded up to a multiple of the group size
  int64_t shard_numel;           ///< elements each rank owns: padded / group size
};

/// The partitioning machinery behind ZeroRedundancyOptimizer<T>; it is an Optimizer holding the real parameters.
class ShardedOptimizer : public Optimizer {
 public:
  /// Makes the inner optimizer over shard param groups (what ZeroRedundancyOptimizer<T> passes).
  using Factory =
      std::function<std::unique_ptr<Optimizer>(std::vector<OptimizerParamGroup> groups, const OptimizerOptions&)>;
  ~ShardedOptimizer() override;

  /// One update: this rank's shard steps, then every rank's updated slice is all-gathered into the parameters.
  void step() override;
  /// Clears the parameters' gradients and the shards' (stage 2 accumulates there).
  void zero_grad(bool set_to_none = true) override;
  /// Scales the gradients as nn::utils::clip_grad_norm_ would scale the whole averaged gradient, computing the
  /// norm of order norm_type over every rank's shard; returns it, the same on every rank. Call it between the
  /// last backward and step().
  double clip_grad_norm_(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);

  int stage() const { return options_.stage; }                         ///< 1 or 2
  const distributed::Group& group() const { return options_.group; }   ///< the partition's group
  const std::vector<ZeroBucket>& buckets() const { return buckets_; }  ///< the partition
  /// Elements of optimizer state this rank holds (every state tensor of every shard), for memory accounting.
  int64_t state_numel() const;

 protected:
  /// Checks the options, partitions the parameters, copies group rank 0's parameter values to every rank and makes
  /// the inner optimizer. Every rank of the group calls it.
  ShardedOptimizer(std::vector<OptimizerParamGroup> groups, const OptimizerOptions& defaults, ZeroOptions options,
                   const Factory& factory);
  std::vector<std::string> state_names(const OptimizerOptions& options) const override;
  std::vector<std::string> optional_state_names() const override;
  std::vector<ParamState> full_state() const override;
  void set_full_state(std::vector<ParamState> state) override;

 private:
  Tensor shard_gradient(size_t b) const;
  std::shared_ptr<distributed::Work> launch_reduce_scatter(size_t b);
  std::shared_ptr<distributed::Work> launch_all_gather(size_t b, Tensor& flat) const;
  template <class F>
  void for_each_overlap(size_t b, F&& f) const;

  ZeroOptions options_;
  int rank_ = 0;  // in the group
  std::vector<ZeroBucket> buckets_;
  std::vector<Tensor> params_;    // every parameter, in number order
  std::vector<Tensor> shards_;    // per bucket: this rank's slice, a leaf the inner optimizer steps
  std::vector<Tensor> sending_;   // stage 2, per bucket: its gradients while the reduce-scatter runs
  std::vector<Tensor> received_;  // stage 2, per bucket: this rank's part of their average
  Tensor seen_;                   // stage 2: per parameter, 1 once some rank had a gradient for it (CPU)
  std::unique_ptr<Optimizer> inner_;
  std::unique_ptr<distributed::GradReducer> reducer_;  // stage 2
};

/// An optimizer whose every element's update reads only that element (T::elementwise_update): what ZeRO can step
/// on flat slices of many parameters.
template <class T>
concept ElementwiseOptimizer = std::derived_from<T, Optimizer> && requires {
  requires T::elementwise_update;
};

/// ZeRO over optimizer type T (SGD, Adam, AdamW): T's options, param groups and state dict; see the top of this file.
template <class T>
class ZeroRedundancyOptimizer : public ShardedOptimizer {
  static_assert(ElementwiseOptimizer<T>,
                "ZeroRedundancyOptimizer<T>: T must update each element on its own (a norm or a matrix of the whole "
                "parameter cannot be taken from a slice of it); declare static constexpr bool elementwise_update = "
                "true in T when it does");

 public:
  using Options = typename T::Options;  ///< the wrapped optimizer's options
  /// One group of parameters with `options`.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, const Options& options, ZeroOptions zero = {})
      : ZeroRedundancyOptimizer({OptimizerParamGroup(std::move(params))}, options, std::move(zero)) {}
  /// Several groups; a group without options takes `defaults`.
  ZeroRedundancyOptimizer(std::vector<OptimizerParamGroup> groups, const Options& defaults, ZeroOptions zero = {})
      : ShardedOptimizer(std::move(groups), defaults, std::move(zero),
                         [](std::vector<OptimizerParamGroup> shards, const OptimizerOptions& d) {
                           return std::make_unique<T>(std::move(shards), static_cast<const Options&>(d));
                         }) {}
};

}  // namespace strata::optim
