#pragma once
// Tensor factories and the seedable random generator, with libtorch's names.
//
//   strata::manual_seed(0);
//   auto w = strata::randn({784, 256}, strata::TensorOptions().requires_grad(true));
//   auto b = strata::zeros({256});
//   auto t = strata::tensor({1.0, 2.0, 3.0});          // float32, like torch::tensor
//   auto i = strata::arange(10, strata::kLong);

#include <atomic>
#include <functional>
#include <initializer_list>

#include "strata/tensor/tensor.h"

namespace strata {

/// A counter-based random stream: the same seed gives the same numbers on every run and thread count.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL) : seed_(seed) {}        ///< a stream starting at seed
  Generator(const Generator& o) : seed_(o.seed_), offset_(o.offset_.load()) {}  ///< a copy of the stream state
  /// Takes o's seed and position: drawing continues exactly where o's stream stands.
  Generator& operator=(const Generator& o) {
    seed_ = o.seed_;
    offset_ = o.offset_.load();
    return *this;
  }
  /// Restarts the stream at seed
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }  ///< the current seed
  /// Reserves n values of the stream and returns the offset of the first; kernels hash (seed, offset + i).
  /// Safe to call from several threads (each call gets its own range).
  uint64_t advance(uint64_t n) { return offset_.fetch_add(n, std::memory_order_relaxed); }
  /// The stream's position: the offset the next draw starts at (values handed out since the seed was set).
  uint64_t get_offset() const { return offset_.load(std::memory_order_relaxed); }

 private:
  uint64_t seed_;
  std::atomic<uint64_t> offset_{0};
};
/// Saves a generator's seed and position and puts them back when the scope ends (torch.random.fork_rng).
class GeneratorStateGuard {
 public:
  explicit GeneratorStateGuard(Generator& gen) : gen_(gen), saved_(gen) {}  ///< remembers gen's state
  ~GeneratorStateGuard() { gen_ = saved_; }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  Generator& gen_;
  const Generator saved_;
};
/// The process-wide generator used when a factory gets no generator (or this thread's, see
/// ThreadDefaultGenerator).
Generator& default_generator();
/// Within its scope default_generator() is `gen` on this thread, and only here: autograd::checkpoint
/// replays forward's random draws on a copy, leaving the stream other threads draw from alone.
class ThreadDefaultGenerator {
 public:
  explicit ThreadDefaultGenerator(Generator& gen);  ///< makes gen this thread's default generator
  ~ThreadDefaultGenerator();                        ///< puts the previous one back
  ThreadDefaultGenerator(const ThreadDefaultGenerator&) = delete;
  ThreadDefaultGenerator& operator=(const ThreadDefaultGenerator&) = delete;

 private:
  Generator* outer_;
};
/// Seeds the default generator, as torch::manual_seed.
void manual_seed(uint64_t seed);

/// Uninitialised tensor of the given sizes.
Tensor empty(IntArrayRef sizes, TensorOptions options = {});
/// Tensor of zeros.
Tensor zeros(IntArrayRef sizes, TensorOptions options = {});
/// Tensor of ones.
Tensor ones(IntArrayRef sizes, TensorOptions options = {});
/// Tensor filled with value; without a dtype in options it is inferred from value as in libtorch
/// (bool: Bool, integer: Long, floating: Float).
Tensor full(IntArrayRef sizes, Scalar value, TensorOptions options = {});
/// 0, 1, ..., end-1; Long when end is an integer and options name no dtype, else Float.
Tensor arange(Scalar end, TensorOptions options = {});
/// start, start+1, ... below end; Long when both are integers and options name no dtype, else Float.
Tensor arange(Scalar start, Scalar end, TensorOptions options = {});
/// start, start+step, ... below end (above end for negative step); Long when all three are integers and
/// options name no dtype, else Float. An integer dtype needs an integral start and step.
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions options = {});
/// n x m identity (m defaults to n).
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
/// Uniform in [0, 1).
Tensor rand(IntArrayRef sizes, TensorOptions options = {}, Generator* gen = nullptr);
/// Standard normal.
Tensor randn(IntArrayRef sizes, TensorOptions options = {}, Generator* gen = nullptr);
/// Integers uniform in [low, high); int64 unless options say otherwise.
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions options = kLong, Generator* gen = nullptr);
/// Integers uniform in [0, high).
Tensor randint(int64_t high, IntArrayRef sizes, TensorOptions options = kLong, Generator* gen = nullptr);
/// empty() with the sizes and dtype of t (options override).
Tensor empty_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
/// zeros() shaped like t.
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
/// ones() shaped like t.
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
/// full() shaped like t, with t's dtype unless options say otherwise.
Tensor full_like(const Tensor& t, Scalar value, std::optional<TensorOptions> options = std::nullopt);
/// rand() shaped like t.
Tensor rand_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
/// randn() shaped like t.
Tensor randn_like(const Tensor& t, std::optional<TensorOptions> options = std::nullopt);
/// Wraps caller-owned memory without copying; `deleter` (optional) runs when the last view goes.
Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions options = {},
                 std::function<void(void*)> deleter = nullptr);
/// Wraps caller-owned memory with explicit strides.
Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options = {},
                 std::function<void(void*)> deleter = nullptr);
/// The values tensor() is given, as libtorch's TensorDataContainer: a number (0-dim), a braced list or a
/// vector of numbers (1-D), or a braced list of equally shaped such lists ({{1, 2}, {3, 4}} is 2 x 2).
class TensorData {
 public:
  /// One number: a 0-dim tensor.
  template <class T>
  requires std::is_arithmetic_v<T> TensorData(T value) : values_{Scalar(value)} {}
  /// A list of numbers of one type: 1-D.
  template <class T>
  requires std::is_arithmetic_v<T> TensorData(std::initializer_list<T> values)
      : sizes_{static_cast<int64_t>(values.size())}, values_(values.begin(), values.end()), element_{T{}} {}
  /// A vector of numbers: 1-D.
  template <class T>
  requires std::is_arithmetic_v<T> TensorData(const std::vector<T>& values)
      : sizes_{static_cast<int64_t>(values.size())}, values_(values.begin(), values.end()), element_{T{}} {}
  /// Nested lists, each of the same shape: one more dim than they have.
  TensorData(std::initializer_list<TensorData> rows);

  const DimVector& sizes() const { return sizes_; }              ///< the shape
  const std::vector<Scalar>& values() const { return values_; }  ///< the numbers in row-major order
  /// A number of a typed list's element type (so an empty std::vector<int64_t> still means Long)
  const std::optional<Scalar>& element() const { return element_; }

 private:
  DimVector sizes_;
  std::vector<Scalar> values_;
  std::optional<Scalar> element_;
};

/// A tensor holding `data`, as torch::tensor: without a dtype in options, Bool when every number is a bool,
/// Long when every number is an integer, else the default dtype (Float): tensor({{1.0, 2.0}, {3.0, 4.0}}).
Tensor tensor(const TensorData& data, TensorOptions options = {});
/// 0-dim float32 tensor.
Tensor scalar_tensor(double value, TensorOptions options = {});

/// Threads used by CPU kernels (OpenMP and Eigen); n from 1 to max_num_threads().
void set_num_threads(int n);
/// The most threads set_num_threads takes: 4 per logical CPU, at least 1024, within OMP_THREAD_LIMIT.
int max_num_threads();
/// Current CPU thread count.
int get_num_threads();

}  // namespace strata
