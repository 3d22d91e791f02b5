// Differentiable collectives under mpirun -np 1, 2 and 4: hand-worked forward values, the backward
// contract (ranks without output or loss, roots without gradient, retain_graph, double backward),
// a two-stage model split with remote_send/remote_recv against the same model on one rank, and
// the errors. Gradients of every op are checked in test_gradcheck.cpp.

#include <numeric>

#include <strata/distributed/collectives.h>
#include <strata/distributed/functional.h>

#include "../helpers.h"
#include "switches.h"

namespace dist = strata::distributed;
namespace F = strata::distributed::functional;
using namespace strata;

namespace {

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

/// [0, 1, ..., n - 1] + offset, float64.
Tensor iota(int n, double offset = 0) { return arange(n, kDouble) + offset; }

/// A [2, 3] float64 tensor that differs on every rank r: values 6 r + 0..5.
Tensor block(int r) { return arange(6, kDouble).reshape({2, 3}) + 6.0 * r; }

}  // namespace

TEST(Functional, HandWorkedValues) {
  const int n = world(), r = rank();
  // all_to_all of [0, 1] + 2 rank on 2 ranks: rank 0 gets [0, 2], rank 1 gets [1, 3]; in general out[q] = r + n q.
  EXPECT_ALLCLOSE(F::all_to_all(iota(n, n * r)), iota(n) * n + r);
  // reduce_scatter_sum of [0, 1] on both of 2 ranks: [0] and [2]; in general rank r gets [n r].
  EXPECT_VALUES(F::reduce_scatter_sum(iota(n)), {double(n * r)});
  EXPECT_ALLCLOSE(F::all_gather(tensor({double(r)}, kDouble)), iota(n));
  // MegEngine's all_reduce examples: arange(2) + 1 + 2 rank.
  Tensor x = iota(2, 1 + 2 * r);
  EXPECT_VALUES(F::all_reduce_sum(x), {n * n + 0.0, n * n + n + 0.0});
  EXPECT_VALUES(F::all_reduce_max(x), {2.0 * n - 1, 2.0 * n});
  EXPECT_VALUES(F::all_reduce_min(x), {1, 2});
  const int root = n - 1;
  Tensor sum = F::reduce_sum(tensor({double(r)}, kDouble), {}, root);
  EXPECT_EQ(sum.defined(), r == root);
  if (r == root) {
    EXPECT_VALUES(sum, {n * (n - 1) / 2.0});
  }
  EXPECT_VALUES(F::broadcast(r == root ? tensor({7.0}, kDouble) : Tensor(), {}, root), {7});
  Tensor gathered = F::gather(tensor({double(r)}, kDouble), {}, 0, root);
  EXPECT_EQ(gathered.defined(), r == root);
  if (r == root) {
    EXPECT_ALLCLOSE(gathered, iota(n));
  }
  EXPECT_VALUES(F::scatter(r == root ? iota(n, 10) : Tensor(), {}, 0, root), {10.0 + r});
}

TEST(Functional, GroupRanksFollowTheList) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pair = dist::new_group({1, 0});  // group rank 0, the root, is global rank 1
  if (!pair->is_member()) return;
  const int r = rank();
  Tensor mine = tensor({double(r)}, kDouble);
  Tensor sum = F::reduce_sum(mine, pair);
  EXPECT_EQ(sum.defined(), r == 1);
  if (r == 1) {
    EXPECT_VALUES(sum, {1});
  }
  EXPECT_VALUES(F::broadcast(mine, pair), {1});
  EXPECT_VALUES(F::all_gather(mine, pair), {1, 0});
  EXPECT_VALUES(F::reduce_scatter_sum(iota(2), pair), {r == 1 ? 0.0 : 2.0});
  Tensor gathered = F::gather(mine, pair);
  if (r == 1) {
    EXPECT_VALUES(gathered, {1, 0});
  }
  // [0, 1] + 2 rank: global rank 1 holds [2, 3] and is group rank 0.
  Tensor pair_values = iota(2, 2 * r);
  EXPECT_VALUES(F::scatter(pair_values, pair), {r == 1 ? 2.0 : 3.0});
  // Group rank p receives part p of every group rank, in group-rank order (global 1, then global 0).
  EXPECT_ALLCLOSE(F::all_to_all(pair_values, pair), r == 1 ? tensor({2.0, 0.0}, kDouble) : tensor({3.0, 1.0}, kDouble));
}

TEST(Functional, AxisVariants) {
  const int n = world(), r = rank();
  tensor_list blocks;
  for (int q = 0; q < n; ++q) blocks.push_back(block(q));
  EXPECT_ALLCLOSE(F::all_gather(block(r), {}, 1), cat(blocks, 1));
  EXPECT_ALLCLOSE(F::all_gather(block(r), {}, -1), cat(blocks, 1));
  Tensor gathered = F::gather(block(r), {}, 1, n - 1);
  if (r == n - 1) {
    EXPECT_ALLCLOSE(gathered, cat(blocks, 1));
  }
  // reduce_scatter_sum along axis 1 of [2, 2n]: rank r keeps columns 2r, 2r + 1 of the sum.
  Tensor wide = arange(4.0 * n, kDouble).reshape({2, 2 * n}) * (r + 1);
  EXPECT_ALLCLOSE(F::reduce_scatter_sum(wide, {}, 1),
                  (arange(4.0 * n, kDouble).reshape({2, 2 * n}) * (n * (n + 1) / 2.0)).narrow(1, 2 * r, 2));
  Tensor root_wide = arange(4.0 * n, kDouble).reshape({2, 2 * n});
  EXPECT_ALLCLOSE(F::scatter(r == 0 ? root_wide : Tensor(), {}, 1), root_wide.narrow(1, 2 * r, 2));
  // all_to_all splitting axis 1 and concatenating axis 0: part r (columns 2r, 2r + 1) of every rank, stacked.
  auto mine = [&](int q) { return arange(4.0 * n, kDouble).reshape({2, 2 * n}) + 100.0 * q; };
  tensor_list parts;
  for (int q = 0; q < n; ++q) parts.push_back(mine(q).narrow(1, 2 * r, 2));
  EXPECT_ALLCLOSE(F::all_to_all(mine(r), {}, 1, 0), cat(parts, 0));
  Tensor back = F::all_to_all(F::all_to_all(mine(r), {}, 1, 0), {}, 0, 1);
  EXPECT_ALLCLOSE(back, mine(r));
}

TEST(Functional, ABadInputOnOneRankThrowsOnEveryRank) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int n = world(), r = rank();
  Tensor x = tensor({1.0, 2.0}, kDouble);
  // Only rank 1's axis is out of range: the others throw too instead of waiting for it in the collective.
  EXPECT_THROW_MSG(F::all_gather(x, {}, r == 1 ? 1 : 0),
                   r == 1 ? "functional::all_gather: dimension out of range"
                          : "functional::all_gather: global rank 1 passed bad input (see its error)");
  EXPECT_THROW_MSG(F::all_reduce_sum(r == 1 ? Tensor() : x),
                   r == 1 ? "functional::all_reduce_sum: got an undefined tensor"
                          : "functional::all_reduce_sum: global rank 1 passed bad input");
  // Every rank but 0 names a root outside the group.
  std::string others = "1";
  for (int q = 2; q < n; ++q) others += ", " + std::to_string(q);
  EXPECT_THROW_MSG(F::reduce_sum(x, {}, r == 0 ? 0 : n),
                   r == 0 ? "functional::reduce_sum: global rank" + std::string(n > 2 ? "s " : " ") + others +
                                " passed bad input (see " + (n > 2 ? "their errors)" : "its error)")
                          : "functional::reduce_sum: root " + std::to_string(n) + " is not a group rank");
  // Rooted ops whose data comes from the root check the root everywhere first.
  EXPECT_THROW_MSG(F::broadcast(x, {}, r == 1 ? -1 : 0), r == 1
                                                             ? "functional::broadcast: root -1 is not a group rank"
                                                             : "functional::broadcast: global rank 1 passed bad input");
  EXPECT_THROW_MSG(F::scatter(x, {}, 0, r == 1 ? n : 0),
                   r == 1 ? "functional::scatter: root " + std::to_string(n) + " is not a group rank"
                          : "functional::scatter: global rank 1 passed bad input");
  if (n >= 4) {
    // On {3, 1}, group rank 1 is global rank 1, whose split axis is not divisible by 2.
    auto pair = dist::new_group({3, 1});
    if (pair->is_member()) {
      EXPECT_THROW_MSG(F::all_to_all(r == 1 ? iota(3) : iota(2), pair),
                       r == 1 ? "functional::all_to_all: size 3 of axis 0" : "global rank 1 passed bad input");
    }
  }
  // The ranks stay in step.
  EXPECT_ALLCLOSE(F::all_gather(tensor({double(r)}, kDouble)), iota(n));
}

TEST(Functional, RecordsWhenAnyRankWantsGrad) {
  const int n = world();
  Tensor x = tensor({1.0, 2.0}, kDouble);
  if (rank() == 0) x.requires_grad_(true);
  Tensor y = F::all_reduce_sum(x);
  EXPECT_TRUE(y.requires_grad());  // on every rank: rank 0's input needs the others' gradients
  F::backward({(y * 2.0).sum()});
  if (rank() == 0) {
    EXPECT_VALUES(x.grad(), {2.0 * n, 2.0 * n});
  }
  Tensor z = F::all_reduce_sum(tensor({1.0}, kDouble));
  EXPECT_FALSE(z.requires_grad());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(F::all_reduce_sum(tensor({1.0}, f64())).requires_grad());
  }
}

TEST(Functional, AgreementIgnoresTheProfilingSwitches) {
  const int n = world(), r = rank();
  const strata::testing::CommSwitchesOff off{dist::all_reduce_comm_off, dist::broadcast_comm_off};
  // Only rank 0 wants gradients: the other ranks learn through the agreement all_reduce and the root's header
  // broadcast, which must still communicate. all_gather, reduce_scatter and reduce stay on.
  Tensor x = tensor({1.0 + r}, kDouble);
  if (r == 0) x.requires_grad_(true);
  Tensor gathered = F::all_gather(x);
  Tensor copy = F::broadcast(r == 0 ? x : Tensor());  // its data is not sent: garbage off the root
  EXPECT_TRUE(gathered.requires_grad());
  EXPECT_TRUE(copy.requires_grad());
  EXPECT_EQ(copy.sizes(), IntArrayRef({1}));
  EXPECT_ALLCLOSE(gathered.detach(), iota(n, 1));
  F::backward({gathered.sum() + copy.sum()});
  // reduce_scatter of every rank's ones gives n, and reduce of every rank's one gives n.
  if (r == 0) {
    EXPECT_VALUES(x.grad(), {2.0 * n});
  }
}

TEST(Functional, RanksWithoutOutputCallBackwardWithNoOutputs) {
  const int n = world(), r = rank(), root = n - 1;
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor sum = F::reduce_sum(x, {}, root);
  Tensor gathered = F::gather(x * (r + 1.0), {}, 0, root);
  if (r == root) {
    F::backward({(sum * tensor({3.0, 5.0}, kDouble)).sum() + gathered.sum()});
  } else {
    F::backward();
  }
  // reduce_sum passes the root's gradient [3, 5] to every rank; gather passes ones times (r + 1).
  EXPECT_VALUES(x.grad(), {3.0 + r + 1, 5.0 + r + 1});
}

TEST(Functional, NobodyWaitsWhenNoRankHasAGradient) {
  const int n = world(), r = rank(), root = n - 1;
  Tensor a = tensor({1.0, 2.0}, f64()), b = tensor({1.0, 2.0}, f64());
  Tensor sum = F::reduce_sum(a, {}, root);                         // the root's loss does not use it
  Tensor copy = F::broadcast(r == root ? a : Tensor(), {}, root);  // nobody's loss uses it
  Tensor max = F::all_reduce_max(b * (r + 1.0));                   // rank 0's loss uses it
  if (r == 0)
    F::backward({max.sum()});
  else
    F::backward();
  EXPECT_FALSE(a.grad().defined());
  // Rank 0's ones (the others contribute zeros) reach the rank that holds the maximum, times its factor n.
  EXPECT_ALLCLOSE(b.grad(), full({2}, r == n - 1 ? n : 0, kDouble));
}

TEST(Functional, BackwardEnteredAtACollectiveOutput) {
  // The output's grad_fn is the collective's node, which run_in_next_backward also registered: backward must take the
  // given gradient once, on every rank, at any root.
  const int n = world(), r = rank();
  const double ranks_sum = n * (n - 1) / 2.0;
  auto leaf = [&] { return (iota(2) + r).requires_grad_(true); };
  auto seed = [&](int q) { return tensor({1.0, 10.0}, kDouble) * (q + 1.0); };  // rank q's gradient
  const Tensor seeds_sum = tensor({1.0, 10.0}, kDouble) * (ranks_sum + n);

  Tensor x = leaf();
  F::backward({F::all_reduce_sum(x)}, {seed(r)});
  EXPECT_ALLCLOSE(x.grad(), seeds_sum);

  x = leaf();
  F::backward({F::all_reduce_max(x)}, {seed(r)});  // the maximum sits on the last rank
  EXPECT_ALLCLOSE(x.grad(), r == n - 1 ? seeds_sum : zeros({2}, kDouble));

  for (int root : {0, n - 1}) {
    x = leaf();
    Tensor sum = F::reduce_sum(x, {}, root);
    if (r == root) {
      F::backward({sum}, {seed(root)});
    } else {
      F::backward();
    }
    EXPECT_ALLCLOSE(x.grad(), seed(root));

    x = leaf();
    F::backward({F::broadcast(r == root ? x : Tensor(), {}, root)}, {seed(r)});
    if (r == root) {
      EXPECT_ALLCLOSE(x.grad(), seeds_sum);
    }

    x = leaf();
    Tensor gathered = F::gather(x, {}, 0, root);
    if (r == root) {
      F::backward({gathered}, {arange(2.0 * n, kDouble)});
    } else {
      F::backward();
    }
    EXPECT_ALLCLOSE(x.grad(), iota(2, 2.0 * r));

    Tensor source = iota(2 * n).requires_grad_(true);
    F::backward({F::scatter(r == root ? source : Tensor(), {}, 0, root)}, {seed(r)});
    if (r == root) {
      tensor_list seeds;
      for (int q = 0; q < n; ++q) seeds.push_back(seed(q));
      EXPECT_ALLCLOSE(source.grad(), cat(seeds, 0));
    }
  }

  x = leaf();
  F::backward({F::all_gather(x)}, {arange(2.0 * n, kDouble) * (r + 1.0)});
  EXPECT_ALLCLOSE(x.grad(), iota(2, 2.0 * r) * (ranks_sum + n));

  if (n < 2) return;
  if (r == 0) {
    x = leaf();
    F::remote_send(x, 1);
    F::backward();
    EXPECT_ALLCLOSE(x.grad(), seed(1));
  } else if (r == 1) {
    F::backward({F::remote_recv(0)}, {seed(1)});
  }
}

TEST(Functional, HeaderUsageExample) {
  // The example at the top of functional.h, as written there, run (its second part on ranks 0 and 1).
  const int n = world();
  namespace F = strata::distributed::functional;
  auto x = strata::randn({2, 3}, strata::requires_grad());
  auto y = F::all_gather(x, {}, /*axis=*/1);  // backward: reduce_scatter_sum along axis 1
  auto s = F::reduce_sum(y.sum());            // defined on the root (group rank 0) only
  F::backward(s.defined() ? strata::tensor_list{s} : strata::tensor_list{});  // every rank
  EXPECT_EQ(s.defined(), rank() == 0);
  EXPECT_ALLCLOSE(x.grad(), full({2, 3}, double(n)));  // every rank's y.sum() holds x once
  if (n < 2 || rank() > 1) return;
  const Tensor before = x.grad().clone();

  int rank = strata::distributed::get_rank();  // two stages, on ranks 0 and 1
  if (rank == 0) {
    F::remote_send(x, 1);
    F::backward();
  }  // x's grad comes back from rank 1
  else
    F::backward({F::remote_recv(0).tanh().sum()});  // shape and dtype come from the sender
  if (rank == 0) {
    EXPECT_ALLCLOSE(x.grad() - before, 1.0 - x.detach().tanh().pow(2));
  }
}

TEST(Functional, RetainGraphKeepsCollectivesPending) {
  const int n = world();
  Tensor x = tensor({1.0}, f64());
  Tensor loss = F::all_reduce_sum(x).sum();
  F::backward({loss}, {}, /*retain_graph=*/true);
  F::backward({loss});
  EXPECT_VALUES(x.grad(), {2.0 * n});
}

TEST(Functional, DoubleBackwardThroughACollective) {
  const int n = world();
  Tensor x = (tensor({1.0, 2.0}, kDouble) + rank()).requires_grad_(true);
  Tensor y = F::all_reduce_sum(x);  // S, the same on every rank
  autograd::backward({(y * y).sum()}, {}, std::nullopt, /*create_graph=*/true);
  // The global loss is n sum(S^2), so each rank's gradient is 2 n S, and that of the sum of those 2 n^2.
  EXPECT_ALLCLOSE(x.grad(), (tensor({1.0, 2.0}, kDouble) * n + n * (n - 1) / 2.0) * (2.0 * n));
  Tensor g = x.grad();
  x.mutable_grad() = Tensor();
  F::backward({g.sum()});
  EXPECT_VALUES(x.grad(), {2.0 * n * n, 2.0 * n * n});
}

TEST(Functional, RemoteSendAndRecv) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (rank() == 0) {
    Tensor base = tensor({1.0, 2.0, 3.0, 4.0}, kDouble).reshape({2, 2}).requires_grad_(true);
    Tensor unused = tensor({1.0}, f64());
    F::remote_send(base.t(), 1);  // non-contiguous
    F::remote_send(tensor({int64_t{5}, int64_t{6}}), 1);
    F::remote_send(unused, 1);  // the receiver's loss does not use it: no gradient comes back
    F::backward();
    EXPECT_VALUES(base.grad(), {3, 30, 300, 3000});  // the transposed gradient, in base's layout
    EXPECT_FALSE(unused.grad().defined());
  } else if (rank() == 1) {
    Tensor y = F::remote_recv(0);
    EXPECT_EQ(y.sizes(), IntArrayRef({2, 2}));
    EXPECT_TRUE(y.requires_grad());
    EXPECT_VALUES(y, {1, 3, 2, 4});
    Tensor ints = F::remote_recv(0);
    EXPECT_EQ(ints.dtype(), kLong);
    EXPECT_FALSE(ints.requires_grad());
    EXPECT_VALUES(ints, {5, 6});
    EXPECT_TRUE(F::remote_recv(0).requires_grad());
    F::backward({(y * tensor({3.0, 300.0, 30.0, 3000.0}, kDouble).reshape({2, 2})).sum()});
  }
}

namespace {

/// Linear-tanh-Linear (stage 0) then Linear and a mean squared error (stage 1).
struct TwoStageModel {
  Tensor w1, b1, w2, b2, w3, b3;
  explicit TwoStageModel(uint64_t seed) {
    Generator gen(seed);
    auto param = [&](IntArrayRef sizes) { return (randn(sizes, kDouble, &gen) * 0.5).requires_grad_(true); };
    w1 = param({3, 5}), b1 = param({5}), w2 = param({5, 4}), b2 = param({4}), w3 = param({4, 2}), b3 = param({2});
  }
  Tensor stage0(const Tensor& x) const { return (x.matmul(w1) + b1).tanh().matmul(w2) + b2; }
  Tensor stage1(const Tensor& h, const Tensor& target) const { return (h.matmul(w3) + b3 - target).pow(2).mean(); }
  tensor_list stage0_params() const { return {w1, b1, w2, b2}; }
  tensor_list stage1_params() const { return {w3, b3}; }
};

void sgd_step(const tensor_list& params, double lr) {
  NoGradGuard no_grad;
  for (Tensor p : params) {
    p.sub_(p.grad() * lr);
    p.mutable_grad() = Tensor();
  }
}

}  // namespace

TEST(Functional, TwoStageModelMatchesOneRank) {
  if (world() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (rank() > 1) return;
  Generator data(7);
  const Tensor x = randn({6, 3}, kDouble, &data), target = randn({6, 2}, kDouble, &data);
  TwoStageModel split(42), whole(42);
  for (int step = 0; step < 3; ++step) {
    Tensor loss = whole.stage1(whole.stage0(x), target);
    loss.backward();
    if (rank() == 0) {
      F::remote_send(split.stage0(x), 1);
      F::backward();
      for (size_t i = 0; i < 4; ++i) EXPECT_ALLCLOSE(split.stage0_params()[i].grad(), whole.stage0_params()[i].grad());
      sgd_step(split.stage0_params(), 0.1);
    } else {
      Tensor split_loss = split.stage1(F::remote_recv(0), target);
      EXPECT_ALLCLOSE(split_loss, loss);
      F::backward({split_loss});
      for (size_t i = 0; i < 2; ++i) EXPECT_ALLCLOSE(split.stage1_params()[i].grad(), whole.stage1_params()[i].grad());
      sgd_step(split.stage1_params(), 0.1);
    }
    sgd_step(whole.stage0_params(), 0.1);
    sgd_step(whole.stage1_params(), 0.1);
  }
  const tensor_list mine = rank() == 0 ? split.stage0_params() : split.stage1_params();
  const tensor_list reference = rank() == 0 ? whole.stage0_params() : whole.stage1_params();
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_ALLCLOSE(mine[i], reference[i]);
}

TEST(Functional, GroupOutlivesItsHandleButNotItsDestruction) {
  std::vector<int> everyone(world());
  std::iota(everyone.begin(), everyone.end(), 0);
  Tensor x = tensor({1.0}, f64());
  Tensor y = F::all_reduce_sum(x, dist::new_group(everyone));  // the handle dies here, the group lives on
  F::backward({y.sum()});
  EXPECT_VALUES(x.grad(), {double(world())});
  auto group = dist::new_group(everyone);
  Tensor z = F::all_reduce_sum(x, group);
  dist::destroy_process_group(group);
  EXPECT_THROW_MSG(F::backward({z.sum()}), "runs backward after destroy_process_group destroyed the group");
}

TEST(Functional, Errors) {
  const int n = world();
  Tensor x = tensor({1.0, 2.0}, kDouble);
  EXPECT_THROW_MSG(F::all_gather(x, {}, 1), "functional::all_gather: dimension out of range");
  EXPECT_THROW_MSG(F::all_to_all(iota(n), {}, 0, -2), "functional::all_to_all: dimension out of range");
  EXPECT_THROW_MSG(F::gather(tensor({1.0}, kDouble).reshape({}), {}, 0),
                   "functional::gather: needs a tensor with at least one dimension");
  EXPECT_THROW_MSG(F::reduce_sum(x, {}, n), "functional::reduce_sum: root " + std::to_string(n) +
                                                " is not a group rank of WORLD (" + std::to_string(n) + " ranks)");
  EXPECT_THROW_MSG(F::broadcast(x, {}, -1), "functional::broadcast: root -1 is not a group rank");
  EXPECT_THROW_MSG(F::scatter(x, {}, 0, n), "functional::scatter: root");
  EXPECT_THROW_MSG(F::all_reduce_sum(Tensor()), "functional::all_reduce_sum: got an undefined tensor");
  // Every rank learns from the root's header that it has nothing to broadcast.
  EXPECT_THROW_MSG(F::broadcast(Tensor()),
                   "functional::broadcast: the root (group rank 0, global rank 0) passed an "
                   "undefined tensor");
  EXPECT_THROW_MSG(F::remote_send(x, rank()),
                   "functional::remote_send: rank " + std::to_string(rank()) + " cannot exchange with itself");
  EXPECT_THROW_MSG(F::remote_recv(rank()), "cannot exchange with itself");
  EXPECT_THROW_MSG(F::remote_send(x, n),
                   "functional::remote_send: dest_rank " + std::to_string(n) + " is not a rank of WORLD");
  if (n == 1) return;
  const std::string indivisible = "is not divisible by the group size " + std::to_string(n);
  Tensor odd = arange(n + 1.0, kDouble);
  EXPECT_THROW_MSG(F::reduce_scatter_sum(odd), "functional::reduce_scatter_sum: size " + std::to_string(n + 1) +
                                                   " of axis 0 of a tensor of shape [" + std::to_string(n + 1) + "] " +
                                                   indivisible);
  EXPECT_THROW_MSG(F::all_to_all(odd), indivisible);
  // The root's shape travels first, so every rank throws.
  EXPECT_THROW_MSG(F::scatter(rank() == 0 ? odd.reshape({1, n + 1}) : Tensor(), {}, 1), indivisible);
  if (rank() == 0) {
    EXPECT_THROW_MSG(F::remote_send(Tensor(), 1), "functional::remote_send: got an undefined tensor");
  } else if (rank() == 1) {
    EXPECT_THROW_MSG(F::remote_recv(0), "functional::remote_recv: rank 0 sent an undefined tensor");
  }
  auto pair = dist::new_group({0, 1});
  if (!pair->is_member()) {
    EXPECT_THROW_MSG(F::all_reduce_sum(x, pair), "is not a member of group");
  }
}
