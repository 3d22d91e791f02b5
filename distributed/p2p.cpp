// The front end of point-to-point ops, and what is built on them: small objects and
// monitored_barrier.

#include <algorithm>
#include <cstring>
#include <exception>
#include <sstream>
#include <thread>

#include "strata/distributed/detail/front_end.h"
#include "strata/tensor/creation.h"

namespace strata::distributed {

using namespace detail;

namespace {

// The group and the peer's group rank of a p2p op, checked.
std::pair<ProcessGroup*, int> check_p2p_args(const char* op, bool is_send, const Tensor& tensor, int peer,
                                             const Group& group) {
  ProcessGroup& g = detail::resolve(group, op);
  check_defined(tensor, op, "tensor");
  const int r = to_group_rank(g, peer, op, is_send ? "dst" : "src");
  STRATA_CHECK(r != g.rank(), op, ": ", is_send ? "dst" : "src", " ", peer, " is this process's own rank");
  return {&g, r};
}

std::shared_ptr<Work> p2p(const char* op, bool is_send, const Tensor& tensor, int peer, const Group& group, int tag,
                          bool async_op) {
  // Not a structured binding: clang before 16 cannot capture one in the lambdas below.
  const std::pair<ProcessGroup*, int> target = check_p2p_args(op, is_send, tensor, peer, group);
  ProcessGroup* g = target.first;
  const int r = target.second;
  Backend& b = g->backend(tensor.device(), op);
  detail::OpRecord rec = make_record(op, *g, tensor, tensor.nbytes(), /*counted=*/false);
  rec.peer = r;
  rec.tag = tag;
  Tensor buf = buffer(tensor);
  std::function<void()> finish = is_send ? std::function<void()>{} : copy_back(tensor, buf);
  auto post = [&](bool a) { return is_send ? b.send(buf, r, tag, a) : b.recv(buf, r, tag, a); };
  if (get_debug_level() != DebugLevel::DETAIL) return run(rec, group, async_op, post, std::move(finish));
  auto post_checked = [&](bool a) {
    std::shared_ptr<Work> work = detail::check_p2p(rec, is_send, tag, post(true));
    if (!a) work->wait();
    return work;
  };
  return run(rec, group, async_op, post_checked, std::move(finish));
}

int64_t words_for(size_t bytes) { return static_cast<int64_t>((bytes + 7) / 8); }

}  // namespace

// ---- point to point ----

void send(const Tensor& tensor, int dst, const Group& group, int tag) {
  check_tag(tag, "send");
  p2p("send", true, tensor, dst, group, tag, false);
}

void recv(const Tensor& tensor, int src, const Group& group, int tag) {
  check_tag(tag, "recv");
  p2p("recv", false, tensor, src, group, tag, false);
}

std::shared_ptr<Work> isend(const Tensor& tensor, int dst, const Group& group, int tag) {
  check_tag(tag, "isend");
  return p2p("isend", true, tensor, dst, group, tag, true);
}

std::shared_ptr<Work> irecv(const Tensor& tensor, int src, const Group& group, int tag) {
  check_tag(tag, "irecv");
  return p2p("irecv", false, tensor, src, group, tag, true);
}

std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops) {
  STRATA_CHECK(!ops.empty(), "batch_isend_irecv: got no ops");
  // All checked before any is posted: a bad op must not leave the earlier ones in flight. The ops of each
  // backend involved form one batch (an NCCL group call), so that pairwise exchanges cannot deadlock.
  std::vector<Backend*> batches;
  std::vector<std::vector<int>> peers;  // of each batch, in group ranks
  ProcessGroup* first_group = nullptr;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& o = ops[i];
    STRATA_CHECK(o.op == P2POp::kSend || o.op == P2POp::kRecv, "batch_isend_irecv: ops[", i, "].op is ", int(o.op),
                 ", neither kSend nor kRecv");
    check_tag(o.tag, "batch_isend_irecv");
    const auto [g, peer] = check_p2p_args("batch_isend_irecv", o.op == P2POp::kSend, o.tensor, o.peer, o.group);
    Backend* b = &g->backend(o.tensor.device(), "batch_isend_irecv");
    if (!first_group) first_group = g;
    const size_t at = std::find(batches.begin(), batches.end(), b) - batches.begin();
    if (at == batches.size()) {
      batches.push_back(b);
      peers.emplace_back();
    }
    peers[at].push_back(peer);
  }
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(ops.size());
  std::exception_ptr error;  // the first one; every opened batch is closed anyway
  size_t opened = 0;
  try {
    {
      // Opening a batch may make communicators with its peers (Note [lazy communicators]), which waits for them.
      OpRecord rec = make_record("batch_isend_irecv", *first_group, ops[0].tensor, 0, /*counted=*/false);
      rec.peer = peers[0][0];
      BlockingScope scope(rec);
      for (; opened < batches.size(); ++opened) batches[opened]->start_batch(peers[opened]);
    }
    for (const P2POp& o : ops) {
      works.push_back(o.op == P2POp::kSend ? isend(o.tensor, o.peer, o.group, o.tag)
                                           : irecv(o.tensor, o.peer, o.group, o.tag));
    }
  } catch (...) {
    error = std::current_exception();
  }
  while (opened > 0) {
    try {
      batches[--opened]->end_batch();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return works;
}

void detail::send_internal(const Tensor& tensor, int dst, const Group& group, int tag) {
  p2p("send", true, tensor, dst, group, tag, false);
}

void detail::recv_internal(const Tensor& tensor, int src, const Group& group, int tag) {
  p2p("recv", false, tensor, src, group, tag, false);
}

// ---- monitored_barrier: arrivals to group rank 0, which releases them with its verdict ----

void monitored_barrier(const Group& group, std::chrono::milliseconds timeout, bool wait_all_ranks) {
  ProcessGroup& g = detail::resolve(group, "monitored_barrier");
  if (timeout.count() <= 0) timeout = detail::comm_timeout();
  Backend& b = g.backend(kCPU, "monitored_barrier");
  const uint64_t seq = g.next_sequence_number();
  // Rank 0 decides at the timeout; the others allow it as long again to send its verdict.
  const auto deadline = Clock::now() + (g.rank() == 0 ? timeout : 2 * timeout);
  // Every message starts with the barrier's sequence number: one left over from an earlier
  // barrier that failed (a late arrival, a late verdict) is dropped and the receive posted again.
  auto receive = [&](const Tensor& into, int from) { return b.recv(into, from, detail::kTagMonitoredBarrier, true); };
  auto poll = [&](std::vector<std::shared_ptr<Work>>& works, const std::vector<Tensor>& into, std::vector<bool>& done,
                  const std::vector<int>& from) {
    while (true) {
      bool all = true;
      for (size_t i = 0; i < works.size(); ++i) {
        if (!done[i] && works[i] && works[i]->is_completed()) {
          works[i]->wait();  // rethrows a failed transfer
          if (into[i].data_ptr<int64_t>()[0] == static_cast<int64_t>(seq))
            done[i] = true;
          else
            works[i] = receive(into[i], from[i]);
        }
        all = all && (done[i] || !works[i]);
      }
      if (all || Clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  };
  const int n = g.size();
  // Rank 0 waits for an arrival from every rank, then releases them with the list of the missing.
  Tensor release = zeros({n + 2}, kLong);  // [seq, count, ranks...]
  if (g.rank() == 0) {
    std::vector<Tensor> arrivals(n);
    std::vector<std::shared_ptr<Work>> works(n);
    std::vector<bool> done(n, false);
    std::vector<int> from(n);
    for (int r = 1; r < n; ++r) {
      arrivals[r] = empty({1}, kLong);
      from[r] = r;
      works[r] = receive(arrivals[r], r);
    }
    poll(works, arrivals, done, from);
    std::vector<int> missing;
    for (int r = 1; r < n; ++r)
      if (!done[r]) missing.push_back(g.global_rank(r));
    auto* out = release.data_ptr<int64_t>();
    out[0] = static_cast<int64_t>(seq);
    out[1] = static_cast<int64_t>(missing.size());
    for (size_t i = 0; i < missing.size(); ++i) out[2 + i] = missing[i];
    for (int r = 1; r < n; ++r)
      if (done[r]) b.send(release, r, detail::kTagMonitoredBarrier, false);
  } else {
    Tensor arrival = full({1}, static_cast<double>(seq), kLong);
    b.send(arrival, 0, detail::kTagMonitoredBarrier, false);
    std::vector<std::shared_ptr<Work>> works{receive(release, 0)};
    std::vector<bool> done{false};
    poll(works, {release}, done, {0});
    STRATA_CHECK(done[0], "monitored_barrier: rank ", g.global_rank(0), " (group rank 0 of ", g.describe(),
                 ") did not release this rank within ", 2 * timeout.count(), " ms");
  }
  const auto* r = release.data_ptr<int64_t>() + 1;
  if (r[0] == 0) return;
  std::ostringstream names;
  const int64_t shown = wait_all_ranks ? r[0] : 1;
  for (int64_t i = 0; i < shown; ++i) names << (i ? ", " : "") << r[1 + i];
  STRATA_CHECK(false, "monitored_barrier: ", wait_all_ranks ? "ranks " : "rank ", names.str(), " of ", g.describe(),
               " did not arrive within ", timeout.count(), " ms", wait_all_ranks ? "" : " (the first one missing)");
}

// ---- small objects: a length word, then the bytes padded to whole int64 words ----

void detail::check_object_size(const char* op, const char* type, size_t bytes, size_t size, bool exact) {
  STRATA_CHECK(exact ? bytes == size : bytes % size == 0, op, ": received ", bytes, " bytes, which is not ",
               exact ? "the size of " : "a whole number of ", type, " (", size, " bytes)");
}

void broadcast_object(std::string& bytes, int src, const Group& group) {
  ProcessGroup& g = detail::resolve(group, "broadcast_object");
  const bool is_src = g.rank() == to_group_rank(g, src, "broadcast_object", "src");
  Tensor length = full({1}, is_src ? static_cast<double>(bytes.size()) : 0.0, kLong);
  detail::broadcast_unswitched(length, src, group, false);
  const size_t n = static_cast<size_t>(length.item<int64_t>());
  Tensor payload = zeros({words_for(n)}, kLong);
  if (is_src && n) std::memcpy(payload.data_ptr(), bytes.data(), n);
  detail::broadcast_unswitched(payload, src, group, false);
  if (!is_src) bytes.assign(static_cast<const char*>(payload.data_ptr()), n);
}

void send_object(const std::string& bytes, int dst, const Group& group, int tag) {
  check_tag(tag, "send_object");
  detail::send_internal(full({1}, static_cast<double>(bytes.size()), kLong), dst, group, detail::kTagObjectBase + tag);
  Tensor payload = zeros({words_for(bytes.size())}, kLong);
  if (!bytes.empty()) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
  detail::send_internal(payload, dst, group, detail::kTagObjectBase + tag);
}

std::string recv_object(int src, const Group& group, int tag) {
  check_tag(tag, "recv_object");
  Tensor length = empty({1}, kLong);
  detail::recv_internal(length, src, group, detail::kTagObjectBase + tag);
  const int64_t n = length.item<int64_t>();
  STRATA_CHECK(n >= 0, "recv_object: rank ", src, " announced a negative length (", n, ")");
  Tensor payload = empty({words_for(static_cast<size_t>(n))}, kLong);
  detail::recv_internal(payload, src, group, detail::kTagObjectBase + tag);
  return std::string(static_cast<const char*>(payload.data_ptr()), static_cast<size_t>(n));
}

}  // namespace strata::distributed
