// The checks that ranks made the same calls. INFO (the default) compares the ranks' last kWindow collectives
// of a group once every kWindow calls (Note [call windows]). DETAIL (STRATA_DISTRIBUTED_DEBUG=DETAIL):
// before a collective the ranks of the group exchange a fingerprint of their call and all throw when the
// calls differ; a p2p sender's fingerprint travels beside its data and the receiver compares it with its own.

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/distributed/detail/runtime.h"
#include "strata/distributed/tensor_meta.h"
#include "strata/tensor/creation.h"

namespace strata::distributed::detail {

namespace {

// Note [fingerprints]: a call travels as a fixed block of int64 words, so one all_gather of a
// Long tensor exchanges every rank's. Shapes beyond kMaxDims dims keep their first kMaxDims dims
// for the message and compare through a hash of all of them.
constexpr size_t kOpChars = 32;
constexpr size_t kMaxDims = 8;
constexpr int64_t kNoReduceOp = -1;  // Fingerprint::reduce_op of an op that does not reduce

struct Fingerprint {
  char op[kOpChars];
  int64_t dtype;
  int64_t device;  // DeviceType: each type has a backend of its own, so ranks on different types never meet
  int64_t ndim;
  int64_t dims[kMaxDims];
  uint64_t shape_hash;
  int64_t root;       // group rank, kNoRank for rootless ops
  int64_t reduce_op;  // ReduceOp as an int, kNoReduceOp when the op does not reduce
  int64_t shapes_must_match;
  int64_t has_tensor;  // false for barrier
  uint64_t seq;        // the call's number on its group: a rank that skipped a call differs here
  int64_t refused;     // DETAIL: this rank refused the call before it ran (Note [agreed refusals])
};
static_assert(std::is_trivially_copyable_v<Fingerprint> && sizeof(Fingerprint) % sizeof(int64_t) == 0);
constexpr int64_t kWords = sizeof(Fingerprint) / sizeof(int64_t);

Fingerprint fingerprint(const OpRecord& r) {
  Fingerprint f{};
  std::strncpy(f.op, r.op, kOpChars - 1);
  f.dtype = dtype_code(r.dtype);
  f.device = static_cast<int64_t>(r.device);
  f.ndim = static_cast<int64_t>(r.shape.size());
  f.shape_hash = 14695981039346656037ull;  // FNV-1a, a word at a time
  for (size_t d = 0; d < r.shape.size(); ++d) {
    if (d < kMaxDims) f.dims[d] = r.shape[d];
    f.shape_hash = (f.shape_hash ^ static_cast<uint64_t>(r.shape[d])) * 1099511628211ull;
  }
  f.root = r.root;
  f.reduce_op = r.reduce_op ? static_cast<int64_t>(*r.reduce_op) : kNoReduceOp;
  f.shapes_must_match = r.shapes_must_match;
  f.has_tensor = !r.shape.empty() || r.bytes != 0;
  f.seq = r.seq;
  return f;
}

// What a call can disagree on, in the order messages name them.
enum Field : unsigned { kOp = 1, kDtype = 2, kDevice = 4, kShape = 8, kRoot = 16, kReduceOp = 32, kSeq = 64 };

unsigned differences(const Fingerprint& a, const Fingerprint& b, unsigned fields) {
  unsigned out = 0;
  if ((fields & kOp) && std::strncmp(a.op, b.op, kOpChars) != 0) out |= kOp;
  if ((fields & kDtype) && a.dtype != b.dtype) out |= kDtype;
  if ((fields & kDevice) && a.device != b.device) out |= kDevice;
  if ((fields & kShape) && a.shapes_must_match && b.shapes_must_match &&
      (a.ndim != b.ndim || a.shape_hash != b.shape_hash || std::memcmp(a.dims, b.dims, sizeof(a.dims)) != 0))
    out |= kShape;
  if ((fields & kRoot) && a.root != b.root) out |= kRoot;
  if ((fields & kReduceOp) && a.reduce_op != b.reduce_op) out |= kReduceOp;
  if ((fields & kSeq) && a.seq != b.seq) out |= kSeq;
  return out;
}

// "shape", "op and dtype", "dtype, shape and root".
std::string field_names(unsigned fields) {
  static constexpr std::pair<Field, const char*> kNames[] = {
      {kOp, "op"},     {kDtype, "dtype"},        {kDevice, "device"},  {kShape, "shape"},
      {kRoot, "root"}, {kReduceOp, "reduce op"}, {kSeq, "call number"}};
  std::vector<const char*> names;
  for (auto [field, name] : kNames)
    if (fields & field) names.push_back(name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  return out;
}

// "all_reduce(Float [2, 3], SUM)", "all_reduce(Float [2, 3] on cuda, SUM)", "broadcast(Long [4], root 1)",
// "barrier()"; ranks are global.
std::string describe_call(const Fingerprint& f, const ProcessGroup& g, bool with_seq) {
  std::ostringstream os;
  if (with_seq) os << "#" << f.seq << " ";
  os << std::string(f.op, strnlen(f.op, kOpChars)) << "(";
  const char* sep = "";
  if (f.has_tensor) {
    os << dtype_from_code(f.dtype, "STRATA_DISTRIBUTED_DEBUG=DETAIL: a rank's call") << " "
       << IntArrayRef(f.dims, std::min<size_t>(f.ndim, kMaxDims));
    if (f.ndim > static_cast<int64_t>(kMaxDims)) os << " (" << f.ndim << " dims, the first " << kMaxDims << " shown)";
    if (f.device != static_cast<int64_t>(kCPU)) os << " on cuda";
    sep = ", ";
  }
  if (f.reduce_op != kNoReduceOp) {
    os << sep << to_string(static_cast<ReduceOp>(f.reduce_op));
    sep = ", ";
  }
  if (f.root != kNoRank) os << sep << "root " << (f.root < g.size() ? g.ranks()[f.root] : f.root);
  os << ")";
  return os.str();
}

// The fingerprint of a p2p op with tag `tag` travels on its own tag, so that fingerprints match
// their messages whatever order the receiver takes the tags in.
int fingerprint_tag(int tag) { return kTagDebugBase + tag; }

// A p2p op under DETAIL: the fingerprint transfer beside the data transfer. The receiver compares
// once the fingerprint is in, and on a mismatch lets the data land before throwing, so that later
// messages between the two ranks stay in step.
class CheckedP2P final : public Work {
 public:
  CheckedP2P(const OpRecord& record, bool is_send, int tag, Tensor fingerprint, std::shared_ptr<Work> fingerprint_work,
             std::shared_ptr<Work> transfer)
      : record_(record),
        is_send_(is_send),
        tag_(tag),
        fingerprint_(std::move(fingerprint)),
        fingerprint_work_(std::move(fingerprint_work)),
        transfer_(std::move(transfer)) {}

  bool is_completed() override { return fingerprint_work_->is_completed() && transfer_->is_completed(); }

  void wait() override {
    fingerprint_work_->wait();
    if (!is_send_) check();
    transfer_->wait();
  }

 private:
  void check() {
    Fingerprint theirs;
    std::memcpy(&theirs, fingerprint_.data_ptr(), sizeof(theirs));
    const Fingerprint mine = fingerprint(record_);
    const unsigned diff = differences(theirs, mine, kDtype | kShape);
    if (!diff) return;
    try {
      transfer_->wait();
    } catch (const Error&) {
      // a size mismatch fails the receive too; the message below says why
    }
    const ProcessGroup& g = *record_.group;
    const int sender = g.ranks()[record_.peer];
    STRATA_CHECK(false, record_.op, " from rank ", sender, " on ", g.describe(), " with tag ", tag_,
                 ": sender and receiver disagree on ", field_names(diff), " (STRATA_DISTRIBUTED_DEBUG=DETAIL): rank ",
                 sender, " called ", describe_call(theirs, g, false), ", rank ", g.ranks()[g.rank()], " called ",
                 describe_call(mine, g, false));
  }

  OpRecord record_;
  bool is_send_;
  int tag_;
  Tensor fingerprint_;
  std::shared_ptr<Work> fingerprint_work_;
  std::shared_ptr<Work> transfer_;
};

constexpr unsigned kAllFields = kOp | kDtype | kDevice | kShape | kRoot | kReduceOp | kSeq;

// "rank 0 called all_reduce(Float [2], SUM); ranks 1, 2 called all_reduce(Float [3], SUM)": the calls of
// group ranks 0, 1, ... at calls[0], calls[stride], ...; ranks with the same call share one entry.
std::string who_called(const ProcessGroup& g, const Fingerprint* calls, size_t stride, bool with_seq) {
  std::vector<std::string> described;
  std::vector<std::vector<int>> callers;
  for (int r = 0; r < g.size(); ++r) {
    std::string call = describe_call(calls[r * stride], g, with_seq);
    size_t i = 0;
    while (i < described.size() && described[i] != call) ++i;
    if (i == described.size()) {
      described.push_back(std::move(call));
      callers.emplace_back();
    }
    callers[i].push_back(g.ranks()[r]);
  }
  std::ostringstream who;
  for (size_t i = 0; i < described.size(); ++i) {
    who << (i ? "; " : "") << (callers[i].size() == 1 ? "rank " : "ranks ");
    for (size_t j = 0; j < callers[i].size(); ++j) who << (j ? ", " : "") << callers[i][j];
    who << " called " << described[i];
  }
  return who.str();
}

// Note [call windows]: under INFO, the default, each rank keeps the fingerprints of its last kWindow
// collectives on each group. At every kWindow-th call, before that call is posted, the ranks compare a hash
// of their windows with one all_reduce of two words; when the hashes differ they all_gather the windows and
// every rank throws, naming the first call where the ranks' differ. A call costs a fingerprint and a copy;
// the comparison, one small all_reduce per kWindow calls (the all_reduce benchmark measures both). A
// mismatch is caught within kWindow calls instead of before it runs (DETAIL): the results in between are
// wrong, and the message says so. Ranks that made a different number of calls still compare at their own
// kWindow-th calls, so the comparisons meet each other.
constexpr size_t kWindow = 64;

struct CallWindow {
  std::mutex mutex;
  size_t count = 0;  // calls in the window so far
  std::array<Fingerprint, kWindow> calls;
};

// Windows live as long as the process (a group id is never reused); each thread remembers its last one.
CallWindow& window_of(const ProcessGroup& g) {
  thread_local int64_t last_id = -1;
  thread_local CallWindow* last = nullptr;
  if (g.id() == last_id) return *last;
  static std::mutex mutex;
  static std::unordered_map<int64_t, std::unique_ptr<CallWindow>> windows;
  std::lock_guard lock(mutex);
  std::unique_ptr<CallWindow>& w = windows[g.id()];
  if (!w) w = std::make_unique<CallWindow>();
  last_id = g.id();
  last = w.get();
  return *w;
}

// What must agree: a shape that may legitimately differ (all_to_all_single's splits) is left out.
Fingerprint canonical(Fingerprint f) {
  if (!f.shapes_must_match) {
    f.ndim = 0;
    std::fill(std::begin(f.dims), std::end(f.dims), 0);
    f.shape_hash = 0;
  }
  return f;
}

uint64_t window_hash(const std::array<Fingerprint, kWindow>& calls) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, a word at a time
  for (const Fingerprint& call : calls) {
    int64_t words[kWords];
    const Fingerprint c = canonical(call);
    std::memcpy(words, &c, sizeof(c));
    for (int64_t word : words) h = (h ^ static_cast<uint64_t>(word)) * 1099511628211ull;
  }
  return h;
}

// Note [agreed refusals]: under DETAIL a collective that one rank refuses before it runs (a bad argument, a
// tensor the group's backend cannot move) would leave the other ranks waiting in it until the timeout. So
// the refusing rank still joins the exchange of fingerprints, marked as refused; when any rank refused, the
// ranks exchange the refusals' messages (kReasonChars each) and every rank throws: the refusing ones their
// own error, the others the first refusing rank's. The front end and ProcessGroup::backend() make every
// check that one rank can fail alone before run().
constexpr size_t kReasonChars = 1024;

// Exchanges this rank's fingerprint (refused when `refusal` is set) with the group's; throws on every rank
// that did not refuse when some rank did. Returns the fingerprints in group-rank order.
std::vector<Fingerprint> exchange(const OpRecord& record, const std::string* refusal) {
  const ProcessGroup& g = *record.group;
  Fingerprint mine = fingerprint(record);
  mine.refused = refusal != nullptr;
  std::vector<Fingerprint> all(g.size());
  Backend& cpu = g.backend(kCPU, record.op);
  {
    // A group mismatch hangs here instead (each group talks on its own communicator); the
    // watchdog then names what every rank is blocked in.
    BlockingScope scope(record);
    cpu.all_gather(from_blob(all.data(), {kWords * g.size()}, kLong), from_blob(&mine, {kWords}, kLong), false);
  }
  std::vector<int> refusing;
  for (int r = 0; r < g.size(); ++r)
    if (all[r].refused) refusing.push_back(r);
  if (refusing.empty()) return all;
  std::vector<char> reasons(kReasonChars * g.size());
  std::vector<char> reason(kReasonChars, '\0');
  if (refusal) refusal->copy(reason.data(), kReasonChars - 1);
  {
    BlockingScope scope(record);
    cpu.all_gather(from_blob(reasons.data(), {static_cast<int64_t>(reasons.size())}, kByte),
                   from_blob(reason.data(), {static_cast<int64_t>(kReasonChars)}, kByte), false);
  }
  if (refusal) return all;
  std::ostringstream who;
  for (size_t i = 0; i < refusing.size(); ++i) who << (i ? ", " : "") << g.ranks()[refusing[i]];
  const char* first = reasons.data() + refusing[0] * kReasonChars;
  STRATA_CHECK(false, record.op, " #", record.seq, " on ", g.describe(), ": ",
               refusing.size() == 1 ? "rank " : "ranks ", who.str(),
               " refused the call, so no rank runs it (STRATA_DISTRIBUTED_DEBUG=DETAIL); rank ", g.ranks()[refusing[0]],
               "'s error: ", std::string(first, strnlen(first, kReasonChars)));
}

}  // namespace

void refuse_collective(const OpRecord& record, const std::string& reason) {
  if (record.group->size() > 1) exchange(record, &reason);
}

void check_collective(const OpRecord& record) {
  const ProcessGroup& g = *record.group;
  if (g.size() == 1) return;
  const std::vector<Fingerprint> all = exchange(record, nullptr);
  unsigned diff = 0;
  for (const Fingerprint& f : all) diff |= differences(all[0], f, kAllFields);
  if (!diff) return;
  STRATA_CHECK(false, record.op, " #", record.seq, " on ", g.describe(), ": ranks disagree on ", field_names(diff),
               " (STRATA_DISTRIBUTED_DEBUG=DETAIL): ", who_called(g, all.data(), 1, diff & kSeq));
}

void note_collective(const OpRecord& record) {
  const ProcessGroup& g = *record.group;
  if (g.size() == 1) return;
  CallWindow& w = window_of(g);
  std::lock_guard lock(w.mutex);
  w.calls[w.count++] = fingerprint(record);
  if (w.count < kWindow) return;
  w.count = 0;
  const uint64_t h = window_hash(w.calls);
  // MAX of the hash and of its complement: the complement's maximum is the complement of the least hash.
  int64_t words[2] = {static_cast<int64_t>(h >> 1), LLONG_MAX - static_cast<int64_t>(h >> 1)};
  Backend& cpu = g.backend(kCPU, record.op);
  {
    BlockingScope scope(record);
    cpu.all_reduce(from_blob(words, {2}, kLong), ReduceOp::MAX, false);
  }
  if (words[0] == LLONG_MAX - words[1]) return;
  std::vector<Fingerprint> all(kWindow * g.size());
  {
    BlockingScope scope(record);
    cpu.all_gather(from_blob(all.data(), {kWords * static_cast<int64_t>(all.size())}, kLong),
                   from_blob(w.calls.data(), {kWords * static_cast<int64_t>(kWindow)}, kLong), false);
  }
  // The first call where some rank's differs from group rank 0's.
  for (size_t i = 0; i < kWindow; ++i) {
    unsigned diff = 0;
    bool differ = false;
    for (int r = 1; r < g.size(); ++r) {
      const Fingerprint &a = all[i], &b = all[r * kWindow + i];
      diff |= differences(a, b, kAllFields);
      const Fingerprint ca = canonical(a), cb = canonical(b);
      differ = differ || std::memcmp(&ca, &cb, sizeof(ca)) != 0;
    }
    if (!differ) continue;
    STRATA_CHECK(false, record.op, " #", record.seq, " on ", g.describe(), ": the ranks' calls differ from #",
                 all[i].seq, " on", diff ? ": ranks disagree on " + field_names(diff) : std::string(),
                 " (found by the check of every ", kWindow,
                 " calls, STRATA_DISTRIBUTED_DEBUG=INFO; the results of the calls since are wrong, and "
                 "STRATA_DISTRIBUTED_DEBUG=DETAIL checks each call before it runs): ",
                 who_called(g, all.data() + i, kWindow, true));
  }
  STRATA_INTERNAL_ASSERT(false);  // the hashes differ, so some call does
}

std::shared_ptr<Work> check_p2p(const OpRecord& record, bool is_send, int tag, std::shared_ptr<Work> transfer) {
  Backend& b = record.group->backend(kCPU, record.op);
  Tensor buffer = empty({kWords}, kLong);
  if (is_send) {
    const Fingerprint mine = fingerprint(record);
    std::memcpy(buffer.data_ptr(), &mine, sizeof(mine));
  }
  std::shared_ptr<Work> fingerprint_work = is_send ? b.send(buffer, record.peer, fingerprint_tag(tag), true)
                                                   : b.recv(buffer, record.peer, fingerprint_tag(tag), true);
  return std::make_shared<CheckedP2P>(record, is_send, tag, std::move(buffer), std::move(fingerprint_work),
                                      std::move(transfer));
}

}  // namespace strata::distributed::detail
