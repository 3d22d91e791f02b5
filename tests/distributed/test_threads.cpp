// The CPU thread count init() gives each rank (Note [threads per rank] in distributed/runtime.cpp): OMP_NUM_THREADS
// when the user set it, else the rank's share of its node's cores. CTest runs this suite once more with
// OMP_NUM_THREADS unset and once with it set (tests/CMakeLists.txt), whatever the environment of the other runs.

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include <strata/distributed/collectives.h>

#include "../helpers.h"

namespace dist = strata::distributed;
using namespace strata;

TEST(Threads, InitGivesEachRankItsShare) {
  const dist::ThreadChoice& choice = dist::thread_choice();
  EXPECT_EQ(get_num_threads(), choice.threads);
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) {
    EXPECT_EQ(choice.reason, std::string("OMP_NUM_THREADS=") + omp);
    EXPECT_EQ(choice.threads, std::atoi(omp));  // the user's setting wins
    return;
  }
  // Open MPI's launcher says how many ranks share the node; a world of one without mpirun is alone.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int local_size = local ? std::atoi(local) : 1;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  EXPECT_EQ(choice.threads, std::max(1, std::min(cores / local_size, CPU_COUNT(&allowed))));
  EXPECT_NE(choice.reason.find(std::to_string(cores) + " cores / " + std::to_string(local_size) + " rank"),
            std::string::npos)
      << choice.reason;
}
