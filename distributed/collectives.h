#pragma once
// Processes, groups and collectives with torch.distributed's names and semantics.
// Processes come from `mpirun -np N prog`; without mpirun the program is a world of one.
//
//   namespace dist = strata::distributed;
//   dist::init();
//   auto t = strata::full({2}, dist::get_rank());
//   dist::all_reduce(t);                                  // every rank: 0 + 1 + ... + (N-1)
//   auto work = dist::broadcast(t, /*src=*/0, {}, /*async_op=*/true);
//   work->wait();
//   auto pair = dist::new_group({1, 0});                 // every rank calls it; ranks 1, 0 are members
//   if (pair->is_member()) dist::all_reduce(t, dist::ReduceOp::MAX, pair);
//
// Ranks given as src/dst/peer are global ranks, as in torch.distributed; get_group_rank and
// get_global_rank convert. Tensors may have any dtype and strides. A call with async_op returns
// a Work whose wait() finishes it (and copies results into non-contiguous outputs); the
// tensors must not be touched until then.
//
// Failures end in errors, not hangs: a collective still blocked after STRATA_COMM_TIMEOUT_S
// seconds (default 600) ends the job naming the ranks that never arrived. Ranks that make
// different calls (op, dtype, shape, root, reduce op, call number) are an error on every rank of
// the group: by default (STRATA_DISTRIBUTED_DEBUG=INFO) the ranks compare their last 64
// collectives of a group at every 64th call, naming the first that differs; with DETAIL every
// collective is checked before it runs; OFF checks nothing.

#include <chrono>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/distributed/process_group.h"

namespace strata::distributed {

// ---- processes and groups ----

/// Joins the job: MPI under mpirun, a world of one without it. Later calls do nothing.
/// The job is finalized at exit; a rank that dies on an uncaught exception aborts the whole job.
/// Unless OMP_NUM_THREADS is set, gives this rank its share of the node's cores (see ThreadChoice): ranks that
/// each start OpenMP's default of every core on a shared node slow each other down many times over.
/// With GPUs, makes cuda:(local rank % GPUs) current: strata::cuda::current_device() is the GPU this rank uses,
/// and CUDA tensors take NCCL or MPI with host staging (distributed/README.md, STRATA_CUDA_BACKEND).
void init();
/// Whether init() ran and finalize() did not.
bool is_initialized();
/// The CPU thread count init() gave this rank and why: OMP_NUM_THREADS when set, else the rank's share of
/// its node's cores, max(1, cores / ranks on the node), no more than the CPUs it may run on.
struct ThreadChoice {
  int threads = 1;     ///< what init() passed to strata::set_num_threads (or OMP_NUM_THREADS gave)
  std::string reason;  ///< e.g. "OMP_NUM_THREADS=3" or "2 cores / 4 ranks on this node"
};
/// What init() chose (see ThreadChoice); throws before init().
const ThreadChoice& thread_choice();
/// Leaves the job (MPI_Finalize); every rank calls it, or lets exit do it.
void finalize();
/// Ends every process of the job at once (MPI_Abort) after printing `reason` with this rank and dumping the flight
/// recorder: for a rank that cannot go on (c10d's ProcessGroupMPI::abort). A rank's uncaught exception does this.
[[noreturn]] void abort_job(const std::string& reason);
/// WORLD: every process of the job.
const Group& get_world_group();
/// This process's rank in `group` (WORLD when empty), -1 when it is not a member.
int get_rank(const Group& group = {});
/// The number of ranks in `group`.
int get_world_size(const Group& group = {});
/// A group of the given global ranks; group rank i is ranks[i]. Every rank of WORLD calls it with the same list.
/// The group lives until destroy_process_group or finalize, whether or not the caller keeps the handle.
Group new_group(const std::vector<int>& ranks);
/// The global rank of `group_rank` in `group`.
int get_global_rank(const Group& group, int group_rank);
/// The rank of `global_rank` within `group`; throws when it is not a member.
int get_group_rank(const Group& group, int global_rank);
/// With a group: releases it (later collectives on it throw). Without: finalize().
void destroy_process_group(const Group& group = {});

/// How much checking collectives do (torch's TORCH_DISTRIBUTED_DEBUG), from STRATA_DISTRIBUTED_DEBUG: OFF,
/// INFO (the default: the ranks compare their calls every 64 collectives of a group) or DETAIL (before each).
enum class DebugLevel : int8_t { OFF, INFO, DETAIL };
/// Sets the debug level on this rank; every rank of a group must use the same one.
void set_debug_level(DebugLevel level);
/// The current debug level.
DebugLevel get_debug_level();

// ---- collectives ----

/// Reduces `tensor` in place across the group (AVG needs a floating dtype).
std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::SUM, const Group& group = {},
                                 bool async_op = false);
/// Reduces into `tensor` on global rank dst; other ranks' tensors are unchanged.
std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM, const Group& group = {},
                             bool async_op = false);
/// Copies src's `tensor` into every rank's `tensor`.
std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const Group& group = {}, bool async_op = false);
/// Fills tensor_list[r] with group rank r's `tensor`.
std::shared_ptr<Work> all_gather(const tensor_list& tensor_list, const Tensor& tensor, const Group& group = {},
                                 bool async_op = false);
/// Concatenates every rank's `input` along dim 0 into `output`.
std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input, const Group& group = {},
                                             bool async_op = false);
/// Reduces input_list[r] across ranks into group rank r's `output`.
std::shared_ptr<Work> reduce_scatter(const Tensor& output, const tensor_list& input_list, ReduceOp op = ReduceOp::SUM,
                                     const Group& group = {}, bool async_op = false);
/// Reduces `input` across ranks; group rank r gets slice r of dim 0 in `output`.
std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::SUM,
                                            const Group& group = {}, bool async_op = false);
/// Fills gather_list[r] on global rank dst with group rank r's `tensor` (gather_list empty elsewhere).
std::shared_ptr<Work> gather(const Tensor& tensor, const tensor_list& gather_list, int dst, const Group& group = {},
                             bool async_op = false);
/// Fills group rank r's `tensor` with scatter_list[r] of global rank src (scatter_list empty elsewhere).
std::shared_ptr<Work> scatter(const Tensor& tensor, const tensor_list& scatter_list, int src, const Group& group = {},
                              bool async_op = false);
/// Sends input_list[p] to group rank p and receives p's tensor for this rank into output_list[p].
std::shared_ptr<Work> all_to_all(const tensor_list& output_list, const tensor_list& input_list, const Group& group = {},
                                 bool async_op = false);
/// all_to_all over dim 0 of one tensor: input_split_sizes[p] rows go to group rank p, output_split_sizes[p]
/// rows come from it; empty split sizes mean equal parts.
std::shared_ptr<Work> all_to_all_single(const Tensor& output, const Tensor& input,
                                        const std::vector<int64_t>& output_split_sizes = {},
                                        const std::vector<int64_t>& input_split_sizes = {}, const Group& group = {},
                                        bool async_op = false);
/// Returns when every rank of the group has entered it.
std::shared_ptr<Work> barrier(const Group& group = {}, bool async_op = false);
/// A barrier that gives up after `timeout` and throws naming the ranks that did not arrive (all of them
/// with wait_all_ranks, else the first), on rank 0 and on every rank that did arrive. Zero timeout:
/// STRATA_COMM_TIMEOUT_S. A rank that never hears from group rank 0 throws after twice the timeout.
void monitored_barrier(const Group& group = {}, std::chrono::milliseconds timeout = {}, bool wait_all_ranks = false);
/// all_reduce of several tensors (one dtype and device) through one flattened buffer.
std::shared_ptr<Work> all_reduce_coalesced(const tensor_list& tensors, ReduceOp op = ReduceOp::SUM,
                                           const Group& group = {}, bool async_op = false);
/// all_gather of several tensors through one flattened buffer: output_lists[r][i] gets rank r's inputs[i].
std::shared_ptr<Work> all_gather_coalesced(const std::vector<tensor_list>& output_lists, const tensor_list& inputs,
                                           const Group& group = {}, bool async_op = false);

// ---- point to point ----

/// Sends `tensor` to global rank dst; returns when the buffer may be reused.
void send(const Tensor& tensor, int dst, const Group& group = {}, int tag = 0);
/// Receives into `tensor` from global rank src.
void recv(const Tensor& tensor, int src, const Group& group = {}, int tag = 0);
/// Non-blocking send.
std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const Group& group = {}, int tag = 0);
/// Non-blocking receive.
std::shared_ptr<Work> irecv(const Tensor& tensor, int src, const Group& group = {}, int tag = 0);

/// One send or receive of batch_isend_irecv, as torch.distributed.P2POp.
struct P2POp {
  /// Which direction: a send or a receive.
  enum Kind : int8_t { kSend, kRecv };
  Kind op;           ///< kSend (isend) or kRecv (irecv)
  Tensor tensor;     ///< the buffer
  int peer;          ///< global rank of the other side
  Group group = {};  ///< WORLD when empty
  int tag = 0;       ///< matched with the peer's tag
};
/// Posts all ops together (so pairwise exchanges cannot deadlock); one Work per op.
std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops);

// ---- small objects (metadata) ----

/// Broadcasts bytes from global rank src; other ranks' `bytes` is replaced, whatever its size.
void broadcast_object(std::string& bytes, int src, const Group& group = {});
/// Sends bytes to global rank dst.
void send_object(const std::string& bytes, int dst, const Group& group = {}, int tag = 0);
/// Receives the bytes global rank src sent with send_object.
std::string recv_object(int src, const Group& group = {}, int tag = 0);

/// A plain struct (trivially copyable, not an array: a string literal goes as std::string, without its NUL) or a
/// vector of them, which move as their bytes.
template <class T>
concept Serializable = (std::is_trivially_copyable_v<T> && !std::is_array_v<T>) ||
                       (requires { typename T::value_type; } &&
                        std::is_same_v<T, std::vector<typename T::value_type>> &&
                        std::is_trivially_copyable_v<typename T::value_type>);

namespace detail {
template <Serializable T>
std::string to_bytes(const T& obj) {
  if constexpr (std::is_trivially_copyable_v<T>)
    return std::string(reinterpret_cast<const char*>(&obj), sizeof(T));
  else
    return std::string(reinterpret_cast<const char*>(obj.data()), obj.size() * sizeof(typename T::value_type));
}
/// Throws when `bytes` cannot hold a `type` of `size` bytes (or a whole number of them).
void check_object_size(const char* op, const char* type, size_t bytes, size_t size, bool exact);
template <Serializable T>
T from_bytes(const std::string& bytes, const char* op) {
  T obj{};
  if constexpr (std::is_trivially_copyable_v<T>) {
    check_object_size(op, typeid(T).name(), bytes.size(), sizeof(T), true);
    std::memcpy(&obj, bytes.data(), sizeof(T));
  } else {
    using V = typename T::value_type;
    check_object_size(op, typeid(V).name(), bytes.size(), sizeof(V), false);
    obj.resize(bytes.size() / sizeof(V));
    if (!obj.empty()) std::memcpy(obj.data(), bytes.data(), bytes.size());
  }
  return obj;
}
}  // namespace detail

/// Broadcasts a struct or vector from global rank src into `obj` on every rank.
template <Serializable T>
void broadcast_object(T& obj, int src, const Group& group = {}) {
  std::string bytes = detail::to_bytes(obj);
  broadcast_object(bytes, src, group);
  obj = detail::from_bytes<T>(bytes, "broadcast_object");
}
/// Sends a struct or vector to global rank dst.
template <Serializable T>
void send_object(const T& obj, int dst, const Group& group = {}, int tag = 0) {
  send_object(detail::to_bytes(obj), dst, group, tag);
}
/// Receives a struct or vector sent with send_object.
template <Serializable T>
T recv_object(int src, const Group& group = {}, int tag = 0) {
  return detail::from_bytes<T>(recv_object(src, group, tag), "recv_object");
}

// ---- profiling switches (DeepSpeed's) ----
// While a switch is on, the ops of that type return at once without communicating: results are
// WRONG on purpose. Time a step with and without to see how much of it is communication.

/// all_gather, all_gather_into_tensor and all_gather_coalesced do nothing while on.
void all_gather_comm_off(bool off);
/// reduce_scatter and reduce_scatter_tensor do nothing while on.
void reduce_scatter_comm_off(bool off);
/// broadcast does nothing while on.
void broadcast_comm_off(bool off);
/// all_reduce and all_reduce_coalesced do nothing while on.
void all_reduce_comm_off(bool off);
/// reduce does nothing while on.
void reduce_comm_off(bool off);
/// The backward-pass pair of sharded training (all_gather and reduce_scatter) do nothing while on.
void backward_comm_off(bool off);

}  // namespace strata::distributed
