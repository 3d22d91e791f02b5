#include "strata/data/dataset.h"

#include <filesystem>
#include <vector>

#include "strata/data/idx.h"
#include "strata/tensor/creation.h"

namespace strata::data {
namespace {

void check_index(int64_t index, int64_t size, const char* fn) {
  STRATA_CHECK(index >= 0 && index < size, fn, ": index ", index, " is out of range for a dataset of size ", size);
}

/// The `field` of every example stacked along a new first dim; undefined when the examples have none.
Tensor stack_field(const std::vector<Example<>>& examples, Tensor Example<>::*field, IntArrayRef indices,
                   const char* name) {
  const Tensor& first = examples[0].*field;
  for (size_t k = 1; k < examples.size(); ++k) {
    const Tensor& t = examples[k].*field;
    STRATA_CHECK(t.defined() == first.defined(), "Dataset::get_batch: example ", indices[k],
                 t.defined() ? " has a " : " has no ", name, " but example ", indices[0],
                 first.defined() ? " has one" : " has none");
    STRATA_CHECK(!t.defined() || t.sizes() == first.sizes(), "Dataset::get_batch: example ", indices[k], " has ", name,
                 " of shape ", t.sizes(), " but example ", indices[0], " has ", first.sizes(),
                 "; examples of one batch must have equal shapes");
  }
  if (!first.defined()) return {};
  DimVector sizes(first.sizes());
  sizes.insert(0, static_cast<int64_t>(examples.size()));
  Tensor out = empty(sizes, first.options());
  for (size_t k = 0; k < examples.size(); ++k) out.select(0, static_cast<int64_t>(k)).copy_(examples[k].*field);
  return out;
}

/// root/name, or root/name.gz when only that exists; throws naming the package that provides Fashion-MNIST.
std::string mnist_file(const std::string& root, const std::string& name, const char* what) {
  const std::filesystem::path plain = std::filesystem::path(root) / name;
  const std::filesystem::path gz = std::filesystem::path(root) / (name + ".gz");
  if (std::filesystem::exists(plain)) return plain.string();
  STRATA_CHECK(std::filesystem::exists(gz), what, ": missing ", gz.string(), " (or ", plain.string(),
               "); the Debian package dataset-fashion-mnist provides the Fashion-MNIST files, named as MNIST's, in ",
               FashionMNIST::kDefaultRoot, ": apt-get install dataset-fashion-mnist");
  return gz.string();
}

}  // namespace

TensorDataset read_mnist(const std::string& root, bool train, const char* what) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = mnist_file(root, prefix + "-images-idx3-ubyte", what);
  const std::string labels_path = mnist_file(root, prefix + "-labels-idx1-ubyte", what);
  Tensor images = read_idx(images_path, kFloat32);
  Tensor labels = read_idx(labels_path);
  STRATA_CHECK(images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28, what, ": ", images_path,
               " holds shape ", images.sizes(), ", expected [N, 28, 28]");
  STRATA_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), what, ": ", labels_path, " holds shape ",
               labels.sizes(), ", expected [", images.size(0), "] to match ", images_path);
  if (labels.numel() > 0) {
    const int64_t low = labels.min().item<int64_t>(), high = labels.max().item<int64_t>();
    STRATA_CHECK(low >= 0 && high <= 9, what, ": ", labels_path, " holds labels in [", low, ", ", high,
                 "], expected 0..9");
  }
  images.div_(255);
  return TensorDataset(images, labels);
}

Example<> Dataset::get_batch(IntArrayRef indices) const {
  STRATA_CHECK(!indices.empty(), "Dataset::get_batch: indices is empty");
  std::vector<Example<>> examples;
  examples.reserve(indices.size());
  for (int64_t index : indices) {
    check_index(index, size(), "Dataset::get_batch");
    examples.push_back(get(index));
  }
  return {stack_field(examples, &Example<>::data, indices, "data"),
          stack_field(examples, &Example<>::target, indices, "target")};
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
  STRATA_CHECK(data_.defined() && data_.dim() > 0,
               "TensorDataset: data must have a first dim indexing the "
               "examples, got ",
               data_.defined() ? "a 0-dim tensor" : "an undefined tensor");
  STRATA_CHECK(!targets_.defined() || (targets_.dim() > 0 && targets_.size(0) == data_.size(0)),
               "TensorDataset: targets of shape ", targets_.sizes(), " do not match the ", data_.size(0),
               " examples of data of shape ", data_.sizes());
}

int64_t TensorDataset::size() const { return data_.size(0); }

Example<> TensorDataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset::get");
  return {data_[index], targets_.defined() ? targets_[index] : Tensor()};
}

Example<> TensorDataset::get_batch(IntArrayRef indices) const {
  STRATA_CHECK(!indices.empty(), "TensorDataset::get_batch: indices is empty");
  for (int64_t index : indices) check_index(index, size(), "TensorDataset::get_batch");
  const Tensor index = tensor(indices.vec());
  return {data_.index_select(0, index), targets_.defined() ? targets_.index_select(0, index) : Tensor()};
}

FashionMNIST::FashionMNIST(const std::string& root, Mode mode)
    : TensorDataset(read_mnist(root, mode == Mode::kTrain, "FashionMNIST")), mode_(mode) {}

}  // namespace strata::data
