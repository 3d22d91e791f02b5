#pragma once
// Data parallel training, as torch.nn.parallel.DistributedDataParallel: every rank holds the same
// model and trains on its own part of each batch; the gradients are averaged over the ranks during
// backward, so every rank takes the same optimizer step.
//
//   namespace dist = strata::distributed;
//   dist::init();
//   nn::Sequential model(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));   // the same on every rank
//   nn::DistributedDataParallel ddp(model);          // copies rank 0's parameters and buffers everywhere
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
//   data::DataLoader loader(data::FashionMNIST(), data::DataLoaderOptions(64).shuffle(true)
//                                                     .num_replicas(dist::get_world_size())
//                                                     .rank(dist::get_rank()));
//   for (auto& [x, y] : loader) {                    // this rank's shard
//     opt.zero_grad();
//     cross_entropy(model(x.flatten(1)), y).backward();   // grad() holds the average over the ranks on return
//     opt.step();
//   }
//   data::Example<> a = loader.batch(0), b = loader.batch(1);
//   {
//     auto guard = ddp.no_sync();                    // gradient accumulation: local only ...
//     cross_entropy(model(a.data.flatten(1)), a.target).backward();
//   }
//   cross_entropy(model(b.data.flatten(1)), b.target).backward();   // ... this backward averages both
//
// Unlike torch's, it does not wrap forward (strata's Module has no virtual forward): call the model
// itself; the work happens in hooks on the parameters. Gradients are reduced in buckets: the
// parameters in reverse registration order (roughly the order backward finishes them), grouped by
// dtype into buckets of at most bucket_cap_mb MiB (the first of each dtype at most 1 MiB, as torch,
// so that communication starts early). When a bucket's last gradient is accumulated its async
// all_reduce starts and overlaps the rest of backward (the MPI backend moves it on); buckets
// start in the same order on every rank. At the end of backward every remaining bucket is reduced
// too (a parameter without a gradient counts as zeros, as torch's find_unused_parameters), and each
// parameter's grad() becomes the average over the group, a view into its bucket (torch's
// gradient_as_bucket_view); one that got no gradient on any rank keeps an undefined grad(). Buffers
// are broadcast once, at construction (torch's broadcast_buffers does it before every forward).
//
// Every rank of the group must run each synchronized backward through the model (a rank that skips
// one leaves the others waiting; the timeout ends such a job). One backward at a time. The module's
// parameters must be on one device (move it with Module::to first); the buckets live there and travel
// through the group's backend for that device (NCCL or staged MPI for a GPU).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/distributed/process_group.h"
#include "strata/nn/module.h"

namespace strata::nn {

/// Copies group rank 0's parameters and buffers into every member's `module` (DistributedDataParallel and the
/// pipeline engine start replicas this way). Every member of the group calls it.
void broadcast_state(const Module& module, const distributed::Group& group);

/// Options of DistributedDataParallel.
struct DDPOptions {
  distributed::Group group = {};  ///< the data-parallel group; WORLD when empty
  double bucket_cap_mb = 25;      ///< the most MiB of gradients one all_reduce carries (torch's default)
};

/// One bucket: parameters of one dtype whose gradients travel in one all_reduce.
struct DDPBucket {
  ScalarType dtype;                          ///< the parameters' dtype
  int64_t numel;                             ///< gradient elements in the bucket
  std::vector<std::string> parameter_names;  ///< dotted names, in reverse registration order
};

/// Averages a module's gradients over a process group during backward (see the top of this file).
class DistributedDataParallel {
 public:
  /// Checks that every rank's module has the same parameters and buffers (names, dtypes, shapes), copies
  /// group rank 0's values to every rank and installs the gradient hooks. Every rank of the group calls it.
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options = {});
  /// The module behind a holder: DistributedDataParallel ddp(model).
  template <class H>
  requires requires(const H& h) { h.ptr(); }
  explicit DistributedDataParallel(const H& holder, DDPOptions options = {})
      : DistributedDataParallel(std::shared_ptr<Module>(holder.ptr()), std::move(options)) {}
  ~DistributedDataParallel();                                              ///< removes the hooks
  DistributedDataParallel(DistributedDataParallel&&) noexcept;             ///< moves the hooks' state along
  DistributedDataParallel& operator=(DistributedDataParallel&&) noexcept;  ///< removes this one's hooks first
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// While alive, backward only accumulates gradients locally; restores the previous mode when destroyed.
  class NoSyncGuard {
   public:
    NoSyncGuard(NoSyncGuard&&) = delete;
    ~NoSyncGuard();  ///< restores the mode the guard found
   private:
    friend class DistributedDataParallel;
    NoSyncGuard(bool& sync, bool previous) : sync_(sync), previous_(previous) {}
    bool& sync_;
    bool previous_;
  };
  /// Turns gradient averaging off until the returned guard is destroyed (gradient accumulation); the next
  /// synchronized backward averages everything accumulated meanwhile.
  [[nodiscard]] NoSyncGuard no_sync();

  const std::shared_ptr<Module>& module() const;  ///< the module
  std::vector<DDPBucket> buckets() const;         ///< the buckets, in the order their all_reduces start
  /// Buckets whose all_reduce the running (or last) synchronized backward has started.
  int64_t buckets_launched() const;

 private:
  struct Reducer;
  Reducer& reducer() const;  // throws after a move
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace strata::nn
