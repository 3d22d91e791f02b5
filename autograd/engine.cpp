// The backward engine: an iterative walk over the graph in dependency order.
//
// Note [pass state]: each pass keeps its state, per node the edges still to deliver a gradient and the sum
// of the gradients delivered, in a map of its own, never in the nodes. Passes that share nodes therefore
// run side by side: two threads backward through one graph (with retain_graph), threads with graphs of
// their own over the same parameters, a pass nested in a node's backward (autograd::checkpoint), the next
// micro-batch's B before this one's W (Note [split backward]). The one node two passes write to is a
// leaf's AccumulateGrad, which takes its lock around the accumulation.

#include "strata/autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "strata/autograd/autocast.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/creation.h"

namespace strata::autograd {

namespace {

// Backward computes in the dtypes its forward saw, so autocast is off while a pass runs (Note [autocast] in
// autocast.cpp); a checkpoint's recomputation turns its forward's autocast back on.
struct AutocastOff {
  AutocastGuard cpu{kCPU, std::nullopt, false}, cuda{kCUDA, std::nullopt, false};
};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Nodes that join this thread's next backward() unreached (see run_in_next_backward).
thread_local std::vector<std::shared_ptr<Node>> next_backward_nodes;

// Callbacks of the backward pass running on this thread (see queue_callback); null outside one.
thread_local std::vector<std::function<void()>>* pass_callbacks = nullptr;

// Where autograd::grad() takes a gradient instead of passing it on.
struct Capture {
  Node* node;
  uint32_t input_nr;
  size_t slot;
};

void accumulate(Tensor& slot, Tensor&& g, const char* from) {
  if (!slot.defined()) {
    slot = std::move(g);
    return;
  }
  STRATA_CHECK(slot.sizes() == g.sizes(), from, " returned a gradient of shape ", g.sizes(),
               " where another path delivered one of shape ", slot.sizes());
  slot = slot + g;
}

// One node's state in one pass (Note [pass state]).
struct NodeTask {
  uint32_t pending = 0;  // edges still to deliver a gradient
  tensor_list buffer;    // the sum of the gradients delivered, one per output
};
using GraphTask = std::unordered_map<Node*, NodeTask>;  // element references survive rehashing

// Every node reachable from the roots, in discovery order, with its incoming edges counted.
std::vector<Node*> discover(const std::vector<Edge>& roots, GraphTask& task) {
  std::vector<Node*> order;
  auto visit = [&](Node* n) -> NodeTask& {
    auto [it, fresh] = task.try_emplace(n);
    if (fresh) {
      it->second.buffer.resize(n->num_outputs);
      order.push_back(n);
    }
    return it->second;
  };
  for (const Edge& e : roots)
    if (e.valid()) visit(e.fn.get());
  for (size_t i = 0; i < order.size(); ++i)  // order grows while we walk it: an iterative BFS
    for (const Edge& e : order[i]->next_edges)
      if (e.valid()) ++visit(e.fn.get()).pending;
  return order;
}

// The queue_callback list of one pass: a backward started from a hook has callbacks of its own, and the
// outer pass's wait for it. run_all() runs them (a callback may queue another) before the scope ends.
class CallbackScope {
 public:
  CallbackScope() : outer_(std::exchange(pass_callbacks, &callbacks_)) {}
  ~CallbackScope() { pass_callbacks = outer_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  void run_all() {
    for (size_t i = 0; i < callbacks_.size(); ++i) std::function<void()>(std::move(callbacks_[i]))();
  }

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* outer_;
};

void run_pre_hooks(const Node& node, tensor_list& grads) {
  for (auto& [output_nr, hook] : node.pre_hooks) {
    if (!hook || !grads[output_nr].defined()) continue;
    Tensor r = hook(grads[output_nr]);
    if (r.defined()) grads[output_nr] = std::move(r);
  }
}

bool any_defined(const tensor_list& grads) {
  return std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
}

void run(const std::vector<Edge>& roots, tensor_list&& root_grads, bool keep_graph, bool create_graph,
         const std::vector<Capture>& captures, tensor_list* captured) {
  AutoGradMode mode(create_graph);
  AutocastOff no_autocast;
  CallbackScope callbacks;
  GraphTask task;
  const std::vector<Node*> order = discover(roots, task);
  // A node from run_in_next_backward is a root without a gradient; it may also be an output's grad_fn
  // (backward entered at a collective's output), so only defined root gradients are summed.
  for (size_t i = 0; i < roots.size(); ++i)
    if (roots[i].valid() && root_grads[i].defined())
      accumulate(task[roots[i].fn.get()].buffer[roots[i].input_nr], std::move(root_grads[i]), roots[i].fn->name());

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (Node* n : order)
    if (task[n].pending == 0) ready.push(n);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    tensor_list grads = std::move(task[node].buffer);
    run_pre_hooks(*node, grads);
    for (const Capture& c : captures)
      if (c.node == node) (*captured)[c.slot] = grads[c.input_nr];
    // grad() never accumulates into leaves; a node with no incoming gradient passes none on.
    const bool skip = (!any_defined(grads) && !node->always_run) || (captured && dynamic_cast<AccumulateGrad*>(node));
    tensor_list outputs;
    if (!skip) {
      outputs = node->apply(std::move(grads));
      STRATA_INTERNAL_ASSERT(outputs.size() == node->next_edges.size() || outputs.empty());
    }
    if (!keep_graph) node->release_variables();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      NodeTask& next = task[e.fn.get()];
      if (i < outputs.size() && outputs[i].defined())
        accumulate(next.buffer[e.input_nr], std::move(outputs[i]), node->name());
      if (--next.pending == 0) ready.push(e.fn.get());
    }
  }
  callbacks.run_all();
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

// Note [split backward]: backward_input splits one pass into B, the nodes from which an input's gradient can
// be reached, and W, the rest. Its state lives in a map that W takes over (Note [pass state]): other passes
// (the next micro-batch's B) run over the same parameters' accumulators before this W does.
// Nodes run in decreasing sequence number (accumulators as soon as complete), as in run(). Every consumer of
// a B node is a B node, so B sums a B node's gradients in run()'s order. A W node also gets gradients from B
// nodes, which arrive before W runs: it keeps every contribution with its producer's sequence number and
// edge, and sums them in that order, run()'s, when W reaches it. A B node that splits() computes its B edges
// in B and keeps its incoming gradients to compute its W edges in W.
constexpr uint64_t kRootProducer = UINT64_MAX;  // root gradients are summed before any node's

struct Contribution {
  uint64_t producer;  // the producer's sequence number, kRootProducer for a root gradient
  uint32_t edge;      // the producer's edge, or the root's index
  uint32_t input_nr;
  Tensor grad;
  const char* from;  // the producer's name, for the shape check
};

struct SplitNode {
  bool in_b = false;     // an input's gradient can be reached from it
  uint8_t visit = 0;     // reachability search: 0 unseen, 1 open, 2 done
  uint32_t pending = 0;  // B nodes: B edges not yet delivered; W nodes: edges W has not delivered yet
  tensor_list buffer;    // B nodes: the summed incoming gradients
  std::vector<Contribution> contributions;  // W nodes: every incoming gradient, summed when W reaches it
  bool deferred = false;                    // a B node that splits() and has W edges: W computes those
  bool skipped = false;                     // ... and received no gradient at all
  tensor_list kept;                         // ... from these incoming gradients
};

// Marks every node from which a target can be reached (an iterative depth-first search).
void mark_b(const std::vector<Node*>& order, std::unordered_map<Node*, SplitNode>& nodes,
            const std::unordered_set<const Node*>& targets) {
  std::vector<std::pair<Node*, size_t>> stack;
  for (Node* start : order) {
    if (nodes[start].visit != 0) continue;
    nodes[start].visit = 1;
    stack.emplace_back(start, 0);
    while (!stack.empty()) {
      Node* n = stack.back().first;
      const size_t i = stack.back().second++;
      if (i < n->next_edges.size()) {
        const Edge& e = n->next_edges[i];
        if (e.valid() && nodes[e.fn.get()].visit == 0) {
          nodes[e.fn.get()].visit = 1;
          stack.emplace_back(e.fn.get(), 0);
        }
        continue;
      }
      SplitNode& sn = nodes[n];
      sn.in_b = targets.count(n) > 0 || std::any_of(n->next_edges.begin(), n->next_edges.end(),
                                                    [&](const Edge& e) { return e.valid() && nodes[e.fn.get()].in_b; });
      sn.visit = 2;
      stack.pop_back();
    }
  }
}

// Which of n's edges to compute: those into B nodes (want_b) or the others.
std::vector<bool> edges_into(const Node& n, std::unordered_map<Node*, SplitNode>& nodes, bool want_b) {
  std::vector<bool> wanted(n.next_edges.size());
  for (size_t i = 0; i < wanted.size(); ++i) {
    const Edge& e = n.next_edges[i];
    wanted[i] = e.valid() && nodes[e.fn.get()].in_b == want_b;
  }
  return wanted;
}

}  // namespace

struct DeferredWeightGrad::State {
  std::unordered_map<Node*, SplitNode> nodes;
  std::vector<std::shared_ptr<Node>> keep;  // the W nodes and the deferred B nodes, alive until run()
  bool retain_graph = false;
  bool done = false;
};

DeferredWeightGrad::DeferredWeightGrad() = default;
DeferredWeightGrad::~DeferredWeightGrad() = default;
DeferredWeightGrad::DeferredWeightGrad(DeferredWeightGrad&&) noexcept = default;
DeferredWeightGrad& DeferredWeightGrad::operator=(DeferredWeightGrad&&) noexcept = default;

bool DeferredWeightGrad::pending() const { return state_ && !state_->done && !state_->keep.empty(); }

DeferredWeightGrad backward_input(const tensor_list& outputs, const tensor_list& grad_outputs,
                                  const tensor_list& inputs, bool retain_graph) {
  tensor_list root_grads;
  std::vector<Edge> roots = make_roots(outputs, grad_outputs, root_grads, "backward_input");
  std::vector<std::shared_ptr<Node>> extra = take_next_backward_nodes();
  for (const auto& node : extra) {
    roots.push_back(Edge{node, 0});
    root_grads.emplace_back();
  }
  std::vector<Edge> input_edges;  // keeps new accumulators alive while B runs
  std::unordered_set<const Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "backward_input: input ", i,
                 " does not require grad");
    input_edges.push_back(gradient_edge(inputs[i]));
    targets.insert(input_edges.back().fn.get());
  }

  DeferredWeightGrad out;
  out.state_ = std::make_unique<DeferredWeightGrad::State>();
  DeferredWeightGrad::State& st = *out.state_;
  st.retain_graph = retain_graph;
  std::unordered_map<Node*, SplitNode>& nodes = st.nodes;  // element references survive rehashing
  std::vector<Node*> order;
  auto visit = [&](Node* n) {
    if (nodes.try_emplace(n).second) order.push_back(n);
  };
  for (const Edge& e : roots)
    if (e.valid()) visit(e.fn.get());
  for (size_t i = 0; i < order.size(); ++i)
    for (const Edge& e : order[i]->next_edges)
      if (e.valid()) visit(e.fn.get());
  mark_b(order, nodes, targets);
  for (Node* n : order) {
    SplitNode& sn = nodes[n];
    bool has_w = false;
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      SplitNode& c = nodes[e.fn.get()];
      has_w |= !c.in_b;
      ++c.pending;  // from B to B in B; from W (or a deferred node) to W in W; recounted below otherwise
    }
    if (!sn.in_b) continue;
    sn.buffer.assign(n->num_outputs, Tensor());
    sn.deferred = has_w && n->splits();
    if (sn.deferred) continue;
    // A B node that computes everything in B delivers its W edges there: W does not wait for them.
    for (const Edge& e : n->next_edges)
      if (e.valid() && !nodes[e.fn.get()].in_b) --nodes[e.fn.get()].pending;
  }
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].valid() || !root_grads[i].defined()) continue;
    SplitNode& r = nodes[roots[i].fn.get()];
    if (r.in_b)
      accumulate(r.buffer[roots[i].input_nr], std::move(root_grads[i]), roots[i].fn->name());
    else
      r.contributions.push_back(
          {kRootProducer, static_cast<uint32_t>(i), roots[i].input_nr, std::move(root_grads[i]), roots[i].fn->name()});
  }

  {
    AutoGradMode mode(false);
    AutocastOff no_autocast;
    CallbackScope callbacks;
    std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
    for (Node* n : order)
      if (nodes[n].in_b && nodes[n].pending == 0) ready.push(n);
    while (!ready.empty()) {
      Node* n = ready.top();
      ready.pop();
      SplitNode& sn = nodes[n];
      tensor_list grads = std::move(sn.buffer);
      run_pre_hooks(*n, grads);
      const bool skip = !any_defined(grads) && !n->always_run;
      tensor_list outs;
      if (sn.deferred) {
        if (!skip) outs = n->apply_some(grads, edges_into(*n, nodes, /*want_b=*/true));
        sn.kept = std::move(grads);
        sn.skipped = skip;
      } else {
        if (!skip) outs = n->apply(std::move(grads));
        if (!retain_graph) n->release_variables();
      }
      STRATA_INTERNAL_ASSERT(outs.size() == n->next_edges.size() || outs.empty());
      for (size_t i = 0; i < n->next_edges.size(); ++i) {
        const Edge& e = n->next_edges[i];
        if (!e.valid()) continue;
        SplitNode& c = nodes[e.fn.get()];
        Tensor g = i < outs.size() ? std::move(outs[i]) : Tensor();
        if (c.in_b) {
          if (g.defined()) accumulate(c.buffer[e.input_nr], std::move(g), n->name());
          if (--c.pending == 0) ready.push(e.fn.get());
        } else if (!sn.deferred && g.defined()) {
          c.contributions.push_back({n->sequence_nr, static_cast<uint32_t>(i), e.input_nr, std::move(g), n->name()});
        }
      }
    }
    callbacks.run_all();
  }
  for (Node* n : order) {
    const SplitNode& sn = nodes[n];
    if (!sn.in_b || sn.deferred) st.keep.push_back(n->shared_from_this());
  }
  if (retain_graph) next_backward_nodes.insert(next_backward_nodes.begin(), extra.begin(), extra.end());
  return out;
}

void DeferredWeightGrad::run() {
  STRATA_CHECK(state_ != nullptr, "DeferredWeightGrad::run: this object holds no split backward");
  STRATA_CHECK(!state_->done, "DeferredWeightGrad::run: the weight gradients were already computed");
  State& st = *state_;
  st.done = true;
  std::unordered_map<Node*, SplitNode>& nodes = st.nodes;
  AutoGradMode mode(false);
  AutocastOff no_autocast;
  CallbackScope callbacks;
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (const std::shared_ptr<Node>& n : st.keep)
    if (nodes[n.get()].pending == 0) ready.push(n.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    SplitNode& sn = nodes[n];
    tensor_list outs;
    if (sn.deferred) {
      if (!sn.skipped) outs = n->apply_some(sn.kept, edges_into(*n, nodes, /*want_b=*/false));
      sn.kept.clear();
    } else {
      std::sort(sn.contributions.begin(), sn.contributions.end(), [](const Contribution& a, const Contribution& b) {
        return a.producer != b.producer ? a.producer > b.producer : a.edge < b.edge;
      });
      tensor_list grads(n->num_outputs);
      for (Contribution& c : sn.contributions) accumulate(grads[c.input_nr], std::move(c.grad), c.from);
      sn.contributions.clear();
      run_pre_hooks(*n, grads);
      if (any_defined(grads) || n->always_run) outs = n->apply(std::move(grads));
      STRATA_INTERNAL_ASSERT(outs.size() == n->next_edges.size() || outs.empty());
    }
    if (!st.retain_graph) n->release_variables();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid() || nodes[e.fn.get()].in_b) continue;  // a deferred node's B edges were done in B
      SplitNode& c = nodes[e.fn.get()];
      if (i < outs.size() && outs[i].defined())
        c.contributions.push_back(
            {n->sequence_nr, static_cast<uint32_t>(i), e.input_nr, std::move(outs[i]), n->name()});
      if (--c.pending == 0) ready.push(e.fn.get());
    }
  }
  callbacks.run_all();
  st.nodes.clear();
  st.keep.clear();
}

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
