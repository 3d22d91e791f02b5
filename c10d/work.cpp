// c10d::Work over strata's distributed::Work.
#include "strata/c10d/Work.hpp"

#include <thread>

namespace strata::c10d {

Work::Work(std::shared_ptr<distributed::Work> work, std::vector<Tensor> outputs, int source)
    : work_(std::move(work)), outputs_(std::move(outputs)), source_(source) {}

bool Work::settle(bool block) const {
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  if (block) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return false;  // another thread is in wait(): the outcome is not recorded yet, and polling must not block
  }
  if (settled_) return true;
  if (!block && !work_->is_completed()) return false;
  // On a complete op wait() returns at once or throws its error; it also finishes copies into outputs.
  try {
    work_->wait();
  } catch (...) {
    error_ = std::current_exception();
  }
  settled_ = true;
  return true;
}

// A settled NCCL op may still run on the device after wait(): its Work says when it is done.
bool Work::isCompleted() { return settle(false) && work_->is_completed(); }

bool Work::isSuccess() const { return settle(false) && !error_; }

std::exception_ptr Work::exception() const { return settle(false) ? error_ : nullptr; }

int Work::sourceRank() const {
  STRATA_CHECK(source_ >= 0, "c10d::Work::sourceRank: only a recv's Work has a source rank");
  return source_;
}

std::vector<Tensor> Work::result() { return outputs_; }

void Work::synchronize() { wait(); }

bool Work::wait(std::chrono::milliseconds timeout) {
  if (timeout > kNoTimeout) {  // kUnsetTimeout (negative), as kNoTimeout, waits without a limit
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!settle(false)) {
      STRATA_CHECK(std::chrono::steady_clock::now() < deadline, "c10d::Work::wait: the op did not finish within ",
                   timeout.count(), " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  settle(true);
  if (error_) std::rethrow_exception(error_);
  return true;
}

}  // namespace strata::c10d
