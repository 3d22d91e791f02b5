// Post-accumulate-grad hooks and autograd::queue_callback, the two engine hooks data parallel
// builds on: when they run, what they see, removal, and the errors.

#include <stdexcept>
#include <string>
#include <vector>

#include "helpers.h"

using namespace strata;

TEST(PostAccumulateGradHook, RunsAfterTheTensorHooksInRegistrationOrder) {
  Tensor x = leaf({2});
  std::vector<std::string> events;
  x.register_hook([&](const Tensor&) { events.push_back("tensor hook"); });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("post 1"); });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("post 2"); });
  (x * 2).sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"tensor hook", "post 1", "post 2"}));
}

TEST(PostAccumulateGradHook, SeesTheLeafWithItsAccumulatedGrad) {
  Tensor x = leaf({2});
  std::vector<std::vector<double>> seen;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    EXPECT_TRUE(t.is_same(x));
    seen.push_back(strata::testing::values(t.grad()));
  });
  (x * 2).sum().backward();
  (x * 3).sum().backward();  // accumulates: 2 + 3
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<double>{2, 2}));
  EXPECT_EQ(seen[1], (std::vector<double>{5, 5}));
}

TEST(PostAccumulateGradHook, RunsOncePerBackwardForALeafUsedTwice) {
  Tensor x = leaf({2});
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++calls;
    EXPECT_VALUES(t.grad(), {5, 5});  // both uses summed before the hook
  });
  (x * 2 + x * 3).sum().backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, RemovedHooksDoNotRun) {
  Tensor x = leaf({2});
  int first = 0, second = 0;
  const unsigned h = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++first; });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++second; });
  x.remove_post_accumulate_grad_hook(h);
  x.sum().backward();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  EXPECT_THROW_MSG(x.remove_post_accumulate_grad_hook(7), "remove_post_accumulate_grad_hook: invalid hook handle 7");
}

TEST(PostAccumulateGradHook, Errors) {
  Tensor x = leaf({2});
  EXPECT_THROW_MSG(zeros({2}).register_post_accumulate_grad_hook([](const Tensor&) {}),
                   "register_post_accumulate_grad_hook: only leaf tensors that require grad");
  EXPECT_THROW_MSG((x * 2).register_post_accumulate_grad_hook([](const Tensor&) {}),
                   "register_post_accumulate_grad_hook: only leaf tensors that require grad");
  EXPECT_THROW_MSG(x.register_post_accumulate_grad_hook(nullptr),
                   "register_post_accumulate_grad_hook: got an empty hook");
}

TEST(QueueCallback, RunsOnceAfterEveryNodeOfThePass) {
  Tensor a = leaf({2}), b = leaf({2});
  std::vector<std::string> events;
  auto queue_once = [&](const Tensor& t) {
    events.push_back(t.is_same(a) ? "a" : "b");
    if (events.size() > 1) return;
    autograd::queue_callback([&] {
      EXPECT_TRUE(a.grad().defined() && b.grad().defined());
      events.push_back("callback");
    });
  };
  a.register_post_accumulate_grad_hook(queue_once);
  b.register_post_accumulate_grad_hook(queue_once);
  (a * b).sum().backward();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2], "callback");
  // A pass runs only the callbacks queued during it: the first one's does not run again.
  events.clear();
  a.sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"a", "callback"}));
}

TEST(QueueCallback, ACallbackMayQueueAnother) {
  Tensor x = leaf({2});
  std::vector<std::string> events;
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] {
      events.push_back("first");
      autograd::queue_callback([&] { events.push_back("second"); });
    });
  });
  x.sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"first", "second"}));
}

TEST(QueueCallback, Errors) {
  EXPECT_THROW_MSG(autograd::queue_callback([] {}),
                   "queue_callback: no backward pass is running on this thread; call it from a hook");
  Tensor x = leaf({2});
  x.register_post_accumulate_grad_hook([](const Tensor&) { autograd::queue_callback(nullptr); });
  EXPECT_THROW_MSG(x.sum().backward(), "queue_callback: got an empty callback");
  // A pass that threw leaves nothing behind: queue_callback outside a backward still refuses.
  EXPECT_THROW_MSG(autograd::queue_callback([] {}), "queue_callback: no backward pass is running");
}

TEST(QueueCallback, APassThatThrowsDropsItsCallbacks) {
  Tensor x = leaf({2});
  int ran = 0;
  Tensor y = x * 2;
  y.register_hook([&](const Tensor&) { autograd::queue_callback([&] { ++ran; }); });
  const unsigned h = x.register_post_accumulate_grad_hook([](const Tensor&) { throw std::runtime_error("boom"); });
  EXPECT_THROW(y.sum().backward(), std::runtime_error);
  x.remove_post_accumulate_grad_hook(h);
  (x * 3).sum().backward();  // the failed pass's callback must not run here
  EXPECT_EQ(ran, 0);
}
