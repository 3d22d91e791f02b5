#pragma once
// Automatic mixed precision, as libtorch's at::autocast and Python's torch.autocast. While autocast is on for a
// device, each op on that device's floating point tensors runs by its policy (autocast::policies()):
// - matrix products, linear, the convolutions, the RNN cells and attention cast their operands to the autocast
//   dtype (bfloat16 by default on the CPU, float16 on CUDA) and compute there;
// - softmax, log_softmax, the norms, the losses and the reductions cast them to float32, where 16 bits lose too
//   much;
// - every other op runs in its operands' dtypes, promoting mixed ones as usual (float32 + bfloat16 is float32).
// float64 tensors are never cast. The casts are recorded ops, so float32 parameters get float32 gradients: the
// master weights stay float32, and the optimizers step them as before. Backward runs with autocast off, each op
// in the dtypes its forward saw; activation checkpointing recomputes under the autocast of its forward.
//
// Within the outermost AutocastGuard each weight (a float32 leaf that requires grad) is cast once per dtype and
// reused by every op and micro-batch that takes it; the cast is made again if the weight is written in place,
// and dropped when that guard exits. Differences from PyTorch, each to keep a result from being silently wrong:
// a dtype autocast cannot run, or CUDA autocast without a GPU, is an error rather than a warning that disables
// autocast; a weight updated in place inside the guard is cast again rather than served stale; a cast made
// under NoGradGuard is cached apart from one with history; and binary_cross_entropy is refused on every device
// (PyTorch refuses it on CUDA only).
//
//   #include <iostream>
//   nn::Linear model(8, 2);
//   Tensor x = randn({4, 8}), target = randn({4, 2});
//   Tensor loss;
//   {
//     AutocastGuard autocast(kCPU);           // bfloat16 on the CPU
//     Tensor y = model(x);                    // BFloat16: linear runs in the autocast dtype
//     loss = mse_loss(y, target);             // Float: losses run in float32
//   }
//   loss.backward();                          // model->weight.grad() is Float
//   for (const auto& [op, policy] : autocast::policies()) std::cout << op << ": " << policy << "\n";  // the registry

#include <optional>
#include <ostream>
#include <span>
#include <string_view>
#include <utility>

#include "strata/tensor/dtype.h"

namespace strata {

/// What autocast does to an op's floating point operands.
enum class CastPolicy : uint8_t {
  kNone,            ///< nothing: the op runs in its operands' dtypes
  kLowerPrecision,  ///< casts them to the device's autocast dtype (float16 or bfloat16)
  kFloat32,         ///< casts them to float32
  kBanned,          ///< refuses the op under autocast: it is unsafe in 16 bits, and the error names the safe one
};
/// The policy's name, as the registry prints it: "none", "lower_precision", "float32" or "banned".
std::ostream& operator<<(std::ostream& os, CastPolicy policy);

/// Turns autocast on (or off) for one device type over a scope, as torch.autocast: restores the previous
/// settings on exit, and the outermost guard drops the cached weight casts.
class AutocastGuard {
 public:
  /// dtype defaults to the device's current autocast dtype; it must be Half or BFloat16, and CUDA needs a GPU.
  explicit AutocastGuard(DeviceType device_type, std::optional<ScalarType> dtype = std::nullopt, bool enabled = true,
                         bool cache_enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_type_;
  bool prev_enabled_;
  ScalarType prev_dtype_;
  bool prev_cache_enabled_;
};

/// libtorch's at::autocast functions: the thread's autocast settings, its weight-cast cache and the registry.
namespace autocast {

bool is_autocast_enabled(DeviceType device_type);                 ///< whether ops on this device type autocast
void set_autocast_enabled(DeviceType device_type, bool enabled);  ///< turns it on or off for this thread
ScalarType get_autocast_dtype(DeviceType device_type);  ///< the lower-precision dtype (CPU BFloat16, CUDA Half)
void set_autocast_dtype(DeviceType device_type, ScalarType dtype);  ///< sets it: Half or BFloat16
bool is_autocast_cache_enabled();                                   ///< whether weight casts are cached (default on)
void set_autocast_cache_enabled(bool enabled);                      ///< turns the weight-cast cache on or off
void clear_cache();                                                 ///< drops this thread's cached weight casts
int increment_nesting();  ///< enters an autocast region; returns the depth (AutocastGuard calls it)
int decrement_nesting();  ///< leaves one; returns the depth, at 0 the caller clears the cache

/// The registry's policy for op `name` (a strata function's name, "linear"); kNone for an op it does not list.
CastPolicy policy(std::string_view name);
/// Every op autocast casts, with its policy, in the registry's order.
std::span<const std::pair<std::string_view, CastPolicy>> policies();

}  // namespace autocast
}  // namespace strata
