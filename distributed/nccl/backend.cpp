// The NCCL backend: CUDA tensors over NCCL communicators, one GPU per rank, as c10d's
// ProcessGroupNCCL. A group's communicators are made on first use (Note [lazy communicators] in
// detail/lazy_comms.h; the unique ids travel on a private MPI communicator): the group's for
// collectives, one per peer for sends and receives. Gather, scatter and all_to_all are sends and
// receives on the group's communicator inside one NCCL group call. NCCL has no tags: sends and
// receives between two ranks match in the order they are posted.
//
// Note [NCCL streams]: each communicator has a communication stream of its own, next to the
// compute stream of Note [CUDA streams] (tensor/cuda/cuda_kernels.h). Before an op the
// communication stream waits on an event recorded on the compute stream, so the op reads inputs
// the queued kernels have finished; after it an end event is recorded on the communication stream.
// NcclWork keeps the tensors alive; wait() makes the compute stream wait on the end event (the
// host does not block), so what is queued later sees the results. A Work dropped unwaited makes
// the compute stream wait too before it lets the tensors go: the stream-ordered allocator could
// otherwise hand their memory to a kernel while NCCL still reads or writes it. A sync op does what
// wait() does before it returns.

#include <nccl.h>

// The oldest NCCL strata is built with (ncclAvg, ncclBfloat16 and ncclGetLastError arrived earlier).
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "strata's NCCL backend needs NCCL 2.18 or newer"
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "strata/distributed/detail/cuda_backend.h"
#include "strata/distributed/detail/lazy_comms.h"
#include "strata/distributed/mpi/mpi.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/cuda.h"
#include "strata/tensor/cuda/cuda_kernels.h"

/// Throws strata::Error with the call, file:line, NCCL's name for the status and its last error message
/// unless `call` returns ncclSuccess.
#define STRATA_NCCL_CHECK(call)                                                                    \
  do {                                                                                             \
    const ncclResult_t strata_nccl_code_ = (call);                                                 \
    if (strata_nccl_code_ != ncclSuccess) [[unlikely]]                                             \
      ::strata::distributed::nccl::throw_nccl_error(__FILE__, __LINE__, #call, strata_nccl_code_); \
  } while (0)

namespace strata::distributed::nccl {

[[noreturn]] void throw_nccl_error(const char* file, int line, const char* call, ncclResult_t code) {
  const char* last = ncclGetLastError(nullptr);  // the comm argument is unused
  const bool has_last = last && *last;
  ::strata::detail::throw_error(file, line, call, ": NCCL error ", static_cast<int>(code), " (",
                                ncclGetErrorString(code), ")", has_last ? ": " : "", has_last ? last : "");
}

namespace {

// A CUDA event without timing, made on the device current at construction.
struct Event {
  Event() { STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t event = nullptr;
};

// One communicator and its communication stream, shared by the backend and its works in flight, so
// destroy_process_group with an op in flight releases them only after the op's Work is gone.
struct Comm {
  Comm(ncclComm_t c, int d) : comm(c), device(d) {
    try {
      STRATA_NCCL_CHECK(ncclCommUserRank(comm, &rank));
      STRATA_NCCL_CHECK(ncclCommCount(comm, &size));
      cuda::DeviceGuard guard(device);
      STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    } catch (...) {
      ncclCommDestroy(comm);
      throw;
    }
  }
  ~Comm() {
    // A communicator that reported an error may have kernels that never finish: abort those.
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) failed = true;
    if (failed)
      ncclCommAbort(comm);
    else
      ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Throws the error NCCL met in the background (a peer gone, a network failure), if any.
  void check_async_error() {
    ncclResult_t async = ncclSuccess;
    STRATA_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess) return;
    failed = true;
    throw_nccl_error(__FILE__, __LINE__, "NCCL communication (ncclCommGetAsyncError)", async);
  }

  ncclComm_t comm;
  int device;
  int rank = 0;
  int size = 0;
  cudaStream_t stream = nullptr;
  std::atomic<bool> failed{false};  // set by whichever thread first sees an error
};

// Note [NCCL batches]: the ops between the outermost start_batch() and its end_batch(), on any NCCL
// backend, form one NCCL group call. start_batch() makes the pair communicators its batch lacks
// (Note [lazy communicators]); a communicator made inside a group call would only be ready at its end, so
// the group opens at the batch's first op, after every backend's start_batch(). NCCL only collects the
// calls until the group closes, so an op's end event can be recorded only then. Batches are per thread, as
// NCCL's groups are.
struct PendingEnd {
  std::shared_ptr<Comm> comm;
  std::shared_ptr<Event> end;
};
thread_local int batch_depth = 0;
thread_local bool group_open = false;
thread_local std::vector<PendingEnd> batch_pending;

// The watchdog polls is_completed() from its thread (Note [device ops]), hence the mutex.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, std::shared_ptr<Event> end, std::vector<Tensor> keep, bool host_waits)
      : comm_(std::move(comm)), end_(std::move(end)), keep_(std::move(keep)), host_waits_(host_waits) {}

  ~NcclWork() override {
    if (waited_ || completed_) return;
    try {  // Note [NCCL streams]: the tensors' memory is free for reuse only after the op
      cudaStreamWaitEvent(cuda::current_stream(comm_->device), end_->event, 0);
    } catch (...) {
    }
  }

  bool completes_on_device() const override { return true; }

  bool is_completed() override {
    std::lock_guard lock(mutex_);
    if (error_ || completed_) return true;
    try {
      comm_->check_async_error();
      const cudaError_t code = cudaEventQuery(end_->event);
      if (code == cudaErrorNotReady) return false;
      STRATA_CUDA_CHECK(code);
      completed_ = true;
    } catch (...) {
      error_ = std::current_exception();
    }
    return true;
  }

  void wait() override {
    std::lock_guard lock(mutex_);
    if (!waited_ && !error_) {
      try {
        comm_->check_async_error();
        if (host_waits_) STRATA_CUDA_CHECK(cudaEventSynchronize(end_->event));
        STRATA_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(comm_->device), end_->event, 0));
        waited_ = true;
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::shared_ptr<Comm> comm_;
  std::shared_ptr<Event> end_;
  std::vector<Tensor> keep_;
  bool host_waits_;  // barrier: the host itself waits
  std::mutex mutex_;
  bool waited_ = false;
  bool completed_ = false;  // finished on the device, so no stream needs to wait for it
  std::exception_ptr error_;
};

ncclDataType_t datatype(ScalarType t) {
  switch (t) {
    case kBool:
      return ncclUint8;
    case kLong:
      return ncclInt64;
    case kFloat:
      return ncclFloat32;
    case kDouble:
      return ncclFloat64;
    case kHalf:
      return ncclFloat16;
    case kBFloat16:
      return ncclBfloat16;
    case kByte:
      return ncclUint8;
    case kChar:
      return ncclInt8;
    case kInt:
      return ncclInt32;
    case kShort:
      break;
  }
  STRATA_CHECK(false, "the NCCL backend does not support ", t,
               " tensors (NCCL has no 16-bit integer type), as libtorch's; convert with .to(kInt) first");
}

// NCCL has no logical ops; on bool bytes (0 or 1) MAX is "or" and MIN is "and", as the MPI backend's
// MPI_LOR and MPI_LAND.
ncclRedOp_t reduce_op(ReduceOp op, ScalarType t) {
  if (t == kBool) return (op == ReduceOp::PRODUCT || op == ReduceOp::MIN) ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::AVG:
      return ncclAvg;
    case ReduceOp::PRODUCT:
      return ncclProd;
    case ReduceOp::MIN:
      return ncclMin;
    case ReduceOp::MAX:
      return ncclMax;
  }
  STRATA_INTERNAL_ASSERT(false);
}

// Runs the sends and receives `calls` posts inside one NCCL group, so they progress together.
template <class Calls>
void grouped(Calls&& calls) {
  STRATA_NCCL_CHECK(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  STRATA_NCCL_CHECK(ncclGroupEnd());
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

using Comms = detail::LazyComms<Comm, ncclUniqueId>;

// The communicators of a group whose private CPU backend is `host`, on GPU `device`.
std::unique_ptr<Comms> make_comms(std::unique_ptr<Backend> host, int rank, int device) {
  auto make_id = [] {
    ncclUniqueId id{};
    STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
    return id;
  };
  auto make_comm = [device](const ncclUniqueId& id, int nranks, int rank) {
    ncclComm_t comm = nullptr;
    {
      cuda::DeviceGuard guard(device);
      STRATA_NCCL_CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    }
    return std::make_shared<Comm>(comm, device);
  };
  return std::make_unique<Comms>(std::move(host), rank, make_id, make_comm);
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(std::unique_ptr<Comms> comms, int device)
      : comms_(std::move(comms)), device_(device), ready_(make_ready(device)) {}

  const char* name() const override { return "nccl"; }
  DeviceType device_type() const override { return kCUDA; }

  void check_device(Device d, const char* op) const override {
    STRATA_CHECK(d == device(), op, ": the tensor is on ", d, " but this rank's NCCL communicator is on ", device(),
                 " (strata::cuda::current_device() when init() ran: NCCL moves each rank's tensors on one GPU)");
  }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, bool async_op) override {
    check_device(t, "all_reduce");
    if (t.numel() == 0) return completed_work();
    return run(comms_->group(), async_op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(
          ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), datatype(t.dtype()), reduce_op(op, t.dtype()), c, s));
    });
  }

  std::shared_ptr<Work> reduce(const Tensor& t, int root, ReduceOp op, bool async_op) override {
    check_device(t, "reduce");
    if (t.numel() == 0) return completed_work();
    // Off the root the result buffer may be null, so NCCL leaves those tensors as they were.
    void* result = comms_->rank() == root ? t.data_ptr() : nullptr;
    return run(comms_->group(), async_op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(
          ncclReduce(t.data_ptr(), result, t.numel(), datatype(t.dtype()), reduce_op(op, t.dtype()), root, c, s));
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root, bool async_op) override {
    check_device(t, "broadcast");
    if (t.numel() == 0) return completed_work();
    return run(comms_->group(), async_op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), datatype(t.dtype()), root, c, s));
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, bool async_op) override {
    check_device(out, "all_gather");
    check_device(in, "all_gather");
    if (in.numel() == 0) return completed_work();
    return run(comms_->group(), async_op, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), datatype(in.dtype()), c, s));
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, bool async_op) override {
    check_device(out, "reduce_scatter");
    check_device(in, "reduce_scatter");
    if (out.numel() == 0) return completed_work();
    return run(comms_->group(), async_op, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), datatype(in.dtype()),
                                          reduce_op(op, in.dtype()), c, s));
    });
  }

  std::shared_ptr<Work> gather(const Tensor& out, const Tensor& in, int root, bool async_op) override {
    check_device(out, "gather");
    check_device(in, "gather");
    if (in.numel() == 0) return completed_work();
    const std::shared_ptr<Comm> comm = comms_->group();
    return run(comm, async_op, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const size_t n = in.numel(), bytes = in.nbytes();
      const ncclDataType_t dt = datatype(in.dtype());
      if (comms_->rank() == root) {
        STRATA_CUDA_CHECK(
            cudaMemcpyAsync(bytes_of(out) + root * bytes, in.data_ptr(), bytes, cudaMemcpyDeviceToDevice, s));
      }
      grouped([&] {
        if (comms_->rank() != root) {
          STRATA_NCCL_CHECK(ncclSend(in.data_ptr(), n, dt, root, c, s));
          return;
        }
        for (int p = 0; p < comm->size; ++p)
          if (p != root) STRATA_NCCL_CHECK(ncclRecv(bytes_of(out) + p * bytes, n, dt, p, c, s));
      });
    });
  }

  std::shared_ptr<Work> scatter(const Tensor& out, const Tensor& in, int root, bool async_op) override {
    check_device(out, "scatter");
    check_device(in, "scatter");
    if (out.numel() == 0) return completed_work();
    const std::shared_ptr<Comm> comm = comms_->group();
    return run(comm, async_op, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const size_t n = out.numel(), bytes = out.nbytes();
      const ncclDataType_t dt = datatype(out.dtype());
      if (comms_->rank() == root) {
        STRATA_CUDA_CHECK(
            cudaMemcpyAsync(out.data_ptr(), bytes_of(in) + root * bytes, bytes, cudaMemcpyDeviceToDevice, s));
      }
      grouped([&] {
        if (comms_->rank() != root) {
          STRATA_NCCL_CHECK(ncclRecv(out.data_ptr(), n, dt, root, c, s));
          return;
        }
        for (int p = 0; p < comm->size; ++p)
          if (p != root) STRATA_NCCL_CHECK(ncclSend(bytes_of(in) + p * bytes, n, dt, p, c, s));
      });
    });
  }

  std::shared_ptr<Work> all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                   const std::vector<int64_t>& in_counts, bool async_op) override {
    check_device(out, "all_to_all");
    check_device(in, "all_to_all");
    const int me = comms_->rank();
    STRATA_CHECK(in_counts[me] == out_counts[me], "all_to_all: this rank sends itself ", in_counts[me],
                 " elements but expects ", out_counts[me], " from itself");
    const std::shared_ptr<Comm> comm = comms_->group();
    return run(comm, async_op, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const ncclDataType_t dt = datatype(in.dtype());
      const int64_t element = in.element_size();
      int64_t send_at = 0, recv_at = 0;
      std::vector<int64_t> send_offsets(comm->size), recv_offsets(comm->size);
      for (int p = 0; p < comm->size; ++p) {
        send_offsets[p] = send_at;
        recv_offsets[p] = recv_at;
        send_at += in_counts[p] * element;
        recv_at += out_counts[p] * element;
      }
      if (in_counts[me] > 0)
        STRATA_CUDA_CHECK(cudaMemcpyAsync(bytes_of(out) + recv_offsets[me], bytes_of(in) + send_offsets[me],
                                          in_counts[me] * element, cudaMemcpyDeviceToDevice, s));
      grouped([&] {
        for (int p = 0; p < comm->size; ++p) {
          if (p == me) continue;
          if (in_counts[p] > 0) STRATA_NCCL_CHECK(ncclSend(bytes_of(in) + send_offsets[p], in_counts[p], dt, p, c, s));
          if (out_counts[p] > 0)
            STRATA_NCCL_CHECK(ncclRecv(bytes_of(out) + recv_offsets[p], out_counts[p], dt, p, c, s));
        }
      });
    });
  }

  // On the communicator of the pair, where the lower rank is 0. NCCL has no tags (the tag is ignored): messages
  // between two ranks match in posting order.
  std::shared_ptr<Work> send(const Tensor& t, int dst, int, bool async_op) override {
    check_device(t, "send");
    if (t.numel() == 0) return completed_work();
    const int peer = comms_->rank() < dst ? 1 : 0;
    return run(comms_->pair(dst), async_op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), datatype(t.dtype()), peer, c, s));
    });
  }

  std::shared_ptr<Work> recv(const Tensor& t, int src, int, bool async_op) override {
    check_device(t, "recv");
    if (t.numel() == 0) return completed_work();
    const int peer = comms_->rank() < src ? 1 : 0;
    return run(comms_->pair(src), async_op, {t}, [&](ncclComm_t c, cudaStream_t s) {
      STRATA_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), datatype(t.dtype()), peer, c, s));
    });
  }

  // A one-element all_reduce that the host waits for.
  std::shared_ptr<Work> barrier(bool async_op) override {
    Tensor token = zeros({1}, TensorOptions(kFloat).device(device()));
    return run(
        comms_->group(), async_op, {token},
        [&](ncclComm_t c, cudaStream_t s) {
          STRATA_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, c, s));
        },
        /*host_waits=*/true);
  }

  // Makes no communicator: the subgroup makes its own on first use.
  std::unique_ptr<Backend> split(int index) override {
    std::unique_ptr<Comms> sub = comms_->split(index);
    return sub ? std::make_unique<NcclBackend>(std::move(sub), device_) : nullptr;
  }

  void start_batch(const std::vector<int>& peers) override {
    STRATA_INTERNAL_ASSERT(!group_open);  // Note [NCCL batches]: every batch opens before the first op
    comms_->make_pairs(peers);
    ++batch_depth;
  }

  void end_batch() override {
    if (--batch_depth > 0 || !group_open) return;
    group_open = false;
    const ncclResult_t code = ncclGroupEnd();
    // Note [NCCL batches]: the calls are enqueued now, so their end events can be recorded.
    std::vector<PendingEnd> pending = std::move(batch_pending);
    batch_pending.clear();
    if (code == ncclSuccess) {
      for (const PendingEnd& p : pending) {
        cuda::DeviceGuard guard(p.comm->device);
        STRATA_CUDA_CHECK(cudaEventRecord(p.end->event, p.comm->stream));
      }
    }
    STRATA_NCCL_CHECK(code);
  }

 private:
  static std::unique_ptr<Event> make_ready(int device) {
    cuda::DeviceGuard guard(device);
    return std::make_unique<Event>();
  }

  Device device() const { return Device(kCUDA, static_cast<int8_t>(device_)); }

  void check_device(const Tensor& t, const char* op) const {
    if (t.defined()) check_device(t.device(), op);
  }

  // Orders `launch` (the NCCL calls, on the communication stream) after the compute stream's queued work and
  // returns its Work (Note [NCCL streams]); a sync op's compute stream already waits for it.
  template <class Launch>
  std::shared_ptr<Work> run(const std::shared_ptr<Comm>& comm, bool async_op, std::vector<Tensor> keep, Launch&& launch,
                            bool host_waits = false) {
    STRATA_INTERNAL_ASSERT(async_op || batch_depth == 0);  // batches hold async sends and receives only
    if (batch_depth > 0 && !group_open) {
      STRATA_NCCL_CHECK(ncclGroupStart());
      group_open = true;
    }
    cuda::DeviceGuard guard(device_);
    STRATA_CUDA_CHECK(cudaEventRecord(ready_->event, cuda::current_stream(device_)));
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(comm->stream, ready_->event, 0));
    auto end = std::make_shared<Event>();
    try {
      launch(comm->comm, comm->stream);
    } catch (...) {
      // What was queued before the failure may still use the tensors: the compute stream waits for it
      // before their memory can be reused.
      if (batch_depth == 0 && cudaEventRecord(end->event, comm->stream) == cudaSuccess)
        cudaStreamWaitEvent(cuda::current_stream(device_), end->event, 0);
      throw;
    }
    if (batch_depth > 0)
      batch_pending.push_back({comm, end});
    else
      STRATA_CUDA_CHECK(cudaEventRecord(end->event, comm->stream));
    auto work = std::make_shared<NcclWork>(comm, std::move(end), std::move(keep), host_waits);
    if (!async_op) work->wait();  // returned anyway, for the watchdog (Note [device ops])
    return work;
  }

  std::unique_ptr<Comms> comms_;
  int device_;
  // Recorded on the compute stream before each op; a stream waits on the record made before the wait
  // call, so one event serves every op.
  std::unique_ptr<Event> ready_;
};

}  // namespace

}  // namespace strata::distributed::nccl

namespace strata::distributed::detail {

namespace {

// STRATA_CUDA_BACKEND: which path CUDA tensors take (distributed/README.md). kBad: a value that is none of them,
// refused only once every rank has joined the agreement, so that no rank is left waiting in it.
enum class Path : int64_t { kAuto, kNccl, kMpi, kBad };

Path path_from_env() {
  const char* text = std::getenv("STRATA_CUDA_BACKEND");
  if (!text || !*text || std::string(text) == "auto") return Path::kAuto;
  if (std::string(text) == "nccl") return Path::kNccl;
  return std::string(text) == "mpi" ? Path::kMpi : Path::kBad;
}

// This rank's place on its node: its index among the node's ranks, their number, and whether the GPU it
// would use is used by no other rank of the node. A failure to read the GPU is kept for after the ranks
// agreed, so that no rank is left waiting in a collective.
struct NodePlace {
  int local_rank = 0;
  int local_size = 1;
  bool own_gpu = false;
  std::exception_ptr gpu_error;
};

NodePlace node_place(int device_count) {
  MPI_Comm node = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                   "MPI_Comm_split_type");
  NodePlace place;
  int code = MPI_Comm_rank(node, &place.local_rank);
  if (code == MPI_SUCCESS) code = MPI_Comm_size(node, &place.local_size);
  // GPUs are told apart by UUID: a launcher may show each rank only its own GPU (CUDA_VISIBLE_DEVICES), so
  // that every rank sees one device, device 0, and still has a GPU of its own.
  cudaUUID_t mine{};
  if (code == MPI_SUCCESS && device_count > 0) {
    try {
      cudaDeviceProp props{};
      STRATA_CUDA_CHECK(cudaGetDeviceProperties(&props, place.local_rank % device_count));
      mine = props.uuid;
    } catch (...) {
      place.gpu_error = std::current_exception();
    }
  }
  std::vector<cudaUUID_t> all(code == MPI_SUCCESS ? place.local_size : 0);
  if (code == MPI_SUCCESS)
    code = MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, node);
  MPI_Comm_free(&node);
  STRATA_MPI_CHECK(code, "init: finding the ranks on this node");
  const auto same = [&](const cudaUUID_t& u) { return std::memcmp(&u, &mine, sizeof(mine)) == 0; };
  place.own_gpu = device_count > 0 && !place.gpu_error && std::count_if(all.begin(), all.end(), same) == 1;
  return place;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(Backend& cpu, int rank) {
  const Path wanted = path_from_env();
  const int gpus = cuda::device_count();
  const NodePlace place = node_place(gpus);
  // Every rank must take the same path: [sees a GPU, has one of its own, setting, -setting, the first rank
  // with a bad setting] reduced with MIN.
  Tensor agreed = tensor(std::vector<int64_t>{gpus > 0 && !place.gpu_error, place.own_gpu, static_cast<int64_t>(wanted),
                                              -static_cast<int64_t>(wanted),
                                              wanted == Path::kBad ? rank : std::numeric_limits<int64_t>::max()});
  cpu.all_reduce(agreed, ReduceOp::MIN, false);
  if (place.gpu_error) std::rethrow_exception(place.gpu_error);  // the other ranks go on without CUDA
  const int64_t* all = agreed.data_ptr<int64_t>();
  STRATA_CHECK(all[4] == std::numeric_limits<int64_t>::max(),
               "init: STRATA_CUDA_BACKEND must be auto, nccl or mpi on every rank, but rank ", all[4], " has '",
               wanted == Path::kBad && all[4] == rank ? std::getenv("STRATA_CUDA_BACKEND") : "another value", "'");
  STRATA_CHECK(all[2] == -all[3], "init: STRATA_CUDA_BACKEND differs between ranks; give every rank the same value");
  const int device = gpus > 0 ? place.local_rank % gpus : -1;
  if (gpus > 0) cuda::set_device(device);
  if (!all[0]) {
    STRATA_CHECK(wanted != Path::kNccl, "init: STRATA_CUDA_BACKEND=nccl but a rank sees no GPU (this rank sees ", gpus,
                 ")");
    return nullptr;
  }
  if (wanted == Path::kMpi || (wanted == Path::kAuto && !all[1])) {
    return make_staged_backend(cpu.split(rank), kCUDA, rank);
  }
  STRATA_CHECK(all[1],
               "init: STRATA_CUDA_BACKEND=nccl needs a GPU of its own for every rank (NCCL refuses two ranks "
               "on one GPU), but ranks of a node share a GPU (this node: ",
               place.local_size, " ranks, ", gpus,
               " visible GPUs); leave it unset to move CUDA tensors through MPI with host staging");
  return std::make_unique<nccl::NcclBackend>(nccl::make_comms(cpu.split(rank), rank, device), device);
}

}  // namespace strata::distributed::detail
