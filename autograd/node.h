#pragma once
// The recorded graph: a Node per differentiable op, Edges to the nodes of its inputs, and
// the state autograd keeps on a tensor. Used by op implementations; users rarely need it.
//
//   auto my_exp = [](const Tensor& x) {
//     Tensor y = x.detach().exp();                     // forward, without history
//     if (auto node = autograd::record("ExpBackward", {x}, {y}))
//       node->backward = [y = autograd::SavedVariable(y, true)](const tensor_list& g) -> tensor_list {
//         return {g[0] * y.unpack()};                   // backward, beside it
//       };
//     return y;
//   };

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/tensor/tensor.h"

namespace strata::autograd {

struct Node;

/// Where a gradient goes: input `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;                     ///< the consumer of the gradient; null when the input needs none
  uint32_t input_nr = 0;                        ///< which of fn's gradient inputs
  bool valid() const { return fn != nullptr; }  ///< false when no gradient is needed
};

/// A hook on a gradient flowing into a node; returns a replacement or an undefined tensor to keep it.
using GradHook = std::function<Tensor(const Tensor&)>;

/// A backward function in the graph. apply() maps the gradients of the op's outputs to the
/// gradients of its inputs, in the order of next_edges.
struct Node : std::enable_shared_from_this<Node> {
  explicit Node(uint32_t num_outputs = 1);  ///< for an op with num_outputs outputs (gradients apply() receives)
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual tensor_list apply(tensor_list&& grads) = 0;  ///< one gradient per output in, one per edge out
  virtual const char* name() const = 0;                ///< e.g. "MulBackward"
  virtual void release_variables() {}                  ///< drops saved tensors after a backward without retain_graph
  /// Whether apply_some() computes only the gradients asked for (a split backward then defers the rest).
  virtual bool splits() const { return false; }
  /// Whether apply() communicates with other processes (a collective), which gradcheck on one process cannot check.
  virtual bool spans_processes() const { return false; }
  /// For a split backward (autograd::backward_input): the gradients of the edges `wanted` marks, the others
  /// undefined; grads stays the caller's, who asks for the rest later. The default computes all of them.
  virtual tensor_list apply_some(const tensor_list& grads, const std::vector<bool>& wanted);

  std::vector<Edge> next_edges;  ///< one per differentiable input
  uint32_t num_outputs;          ///< how many gradients apply() receives
  uint64_t sequence_nr;          ///< creation order; the engine runs later nodes first
  /// Hooks on the incoming gradient of output `output_nr`, run before apply(); null slots were removed.
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks;
  /// Applied even when no gradient arrives (set by run_in_next_backward for cross-process ops).
  bool always_run = false;
};

/// A node whose backward is a lambda; most ops use it through record().
struct LambdaNode final : Node {
  /// For op `name` (a string literal, what name() returns) with num_outputs outputs.
  LambdaNode(const char* name, uint32_t num_outputs) : Node(num_outputs), name_(name) {}
  tensor_list apply(tensor_list&& grads) override;
  const char* name() const override { return name_; }
  void release_variables() override {
    backward = nullptr;
    backward_some = nullptr;
  }
  bool splits() const override { return static_cast<bool>(backward_some); }
  tensor_list apply_some(const tensor_list& grads, const std::vector<bool>& wanted) override;
  /// Gradients of the outputs to gradients of the inputs (one per edge; undefined = none). A multi-output
  /// node gets undefined tensors for outputs that received no gradient.
  std::function<tensor_list(const tensor_list&)> backward;
  /// Optional: the same for only the inputs `wanted` marks (the others undefined). Ops whose input gradients
  /// are separate products (matmul, convolution) set it, so a split backward computes the weight's in W.
  std::function<tensor_list(const tensor_list&, const std::vector<bool>& wanted)> backward_some;

 private:
  const char* name_;
};

/// g itself when nothing else holds it and it is contiguous, else a clone (what a leaf may keep as grad()).
Tensor take_or_clone(Tensor&& g);

/// Accumulates into a leaf's grad(); the end of every path. Passes on several threads may reach one leaf:
/// each accumulation, with the leaf's hooks, holds the node's lock.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(const Tensor& variable);  ///< the accumulator of leaf `variable`, held weakly
  tensor_list apply(tensor_list&& grads) override;
  const char* name() const override { return "AccumulateGrad"; }
  /// The leaf, held weakly: with create_graph the leaf's grad() holds this graph, and a strong
  /// link back would make a cycle. A leaf nobody holds any more has no grad() to write.
  std::weak_ptr<TensorImpl> variable;

 private:
  std::mutex mutex_;
};

/// Autograd's per-tensor state, owned by TensorImpl::autograd_meta.
struct AutogradMeta final : AutogradMetaInterface {
  bool requires_grad = false;   ///< leaf flag; non-leaves require grad through grad_fn
  std::vector<GradHook> hooks;  ///< a leaf's hooks, run by its AccumulateGrad (null slots were removed)
  /// A leaf's hooks run after its AccumulateGrad wrote grad() (null slots were removed).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
  bool retains_grad = false;  ///< a non-leaf that keeps grad() (retain_grad())
  /// A view's history is built on its base's grad_fn; this is that grad_fn (Note [view history]).
  const Node* base_grad_fn = nullptr;
  uint32_t output_nr = 0;                ///< which output of grad_fn
  Tensor grad;                           ///< the accumulated gradient
  std::shared_ptr<Node> grad_fn;         ///< the op that made this tensor
  std::weak_ptr<Node> grad_accumulator;  ///< the AccumulateGrad of a leaf, while a graph holds it
};

/// This tensor's AutogradMeta, or null.
AutogradMeta* meta(const Tensor& t);
/// This tensor's AutogradMeta, created on first use.
AutogradMeta& ensure_meta(const Tensor& t);
/// Where a gradient for `t` should go: its grad_fn and output_nr, or its leaf accumulator, or nothing.
Edge gradient_edge(const Tensor& t);
/// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(const tensor_list& inputs);  ///< the same for a list

/// Creates a LambdaNode with edges to `inputs` and makes it the grad_fn of `outputs`; null when
/// no input requires grad or grad mode is off (then the caller skips its backward).
std::shared_ptr<LambdaNode> record(const char* name, const tensor_list& inputs, const tensor_list& outputs);
/// Same for one input and one output, without building lists (the per-op fast path).
std::shared_ptr<LambdaNode> record(const char* name, const Tensor& input, const Tensor& output);
/// Same for two inputs and one output.
std::shared_ptr<LambdaNode> record(const char* name, const Tensor& a, const Tensor& b, const Tensor& output);
/// Makes `node` the grad_fn of `t` as output output_nr.
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr = 0);
/// Marks `view` as a view of `base` (Note [view history]); every view op calls it after recording.
void mark_view(const Tensor& view, const Tensor& base);
/// Called by every in-place op before it writes: checks the target may be modified and bumps its version.
void check_inplace(const Tensor& t, const char* op);
/// The shared "graph already freed" error of nodes whose saved state was released.
[[noreturn]] void throw_released(const char* name);
/// After an in-place differentiable op: makes `node` (null when no grad needed) t's history, or, for a view,
/// its base's through a CopySlices node (Note [CopySlices] in autograd/ops/shape.cpp).
void rebase_history(const Tensor& t, const std::shared_ptr<Node>& node);

/// A tensor saved for backward, checked against in-place changes when unpacked.
class SavedVariable {
 public:
  SavedVariable() = default;
  /// Saves t; is_output says t is an output of the node saving it (stored without a reference cycle).
  SavedVariable(const Tensor& t, bool is_output = false);
  /// The saved tensor; throws when it was modified in place since it was saved.
  Tensor unpack() const;
  bool defined() const { return data_.defined(); }  ///< false for a saved undefined tensor

 private:
  Tensor data_;                       // inputs: the tensor itself; outputs: an alias without history
  std::weak_ptr<Node> weak_grad_fn_;  // outputs: the saving node, re-attached on unpack
  uint32_t output_nr_ = 0;
  uint32_t saved_version_ = 0;
  bool is_output_ = false;
};

}  // namespace strata::autograd
