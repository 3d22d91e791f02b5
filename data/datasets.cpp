#include "strata/data/datasets.h"

#include "strata/autograd/ops.h"
#include "strata/tensor/creation.h"

namespace strata::data {

namespace datasets {

MNIST::MNIST(const std::string& root, Mode mode) : mode_(mode) {
  TensorDataset files = read_mnist(root, mode == Mode::kTrain, "MNIST");
  images_ = files.data().unsqueeze(1);
  targets_ = files.targets();
}

Example<> MNIST::get(size_t index) const {
  STRATA_CHECK(index < static_cast<size_t>(images_.size(0)), "MNIST::get: index ", index, " is out of range for ",
               images_.size(0), " examples");
  const auto i = static_cast<int64_t>(index);
  return {images_[i], targets_[i]};
}

std::optional<size_t> MNIST::size() const { return static_cast<size_t>(images_.size(0)); }

}  // namespace datasets

// Each pass over *loader is an epoch, as libtorch's loader resets its sampler in begin().
DataLoader::Iterator StatelessDataLoader::begin() {
  loader_.set_epoch(++epoch_);
  return loader_.begin();
}

namespace {

// The caller's options (batch size, drop_last, workers) with the sampler's order and shard.
DataLoaderOptions options_for(DataLoaderOptions options, bool shuffle, size_t num_replicas, size_t rank,
                              bool drop_tail) {
  options.shuffle(shuffle)
      .drop_last(options.drop_last() || drop_tail)
      .num_replicas(static_cast<int64_t>(num_replicas))
      .rank(static_cast<int64_t>(rank));
  // A shuffling sampler's order comes from the default generator, so manual_seed fixes it (2^53: exact in a double).
  if (shuffle)
    options.seed(
        static_cast<uint64_t>(randint(0, int64_t{1} << 53, IntArrayRef{}, TensorOptions(kLong)).item<int64_t>()));
  return options;
}

}  // namespace

DataLoaderOptions loader_options(const samplers::SequentialSampler&, const DataLoaderOptions& options) {
  return options_for(options, false, 1, 0, false);
}
DataLoaderOptions loader_options(const samplers::RandomSampler&, const DataLoaderOptions& options) {
  return options_for(options, true, 1, 0, false);
}
DataLoaderOptions loader_options(const samplers::DistributedSequentialSampler& s, const DataLoaderOptions& options) {
  return options_for(options, false, s.num_replicas, s.rank, !s.allow_duplicates);
}
DataLoaderOptions loader_options(const samplers::DistributedRandomSampler& s, const DataLoaderOptions& options) {
  return options_for(options, true, s.num_replicas, s.rank, !s.allow_duplicates);
}

}  // namespace strata::data
