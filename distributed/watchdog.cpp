// The watchdog: a thread per process that ends the job when a collective or p2p op stays blocked
// longer than STRATA_COMM_TIMEOUT_S. Before it does, it asks the other ranks of the group what
// they are doing, so the message names the ranks that never arrived and where they are instead.
// The same thread answers those questions for the other ranks' watchdogs.
//
// Note [watchdog protocol]: the watchdogs talk on their own duplicate of MPI_COMM_WORLD, so their
// messages never meet the user's. Each keeps one receive posted for a Query (the id of the group
// the asker is blocked on) and answers with an Answer: the op it is blocked in (with its peer, if
// point to point), or that it is not in communication and the number of its last call on that group.
// A rank that answers with the asker's op and sequence number has arrived; the others are named with
// their answer, or as not answering at all (Note [waiting on a waiter] asks one hop further).

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "strata/distributed/detail/runtime.h"
#include "strata/distributed/mpi/mpi.h"

namespace strata::distributed::detail {

namespace {

constexpr size_t kOpChars = 32;
constexpr std::chrono::milliseconds kPollPeriod{20};
constexpr std::chrono::seconds kAnswerWindow{3};
constexpr int kTagQuery = 1;
constexpr int kTagAnswer = 2;

// Note [blocked-op slots]: every thread that communicates owns a ThreadSlots, a small stack of
// the ops it is blocked in, written only by that thread and read by the watchdog through a
// sequence lock. Opening or closing a BlockingScope is then a few plain stores: no lock and no
// clock read (a clock read alone costs more than the rest). The watchdog times the ops itself,
// from the poll that first sees one open, so a timeout fires at most one poll period late.
constexpr int kMaxDepth = 4;  // scopes nested deeper go unseen; the outer ones are still timed

struct Slot {
  std::atomic<const char*> op{""};  // a string literal (OpRecord::op)
  std::atomic<int64_t> group{-1};
  std::atomic<uint64_t> seq{0};
  std::atomic<int> peer{kNoRank};
  std::atomic<uint64_t> ordinal{0};  // which scope of its thread this is, so a new op is told from an old one
};

struct ThreadSlots {
  std::atomic<uint64_t> version{0};  // odd while the owner writes
  std::atomic<int> depth{0};
  uint64_t opened = 0;  // the owner's count of scopes, read by no one else
  Slot slots[kMaxDepth];

  // Brackets the owner's writes so that a reader never takes half of them.
  template <class Write>
  void write(Write&& w) {
    const uint64_t v = version.load(std::memory_order_relaxed);
    version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    w();
    version.store(v + 2, std::memory_order_release);
  }
};

struct Threads {
  std::mutex mutex;
  std::vector<std::unique_ptr<ThreadSlots>> all;  // kept until exit, as the watchdog may read them late
};
Threads threads;

ThreadSlots& this_thread_slots() {
  thread_local ThreadSlots* const mine = [] {
    std::lock_guard lock(threads.mutex);
    threads.all.push_back(std::make_unique<ThreadSlots>());
    return threads.all.back().get();
  }();
  return *mine;
}

// One open BlockingScope as the watchdog sees it, or a device op (thread null, ordinal its number).
struct OpenOp {
  const ThreadSlots* thread;
  uint64_t ordinal;
  const char* op;
  int64_t group;
  uint64_t seq;
  int peer;
};

// Note [device ops]: an NCCL op returns before it finishes on the GPU, so a rank that never arrives leaves
// no BlockingScope open on the others: their hosts go on until they next read a result. The front end hands
// such ops to the watchdog (watch_device_op), which polls each one's Work and counts the op as open from its
// post until it completes: the timeout, the questions and the answers then treat it as a blocked op.
struct DeviceOp {
  OpenOp op;
  Clock::time_point posted;
  std::shared_ptr<Work> work;
};
struct DeviceOps {
  std::atomic<bool> watching{false};  // while the watchdog runs
  std::mutex mutex;
  std::vector<DeviceOp> pending;
  uint64_t posted = 0;
};
DeviceOps device_ops;

// The device ops still running, with their post times; drops the finished ones.
std::vector<DeviceOp> running_device_ops() {
  std::vector<DeviceOp> running;
  std::lock_guard lock(device_ops.mutex);
  std::erase_if(device_ops.pending, [](const DeviceOp& d) { return d.work->is_completed(); });
  for (const DeviceOp& d : device_ops.pending) running.push_back({d.op, d.posted, nullptr});
  return running;
}

// The open ops of every thread, outermost first.
std::vector<OpenOp> open_ops() {
  std::vector<OpenOp> out;
  std::lock_guard lock(threads.mutex);
  for (const auto& t : threads.all) {
    OpenOp read[kMaxDepth];
    int n = 0;
    for (bool consistent = false; !consistent;) {
      const uint64_t v = t->version.load(std::memory_order_acquire);
      n = std::min(t->depth.load(std::memory_order_relaxed), kMaxDepth);
      for (int i = 0; i < n; ++i) {
        const Slot& s = t->slots[i];
        read[i] = {t.get(),
                   s.ordinal.load(std::memory_order_relaxed),
                   s.op.load(std::memory_order_relaxed),
                   s.group.load(std::memory_order_relaxed),
                   s.seq.load(std::memory_order_relaxed),
                   s.peer.load(std::memory_order_relaxed)};
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      consistent = v % 2 == 0 && t->version.load(std::memory_order_relaxed) == v;
    }
    out.insert(out.end(), read, read + n);
  }
  return out;
}

// "all_reduce #4 on WORLD", "recv from rank 1 on group 2 [1, 0]".
std::string describe_op(const OpenOp& o) {
  std::shared_ptr<ProcessGroup> g = find_group(o.group);
  std::ostringstream os;
  os << o.op;
  if (o.peer != kNoRank)
    os << (std::strstr(o.op, "send") ? " to" : " from") << " rank " << (g ? g->ranks()[o.peer] : o.peer);
  else
    os << " #" << o.seq;
  os << " on ";
  if (g)
    os << g->describe();
  else
    os << "group " << o.group;
  if (!o.thread) os << " (running on the device)";
  return os.str();
}

struct Query {
  int64_t group;
};

struct Answer {
  int64_t group = -1;  // the group of the op the rank is blocked in, -1 when it is not blocked
  uint64_t seq = 0;    // that op's sequence number
  int peer = kNoRank;  // the global rank that op sends to or receives from, if it is point to point
  char op[kOpChars] = {};
  char text[224] = {};  // the rank's state as a person reads it
};

// What an overdue op is and whom to ask about it.
struct Overdue {
  std::string op;
  int64_t group_id;
  std::vector<int> asked;  // global ranks whose state decides who is missing
  uint64_t seq;
  bool p2p;
  std::string what;  // "all_reduce #4 on WORLD", "recv from rank 1 on WORLD"
  double seconds;
};

class Watchdog {
 public:
  Watchdog(MPI_Comm comm, std::chrono::milliseconds timeout) : comm_(comm), timeout_(timeout) {
    MPI_Comm_rank(comm_, &rank_);
    thread_ = std::thread([this] { run(); });
  }

  ~Watchdog() {
    {
      std::lock_guard lock(stop_mutex_);
      stop_ = true;
    }
    stop_cv_.notify_one();
    thread_.join();
    MPI_Comm_free(&comm_);
  }

 private:
  void run() {
    post_query_receive();
    std::unique_lock lock(stop_mutex_);
    while (!stop_cv_.wait_for(lock, kPollPeriod, [this] { return stop_; })) {
      lock.unlock();
      refresh();
      serve_queries();
      if (std::optional<Overdue> o = overdue()) end_job(*o);
      lock.lock();
    }
    MPI_Cancel(&query_request_);
    MPI_Wait(&query_request_, MPI_STATUS_IGNORE);
    for (Outgoing& out : answers_) MPI_Wait(&out.request, MPI_STATUS_IGNORE);
  }

  void post_query_receive() {
    STRATA_MPI_CHECK(MPI_Irecv(&query_, sizeof(query_), MPI_BYTE, MPI_ANY_SOURCE, kTagQuery, comm_, &query_request_),
                     "watchdog: MPI_Irecv");
  }

  // Answers the queries that came in and forgets the answers that went out.
  void serve_queries() {
    while (true) {
      int flag = 0;
      MPI_Status status;
      STRATA_MPI_CHECK(MPI_Test(&query_request_, &flag, &status), "watchdog: MPI_Test");
      if (!flag) break;
      answers_.push_back({answer_for(query_.group), MPI_REQUEST_NULL});
      Outgoing& out = answers_.back();
      // An asker that died meanwhile gets nothing; the job is ending anyway.
      MPI_Isend(&out.answer, sizeof(out.answer), MPI_BYTE, status.MPI_SOURCE, kTagAnswer, comm_, &out.request);
      post_query_receive();
    }
    answers_.remove_if([](Outgoing& out) {
      int done = 1;
      if (out.request != MPI_REQUEST_NULL) MPI_Test(&out.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }

  // Takes the open ops and keeps, for each, when a poll first saw it.
  void refresh() {
    const Clock::time_point now = Clock::now();
    std::vector<Timed> timed;
    for (const OpenOp& o : open_ops()) {
      auto seen = std::find_if(timed_.begin(), timed_.end(),
                               [&](const Timed& t) { return t.op.thread == o.thread && t.op.ordinal == o.ordinal; });
      timed.push_back({o, seen == timed_.end() ? now : seen->since});
    }
    for (const DeviceOp& d : running_device_ops()) timed.push_back({d.op, d.posted});
    timed_ = std::move(timed);
  }

  // The Answer to "what are you doing about group `id`?": the op this rank is blocked in (the one
  // on that group if any), else that it is not in communication, and its last call on the group.
  Answer answer_for(int64_t id) {
    refresh();
    const Timed* blocked = nullptr;
    for (const Timed& t : timed_)
      if (!blocked || t.op.group == id) blocked = &t;
    Answer a;
    std::ostringstream os;
    if (blocked) {
      a.group = blocked->op.group;
      a.seq = blocked->op.seq;
      if (blocked->op.peer != kNoRank) {
        std::shared_ptr<ProcessGroup> g = find_group(blocked->op.group);
        a.peer = g ? g->ranks()[blocked->op.peer] : blocked->op.peer;
      }
      std::strncpy(a.op, blocked->op.op, kOpChars - 1);
      char held[64];
      std::snprintf(held, sizeof(held), "blocked for %.1f s in ", seconds_since(blocked->since));
      os << held << describe_op(blocked->op);
    } else {
      os << "not in communication";
    }
    if (a.group != id) {
      std::shared_ptr<ProcessGroup> g = find_group(id);
      if (!g)
        os << "; it has no live group " << id;
      else if (g->sequence_number() == 0)
        os << "; it has made no call on " << g->describe();
      else
        os << "; its last call on " << g->describe() << " was #" << g->sequence_number();
    }
    std::strncpy(a.text, os.str().c_str(), sizeof(a.text) - 1);
    return a;
  }

  // The longest-blocked op once it has passed the timeout.
  std::optional<Overdue> overdue() const {
    const Timed* oldest = nullptr;
    for (const Timed& t : timed_)
      if (!oldest || t.since < oldest->since) oldest = &t;
    if (!oldest || Clock::now() - oldest->since < timeout_) return std::nullopt;
    const OpenOp& op = oldest->op;
    Overdue o{op.op, op.group, {}, op.seq, op.peer != kNoRank, describe_op(op), seconds_since(oldest->since)};
    if (std::shared_ptr<ProcessGroup> g = find_group(op.group)) {
      if (o.p2p)
        o.asked = {g->ranks()[op.peer]};
      else
        for (int r : g->ranks())
          if (r != rank_) o.asked.push_back(r);
    }
    return o;
  }

  // One round of questions, a Query to each of `ranks`, and their answers as they come. Unanswered
  // requests stay posted, so a Round stays in place until the job ends (end_job keeps it).
  struct Round {
    std::vector<int> ranks;
    std::vector<Query> queries;
    std::vector<Answer> answers;
    std::vector<MPI_Request> requests;
    std::vector<bool> answered;

    std::string state(size_t i) const {
      if (answered[i]) return std::string(answers[i].text, strnlen(answers[i].text, sizeof(answers[i].text)));
      // A rank that died or left, or one whose host the network no longer reaches (a cut link takes
      // this side channel down with the data's).
      return "did not answer within " + std::to_string(kAnswerWindow.count()) +
             " s (it died, left the job, or its host cannot be reached)";
    }
  };

  // Asks rank ranks[i] what it is doing about group groups[i] and waits up to kAnswerWindow for the
  // answers, answering the others meanwhile: they may be asking this rank the same question.
  std::unique_ptr<Round> ask(std::vector<int> ranks, const std::vector<int64_t>& groups) {
    auto round = std::make_unique<Round>();
    const size_t n = ranks.size();
    round->ranks = std::move(ranks);
    for (int64_t id : groups) round->queries.push_back({id});
    round->answers.resize(n);
    round->requests.assign(2 * n, MPI_REQUEST_NULL);
    round->answered.assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      MPI_Irecv(&round->answers[i], sizeof(Answer), MPI_BYTE, round->ranks[i], kTagAnswer, comm_, &round->requests[i]);
      MPI_Isend(&round->queries[i], sizeof(Query), MPI_BYTE, round->ranks[i], kTagQuery, comm_,
                &round->requests[n + i]);
    }
    const Clock::time_point asked_at = Clock::now();
    size_t left = n;
    while (left > 0 && Clock::now() - asked_at < kAnswerWindow) {
      for (size_t i = 0; i < n; ++i) {
        int flag = 0;
        if (!round->answered[i] && MPI_Test(&round->requests[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
          round->answered[i] = true;
          --left;
        }
      }
      serve_queries();
      std::this_thread::sleep_for(kPollPeriod / 4);
    }
    return round;
  }

  // Asks the ranks of the overdue op where they are, prints who never arrived, ends the job.
  // Note [waiting on a waiter]: a rank that never arrived may itself be blocked receiving from (or sending
  // to) a rank that cannot answer: in a pipeline cut off from its next stage, rank 1's all-reduce with
  // rank 0 waits on rank 0's receive from rank 2, on the far side of a cut link. Whichever watchdog ends
  // the job first reports, so such peers are asked too, one hop on, and named with the rank that waits.
  [[noreturn]] void end_job(const Overdue& o) {
    const std::unique_ptr<Round> first = ask(o.asked, std::vector<int64_t>(o.asked.size(), o.group_id));
    const size_t n = o.asked.size();
    const std::vector<Answer>& answers = first->answers;
    const std::vector<bool>& answered = first->answered;

    // Ranks listed in rank order, each missing one with what it said it was doing.
    std::vector<int> arrived{rank_}, missing;
    std::vector<std::pair<int, std::string>> states;
    for (size_t i = 0; i < n; ++i) {
      const Answer& a = answers[i];
      if (!o.p2p && answered[i] && a.group == o.group_id && a.seq == o.seq && o.op == a.op) {
        arrived.push_back(o.asked[i]);
        continue;
      }
      missing.push_back(o.asked[i]);
      states.emplace_back(o.asked[i], first->state(i));
    }
    // One hop on (Note [waiting on a waiter]): the peers that missing ranks are blocked on in point to point.
    std::vector<int> next, waiters;
    std::vector<int64_t> next_groups;  // the group each waiter is blocked on
    for (size_t i = 0; i < n; ++i) {
      const int peer = answers[i].peer;
      if (!answered[i] || peer == kNoRank || peer == rank_ ||
          std::find(o.asked.begin(), o.asked.end(), peer) != o.asked.end() ||
          std::find(next.begin(), next.end(), peer) != next.end())
        continue;
      next.push_back(peer);
      waiters.push_back(o.asked[i]);
      next_groups.push_back(answers[i].group);
    }
    std::vector<std::pair<int, std::string>> beyond;
    const std::unique_ptr<Round> second = next.empty() ? nullptr : ask(next, next_groups);
    for (size_t i = 0; i < next.size(); ++i)
      beyond.emplace_back(next[i], "rank " + std::to_string(next[i]) + ", which rank " + std::to_string(waiters[i]) +
                                       " waits for: " + second->state(i));
    std::sort(beyond.begin(), beyond.end());
    std::sort(arrived.begin(), arrived.end());
    std::sort(missing.begin(), missing.end());
    std::sort(states.begin(), states.end());
    auto list = [](const std::vector<int>& ranks) {
      std::ostringstream os;
      for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
      return os.str();
    };
    const std::string prefix = "strata: rank " + std::to_string(rank_) + ": ";
    char head[160];
    std::snprintf(head, sizeof(head), " still blocked after %.1f s (STRATA_COMM_TIMEOUT_S is %.1f s); ending the job\n",
                  o.seconds, std::chrono::duration<double>(timeout_).count());
    std::ostringstream report;
    report << prefix << o.what << head << prefix
           << "ranks that never arrived: " << (missing.empty() ? "none, every rank is in this op" : list(missing))
           << "\n";
    for (const auto& [r, state] : states) report << prefix << "  rank " << r << ": " << state << "\n";
    for (const auto& [r, line] : beyond) report << prefix << "  " << line << "\n";
    if (!o.p2p) report << prefix << "ranks that arrived: " << list(arrived) << "\n";
    const std::string text = report.str();
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    std::string reason = "watchdog: " + o.what + head;
    reason.pop_back();  // head's newline
    dump_flight_recorder_on_failure(reason);
    // MPI_Abort makes mpirun stop every rank at once; a plain exit would leave it to notice.
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  struct Outgoing {
    Answer answer;
    MPI_Request request;
  };
  struct Timed {
    OpenOp op;
    Clock::time_point since;  // when a poll first saw it open
  };

  MPI_Comm comm_;
  int rank_ = 0;
  std::chrono::milliseconds timeout_;
  Query query_{};
  MPI_Request query_request_ = MPI_REQUEST_NULL;
  std::list<Outgoing> answers_;  // sends in flight; a list keeps their buffers in place
  std::vector<Timed> timed_;     // the open ops; only the watchdog thread touches it
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

std::unique_ptr<Watchdog> watchdog;

}  // namespace

void start_watchdog() {
  STRATA_INTERNAL_ASSERT(!watchdog);
  MPI_Comm comm = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "start_watchdog: MPI_Comm_dup");
  STRATA_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "start_watchdog: MPI_Comm_set_errhandler");
  watchdog = std::make_unique<Watchdog>(comm, comm_timeout());
  device_ops.watching = true;
}

void stop_watchdog() {
  device_ops.watching = false;
  watchdog.reset();
  std::lock_guard lock(device_ops.mutex);
  device_ops.pending.clear();
}

void watch_device_op(const OpRecord& record, std::shared_ptr<Work> work) {
  if (!device_ops.watching.load(std::memory_order_relaxed)) return;
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(device_ops.mutex);
  const OpenOp op{nullptr, ++device_ops.posted, record.op, record.group->id(), record.seq, record.peer};
  device_ops.pending.push_back({op, now, std::move(work)});
}

BlockingScope::BlockingScope(const OpRecord& record) {
  ThreadSlots& t = this_thread_slots();
  const int depth = t.depth.load(std::memory_order_relaxed);
  t.write([&] {
    if (depth < kMaxDepth) {
      Slot& s = t.slots[depth];
      s.op.store(record.op, std::memory_order_relaxed);
      s.group.store(record.group->id(), std::memory_order_relaxed);
      s.seq.store(record.seq, std::memory_order_relaxed);
      s.peer.store(record.peer, std::memory_order_relaxed);
      s.ordinal.store(++t.opened, std::memory_order_relaxed);
    }
    t.depth.store(depth + 1, std::memory_order_relaxed);
  });
}

BlockingScope::~BlockingScope() {
  ThreadSlots& t = this_thread_slots();
  t.write([&] { t.depth.store(t.depth.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed); });
}

}  // namespace strata::distributed::detail
