// Collectives, p2p, groups and objects under mpirun -np 1, 2 and 4, against hand-worked values.

#include <strata/distributed/collectives.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "../helpers.h"

namespace dist = strata::distributed;
using dist::ReduceOp;
using strata::Tensor;
using strata::tensor_list;
using strata::testing::values;

namespace {

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

Tensor vec(std::vector<double> v, strata::ScalarType t = strata::kFloat) { return strata::tensor(v, t); }

// [rank + 1, 2 (rank + 1)]
Tensor ranked(strata::ScalarType t = strata::kFloat) { return vec({rank() + 1.0, 2.0 * (rank() + 1)}, t); }

double factorial(int n) { return n <= 1 ? 1 : n * factorial(n - 1); }

}  // namespace

TEST(Collectives, WorldBasics) {
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), world());
  EXPECT_EQ(dist::get_world_group()->describe(), "WORLD");
  EXPECT_EQ(dist::get_global_rank({}, rank()), rank());
  EXPECT_EQ(dist::get_group_rank({}, rank()), rank());
}

TEST(Collectives, AllReduceEveryOp) {
  const int n = world();
  const double tri = n * (n + 1) / 2.0;
  for (auto dtype : {strata::kFloat, strata::kDouble, strata::kLong}) {
    Tensor t = ranked(dtype);
    dist::all_reduce(t);
    EXPECT_VALUES(t, {tri, 2 * tri});
    t = ranked(dtype);
    dist::all_reduce(t, ReduceOp::PRODUCT);
    EXPECT_VALUES(t, {factorial(n), factorial(n) * std::pow(2, n)});
    t = ranked(dtype);
    dist::all_reduce(t, ReduceOp::MIN);
    EXPECT_VALUES(t, {1, 2});
    t = ranked(dtype);
    dist::all_reduce(t, ReduceOp::MAX);
    EXPECT_VALUES(t, {double(n), 2.0 * n});
  }
  Tensor avg = ranked(strata::kDouble);
  dist::all_reduce(avg, ReduceOp::AVG);
  EXPECT_VALUES(avg, {tri / n, 2 * tri / n});
}

TEST(Collectives, AllReduceBoolIsLogical) {
  Tensor any = vec({rank() == 0 ? 1.0 : 0.0, 0}, strata::kBool);
  dist::all_reduce(any, ReduceOp::SUM);
  EXPECT_VALUES(any, {1, 0});
  Tensor all = vec({1, rank() == 0 ? 0.0 : 1.0}, strata::kBool);
  dist::all_reduce(all, ReduceOp::MIN);
  EXPECT_VALUES(all, {1, 0});
}

TEST(Collectives, AllReduceNonContiguousAndAsync) {
  const int n = world();
  Tensor base = strata::arange(6, strata::kDouble).view({2, 3}) + rank();
  Tensor t = base.t();  // [3, 2], strides (1, 3)
  ASSERT_FALSE(t.is_contiguous());
  auto work = dist::all_reduce(t, ReduceOp::SUM, {}, /*async_op=*/true);
  work->wait();
  EXPECT_TRUE(work->is_completed());
  const double r = n * (n - 1) / 2.0;  // sum of ranks
  EXPECT_VALUES(base, {0 * n + r, 1.0 * n + r, 2.0 * n + r, 3.0 * n + r, 4.0 * n + r, 5.0 * n + r});
}

TEST(Collectives, ReduceToLastRank) {
  const int n = world(), dst = n - 1;
  Tensor t = ranked();
  dist::reduce(t, dst, ReduceOp::MAX);
  if (rank() == dst)
    EXPECT_VALUES(t, {double(n), 2.0 * n});
  else
    EXPECT_VALUES(t, {rank() + 1.0, 2.0 * (rank() + 1)});
}

TEST(Collectives, BroadcastFromLastRankIntoStridedTensor) {
  const int src = world() - 1;
  Tensor base = strata::zeros({2, 2});
  Tensor col = base.select(1, 1);  // stride 2
  if (rank() == src) col.copy_(vec({7, 8}));
  dist::broadcast(col, src);
  EXPECT_VALUES(base, {0, 7, 0, 8});
  auto w = dist::broadcast(col, src, {}, true);
  w->wait();
  EXPECT_VALUES(col, {7, 8});
}

TEST(Collectives, AllGatherListAndTensor) {
  const int n = world();
  tensor_list outs;
  for (int r = 0; r < n; ++r) outs.push_back(strata::empty({2}));
  dist::all_gather(outs, ranked());
  for (int r = 0; r < n; ++r) EXPECT_VALUES(outs[r], {r + 1.0, 2.0 * (r + 1)});

  Tensor concat = strata::empty({2 * n});
  dist::all_gather_into_tensor(concat, ranked());
  Tensor stacked = strata::empty({n, 2}).t();  // non-contiguous output
  dist::all_gather_into_tensor(stacked.t(), ranked(), {}, true)->wait();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(values(concat)[2 * r], r + 1.0);
    EXPECT_EQ(values(stacked.t()[r])[1], 2.0 * (r + 1));
  }
}

TEST(Collectives, ReduceScatterHandWorked) {
  const int n = world();
  // Every rank holds [0, 1, ..., n-1]: rank r gets n * r (with 2 ranks: [0] and [2]).
  Tensor out = strata::empty({1});
  dist::reduce_scatter_tensor(out, strata::arange(n, strata::kFloat));
  EXPECT_VALUES(out, {double(n) * rank()});
  tensor_list inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(vec({double(r), double(rank())}));
  Tensor out2 = strata::empty({2});
  dist::reduce_scatter(out2, inputs, ReduceOp::SUM, {}, true)->wait();
  EXPECT_VALUES(out2, {double(n) * rank(), n * (n - 1) / 2.0});
}

TEST(Collectives, GatherAndScatterAtLastRank) {
  const int n = world(), root = n - 1;
  tensor_list list;
  if (rank() == root)
    for (int r = 0; r < n; ++r) list.push_back(strata::zeros({2}));
  dist::gather(ranked(), list, root);
  if (rank() == root) {
    for (int r = 0; r < n; ++r) EXPECT_VALUES(list[r], {r + 1.0, 2.0 * (r + 1)});
  }

  tensor_list parts;
  if (rank() == root)
    for (int r = 0; r < n; ++r) parts.push_back(vec({10.0 * r, 10.0 * r + 1}));
  Tensor mine = strata::empty({2});
  dist::scatter(mine, parts, root, {}, true)->wait();
  EXPECT_VALUES(mine, {10.0 * rank(), 10.0 * rank() + 1});
}

TEST(Collectives, AllToAllHandWorked) {
  const int n = world();
  // Rank r holds [0, 1, ..., n-1] + n r; with 2 ranks rank 0 gets [0, 2] and rank 1 gets [1, 3].
  Tensor in = strata::arange(n, strata::kFloat) + n * rank();
  Tensor out = strata::empty({n});
  dist::all_to_all_single(out, in);
  std::vector<double> expect;
  for (int p = 0; p < n; ++p) expect.push_back(rank() + n * p);
  EXPECT_EQ(values(out), expect);

  tensor_list ins, outs;
  for (int p = 0; p < n; ++p) {
    ins.push_back(strata::full({p + 1}, 100.0 * rank() + p));  // p + 1 elements for rank p
    outs.push_back(strata::empty({rank() + 1}));
  }
  dist::all_to_all(outs, ins);
  for (int p = 0; p < n; ++p) EXPECT_EQ(values(outs[p]), std::vector<double>(rank() + 1, 100.0 * p + rank()));
}

TEST(Collectives, AllToAllSingleUnevenSplits) {
  const int n = world();
  // Rank r sends p + 1 rows of [r, p] to rank p and receives r + 1 rows from each.
  std::vector<int64_t> in_splits, out_splits(n, rank() + 1);
  tensor_list rows;
  for (int p = 0; p < n; ++p) {
    in_splits.push_back(p + 1);
    rows.push_back(vec({double(rank()), double(p)}).expand({p + 1, 2}));
  }
  Tensor in = strata::cat(rows);
  Tensor out = strata::empty({n * (rank() + 1), 2});
  dist::all_to_all_single(out, in, out_splits, in_splits, {}, true)->wait();
  for (int p = 0; p < n; ++p)
    for (int k = 0; k <= rank(); ++k) EXPECT_VALUES(out[p * (rank() + 1) + k], {double(p), double(rank())});
}

TEST(Collectives, PointToPointRing) {
  const int n = world();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (rank() + 1) % n, prev = (rank() + n - 1) % n;
  Tensor got = strata::empty({2});
  auto works = dist::batch_isend_irecv({{dist::P2POp::kSend, ranked(), next}, {dist::P2POp::kRecv, got, prev}});
  for (auto& w : works) w->wait();
  EXPECT_VALUES(got, {prev + 1.0, 2.0 * (prev + 1)});

  // Tags keep two messages apart even when received in the other order.
  if (rank() == 0) {
    auto a = dist::isend(vec({1}), 1, {}, 5);
    auto b = dist::isend(vec({2}), 1, {}, 6);
    a->wait();
    b->wait();
  } else if (rank() == 1) {
    Tensor six = strata::empty({1}), five = strata::empty({1}).expand({1});
    dist::recv(six, 0, {}, 6);
    dist::recv(five, 0, {}, 5);
    EXPECT_VALUES(six, {2});
    EXPECT_VALUES(five, {1});
  }
}

TEST(Collectives, RecvOfTheWrongSizeIsAnError) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  const dist::DebugLevel level = dist::get_debug_level();
  dist::set_debug_level(dist::DebugLevel::OFF);  // DETAIL reports this earlier, in its own words
  if (rank() == 0) dist::send(strata::zeros({3}), 1, {}, 9);
  if (rank() == 1)
    EXPECT_THROW_MSG(dist::recv(strata::empty({4}), 0, {}, 9),
                     "recv: expected 4 elements of Float from group rank 0 but the message holds 3");
  dist::set_debug_level(level);
}

TEST(Collectives, BarrierAndMonitoredBarrier) {
  dist::barrier();
  dist::barrier({}, true)->wait();
  dist::monitored_barrier({}, std::chrono::milliseconds(20000), true);
}

TEST(Collectives, MonitoredBarrierNamesTheLateRank) {
  const int n = world();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  auto group = dist::new_group([&] {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }());
  const int late = n - 1;
  if (rank() == late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    EXPECT_THROW_MSG(dist::monitored_barrier(group, std::chrono::milliseconds(200)),
                     "monitored_barrier: rank 0 (group rank 0 of group");
  } else if (rank() == 0) {
    EXPECT_THROW_MSG(dist::monitored_barrier(group, std::chrono::milliseconds(200), true),
                     "monitored_barrier: ranks " + std::to_string(late) + " of group");
  } else {
    EXPECT_THROW_MSG(dist::monitored_barrier(group, std::chrono::milliseconds(200)), "did not arrive within 200 ms");
  }
  dist::barrier();
  // The late rank's arrival at the failed barrier is still in flight; the next barrier skips it.
  dist::monitored_barrier(group, std::chrono::milliseconds(20000), true);
}

TEST(Collectives, DroppedAsyncSendDoesNotBlock) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  Tensor big = strata::full({1 << 18}, 3.0);     // 1 MiB: past the eager limit, so the send waits for the receive
  if (rank() == 0) dist::isend(big, 1, {}, 11);  // the Work is dropped unfinished
  dist::barrier();
  if (rank() == 1) {
    Tensor got = strata::empty({1 << 18});
    dist::recv(got, 0, {}, 11);
    EXPECT_EQ(got[12345].item<float>(), 3.0f);
  }
}

TEST(Collectives, DestroyingAGroupWithAnOpInFlight) {
  std::vector<int> all(world());
  std::iota(all.begin(), all.end(), 0);
  auto group = dist::new_group(all);
  Tensor t = ranked();
  auto work = dist::all_reduce(t, ReduceOp::SUM, group, true);
  dist::destroy_process_group(group);  // the communicator lives until the op is done
  work->wait();
  EXPECT_VALUES(t, {world() * (world() + 1) / 2.0, world() * (world() + 1.0)});
}

TEST(Collectives, CompletedMeansTheOutputsHoldTheResult) {
  const int n = world();
  tensor_list outs;
  for (int r = 0; r < n; ++r) outs.push_back(strata::zeros({2}));
  Tensor base = strata::zeros({2, 2});
  Tensor col = base.select(1, 0);  // strided: the result is copied in when the op completes
  col.copy_(ranked());
  auto gathered = dist::all_gather(outs, ranked(), {}, true);
  auto reduced = dist::all_reduce(col, ReduceOp::MAX, {}, true);
  while (!gathered->is_completed() || !reduced->is_completed()) std::this_thread::yield();
  for (int r = 0; r < n; ++r) EXPECT_VALUES(outs[r], {r + 1.0, 2.0 * (r + 1)});
  EXPECT_VALUES(base, {double(n), 0, 2.0 * n, 0});
}

TEST(Collectives, AsyncCollectiveProgressesWhileTheCallerMakesNoMpiCall) {
  // The MPI backend's progress thread (Note [progress thread] in distributed/mpi/backend.cpp) moves the reduction
  // on while this thread only reads memory, as data parallel's backward does between its gradient hooks. Without
  // it only the watchdog's MPI_Test every 20 ms moves it: 8 s at 4 ranks on 2 cores, against 0.3 s with it.
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int n = world();
  Tensor t = strata::ones({1 << 22});  // 16 MiB: many fragments, each moved only inside some MPI call
  auto work = dist::all_reduce(t, ReduceOp::SUM, {}, /*async_op=*/true);
  std::atomic_ref<float> last(t.data_ptr<float>()[t.numel() - 1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (last.load() != float(n) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(last.load(), float(n));
  work->wait();
  EXPECT_ALLCLOSE(t, strata::full({1 << 22}, n));
}

TEST(Collectives, Coalesced) {
  const int n = world();
  Tensor a = strata::full({2, 2}, rank() + 1.0), b = strata::full({3}, 1.0);
  dist::all_reduce_coalesced({a, b});
  EXPECT_EQ(values(a), std::vector<double>(4, n * (n + 1) / 2.0));
  EXPECT_EQ(values(b), std::vector<double>(3, double(n)));

  std::vector<tensor_list> outs(n);
  for (auto& o : outs) o = {strata::empty({1}), strata::empty({2, 1})};
  dist::all_gather_coalesced(outs, {vec({double(rank())}), vec({rank() + 0.5, rank() + 0.25}).view({2, 1})}, {}, true)
      ->wait();
  for (int r = 0; r < n; ++r) {
    EXPECT_VALUES(outs[r][0], {double(r)});
    EXPECT_VALUES(outs[r][1], {r + 0.5, r + 0.25});
  }
}

namespace {
struct Meta {
  int64_t step;
  double lr;
  int32_t stage;
};
}  // namespace

TEST(Collectives, Objects) {
  const int src = world() - 1;
  std::string bytes = rank() == src ? std::string("stage metadata\0with a zero", 26) : "x";
  dist::broadcast_object(bytes, src);
  EXPECT_EQ(bytes, std::string("stage metadata\0with a zero", 26));
  Meta m{rank() == src ? 42 : 0, rank() == src ? 0.5 : 0.0, rank() == src ? 3 : 0};
  dist::broadcast_object(m, src);
  EXPECT_EQ(m.step, 42);
  EXPECT_EQ(m.lr, 0.5);
  EXPECT_EQ(m.stage, 3);
  std::vector<int64_t> shape = rank() == src ? std::vector<int64_t>{4, 5, 6} : std::vector<int64_t>{};
  dist::broadcast_object(shape, src);
  EXPECT_EQ(shape, (std::vector<int64_t>{4, 5, 6}));
  if (world() < 2) return;
  if (rank() == 0) {
    dist::send_object(std::vector<int64_t>{7, 8}, 1, {}, 3);
    dist::send_object(std::string(), 1);
  }
  if (rank() == 1) {
    EXPECT_EQ(dist::recv_object<std::vector<int64_t>>(0, {}, 3), (std::vector<int64_t>{7, 8}));
    EXPECT_EQ(dist::recv_object(0), "");
  }
}

TEST(Collectives, ObjectOfTheWrongTypeIsAnError) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (rank() == 0) dist::send_object(int32_t{1}, 1);
  if (rank() == 1)
    EXPECT_THROW_MSG(dist::recv_object<Meta>(0), "recv_object: received 4 bytes, which is not the size of");
}

TEST(Collectives, PermutedGroup) {
  const int n = world();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  auto g = dist::new_group({1, 0});  // every rank calls it
  if (rank() >= 2) {
    EXPECT_FALSE(g->is_member());
    EXPECT_EQ(dist::get_rank(g), -1);
    EXPECT_THROW_MSG(dist::all_reduce(ranked(), ReduceOp::SUM, g), "is not a member of group");
    return;
  }
  EXPECT_EQ(g->rank(), 1 - rank());
  EXPECT_EQ(dist::get_global_rank(g, 0), 1);
  EXPECT_EQ(dist::get_group_rank(g, 0), 1);
  Tensor t = ranked();
  dist::broadcast(t, /*src (global)=*/1, g);  // group rank 0 is global rank 1
  EXPECT_VALUES(t, {2, 4});
  tensor_list outs{strata::empty({2}), strata::empty({2})};
  dist::all_gather(outs, ranked(), g);
  EXPECT_VALUES(outs[0], {2, 4});  // list order: group rank 0 = global 1 first
  EXPECT_VALUES(outs[1], {1, 2});
  dist::destroy_process_group(g);
  EXPECT_THROW_MSG(dist::all_reduce(t, ReduceOp::SUM, g), "was destroyed");
}

TEST(Collectives, CommOffSwitchesSkipTheOp) {
  Tensor t = ranked();
  dist::all_reduce_comm_off(true);
  dist::all_reduce(t);
  dist::all_reduce_comm_off(false);
  EXPECT_VALUES(t, {rank() + 1.0, 2.0 * (rank() + 1)});
  dist::backward_comm_off(true);
  Tensor out = strata::full({world()}, -1.0);
  dist::all_gather_into_tensor(out, vec({double(rank())}));
  dist::backward_comm_off(false);
  EXPECT_EQ(values(out), std::vector<double>(world(), -1.0));
}

TEST(Collectives, BadArgumentsSayWhatIsWrong) {
  const int n = world();
  EXPECT_THROW_MSG(dist::all_reduce(ranked(strata::kLong), ReduceOp::AVG),
                   "all_reduce: ReduceOp::AVG needs a floating dtype, got Long");
  EXPECT_THROW_MSG(dist::all_reduce(Tensor()), "all_reduce: tensor is an undefined tensor");
  EXPECT_THROW_MSG(dist::broadcast(ranked(), n), "broadcast: src " + std::to_string(n) + " is not a member of WORLD");
  EXPECT_THROW_MSG(dist::all_gather(tensor_list(n + 1, strata::empty({2})), ranked()),
                   "all_gather: tensor_list has " + std::to_string(n + 1) + " tensors but WORLD has " +
                       std::to_string(n) + " ranks");
  tensor_list wrong(n, strata::empty({3}));
  EXPECT_THROW_MSG(dist::all_gather(wrong, ranked()),
                   "all_gather: tensor_list[0] has shape [3] but the tensor has shape [2]");
  EXPECT_THROW_MSG(dist::all_gather_into_tensor(strata::empty({2 * n + 1}), ranked()),
                   "all_gather_into_tensor: output has " + std::to_string(2 * n + 1) + " elements");
  EXPECT_THROW_MSG(dist::isend(ranked(), rank(), {}, 0),
                   "isend: dst " + std::to_string(rank()) + " is this process's own rank");
  EXPECT_THROW_MSG(dist::isend(ranked(), 0, {}, -1), "isend: tag -1 is outside 0..1048575");
  if (n > 1)
    EXPECT_THROW_MSG(dist::batch_isend_irecv({{dist::P2POp::kRecv, strata::empty({2}), (rank() + 1) % n},
                                              {dist::P2POp::kSend, ranked(), n}}),
                     "batch_isend_irecv: dst " + std::to_string(n) + " is not a member of WORLD");
  EXPECT_THROW_MSG(dist::all_to_all_single(strata::empty({n + 1}), strata::empty({n}), {}, {}),
                   "all_to_all_single: without split sizes output and input need the same number of rows, got " +
                       std::to_string(n + 1) + " and " + std::to_string(n));
  if (n > 1)
    EXPECT_THROW_MSG(dist::all_to_all_single(strata::empty({n + 1}), strata::empty({n + 1}), {}, {}),
                     "all_to_all_single: output has " + std::to_string(n + 1) + " rows, not divisible");
  EXPECT_THROW_MSG(dist::new_group({0, 0}), "new_group: rank 0 appears twice in the list");
  EXPECT_THROW_MSG(dist::new_group({n}), "new_group: rank " + std::to_string(n) + " is out of range");
  EXPECT_THROW_MSG(dist::get_group_rank({}, n),
                   "get_group_rank: global rank " + std::to_string(n) + " is not a member of WORLD");
}
