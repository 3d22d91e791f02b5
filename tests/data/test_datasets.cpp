// libtorch's data API (data/datasets.h): datasets::MNIST over the installed Fashion-MNIST files,
// map() with Normalize and Stack, the samplers, and make_data_loader iterated as *loader, against
// the same batches from data::DataLoader.

#include "strata/data/datasets.h"

#include <set>

#include "strata/data/dataset.h"
#include "../helpers.h"

namespace strata::data {
namespace {

/// Example<> i is data [2, 3] filled with i, target i: a libtorch-style dataset of n examples.
class Counting : public datasets::DatasetBase<Counting> {
 public:
  explicit Counting(size_t n) : n_(n) {}
  Example<> get(size_t index) const {
    return {full({2, 3}, static_cast<double>(index)), scalar_tensor(static_cast<int64_t>(index), kLong)};
  }
  std::optional<size_t> size() const { return n_; }

 private:
  size_t n_;
};

TEST(Datasets, MnistReadsTheFilesWithAChannelDim) {
  datasets::MNIST test(FashionMNIST::kDefaultRoot, datasets::MNIST::Mode::kTest);
  EXPECT_FALSE(test.is_train());
  EXPECT_EQ(test.size().value(), 10000u);
  Example<> first = test.get(0);
  EXPECT_EQ(first.data.sizes(), IntArrayRef({1, 28, 28}));
  EXPECT_EQ(first.target.item<int64_t>(), 9);
  const FashionMNIST same(FashionMNIST::kDefaultRoot, FashionMNIST::Mode::kTest);
  EXPECT_ALLCLOSE(first.data[0], same.get(0).data, 0, 0);
  EXPECT_THROW_MSG(test.get(10000), "MNIST::get: index 10000 is out of range for 10000 examples");
  EXPECT_THROW_MSG(datasets::MNIST("/nonexistent"), "MNIST: missing /nonexistent/train-images-idx3-ubyte.gz");
}

TEST(Datasets, MapAppliesNormalizeToEachExample) {
  auto mapped = Counting(4).map(transforms::Normalize<>(1.0, 2.0)).map(transforms::Stack<>());
  EXPECT_EQ(mapped.size().value(), 4u);
  EXPECT_VALUES(mapped.get(3).data, {1, 1, 1, 1, 1, 1});  // (3 - 1) / 2
  EXPECT_EQ(mapped.get(3).target.item<int64_t>(), 3);
  // Per channel: data [2, 3] has two channels.
  auto per_channel = Counting(2).map(transforms::Normalize<>({1.0, 0.0}, {1.0, 0.5}));
  EXPECT_VALUES(per_channel.get(1).data, {0, 0, 0, 2, 2, 2});
  EXPECT_THROW_MSG(Counting(2).map(transforms::Normalize<>({1.0, 0.0, 2.0}, {1.0, 1.0, 1.0})).get(0),
                   "Normalize: 3 means for data of shape [2, 3]");
  EXPECT_THROW_MSG(transforms::Normalize<>({1.0}, {1.0, 2.0}), "as many means as standard deviations");
}

TEST(Datasets, SequentialLoaderBatchesInOrderEveryPass) {
  auto loader = make_data_loader<samplers::SequentialSampler>(Counting(10).map(transforms::Stack<>()), 4);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> seen;
    std::vector<int64_t> sizes;
    for (auto& batch : *loader) {
      sizes.push_back(batch.data.size(0));
      EXPECT_EQ(IntArrayRef(batch.data.sizes().data() + 1, 2), IntArrayRef({2, 3}));
      for (int64_t i = 0; i < batch.target.size(0); ++i) seen.push_back(batch.target[i].item<int64_t>());
    }
    EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
}

TEST(Datasets, RandomLoaderIsANewPermutationEachPassAndFollowsTheSeed) {
  auto orders = [] {
    manual_seed(3);
    auto loader = make_data_loader(Counting(12), 5);  // RandomSampler, as libtorch's default
    std::vector<std::vector<int64_t>> passes;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<int64_t> order;
      for (auto& batch : *loader)
        for (int64_t i = 0; i < batch.target.size(0); ++i) order.push_back(batch.target[i].item<int64_t>());
      passes.push_back(order);
    }
    return passes;
  };
  const auto first = orders(), again = orders();
  EXPECT_EQ(first, again);        // manual_seed fixes every epoch's order
  EXPECT_NE(first[0], first[1]);  // a new order each pass
  for (const auto& order : first) EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 12u);
}

TEST(Datasets, DistributedSamplersShareTheDataAmongRanks) {
  std::set<int64_t> all;
  for (size_t rank = 0; rank < 3; ++rank) {
    auto loader = make_data_loader(Counting(7), samplers::DistributedSequentialSampler(7, 3, rank), 2);
    int64_t count = 0;
    for (auto& batch : *loader)
      for (int64_t i = 0; i < batch.target.size(0); ++i, ++count) all.insert(batch.target[i].item<int64_t>());
    EXPECT_EQ(count, 3);  // 7 padded to 9, three per rank
  }
  EXPECT_EQ(all.size(), 7u);
  auto dropped = make_data_loader(Counting(7), samplers::DistributedRandomSampler(7, 3, 0, false), 2);
  int64_t batches = 0;
  for (auto& batch : *dropped) batches += batch.data.size(0) == 2;
  EXPECT_EQ(batches, 1);  // 2 of the 6 kept, as one full batch
  EXPECT_THROW_MSG(make_data_loader(Counting(3), 0), "batch_size must be positive");
}

}  // namespace
}  // namespace strata::data
