#pragma once
// A scope that turns DeepSpeed's profiling switches on, for the distributed tests.

#include <initializer_list>
#include <vector>

#include <strata/distributed/collectives.h>

namespace strata::testing {

/// Turns the given switches (e.g. distributed::all_reduce_comm_off) on until the scope ends, also when a test fails.
class CommSwitchesOff {
 public:
  explicit CommSwitchesOff(std::initializer_list<void (*)(bool)> switches) : switches_(switches) { set(true); }
  ~CommSwitchesOff() { set(false); }
  CommSwitchesOff(const CommSwitchesOff&) = delete;
  CommSwitchesOff& operator=(const CommSwitchesOff&) = delete;

 private:
  void set(bool off) const {
    for (auto s : switches_) s(off);
  }
  std::vector<void (*)(bool)> switches_;
};

}  // namespace strata::testing
