#pragma once
// Datasets: indexable collections of (data, target) examples, with libtorch's names.
//
//   using namespace strata;
//   data::FashionMNIST train;                                    // /usr/share/datasets/fashion-mnist
//   data::FashionMNIST test(data::FashionMNIST::kDefaultRoot, data::FashionMNIST::Mode::kTest);
//   data::Example<> first = train.get(0);                          // data [28, 28] float32, target 9 (ankle boot)
//   data::Example<> batch = train.get_batch({0, 1, 2});            // data [3, 28, 28], target [3]
//
//   data::TensorDataset xy(randn({100, 8}), randint(0, 2, {100}));
//
// A custom dataset overrides size() and get(); overriding get_batch() too lets a batch be
// gathered at once instead of example by example.

#include <string>

#include "strata/tensor/tensor.h"

/// Data loading: IDX files, datasets, Fashion-MNIST, DataLoader with seeded shuffling and per-rank shards, and
/// libtorch's data API (datasets, transforms, samplers, make_data_loader).
namespace strata::data {

/// One example or a batch of them, as torch::data::Example<>: batches stack examples along a new first dim.
/// Datasets and loaders use Example<> (two tensors); other types make a plain pair.
template <class Data = Tensor, class Target = Tensor>
struct Example {
  using DataType = Data;      ///< the type of data
  using TargetType = Target;  ///< the type of target
  Data data;                  ///< the input
  Target target;              ///< the label; undefined for data without targets
};

/// An indexable collection of examples, as libtorch's torch::data::datasets::Dataset.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;                ///< number of examples
  virtual Example<> get(int64_t index) const = 0;  ///< example `index`, in [0, size())
  /// The examples at `indices`, stacked along a new first dim. The default calls get() for each index.
  virtual Example<> get_batch(IntArrayRef indices) const;
};

/// Examples from tensors in memory: example i is (data[i], targets[i]).
class TensorDataset : public Dataset {
 public:
  /// data is [N, ...]; targets is [N, ...] or undefined (then every example's target is undefined).
  explicit TensorDataset(Tensor data, Tensor targets = {});
  int64_t size() const override;                            ///< N
  Example<> get(int64_t index) const override;              ///< views of data[index] and targets[index]
  Example<> get_batch(IntArrayRef indices) const override;  ///< index_select on both tensors at once
  const Tensor& data() const { return data_; }              ///< all inputs, [N, ...]
  const Tensor& targets() const { return targets_; }        ///< all targets, [N, ...] or undefined

 private:
  Tensor data_, targets_;
};

/// The MNIST-format files in `root` ({train,t10k}-{images-idx3,labels-idx1}-ubyte, gzip-compressed or plain), as
/// MNIST and Fashion-MNIST ship them: images float32 [N, 28, 28] in [0, 1], labels int64 [N] in 0..9. `what` names
/// the dataset in errors.
TensorDataset read_mnist(const std::string& root, bool train, const char* what = "MNIST");

/// Fashion-MNIST (Zalando's 28x28 grey images of 10 kinds of clothing), read from IDX files.
/// Images are float32 [N, 28, 28] scaled to [0, 1] (flatten and normalise as the model needs);
/// targets int64 [N] in 0..9. N is 60000 for kTrain and 10000 for kTest.
class FashionMNIST : public TensorDataset {
 public:
  /// Which split, as libtorch's MNIST::Mode.
  enum class Mode { kTrain, kTest };
  /// Where Debian's package dataset-fashion-mnist installs the files.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  /// Loads one split from `root`, which holds {train,t10k}-{images-idx3,labels-idx1}-ubyte, each
  /// gzip-compressed (.gz) or plain. A missing file throws an error naming the Debian package.
  explicit FashionMNIST(const std::string& root = kDefaultRoot, Mode mode = Mode::kTrain);
  bool is_train() const { return mode_ == Mode::kTrain; }  ///< whether this is the training split
  const Tensor& images() const { return data(); }          ///< all images, float32 [N, 28, 28]

 private:
  Mode mode_;
};

}  // namespace strata::data
