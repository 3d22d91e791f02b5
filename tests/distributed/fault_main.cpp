// strata_dist_fault MODE: a job in which one rank fails while the others communicate, for
// fault.cmake to check that the job ends non-zero, with the cause, in bounded time.
//   kill     rank 1 dies by SIGKILL while the others are in all_reduce
//   throw    rank 1 throws an uncaught strata::Error while the others are in all_reduce
//   timeout  rank 1 sleeps outside communication while the others are in all_reduce
//            (run with a short STRATA_COMM_TIMEOUT_S)
//   p2p      rank 0 waits in recv from rank 1, which sleeps
//   diverge  rank 1 calls broadcast where the others call all_reduce (run with a short STRATA_COMM_TIMEOUT_S)
//   backend  rank 1 alone has a bad STRATA_CUDA_BACKEND (CUDA builds): init must fail on every rank
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

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "throw" && mode != "timeout" && mode != "p2p" && mode != "diverge" &&
      mode != "backend") {
    std::fprintf(stderr, "usage: %s kill|throw|timeout|p2p|diverge|backend\n", argv[0]);
    return 2;
  }
  // mpirun tells each process its rank before init() does.
  const char* launch_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mode == "backend" && launch_rank && std::string(launch_rank) == "1") ::setenv("STRATA_CUDA_BACKEND", "ncl", 1);
  dist::init();
  const int rank = dist::get_rank();
  strata::Tensor t = strata::ones({4});
  dist::all_reduce(t);
  // Long enough for the others to be blocked, far shorter than the test's bound.
  const auto late = std::chrono::milliseconds(mode == "kill" || mode == "throw" ? 500 : 30'000);
  if (rank == 1 && mode != "diverge") {
    std::this_thread::sleep_for(late);
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "throw") throw strata::Error("fault test: rank 1 gives up");
  }
  if (mode == "p2p") {
    if (rank == 0) dist::recv(t, 1);
    if (rank == 1) dist::send(t, 0);
  } else if (mode == "diverge" && rank == 1) {
    dist::broadcast(t, 1);
    std::this_thread::sleep_for(late);  // the others wait for an all_reduce that never comes
  } else {
    dist::all_reduce(t);
  }
  dist::finalize();
  return 0;
}
