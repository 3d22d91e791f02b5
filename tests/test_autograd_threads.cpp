// Backward passes on several threads at once (Note [pass state] in autograd/engine.cpp): over one graph with
// retain_graph, over graphs of their own that share parameters, and with grad() and checkpointed blocks.
// The data are small integers in float64, so every product and sum is exact and any order of accumulation
// gives the same bits: the threaded gradients must equal the serial ones exactly. The ThreadSanitizer build
// (scripts/tsan) runs these tests too.

#include <strata/autograd/checkpoint.h>

#include <thread>
#include <vector>

#include "helpers.h"

using namespace strata;
using strata::testing::same_tensor;

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 25;

// Integers in [-3, 3], as float64.
Tensor small_ints(IntArrayRef sizes, uint64_t seed) {
  manual_seed(seed);
  return randint(-3, 4, sizes, TensorOptions(kDouble));
}

struct Net {
  Tensor w1 = small_ints({6, 8}, 1).requires_grad_();
  Tensor w2 = small_ints({8, 3}, 2).requires_grad_();
  // Each accumulation into w2 counts itself; the increment is safe only if hooks run under the leaf's lock.
  int w2_accumulations = 0;
  Net() {
    w2.register_post_accumulate_grad_hook([this](const Tensor&) { ++w2_accumulations; });
  }
  Tensor loss(const Tensor& x) const { return matmul(relu(matmul(x, w1)), w2).sum(); }
  Tensor checkpointed_loss(const Tensor& x) const {
    auto block = [this](const tensor_list& in) { return tensor_list{relu(matmul(in[0], w1))}; };
    return matmul(autograd::checkpoint(block, {x}, {w1})[0], w2).sum();
  }
  void zero_grad() {
    w1.mutable_grad() = Tensor();
    w2.mutable_grad() = Tensor();
    w2_accumulations = 0;
  }
};

void run_threads(const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
  for (std::thread& thread : threads) thread.join();
}

TEST(AutogradThreads, ThreadsBackwardThroughOneGraph) {
  Net net;
  const Tensor x = small_ints({5, 6}, 3);
  const Tensor loss = net.loss(x);
  loss.backward({}, /*retain_graph=*/true);
  const Tensor g1 = net.w1.grad().clone(), g2 = net.w2.grad().clone();
  net.zero_grad();

  run_threads([&](int) {
    for (int r = 0; r < kRounds; ++r) loss.backward({}, /*retain_graph=*/true);
  });
  EXPECT_TRUE(same_tensor(net.w1.grad(), g1 * (kThreads * kRounds)));
  EXPECT_TRUE(same_tensor(net.w2.grad(), g2 * (kThreads * kRounds)));
  EXPECT_EQ(net.w2_accumulations, kThreads * kRounds);
}

TEST(AutogradThreads, ThreadsWithGraphsOfTheirOwnShareTheParameters) {
  Net net;
  std::vector<Tensor> inputs;
  for (int t = 0; t < kThreads; ++t) inputs.push_back(small_ints({5, 6}, 10 + t));
  Tensor want1 = zeros({6, 8}, TensorOptions(kDouble)), want2 = zeros({8, 3}, TensorOptions(kDouble));
  for (const Tensor& x : inputs) {
    net.loss(x).backward();
    want1 += net.w1.grad() * kRounds;
    want2 += net.w2.grad() * kRounds;
    net.zero_grad();
  }

  // Each thread records its own graphs over the shared leaves (and so their one accumulator each).
  run_threads([&](int t) {
    for (int r = 0; r < kRounds; ++r) net.loss(inputs[t]).backward();
  });
  EXPECT_TRUE(same_tensor(net.w1.grad(), want1));
  EXPECT_TRUE(same_tensor(net.w2.grad(), want2));
  EXPECT_EQ(net.w2_accumulations, kThreads * kRounds);
}

// grad() over a shared graph, and checkpointed blocks whose backward runs a pass nested in the outer one
// while other threads' passes reach the same accumulators.
TEST(AutogradThreads, GradAndCheckpointedBlocksOnSeveralThreads) {
  Net net;
  Tensor x = small_ints({5, 6}, 4).requires_grad_();
  const Tensor shared = net.loss(x);
  const tensor_list want = autograd::grad({shared}, {x, net.w1}, {}, /*retain_graph=*/true);
  net.checkpointed_loss(x).backward();
  const Tensor want1 = net.w1.grad().clone(), want2 = net.w2.grad().clone(), want_x = x.grad().clone();
  net.zero_grad();
  x.mutable_grad() = Tensor();

  std::vector<int> mismatches(kThreads, 0);
  run_threads([&](int t) {
    for (int r = 0; r < kRounds; ++r) {
      if (t % 2 == 0) {
        const tensor_list g = autograd::grad({shared}, {x, net.w1}, {}, /*retain_graph=*/true);
        mismatches[t] += !same_tensor(g[0], want[0]) || !same_tensor(g[1], want[1]);
      } else {
        net.checkpointed_loss(x).backward();
      }
    }
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  const int passes = kThreads / 2 * kRounds;  // the odd threads' backward() calls
  EXPECT_TRUE(same_tensor(net.w1.grad(), want1 * passes));
  EXPECT_TRUE(same_tensor(net.w2.grad(), want2 * passes));
  EXPECT_TRUE(same_tensor(x.grad(), want_x * passes));
  EXPECT_EQ(net.w2_accumulations, passes);
}

}  // namespace
