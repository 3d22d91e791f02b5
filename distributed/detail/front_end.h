#pragma once
// Internal: what every front-end op shares (collectives.cpp, p2p.cpp): the checks, the buffers,
// and run(), which puts one backend call between the INFO and DETAIL checks, the flight recorder, the
// watchdog and the logger.

#include <functional>

#include "strata/distributed/detail/runtime.h"

namespace strata::distributed::detail {

// Finishes an async op once the backend's has completed: results are copied into
// non-contiguous outputs and the op is logged, by wait() (which the watchdog watches) or by the
// is_completed() that first sees it done, so a completed op's outputs hold the result.
class FrontWork final : public Work {
 public:
  FrontWork(std::shared_ptr<Work> inner, Group group, OpRecord record, std::function<void()> finish,
            Clock::time_point start, uint64_t flight_id)
      : inner_(std::move(inner)),
        group_(std::move(group)),
        record_(std::move(record)),
        finish_(std::move(finish)),
        start_(start),
        flight_id_(flight_id) {}

  bool is_completed() override {
    if (!finished_ && inner_->is_completed()) complete();
    return finished_;
  }

  void wait() override {
    if (!finished_) {
      {
        BlockingScope scope(record_);
        try {
          inner_->wait();
        } catch (...) {  // complete() keeps it
        }
      }
      complete();
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void complete() {
    finished_ = true;
    try {
      inner_->wait();  // returns at once, or throws the op's error
      if (finish_) finish_();
    } catch (...) {
      error_ = std::current_exception();
    }
    flight_done(flight_id_, !error_);
    if (logging_enabled()) log_op(record_, seconds_since(start_));
  }

  std::shared_ptr<Work> inner_;
  Group group_;  // keeps record_.group alive for the watchdog and the logger
  OpRecord record_;
  std::function<void()> finish_;
  Clock::time_point start_;
  uint64_t flight_id_;
  bool finished_ = false;
  std::exception_ptr error_;
};

/// Per thread: the collectives that took a sequence number and those that reached the DETAIL check, so that
/// a collective that fails can tell whether the ranks had compared their calls (Note [agreed refusals]).
struct CallProgress {
  uint64_t counted = 0;
  uint64_t checked = 0;
};
inline thread_local CallProgress call_progress;

// Runs one op on the backend: `post(async)` starts it, `finish` runs once it completed.
template <class Post>
std::shared_ptr<Work> run(OpRecord& record, const Group& group, bool async_op, Post&& post,
                          std::function<void()> finish = {}) {
  const bool p2p = record.peer != kNoRank;
  if (!p2p && get_debug_level() == DebugLevel::INFO) note_collective(record);
  if (!p2p && get_debug_level() == DebugLevel::DETAIL) {
    ++call_progress.checked;
    check_collective(record);
  }
  const Clock::time_point start = logging_enabled() ? Clock::now() : Clock::time_point{};
  const uint64_t flight_id = flight_posted(record);
  if (!async_op) {
    try {
      BlockingScope scope(record);
      std::shared_ptr<Work> done = post(false);
      if (done->completes_on_device()) watch_device_op(record, std::move(done));
    } catch (...) {
      flight_done(flight_id, false);
      throw;
    }
    flight_done(flight_id, true);
    if (finish) finish();
    if (logging_enabled()) log_op(record, seconds_since(start));
    return completed_work();
  }
  std::shared_ptr<Work> inner;
  try {
    BlockingScope scope(record);  // posting may make a communicator first (Note [lazy communicators])
    inner = post(true);
    if (inner->completes_on_device()) watch_device_op(record, inner);
  } catch (...) {
    flight_done(flight_id, false);
    throw;
  }
  return std::make_shared<FrontWork>(std::move(inner), group ? group : get_world_group(), std::move(record),
                                     std::move(finish), start, flight_id);
}

/// The record of a call on `g` about tensor `t`. A collective (`counted`) takes the group's next
/// sequence number; a p2p op involves two ranks only and takes none, so that the numbers of a
/// group's ranks stay comparable.
OpRecord make_record(const char* op, ProcessGroup& g, const Tensor& t, int64_t bytes, bool counted = true);
/// Throws "op: what is an undefined tensor" unless t is defined.
void check_defined(const Tensor& t, const char* op, const char* what);
/// The memory a backend may use for t: t's own when contiguous, else a contiguous copy (see copy_back).
Tensor buffer(const Tensor& t);
/// The finishing step of an op that writes `t` through buffer(t): copies the result into t when buf is a copy,
/// nothing (an empty function) when it is t's own memory.
std::function<void()> copy_back(const Tensor& t, const Tensor& buf);
/// The group rank of a global rank given as src/dst/peer; throws when it is not a member.
int to_group_rank(const ProcessGroup& g, int global, const char* op, const char* what);
/// Throws unless `tag` is a user tag (0..kMaxUserTag).
void check_tag(int tag, const char* op);

}  // namespace strata::distributed::detail
