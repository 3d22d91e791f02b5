// Autograd state on tensors: grad mode, AutogradMeta, recording history, saved variables and
// the autograd methods of Tensor.

#include <algorithm>
#include <atomic>
#include <mutex>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/autograd/ops/common.h"
#include "strata/tensor/kernels.h"

namespace strata {

namespace {
thread_local bool grad_mode_enabled = true;
// Global, not per thread: graphs built on one thread may be run backward on another.
std::atomic<uint64_t> next_sequence_nr{0};
}  // namespace

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

namespace autograd {

Node::Node(uint32_t n) : num_outputs(n), sequence_nr(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

// Note [iterative graph destruction]: freeing the last node of a long chain would free its
// predecessor from inside its own destructor, and so on: 100,000 ops deep that overflows the
// stack. Nodes whose last owner is this edge list are queued and freed by the outermost call.
// The queue belongs to the outermost call (a thread_local object could already be destroyed when a
// static tensor's graph is freed at exit; a plain pointer cannot).
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>>* queue = nullptr;
  // Only nodes with edges of their own can start a chain; the rest (AccumulateGrad) die in place.
  auto chains = [](const Edge& e) { return e.fn && e.fn.use_count() == 1 && !e.fn->next_edges.empty(); };
  if (queue) {
    for (Edge& e : next_edges)
      if (chains(e)) queue->push_back(std::move(e.fn));
    return;
  }
  std::vector<std::shared_ptr<Node>> local;
  for (Edge& e : next_edges)
    if (chains(e)) local.push_back(std::move(e.fn));
  if (local.empty()) return;
  queue = &local;
  while (!local.empty()) {
    std::shared_ptr<Node> n = std::move(local.back());
    local.pop_back();
    n.reset();
  }
  queue = nullptr;
}

void throw_released(const char* name) {
  ::strata::detail::throw_error(
      __FILE__, __LINE__, name,
      ": trying to backward through the graph a second time (or directly access saved tensors after they "
      "have already been freed). Saved intermediate values of the graph are freed when you call backward() "
      "or autograd::grad(). Specify retain_graph=true if you need to backward through the graph a second "
      "time.");
}

tensor_list LambdaNode::apply(tensor_list&& grads) {
  if (!backward) throw_released(name());
  return backward(grads);
}

tensor_list Node::apply_some(const tensor_list& grads, const std::vector<bool>& wanted) {
  tensor_list all = apply(tensor_list(grads));
  for (size_t i = 0; i < all.size() && i < wanted.size(); ++i)
    if (!wanted[i]) all[i] = Tensor();
  return all;
}

tensor_list LambdaNode::apply_some(const tensor_list& grads, const std::vector<bool>& wanted) {
  if (!backward_some) throw_released(name());
  return backward_some(grads, wanted);
}

AutogradMeta* meta(const Tensor& t) { return static_cast<AutogradMeta*>(t.impl().autograd_meta.get()); }

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl().autograd_meta;
  if (!slot) slot = std::make_unique<AutogradMeta>();
  return static_cast<AutogradMeta&>(*slot);
}

namespace {
// The autograd state of a view's base, or null.
const AutogradMeta* base_meta(const TensorImpl& view) {
  return static_cast<const AutogradMeta*>(view.view_base->autograd_meta.get());
}

bool meta_requires_grad(const AutogradMeta* m) { return m && (m->requires_grad || m->grad_fn); }

// Note [view history]: a view's history is a view node over its base's history, valid while the base's
// grad_fn is the one it was built on (base_grad_fn). An in-place op on the base, or on another view of it
// (CopySlices), gives the base a new grad_fn; a view that requires grad through its base but has no history
// yet (taken before the base required grad, or under NoGradGuard) has none to match. Either way the view's
// history is rebuilt, when it is next used, as an as_strided view of the base's current history, as in
// libtorch. base_grad_fn cannot dangle into a new node at the same address: the view's history holds it.
void refresh_view_history(const Tensor& t) {
  const TensorImpl& impl = t.impl();
  if (!impl.view_base) return;
  const AutogradMeta* bm = base_meta(impl);
  if (!meta_requires_grad(bm)) return;
  const AutogradMeta* m = meta(t);
  if (m && m->grad_fn && m->base_grad_fn == bm->grad_fn.get()) return;
  ops::set_view_history(t);
}

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  AutogradMeta& m = ensure_meta(t);
  // Threads recording over one leaf share its accumulator (Note [pass state]); creation is rare, so one lock.
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (auto acc = m.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(t);
  m.grad_accumulator = acc;
  return acc;
}
}  // namespace

Edge gradient_edge(const Tensor& t) {
  refresh_view_history(t);
  AutogradMeta* m = meta(t);
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (m->requires_grad) return {grad_accumulator(t), 0};
  return {};
}

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  return GradMode::is_enabled() &&
         std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

bool any_requires_grad(const tensor_list& inputs) {
  return GradMode::is_enabled() &&
         std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = ensure_meta(t);
  m.grad_fn = node;
  m.output_nr = output_nr;
}

std::shared_ptr<LambdaNode> record(const char* name, const tensor_list& inputs, const tensor_list& outputs) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<LambdaNode>(name, static_cast<uint32_t>(outputs.size()));
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  for (size_t i = 0; i < outputs.size(); ++i) set_history(outputs[i], node, static_cast<uint32_t>(i));
  return node;
}

std::shared_ptr<LambdaNode> record(const char* name, const Tensor& input, const Tensor& output) {
  if (!GradMode::is_enabled() || !input.requires_grad()) return nullptr;
  auto node = std::make_shared<LambdaNode>(name, 1);
  node->next_edges.push_back(gradient_edge(input));
  set_history(output, node);
  return node;
}

std::shared_ptr<LambdaNode> record(const char* name, const Tensor& a, const Tensor& b, const Tensor& output) {
  if (!GradMode::is_enabled() || !((a.defined() && a.requires_grad()) || (b.defined() && b.requires_grad())))
    return nullptr;
  auto node = std::make_shared<LambdaNode>(name, 1);
  node->next_edges.reserve(2);
  node->next_edges.push_back(gradient_edge(a));
  node->next_edges.push_back(gradient_edge(b));
  set_history(output, node);
  return node;
}

void mark_view(const Tensor& view, const Tensor& base) {
  TensorImpl& impl = view.impl();
  impl.view_base = base.impl().view_base ? base.impl().view_base : base.impl_ptr();
  if (AutogradMeta* m = meta(view); m && m->grad_fn) {
    const AutogradMeta* bm = base_meta(impl);
    m->base_grad_fn = bm ? bm->grad_fn.get() : nullptr;
  }
}

void check_inplace(const Tensor& t, const char* op) {
  // Several elements on one memory location (an expanded tensor): which write wins is undefined.
  STRATA_CHECK(t.is_contiguous() || is_non_overlapping(t.sizes(), t.strides()), op,
               ": unsupported operation: more than one element of the written-to tensor refers to a single memory "
               "location (shape ",
               t.sizes(), ", strides ", t.strides(),
               "). Please clone() the tensor before "
               "performing the operation.");
  if (GradMode::is_enabled()) {
    const AutogradMeta* m = meta(t);
    STRATA_CHECK(!(m && m->requires_grad && !m->grad_fn), op,
                 ": a leaf Variable that requires grad is being used in an in-place operation.");
    const TensorImpl& impl = t.impl();
    const AutogradMeta* bm = impl.view_base ? base_meta(impl) : nullptr;
    STRATA_CHECK(!(bm && bm->requires_grad && !bm->grad_fn), op,
                 ": a view of a leaf Variable that requires grad is being used in an in-place operation.");
  }
  ++t.impl().storage->version;
}

void rebase_history(const Tensor& t, const std::shared_ptr<Node>& node) {
  if (!node) return;
  node->num_outputs = 1;
  if (t.impl().view_base)
    ops::rebase_view_history(t, node);
  else
    set_history(t, node, 0);
}

SavedVariable::SavedVariable(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  saved_version_ = t._version();
  is_output_ = is_output;
  if (!is_output) {
    data_ = t;
    return;
  }
  // Note [saved outputs]: an output holding its own grad_fn would be a reference cycle, so keep
  // an alias without history and a weak link to the node, re-attached on unpack.
  data_ = make_view(t, t.sizes(), t.strides(), t.storage_offset());
  if (const AutogradMeta* m = meta(t)) {
    weak_grad_fn_ = m->grad_fn;
    output_nr_ = m->output_nr;
  }
}

Tensor SavedVariable::unpack() const {
  if (!data_.defined()) return {};
  STRATA_CHECK(data_._version() == saved_version_,
               "one of the variables needed for gradient computation has been modified by an inplace operation: [",
               data_.dtype(), " ", data_.sizes(), "] is at version ", data_._version(), "; expected version ",
               saved_version_, " instead.");
  if (!is_output_ || !GradMode::is_enabled()) return data_;
  auto fn = weak_grad_fn_.lock();
  if (!fn) return data_;
  Tensor out = make_view(data_, data_.sizes(), data_.strides(), data_.storage_offset());
  set_history(out, fn, output_nr_);
  return out;
}

// A gradient a leaf can keep: a fresh contiguous one is taken as it is; anything shared (one
// gradient may feed several leaves, or be the caller's) or strided (stride-0 expands) is cloned.
// With create_graph the clone is recorded, so the stored gradient keeps its history.
Tensor take_or_clone(Tensor&& g) {
  const bool owned = g.impl_ptr().use_count() == 1 && g.impl().storage.use_count() == 1 && g.is_contiguous();
  return owned ? std::move(g) : g.clone();
}

AccumulateGrad::AccumulateGrad(const Tensor& v) : Node(1), variable(v.impl_ptr()) {
  sequence_nr = UINT64_MAX;  // leaves accumulate as soon as their gradient is complete
}

tensor_list AccumulateGrad::apply(tensor_list&& grads) {
  Tensor g = std::move(grads[0]);
  auto impl = this->variable.lock();
  if (!g.defined() || !impl) return {};
  std::lock_guard lock(mutex_);
  const Tensor variable(std::move(impl));
  AutogradMeta& m = ensure_meta(variable);
  for (const GradHook& hook : m.hooks) {
    if (!hook) continue;
    Tensor r = hook(g);
    if (r.defined()) g = std::move(r);
  }
  STRATA_CHECK(g.sizes() == variable.sizes(), "AccumulateGrad: gradient of shape ", g.sizes(),
               " does not match the leaf's shape ", variable.sizes());
  if (g.dtype() != variable.dtype()) g = g.to(variable.dtype());
  if (!m.grad.defined()) {
    m.grad = take_or_clone(std::move(g));
  } else if (GradMode::is_enabled()) {
    m.grad = m.grad + g;
  } else {
    m.grad.add_(g);
  }
  for (const auto& hook : m.post_accumulate_hooks)
    if (hook) hook(variable);
  return {};
}

}  // namespace autograd

using autograd::AutogradMeta;
using autograd::meta;

bool Tensor::requires_grad() const {
  if (autograd::meta_requires_grad(meta(*this))) return true;
  return impl().view_base && autograd::meta_requires_grad(autograd::base_meta(impl()));  // Note [view history]
}

Tensor& Tensor::requires_grad_(bool r) {
  STRATA_CHECK(is_leaf(), "requires_grad_: you can only change requires_grad flags of leaf variables.");
  STRATA_CHECK(!r || is_floating_point(),
               "requires_grad_: only Tensors of floating point dtype can require gradients, got ", dtype());
  if (r || meta(*this)) autograd::ensure_meta(*this).requires_grad = r;
  return *this;
}

Tensor& Tensor::set_requires_grad(bool r) { return requires_grad_(r); }

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  const AutogradMeta* m = meta(*this);
  return m ? m->grad : undefined;
}

Tensor& Tensor::mutable_grad() { return autograd::ensure_meta(*this).grad; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  autograd::refresh_view_history(*this);
  const AutogradMeta* m = meta(*this);
  return m ? m->grad_fn : none;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

uint32_t Tensor::output_nr() const {
  const AutogradMeta* m = meta(*this);
  return m ? m->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? tensor_list{gradient} : tensor_list{}, retain_graph, create_graph);
}

unsigned Tensor::add_hook(std::function<Tensor(const Tensor&)> hook) const {
  STRATA_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  if (const auto& fn = grad_fn()) {
    fn->pre_hooks.emplace_back(output_nr(), std::move(hook));
    return static_cast<unsigned>(fn->pre_hooks.size() - 1);
  }
  auto& hooks = autograd::ensure_meta(*this).hooks;
  hooks.push_back(std::move(hook));
  return static_cast<unsigned>(hooks.size() - 1);
}

void Tensor::remove_hook(unsigned handle) const {
  if (const auto& fn = grad_fn()) {
    STRATA_CHECK(handle < fn->pre_hooks.size(), "remove_hook: invalid hook handle ", handle);
    fn->pre_hooks[handle].second = nullptr;
    return;
  }
  AutogradMeta* m = meta(*this);
  STRATA_CHECK(m && handle < m->hooks.size(), "remove_hook: invalid hook handle ", handle);
  m->hooks[handle] = nullptr;
}

unsigned Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  STRATA_CHECK(is_leaf() && requires_grad(),
               "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate a gradient");
  STRATA_CHECK(hook, "register_post_accumulate_grad_hook: got an empty hook");
  auto& hooks = autograd::ensure_meta(*this).post_accumulate_hooks;
  hooks.push_back(std::move(hook));
  return static_cast<unsigned>(hooks.size() - 1);
}

void Tensor::remove_post_accumulate_grad_hook(unsigned handle) const {
  AutogradMeta* m = meta(*this);
  STRATA_CHECK(m && handle < m->post_accumulate_hooks.size(), "remove_post_accumulate_grad_hook: invalid hook handle ",
               handle);
  m->post_accumulate_hooks[handle] = nullptr;
}

void Tensor::retain_grad() const {
  STRATA_CHECK(requires_grad(), "retain_grad: can't retain_grad on a Tensor that has requires_grad=False");
  if (is_leaf()) return;  // leaves keep their gradient anyway
  AutogradMeta& m = autograd::ensure_meta(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  // A weak link: the hook lives in grad_fn, which this tensor owns.
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  register_hook([weak](const Tensor& g) {
    auto impl = weak.lock();
    if (!impl) return;
    Tensor self(impl);
    Tensor& slot = autograd::ensure_meta(self).grad;
    if (!slot.defined())
      slot = g.clone();
    else
      slot = slot + g;
  });
}

bool Tensor::retains_grad() const {
  const AutogradMeta* m = meta(*this);
  return m && m->retains_grad;
}

Tensor Tensor::detach() const { return make_view(*this, sizes(), strides(), storage_offset()); }

// libtorch's data() does not share the version counter, so a write through it to a tensor saved for backward
// gives a wrong gradient silently; strata keeps one version per storage, and such a write is an error.
Tensor Tensor::data() const { return detach(); }

void Tensor::set_data(const Tensor& data) const {
  STRATA_CHECK(data.defined(), "set_data: the new data is undefined");
  STRATA_CHECK(!requires_grad() || data.is_floating_point(), "set_data: a tensor that requires grad needs floating ",
               "point data, got ", data.dtype());
  TensorImpl& self = impl();
  const TensorImpl& src = data.impl();
  self.storage = src.storage;
  self.sizes = src.sizes;
  self.strides = src.strides;
  self.offset = src.offset;
  self.numel = src.numel;
  self.dtype = src.dtype;
  self.view_base = src.view_base;
}

Tensor& Tensor::detach_() {
  if (AutogradMeta* m = meta(*this)) {
    STRATA_CHECK(!impl().view_base, "detach_: can't detach views in-place. Use detach() instead.");
    m->grad_fn = nullptr;
    m->requires_grad = false;
  }
  return *this;
}

}  // namespace strata
