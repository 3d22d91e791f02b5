// The flight recorder (flight_recorder.h): a ring of this rank's last calls, written as JSON on request and,
// with STRATA_FLIGHT_RECORDER_DIR set, when the job fails.
//
// Note [flight recorder]: run() (detail/front_end.h) records each call as posted before the backend sees it
// and as completed or failed when it finishes, under one mutex: a few stores per call. Times are the system
// clock's, so the files of ranks on one host line up. The recorder is never destroyed: a failing rank may
// dump it from a signal handler or the terminate handler after static destructors have begun. Dumping from a
// signal handler is not async-signal-safe (it formats and allocates); it is the last thing a dying process
// does, and the lock is only tried, so a signal that interrupted a recording thread cannot deadlock it.

#include "strata/distributed/flight_recorder.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "strata/distributed/collectives.h"
#include "strata/distributed/detail/runtime.h"

namespace strata::distributed {

namespace detail {
namespace {

constexpr size_t kLabelBytes = 96;
constexpr size_t kOpBytes = 32;
constexpr size_t kDefaultSize = 1024;

enum class State : uint8_t { kPosted, kCompleted, kFailed };

struct Entry {
  uint64_t id = 0;  // 1, 2, ... in call order; 0 marks an empty slot
  int64_t group = -1;
  uint64_t seq = 0;
  char op[kOpBytes] = {};
  ScalarType dtype = kFloat;
  DimVector shape;
  int root = kNoRank, peer = kNoRank, tag = 0;  // global ranks
  int reduce_op = -1;                           // a ReduceOp, -1 for none
  State state = State::kPosted;
  int64_t start_ns = 0, end_ns = 0;
  char label[kLabelBytes] = {};
};

struct GroupInfo {
  int64_t id;
  std::string name;
  std::vector<int> ranks;
};

size_t size_from_env() {
  const char* text = std::getenv("STRATA_FLIGHT_RECORDER_SIZE");
  if (!text || !*text) return kDefaultSize;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(text, &end, 10);
  STRATA_CHECK(end && *end == '\0' && errno == 0 && text[0] != '-' && n <= (1u << 24),
               "STRATA_FLIGHT_RECORDER_SIZE must be a number of calls from 0 to 16777216, got '", text, "'");
  return static_cast<size_t>(n);
}

struct Recorder {
  std::mutex mutex;
  std::vector<Entry> ring;  // call id i is in slot (i - 1) % ring.size()
  uint64_t next = 1;
  std::vector<GroupInfo> groups;  // every group a recorded call used
  int rank = -1, world_size = 0;  // set by install_flight_recorder
  std::string dir;                // STRATA_FLIGHT_RECORDER_DIR, empty when unset
  std::atomic<bool> dumped{false};
};

Recorder& recorder() {
  static Recorder* r = [] {
    auto* made = new Recorder;  // Note [flight recorder]: never destroyed
    made->ring.resize(size_from_env());
    return made;
  }();
  return *r;
}

thread_local std::string current_label;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// s as a JSON string literal.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + '"';
}

const char* state_name(State s) {
  return s == State::kPosted ? "posted" : s == State::kCompleted ? "completed" : "failed";
}

std::string to_json(Recorder& rec, const std::string& reason) {
  std::string out = "{\"format\": \"strata-flight-1\", \"rank\": " + std::to_string(rec.rank) +
                    ", \"world_size\": " + std::to_string(rec.world_size);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  out += ", \"host\": " + quoted(host) + ", \"pid\": " + std::to_string(::getpid()) +
         ", \"reason\": " + quoted(reason) + ", \"dumped_ns\": " + std::to_string(now_ns()) +
         ", \"size\": " + std::to_string(rec.ring.size()) + ",\n\"groups\": [";
  for (size_t i = 0; i < rec.groups.size(); ++i) {
    const GroupInfo& g = rec.groups[i];
    out += std::string(i ? ",\n  " : "\n  ") + "{\"id\": " + std::to_string(g.id) + ", \"name\": " + quoted(g.name) +
           ", \"ranks\": [";
    for (size_t r = 0; r < g.ranks.size(); ++r) out += (r ? ", " : "") + std::to_string(g.ranks[r]);
    out += "]}";
  }
  out += "],\n\"calls\": [";
  const uint64_t first = rec.next > rec.ring.size() ? rec.next - rec.ring.size() : 1;
  for (uint64_t id = first; id < rec.next; ++id) {
    const Entry& e = rec.ring[(id - 1) % rec.ring.size()];
    out += std::string(id > first ? ",\n  " : "\n  ") + "{\"id\": " + std::to_string(e.id) +
           ", \"group\": " + std::to_string(e.group) + ", \"seq\": " + std::to_string(e.seq) +
           ", \"op\": " + quoted(e.op) + ", \"dtype\": " + quoted(str(e.dtype)) + ", \"shape\": [";
    for (size_t d = 0; d < e.shape.size(); ++d) out += (d ? ", " : "") + std::to_string(e.shape[d]);
    out += "], \"root\": " + std::to_string(e.root) + ", \"peer\": " + std::to_string(e.peer) +
           ", \"tag\": " + std::to_string(e.tag) + ", \"reduce_op\": " +
           (e.reduce_op < 0 ? std::string("null") : quoted(to_string(static_cast<ReduceOp>(e.reduce_op)))) +
           ", \"state\": " + quoted(state_name(e.state)) + ", \"start_ns\": " + std::to_string(e.start_ns) +
           ", \"end_ns\": " + std::to_string(e.end_ns) + ", \"label\": " + quoted(e.label) + "}";
  }
  return out + "]}\n";
}

void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  STRATA_CHECK(f, "dump_flight_recorder: cannot open '", path, "': ", std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  STRATA_CHECK(written && closed, "dump_flight_recorder: could not write '", path, "'");
}

// The JSON text, with the lock if it can be had within 100 ms (Note [flight recorder]).
std::string snapshot(const std::string& reason) {
  Recorder& rec = recorder();
  std::unique_lock lock(rec.mutex, std::defer_lock);
  for (int i = 0; i < 100 && !lock.try_lock(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return to_json(rec, reason);
}

void on_fatal_signal(int sig) {
  dump_flight_recorder_on_failure("signal " + std::to_string(sig) + " (" + strsignal(sig) + ")");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

uint64_t flight_posted(const OpRecord& r) {
  Recorder& rec = recorder();
  if (rec.ring.empty()) return 0;
  const ProcessGroup& g = *r.group;
  const int64_t now = now_ns();
  std::lock_guard lock(rec.mutex);
  const uint64_t id = rec.next++;
  Entry& e = rec.ring[(id - 1) % rec.ring.size()];
  e.id = id;
  e.group = g.id();
  e.seq = r.seq;
  std::strncpy(e.op, r.op, kOpBytes - 1);
  e.dtype = r.dtype;
  e.shape = r.shape;
  e.root = r.root == kNoRank ? kNoRank : g.global_rank(r.root);
  e.peer = r.peer == kNoRank ? kNoRank : g.global_rank(r.peer);
  e.tag = r.tag;
  e.reduce_op = r.reduce_op ? static_cast<int>(*r.reduce_op) : -1;
  e.state = State::kPosted;
  e.start_ns = now;
  e.end_ns = 0;
  const size_t n = std::min(current_label.size(), kLabelBytes - 1);
  std::memcpy(e.label, current_label.data(), n);
  e.label[n] = '\0';
  if (std::none_of(rec.groups.begin(), rec.groups.end(), [&](const GroupInfo& x) { return x.id == g.id(); }))
    rec.groups.push_back({g.id(), g.describe(), g.ranks()});
  return id;
}

void flight_done(uint64_t id, bool ok) {
  if (id == 0) return;
  Recorder& rec = recorder();
  const int64_t now = now_ns();
  std::lock_guard lock(rec.mutex);
  Entry& e = rec.ring[(id - 1) % rec.ring.size()];
  if (e.id != id) return;  // already overwritten by newer calls
  e.state = ok ? State::kCompleted : State::kFailed;
  e.end_ns = now;
}

void install_flight_recorder(int rank, int world_size) {
  Recorder& rec = recorder();
  rec.rank = rank;
  rec.world_size = world_size;
  const char* dir = std::getenv("STRATA_FLIGHT_RECORDER_DIR");
  rec.dir = dir ? dir : "";
  if (rec.dir.empty()) return;
  for (int sig : {SIGTERM, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, on_fatal_signal);
}

void dump_flight_recorder_on_failure(const std::string& reason) noexcept {
  Recorder& rec = recorder();
  if (rec.dir.empty() || rec.dumped.exchange(true)) return;  // the first failure tells the story
  try {
    write_file(rec.dir + "/rank" + std::to_string(rec.rank) + ".json", snapshot(reason));
  } catch (...) {  // a dying rank has nobody to tell
  }
}

}  // namespace detail

FlightContext::FlightContext(const std::string& label) : outer_(std::exchange(detail::current_label, label)) {}

FlightContext::~FlightContext() { detail::current_label = std::move(outer_); }

void dump_flight_recorder(const std::string& path, const std::string& reason) {
  detail::write_file(path, detail::snapshot(reason));
}

}  // namespace strata::distributed
