// Activation checkpointing (autograd/checkpoint.h).
//
// Note [checkpoint]: forward keeps fn, its inputs (detached, version-checked), the default generator's seed
// and position and the autocast settings, never fn's activations. Backward runs fn again with grad enabled
// and forward's autocast on fresh detached copies of the inputs, drawing from a copy of the generator as
// forward found it (this thread's default generator for the recomputation: the real stream, which other
// threads may be drawing from, ends where it would without it), then calls grad() on the recomputed graph.
// grad() captures the gradients at the copies and at the parameters' accumulators instead of accumulating,
// and this node returns them to the engine as its input gradients: a parameter's AccumulateGrad then runs
// once, in the outer pass, with its hooks. The inner pass has state of its own (Note [pass state] in engine.cpp).

#include "strata/autograd/checkpoint.h"

#include <algorithm>
#include <unordered_set>

#include "strata/autograd/autocast.h"
#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/kernels.h"

namespace strata::autograd {

namespace {

// The autocast settings forward ran under: backward runs with autocast off, and the recomputation must cast as
// forward did, or its graph would differ from the one the outputs came from.
struct AutocastSettings {
  bool cpu_enabled = autocast::is_autocast_enabled(kCPU), cuda_enabled = autocast::is_autocast_enabled(kCUDA);
  ScalarType cpu_dtype = autocast::get_autocast_dtype(kCPU), cuda_dtype = autocast::get_autocast_dtype(kCUDA);
  bool cache_enabled = autocast::is_autocast_cache_enabled();
};

struct CheckpointNode final : Node {
  using Fn = std::function<tensor_list(const tensor_list&)>;
  CheckpointNode(Fn f, uint32_t num_outputs) : Node(num_outputs), fn(std::move(f)) {}

  tensor_list apply(tensor_list&& grads) override {
    if (!fn) throw_released(name());
    STRATA_CHECK(!GradMode::is_enabled(),
                 "checkpoint: backward with create_graph=true is not supported "
                 "(the recomputation starts from detached inputs)");
    tensor_list inputs;
    inputs.reserve(saved_inputs.size());
    for (size_t i = 0; i < saved_inputs.size(); ++i) {
      Tensor x = saved_inputs[i].unpack();
      if (x.defined()) x = next_edges[i].valid() ? x.detach().requires_grad_(true) : x.detach();
      inputs.push_back(std::move(x));
    }
    tensor_list outputs;
    {
      Generator replay = rng;
      ThreadDefaultGenerator replaying(replay);
      AutoGradMode grad_on(true);
      AutocastGuard cpu_autocast(kCPU, autocast.cpu_dtype, autocast.cpu_enabled, autocast.cache_enabled);
      AutocastGuard cuda_autocast(kCUDA, autocast.cuda_dtype, autocast.cuda_enabled, autocast.cache_enabled);
      outputs = fn(inputs);
    }
    STRATA_CHECK(outputs.size() == num_outputs, "checkpoint: the recomputation returned ", outputs.size(),
                 " tensors where the forward returned ", num_outputs, " (fn must do the same work both times)");

    tensor_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!grads[i].defined() || !outputs[i].defined() || !outputs[i].requires_grad()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(std::move(grads[i]));
    }
    tensor_list targets;
    std::vector<size_t> slots;  // targets[k] is the input of next_edges[slots[k]]
    for (size_t i = 0; i < next_edges.size(); ++i) {
      if (!next_edges[i].valid()) continue;
      targets.push_back(i < inputs.size() ? inputs[i] : saved_parameters[i - inputs.size()].unpack());
      slots.push_back(i);
    }
    tensor_list result(next_edges.size());
    if (roots.empty()) return result;
    tensor_list g = grad(roots, targets, root_grads, /*retain_graph=*/false, /*create_graph=*/false,
                         /*allow_unused=*/true);
    for (size_t k = 0; k < slots.size(); ++k) result[slots[k]] = std::move(g[k]);
    return result;
  }

  const char* name() const override { return "CheckpointBackward"; }
  void release_variables() override {
    fn = nullptr;
    saved_inputs.clear();
    saved_parameters.clear();
  }

  Fn fn;
  std::vector<SavedVariable> saved_inputs, saved_parameters;
  Generator rng;              // the default generator's state when forward ran
  AutocastSettings autocast;  // made after forward ran, so under its settings
};

}  // namespace

tensor_list checkpoint(const std::function<tensor_list(const tensor_list&)>& fn, const tensor_list& inputs,
                       const tensor_list& parameters) {
  STRATA_CHECK(fn, "checkpoint: fn is empty");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    STRATA_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "checkpoint: parameter ", i,
                 " is not a leaf that requires grad; pass the trainable parameters fn uses");
    STRATA_CHECK(seen.insert(p.impl_ptr().get()).second, "checkpoint: parameter ", i,
                 " is given twice; its gradient would be counted twice");
  }
  const Generator rng = default_generator();
  tensor_list outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  STRATA_CHECK(!outputs.empty(), "checkpoint: fn returned no tensors");
  for (size_t i = 0; i < outputs.size(); ++i)
    STRATA_CHECK(outputs[i].defined(), "checkpoint: fn returned an undefined tensor at position ", i);

  tensor_list all = inputs;
  all.insert(all.end(), parameters.begin(), parameters.end());
  if (!any_requires_grad(all)) return outputs;

  auto node = std::make_shared<CheckpointNode>(fn, static_cast<uint32_t>(outputs.size()));
  node->rng = rng;
  node->next_edges.reserve(all.size());
  for (const Tensor& t : all) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  for (const Tensor& x : inputs) node->saved_inputs.emplace_back(x.defined() ? x.detach() : x);
  for (const Tensor& p : parameters) node->saved_parameters.emplace_back(p);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.is_floating_point()) continue;
    // An input handed back unchanged stays as it is when it needs no gradient, and is otherwise aliased so
    // that recording history does not rewrite the input's own; so is a tensor fn returned twice.
    const auto is_out = [&](const Tensor& t) { return t.is_same(out); };
    const auto input = std::find_if(inputs.begin(), inputs.end(), is_out);
    if (input != inputs.end() && !input->requires_grad()) continue;
    if (input != inputs.end() || std::any_of(outputs.begin(), outputs.begin() + i, is_out))
      out = make_view(out, out.sizes(), out.strides(), out.storage_offset());
    set_history(out, node, static_cast<uint32_t>(i));
  }
  return outputs;
}

}  // namespace strata::autograd
