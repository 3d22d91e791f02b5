#pragma once
// Internal: communicators made on first use, for a backend whose communicators are costly to make (NCCL).
//
// Note [lazy communicators]: as c10d's ProcessGroupNCCL, a group makes its communicators only once tensors
// move through them, so a job that moves only CPU tensors makes none. The group's communicator, for
// collectives, is made when the ranks make their first collective: rank 0 makes the id, and one all_reduce
// on `host` (a CPU backend of the same ranks) brings it and the group's size to every rank. A p2p op uses a
// communicator of its two ranks, made at their first op with each other: the lower rank makes the id and
// sends it to the higher. Making a communicator blocks until the other ranks make it too, so the first
// exchange between two ranks must not wait on a third (a ring of first isends would): a batch makes the
// pairs it lacks first, in ascending peer order, which cannot deadlock when each rank's batch meets its
// peers' batches (batch_isend_irecv's rule).

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/distributed/process_group.h"
#include "strata/tensor/creation.h"

namespace strata::distributed::detail {

/// The communicators of one group, made on first use (Note [lazy communicators]). `Id` is the trivially
/// copyable token a communicator is made from (ncclUniqueId); `make_id` makes a fresh one and
/// `make_comm(id, nranks, rank)` joins the communicator it names.
template <class Comm, class Id>
class LazyComms {
  static_assert(std::is_trivially_copyable_v<Id>);

 public:
  using MakeId = std::function<Id()>;
  using MakeComm = std::function<std::shared_ptr<Comm>(const Id&, int nranks, int rank)>;

  /// Communicators of the group whose CPU backend `host` is (a private one: the ids travel on it) and in which
  /// this process is rank `rank`.
  LazyComms(std::unique_ptr<Backend> host, int rank, MakeId make_id, MakeComm make_comm)
      : host_(std::move(host)), rank_(rank), make_id_(std::move(make_id)), make_comm_(std::move(make_comm)) {}

  /// This process's rank in the group.
  int rank() const { return rank_; }

  /// The group's communicator; every rank of the group calls it at its first collective.
  std::shared_ptr<Comm> group() {
    std::lock_guard lock(mutex_);
    if (group_) return group_;
    // [id words..., whether rank 0 made the id, 1]: rank 0's id plus zeros is its id, and the ones sum to the size.
    Tensor message = zeros({kIdWords + 2}, kLong);
    std::exception_ptr failed = rank_ == 0 ? write_id(message) : nullptr;
    message.data_ptr<int64_t>()[kIdWords + 1] = 1;
    host_->all_reduce(message, ReduceOp::SUM, false);  // also when rank 0 failed, so no rank is left waiting
    if (failed) std::rethrow_exception(failed);
    const int size = static_cast<int>(message.data_ptr<int64_t>()[kIdWords + 1]);
    group_ = make_comm_(read_id(message, 0), size, rank_);
    return group_;
  }

  /// The communicator of this rank and group rank `peer`, in which the lower of the two is rank 0; both call it
  /// at their first p2p op with each other.
  std::shared_ptr<Comm> pair(int peer) {
    std::lock_guard lock(mutex_);
    return pair_locked(peer);
  }

  /// Makes the pair communicators with `peers` that do not exist yet, in ascending order (a batch's first step).
  void make_pairs(std::vector<int> peers) {
    std::sort(peers.begin(), peers.end());
    std::lock_guard lock(mutex_);
    for (int peer : peers) pair_locked(peer);
  }

  /// The backend of the subgroup made by split(index) of `host` (every rank of this group calls it); null
  /// outside it. Nothing is made before the subgroup's first op.
  std::unique_ptr<LazyComms> split(int index) const {
    std::unique_ptr<Backend> sub = host_->split(index);
    if (!sub) return nullptr;
    return std::make_unique<LazyComms>(std::move(sub), index, make_id_, make_comm_);
  }

 private:
  static constexpr int64_t kIdWords = (sizeof(Id) + 7) / 8;

  // Makes an id into message's first words and sets the flag after them; returns the error instead of throwing.
  std::exception_ptr write_id(const Tensor& message) const {
    try {
      const Id id = make_id_();
      std::memcpy(message.data_ptr(), &id, sizeof(id));
      message.data_ptr<int64_t>()[kIdWords] = 1;
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }

  static Id read_id(const Tensor& message, int maker) {
    STRATA_CHECK(message.data_ptr<int64_t>()[kIdWords] == 1, "rank ", maker,
                 " of the group could not make the communicator's id (see its error)");
    Id id;
    std::memcpy(&id, message.data_ptr(), sizeof(id));
    return id;
  }

  std::shared_ptr<Comm> pair_locked(int peer) {
    STRATA_CHECK(peer != rank_, "a communicator with itself (rank ", rank_, ") was asked for");
    std::shared_ptr<Comm>& comm = pairs_[peer];
    if (comm) return comm;
    const bool lower = rank_ < peer;
    Tensor message = zeros({kIdWords + 1}, kLong);
    if (lower) {
      std::exception_ptr failed = write_id(message);
      host_->send(message, peer, 0, false);  // also on failure, so the peer is not left waiting
      if (failed) std::rethrow_exception(failed);
    } else {
      host_->recv(message, peer, 0, false);  // each pair makes one communicator, so tag 0 is never ambiguous
    }
    comm = make_comm_(read_id(message, lower ? rank_ : peer), 2, lower ? 0 : 1);
    return comm;
  }

  std::unique_ptr<Backend> host_;
  int rank_;
  MakeId make_id_;
  MakeComm make_comm_;
  std::mutex mutex_;  // communicators are made one at a time
  std::shared_ptr<Comm> group_;
  std::map<int, std::shared_ptr<Comm>> pairs_;
};

}  // namespace strata::distributed::detail
