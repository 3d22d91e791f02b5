#pragma once
// The backend line of the distributed layer: Work handles, the Backend interface that one
// communication library implements (MPI for CPU tensors; NCCL, or MPI with host staging, for CUDA tensors),
// and ProcessGroup, a set of ranks with a backend per device type. Most code uses the free
// functions of collectives.h instead.
//
//   auto group = strata::distributed::new_group({1, 0});   // group rank 0 is global rank 1
//   if (group->is_member()) std::cout << group->rank() << " of " << group->size();
//   strata::distributed::Backend& mpi = group->backend(strata::kCPU, "my_op");   // errors name "my_op"

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "strata/tensor/tensor.h"

/// torch.distributed over MPI and NCCL: init, process groups, collectives, point to point, objects, and the checks,
/// watchdog, comm logger and flight recorder that find a job's failures.
namespace strata::distributed {

/// The reduction of all_reduce, reduce and reduce_scatter, as torch.distributed.ReduceOp.
enum class ReduceOp : int8_t { SUM, AVG, PRODUCT, MIN, MAX };
/// "SUM", "AVG", "PRODUCT", "MIN" or "MAX".
const char* to_string(ReduceOp op);

/// The handle of a communication op, as c10d::Work. A sync call returns one that is complete. A Work
/// dropped before it finished completes in the background; wait for every Work before finalize().
class Work {
 public:
  virtual ~Work() = default;
  /// True once the op has finished and its outputs hold the result; never blocks. Errors are kept for wait().
  virtual bool is_completed() = 0;
  /// Blocks until the op has finished and its outputs hold the result; throws the op's error.
  /// On a backend with streams (NCCL) the caller's current stream waits instead of the host.
  virtual void wait() = 0;
  /// True when the op may still run on a device after wait() returned (NCCL). The watchdog then polls
  /// is_completed() from its own thread until it is done, which such a Work must allow.
  virtual bool completes_on_device() const { return false; }
};

/// A Work that is already complete (what sync calls return).
std::shared_ptr<Work> completed_work();

/// One communication library behind a group, as c10d's ProcessGroupMPI / ProcessGroupNCCL.
/// Every op takes contiguous tensors on this backend's device type, ranks are group ranks, and
/// with async_op false the op has finished when it returns. The front end (collectives.h)
/// checks arguments, makes tensors contiguous and handles the profiling switches and logging.
class Backend {
 public:
  virtual ~Backend() = default;
  /// The library's name: "mpi", "nccl" or "mpi+staging" (CUDA tensors through MPI, staged in host memory).
  virtual const char* name() const = 0;
  /// The device type whose tensors this backend moves.
  virtual DeviceType device_type() const = 0;
  /// Throws, naming `op`, when this backend cannot move tensors on `device` of its type (NCCL: a GPU other
  /// than its own). ProcessGroup::backend(Device) calls it, before the ranks compare their calls.
  virtual void check_device(Device /*device*/, const char* /*op*/) const {}

  /// Reduces `t` in place across the group.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, bool async_op) = 0;
  /// Reduces `t` into root's `t`; other ranks' `t` is left as it was.
  virtual std::shared_ptr<Work> reduce(const Tensor& t, int root, ReduceOp op, bool async_op) = 0;
  /// Copies root's `t` into every rank's `t`.
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root, bool async_op) = 0;
  /// Concatenates every rank's `in` (same size everywhere) into `out`, in group-rank order.
  virtual std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, bool async_op) = 0;
  /// Reduces `in` (size() equal slices) across the group; rank r gets slice r in `out`.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, bool async_op) = 0;
  /// Concatenates every rank's `in` into root's `out` (undefined off the root).
  virtual std::shared_ptr<Work> gather(const Tensor& out, const Tensor& in, int root, bool async_op) = 0;
  /// Sends slice r of root's `in` (undefined off the root) to rank r's `out`.
  virtual std::shared_ptr<Work> scatter(const Tensor& out, const Tensor& in, int root, bool async_op) = 0;
  /// Rank r sends in_counts[p] elements of `in` to rank p and receives out_counts[p] from it, both packed in
  /// rank order.
  virtual std::shared_ptr<Work> all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                           const std::vector<int64_t>& in_counts, bool async_op) = 0;
  /// Sends `t` to group rank dst; matched by a recv with the same tag.
  virtual std::shared_ptr<Work> send(const Tensor& t, int dst, int tag, bool async_op) = 0;
  /// Receives into `t` from group rank src.
  virtual std::shared_ptr<Work> recv(const Tensor& t, int src, int tag, bool async_op) = 0;
  /// Returns when every rank has entered it.
  virtual std::shared_ptr<Work> barrier(bool async_op) = 0;
  /// Whether a receive may be posted long before its message without holding up other ops: true where every
  /// op progresses on its own (MPI), false where a peer's ops run in posting order (NCCL's one stream per
  /// communicator), where a waiting receive would stall the sends posted after it.
  virtual bool receives_post_ahead() const { return false; }
  /// The backend of a subgroup (MPI_Comm_split, ncclCommSplit): every rank of this group calls it with
  /// its index in the new group, or -1 outside it (then it returns null).
  virtual std::unique_ptr<Backend> split(int index) = 0;
  /// Opens a batch of async sends and receives with group ranks `peers` that start together at end_batch() (an
  /// NCCL group call, so that pairwise exchanges cannot deadlock); batches nest. MPI posts each op at once and
  /// ignores it.
  virtual void start_batch(const std::vector<int>& /*peers*/) {}
  /// Closes the batch start_batch() opened.
  virtual void end_batch() {}
};

/// A group's backends, one slot per device type (indexed by DeviceType), null where unsupported.
using Backends = std::array<std::unique_ptr<Backend>, kNumDeviceTypes>;

/// A set of ranks that communicate: the global ranks in group-rank order, this process's place
/// in it, and a backend per device type. Made by init() (WORLD) and new_group(); shared by
/// handle (Group). A process outside the group holds one too, which refuses every collective.
class ProcessGroup {
 public:
  /// Used by init() and new_group().
  ProcessGroup(int64_t id, std::vector<int> ranks, int rank, Backends backends);

  int rank() const { return rank_; }                            ///< this process's group rank, -1 outside the group
  int size() const { return static_cast<int>(ranks_.size()); }  ///< number of ranks
  bool is_member() const { return rank_ >= 0; }                 ///< whether this process belongs to the group
  const std::vector<int>& ranks() const { return ranks_; }      ///< global ranks, in group-rank order
  int64_t id() const { return id_; }                            ///< creation index, the same on every rank (WORLD is 0)
  bool is_destroyed() const { return destroyed_; }              ///< true after destroy_process_group(group)
  /// The global rank of group rank `group_rank`.
  int global_rank(int group_rank) const;
  /// The group rank of global rank `global_rank`, or -1 when it is not in the group.
  int group_rank(int global_rank) const;
  /// "WORLD" or "group 2 [1, 0]": how errors and logs name the group.
  std::string describe() const;
  /// The backend for tensors on `device`, which its check_device accepts; throws for non-members, destroyed
  /// groups and devices no backend of this group moves. `op` names the caller in the error.
  Backend& backend(Device device, const char* op) const;
  /// The backend for tensors of `type`, on whichever device of that type (new_group, strata's own protocols).
  Backend& backend(DeviceType type, const char* op) const;
  /// Whether the group has a backend for tensors of `type` (CUDA: see distributed/README.md).
  bool has_backend(DeviceType type) const { return backends_[static_cast<size_t>(type)] != nullptr; }
  /// Counts a call issued on this group and returns its number (what the timeout and debug checks report).
  uint64_t next_sequence_number() { return sequence_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// The number of the last call issued on this group.
  uint64_t sequence_number() const { return sequence_.load(std::memory_order_relaxed); }
  /// Releases the backends (their communicators); later collectives throw.
  void destroy();

 private:
  int64_t id_;
  std::vector<int> ranks_;
  int rank_;
  Backends backends_;
  std::atomic<uint64_t> sequence_{0};
  bool destroyed_ = false;
};

/// A shared handle to a process group; an empty Group means WORLD wherever a group is taken.
using Group = std::shared_ptr<ProcessGroup>;

}  // namespace strata::distributed
