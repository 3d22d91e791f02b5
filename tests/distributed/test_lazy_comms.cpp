// Communicators made on first use (Note [lazy communicators], distributed/detail/lazy_comms.h), the protocol
// the NCCL backend makes its communicators with, under mpirun -np 1..4. A fake communicator records the id
// and place it was made from and, as ncclCommInitRank, returns only once every rank of it is making it, so
// that what runs here is the protocol itself: nothing is made before it is asked for, every rank of a group
// or pair gets the same id, and batches that make every pair at once, or a ring's, do not deadlock.

#include <mpi.h>

#include <array>
#include <atomic>

#include <strata/distributed/collectives.h>
#include <strata/distributed/detail/lazy_comms.h>

#include "../helpers.h"

namespace dist = strata::distributed;
using namespace strata;

namespace {

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

using Id = std::array<int64_t, 3>;

struct FakeComm {
  Id id;
  int nranks;
  int rank;
};

/// Lazy communicators of WORLD on a private duplicate of its MPI communicator (a collective), counting what
/// they make. An id is {unique number, 0, the global rank that made it}.
struct Lazy {
  std::atomic<int> ids{0}, comms{0};
  std::unique_ptr<dist::detail::LazyComms<FakeComm, Id>> comms_of;
  MPI_Comm rendezvous = MPI_COMM_NULL;

  explicit Lazy(bool fail_ids = false) {
    MPI_Comm_dup(MPI_COMM_WORLD, &rendezvous);
    auto host = dist::get_world_group()->backend(kCPU, "test").split(rank());
    auto make_id = [this, fail_ids] {
      STRATA_CHECK(!fail_ids, "no id today");
      return Id{rank() * 1000 + ids++, 0, rank()};
    };
    auto make_comm = [this](const Id& id, int nranks, int r) {
      meet(id, nranks, r);
      ++comms;
      return std::make_shared<FakeComm>(FakeComm{id, nranks, r});
    };
    comms_of = std::make_unique<dist::detail::LazyComms<FakeComm, Id>>(std::move(host), rank(), make_id, make_comm);
  }
  ~Lazy() { MPI_Comm_free(&rendezvous); }

  // Returns once the other ranks of the communicator are making it too. A pair's: rank 1 sends to the id's
  // maker (rank 0) synchronously, which completes only once the maker receives it. WORLD's: a barrier.
  void meet(const Id& id, int nranks, int r) const {
    const int tag = static_cast<int>(id[0]);
    if (nranks == 2 && r == 1) MPI_Ssend(nullptr, 0, MPI_BYTE, static_cast<int>(id[2]), tag, rendezvous);
    if (nranks == 2 && r == 0) MPI_Recv(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, tag, rendezvous, MPI_STATUS_IGNORE);
    if (nranks == world() && nranks > 2) MPI_Barrier(rendezvous);
  }
};

/// Every rank's value of `v`.
std::vector<int64_t> everyone(int64_t v) {
  Tensor all = zeros({world()}, kLong);
  dist::all_gather_into_tensor(all, tensor(std::vector<int64_t>{v}));
  return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + world());
}

}  // namespace

TEST(LazyComms, NothingIsMadeBeforeTheFirstUse) {
  Lazy lazy;
  EXPECT_EQ(lazy.ids, 0);
  EXPECT_EQ(lazy.comms, 0);
}

TEST(LazyComms, TheGroupsCommunicatorIsMadeOnceWithRankZerosId) {
  Lazy lazy;
  std::shared_ptr<FakeComm> comm = lazy.comms_of->group();
  EXPECT_EQ(comm->nranks, world());
  EXPECT_EQ(comm->rank, rank());
  EXPECT_EQ(comm->id[2], 0) << "the id is rank 0's";
  EXPECT_EQ(lazy.ids, rank() == 0 ? 1 : 0);
  for (int64_t word : everyone(comm->id[0])) EXPECT_EQ(word, comm->id[0]);
  EXPECT_EQ(lazy.comms_of->group(), comm) << "made once";
  EXPECT_EQ(lazy.comms, 1);
}

TEST(LazyComms, EveryPairOfABatchAgreesOnItsIdWithoutDeadlock) {
  Lazy lazy;
  // Each rank's batch meets every other rank, listed in an order of its own: the batch sorts them.
  std::vector<int> peers;
  for (int p = world() - 1; p >= 0; --p)
    if (p != rank()) peers.push_back(p);
  lazy.comms_of->make_pairs(peers);
  EXPECT_EQ(lazy.comms, world() - 1);
  EXPECT_EQ(lazy.ids, world() - 1 - rank()) << "one id per higher peer";
  // ids[r][p]: rank r's id with rank p, gathered on every rank.
  std::vector<int64_t> row(world(), 0);
  for (int p = 0; p < world(); ++p) {
    if (p == rank()) continue;
    std::shared_ptr<FakeComm> comm = lazy.comms_of->pair(p);
    EXPECT_EQ(comm->nranks, 2);
    EXPECT_EQ(comm->rank, rank() < p ? 0 : 1);
    EXPECT_EQ(comm->id[2], std::min(rank(), p)) << "made by the lower rank";
    row[p] = comm->id[0];
  }
  EXPECT_EQ(lazy.comms, world() - 1) << "pair() finds what the batch made";
  Tensor ids = zeros({world() * world()}, kLong);
  dist::all_gather_into_tensor(ids, tensor(row));
  auto id = [&](int r, int p) { return ids.data_ptr<int64_t>()[r * world() + p]; };
  for (int r = 0; r < world(); ++r)
    for (int p = 0; p < world(); ++p) {
      if (p == r) continue;
      EXPECT_EQ(id(r, p), id(p, r)) << "ranks " << r << " and " << p;
      for (int q = p + 1; q < world(); ++q)
        if (q != r) {
          EXPECT_NE(id(r, p), id(r, q)) << "rank " << r << "'s pairs share an id";
        }
    }
}

TEST(LazyComms, ARingsFirstExchangeMadeByBatchesCompletes) {
  if (world() < 3) GTEST_SKIP() << "needs 3 ranks";
  Lazy lazy;
  const int next = (rank() + 1) % world(), prev = (rank() + world() - 1) % world();
  lazy.comms_of->make_pairs({next, prev});
  const std::vector<int64_t> to_next = everyone(lazy.comms_of->pair(next)->id[0]);
  const std::vector<int64_t> to_prev = everyone(lazy.comms_of->pair(prev)->id[0]);
  for (int r = 0; r < world(); ++r)
    EXPECT_EQ(to_next[r], to_prev[(r + 1) % world()]) << "rank " << r << " and its next";
}

TEST(LazyComms, ARankThatCannotMakeTheIdFailsEveryRank) {
  Lazy lazy(/*fail_ids=*/true);
  EXPECT_THROW_MSG(lazy.comms_of->group(),
                   rank() == 0 ? "no id today" : "rank 0 of the group could not make the communicator's id");
  if (world() < 2) return;
  const int peer = rank() == 0 ? 1 : rank() == 1 ? 0 : -1;
  if (peer < 0) return;
  EXPECT_THROW_MSG(lazy.comms_of->pair(peer),
                   rank() == 0 ? "no id today" : "rank 0 of the group could not make the communicator's id");
}

TEST(LazyComms, ASplitMakesNothingAndItsGroupIsItsOwn) {
  Lazy lazy;
  const int index = rank() % 2 == 0 ? rank() / 2 : -1;  // the even ranks
  auto sub = lazy.comms_of->split(index);
  EXPECT_EQ(sub != nullptr, index >= 0);
  EXPECT_EQ(lazy.comms, 0);
  if (sub) {
    std::shared_ptr<FakeComm> comm = sub->group();
    EXPECT_EQ(comm->nranks, (world() + 1) / 2);
    EXPECT_EQ(comm->rank, index);
  }
}
