#pragma once
// Internal glue of the distributed layer, shared by the front end (collectives.cpp), the
// runtime (runtime.cpp), the safety nets (watchdog.cpp, debug.cpp) and the comm logger.
// Not installed.

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "strata/distributed/collectives.h"

namespace strata::distributed::detail {

/// User tags are 0..kMaxUserTag; tags above belong to strata's own protocols.
constexpr int kMaxUserTag = (1 << 20) - 1;
constexpr int kTagMonitoredBarrier = kMaxUserTag + 1;  ///< monitored_barrier arrivals and releases
constexpr int kTagRemote = kMaxUserTag + 2;            ///< functional::remote_send / remote_recv
constexpr int kTagObjectBase = 1 << 21;                ///< send_object with user tag t travels as kTagObjectBase + t
/// The DETAIL fingerprint of a p2p op with tag t travels as kTagDebugBase + t
constexpr int kTagDebugBase = 1 << 22;
constexpr int kMinTagUpperBound = 1 << 23;  ///< init() requires MPI_TAG_UB at least this

/// all_reduce() without the profiling switch, for strata's own agreement steps (which must never be skipped).
std::shared_ptr<Work> all_reduce_unswitched(const Tensor& tensor, ReduceOp op, const Group& group, bool async_op);
/// broadcast() without the profiling switch (object sizes, headers of the differentiable collectives).
std::shared_ptr<Work> broadcast_unswitched(const Tensor& tensor, int src, const Group& group, bool async_op);
/// send()/recv() without the user-tag check, for strata's own protocols (tags above kMaxUserTag).
void send_internal(const Tensor& tensor, int dst, const Group& group, int tag);
/// See send_internal.
void recv_internal(const Tensor& tensor, int src, const Group& group, int tag);

/// The group `group` names (WORLD when empty), checked: init() ran, the group was not destroyed and
/// this process is a member. `op` names the caller in errors.
ProcessGroup& resolve(const Group& group, const char* op);
/// The live group with this id, or null (for the watchdog's answers).
std::shared_ptr<ProcessGroup> find_group(int64_t id);

using Clock = std::chrono::steady_clock;

/// Seconds from `start` to now.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The timeout of blocking communication: STRATA_COMM_TIMEOUT_S, default 600 s.
std::chrono::milliseconds comm_timeout();

/// The root or peer of an OpRecord whose op has none.
constexpr int kNoRank = -1;

/// What one collective or p2p call is, for the INFO and DETAIL checks, the watchdog and the logger.
struct OpRecord {
  const char* op = "";  ///< e.g. "all_reduce"
  ProcessGroup* group = nullptr;
  uint64_t seq = 0;  ///< the group's sequence number of this call
  ScalarType dtype = kFloat;
  DeviceType device = kCPU;           ///< where the tensor lives (the backend it takes)
  DimVector shape;                    ///< the tensor's shape (the input where they differ)
  int root = kNoRank;                 ///< group rank of the root; kNoRank for rootless ops
  int peer = kNoRank;                 ///< group rank of the other side of a p2p op; kNoRank for collectives
  std::optional<ReduceOp> reduce_op;  ///< the reduction; none when the op does not reduce
  bool shapes_must_match = true;      ///< false where ranks legitimately pass different shapes
  int64_t bytes = 0;                  ///< message size for the logger
  int tag = 0;                        ///< a p2p op's tag
};

// ---- the flight recorder (flight_recorder.cpp) ----
/// Records a call as posted; returns its id for flight_done (0 when the recorder is off).
uint64_t flight_posted(const OpRecord& record);
/// Marks call `id` completed, or failed.
void flight_done(uint64_t id, bool ok);
/// Remembers this rank's place for the files and, with STRATA_FLIGHT_RECORDER_DIR set, installs the
/// handlers of fatal signals that dump the record there. Called by init().
void install_flight_recorder(int rank, int world_size);
/// With STRATA_FLIGHT_RECORDER_DIR set, writes DIR/rank<r>.json, once per process (the first failure
/// tells the story); never throws. The watchdog, the terminate handler and the signal handlers call it.
void dump_flight_recorder_on_failure(const std::string& reason) noexcept;

// ---- INFO and DETAIL checks (debug.cpp) ----
/// For a collective under DebugLevel::INFO: adds the call to the group's window and, at every 64th call,
/// compares the ranks' windows (Note [call windows]); throws on every rank, naming the first call that
/// differs, when they do not match.
void note_collective(const OpRecord& record);
/// For a collective under DebugLevel::DETAIL: exchanges the records of all ranks of the group and, when
/// op, dtype, root, reduce op or (where they must match) shape differ, throws on every rank a message
/// naming each rank's call. Itself a collective on the group's CPU backend.
void check_collective(const OpRecord& record);
/// For a collective under DETAIL that this rank refused before it ran (a bad argument, a tensor on a device
/// the group's backend cannot move): joins the other ranks' check_collective with a refusal, so that every
/// rank throws instead of waiting for this one (Note [agreed refusals]). `record` needs op, group and seq.
void refuse_collective(const OpRecord& record, const std::string& reason);
/// For a p2p op under DETAIL, given its data transfer (posted async): sends the sender's record beside it
/// and returns the Work to wait instead. On the receiver, wait() throws when dtype or shape differ from the
/// sender's (once the data has landed, so later messages stay in step); the sender never throws.
std::shared_ptr<Work> check_p2p(const OpRecord& record, bool is_send, int tag, std::shared_ptr<Work> transfer);

// ---- the watchdog (watchdog.cpp) ----
/// Starts the thread that ends the job when communication blocks longer than comm_timeout(), and
/// answers other ranks' questions about what this rank is doing. Called by init() when size > 1.
void start_watchdog();
/// Stops it (finalize).
void stop_watchdog();
/// Hands the watchdog an op whose Work completes_on_device(): until it completes, the op counts as blocked
/// since now (Note [device ops]).
void watch_device_op(const OpRecord& record, std::shared_ptr<Work> work);
/// Marks this thread as blocked in `record`'s op from construction to destruction. When the timeout
/// passes first, the watchdog asks the other ranks where they are, prints which ones never arrived,
/// and ends the job with exit status 1 (mpirun then stops every rank).
class BlockingScope {
 public:
  explicit BlockingScope(const OpRecord& record);
  ~BlockingScope();
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;
};

// ---- the comm logger (comm_logger.cpp) ----
/// Whether ops are logged (cheap: one relaxed atomic load).
bool logging_enabled();
/// Adds one finished op to the totals.
void log_op(const OpRecord& record, double seconds);

}  // namespace strata::distributed::detail
