// strata_dist_fault MODE: a job in which one rank fails while the others communicate, for
// fault.cmake to check that the job ends non-zero, with the cause, in bounded time.
//   kill     rank 1 dies by SIGKILL while the others are in all_reduce
//   throw    rank 1 throws an uncaught strata::Error while the others are in all_reduce
//   abort    rank 1 calls c10d's ProcessGroupMPI::abort() while the others are in all_reduce
//   timeout  rank 1 sleeps outside communication while the others are in all_reduce
//            (run with a short STRATA_COMM_TIMEOUT_S)
//   p2p      rank 0 waits in recv from rank 1, which sleeps
//   diverge  rank 1 calls broadcast where the others call all_reduce (run with a short STRATA_COMM_TIMEOUT_S)
//   backend  rank 1 alone has a bad STRATA_CUDA_BACKEND (CUDA builds): init must fail on every rank
//   device   as timeout, but the others' all_reduce returns at once and runs "on the device", as NCCL's
//            does: the watchdog must see it still running (Note [device ops]; run with a short timeout)
// Every mode first completes one all_reduce, so the stuck one is the group's call #2.
// If the job survives, every rank finishes the stuck op late and the job exits 0: the test fails.

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>

#include <strata/distributed/collectives.h>
#include <strata/strata.h>

namespace dist = strata::distributed;

namespace {

// All_reduce as NCCL's behaves for the host: it returns at once, and its Work completes on the "device" (here
// MPI's async op) once every rank took part. Nothing else is needed here.
class DeviceLike final : public dist::Backend {
 public:
  using Op = std::shared_ptr<dist::Work>;
  explicit DeviceLike(std::unique_ptr<dist::Backend> mpi) : mpi_(std::move(mpi)) {}
  const char* name() const override { return "device-like"; }
  strata::DeviceType device_type() const override { return strata::kCPU; }
  Op all_reduce(const strata::Tensor& t, dist::ReduceOp op, bool) override {
    return std::make_shared<Running>(mpi_->all_reduce(t, op, true));
  }
  Op reduce(const strata::Tensor&, int, dist::ReduceOp, bool) override { return unused(); }
  Op broadcast(const strata::Tensor&, int, bool) override { return unused(); }
  Op all_gather(const strata::Tensor&, const strata::Tensor&, bool) override { return unused(); }
  Op reduce_scatter(const strata::Tensor&, const strata::Tensor&, dist::ReduceOp, bool) override { return unused(); }
  Op gather(const strata::Tensor&, const strata::Tensor&, int, bool) override { return unused(); }
  Op scatter(const strata::Tensor&, const strata::Tensor&, int, bool) override { return unused(); }
  Op all_to_all(const strata::Tensor&, const strata::Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                bool) override {
    return unused();
  }
  Op send(const strata::Tensor&, int, int, bool) override { return unused(); }
  Op recv(const strata::Tensor&, int, int, bool) override { return unused(); }
  Op barrier(bool) override { return unused(); }
  std::unique_ptr<dist::Backend> split(int) override { return nullptr; }

 private:
  struct Running final : dist::Work {
    explicit Running(Op inner) : inner(std::move(inner)) {}
    bool is_completed() override { return inner->is_completed(); }  // MPI's Work allows any thread
    void wait() override {}                                         // the host does not wait
    bool completes_on_device() const override { return true; }
    Op inner;
  };
  static Op unused() { throw strata::Error("fault test: only all_reduce runs on the device-like backend"); }
  std::unique_ptr<dist::Backend> mpi_;
};

// WORLD's ranks with a DeviceLike backend for CPU tensors; its id is WORLD's, so the watchdog names it WORLD,
// and its calls are numbered on from WORLD's.
dist::Group device_like_world() {
  const dist::Group& world = dist::get_world_group();
  dist::Backends backends;
  backends[0] = std::make_unique<DeviceLike>(world->backend(strata::kCPU, "fault test").split(world->rank()));
  auto group = std::make_shared<dist::ProcessGroup>(0, world->ranks(), world->rank(), std::move(backends));
  while (group->sequence_number() < world->sequence_number()) group->next_sequence_number();
  return group;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "throw" && mode != "abort" && mode != "timeout" && mode != "p2p" && mode != "diverge" &&
      mode != "backend" && mode != "device") {
    std::fprintf(stderr, "usage: %s kill|throw|abort|timeout|p2p|diverge|backend|device\n", argv[0]);
    return 2;
  }
  // mpirun tells each process its rank before init() does.
  const char* launch_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mode == "backend" && launch_rank && std::string(launch_rank) == "1") ::setenv("STRATA_CUDA_BACKEND", "ncl", 1);
  dist::init();
  const int rank = dist::get_rank();
  strata::Tensor t = strata::ones({4});
  dist::all_reduce(t);
  const dist::Group device_like = mode == "device" ? device_like_world() : nullptr;
  // Long enough for the others to be blocked, far shorter than the test's bound.
  const auto late = std::chrono::milliseconds(mode == "kill" || mode == "throw" || mode == "abort" ? 500 : 30'000);
  if (rank == 1 && mode != "diverge") {
    std::this_thread::sleep_for(late);
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "throw") throw strata::Error("fault test: rank 1 gives up");
    if (mode == "abort") strata::c10d::ProcessGroupMPI(dist::get_world_group()).abort();
  }
  if (mode == "p2p") {
    if (rank == 0) dist::recv(t, 1);
    if (rank == 1) dist::send(t, 0);
  } else if (mode == "diverge" && rank == 1) {
    dist::broadcast(t, 1);
    std::this_thread::sleep_for(late);  // the others wait for an all_reduce that never comes
  } else if (mode == "device") {
    dist::all_reduce(t, dist::ReduceOp::SUM, device_like);
    std::this_thread::sleep_for(late);  // the host goes on with other work meanwhile
  } else {
    dist::all_reduce(t);
  }
  dist::finalize();
  return 0;
}
