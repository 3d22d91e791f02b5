#pragma once
// DataLoader: the batches of a Dataset, shuffled per epoch and sharded among data-parallel ranks.
//
//   using namespace strata;
//   namespace dist = strata::distributed;
//   nn::Linear model(784, 10);
//   data::DataLoader loader(data::FashionMNIST(), data::DataLoaderOptions(128).shuffle(true).seed(42)
//                                                     .num_replicas(dist::get_world_size())
//                                                     .rank(dist::get_rank()));
//   for (int64_t epoch = 0; epoch < 5; ++epoch) {
//     loader.set_epoch(epoch);                  // a new order each epoch, the same on every rank
//     for (data::Example<>& batch : loader) {     // batch.data [128, 28, 28], batch.target [128]
//       Tensor loss = cross_entropy(model->forward(batch.data.flatten(1)), batch.target);
//       loss.backward();                        // then an optimizer step
//     }
//   }
//
// Note [epoch order and shards]: the order of epoch e is a permutation of the N indices that
// depends only on (seed, e), the identity without shuffle. As in torch's DistributedSampler, it
// is then cut evenly among num_replicas ranks: without drop_last it is padded to a multiple of
// num_replicas by wrapping around to its start (so up to num_replicas - 1 examples appear twice
// in an epoch), with drop_last its last N % num_replicas entries are dropped; rank r takes
// positions r, r + num_replicas, r + 2 num_replicas, ... So every rank gets as many examples and
// batches as the others (data-parallel steps stay in step), the shards are disjoint apart from
// the padding and cover the epoch apart from the dropped tail. Each rank then batches its shard
// in order; drop_last also drops the rank's last incomplete batch.

#include <concepts>
#include <deque>
#include <future>
#include <memory>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/tensor/arg.h"

namespace strata::data {

/// How a DataLoader batches, shuffles and shards: DataLoaderOptions(64).shuffle(true), as libtorch's
/// DataLoaderOptions().batch_size(64).workers(2).
class DataLoaderOptions {
 public:
  DataLoaderOptions() = default;
  DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}  ///< implicit, as libtorch's
  STRATA_ARG(int64_t, batch_size) = 1;                                ///< examples per batch
  STRATA_ARG(bool, shuffle) = false;  ///< a new seeded order each epoch (see DataLoader::set_epoch)
  STRATA_ARG(bool,
             drop_last) = false;   ///< drop the last incomplete batch and the tail that does not divide among ranks
  STRATA_ARG(uint64_t, seed) = 0;  ///< seed of the shuffle; the same on every rank
  STRATA_ARG(int64_t, num_replicas) = 1;  ///< data-parallel ranks that share the dataset
  STRATA_ARG(int64_t, rank) = 0;          ///< this rank, in [0, num_replicas)
  /// Threads that load the next batches while the caller trains on this one (0: load on the caller's
  /// thread). Batches come in order either way; a dataset used with workers must allow concurrent get_batch.
  STRATA_ARG(int64_t, workers) = 0;
};

/// The dataset indices that options.rank visits in `epoch`, in order (Note [epoch order and shards]).
std::vector<int64_t> sample_indices(int64_t dataset_size, const DataLoaderOptions& options, int64_t epoch);

/// Iterates over batches of a dataset: for (Example<>& batch : loader). Starts at epoch 0.
class DataLoader {
 public:
  /// A loader over a shared dataset.
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  /// A loader that keeps its own copy of `dataset` (cheap: tensors share their data).
  template <std::derived_from<Dataset> D>
  explicit DataLoader(D dataset, DataLoaderOptions options = {})
      : DataLoader(std::make_shared<const D>(std::move(dataset)), options) {}

  /// Picks the epoch whose order the next iteration follows, as DistributedSampler.set_epoch; call it
  /// before each epoch, or every epoch repeats the same order.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }                          ///< the current epoch
  int64_t size() const;                                             ///< batches per epoch on this rank
  const std::vector<int64_t>& indices() const { return indices_; }  ///< this rank's indices this epoch, in order
  Example<> batch(int64_t i) const;                                 ///< batch i of this epoch, in [0, size())
  const Dataset& dataset() const { return *dataset_; }              ///< the dataset
  const DataLoaderOptions& options() const { return options_; }     ///< the options

  /// Walks the batches of the current epoch, holding the current one.
  class Iterator {
   public:
    Iterator(const DataLoader* loader, int64_t index);                       ///< at batch `index` (size() for the end)
    Example<>& operator*() { return batch_; }                                ///< the current batch
    Example<>* operator->() { return &batch_; }                              ///< the current batch
    Iterator& operator++();                                                  ///< loads the next batch
    bool operator==(const Iterator& o) const { return index_ == o.index_; }  ///< same position

   private:
    Example<> load();

    const DataLoader* loader_;
    int64_t index_;
    Example<> batch_;
    int64_t requested_;                         // the next batch to hand to a worker
    std::deque<std::future<Example<>>> ahead_;  // batches index_ + 1 ... requested_ - 1, loading
  };
  Iterator begin() const { return Iterator(this, 0); }     ///< at the first batch (loads it)
  Iterator end() const { return Iterator(this, size()); }  ///< past the last batch

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace strata::data
