#include "strata/data/dataloader.h"

#include <algorithm>
#include <future>
#include <numeric>

#include "strata/tensor/creation.h"

namespace strata::data {
namespace {

void check_options(const DataLoaderOptions& o, const char* fn) {
  STRATA_CHECK(o.batch_size() > 0, fn, ": batch_size must be positive, got ", o.batch_size());
  STRATA_CHECK(o.num_replicas() > 0, fn, ": num_replicas must be positive, got ", o.num_replicas());
  STRATA_CHECK(o.rank() >= 0 && o.rank() < o.num_replicas(), fn, ": rank ", o.rank(),
               " is out of range for num_replicas ", o.num_replicas());
  STRATA_CHECK(o.workers() >= 0, fn, ": workers must be non-negative, got ", o.workers());
}

/// A permutation of 0..n-1 that depends only on (seed, epoch): Fisher-Yates on uniforms from strata's
/// counter-based stream, epoch e drawing the values [e n, (e + 1) n) of the stream of `seed`, so the
/// order is the same on every rank, run and thread count.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  if (n < 2) return order;
  Generator gen(seed);
  gen.advance(static_cast<uint64_t>(epoch) * static_cast<uint64_t>(n));
  const Tensor uniform = rand({n}, kFloat64, &gen);
  const double* u = uniform.data_ptr<double>();
  for (int64_t i = n - 1; i > 0; --i) {
    // u < 1, but the product may round up to i + 1 for huge i.
    const int64_t j = std::min(static_cast<int64_t>(u[i] * static_cast<double>(i + 1)), i);
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

std::vector<int64_t> sample_indices(int64_t dataset_size, const DataLoaderOptions& options, int64_t epoch) {
  check_options(options, "sample_indices");
  STRATA_CHECK(dataset_size >= 0, "sample_indices: dataset_size must be non-negative, got ", dataset_size);
  STRATA_CHECK(epoch >= 0, "sample_indices: epoch must be non-negative, got ", epoch);
  std::vector<int64_t> order(dataset_size);
  if (options.shuffle())
    order = permutation(dataset_size, options.seed(), epoch);
  else
    std::iota(order.begin(), order.end(), int64_t{0});
  // Note [epoch order and shards]: position p >= N of the padded order is order[p % N].
  const int64_t replicas = options.num_replicas();
  const int64_t per_rank = options.drop_last() ? dataset_size / replicas : (dataset_size + replicas - 1) / replicas;
  std::vector<int64_t> mine(per_rank);
  for (int64_t k = 0; k < per_rank; ++k) mine[k] = order[(options.rank() + k * replicas) % dataset_size];
  return mine;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  STRATA_CHECK(dataset_, "DataLoader: the dataset is null");
  check_options(options_, "DataLoader");
  indices_ = sample_indices(dataset_->size(), options_, epoch_);
}

void DataLoader::set_epoch(int64_t epoch) {
  STRATA_CHECK(epoch >= 0, "DataLoader::set_epoch: epoch must be non-negative, got ", epoch);
  epoch_ = epoch;
  indices_ = sample_indices(dataset_->size(), options_, epoch_);
}

int64_t DataLoader::size() const {
  const auto n = static_cast<int64_t>(indices_.size()), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

Example<> DataLoader::batch(int64_t i) const {
  STRATA_CHECK(i >= 0 && i < size(), "DataLoader::batch: batch ", i, " is out of range for ", size(), " batches");
  const int64_t first = i * options_.batch_size();
  const int64_t count = std::min(options_.batch_size(), static_cast<int64_t>(indices_.size()) - first);
  return dataset_->get_batch(IntArrayRef(indices_.data() + first, count));
}

DataLoader::Iterator::Iterator(const DataLoader* loader, int64_t index)
    : loader_(loader), index_(index), requested_(index) {
  if (index_ < loader_->size()) batch_ = load();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  batch_ = index_ < loader_->size() ? load() : Example<>();
  return *this;
}

// Batch index_, with the workers' batches index_ + 1 ... index_ + workers started before it is
// waited for, so they load while the caller trains on it.
Example<> DataLoader::Iterator::load() {
  const int64_t workers = loader_->options().workers();
  if (workers == 0) return loader_->batch(index_);
  for (; requested_ < loader_->size() && requested_ <= index_ + workers; ++requested_)
    ahead_.push_back(std::async(std::launch::async, [loader = loader_, i = requested_] { return loader->batch(i); }));
  std::future<Example<>> next = std::move(ahead_.front());
  ahead_.pop_front();
  return next.get();  // rethrows what the dataset threw
}

}  // namespace strata::data
