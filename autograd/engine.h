#pragma once
// Running the graph backwards.
//
//   auto x = strata::randn({3}, strata::requires_grad());
//   auto y = (x * x * x).sum();
//   y.backward({}, /*retain_graph=*/true);             // accumulates into leaves' grad(): 3 x^2
//   auto g = strata::autograd::grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
//   auto gg = strata::autograd::grad({g[0].sum()}, {x}); // a second derivative: 6 x
//   auto w = strata::randn({3, 3}, strata::requires_grad());
//   auto h = strata::randn({2, 3}, strata::requires_grad());  // a pipeline stage's input
//   auto b_pass = strata::autograd::backward_input({h.matmul(w).sum()}, {}, {h});  // h.grad() is set
//   b_pass.run();                                        // w.grad() now, as backward() would have

#include <functional>
#include <memory>
#include <optional>

#include "strata/tensor/tensor.h"

/// Reverse-mode automatic differentiation: the graph, the backward engine, custom Functions, gradcheck, checkpoint.
namespace strata::autograd {

struct Node;

/// Backpropagates from `outputs` (grad_outputs may be empty for one-element outputs) into leaves' grad().
/// Also runs the nodes registered with run_in_next_backward; `outputs` may be empty to run only those.
void backward(const tensor_list& outputs, const tensor_list& grad_outputs = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

/// What a split backward's first half (backward_input) left: the parameters' gradients (zero bubble's "W").
class DeferredWeightGrad {
 public:
  DeferredWeightGrad();
  ~DeferredWeightGrad();
  DeferredWeightGrad(DeferredWeightGrad&&) noexcept;             ///< takes over the work left
  DeferredWeightGrad& operator=(DeferredWeightGrad&&) noexcept;  ///< takes over the work left
  /// Computes and accumulates the gradients left, running their hooks (post-accumulate hooks fire here);
  /// once. Dropping the object without run() computes none of them.
  void run();
  bool pending() const;  ///< whether run() has work left

 private:
  struct State;
  std::unique_ptr<State> state_;
  friend DeferredWeightGrad backward_input(const tensor_list&, const tensor_list&, const tensor_list&, bool);
};

/// The first half ("B") of backward() split for zero-bubble pipelines: backpropagates from `outputs` through
/// the nodes that lead to `inputs` only, accumulating the inputs' gradients into their grad(), and returns
/// the rest, the parameters' gradients, for later. Ops that can (matmul, convolution) compute their weight
/// gradient in the second half; the others compute all of theirs now and W only carries them on. B then W
/// gives what backward() gives, bit for bit: every gradient is summed in backward()'s order, and every node
/// and hook runs once. Also runs the nodes registered with run_in_next_backward.
DeferredWeightGrad backward_input(const tensor_list& outputs, const tensor_list& grad_outputs,
                                  const tensor_list& inputs, bool retain_graph = false);

/// Makes `node` run in this thread's next backward() whether or not its outputs reach it (with undefined
/// gradients when none arrives). Ops that span processes use it so that every rank joins the backward
/// collective; a backward with retain_graph keeps the node registered for the next one.
void run_in_next_backward(std::shared_ptr<Node> node);

/// Takes back every node run_in_next_backward registered on this thread and not yet run, oldest first (the
/// caller may register again those it keeps). gradcheck uses it to see that a function ran ops that span processes.
std::vector<std::shared_ptr<Node>> take_next_backward_nodes();

/// Runs `callback` once the backward pass now running on this thread has finished (as torch's
/// Engine::queue_callback); callable only from inside a backward, e.g. from a hook. Data parallel uses it
/// to wait for its gradient all-reduces.
void queue_callback(std::function<void()> callback);

/// Clears the grad() of each tensor: undefined when set_to_none (torch's default), else zero-filled in place.
/// Module::zero_grad and Optimizer::zero_grad call it.
void zero_grad(const tensor_list& tensors, bool set_to_none = true);

/// Gradients of `outputs` with respect to `inputs`, returned instead of accumulated. retain_graph
/// defaults to create_graph; allow_unused returns undefined tensors for inputs the outputs do not use.
tensor_list grad(const tensor_list& outputs, const tensor_list& inputs, const tensor_list& grad_outputs = {},
                 std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);

}  // namespace strata::autograd
