// The MPI backend: CPU tensors over an MPI communicator. Sync ops call the blocking MPI
// function (much faster than a non-blocking one plus a wait for small messages); async ops
// post the non-blocking one, a progress thread drives collectives in flight, and MpiWork
// finishes them.

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "strata/distributed/mpi/mpi.h"
#include "strata/distributed/process_group.h"

namespace strata::distributed::mpi {

[[noreturn]] void throw_mpi_error(const char* file, int line, const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  ::strata::detail::throw_error(file, line, what, ": MPI error ", code, ": ", std::string(text, len));
}

MPI_Datatype datatype(ScalarType t) {
  switch (t) {
    case kBool:
      return MPI_C_BOOL;
    case kLong:
      return MPI_INT64_T;
    case kFloat:
      return MPI_FLOAT;
    case kDouble:
      return MPI_DOUBLE;
    case kHalf:
    case kBFloat16:
      return MPI_UINT16_T;  // moved as bits; MPI has no 16-bit float type to reduce
    case kByte:
      return MPI_UINT8_T;
    case kChar:
      return MPI_INT8_T;
    case kShort:
      return MPI_INT16_T;
    case kInt:
      return MPI_INT32_T;
  }
  STRATA_INTERNAL_ASSERT(false);
}

namespace {

// MPI moves Half and BFloat16 as 16-bit integers, which it cannot add as floats.
void check_reducible(ScalarType t, const char* op) {
  STRATA_CHECK(!is_reduced_floating_point(t), op, ": MPI cannot reduce ", t, " tensors; convert them with .to(kFloat) ",
               "first (CUDA tensors on the staged path are converted for you)");
}

// MPI's logical ops are the only reductions defined on MPI_C_BOOL.
MPI_Op reduce_op(ReduceOp op, ScalarType t) {
  if (t == kBool) return (op == ReduceOp::PRODUCT || op == ReduceOp::MIN) ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return MPI_SUM;  // AVG divides afterwards
    case ReduceOp::PRODUCT:
      return MPI_PROD;
    case ReduceOp::MIN:
      return MPI_MIN;
    case ReduceOp::MAX:
      return MPI_MAX;
  }
  STRATA_INTERNAL_ASSERT(false);
}

int count(int64_t n, const char* op) {
  STRATA_CHECK(n <= INT_MAX, op, ": ", n, " elements exceed MPI's count limit of ", INT_MAX, " per message");
  return static_cast<int>(n);
}

int count(const Tensor& t, const char* op) { return count(t.numel(), op); }

void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// What AVG does after MPI's SUM (MPI has no average).
auto divide(const Tensor& t, int n) {
  return [t, n] { t.detach().div_(n); };
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// An async op dropped before it finished: its request and the buffers MPI still uses.
struct Orphan {
  MPI_Request request;
  std::vector<Tensor> keep;
  std::vector<int> counts;
};

// Note [communicator lifetime]: a backend's communicator is shared with its in-flight works, so
// destroy_process_group with an op in flight frees it only after the op. A Work dropped before
// it finished hands its request here instead of blocking in its destructor (an isend nobody
// waits for must not stop the program); the backend reaps finished orphans before each op and
// finishes the rest before freeing the communicator.
struct Comm {
  explicit Comm(MPI_Comm c) : comm(c) {}
  ~Comm() {
    if (mpi_finalized()) return;
    for (Orphan& o : orphans) MPI_Wait(&o.request, MPI_STATUS_IGNORE);
    MPI_Comm_free(&comm);
  }
  void adopt(Orphan o) {
    std::lock_guard lock(mutex);
    orphans.push_back(std::move(o));
    has_orphans.store(true, std::memory_order_relaxed);
  }
  void reap() {
    if (!has_orphans.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(mutex);
    std::erase_if(orphans, [](Orphan& o) {
      int done = 0;
      MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    has_orphans.store(!orphans.empty(), std::memory_order_relaxed);
  }

  MPI_Comm comm;
  std::mutex mutex;
  std::vector<Orphan> orphans;
  std::atomic<bool> has_orphans{false};
};

// The request of one async op, the tensors and arrays it uses (kept alive until the end), and
// what to do once it completes (AVG's division, a receive's size check). Its owner and the
// progress thread (Note [progress thread]) may both test it, one at a time (mutex_).
// Note [one request, MPI_Wait]: Open MPI 4.1 under MPI_THREAD_MULTIPLE can hang in MPI_Waitall
// on a request that already completed in error (a truncated receive progressed by another
// wait); MPI_Wait and MPI_Test do not, so every op is one request.
class MpiWork final : public Work {
 public:
  MpiWork(const char* op, std::shared_ptr<Comm> comm, std::vector<Tensor> keep, bool point_to_point)
      : op_(op), comm_(std::move(comm)), keep_(std::move(keep)), point_to_point_(point_to_point) {}

  ~MpiWork() override {
    if (done_ || mpi_finalized()) return;
    // A receive nobody waits for (what a failed monitored_barrier leaves) can be cancelled; the
    // rest finishes in the background (Note [communicator lifetime]).
    if (point_to_point_) MPI_Cancel(&request);
    comm_->adopt({request, std::move(keep_), std::move(counts)});
  }

  bool is_completed() override {
    std::lock_guard lock(mutex_);
    return test();
  }

  void wait() override {
    std::lock_guard lock(mutex_);
    if (!done_) complete(MPI_Wait(&request, &status_));
    if (error_) std::rethrow_exception(error_);
  }

  /// The progress thread's test: true once the op finished. False without testing while the owner tests or
  /// waits (its MPI call drives the op meanwhile).
  bool poll() {
    std::unique_lock lock(mutex_, std::try_to_lock);
    return lock.owns_lock() && test();
  }

  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts;                             // arrays MPI reads until completion
  std::function<void(const MPI_Status&)> on_complete;  // gets the status

 private:
  void complete(int code) {
    done_ = true;
    try {
      STRATA_MPI_CHECK(code, op_);
      if (on_complete) on_complete(status_);
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  bool test() {
    if (done_) return true;
    int flag = 0;
    const int code = MPI_Test(&request, &flag, &status_);
    if (code != MPI_SUCCESS || flag) complete(code);
    return done_;
  }

  const char* op_;
  std::shared_ptr<Comm> comm_;
  std::vector<Tensor> keep_;
  bool point_to_point_;
  std::mutex mutex_;
  MPI_Status status_{};
  bool done_ = false;
  std::exception_ptr error_;
};

// Note [progress thread]: Open MPI moves a non-blocking op on only inside MPI calls, so an
// all_reduce started early (data parallel starts one per bucket during backward, which makes no
// MPI call) would mostly wait for its wait(), and a pipeline stage's activation would sit in the
// sender's memory until both stages next call MPI (a message beyond the eager limit goes in
// fragments, each side moving them in its own calls). While async ops are in flight, collectives
// and point-to-point alike, this thread tests the oldest one every kPollInterval (any MPI_Test
// drives all of them; the job runs under MPI_THREAD_MULTIPLE), so transfers proceed while the
// caller computes; c10d's ProcessGroupMPI likewise runs its own loop. It holds works weakly: a Work
// its owner dropped leaves the list (the communicator finishes it, Note [communicator lifetime]).
// A receive posted long before its message (Note [early receives] in pipe/stage.cpp) keeps the
// thread testing it meanwhile, once per interval.
// 100 us: as short a final wait as 20 us in benchmarks/bench_ddp.cpp, with a fifth of the wake-ups.
class Progress {
 public:
  static constexpr std::chrono::microseconds kPollInterval{100};

  ~Progress() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// Tests `work` in the background until it completes or is dropped.
  void add(const std::shared_ptr<MpiWork>& work) {
    {
      std::lock_guard lock(mutex_);
      works_.push_back(work);
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    changed_.notify_all();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return stop_ || !works_.empty(); });
      if (stop_) return;
      std::shared_ptr<MpiWork> oldest = works_.front().lock();
      if (!oldest) {
        works_.pop_front();
        continue;
      }
      lock.unlock();
      const bool done = mpi_finalized() || oldest->poll();
      oldest.reset();  // a dropped Work is destroyed here, outside the lock
      lock.lock();
      if (done)
        works_.pop_front();
      else
        changed_.wait_for(lock, kPollInterval);
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::weak_ptr<MpiWork>> works_;  // in flight, oldest first; only the thread removes
  bool stop_ = false;
  std::thread thread_;
};

Progress& progress() {
  static Progress p;
  return p;
}

void check_received(const MPI_Status& status, const Tensor& t, int src) {
  int got = 0;
  MPI_Get_count(&status, mpi::datatype(t.dtype()), &got);
  STRATA_CHECK(got == t.numel(), "recv: expected ", t.numel(), " elements of ", t.dtype(), " from group rank ", src,
               " but the message holds ", got);
}

// The `finish` of an op whose result needs no work once MPI completes it.
constexpr auto kNothingToFinish = [] {};

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(MPI_Comm comm) : shared_(std::make_shared<Comm>(comm)), comm_(comm) {
    STRATA_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    STRATA_MPI_CHECK(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  const char* name() const override { return "mpi"; }
  DeviceType device_type() const override { return kCPU; }
  bool receives_post_ahead() const override { return true; }  // matched by source and tag, in posting order

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, bool async_op) override {
    check_reducible(t.dtype(), "all_reduce");
    auto call = [&](MPI_Request* r) {
      const int n = count(t, "all_reduce");
      const MPI_Datatype dt = datatype(t.dtype());
      const MPI_Op mop = reduce_op(op, t.dtype());
      return r ? MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), n, dt, mop, comm_, r)
               : MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), n, dt, mop, comm_);
    };
    if (op != ReduceOp::AVG) return run("all_reduce", async_op, false, call, kNothingToFinish, t);
    return run("all_reduce", async_op, false, call, divide(t, size_), t);
  }

  std::shared_ptr<Work> reduce(const Tensor& t, int root, ReduceOp op, bool async_op) override {
    check_reducible(t.dtype(), "reduce");
    const bool is_root = rank() == root;
    auto call = [&](MPI_Request* r) {
      const int n = count(t, "reduce");
      const MPI_Datatype dt = datatype(t.dtype());
      const MPI_Op mop = reduce_op(op, t.dtype());
      const void* send = is_root ? MPI_IN_PLACE : t.data_ptr();
      return r ? MPI_Ireduce(send, t.data_ptr(), n, dt, mop, root, comm_, r)
               : MPI_Reduce(send, t.data_ptr(), n, dt, mop, root, comm_);
    };
    if (op != ReduceOp::AVG || !is_root) return run("reduce", async_op, false, call, kNothingToFinish, t);
    return run("reduce", async_op, false, call, divide(t, size_), t);
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root, bool async_op) override {
    return run(
        "broadcast", async_op, false,
        [&](MPI_Request* r) {
          const int n = count(t, "broadcast");
          const MPI_Datatype dt = datatype(t.dtype());
          return r ? MPI_Ibcast(t.data_ptr(), n, dt, root, comm_, r) : MPI_Bcast(t.data_ptr(), n, dt, root, comm_);
        },
        kNothingToFinish, t);
  }

  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, bool async_op) override {
    return run(
        "all_gather", async_op, false,
        [&](MPI_Request* r) {
          const int n = count(in, "all_gather");
          const MPI_Datatype dt = datatype(in.dtype());
          return r ? MPI_Iallgather(in.data_ptr(), n, dt, out.data_ptr(), n, dt, comm_, r)
                   : MPI_Allgather(in.data_ptr(), n, dt, out.data_ptr(), n, dt, comm_);
        },
        kNothingToFinish, out, in);
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, bool async_op) override {
    check_reducible(in.dtype(), "reduce_scatter");
    auto call = [&](MPI_Request* r) {
      const int n = count(out, "reduce_scatter");
      const MPI_Datatype dt = datatype(in.dtype());
      const MPI_Op mop = reduce_op(op, in.dtype());
      return r ? MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), n, dt, mop, comm_, r)
               : MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), n, dt, mop, comm_);
    };
    if (op != ReduceOp::AVG) return run("reduce_scatter", async_op, false, call, kNothingToFinish, out, in);
    return run("reduce_scatter", async_op, false, call, divide(out, size_), out, in);
  }

  std::shared_ptr<Work> gather(const Tensor& out, const Tensor& in, int root, bool async_op) override {
    return run(
        "gather", async_op, false,
        [&](MPI_Request* r) {
          const int n = count(in, "gather");
          const MPI_Datatype dt = datatype(in.dtype());
          return r ? MPI_Igather(in.data_ptr(), n, dt, ptr(out), n, dt, root, comm_, r)
                   : MPI_Gather(in.data_ptr(), n, dt, ptr(out), n, dt, root, comm_);
        },
        kNothingToFinish, out, in);
  }

  std::shared_ptr<Work> scatter(const Tensor& out, const Tensor& in, int root, bool async_op) override {
    return run(
        "scatter", async_op, false,
        [&](MPI_Request* r) {
          const int n = count(out, "scatter");
          const MPI_Datatype dt = datatype(out.dtype());
          return r ? MPI_Iscatter(ptr(in), n, dt, out.data_ptr(), n, dt, root, comm_, r)
                   : MPI_Scatter(ptr(in), n, dt, out.data_ptr(), n, dt, root, comm_);
        },
        kNothingToFinish, out, in);
  }

  std::shared_ptr<Work> all_to_all(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_counts,
                                   const std::vector<int64_t>& in_counts, bool async_op) override {
    // counts and displacements of both sides, in one array that outlives an async op
    std::vector<int> arrays(4 * size_);
    int* send_counts = arrays.data();
    int* send_displs = send_counts + size_;
    int* recv_counts = send_displs + size_;
    int* recv_displs = recv_counts + size_;
    int64_t send_at = 0, recv_at = 0;
    for (int p = 0; p < size_; ++p) {
      send_counts[p] = count(in_counts[p], "all_to_all");
      recv_counts[p] = count(out_counts[p], "all_to_all");
      send_displs[p] = count(send_at, "all_to_all");
      recv_displs[p] = count(recv_at, "all_to_all");
      send_at += in_counts[p];
      recv_at += out_counts[p];
    }
    const MPI_Datatype dt = datatype(in.dtype());
    if (!async_op) {
      STRATA_MPI_CHECK(MPI_Alltoallv(in.data_ptr(), send_counts, send_displs, dt, out.data_ptr(), recv_counts,
                                     recv_displs, dt, comm_),
                       "all_to_all");
      return completed_work();
    }
    shared_->reap();
    auto work = std::make_shared<MpiWork>("all_to_all", shared_, std::vector<Tensor>{out, in}, false);
    work->counts = std::move(arrays);
    int* c = work->counts.data();
    STRATA_MPI_CHECK(MPI_Ialltoallv(in.data_ptr(), c, c + size_, dt, out.data_ptr(), c + 2 * size_, c + 3 * size_, dt,
                                    comm_, &work->request),
                     "all_to_all");
    progress().add(work);
    return work;
  }

  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag, bool async_op) override {
    return run(
        "send", async_op, true,
        [&](MPI_Request* r) {
          const int n = count(t, "send");
          const MPI_Datatype dt = datatype(t.dtype());
          return r ? MPI_Isend(t.data_ptr(), n, dt, dst, tag, comm_, r)
                   : MPI_Send(t.data_ptr(), n, dt, dst, tag, comm_);
        },
        kNothingToFinish, t);
  }

  std::shared_ptr<Work> recv(const Tensor& t, int src, int tag, bool async_op) override {
    const int n = count(t, "recv");
    const MPI_Datatype dt = datatype(t.dtype());
    if (!async_op) {
      MPI_Status status;
      STRATA_MPI_CHECK(MPI_Recv(t.data_ptr(), n, dt, src, tag, comm_, &status), "recv");
      check_received(status, t, src);
      return completed_work();
    }
    shared_->reap();
    auto work = std::make_shared<MpiWork>("recv", shared_, std::vector<Tensor>{t}, true);
    work->on_complete = [t, src](const MPI_Status& status) { check_received(status, t, src); };
    STRATA_MPI_CHECK(MPI_Irecv(t.data_ptr(), n, dt, src, tag, comm_, &work->request), "recv");
    return work;
  }

  std::shared_ptr<Work> barrier(bool async_op) override {
    return run(
        "barrier", async_op, false, [&](MPI_Request* r) { return r ? MPI_Ibarrier(comm_, r) : MPI_Barrier(comm_); },
        kNothingToFinish);
  }

  std::unique_ptr<Backend> split(int index) override {
    MPI_Comm sub = MPI_COMM_NULL;
    STRATA_MPI_CHECK(MPI_Comm_split(comm_, index >= 0 ? 0 : MPI_UNDEFINED, index, &sub), "new_group");
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiBackend>(sub);
  }

 private:
  int rank() const {
    int r = 0;
    MPI_Comm_rank(comm_, &r);
    return r;
  }

  // Sync: calls `call(nullptr)` (the blocking MPI function) and `finish`. Async: calls it with a
  // request to fill and returns the MpiWork that runs `finish` on completion.
  // The sync path allocates nothing: it is what small messages pay for on every call.
  template <class Call, class Finish, class... Keep>
  std::shared_ptr<Work> run(const char* op, bool async_op, bool point_to_point, Call&& call, Finish&& finish,
                            const Keep&... keep) {
    if (!async_op) {
      STRATA_MPI_CHECK(call(nullptr), op);
      finish();
      return completed_work();
    }
    shared_->reap();
    auto work = std::make_shared<MpiWork>(op, shared_, std::vector<Tensor>{keep...}, point_to_point);
    work->on_complete = [finish = std::forward<Finish>(finish)](const MPI_Status&) { finish(); };
    STRATA_MPI_CHECK(call(&work->request), op);
    progress().add(work);
    return work;
  }

  std::shared_ptr<Comm> shared_;  // with the works in flight (Note [communicator lifetime])
  MPI_Comm comm_;                 // shared_->comm, read on every call
  int size_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_backend(MPI_Comm comm) { return std::make_unique<MpiBackend>(comm); }

}  // namespace strata::distributed::mpi
