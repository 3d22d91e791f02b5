// The process runtime: joining and leaving the MPI job, WORLD and subgroups, and the settings
// read from the environment.

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "strata/distributed/detail/cuda_backend.h"
#include "strata/distributed/detail/runtime.h"
#include "strata/distributed/mpi/mpi.h"
#include "strata/tensor/creation.h"

namespace strata::distributed {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
  }
  STRATA_INTERNAL_ASSERT(false);
}

namespace {

class CompletedWork final : public Work {
 public:
  bool is_completed() override { return true; }
  void wait() override {}
};

struct Runtime {
  bool initialized = false;
  bool finalized = false;
  bool owns_mpi = false;  // false when the program initialised MPI itself
  Group world;
  std::mutex groups_mutex;  // the watchdog thread looks groups up
  // By id. The runtime holds every group until destroy_process_group or finalize, as
  // torch.distributed does, so a recorded collective can find its group in backward.
  std::vector<Group> groups;
  DebugLevel debug = DebugLevel::INFO;
  std::chrono::milliseconds timeout{600'000};
  std::terminate_handler previous_terminate = nullptr;
  ThreadChoice threads;
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

std::chrono::milliseconds timeout_from_env() {
  const char* text = std::getenv("STRATA_COMM_TIMEOUT_S");
  if (!text || !*text) return std::chrono::milliseconds(600'000);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  STRATA_CHECK(end && *end == '\0' && seconds > 0,
               "init: STRATA_COMM_TIMEOUT_S must be a positive number of seconds, got '", text, "'");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

DebugLevel debug_from_env() {
  const char* text = std::getenv("STRATA_DISTRIBUTED_DEBUG");
  if (!text || !*text) return DebugLevel::INFO;
  const std::string level = text;
  if (level == "OFF") return DebugLevel::OFF;
  if (level == "INFO") return DebugLevel::INFO;
  STRATA_CHECK(level == "DETAIL", "init: STRATA_DISTRIBUTED_DEBUG must be OFF, INFO or DETAIL, got '", text, "'");
  return DebugLevel::DETAIL;
}

// Note [threads per rank]: OpenMP starts as many threads as the process may use cores, so N ranks on one node
// run N times that many threads, which then mostly wait for each other (four ranks on two cores train ~40x
// slower than with one thread each). Each rank takes its share of the node instead, counted over the ranks
// MPI places on the node (MPI_COMM_TYPE_SHARED), unless the user said otherwise with OMP_NUM_THREADS.
ThreadChoice choose_threads() {
  if (const char* text = std::getenv("OMP_NUM_THREADS"); text && *text)
    return {get_num_threads(), std::string("OMP_NUM_THREADS=") + text};
  MPI_Comm node = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                   "init: finding the ranks on this node");
  int local_size = 1;
  const int code = MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  STRATA_MPI_CHECK(code, "init: counting the ranks on this node");
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  cpu_set_t allowed;
  const int usable = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : cores;
  const int share = std::max(1, cores / local_size);
  std::string reason = std::to_string(cores) + " cores / " + std::to_string(local_size) + " rank" +
                       (local_size > 1 ? "s" : "") + " on this node";
  if (usable < share) reason += ", bound to " + std::to_string(usable) + " CPU" + (usable > 1 ? "s" : "");
  const int threads = std::max(1, std::min(share, usable));
  set_num_threads(threads);
  return {threads, std::move(reason)};
}

// A rank that dies on an exception takes the job down with it and says why, instead of
// leaving the other ranks waiting in their next collective.
[[noreturn]] void terminate_job() {
  std::string what = "unknown exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an active exception";
  }
  abort_job("uncaught exception: " + what);
}

void finalize_at_exit() {
  if (runtime().initialized) finalize();
}

}  // namespace

void abort_job(const std::string& reason) {
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // One write: std::cerr is unbuffered, and mpirun could put its own abort notice between the pieces of several.
  const std::string prefix = "strata: rank " + std::to_string(rank) + ": ";
  std::cerr << (prefix + reason + "\n" + prefix + "aborting the job\n") << std::flush;
  detail::dump_flight_recorder_on_failure(reason);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

std::shared_ptr<Work> completed_work() {
  static const std::shared_ptr<Work> done = std::make_shared<CompletedWork>();
  return done;
}

// ---- ProcessGroup ----

ProcessGroup::ProcessGroup(int64_t id, std::vector<int> ranks, int rank, Backends backends)
    : id_(id), ranks_(std::move(ranks)), rank_(rank), backends_(std::move(backends)) {}

int ProcessGroup::global_rank(int group_rank) const {
  STRATA_CHECK(group_rank >= 0 && group_rank < size(), "get_global_rank: group rank ", group_rank,
               " is out of range for ", describe(), " of size ", size());
  return ranks_[group_rank];
}

int ProcessGroup::group_rank(int global_rank) const {
  for (int i = 0; i < size(); ++i)
    if (ranks_[i] == global_rank) return i;
  return -1;
}

std::string ProcessGroup::describe() const {
  if (id_ == 0) return "WORLD";
  std::ostringstream os;
  os << "group " << id_ << " [";
  for (size_t i = 0; i < ranks_.size(); ++i) os << (i ? ", " : "") << ranks_[i];
  os << "]";
  return os.str();
}

Backend& ProcessGroup::backend(Device device, const char* op) const {
  Backend& b = backend(device.type, op);
  b.check_device(device, op);
  return b;
}

Backend& ProcessGroup::backend(DeviceType type, const char* op) const {
  STRATA_CHECK(!destroyed_, op, ": ", describe(), " was destroyed");
  STRATA_CHECK(is_member(), op, ": this process (global rank ", get_rank(), ") is not a member of ", describe());
  const auto& b = backends_[static_cast<size_t>(type)];
  STRATA_CHECK(b, op, ": ", describe(), " has no backend for ", type == kCPU ? "CPU" : "CUDA", " tensors");
  return *b;
}

void ProcessGroup::destroy() {
  for (auto& b : backends_) b.reset();
  destroyed_ = true;
}

// ---- processes and groups ----

void init() {
  Runtime& rt = runtime();
  if (rt.initialized) return;
  STRATA_CHECK(!rt.finalized, "init: the job was finalized; MPI cannot be initialised twice in one process");
  rt.timeout = timeout_from_env();
  rt.debug = debug_from_env();
  int already = 0;
  STRATA_MPI_CHECK(MPI_Initialized(&already), "MPI_Initialized");
  int provided = 0;
  if (already) {
    STRATA_MPI_CHECK(MPI_Query_thread(&provided), "MPI_Query_thread");
  } else {
    STRATA_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    rt.owns_mpi = true;
  }
  // The watchdog thread talks MPI while the main thread is blocked in a collective.
  STRATA_CHECK(provided == MPI_THREAD_MULTIPLE, "init: MPI provides thread level ", provided,
               " but strata needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
  if (rt.owns_mpi) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  STRATA_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub), "MPI_Comm_get_attr");
  STRATA_CHECK(has_tag_ub && *tag_ub >= detail::kMinTagUpperBound, "init: this MPI allows tags up to ",
               has_tag_ub ? *tag_ub : 0, ", strata needs ", detail::kMinTagUpperBound);

  int rank = 0, size = 0;
  STRATA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  STRATA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  MPI_Comm comm = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  std::vector<int> ranks(size);
  for (int i = 0; i < size; ++i) ranks[i] = i;
  Backends backends;
  backends[static_cast<size_t>(kCPU)] = mpi::make_backend(comm);
  backends[static_cast<size_t>(kCUDA)] = detail::make_cuda_backend(*backends[static_cast<size_t>(kCPU)], rank);
  rt.world = std::make_shared<ProcessGroup>(0, std::move(ranks), rank, std::move(backends));
  rt.threads = choose_threads();
  {
    std::lock_guard lock(rt.groups_mutex);
    rt.groups = {rt.world};
  }
  rt.initialized = true;
  detail::install_flight_recorder(rank, size);
  rt.previous_terminate = std::set_terminate(terminate_job);
  static bool registered = false;
  if (!std::exchange(registered, true)) std::atexit(finalize_at_exit);
  if (size > 1) detail::start_watchdog();
}

bool is_initialized() { return runtime().initialized; }

const ThreadChoice& thread_choice() {
  STRATA_CHECK(runtime().initialized, "thread_choice: distributed::init() has not been called");
  return runtime().threads;
}

void finalize() {
  Runtime& rt = runtime();
  if (!rt.initialized) return;
  if (rt.world->size() > 1) detail::stop_watchdog();
  {
    std::lock_guard lock(rt.groups_mutex);
    for (auto& g : rt.groups)
      if (g) g->destroy();
    rt.groups.clear();
  }
  rt.world.reset();
  rt.initialized = false;
  rt.finalized = true;
  std::set_terminate(rt.previous_terminate);
  if (rt.owns_mpi) MPI_Finalize();
}

const Group& get_world_group() {
  STRATA_CHECK(runtime().initialized, "get_world_group: distributed::init() has not been called");
  return runtime().world;
}

int get_rank(const Group& group) { return (group ? group : get_world_group())->rank(); }

int get_world_size(const Group& group) { return (group ? group : get_world_group())->size(); }

Group new_group(const std::vector<int>& ranks) {
  const Group& world = get_world_group();
  STRATA_CHECK(!ranks.empty(), "new_group: the rank list is empty");
  std::vector<bool> seen(world->size(), false);
  for (int r : ranks) {
    STRATA_CHECK(r >= 0 && r < world->size(), "new_group: rank ", r, " is out of range for a world of size ",
                 world->size());
    STRATA_CHECK(!seen[r], "new_group: rank ", r, " appears twice in the list");
    seen[r] = true;
  }
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == world->rank()) index = static_cast<int>(i);
  Runtime& rt = runtime();
  Backends backends;
  {
    // A collective over WORLD: a rank that never calls it is reported by the watchdog.
    detail::OpRecord record;
    record.op = "new_group";
    record.group = world.get();
    record.seq = world->next_sequence_number();
    // Under DETAIL the rank list is compared as the call's shape: ranks that build different grids (disagree on
    // the tensor-parallel size, say) fail together here instead of talking in mismatched groups.
    record.dtype = kLong;
    record.shape = DimVector(std::vector<int64_t>(ranks.begin(), ranks.end()));
    if (get_debug_level() == DebugLevel::DETAIL) detail::check_collective(record);
    detail::BlockingScope scope(record);
    // Every rank has the same slots (init() agreed on the CUDA one), so every rank splits the same backends.
    for (size_t d = 0; d < backends.size(); ++d) {
      const auto type = static_cast<DeviceType>(d);
      if (world->has_backend(type)) backends[d] = world->backend(type, "new_group").split(index);
    }
  }
  std::lock_guard lock(rt.groups_mutex);
  auto group =
      std::make_shared<ProcessGroup>(static_cast<int64_t>(rt.groups.size()), ranks, index, std::move(backends));
  rt.groups.push_back(group);
  return group;
}

int get_global_rank(const Group& group, int group_rank) {
  return (group ? group : get_world_group())->global_rank(group_rank);
}

int get_group_rank(const Group& group, int global_rank) {
  const ProcessGroup& g = *(group ? group : get_world_group());
  const int r = g.group_rank(global_rank);
  STRATA_CHECK(r >= 0, "get_group_rank: global rank ", global_rank, " is not a member of ", g.describe());
  return r;
}

void destroy_process_group(const Group& group) {
  Runtime& rt = runtime();
  if (!group || group == rt.world) return finalize();
  group->destroy();
  std::lock_guard lock(rt.groups_mutex);
  if (group->id() < static_cast<int64_t>(rt.groups.size())) rt.groups[group->id()].reset();
}

void set_debug_level(DebugLevel level) { runtime().debug = level; }

DebugLevel get_debug_level() { return runtime().debug; }

namespace detail {

ProcessGroup& resolve(const Group& group, const char* op) {
  Runtime& rt = runtime();
  STRATA_CHECK(rt.initialized, op, ": distributed::init() has not been called");
  ProcessGroup& g = group ? *group : *rt.world;
  STRATA_CHECK(!g.is_destroyed(), op, ": ", g.describe(), " was destroyed");
  STRATA_CHECK(g.is_member(), op, ": this process (global rank ", rt.world->rank(), ") is not a member of ",
               g.describe());
  return g;
}

std::shared_ptr<ProcessGroup> find_group(int64_t id) {
  Runtime& rt = runtime();
  std::lock_guard lock(rt.groups_mutex);
  if (id < 0 || id >= static_cast<int64_t>(rt.groups.size())) return nullptr;
  return rt.groups[id];
}

std::chrono::milliseconds comm_timeout() { return runtime().timeout; }

}  // namespace detail

}  // namespace strata::distributed
