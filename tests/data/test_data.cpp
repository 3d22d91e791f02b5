#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "strata/data/dataloader.h"
#include "strata/data/dataset.h"
#include "strata/data/idx.h"
#include "../helpers.h"

namespace strata::data {
namespace {

using strata::testing::values;
using Bytes = std::vector<unsigned char>;

/// A fresh folder for this test's files (TempFolderTest) and writers of plain and gzipped files in it.
class DataFiles : public strata::testing::TempFolderTest {
 protected:
  std::string write_plain(const std::string& name, const Bytes& bytes) const {
    std::ofstream(file(name), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return file(name);
  }
  std::string write_gzip(const std::string& name, const Bytes& bytes) const {
    gzFile f = gzopen(file(name).c_str(), "wb");
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
    return file(name);
  }
};

/// An IDX file: the magic number for `type` and dims.size() dims, big-endian sizes, then `payload`.
Bytes idx(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes out = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(d >> shift));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST_F(DataFiles, IdxUbyteRoundTripsPlainAndGzipped) {
  const Bytes file = idx(0x08, {2, 3}, {0, 1, 2, 127, 128, 255});
  for (const std::string& p : {write_plain("a.idx", file), write_gzip("a.idx.gz", file)}) {
    Tensor t = read_idx(p);
    EXPECT_EQ(t.dtype(), kLong);
    EXPECT_EQ(t.sizes(), IntArrayRef({2, 3}));
    EXPECT_VALUES(t, {0, 1, 2, 127, 128, 255});
    Tensor f = read_idx(p, kFloat32);
    EXPECT_EQ(f.dtype(), kFloat32);
    EXPECT_VALUES(f, {0, 1, 2, 127, 128, 255});
    Tensor u = read_idx(p, kUInt8);  // one byte per element, as torchvision keeps MNIST
    EXPECT_EQ(u.dtype(), kUInt8);
    EXPECT_EQ(u.nbytes(), 6u);
    EXPECT_VALUES(u, {0, 1, 2, 127, 128, 255});
  }
  EXPECT_VALUES(read_idx(write_plain("c", idx(0x09, {2}, {0xFF, 0x80})), kInt8), {-1, -128});
}

TEST_F(DataFiles, IdxReadsEveryElementTypeBigEndian) {
  EXPECT_VALUES(read_idx(write_plain("b", idx(0x09, {2}, {0xFF, 0x05}))), {-1, 5});
  EXPECT_VALUES(read_idx(write_plain("s", idx(0x0B, {2}, {0x01, 0x02, 0xFF, 0xFE}))), {258, -2});
  EXPECT_VALUES(read_idx(write_plain("i", idx(0x0C, {1, 2}, {0, 1, 0, 0, 0xFF, 0xFF, 0xFF, 0xFD}))), {65536, -3});
  Tensor f = read_idx(write_gzip("f", idx(0x0D, {1}, {0x3F, 0xC0, 0, 0})));  // 1.5f
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_VALUES(f, {1.5});
  Tensor d = read_idx(write_plain("d", idx(0x0E, {1}, {0xC0, 0x04, 0, 0, 0, 0, 0, 0})));  // -2.5
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_VALUES(d, {-2.5});
  EXPECT_EQ(read_idx(write_plain("e", idx(0x08, {0, 5}, {}))).sizes(), IntArrayRef({0, 5}));
}

TEST_F(DataFiles, IdxRejectsBadFilesNamingThem) {
  const std::string missing = file("missing.idx");
  EXPECT_THROW_MSG(read_idx(missing), "read_idx: cannot open " + missing + ": No such file or directory");
  const std::string short_magic = write_plain("short_magic", {0, 0});
  EXPECT_THROW_MSG(read_idx(short_magic),
                   "read_idx: " + short_magic + ": truncated header: the magic number needs 4 bytes, the file holds 2");
  EXPECT_THROW_MSG(read_idx(write_plain("magic", {0x1F, 0x02, 0x08, 0x01, 0, 0, 0, 1, 7})),
                   "bad magic number 0x1F020801");
  EXPECT_THROW_MSG(read_idx(write_plain("type", idx(0x07, {1}, {1}))), "unknown element type code 0x07");
  EXPECT_THROW_MSG(read_idx(write_plain("nodims", idx(0x08, {}, {}))), "0x00000800 declares 0 dims");
  EXPECT_THROW_MSG(read_idx(write_plain("sizes", {0, 0, 8, 3, 0, 0, 0, 2})),
                   "truncated header: 3 dims need 12 bytes of sizes, the file holds 4");
  const std::string truncated = write_plain("truncated", idx(0x08, {2, 3}, {1, 2, 3, 4, 5}));
  EXPECT_THROW_MSG(read_idx(truncated), "read_idx: " + truncated +
                                            ": truncated: shape [2, 3] of ubyte needs 6 data bytes, the file holds 5");
  EXPECT_THROW_MSG(read_idx(write_plain("int", idx(0x0C, {2}, {0, 0, 0, 1, 0, 0}))),
                   "truncated: shape [2] of int needs 8 data bytes, the file holds 6");
  const std::string trailing = write_gzip("trailing.gz", idx(0x08, {2, 3}, {1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_THROW_MSG(
      read_idx(trailing),
      "read_idx: " + trailing + ": 2 trailing bytes after the 6 data bytes that shape [2, 3] of ubyte needs");
  // Absurd sizes: overflow is caught before any arithmetic goes wrong, and a huge declared size
  // with little data fails on the data actually there, without allocating the declared size.
  EXPECT_THROW_MSG(read_idx(write_plain("overflow", idx(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}))),
                   "the header declares shape [4294967295, 4294967295, 4294967295], too many elements for a tensor");
  EXPECT_THROW_MSG(read_idx(write_plain("huge", idx(0x0E, {0x10000, 0x10000}, {1, 2, 3}))),
                   "truncated: shape [65536, 65536] of double needs 34359738368 data bytes, the file holds 3");
}

// Converting a float to an integer is undefined for NaN, infinities and values past int64's range; the reader
// names the element instead of returning whatever the conversion gives.
TEST_F(DataFiles, IdxRefusesFloatsAnIntegerDtypeCannotHold) {
  const std::string floats = write_plain("floats", idx(0x0D, {3},
                                                       {0x3F, 0xC0, 0, 0,     // 1.5
                                                        0x7F, 0xC0, 0, 0,     // NaN
                                                        0x7F, 0x80, 0, 0}));  // +inf
  EXPECT_THROW_MSG(read_idx(floats, kLong), "read_idx: " + floats + ": element 1 (in row-major order) is nan");
  EXPECT_THROW_MSG(read_idx(floats, kInt32), "which Int cannot hold");
  // 2^63 is one past int64's range; -2^63 is its least value and converts exactly.
  const std::string doubles = write_plain("doubles", idx(0x0E, {2},
                                                         {0xC3, 0xE0, 0, 0, 0, 0, 0, 0,     // -2^63
                                                          0x43, 0xE0, 0, 0, 0, 0, 0, 0}));  // 2^63
  EXPECT_THROW_MSG(read_idx(doubles, kLong), "element 1 (in row-major order) is 9.22337e+18, which Long cannot hold");
  EXPECT_THROW_MSG(read_idx(write_plain("inf", idx(0x0D, {1}, {0xFF, 0x80, 0, 0})), kUInt8), "is -inf");
  const std::string low = write_plain("low", idx(0x0E, {1}, {0xC3, 0xE0, 0, 0, 0, 0, 0, 0}));
  EXPECT_VALUES(read_idx(low, kLong), {-0x1p63});
  EXPECT_VALUES(read_idx(floats, kBool), {1, 1, 1});  // any non-zero is true, NaN included
  EXPECT_VALUES(read_idx(floats, kFloat64).slice(0, 0, 1), {1.5});
}

TEST_F(DataFiles, IdxRejectsTruncatedAndCorruptGzipStreams) {
  Bytes payload(4000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>(i * 7919 % 251);
  write_gzip("whole.gz", idx(0x08, {4000}, payload));
  std::ifstream in(file("whole.gz"), std::ios::binary);
  const Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(read_idx(file("whole.gz")).sizes(), IntArrayRef({4000}));
  for (size_t cut : {4, 8, 40}) {  // the length field, then the checksum, then compressed data
    const std::string p = write_plain("cut" + std::to_string(cut) + ".gz", Bytes(gz.begin(), gz.end() - cut));
    EXPECT_THROW_MSG(read_idx(p), "read_idx: " + p + ": unexpected end of file (the gzip stream is truncated)");
  }
  Bytes flipped = gz;
  flipped[flipped.size() - 8] ^= 1;  // the CRC-32 of the data
  const std::string bad_crc = write_plain("crc.gz", flipped);
  EXPECT_THROW_MSG(read_idx(bad_crc), "read_idx: " + bad_crc + ": incorrect data check (the gzip stream is corrupt)");
  flipped = gz;
  for (size_t i = 20; i < 40; ++i) flipped[i] ^= 0x5A;
  EXPECT_THROW_MSG(read_idx(write_plain("flipped.gz", flipped)), "(the gzip stream is corrupt)");
}

// ---- Fashion-MNIST ----

TEST_F(DataFiles, FashionMNISTMissingFileNamesThePackage) {
  const std::string root = file("nowhere");
  EXPECT_THROW_MSG(FashionMNIST(root, FashionMNIST::Mode::kTest),
                   "FashionMNIST: missing " + root + "/t10k-images-idx3-ubyte.gz (or " + root +
                       "/t10k-images-idx3-ubyte); the Debian package dataset-fashion-mnist provides the Fashion-MNIST "
                       "files, named as MNIST's, in /usr/share/datasets/fashion-mnist: apt-get install "
                       "dataset-fashion-mnist");
}

TEST_F(DataFiles, FashionMNISTReadsPlainFilesAndChecksThem) {
  Bytes pixels(2 * 28 * 28, 0);
  pixels[0] = 255;
  pixels[28 * 28 + 5] = 51;
  write_plain("train-images-idx3-ubyte", idx(0x08, {2, 28, 28}, pixels));
  write_gzip("train-labels-idx1-ubyte.gz", idx(0x08, {2}, {3, 9}));
  FashionMNIST fake(dir_.string());
  EXPECT_TRUE(fake.is_train());
  EXPECT_EQ(fake.size(), 2);
  EXPECT_VALUES(fake.targets(), {3, 9});
  EXPECT_EQ(fake.images().dtype(), kFloat32);
  EXPECT_VALUES(fake.get(0).data[0].slice(0, 0, 2), {1, 0});
  EXPECT_VALUES(fake.get(1).data[0].slice(0, 4, 6), {0, 0.2});

  write_gzip("train-labels-idx1-ubyte.gz", idx(0x08, {2}, {3, 10}));
  EXPECT_THROW_MSG(FashionMNIST(dir_.string()), "train-labels-idx1-ubyte.gz holds labels in [3, 10], expected 0..9");
  write_gzip("train-labels-idx1-ubyte.gz", idx(0x08, {3}, {3, 1, 2}));
  EXPECT_THROW_MSG(FashionMNIST(dir_.string()), "train-labels-idx1-ubyte.gz holds shape [3], expected [2] to match");
  write_plain("train-images-idx3-ubyte", idx(0x08, {2, 28, 27}, Bytes(2 * 28 * 27)));
  EXPECT_THROW_MSG(FashionMNIST(dir_.string()),
                   "train-images-idx3-ubyte holds shape [2, 28, 27], expected [N, 28, 28]");
}

/// The installed Fashion-MNIST split, loaded once for all tests.
const FashionMNIST& installed(FashionMNIST::Mode mode) {
  static const FashionMNIST train(FashionMNIST::kDefaultRoot, FashionMNIST::Mode::kTrain);
  static const FashionMNIST test(FashionMNIST::kDefaultRoot, FashionMNIST::Mode::kTest);
  return mode == FashionMNIST::Mode::kTrain ? train : test;
}

TEST(FashionMNIST, LoadsTheInstalledFiles) {
  const FashionMNIST& train = installed(FashionMNIST::Mode::kTrain);
  const FashionMNIST& test = installed(FashionMNIST::Mode::kTest);
  EXPECT_TRUE(train.is_train());
  EXPECT_FALSE(test.is_train());
  EXPECT_EQ(train.images().sizes(), IntArrayRef({60000, 28, 28}));
  EXPECT_EQ(test.images().sizes(), IntArrayRef({10000, 28, 28}));
  EXPECT_EQ(train.targets().sizes(), IntArrayRef({60000}));
  EXPECT_EQ(train.targets().dtype(), kLong);
  // The first labels of each split (9 = ankle boot), and 6000 / 1000 examples of each class.
  EXPECT_VALUES(train.targets().slice(0, 0, 12), {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9});
  EXPECT_VALUES(test.targets().slice(0, 0, 12), {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5});
  for (int64_t label = 0; label < 10; ++label) {
    EXPECT_EQ(train.targets().eq(label).sum().item<int64_t>(), 6000);
    EXPECT_EQ(test.targets().eq(label).sum().item<int64_t>(), 1000);
  }
  EXPECT_EQ(train.images().min().item<float>(), 0.0f);
  EXPECT_EQ(train.images().max().item<float>(), 1.0f);
  // Pixels are the file's bytes / 255: compare the first test image with the raw file.
  Tensor raw = read_idx(std::string(FashionMNIST::kDefaultRoot) + "/t10k-images-idx3-ubyte.gz");
  EXPECT_ALLCLOSE(test.get(0).data, raw[0].to(kFloat32) / 255, 0, 0);
  EXPECT_GT(raw[0].sum().item<int64_t>(), 0);
}

// ---- datasets ----

/// Example<> i is data [i, i] with target i: a dataset that only implements get().
struct Counting : Dataset {
  int64_t size() const override { return 5; }
  Example<> get(int64_t index) const override {
    return {full({2}, static_cast<double>(index)), index == 4 ? Tensor() : scalar_tensor(index, kLong)};
  }
};

TEST(Dataset, DefaultGetBatchStacksExamples) {
  Counting counting;
  Example<> batch = counting.get_batch({3, 1, 3});
  EXPECT_EQ(batch.data.sizes(), IntArrayRef({3, 2}));
  EXPECT_VALUES(batch.data, {3, 3, 1, 1, 3, 3});
  EXPECT_EQ(batch.target.dtype(), kLong);
  EXPECT_VALUES(batch.target, {3, 1, 3});
  EXPECT_THROW_MSG(counting.get_batch({1, 5}), "Dataset::get_batch: index 5 is out of range for a dataset of size 5");
  EXPECT_THROW_MSG(counting.get_batch({}), "Dataset::get_batch: indices is empty");
  EXPECT_THROW_MSG(counting.get_batch({0, 4}), "Dataset::get_batch: example 4 has no target but example 0 has one");
}

TEST(Dataset, TensorDatasetIndexesBothTensors) {
  TensorDataset ds(arange(12, kFloat32).reshape({6, 2}), arange(6, kLong) * 10);
  EXPECT_EQ(ds.size(), 6);
  EXPECT_VALUES(ds.get(2).data, {4, 5});
  EXPECT_VALUES(ds.get(2).target, {20});
  Example<> batch = ds.get_batch({5, 0});
  EXPECT_VALUES(batch.data, {10, 11, 0, 1});
  EXPECT_VALUES(batch.target, {50, 0});
  EXPECT_FALSE(TensorDataset(zeros({3, 2})).get_batch({1}).target.defined());
  EXPECT_THROW_MSG(ds.get(6), "TensorDataset::get: index 6 is out of range for a dataset of size 6");
  EXPECT_THROW_MSG(ds.get_batch({0, -1}), "TensorDataset::get_batch: index -1 is out of range");
  EXPECT_THROW_MSG(TensorDataset(zeros({3, 2}), zeros({4})),
                   "TensorDataset: targets of shape [4] do not match the 3 examples of data of shape [3, 2]");
  EXPECT_THROW_MSG(TensorDataset(scalar_tensor(1)), "TensorDataset: data must have a first dim indexing the examples");
}

// ---- data loader ----

/// The data of every batch of one epoch of `loader`, each as a list of values.
std::vector<std::vector<double>> epoch_batches(const DataLoader& loader) {
  std::vector<std::vector<double>> out;
  for (Example<>& batch : loader) {
    EXPECT_EQ(batch.target.sizes(), IntArrayRef(batch.data.size(0)));
    EXPECT_ALLCLOSE(batch.target.to(kFloat32), batch.data * 10);
    out.push_back(values(batch.data));
  }
  return out;
}

TensorDataset ten() { return TensorDataset(arange(10, kFloat32), arange(10, kLong) * 10); }

TEST(DataLoader, BatchesInOrderWithAndWithoutDropLast) {
  DataLoader loader(ten(), DataLoaderOptions().batch_size(4));
  EXPECT_EQ(loader.size(), 3);
  using Batches = std::vector<std::vector<double>>;
  EXPECT_EQ(epoch_batches(loader), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  DataLoader dropping(ten(), DataLoaderOptions().batch_size(4).drop_last(true));
  EXPECT_EQ(dropping.size(), 2);
  EXPECT_EQ(epoch_batches(dropping), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(epoch_batches(DataLoader(ten(), DataLoaderOptions().batch_size(20).drop_last(true))), Batches{});
  EXPECT_EQ(epoch_batches(DataLoader(ten(), DataLoaderOptions().batch_size(10))),
            (Batches{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}));
  // A dataset without a batch getter of its own is stacked example by example.
  DataLoader counting(std::make_shared<Counting>(), DataLoaderOptions().batch_size(2).drop_last(true));
  EXPECT_VALUES(counting.batch(1).data, {2, 2, 3, 3});
}

TEST(DataLoader, ShuffleIsSeededPerEpoch) {
  const auto options = DataLoaderOptions().batch_size(3).shuffle(true).seed(7);
  DataLoader a(ten(), options), b(ten(), options);
  const auto epoch0 = epoch_batches(a);
  EXPECT_EQ(epoch_batches(b), epoch0);
  std::vector<int64_t> sorted = a.indices();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  a.set_epoch(1);
  EXPECT_EQ(a.epoch(), 1);
  EXPECT_NE(epoch_batches(a), epoch0);
  a.set_epoch(0);
  EXPECT_EQ(epoch_batches(a), epoch0);
  EXPECT_NE(sample_indices(10, DataLoaderOptions().shuffle(true).seed(8), 0), a.indices());
  // Pins the stream: an order that changes silently would change every seeded run.
  EXPECT_EQ(sample_indices(10, DataLoaderOptions().shuffle(true).seed(7), 0),
            (std::vector<int64_t>{1, 9, 5, 8, 3, 6, 2, 4, 7, 0}));
  // Without shuffle, every epoch is in order.
  EXPECT_EQ(sample_indices(5, {}, 3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(DataLoader, ShardsAreEqualDisjointAndCoverEachEpoch) {
  for (int64_t n : {0, 1, 3, 8, 10, 13})
    for (int64_t replicas = 1; replicas <= 4; ++replicas)
      for (bool drop_last : {false, true})
        for (int64_t epoch : {0, 1}) {
          SCOPED_TRACE(::testing::Message()
                       << "n=" << n << " replicas=" << replicas << " drop_last=" << drop_last << " epoch=" << epoch);
          const auto one = DataLoaderOptions().shuffle(true).drop_last(drop_last).seed(3);
          const std::vector<int64_t> order = sample_indices(n, one, epoch);
          const int64_t per_rank = drop_last ? n / replicas : (n + replicas - 1) / replicas;
          std::multiset<int64_t> seen;
          for (int64_t rank = 0; rank < replicas; ++rank) {
            DataLoaderOptions o = one;
            o.num_replicas(replicas);
            o.rank(rank);
            const std::vector<int64_t> shard = sample_indices(n, o, epoch);
            ASSERT_EQ(static_cast<int64_t>(shard.size()), per_rank);
            // Every rank cuts the same epoch order (Note [epoch order and shards]).
            for (int64_t k = 0; k < per_rank; ++k) EXPECT_EQ(shard[k], order[(rank + k * replicas) % n]);
            seen.insert(shard.begin(), shard.end());
          }
          const std::set<int64_t> distinct(seen.begin(), seen.end());
          if (drop_last) {
            EXPECT_EQ(distinct.size(), seen.size());  // disjoint
            EXPECT_EQ(static_cast<int64_t>(seen.size()), n - n % replicas);
          } else {
            EXPECT_EQ(static_cast<int64_t>(distinct.size()), n);                                      // covering
            EXPECT_EQ(static_cast<int64_t>(seen.size() - distinct.size()), per_rank * replicas - n);  // the padding
          }
        }
}

TEST(DataLoader, RanksGetEqualBatchCounts) {
  std::vector<double> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(ten(), DataLoaderOptions().batch_size(2).shuffle(true).seed(1).num_replicas(3).rank(rank));
    EXPECT_EQ(loader.size(), 2);  // 4 examples each: 10 padded to 12
    for (const auto& batch : epoch_batches(loader)) all.insert(all.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(std::set<double>(all.begin(), all.end()).size(), 10u);
}

TEST(DataLoader, ChecksItsArguments) {
  EXPECT_THROW_MSG(DataLoader(ten(), DataLoaderOptions().batch_size(0)),
                   "DataLoader: batch_size must be positive, got 0");
  EXPECT_THROW_MSG(DataLoader(ten(), DataLoaderOptions().num_replicas(0)),
                   "DataLoader: num_replicas must be positive, got 0");
  EXPECT_THROW_MSG(DataLoader(ten(), DataLoaderOptions().num_replicas(2).rank(2)),
                   "DataLoader: rank 2 is out of range for num_replicas 2");
  EXPECT_THROW_MSG(DataLoader(ten(), DataLoaderOptions().rank(-1)),
                   "DataLoader: rank -1 is out of range for num_replicas 1");
  EXPECT_THROW_MSG(DataLoader(std::shared_ptr<const Dataset>()), "DataLoader: the dataset is null");
  DataLoader loader(ten(), DataLoaderOptions().batch_size(4));
  EXPECT_THROW_MSG(loader.set_epoch(-1), "DataLoader::set_epoch: epoch must be non-negative, got -1");
  EXPECT_THROW_MSG(loader.batch(3), "DataLoader::batch: batch 3 is out of range for 3 batches");
  EXPECT_THROW_MSG(sample_indices(-1, {}, 0), "sample_indices: dataset_size must be non-negative, got -1");
  EXPECT_THROW_MSG(sample_indices(4, DataLoaderOptions().batch_size(-2), 0),
                   "sample_indices: batch_size must be positive, got -2");
}

TEST(DataLoader, GathersFashionMNISTBatches) {
  const FashionMNIST& train = installed(FashionMNIST::Mode::kTrain);
  DataLoader loader(train, DataLoaderOptions().batch_size(128).shuffle(true).seed(5));
  EXPECT_EQ(loader.size(), 469);
  Example<> batch = loader.batch(0);
  EXPECT_EQ(batch.data.sizes(), IntArrayRef({128, 28, 28}));
  EXPECT_EQ(batch.target.sizes(), IntArrayRef({128}));
  const int64_t first = loader.indices()[0];
  EXPECT_ALLCLOSE(batch.data[0], train.images()[first], 0, 0);
  EXPECT_EQ(batch.target[0].item<int64_t>(), train.targets()[first].item<int64_t>());
  EXPECT_EQ(loader.batch(468).data.size(0), 60000 - 468 * 128);
}

}  // namespace
}  // namespace strata::data
