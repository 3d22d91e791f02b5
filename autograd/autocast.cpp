// Autocast (autograd/autocast.h): the thread's settings, the policy registry, the weight-cast cache, and the
// casts the ops ask for (ops::AutocastArgs in autograd/ops/common.h).
//
// Note [autocast]: an op on the registry starts with
//   if (ops::AutocastArgs cast{"linear", {input, weight, bias}}) return linear(cast[0], cast[1], cast[2]);
// When autocast is on for the operands' device, AutocastArgs casts them by the op's policy and keeps autocast off
// on this thread while it lives, so the op, called again, runs as written, and the ops it is built from (layer
// norm's mean, cross entropy's log_softmax) are not cast again: the policy applies where the user called.
// The engine runs backward with autocast off (engine.cpp), so each backward op computes in its forward's dtypes.

#include "strata/autograd/autocast.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/autograd/ops/common.h"
#include "strata/tensor/cuda.h"

namespace strata {
namespace {

constexpr std::pair<std::string_view, CastPolicy> kPolicies[] = {
    // What tensor cores and 16-bit GEMMs are for.
    {"matmul", CastPolicy::kLowerPrecision},
    {"mm", CastPolicy::kLowerPrecision},
    {"bmm", CastPolicy::kLowerPrecision},
    {"linear", CastPolicy::kLowerPrecision},
    {"conv1d", CastPolicy::kLowerPrecision},
    {"conv2d", CastPolicy::kLowerPrecision},
    {"conv_transpose2d", CastPolicy::kLowerPrecision},
    {"scaled_dot_product_attention", CastPolicy::kLowerPrecision},
    {"lstm_cell", CastPolicy::kLowerPrecision},
    {"gru_cell", CastPolicy::kLowerPrecision},
    {"rnn_tanh_cell", CastPolicy::kLowerPrecision},
    {"rnn_relu_cell", CastPolicy::kLowerPrecision},
    {"lstm", CastPolicy::kLowerPrecision},
    {"gru", CastPolicy::kLowerPrecision},
    {"rnn_tanh", CastPolicy::kLowerPrecision},
    {"rnn_relu", CastPolicy::kLowerPrecision},
    // Exponentials, normalisation statistics and long sums, which 16 bits would round away. The norms and the
    // average pools are also composites with backwards of their own: cast whole, they give their input a
    // gradient of its own dtype, where casting only the reductions inside would not.
    {"softmax", CastPolicy::kFloat32},
    {"log_softmax", CastPolicy::kFloat32},
    {"layer_norm", CastPolicy::kFloat32},
    {"group_norm", CastPolicy::kFloat32},
    {"rms_norm", CastPolicy::kFloat32},
    {"batch_norm", CastPolicy::kFloat32},
    {"avg_pool2d", CastPolicy::kFloat32},
    {"adaptive_avg_pool2d", CastPolicy::kFloat32},
    {"norm", CastPolicy::kFloat32},
    {"sum", CastPolicy::kFloat32},
    {"mean", CastPolicy::kFloat32},
    {"prod", CastPolicy::kFloat32},
    {"var", CastPolicy::kFloat32},
    {"std", CastPolicy::kFloat32},
    {"logsumexp", CastPolicy::kFloat32},
    {"nll_loss", CastPolicy::kFloat32},
    {"cross_entropy", CastPolicy::kFloat32},
    {"mse_loss", CastPolicy::kFloat32},
    {"l1_loss", CastPolicy::kFloat32},
    {"smooth_l1_loss", CastPolicy::kFloat32},
    {"huber_loss", CastPolicy::kFloat32},
    {"binary_cross_entropy_with_logits", CastPolicy::kFloat32},
    // Its input is a probability already rounded to 16 bits: near 1 it is 1, and the log of 1 - p is -inf.
    {"binary_cross_entropy", CastPolicy::kBanned},
};

struct DeviceSettings {
  bool enabled;
  ScalarType dtype;
};

// The weight is held weakly, so that a cached stage input or checkpoint input is freed when its pass is done; the
// entry is stale once it expired (another tensor may have its address), once set_data gave it another storage, or
// once a write in place moved its version.
struct CachedCast {
  std::weak_ptr<TensorImpl> weight;
  std::weak_ptr<Storage> storage;
  uint32_t version = 0;
  Tensor cast;
};

struct ThreadState {
  DeviceSettings cpu{false, kBFloat16};
  DeviceSettings cuda{false, kHalf};
  bool cache_enabled = true;
  int nesting = 0;
  bool in_op = false;  // an AutocastArgs holds cast operands: the op's own calls are not cast again
  std::map<std::tuple<const TensorImpl*, ScalarType, bool>, CachedCast> cache;  // weight, dtype, grad mode
};

thread_local ThreadState state;

DeviceSettings& settings(DeviceType device_type) { return device_type == kCPU ? state.cpu : state.cuda; }

const char* device_name(DeviceType device_type) { return device_type == kCPU ? "CPU" : "CUDA"; }

void check_dtype(DeviceType device_type, ScalarType dtype) {
  STRATA_CHECK(dtype == kHalf || dtype == kBFloat16, "autocast: the ", device_name(device_type),
               " runs autocast in Half or BFloat16, got ", dtype);
}

void check_device(DeviceType device_type) {
  STRATA_CHECK(device_type == kCPU || cuda::is_available(),
               "autocast: CUDA autocast needs a GPU, and this process sees none (cuda::is_available() is false)");
}

// The backward of a cached weight cast. It saves nothing, so unlike a recorded op's node it may run in every
// backward pass through it: each micro-batch's graph reaches the one cast its forward shared.
struct CachedCastBackward final : autograd::Node {
  explicit CachedCastBackward(ScalarType from) : from(from) {}
  tensor_list apply(tensor_list&& grads) override { return {grads[0].defined() ? grads[0].to(from) : Tensor()}; }
  const char* name() const override { return "ToCopyBackward"; }
  ScalarType from;
};

Tensor cached_cast(const Tensor& weight, ScalarType dtype) {
  const bool grad = GradMode::is_enabled();
  CachedCast& entry = state.cache[{weight.impl_ptr().get(), dtype, grad}];
  if (entry.cast.defined() && entry.weight.lock() == weight.impl_ptr() &&
      entry.storage.lock() == weight.impl().storage && entry.version == weight._version())
    return entry.cast;
  Tensor cast = weight.detach().to(dtype);
  if (grad) {
    auto node = std::make_shared<CachedCastBackward>(weight.dtype());
    node->next_edges.push_back(autograd::gradient_edge(weight));
    autograd::set_history(cast, node);
  }
  entry = {weight.impl_ptr(), weight.impl().storage, weight._version(), cast};
  return cast;
}

// t as the op computes it: cast when it is a floating point tensor of the autocasting device other than float64.
Tensor cast_operand(const Tensor& t, ScalarType dtype, DeviceType device_type) {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == kDouble || t.dtype() == dtype ||
      t.device().type != device_type)
    return t;
  const bool weight = t.dtype() == kFloat && t.is_leaf() && t.requires_grad();
  if (state.cache_enabled && dtype != kFloat && weight) return cached_cast(t, dtype);
  return t.to(dtype);
}

}  // namespace

std::ostream& operator<<(std::ostream& os, CastPolicy policy) {
  switch (policy) {
    case CastPolicy::kNone:
      return os << "none";
    case CastPolicy::kLowerPrecision:
      return os << "lower_precision";
    case CastPolicy::kFloat32:
      return os << "float32";
    case CastPolicy::kBanned:
      return os << "banned";
  }
  return os << "CastPolicy(" << static_cast<int>(policy) << ")";
}

AutocastGuard::AutocastGuard(DeviceType device_type, std::optional<ScalarType> dtype, bool enabled, bool cache_enabled)
    : device_type_(device_type),
      prev_enabled_(settings(device_type).enabled),
      prev_dtype_(settings(device_type).dtype),
      prev_cache_enabled_(state.cache_enabled) {
  if (dtype) check_dtype(device_type, *dtype);
  if (enabled) check_device(device_type);
  settings(device_type) = {enabled, dtype.value_or(prev_dtype_)};
  state.cache_enabled = cache_enabled;
  autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  settings(device_type_) = {prev_enabled_, prev_dtype_};
  state.cache_enabled = prev_cache_enabled_;
  // Not decrement_nesting(), which throws when unbalanced: a user's extra decrement must not end the process here.
  if (state.nesting > 0 && --state.nesting == 0) autocast::clear_cache();
}

namespace autocast {

bool is_autocast_enabled(DeviceType device_type) { return settings(device_type).enabled; }

void set_autocast_enabled(DeviceType device_type, bool enabled) {
  if (enabled) check_device(device_type);
  settings(device_type).enabled = enabled;
}

ScalarType get_autocast_dtype(DeviceType device_type) { return settings(device_type).dtype; }

void set_autocast_dtype(DeviceType device_type, ScalarType dtype) {
  check_dtype(device_type, dtype);
  settings(device_type).dtype = dtype;
}

bool is_autocast_cache_enabled() { return state.cache_enabled; }
void set_autocast_cache_enabled(bool enabled) { state.cache_enabled = enabled; }
void clear_cache() { state.cache.clear(); }
int increment_nesting() { return ++state.nesting; }
int decrement_nesting() {
  STRATA_CHECK(state.nesting > 0, "autocast::decrement_nesting: called more often than increment_nesting");
  return --state.nesting;
}

CastPolicy policy(std::string_view name) {
  for (const auto& [op, p] : kPolicies)
    if (op == name) return p;
  return CastPolicy::kNone;
}

std::span<const std::pair<std::string_view, CastPolicy>> policies() { return kPolicies; }

}  // namespace autocast

namespace ops {

bool AutocastArgs::active() { return !state.in_op && (state.cpu.enabled || state.cuda.enabled); }

void AutocastArgs::cast(const char* op, const Tensor* begin, const Tensor* end) {
  const Tensor* first = std::find_if(begin, end, [](const Tensor& t) { return t.defined(); });
  if (first == end) return;
  const DeviceType device_type = first->device().type;
  const DeviceSettings& s = settings(device_type);
  if (!s.enabled) return;
  const CastPolicy p = autocast::policy(op);
  STRATA_INTERNAL_ASSERT(p != CastPolicy::kNone);
  STRATA_CHECK(p != CastPolicy::kBanned, op, " is unsafe under autocast: its input is a probability already rounded ",
               "to ", s.dtype, ", so near 1 its log(1 - p) is -inf. Pass logits to binary_cross_entropy_with_logits, ",
               "which autocast runs in float32, or turn autocast off around the call: AutocastGuard(",
               device_type == kCPU ? "kCPU" : "kCUDA", ", std::nullopt, false)");
  const ScalarType dtype = p == CastPolicy::kLowerPrecision ? s.dtype : kFloat;
  casts_.reserve(static_cast<size_t>(end - begin));
  for (const Tensor* t = begin; t != end; ++t) casts_.push_back(cast_operand(*t, dtype, device_type));
  state.in_op = true;
  applied_ = true;
}

AutocastArgs::~AutocastArgs() {
  if (applied_) state.in_op = false;
}

}  // namespace ops
}  // namespace strata
