#pragma once
// libtorch's data API: datasets::MNIST, .map() with transforms::Normalize and transforms::Stack,
// samplers, and make_data_loader returning a loader iterated as *loader. A program written for
// torch::data ports by renaming; underneath, the loader is a data::DataLoader over the mapped dataset.
//
//   using namespace strata;
//   auto train = data::datasets::MNIST(data::FashionMNIST::kDefaultRoot)   // MNIST's file names
//                    .map(data::transforms::Normalize<>(0.2860, 0.3530))
//                    .map(data::transforms::Stack<>());
//   const size_t train_size = train.size().value();                        // 60000
//   auto loader = data::make_data_loader<data::samplers::SequentialSampler>(std::move(train), 64);
//   for (auto& batch : *loader) {                                          // each pass is one epoch
//     Tensor images = batch.data, labels = batch.target;                   // [64, 1, 28, 28], [64]
//   }
//
// Differences from libtorch, where its behaviour would be surprising: batches are always stacked
// (Stack<> is accepted and changes nothing; libtorch yields a std::vector<Example<>> without it), and
// RandomSampler's order comes from a seed drawn from the default generator when the loader is made
// and a new epoch on every pass, so manual_seed fixes every epoch's order on every run.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/data/dataloader.h"
#include "strata/data/dataset.h"
#include "strata/tensor/creation.h"

namespace strata::data {

/// Transforms of libtorch's data API, applied through Dataset::map: Normalize, Stack.
namespace transforms {

/// (data - mean) / stddev on each example's data, one value or one per channel (dim 0 of an example's data).
template <class Target = Tensor>
class Normalize {
 public:
  /// One mean and standard deviation for every channel.
  Normalize(double mean, double stddev) : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}
  /// Per channel: each list has one value per channel, or one for all
  Normalize(std::vector<double> mean, std::vector<double> stddev) : mean_(std::move(mean)), stddev_(std::move(stddev)) {
    STRATA_CHECK(!mean_.empty() && mean_.size() == stddev_.size(),
                 "Normalize: expected as many means as standard deviations (at least one), got ", mean_.size(), " and ",
                 stddev_.size());
  }
  /// The example with its data normalised
  Example<> apply(Example<> example) const {
    if (mean_.size() == 1) {
      example.data = (example.data - mean_[0]) / stddev_[0];
      return example;
    }
    const auto channels = static_cast<int64_t>(mean_.size());
    STRATA_CHECK(example.data.dim() >= 1 && example.data.size(0) == channels, "Normalize: ", channels,
                 " means for data of shape ", example.data.sizes());
    DimVector shape(static_cast<size_t>(example.data.dim()), 1);
    shape[0] = channels;
    const TensorOptions options = example.data.options();
    example.data = (example.data - tensor(mean_, options).reshape(shape)) / tensor(stddev_, options).reshape(shape);
    return example;
  }

 private:
  std::vector<double> mean_, stddev_;
};

/// Stacks a batch's examples along a new first dim, as torch::data::transforms::Stack<> (strata's loaders
/// always stack, so it leaves every example as it is).
template <class Target = Example<>>
class Stack {
 public:
  Example<> apply(Example<> example) const { return example; }  ///< the example itself
};

}  // namespace transforms

/// Datasets of libtorch's data API: MNIST and the MapDataset that map() makes.
namespace datasets {

template <class Source, class Transform>
class MapDataset;

/// What libtorch's datasets share: size() as an optional, and map(), which wraps the dataset in a transform.
template <class Self>
class DatasetBase {
 public:
  /// This dataset with `transform` applied to every example
  template <class Transform>
  MapDataset<Self, Transform> map(Transform transform) && {
    return MapDataset<Self, Transform>(std::move(static_cast<Self&>(*this)), std::move(transform));
  }
  /// A copy of this dataset with `transform` applied to every example (tensors are shared, not copied)
  template <class Transform>
  MapDataset<Self, Transform> map(Transform transform) const& {
    return MapDataset<Self, Transform>(static_cast<const Self&>(*this), std::move(transform));
  }
};

/// MNIST-format images and labels, as torch::data::datasets::MNIST: data float32 [1, 28, 28] in [0, 1] and an
/// int64 target per example. Fashion-MNIST has the same files (data::FashionMNIST::kDefaultRoot on Debian).
class MNIST : public DatasetBase<MNIST> {
 public:
  /// Which split: the training or the test images.
  enum class Mode { kTrain, kTest };
  /// Reads `root`'s {train,t10k}-{images-idx3,labels-idx1}-ubyte (gzip-compressed or plain)
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);
  Example<> get(size_t index) const;                       ///< image [1, 28, 28] and label of example `index`
  std::optional<size_t> size() const;                      ///< number of examples
  bool is_train() const { return mode_ == Mode::kTrain; }  ///< whether this is the training split
  const Tensor& images() const { return images_; }         ///< all images, [N, 1, 28, 28]
  const Tensor& targets() const { return targets_; }       ///< all labels, [N]

 private:
  Tensor images_, targets_;
  Mode mode_;
};

/// A dataset whose examples pass through a transform, as torch::data::datasets::MapDataset.
template <class Source, class Transform>
class MapDataset : public DatasetBase<MapDataset<Source, Transform>> {
 public:
  /// `dataset`'s examples through `transform` (what dataset.map(transform) makes).
  MapDataset(Source dataset, Transform transform) : dataset_(std::move(dataset)), transform_(std::move(transform)) {}
  Example<> get(size_t index) const { return transform_.apply(dataset_.get(index)); }  ///< the transformed example
  std::optional<size_t> size() const { return dataset_.size(); }                       ///< the source's size
  const Source& dataset() const { return dataset_; }                                   ///< the source dataset
  const Transform& transform() const { return transform_; }                            ///< the transform

 private:
  Source dataset_;
  Transform transform_;
};

}  // namespace datasets

/// libtorch's samplers, which choose the order make_data_loader visits a dataset in.
namespace samplers {

/// Indices in order, as torch::data::samplers::SequentialSampler.
struct SequentialSampler {
  explicit SequentialSampler(size_t size) : size(size) {}  ///< over `size` indices
  size_t size;                                             ///< number of indices
};
/// A new random order every epoch, as torch::data::samplers::RandomSampler.
struct RandomSampler {
  explicit RandomSampler(size_t size) : size(size) {}  ///< over `size` indices
  size_t size;                                         ///< number of indices
};
/// This rank's share of the indices in order, as torch::data::samplers::DistributedSequentialSampler. Without
/// allow_duplicates, the rank's last incomplete batch is dropped too (data::DataLoaderOptions::drop_last).
struct DistributedSequentialSampler {
  /// `size` indices among num_replicas ranks; allow_duplicates pads the last share by wrapping around (else drops)
  DistributedSequentialSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true)
      : size(size), num_replicas(num_replicas), rank(rank), allow_duplicates(allow_duplicates) {}
  size_t size;            ///< number of indices
  size_t num_replicas;    ///< number of ranks
  size_t rank;            ///< this rank
  bool allow_duplicates;  ///< pad (true) or drop (false) the tail that does not divide
};
/// This rank's share of a new random order every epoch, as torch::data::samplers::DistributedRandomSampler
/// (allow_duplicates as DistributedSequentialSampler's).
struct DistributedRandomSampler {
  /// `size` indices among num_replicas ranks; allow_duplicates pads the last share by wrapping around (else drops)
  DistributedRandomSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true)
      : size(size), num_replicas(num_replicas), rank(rank), allow_duplicates(allow_duplicates) {}
  size_t size;            ///< number of indices
  size_t num_replicas;    ///< number of ranks
  size_t rank;            ///< this rank
  bool allow_duplicates;  ///< pad (true) or drop (false) the tail that does not divide
};

}  // namespace samplers

/// The loader make_data_loader returns: iterate *loader; each pass over it is the next epoch.
class StatelessDataLoader {
 public:
  /// Batches of `dataset` (any libtorch-style dataset: get(size_t) and size()) as `options` says.
  StatelessDataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
      : loader_(std::move(dataset), options) {}
  DataLoader::Iterator begin();                               ///< starts the next epoch, at its first batch
  DataLoader::Iterator end() const { return loader_.end(); }  ///< past the last batch
  const DataLoader& loader() const { return loader_; }        ///< the data::DataLoader underneath

 private:
  DataLoader loader_;
  int64_t epoch_ = -1;
};

/// A libtorch-style dataset seen as a data::Dataset, so that data::DataLoader can batch it.
template <class D>
class DatasetAdapter : public Dataset {
 public:
  explicit DatasetAdapter(D dataset) : dataset_(std::move(dataset)) {}  ///< takes the dataset
  int64_t size() const override;                                        ///< dataset.size(), which must be known
  Example<> get(int64_t index) const override { return dataset_.get(static_cast<size_t>(index)); }  ///< example

 private:
  D dataset_;
};

/// options (batch size, drop_last, workers) with the order and shard a sampler implies, and the random seed.
DataLoaderOptions loader_options(const samplers::SequentialSampler& sampler, const DataLoaderOptions& options);
/// The same, seeded and shuffled
DataLoaderOptions loader_options(const samplers::RandomSampler& sampler, const DataLoaderOptions& options);
/// The same, one rank's share
DataLoaderOptions loader_options(const samplers::DistributedSequentialSampler& sampler,
                                 const DataLoaderOptions& options);
/// The same, one rank's share, shuffled
DataLoaderOptions loader_options(const samplers::DistributedRandomSampler& sampler, const DataLoaderOptions& options);

/// A loader over `dataset` with `sampler`, as torch::data::make_data_loader: options is a batch size or
/// DataLoaderOptions (batch_size, drop_last, workers; the sampler decides order and shard).
template <class D, class Sampler>
std::unique_ptr<StatelessDataLoader> make_data_loader(D dataset, Sampler sampler, const DataLoaderOptions& options) {
  auto adapter = std::make_shared<const DatasetAdapter<D>>(std::move(dataset));
  return std::make_unique<StatelessDataLoader>(adapter, loader_options(sampler, options));
}

/// A loader whose Sampler (RandomSampler unless named, as libtorch's) covers the whole dataset.
template <class Sampler = samplers::RandomSampler, class D>
std::unique_ptr<StatelessDataLoader> make_data_loader(D dataset, const DataLoaderOptions& options) {
  const std::optional<size_t> size = dataset.size();
  STRATA_CHECK(size.has_value(), "make_data_loader: the dataset's size is unknown; give a sampler");
  Sampler sampler(*size);
  return make_data_loader(std::move(dataset), std::move(sampler), options);
}

template <class D>
int64_t DatasetAdapter<D>::size() const {
  const std::optional<size_t> n = dataset_.size();
  STRATA_CHECK(n.has_value(), "make_data_loader: the dataset's size is unknown");
  return static_cast<int64_t>(*n);
}

}  // namespace strata::data
