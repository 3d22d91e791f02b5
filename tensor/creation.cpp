#include "strata/tensor/creation.h"

#include <cmath>
#include <utility>

#include "strata/tensor/kernels.h"
#include "strata/tensor/promotion.h"

namespace strata {

namespace {
thread_local Generator* thread_default_generator = nullptr;  // set by ThreadDefaultGenerator
}  // namespace

Generator& default_generator() {
  static Generator gen;
  return thread_default_generator ? *thread_default_generator : gen;
}

ThreadDefaultGenerator::ThreadDefaultGenerator(Generator& gen)
    : outer_(std::exchange(thread_default_generator, &gen)) {}

ThreadDefaultGenerator::~ThreadDefaultGenerator() { thread_default_generator = outer_; }

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

void check_sizes(IntArrayRef sizes, const char* op) {
  for (int64_t s : sizes) STRATA_CHECK(s >= 0, op, ": negative dimension ", s, " in size ", sizes);
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad()) {
    STRATA_CHECK(t.is_floating_point(),
                 "requires_grad: only tensors of floating point dtype can require gradients, got ", t.dtype());
    t.requires_grad_(true);
  }
  return t;
}

Tensor allocate(IntArrayRef sizes, ScalarType dtype, Device device) {
  const Kernels& k = kernels_for(device);
  auto storage = std::make_shared<Storage>();
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->numel = multiply(sizes);
  impl->dtype = dtype;
  STRATA_CHECK(!__builtin_mul_overflow(static_cast<size_t>(impl->numel), element_size(dtype), &storage->nbytes),
               "empty: ", impl->numel, " elements of ", dtype, " overflow the address space");
  storage->data = k.allocate(device, storage->nbytes);
  storage->device = device;
  storage->deleter = [&k, device, n = storage->nbytes](void* p) { k.deallocate(device, p, n); };
  impl->storage = std::move(storage);
  return Tensor(std::move(impl));
}

TensorOptions like(const Tensor& t, const std::optional<TensorOptions>& options) {
  return options ? options->merged_with(t.dtype(), t.device()) : t.options();
}

// options with the dtype libtorch infers from a factory's numbers when none was given: Bool when
// every number is a bool, Long when every number is an integer, else (and for no numbers) the default.
template <class Values>
TensorOptions infer_dtype(TensorOptions options, const Values& values) {
  if (options.has_dtype()) return options;
  if (std::size(values) == 0) return options.dtype(get_default_dtype());
  bool all_bool = true, all_integral = true;
  for (const Scalar& v : values) {
    all_bool &= v.isBoolean();
    all_integral &= !v.isFloatingPoint();
  }
  return options.dtype(all_bool ? kBool : all_integral ? kLong : get_default_dtype());
}

// A tensor of options' dtype (Float when unset) filled with value. The kernels fill from a double: an
// integer that a double cannot hold exactly (beyond 2^53) would silently become another, so it is refused.
Tensor filled(IntArrayRef sizes, const Scalar& value, const TensorOptions& options, const char* op) {
  check_sizes(sizes, op);
  const double v = value.to<double>();
  STRATA_CHECK(!value.isIntegral() || is_floating_point(options.dtype()) ||
                   (v >= -0x1p63 && v < 0x1p63 && static_cast<int64_t>(v) == value.to<int64_t>()),
               op, ": ", value, " is not exactly representable in the kernels' double fill value");
  check_fill_value(value, options.dtype(), op);
  Tensor t = allocate(sizes, options.dtype(), options.device());
  kernels_for(options.device()).fill(t, v);
  return finish(t, options);
}

}  // namespace

Tensor empty(IntArrayRef sizes, TensorOptions options) {
  check_sizes(sizes, "empty");
  return finish(allocate(sizes, options.dtype(), options.device()), options);
}

Tensor full(IntArrayRef sizes, Scalar value, TensorOptions options) {
  return filled(sizes, value, infer_dtype(options, std::initializer_list<Scalar>{value}), "full");
}
Tensor zeros(IntArrayRef sizes, TensorOptions options) { return filled(sizes, 0, options, "zeros"); }
Tensor ones(IntArrayRef sizes, TensorOptions options) { return filled(sizes, 1, options, "ones"); }

Tensor arange(Scalar end, TensorOptions options) { return arange(0, end, 1, options); }
Tensor arange(Scalar start, Scalar end, TensorOptions options) { return arange(start, end, 1, options); }

Tensor arange(Scalar start_value, Scalar end_value, Scalar step_value, TensorOptions options) {
  options = infer_dtype(options, std::initializer_list<Scalar>{start_value, end_value, step_value});
  const double start = start_value.to<double>(), end = end_value.to<double>(), step = step_value.to<double>();
  STRATA_CHECK(step != 0, "arange: step must be nonzero");
  STRATA_CHECK(std::isfinite(start) && std::isfinite(end), "arange: unsupported range: ", start, " -> ", end);
  STRATA_CHECK((end - start) / step >= 0, "arange: upper bound and larger bound inconsistent with step sign (start ",
               start, ", end ", end, ", step ", step, ")");
  // libtorch truncates a fractional step for integer dtypes and so returns other values than its size implies.
  STRATA_CHECK(is_floating_point(options.dtype()) || (start == std::trunc(start) && step == std::trunc(step)),
               "arange: an integer dtype (", options.dtype(), ") needs an integral start and step, got start ", start,
               " and step ", step);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = allocate({n}, options.dtype(), options.device());
  kernels_for(options.device()).arange(t, start, step);
  return finish(t, options);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  const int64_t cols = m.value_or(n);
  STRATA_CHECK(n >= 0 && cols >= 0, "eye: n and m must be non-negative, got ", n, " and ", cols);
  Tensor t = allocate({n, cols}, options.dtype(), options.device());
  const Kernels& k = kernels_for(options.device());
  k.fill(t, 0);
  // The diagonal is the view with stride cols + 1.
  const int64_t d = std::min(n, cols);
  k.fill(make_view(t, {d}, {cols + 1}, 0), 1);
  return finish(t, options);
}

Tensor rand(IntArrayRef sizes, TensorOptions options, Generator* gen) {
  check_sizes(sizes, "rand");
  STRATA_CHECK(is_floating_point(options.dtype()), "rand: expected a floating point dtype, got ", options.dtype());
  Tensor t = allocate(sizes, options.dtype(), options.device());
  Generator& g = gen ? *gen : default_generator();
  kernels_for(options.device()).uniform(t, 0, 1, g.seed(), g.advance(t.numel()));
  return finish(t, options);
}

Tensor randn(IntArrayRef sizes, TensorOptions options, Generator* gen) {
  check_sizes(sizes, "randn");
  STRATA_CHECK(is_floating_point(options.dtype()), "randn: expected a floating point dtype, got ", options.dtype());
  Tensor t = allocate(sizes, options.dtype(), options.device());
  Generator& g = gen ? *gen : default_generator();
  kernels_for(options.device()).normal(t, 0, 1, g.seed(), g.advance(t.numel()));
  return finish(t, options);
}

Tensor& Tensor::uniform_(double from, double to, Generator* gen) {
  STRATA_CHECK(is_floating_point(), "uniform_: expected a floating point tensor, got ", dtype());
  STRATA_CHECK(from <= to, "uniform_: expected from <= to, got from=", from, " to=", to);
  Tensor r = allocate(sizes(), dtype(), device());
  Generator& g = gen ? *gen : default_generator();
  kernels_for(device()).uniform(r, from, to, g.seed(), g.advance(r.numel()));
  return copy_(r);  // copy_ applies the in-place rules (views, leaves that require grad)
}

Tensor& Tensor::normal_(double mean, double std, Generator* gen) {
  STRATA_CHECK(is_floating_point(), "normal_: expected a floating point tensor, got ", dtype());
  STRATA_CHECK(std >= 0, "normal_: expected std >= 0, got ", std);
  Tensor r = allocate(sizes(), dtype(), device());
  Generator& g = gen ? *gen : default_generator();
  kernels_for(device()).normal(r, mean, std, g.seed(), g.advance(r.numel()));
  return copy_(r);
}

Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions options, Generator* gen) {
  check_sizes(sizes, "randint");
  STRATA_CHECK(low < high, "randint: expected low < high, got low=", low, " high=", high);
  const Kernels& k = kernels_for(options.device());
  // Integers are drawn in int64 and converted, so a floating dtype still gets integral values.
  Tensor t = allocate(sizes, kLong, options.device());
  Generator& g = gen ? *gen : default_generator();
  k.uniform_int(t, low, high, g.seed(), g.advance(t.numel()));
  if (options.dtype() != kLong) {
    Tensor converted = allocate(sizes, options.dtype(), options.device());
    k.copy(t, converted);
    t = converted;
  }
  return finish(t, options);
}

Tensor randint(int64_t high, IntArrayRef sizes, TensorOptions options, Generator* gen) {
  return randint(0, high, sizes, options, gen);
}

Tensor empty_like(const Tensor& t, std::optional<TensorOptions> o) { return empty(t.sizes(), like(t, o)); }
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> o) { return zeros(t.sizes(), like(t, o)); }
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> o) { return ones(t.sizes(), like(t, o)); }
Tensor full_like(const Tensor& t, Scalar v, std::optional<TensorOptions> o) {
  return filled(t.sizes(), v, like(t, o), "full_like");
}
Tensor rand_like(const Tensor& t, std::optional<TensorOptions> o) { return rand(t.sizes(), like(t, o)); }
Tensor randn_like(const Tensor& t, std::optional<TensorOptions> o) { return randn(t.sizes(), like(t, o)); }

Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions options, std::function<void(void*)> deleter) {
  return from_blob(data, sizes, contiguous_strides(sizes), options, std::move(deleter));
}

Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options,
                 std::function<void(void*)> deleter) {
  check_sizes(sizes, "from_blob");
  STRATA_CHECK(sizes.size() == strides.size(), "from_blob: got ", sizes.size(), " sizes but ", strides.size(),
               " strides");
  STRATA_CHECK(data != nullptr || multiply(sizes) == 0, "from_blob: data is null");
  int64_t extent = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    STRATA_CHECK(strides[i] >= 0, "from_blob: negative stride ", strides[i], " at dim ", i);
    if (sizes[i] > 0) extent += (sizes[i] - 1) * strides[i];
  }
  auto storage = std::make_shared<Storage>();
  storage->data = data;
  storage->nbytes = multiply(sizes) == 0 ? 0 : (extent + 1) * element_size(options.dtype());
  storage->device = options.device();
  storage->deleter = std::move(deleter);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->numel = multiply(sizes);
  impl->dtype = options.dtype();
  return finish(Tensor(std::move(impl)), options);
}

TensorData::TensorData(std::initializer_list<TensorData> rows) {
  sizes_.push_back(static_cast<int64_t>(rows.size()));
  if (rows.size() == 0) return;
  const DimVector& row_sizes = rows.begin()->sizes();
  for (const int64_t s : row_sizes) sizes_.push_back(s);
  int64_t i = 0;
  for (const TensorData& row : rows) {
    STRATA_CHECK(row.sizes() == row_sizes, "tensor: expected every row of a nested list to have shape ", row_sizes,
                 " (as row 0), but row ", i, " has shape ", row.sizes());
    values_.insert(values_.end(), row.values().begin(), row.values().end());
    ++i;
  }
}

namespace {
// The numbers as T in a host buffer, converted by the copy kernel into options' dtype and device.
template <class T>
Tensor from_values(const TensorData& data, TensorOptions options) {
  const auto n = static_cast<int64_t>(data.values().size());
  std::unique_ptr<T[]> buf(new T[n]);  // not std::vector: vector<bool> has no data()
  for (int64_t i = 0; i < n; ++i) buf[i] = data.values()[i].to<T>();
  Tensor src = from_blob(buf.get(), data.sizes(), TensorOptions(scalar_type_of<T>()));
  Tensor t = allocate(src.sizes(), options.dtype(), options.device());
  kernels_for(options.device()).copy(src, t);
  return finish(t, options);
}
}  // namespace

Tensor tensor(const TensorData& data, TensorOptions options) {
  // A typed empty list (std::vector<int64_t>{}) has the kind of its element type, as in libtorch.
  const std::vector<Scalar> typed{data.element().value_or(Scalar())};
  const ScalarType kind =
      infer_dtype(TensorOptions(), data.values().empty() && data.element() ? typed : data.values()).dtype();
  if (!options.has_dtype()) options = options.dtype(kind);
  // Integers travel as int64 so that none goes through a double; floating values as double.
  if (kind == kBool) return from_values<bool>(data, options);
  if (kind == kLong) return from_values<int64_t>(data, options);
  return from_values<double>(data, options);
}

Tensor scalar_tensor(double value, TensorOptions options) { return filled({}, value, options, "scalar_tensor"); }

}  // namespace strata
