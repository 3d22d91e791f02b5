#pragma once
// Whether ops record history, per thread.
//
//   auto w = strata::randn({10}, strata::requires_grad());
//   (w * w).sum().backward();
//   {
//     strata::NoGradGuard no_grad;   // an optimizer step: no graph is built
//     w.sub_(w.grad() * 0.1);
//   }

namespace strata {

/// The thread's grad mode switch.
struct GradMode {
  static bool is_enabled();               ///< true when ops record history (the default)
  static void set_enabled(bool enabled);  ///< turns recording on or off for this thread
};

/// Sets grad mode for a scope and restores the previous value on exit.
class AutoGradMode {
 public:
  /// Sets grad mode to `enabled` until the destructor restores the previous mode.
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

/// Disables recording for a scope, as torch::NoGradGuard.
struct NoGradGuard : AutoGradMode {
  NoGradGuard() : AutoGradMode(false) {}
};

}  // namespace strata
