// The backward engine: an iterative walk over the graph in dependency order.
//
// Note [pass state]: each pass keeps its state, per node the edges still to deliver a gradient and the sum
// of the gradients delivered, in a GraphTask of its own, never in the nodes. Passes that share nodes therefore
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

void accumulate(Tensor& slot, Tensor&& g, const char* from) {
  if (!slot.defined()) {
    slot = std::move(g);
    return;
  }
  STRATA_CHECK(slot.sizes() == g.sizes(), from, " returned a gradient of shape ", g.sizes(),
               " where another path delivered one of shape ", slot.sizes());
  slot = slot + g;
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

// Note [split backward]: backward_input splits one pass into two halves: B, the nodes from which an input's
// gradient can be reached, and W, the rest (NodeTask::in_w). W takes over the pass's GraphTask (Note [pass
// state]): other passes (the next micro-batch's B) run over the same parameters' accumulators before this W
// does. Each half runs its nodes in decreasing sequence number (accumulators as soon as complete), as a whole
// pass does. Every consumer of a B node is a B node, so B sums a B node's gradients in a whole pass's order. A
// W node also gets gradients from B nodes, which arrive before W runs: it keeps every contribution with its
// producer's sequence number and edge, and sums them in that order, a whole pass's, when W reaches it. A B
// node that splits() computes its B edges in B and keeps its incoming gradients to compute its W edges in W.
constexpr uint64_t kRootProducer = UINT64_MAX;  // root gradients are summed before any node's

struct Contribution {
  uint64_t producer;  // the producer's sequence number, kRootProducer for a root gradient
  uint32_t edge;      // the producer's edge, or the root's index
  uint32_t input_nr;
  Tensor grad;
  const char* from;  // the producer's name, for the shape check
};

// One node's state in one pass (Note [pass state]).
struct NodeTask {
  uint32_t pending = 0;  // edges still to deliver a gradient
  bool in_w = false;     // a split backward's W half runs it; B, or a whole pass, runs the others
  bool splits = false;   // a B node with W edges that splits(): it computes those in W, from `buffer`
  tensor_list buffer;    // the sum of the gradients delivered, one per output (not for W nodes)
  std::vector<Contribution> contributions;            // W nodes: every gradient delivered, summed when run
  std::vector<std::pair<uint32_t, size_t>> captures;  // grad(): (output, slot of the result) taken here
};

// One pass, as torch's GraphTask: which half runs each node, the outputs grad() captures, the gradients so far.
struct GraphTask {
  std::unordered_map<Node*, NodeTask> nodes;  // element references survive rehashing
  std::vector<Node*> order;                   // the nodes in discovery order
  bool keep_graph = false;
  bool create_graph = false;
  bool w_half = false;              // a split backward's W half is running
  tensor_list* captured = nullptr;  // grad()'s result; grad() never accumulates into leaves

  // Whether the pass, or its half now running, runs the node (a split node runs in both halves).
  bool runs_now(const NodeTask& t) const { return w_half ? t.in_w || t.splits : !t.in_w; }

  // Finds every node reachable from the roots, in discovery order, with its incoming edges counted.
  void discover(const std::vector<Edge>& roots) {
    auto visit = [&](Node* n) -> NodeTask& {
      auto [it, fresh] = nodes.try_emplace(n);
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
  }

  // Delivers the root gradients. A root without one is a node from run_in_next_backward; it may also be an
  // output's grad_fn (backward entered at a collective's output), so only defined root gradients are summed.
  void seed(const std::vector<Edge>& roots, tensor_list&& root_grads) {
    for (size_t i = 0; i < roots.size(); ++i)
      if (roots[i].valid())
        deliver(nodes[roots[i].fn.get()], roots[i].input_nr, std::move(root_grads[i]), kRootProducer, i,
                roots[i].fn->name());
  }

  // Hands gradient g for input input_nr to a node: summed at once, or kept whole for a W node.
  static void deliver(NodeTask& to, uint32_t input_nr, Tensor&& g, uint64_t producer, size_t edge, const char* from) {
    if (!g.defined()) return;
    if (to.in_w)
      to.contributions.push_back({producer, static_cast<uint32_t>(edge), input_nr, std::move(g), from});
    else
      accumulate(to.buffer[input_nr], std::move(g), from);
  }

  // The gradients a node runs with; a W node sums its contributions in a whole pass's order.
  static tensor_list take_grads(const Node& node, NodeTask& t) {
    if (!t.in_w) return std::move(t.buffer);
    std::sort(t.contributions.begin(), t.contributions.end(), [](const Contribution& a, const Contribution& b) {
      return a.producer != b.producer ? a.producer > b.producer : a.edge < b.edge;
    });
    tensor_list grads(node.num_outputs);
    for (Contribution& c : t.contributions) accumulate(grads[c.input_nr], std::move(c.grad), c.from);
    t.contributions.clear();
    return grads;
  }

  // Runs the pass, or its half w_half names, from the nodes whose gradients are complete.
  void execute() {
    AutoGradMode mode(create_graph);
    AutocastOff no_autocast;
    CallbackScope callbacks;
    std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
    for (Node* n : order)
      if (nodes[n].pending == 0 && runs_now(nodes[n])) ready.push(n);

    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      NodeTask& t = nodes[node];
      tensor_list grads = take_grads(*node, t);
      if (!(w_half && t.splits)) {  // a split node's hooks ran in B
        run_pre_hooks(*node, grads);
        for (auto [output_nr, slot] : t.captures) (*captured)[slot] = grads[output_nr];
      }
      // grad() never accumulates into leaves; a node with no incoming gradient passes none on.
      const bool skip = (!any_defined(grads) && !node->always_run) || (captured && dynamic_cast<AccumulateGrad*>(node));
      std::vector<bool> wanted;  // a split node's edges into the half running
      if (t.splits)
        for (const Edge& e : node->next_edges) wanted.push_back(e.valid() && nodes[e.fn.get()].in_w == w_half);
      tensor_list outputs;
      if (!skip) outputs = t.splits ? node->apply_some(grads, wanted) : node->apply(std::move(grads));
      STRATA_INTERNAL_ASSERT(outputs.size() == node->next_edges.size() || outputs.empty());
      if (t.splits && !w_half)
        t.buffer = std::move(grads);  // W computes the other edges from them
      else if (!keep_graph)
        node->release_variables();
      for (size_t i = 0; i < node->next_edges.size(); ++i) {
        const Edge& e = node->next_edges[i];
        if (t.splits ? !wanted[i] : !e.valid()) continue;
        NodeTask& next = nodes[e.fn.get()];
        if (i < outputs.size()) deliver(next, e.input_nr, std::move(outputs[i]), node->sequence_nr, i, node->name());
        if (--next.pending == 0 && runs_now(next)) ready.push(e.fn.get());
      }
    }
    callbacks.run_all();
  }

  // Marks the halves of a split backward: W, the nodes from which no input's gradient can be reached, and the
  // B nodes that split (an iterative depth-first search, each node marked after its children).
  void mark_halves(const std::vector<Edge>& inputs) {
    std::unordered_set<const Node*> targets, seen;
    for (const Edge& e : inputs) targets.insert(e.fn.get());
    std::vector<std::pair<Node*, size_t>> stack;
    for (Node* start : order) {
      if (!seen.insert(start).second) continue;
      stack.emplace_back(start, 0);
      while (!stack.empty()) {
        Node* n = stack.back().first;
        const size_t i = stack.back().second++;
        if (i < n->next_edges.size()) {
          const Edge& e = n->next_edges[i];
          if (e.valid() && seen.insert(e.fn.get()).second) stack.emplace_back(e.fn.get(), 0);
          continue;
        }
        bool to_b = targets.count(n) > 0, to_w = false;
        for (const Edge& e : n->next_edges)
          if (e.valid()) (nodes[e.fn.get()].in_w ? to_w : to_b) = true;
        nodes[n].in_w = !to_b;
        nodes[n].splits = to_b && to_w && n->splits();
        stack.pop_back();
      }
    }
  }
};

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

struct DeferredWeightGrad::State {
  GraphTask task;                           // the split pass, its W half still to run
  std::vector<std::shared_ptr<Node>> keep;  // the nodes W runs, alive until run()
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
  std::vector<Edge> input_edges;  // keeps new accumulators alive while the halves are marked
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "backward_input: input ", i,
                 " does not require grad");
    input_edges.push_back(gradient_edge(inputs[i]));
  }

  DeferredWeightGrad out;
  out.state_ = std::make_unique<DeferredWeightGrad::State>();
  GraphTask& task = out.state_->task;
  task.keep_graph = retain_graph;
  task.discover(roots);
  task.mark_halves(input_edges);
  task.seed(roots, std::move(root_grads));
  task.execute();
  task.w_half = true;
  std::erase_if(task.order, [&](Node* n) { return !task.runs_now(task.nodes[n]); });
  for (Node* n : task.order) out.state_->keep.push_back(n->shared_from_this());
  if (retain_graph) next_backward_nodes.insert(next_backward_nodes.begin(), extra.begin(), extra.end());
  return out;
}

void DeferredWeightGrad::run() {
  STRATA_CHECK(state_ != nullptr, "DeferredWeightGrad::run: this object holds no split backward");
  STRATA_CHECK(!state_->done, "DeferredWeightGrad::run: the weight gradients were already computed");
  state_->done = true;
  state_->task.execute();
  state_->task = GraphTask();
  state_->keep.clear();
}

void backward(const tensor_list& outputs, const tensor_list& grad_outputs, std::optional<bool> retain_graph,
              bool create_graph) {
  tensor_list root_grads;
  std::vector<Edge> roots = make_roots(outputs, grad_outputs, root_grads, "backward");
  std::vector<std::shared_ptr<Node>> extra = take_next_backward_nodes();
  for (const auto& node : extra) {
    roots.push_back(Edge{node, 0});
    root_grads.emplace_back();
  }
  GraphTask task;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.discover(roots);
  task.seed(roots, std::move(root_grads));
  task.execute();
  if (task.keep_graph) next_backward_nodes.insert(next_backward_nodes.begin(), extra.begin(), extra.end());
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
  tensor_list result(inputs.size());
  GraphTask task;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.captured = &result;
  task.discover(roots);
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRATA_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad: input ", i,
                 " of the differentiated Tensors does not require grad");
    const Edge e = gradient_edge(inputs[i]);  // an input outside the graph is captured nowhere
    if (auto it = task.nodes.find(e.fn.get()); it != task.nodes.end()) it->second.captures.emplace_back(e.input_nr, i);
  }
  task.seed(roots, std::move(root_grads));
  task.execute();
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
