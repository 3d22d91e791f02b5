#pragma once
// Tensor: shared storage + sizes + strides + offset + dtype + device, with libtorch's names.
//
//   using namespace strata;
//   Tensor x = randn({64, 784}), targets = randint(0, 10, {64});
//   Tensor w = zeros({784, 10}, TensorOptions().dtype(kFloat32).requires_grad(true));
//   Tensor loss = cross_entropy(x.matmul(w), targets);
//   loss.backward();                      // w.grad() now holds d loss / d w
//   float first = w.grad()[0][0].item<float>();

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

#include "strata/tensor/dtype.h"
#include "strata/tensor/scalar.h"
#include "strata/tensor/shape.h"

/// strata: tensors, dtypes, devices, factories and the differentiable op library, with libtorch's names; the
/// layers above them each have a namespace of their own (autograd, nn, optim, data, distributed, pipe, cuda).
namespace strata {

namespace autograd {
struct Node;
}
class Tensor;
class Generator;                          // tensor/creation.h
using tensor_list = std::vector<Tensor>;  ///< a list of tensors, as in libtorch

/// Memory shared by a tensor and all its views; freed with the last of them.
struct Storage {
  void* data = nullptr;                ///< first byte
  size_t nbytes = 0;                   ///< size in bytes
  Device device;                       ///< where the bytes live
  std::function<void(void*)> deleter;  ///< frees `data`; empty for memory strata does not own
  uint32_t version = 0;                ///< bumped by every in-place write (see autograd's SavedVariable)
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (deleter) deleter(data);
  }
};

/// Base of the autograd state a tensor may carry; defined by the autograd layer.
struct AutogradMetaInterface {
  virtual ~AutogradMetaInterface() = default;
};

/// The shared state behind a Tensor handle. Internal: use Tensor's methods.
struct TensorImpl {
  std::shared_ptr<Storage> storage;  ///< shared by views
  DimVector sizes;                   ///< extent of each dim
  DimVector strides;                 ///< elements to step per dim
  int64_t offset = 0;                ///< first element, in elements from storage->data
  int64_t numel = 0;                 ///< product of sizes
  ScalarType dtype = kFloat;         ///< element type
  /// Set by view ops: the tensor whose storage this view shares (the first non-view one up the chain).
  std::shared_ptr<TensorImpl> view_base;
  std::unique_ptr<AutogradMetaInterface> autograd_meta;  ///< null until autograd needs it
};

/// dtype, device and requires_grad for tensor factories: TensorOptions().dtype(kFloat64).requires_grad(true).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype_(t) {}                  ///< implicit, as in libtorch: zeros({2}, kLong)
  TensorOptions(Device d) : device_(d), has_device_(true) {}  ///< implicit: zeros({2}, Device(kCPU))
  /// With element type t
  TensorOptions dtype(ScalarType t) const {
    auto o = *this;
    o.dtype_ = t;
    return o;
  }
  /// With device d
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    o.has_device_ = true;
    return o;
  }
  /// With requires_grad r
  TensorOptions requires_grad(bool r) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
  ScalarType dtype() const { return dtype_.value_or(get_default_dtype()); }  ///< element type (default: Float)
  bool has_dtype() const { return dtype_.has_value(); }                      ///< whether dtype was set explicitly
  bool has_device() const { return has_device_; }                            ///< whether device was set explicitly
  /// These options with the dtype and device of `like` filling what was not set, as *_like factories do.
  TensorOptions merged_with(ScalarType like_dtype, Device like_device) const {
    auto o = *this;
    if (!has_dtype()) o.dtype_ = like_dtype;
    if (!has_device_) o.device_ = like_device;
    return o;
  }
  Device device() const { return device_; }              ///< device (default CPU)
  bool requires_grad() const { return requires_grad_; }  ///< whether factories return leaves that require grad

 private:
  std::optional<ScalarType> dtype_;
  Device device_;
  bool has_device_ = false;
  bool requires_grad_ = false;
};
/// TensorOptions().dtype(t), as torch::dtype.
inline TensorOptions dtype(ScalarType t) { return TensorOptions().dtype(t); }
/// TensorOptions().requires_grad(r), as torch::requires_grad.
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

/// A handle to a TensorImpl; copying a Tensor shares data, clone() copies it. Default-constructed is undefined.
///
/// Where the methods live: metadata and raw data access in tensor/tensor.cpp; the autograd methods in
/// autograd/variable.cpp; every other method is the differentiable op of the same name from the op
/// library (autograd/ops.h), defined beside its backward in the `autograd/ops/<family>.cpp` that each
/// section below names. tensor/ itself never calls an op method: it works through the kernel table.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}  ///< wraps an impl
  Tensor(const Tensor&) = default;                                               ///< another handle to the same tensor
  Tensor(Tensor&&) noexcept = default;                                           ///< takes over the handle
  Tensor& operator=(const Tensor&) & = default;      ///< makes this handle refer to the other's tensor
  Tensor& operator=(Tensor&&) & noexcept = default;  ///< makes this handle refer to the other's tensor
  /// On a temporary, writes its elements, as libtorch does: x[0] = y and x.grad().data() = g copy (copy_).
  Tensor& operator=(const Tensor& src) && { return copy_(src); }
  /// On a temporary, fills its elements, as libtorch does: x[0] = 1 (fill_).
  Tensor& operator=(Scalar value) && { return fill_(value); }

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }       ///< false for a default-constructed Tensor
  IntArrayRef sizes() const { return impl().sizes; }      ///< extent of each dim
  IntArrayRef strides() const { return impl().strides; }  ///< elements to step per dim
  int64_t size(int64_t dim) const;                        ///< extent of one dim (negative counts from the end)
  int64_t stride(int64_t dim) const;                      ///< stride of one dim (negative counts from the end)
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }  ///< number of dims
  int64_t numel() const { return impl().numel; }                             ///< number of elements
  ScalarType dtype() const { return impl().dtype; }                          ///< element type
  ScalarType scalar_type() const { return impl().dtype; }                    ///< element type (libtorch's other name)
  Device device() const { return impl().storage->device; }                   ///< where the data lives
  /// Dtype and device of this tensor
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  int64_t storage_offset() const { return impl().offset; }  ///< first element's offset in storage, in elements
  size_t element_size() const { return strata::element_size(dtype()); }  ///< bytes per element
  size_t nbytes() const { return numel() * element_size(); }             ///< numel() * element_size()
  bool is_contiguous() const;                                            ///< row-major dense layout
  /// Float16, bfloat16, float32 or float64
  bool is_floating_point() const { return strata::is_floating_point(dtype()); }
  bool is_cpu() const { return device().is_cpu(); }                                       ///< data in host memory
  bool is_cuda() const { return device().type == kCUDA; }                                 ///< data in a GPU's memory
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }                        ///< same handle target
  bool is_alias_of(const Tensor& o) const { return impl().storage == o.impl().storage; }  ///< shares storage with o
  uint32_t _version() const { return impl().storage->version; }  ///< in-place write counter of the storage
  void* data_ptr() const;                                        ///< address of the first element
  template <class T>
  T* data_ptr() const;  ///< typed address of the first element; checks the dtype
  template <class T>
  T item() const;  ///< the value of a one-element tensor, converted to T
  /// The value of a one-element tensor as a Scalar (floating dtypes a double, integers int64, bool a bool).
  Scalar item() const;
  /// The shared state
  TensorImpl& impl() const {
    STRATA_CHECK(impl_, "tensor is undefined");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }  ///< the shared state's owner

  // ---- autograd (autograd/variable.cpp) ----
  bool requires_grad() const;             ///< whether gradients flow to this tensor
  Tensor& requires_grad_(bool r = true);  ///< makes a leaf require grad (or not); returns *this
  Tensor& set_requires_grad(bool r);      ///< same as requires_grad_
  const Tensor& grad() const;             ///< accumulated gradient of a leaf (undefined before backward)
  Tensor& mutable_grad();                 ///< the gradient slot, for assigning or resetting it
  const std::shared_ptr<autograd::Node>& grad_fn() const;  ///< the node that made this tensor; null for leaves
  bool is_leaf() const;                                    ///< true for tensors not produced by a recorded op
  uint32_t output_nr() const;                              ///< which output of grad_fn this tensor is
  /// Backpropagates from this tensor; `gradient` may be omitted for one-element tensors.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  /// Calls f(grad) when this tensor's gradient is computed; f returns a replacement or void. Returns a handle.
  template <class F>
  unsigned register_hook(F&& f) const;
  void remove_hook(unsigned handle) const;  ///< removes a hook added by register_hook
  /// Calls f(leaf) after backward accumulated into this leaf's grad(), as torch's hook of that name. Returns a handle.
  unsigned register_post_accumulate_grad_hook(std::function<void(const Tensor&)> f) const;
  void remove_post_accumulate_grad_hook(unsigned handle) const;  ///< removes such a hook
  void retain_grad() const;                                      ///< keeps grad() of a non-leaf after backward
  bool retains_grad() const;                                     ///< whether retain_grad() was called
  Tensor detach() const;                                         ///< shares data, no history, requires_grad false
  /// libtorch's .data(): detach(); writes through it still count for autograd's saved-tensor checks (README)
  Tensor data() const;
  Tensor& detach_();  ///< removes history in place
  /// Makes this tensor use `data`'s storage, shape and dtype, keeping its identity and autograd flags
  /// (as libtorch's set_data; Module::to uses it so that handles to parameters stay valid).
  void set_data(const Tensor& data) const;

  // ---- conversion and copies (autograd/ops/shape.cpp) ----
  // libtorch's signatures: non_blocking is accepted and may be ignored (strata's copies are ordered on the
  // device's stream and wait where the host reads); copy forces a new tensor when nothing would change.
  /// Converts the dtype (returns *this when equal and !copy).
  Tensor to(ScalarType t, bool non_blocking = false, bool copy = false) const;
  /// Copies to device d (returns *this when already there and !copy).
  Tensor to(Device d, bool non_blocking = false, bool copy = false) const;
  /// Moves and converts in one copy.
  Tensor to(Device d, ScalarType t, bool non_blocking = false, bool copy = false) const;
  /// The dtype and device that `options` set (the rest kept); requires_grad may not be set.
  Tensor to(const TensorOptions& options, bool non_blocking = false, bool copy = false) const;
  /// other's dtype and device.
  Tensor to(const Tensor& other, bool non_blocking = false, bool copy = false) const;
  Tensor cpu() const;                 ///< to(Device(kCPU))
  Tensor cuda(int index = -1) const;  ///< to(Device(kCUDA, index)); -1: the current device (cuda::current_device())
  Tensor clone() const;               ///< a contiguous copy (differentiable)
  Tensor contiguous() const;          ///< *this if contiguous, else a contiguous copy
  Tensor& copy_(const Tensor& src);   ///< copies src (broadcast, converted) into this tensor

  // ---- elementwise (autograd/ops/elementwise.cpp) ----
  Tensor add(const Tensor& o, Scalar alpha = 1) const;                                      ///< this + alpha * o
  Tensor add(Scalar o) const;                                                               ///< this + o
  Tensor sub(const Tensor& o, Scalar alpha = 1) const;                                      ///< this - alpha * o
  Tensor sub(Scalar o) const;                                                               ///< this - o
  Tensor mul(const Tensor& o) const;                                                        ///< this * o
  Tensor mul(Scalar o) const;                                                               ///< this * o
  Tensor div(const Tensor& o) const;                                                        ///< this / o
  Tensor div(Scalar o) const;                                                               ///< this / o
  Tensor neg() const;                                                                       ///< -this
  Tensor pow(const Tensor& e) const;                                                        ///< this ** e
  Tensor pow(Scalar e) const;                                                               ///< this ** e
  Tensor exp() const;                                                                       ///< e ** this
  Tensor log() const;                                                                       ///< natural log
  Tensor sqrt() const;                                                                      ///< square root
  Tensor rsqrt() const;                                                                     ///< 1 / sqrt
  Tensor abs() const;                                                                       ///< absolute value
  Tensor tanh() const;                                                                      ///< hyperbolic tangent
  Tensor sigmoid() const;                                                                   ///< 1 / (1 + e ** -this)
  Tensor relu() const;                                                                      ///< max(this, 0)
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;  ///< limits to [min, max]
  Tensor maximum(const Tensor& o) const;                                                    ///< elementwise max
  Tensor minimum(const Tensor& o) const;                                                    ///< elementwise min
  Tensor eq(const Tensor& o) const;                                                         ///< this == o, bool
  Tensor eq(Scalar o) const;                                                                ///< this == o, bool
  Tensor ne(const Tensor& o) const;                                                         ///< this != o, bool
  Tensor ne(Scalar o) const;                                                                ///< this != o, bool
  Tensor lt(const Tensor& o) const;                                                         ///< this < o, bool
  Tensor lt(Scalar o) const;                                                                ///< this < o, bool
  Tensor le(const Tensor& o) const;                                                         ///< this <= o, bool
  Tensor le(Scalar o) const;                                                                ///< this <= o, bool
  Tensor gt(const Tensor& o) const;                                                         ///< this > o, bool
  Tensor gt(Scalar o) const;                                                                ///< this > o, bool
  Tensor ge(const Tensor& o) const;                                                         ///< this >= o, bool
  Tensor ge(Scalar o) const;                                                                ///< this >= o, bool
  Tensor logical_and(const Tensor& o) const;                                                ///< elementwise and, bool
  Tensor logical_or(const Tensor& o) const;                                                 ///< elementwise or, bool
  Tensor logical_not() const;                                                               ///< elementwise not, bool

  // ---- reductions (autograd/ops/reduce.cpp) ----
  Tensor sum(std::optional<ScalarType> dtype = std::nullopt) const;         ///< sum of all elements
  Tensor sum(IntArrayRef dims, bool keepdim = false) const;                 ///< sum over dims
  Tensor mean() const;                                                      ///< mean of all elements
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;                ///< mean over dims
  Tensor prod() const;                                                      ///< product of all elements
  Tensor prod(int64_t dim, bool keepdim = false) const;                     ///< product over one dim
  Tensor max() const;                                                       ///< largest element
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  ///< values and indices along dim
  Tensor min() const;                                                       ///< smallest element
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;  ///< values and indices along dim
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;  ///< index of the largest
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;  ///< index of the smallest
  /// Variance (all dims when empty)
  Tensor var(IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false) const;
  /// Variance of all elements; only a real bool picks this (x.var({1}) and x.var(1) reduce dim 1).
  template <class B>
  requires std::same_as<B, bool> Tensor var(B unbiased)
  const { return var(IntArrayRef(), unbiased); }
  Tensor std(IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false) const;  ///< standard deviation
  /// Standard deviation of all elements; only a real bool picks this.
  template <class B>
  requires std::same_as<B, bool> Tensor std(B unbiased)
  const { return std(IntArrayRef(), unbiased); }
  Tensor norm(double p = 2, IntArrayRef dims = {}, bool keepdim = false) const;  ///< p-norm (all dims when empty)
  Tensor logsumexp(IntArrayRef dims, bool keepdim = false) const;  ///< log(sum(exp(this))) computed stably
  Tensor all() const;                                              ///< whether every element is non-zero
  Tensor all(int64_t dim, bool keepdim = false) const;             ///< whether every element along dim is non-zero
  Tensor any() const;                                              ///< whether some element is non-zero
  Tensor any(int64_t dim, bool keepdim = false) const;             ///< whether some element along dim is non-zero

  // ---- sorting and sampling (autograd/ops/sort.cpp) ----
  /// Values sorted along dim and their int64 indices
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  /// sort with libtorch's `stable` flag (every sort is stable)
  std::tuple<Tensor, Tensor> sort(std::optional<bool> stable, int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;  ///< the indices of sort
  /// argsort with libtorch's `stable` flag; only a real bool picks this (x.argsort(1) sorts along dim 1).
  template <class B>
  requires std::same_as<B, bool> Tensor argsort(B stable, int64_t dim = -1, bool descending = false)
  const { return argsort(dim, descending); }
  Tensor msort() const;  ///< values sorted along dim 0
  /// The k largest (or smallest) values along dim and their indices
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  /// The k-th smallest value along dim (k from 1) and its index
  std::tuple<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  /// Category indices drawn from these weights ([C] or [N, C])
  Tensor multinomial(int64_t num_samples, bool replacement = false, Generator* gen = nullptr) const;

  // ---- linear algebra (autograd/ops/linalg.cpp; transposes and permute: shape.cpp) ----
  Tensor matmul(const Tensor& o) const;            ///< numpy-style matmul
  Tensor mm(const Tensor& o) const;                ///< 2-D matrix product
  Tensor bmm(const Tensor& o) const;               ///< 3-D batched matrix product
  Tensor t() const;                                ///< transpose of a tensor of at most 2 dims
  Tensor transpose(int64_t d0, int64_t d1) const;  ///< swaps two dims (a view)
  Tensor permute(IntArrayRef dims) const;          ///< reorders dims (a view)

  // ---- shape (autograd/ops/shape.cpp) ----
  Tensor reshape(IntArrayRef sizes) const;  ///< a view when possible, else a copy; one size may be -1
  Tensor view(IntArrayRef sizes) const;     ///< a view with new sizes; throws when strides do not allow it
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;  ///< merges dims start..end
  Tensor unsqueeze(int64_t dim) const;                                ///< inserts a dim of size 1
  Tensor squeeze() const;                                             ///< removes all dims of size 1
  Tensor squeeze(int64_t dim) const;                                  ///< removes dim if its size is 1
  Tensor expand(IntArrayRef sizes) const;                             ///< broadcasts to sizes (a view, -1 keeps a dim)
  Tensor expand_as(const Tensor& o) const;                            ///< expand(o.sizes())
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;    ///< a view of length elements from start
  /// Python-style slice along dim (a view).
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt, std::optional<int64_t> end = std::nullopt,
               int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;                     ///< removes dim by picking one index (a view)
  Tensor operator[](int64_t index) const { return select(0, index); }  ///< select(0, index)
  tensor_list split(int64_t split_size, int64_t dim = 0) const;        ///< views of split_size along dim
  tensor_list split(IntArrayRef split_sizes, int64_t dim = 0) const;   ///< views of the given sizes
  tensor_list chunk(int64_t chunks, int64_t dim = 0) const;            ///< at most `chunks` near-equal views
  Tensor repeat(IntArrayRef repeats) const;                            ///< tiles the tensor
  /// Raw view
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset = std::nullopt) const;

  // ---- indexing (autograd/ops/index.cpp) ----
  Tensor index_select(int64_t dim, const Tensor& index) const;  ///< picks indices along dim
  Tensor gather(int64_t dim, const Tensor& index) const;        ///< out[i][j] = this[i][index[i][j]] for dim 1
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;  ///< adds src at index along dim
  Tensor masked_fill(const Tensor& mask, Scalar value) const;                     ///< value where mask, else this

  // ---- nn (autograd/ops/nn.cpp) ----
  Tensor softmax(int64_t dim) const;      ///< exp normalised along dim
  Tensor log_softmax(int64_t dim) const;  ///< log of softmax, computed stably

  // ---- in place, bumping the version counter (autograd/ops/elementwise.cpp; copy_: shape.cpp) ----
  Tensor& add_(const Tensor& o, Scalar alpha = 1);                                      ///< this += alpha * o
  Tensor& add_(Scalar o);                                                               ///< this += o
  Tensor& sub_(const Tensor& o, Scalar alpha = 1);                                      ///< this -= alpha * o
  Tensor& sub_(Scalar o);                                                               ///< this -= o
  Tensor& mul_(const Tensor& o);                                                        ///< this *= o
  Tensor& mul_(Scalar o);                                                               ///< this *= o
  Tensor& div_(const Tensor& o);                                                        ///< this /= o
  Tensor& div_(Scalar o);                                                               ///< this /= o
  Tensor& zero_();                                                                      ///< fills with 0
  Tensor& fill_(Scalar value);                                                          ///< fills with value
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);  ///< clamps in place
  /// Fills with uniform [from, to) draws from gen (the default generator when null), as torch's uniform_.
  Tensor& uniform_(double from = 0, double to = 1, Generator* gen = nullptr);
  /// Fills with Normal(mean, std) draws from gen (the default generator when null), as torch's normal_.
  Tensor& normal_(double mean = 0, double std = 1, Generator* gen = nullptr);

  Tensor& operator+=(const Tensor& o) { return add_(o); }  ///< add_
  Tensor& operator+=(Scalar o) { return add_(o); }         ///< add_
  Tensor& operator-=(const Tensor& o) { return sub_(o); }  ///< sub_
  Tensor& operator-=(Scalar o) { return sub_(o); }         ///< sub_
  Tensor& operator*=(const Tensor& o) { return mul_(o); }  ///< mul_
  Tensor& operator*=(Scalar o) { return mul_(o); }         ///< mul_
  Tensor& operator/=(const Tensor& o) { return div_(o); }  ///< div_
  Tensor& operator/=(Scalar o) { return div_(o); }         ///< div_

 private:
  unsigned add_hook(std::function<Tensor(const Tensor&)> hook) const;
  std::shared_ptr<TensorImpl> impl_;
};

Tensor operator+(const Tensor& a, const Tensor& b);   ///< add
Tensor operator+(const Tensor& a, Scalar b);          ///< add
Tensor operator+(Scalar a, const Tensor& b);          ///< add
Tensor operator-(const Tensor& a, const Tensor& b);   ///< sub
Tensor operator-(const Tensor& a, Scalar b);          ///< sub
Tensor operator-(Scalar a, const Tensor& b);          ///< sub
Tensor operator*(const Tensor& a, const Tensor& b);   ///< mul
Tensor operator*(const Tensor& a, Scalar b);          ///< mul
Tensor operator*(Scalar a, const Tensor& b);          ///< mul
Tensor operator/(const Tensor& a, const Tensor& b);   ///< div
Tensor operator/(const Tensor& a, Scalar b);          ///< div
Tensor operator/(Scalar a, const Tensor& b);          ///< div
Tensor operator-(const Tensor& a);                    ///< neg
Tensor operator==(const Tensor& a, const Tensor& b);  ///< eq, a bool tensor
Tensor operator==(const Tensor& a, Scalar b);         ///< eq, a bool tensor
Tensor operator==(Scalar a, const Tensor& b);         ///< eq, a bool tensor
Tensor operator!=(const Tensor& a, const Tensor& b);  ///< ne, a bool tensor
Tensor operator!=(const Tensor& a, Scalar b);         ///< ne, a bool tensor
Tensor operator!=(Scalar a, const Tensor& b);         ///< ne, a bool tensor
Tensor operator<(const Tensor& a, const Tensor& b);   ///< lt, a bool tensor
Tensor operator<(const Tensor& a, Scalar b);          ///< lt, a bool tensor
Tensor operator<(Scalar a, const Tensor& b);          ///< b > a, a bool tensor
Tensor operator<=(const Tensor& a, const Tensor& b);  ///< le, a bool tensor
Tensor operator<=(const Tensor& a, Scalar b);         ///< le, a bool tensor
Tensor operator<=(Scalar a, const Tensor& b);         ///< b >= a, a bool tensor
Tensor operator>(const Tensor& a, const Tensor& b);   ///< gt, a bool tensor
Tensor operator>(const Tensor& a, Scalar b);          ///< gt, a bool tensor
Tensor operator>(Scalar a, const Tensor& b);          ///< b < a, a bool tensor
Tensor operator>=(const Tensor& a, const Tensor& b);  ///< ge, a bool tensor
Tensor operator>=(const Tensor& a, Scalar b);         ///< ge, a bool tensor
Tensor operator>=(Scalar a, const Tensor& b);         ///< b <= a, a bool tensor
Tensor operator&(const Tensor& a, const Tensor& b);   ///< bitwise_and (and, on bool)
Tensor operator&(const Tensor& a, Scalar b);          ///< bitwise_and
Tensor operator&(Scalar a, const Tensor& b);          ///< bitwise_and
Tensor operator|(const Tensor& a, const Tensor& b);   ///< bitwise_or (or, on bool)
Tensor operator|(const Tensor& a, Scalar b);          ///< bitwise_or
Tensor operator|(Scalar a, const Tensor& b);          ///< bitwise_or
Tensor operator^(const Tensor& a, const Tensor& b);   ///< bitwise_xor (xor, on bool)
Tensor operator^(const Tensor& a, Scalar b);          ///< bitwise_xor
Tensor operator^(Scalar a, const Tensor& b);          ///< bitwise_xor
Tensor operator~(const Tensor& a);                    ///< bitwise_not (not, on bool)
Tensor operator!(const Tensor& a);                    ///< logical_not

/// Prints dtype, shape and values, e.g. "tensor([[1, 2], [3, 4]], dtype=Float)".
std::ostream& operator<<(std::ostream& os, const Tensor& t);

template <class T>
T* Tensor::data_ptr() const {
  STRATA_CHECK(dtype() == scalar_type_of<T>(), "data_ptr: expected ", scalar_type_of<T>(), " but the tensor holds ",
               dtype());
  return static_cast<T*>(data_ptr());
}

template <class T>
T Tensor::item() const {
  STRATA_CHECK(numel() == 1, "item: a Tensor with ", numel(), " elements cannot be converted to a scalar (shape ",
               sizes(), ")");
  if (!is_cpu()) return to(Device(kCPU)).template item<T>();  // copies, so waits for the value
  return visit_all_dtypes(dtype(), [&]<class S>() { return static_cast<T>(*static_cast<const S*>(data_ptr())); });
}

template <class F>
unsigned Tensor::register_hook(F&& f) const {
  if constexpr (std::is_void_v<std::invoke_result_t<F, const Tensor&>>) {
    return add_hook([f = std::forward<F>(f)](const Tensor& g) {
      f(g);
      return Tensor();
    });
  } else {
    return add_hook(std::function<Tensor(const Tensor&)>(std::forward<F>(f)));
  }
}

}  // namespace strata
