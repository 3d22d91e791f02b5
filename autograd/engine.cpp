// The backward engine: an iterative walk over the graph in dependency order.
//
// Note [engine scratch]: each Node carries the scratch of one pass (epoch_, pending_, buffer_)
// instead of the engine keeping hash maps: discovery stamps nodes with this pass's epoch,
// pending_ counts the edges still to deliver a gradient, buffer_ sums the incoming gradients.
// One backward pass runs at a time on a given graph, except a pass nested inside a node's backward
// (Note [nested passes]).

#include "strata/autograd/engine.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <utility>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/creation.h"

namespace strata::autograd {

namespace {

// Global, not per thread: a graph may be run backward from several threads (one at a time).
std::atomic<uint64_t> current_epoch{0};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Nodes that join this thread's next backward() unreached (see run_in_next_backward).
thread_local std::vector<std::shared_ptr<Node>> next_backward_nodes;

// Callbacks of the backward pass running on this thread (see queue_callback); null outside one.
thread_local std::vector<std::function<void()>>* pass_callbacks = nullptr;

// Epochs of the passes running on this thread, innermost last (a node's backward may run a pass of its own).
thread_local std::vector<uint64_t> running_epochs;

// Where autograd::grad() takes a gradient instead of passing it on.
struct Capture {
  Node* node;
  uint32_t input_nr;
  size_t slot;
};

void accumulate(Tensor& slot, Tensor&& g, const Node& from) {
  if (!slot.defined()) {
    slot = std::move(g);
    return;
  }
  STRATA_CHECK(slot.sizes() == g.sizes(), from.name(), " returned a gradient of shape ", g.sizes(),
               " where another path delivered one of shape ", slot.sizes());
  slot = slot + g;
}

// Note [nested passes]: a pass started from inside a node's backward (autograd::checkpoint recomputes and
// calls grad()) can reach nodes that the pass outside it discovered, such as the AccumulateGrad of a
// parameter both graphs use. That scratch belongs to the outer pass: the inner pass sets it aside when it
// discovers such a node and puts it back when it ends, so the outer pass goes on with its counts and
// buffered gradients intact.
struct OuterScratch {
  Node* node;
  uint64_t epoch;
  uint32_t pending;
  tensor_list buffer;
};

// One pass's scratch. When the pass ends, also when a node or hook throws, it clears every discovered
// node's buffer (a gradient left there could keep a create_graph graph alive) and restores what it set aside.
struct PassScratch {
  explicit PassScratch(uint64_t e) : epoch(e) { running_epochs.push_back(e); }
  ~PassScratch() {
    for (Node* n : nodes) n->buffer_.clear();
    for (OuterScratch& s : outer) {
      s.node->epoch_ = s.epoch;
      s.node->pending_ = s.pending;
      s.node->buffer_ = std::move(s.buffer);
    }
    running_epochs.pop_back();
  }
  PassScratch(const PassScratch&) = delete;
  PassScratch& operator=(const PassScratch&) = delete;
  uint64_t epoch;
  std::vector<Node*> nodes;
  std::vector<OuterScratch> outer;
};

// Stamps every node reachable from the roots with this pass's epoch and counts its incoming edges.
void discover(const std::vector<Edge>& roots, PassScratch& pass) {
  std::vector<Node*>& nodes = pass.nodes;
  auto visit = [&](Node* n) {
    if (n->epoch_ == pass.epoch) return;
    if (std::find(running_epochs.begin(), running_epochs.end(), n->epoch_) != running_epochs.end())
      pass.outer.push_back({n, n->epoch_, n->pending_, std::move(n->buffer_)});
    n->epoch_ = pass.epoch;
    n->pending_ = 0;
    n->buffer_.assign(n->num_outputs, Tensor());
    nodes.push_back(n);
  };
  for (const Edge& e : roots)
    if (e.valid()) visit(e.fn.get());
  for (size_t i = 0; i < nodes.size(); ++i) {  // nodes grows while we walk it: an iterative BFS
    for (const Edge& e : nodes[i]->next_edges) {
      if (!e.valid()) continue;
      visit(e.fn.get());
      ++e.fn->pending_;
    }
  }
}

void run(const std::vector<Edge>& roots, tensor_list&& root_grads, bool keep_graph, bool create_graph,
         const std::vector<Capture>& captures, tensor_list* captured) {
  AutoGradMode mode(create_graph);
  // A backward started from a hook has callbacks of its own; the outer pass's wait for it.
  std::vector<std::function<void()>> callbacks;
  auto* outer_callbacks = std::exchange(pass_callbacks, &callbacks);
  struct Restore {
    std::vector<std::function<void()>>* outer;
    ~Restore() { pass_callbacks = outer; }
  } restore{outer_callbacks};
  PassScratch pass(current_epoch.fetch_add(1, std::memory_order_relaxed) + 1);
  discover(roots, pass);
  // A node from run_in_next_backward is a root without a gradient; it may also be an output's grad_fn
  // (backward entered at a collective's output), so only defined root gradients are summed.
  for (size_t i = 0; i < roots.size(); ++i)
    if (roots[i].valid() && root_grads[i].defined())
      accumulate(roots[i].fn->buffer_[roots[i].input_nr], std::move(root_grads[i]), *roots[i].fn);

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (Node* n : pass.nodes)
    if (n->pending_ == 0) ready.push(n);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    tensor_list grads = std::move(node->buffer_);
    for (auto& [output_nr, hook] : node->pre_hooks) {
      if (!hook || !grads[output_nr].defined()) continue;
      Tensor r = hook(grads[output_nr]);
      if (r.defined()) grads[output_nr] = std::move(r);
    }
    for (const Capture& c : captures)
      if (c.node == node) (*captured)[c.slot] = grads[c.input_nr];
    bool any = false;
    for (const Tensor& g : grads) any |= g.defined();
    // grad() never accumulates into leaves; a node with no incoming gradient passes none on.
    const bool skip = (!any && !node->always_run) || (captured && dynamic_cast<AccumulateGrad*>(node));
    tensor_list outputs;
    if (!skip) {
      outputs = node->apply(std::move(grads));
      STRATA_INTERNAL_ASSERT(outputs.size() == node->next_edges.size() || outputs.empty());
    }
    if (!keep_graph) node->release_variables();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      if (i < outputs.size() && outputs[i].defined())
        accumulate(next->buffer_[e.input_nr], std::move(outputs[i]), *node);
      if (--next->pending_ == 0) ready.push(next);
    }
  }
  // A callback may queue another; run until none is left.
  for (size_t i = 0; i < callbacks.size(); ++i) std::function<void()>(std::move(callbacks[i]))();
}

// Checks outputs and their gradients and turns them into root edges and root gradients.
std::vector<Edge> make_roots(const tensor_list& outputs, const tensor_list& grad_outputs, tensor_list& root_grads,
                             const char* op) {
  STRATA_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), op, ": got ", grad_outputs.size(),
               " gradients for ", outputs.size(), " outputs");
  std::vector<Edge> roots;
  roots.reserve(outputs.size());
  root_grads.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    STRATA_CHECK(out.defined(), op, ": output ", i, " is undefined");
    STRATA_CHECK(out.requires_grad(), op, ": element ", i,
                 " of tensors does not require grad and does not have a grad_fn");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      STRATA_CHECK(out.numel() == 1, op, ": grad can be implicitly created only for scalar outputs (output ", i,
                   " has shape ", out.sizes(), ")");
      g = ones_like(out);
    } else {
      STRATA_CHECK(g.sizes() == out.sizes(), op, ": Mismatch in shape: grad_output[", i, "] has a shape of ", g.sizes(),
                   " and output[", i, "] has a shape of ", out.sizes(), ".");
      STRATA_CHECK(g.is_floating_point(), op, ": grad_output[", i, "] must be floating point, got ", g.dtype());
    }
    roots.push_back(gradient_edge(out));
    root_grads.push_back(std::move(g));
  }
  return roots;
}

}  // namespace

void backward(const tensor_list& outputs, const tensor_list& grad_outputs, std::optional<bool> retain_graph,
              bool create_graph) {
  tensor_list root_grads;
  std::vector<Edge> roots = make_roots(outputs, grad_outputs, root_grads, "backward");
  const bool keep_graph = retain_graph.value_or(create_graph);
  std::vector<std::shared_ptr<Node>> extra = take_next_backward_nodes();
  for (const auto& node : extra) {
    roots.push_back(Edge{node, 0});
    root_grads.emplace_back();
  }
  run(roots, std::move(root_grads), keep_graph, create_graph, {}, nullptr);
  if (keep_graph) next_backward_nodes.insert(next_backward_nodes.begin(), extra.begin(), extra.end());
}

void run_in_next_backward(std::shared_ptr<Node> node) {
  STRATA_CHECK(node, "run_in_next_backward: got a null node");
  node->always_run = true;
  next_backward_nodes.push_back(std::move(node));
}

std::vector<std::shared_ptr<Node>> take_next_backward_nodes() { return std::exchange(next_backward_nodes, {}); }

void queue_callback(std::function<void()> callback) {
  STRATA_CHECK(pass_callbacks, "queue_callback: no backward pass is running on this thread; call it from a hook");
  STRATA_CHECK(callback, "queue_callback: got an empty callback");
  pass_callbacks->push_back(std::move(callback));
}

void zero_grad(const tensor_list& tensors, bool set_to_none) {
  for (Tensor p : tensors) {
    Tensor& g = p.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g = Tensor();
    } else {
      NoGradGuard no_grad;
      g = g.detach();
      g.zero_();
    }
  }
}

tensor_list grad(const tensor_list& outputs, const tensor_list& inputs, const tensor_list& grad_outputs,
                 std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  tensor_list root_grads;
  std::vector<Edge> roots = make_roots(outputs, grad_outputs, root_grads, "grad");
  std::vector<Edge> input_edges;  // keeps new accumulators alive while the pass runs
  std::vector<Capture> captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad: input ", i,
                 " of the differentiated Tensors does not require grad");
    input_edges.push_back(gradient_edge(inputs[i]));
    captures.push_back({input_edges.back().fn.get(), input_edges.back().input_nr, i});
  }
  tensor_list result(inputs.size());
  run(roots, std::move(root_grads), retain_graph.value_or(create_graph), create_graph, captures, &result);
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(allow_unused || result[i].defined(), "grad: input ", i,
                 " of the differentiated Tensors appears to not have been used in the graph. Set allow_unused=true "
                 "if this is the desired behavior.");
    // Without create_graph the caller gets plain tensors, never ones carrying history.
    if (!create_graph && result[i].defined() && result[i].requires_grad()) result[i] = result[i].detach();
  }
  return result;
}

}  // namespace strata::autograd
