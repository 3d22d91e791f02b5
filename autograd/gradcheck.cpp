// gradcheck: the analytical Jacobian (one backward per output element) against central
// differences (two forwards per input element), all in float64, on the inputs' device.

#include "strata/autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_set>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/kernels.h"

namespace strata::autograd {

namespace {

// Storage offset of the flat (row-major) element i of t.
int64_t element_offset(const Tensor& t, int64_t i) {
  int64_t off = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.size(d)) * t.stride(d);
    i /= t.size(d);
  }
  return off;
}

// Outputs of fn that gradcheck compares: the floating-point ones.
std::vector<size_t> differentiable_outputs(const tensor_list& outputs) {
  std::vector<size_t> out;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined() && outputs[i].is_floating_point()) out.push_back(i);
  return out;
}

// What a mismatch message calls the check, an output and an input: gradcheck's own function's, or, for
// gradgradcheck, those of the vector-Jacobian product it checks in terms of the user's function.
struct Names {
  const char* check = "gradcheck";
  std::function<std::string(size_t)> output = [](size_t k) { return "output " + std::to_string(k); };
  std::function<std::string(size_t)> input = [](size_t i) { return "input " + std::to_string(i); };
};

// Note [gradcheck within one process]: a collective's gradient is a sum over ranks, and gradcheck perturbs only
// this rank's inputs (on every rank at once), so its numbers mean nothing there while the check may still pass.
// functional.h's collectives register their node with run_in_next_backward (they must run on every rank), and
// tensor_parallel.h's mark theirs spans_processes(); a function that registered one, or whose outputs' graph holds
// one, is refused. What it registered is dropped: every rank throws here alike, and the nodes must not run in the
// caller's next backward. Registrations made before gradcheck are kept. A mapping inside autograd::checkpoint is
// recorded only when backward recomputes it, so it escapes this check.

/// The first node of the outputs' graph that spans processes, or null; the walk stops at the inputs' history.
std::shared_ptr<Node> spanning_node(const tensor_list& outputs, const tensor_list& inputs) {
  std::vector<std::shared_ptr<Node>> stack;
  std::unordered_set<const Node*> seen;
  for (const Tensor& in : inputs)
    if (in.defined() && in.grad_fn()) seen.insert(in.grad_fn().get());
  for (const Tensor& out : outputs)
    if (out.defined() && out.grad_fn()) stack.push_back(out.grad_fn());
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (node->spans_processes()) return node;
    for (const Edge& e : node->next_edges)
      if (e.fn) stack.push_back(e.fn);
  }
  return nullptr;
}

tensor_list spans_no_processes(const GradcheckFn& fn, const tensor_list& inputs) {
  std::vector<std::shared_ptr<Node>> before = take_next_backward_nodes();
  tensor_list outputs;
  std::vector<std::shared_ptr<Node>> registered;
  try {
    outputs = fn(inputs);
    registered = take_next_backward_nodes();
  } catch (...) {
    std::vector<std::shared_ptr<Node>> added = take_next_backward_nodes();
    for (auto& node : before) run_in_next_backward(std::move(node));
    for (auto& node : added) run_in_next_backward(std::move(node));
    throw;
  }
  for (auto& node : before) run_in_next_backward(std::move(node));
  const std::shared_ptr<Node> spanning = registered.empty() ? spanning_node(outputs, inputs) : registered.front();
  STRATA_CHECK(!spanning, "gradcheck: the function runs ", spanning->name(),
               ", an op that spans processes; its gradient sums over ranks, which gradcheck on one process cannot "
               "check: use distributed::gradcheck");
  return outputs;
}

}  // namespace

namespace detail {

void check_input(const Tensor& x, size_t i) {
  STRATA_CHECK(x.dtype() == kDouble, "gradcheck: input ", i, " has dtype ", x.dtype(),
               "; gradcheck needs float64 inputs (finite differences in lower precision are too coarse)");
  for (int64_t d = 0; d < x.dim(); ++d)
    STRATA_CHECK(x.stride(d) != 0 || x.size(d) <= 1, "gradcheck: input ", i, " of shape ", x.sizes(),
                 " has overlapping memory (stride 0 at dim ", d, "); pass the base tensor and expand inside fn");
}

double read(const Tensor& t, int64_t i) {
  if (!t.is_cpu()) return make_view(t, {}, {}, element_offset(t, i)).item<double>();  // waits for the value
  return visit_all_dtypes(t.dtype(), [&]<class T>() {
    return static_cast<double>(static_cast<const T*>(t.impl().storage->data)[element_offset(t, i)]);
  });
}

// Note [perturbing in place]: the write goes through the kernel table, not an in-place op, so the storage's
// version counter stays put: the graph gradcheck built before perturbing saved these inputs and must still
// unpack them. On a GPU the fill is queued on the device's stream, ahead of the forward that reads it.
void write(const Tensor& t, int64_t i, double value) {
  kernels_for(t.device()).fill(make_view(t, {}, {}, element_offset(t, i)), value);
}

std::string index_string(const Tensor& t, int64_t i) {
  DimVector idx(t.dim());
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    idx[d] = i % t.size(d);
    i /= t.size(d);
  }
  std::ostringstream os;
  os << IntArrayRef(idx);
  return os.str();
}

}  // namespace detail

namespace {

bool check_jacobians(const GradcheckFn& fn, const tensor_list& inputs, const GradcheckOptions& o, const Names& names) {
  std::vector<size_t> diff_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    detail::check_input(x, i);
    diff_inputs.push_back(i);
  }
  STRATA_CHECK(!diff_inputs.empty(), names.check, ": no input requires grad");

  tensor_list outputs = spans_no_processes(fn, inputs);
  const std::vector<size_t> diff_outputs = differentiable_outputs(outputs);
  tensor_list diff_input_tensors;
  for (size_t i : diff_inputs) diff_input_tensors.push_back(inputs[i]);

  // numerical[(input, element)] = the flattened output values' central differences.
  std::vector<std::vector<std::vector<double>>> numerical(diff_inputs.size());
  {
    NoGradGuard no_grad;
    for (size_t a = 0; a < diff_inputs.size(); ++a) {
      const Tensor& x = inputs[diff_inputs[a]];
      numerical[a].resize(x.numel());
      // Outputs are copied to the host at once: they may be views of the input, and are read element by element.
      auto evaluate = [&] {
        tensor_list out = fn(inputs);
        for (Tensor& t : out)
          if (t.defined()) t = t.to(Device(kCPU), /*non_blocking=*/false, /*copy=*/true);
        return out;
      };
      for (int64_t j = 0; j < x.numel(); ++j) {
        const double orig = detail::read(x, j);
        detail::write(x, j, orig + o.eps);
        const tensor_list plus = evaluate();
        detail::write(x, j, orig - o.eps);
        const tensor_list minus = evaluate();
        detail::write(x, j, orig);
        for (size_t k : diff_outputs)
          for (int64_t e = 0; e < outputs[k].numel(); ++e)
            numerical[a][j].push_back((detail::read(plus[k], e) - detail::read(minus[k], e)) / (2 * o.eps));
      }
    }
  }

  // Analytical: one vector-Jacobian product per output element.
  int64_t flat_base = 0;
  for (size_t k : diff_outputs) {
    const Tensor& out = outputs[k];
    for (int64_t e = 0; e < out.numel(); ++e) {
      tensor_list grads(diff_inputs.size());
      if (out.requires_grad()) {
        Tensor seed = zeros(out.sizes(), out.options());
        detail::write(seed, e, 1);
        grads = grad({out}, diff_input_tensors, {seed}, /*retain_graph=*/true, /*create_graph=*/false,
                     /*allow_unused=*/true);
        for (Tensor& g : grads)
          if (g.defined()) g = g.cpu();  // read element by element below
      }
      for (size_t a = 0; a < diff_inputs.size(); ++a) {
        const Tensor& x = inputs[diff_inputs[a]];
        for (int64_t j = 0; j < x.numel(); ++j) {
          const double an = grads[a].defined() ? detail::read(grads[a], j) : 0.0;
          const double nu = numerical[a][j][flat_base + e];
          if (std::abs(an - nu) <= o.atol + o.rtol * std::abs(nu)) continue;
          if (!o.raise_exception) return false;
          STRATA_CHECK(false, names.check, ": Jacobian mismatch for ", names.output(k), " with respect to ",
                       names.input(diff_inputs[a]), " at input element ", detail::index_string(x, j),
                       " and output element ", detail::index_string(out, e), ": analytical ", an, " vs numerical ", nu,
                       " (eps ", o.eps, ", atol ", o.atol, ", rtol ", o.rtol, ")");
        }
      }
    }
    flat_base += out.numel();
  }
  return true;
}

}  // namespace

bool gradcheck(const GradcheckFn& fn, const tensor_list& inputs, const GradcheckOptions& o) {
  return check_jacobians(fn, inputs, o, Names{});
}

bool gradcheck(const std::function<Tensor(const tensor_list&)>& fn, const tensor_list& inputs,
               const GradcheckOptions& options) {
  return gradcheck([&](const tensor_list& in) { return tensor_list{fn(in)}; }, inputs, options);
}

bool gradgradcheck(const GradcheckFn& fn, const tensor_list& inputs, const GradcheckOptions& options) {
  const size_t n = inputs.size();
  std::vector<size_t> wrt_inputs;  // the inputs the first derivatives are taken with respect to
  for (size_t i = 0; i < n; ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) wrt_inputs.push_back(i);
  STRATA_CHECK(!wrt_inputs.empty(), "gradgradcheck: no input requires grad");
  tensor_list outputs = spans_no_processes(fn, inputs);
  const std::vector<size_t> diff_outputs = differentiable_outputs(outputs);
  // Random cotangents from a private generator, so the caller's random stream is untouched.
  Generator gen(0);
  tensor_list all = inputs;
  for (size_t k : diff_outputs)
    all.push_back(randn(outputs[k].sizes(), dtype(kDouble).device(outputs[k].device()).requires_grad(true), &gen));
  auto vjp = [&](const tensor_list& in) {
    AutoGradMode enable_grad(true);  // gradcheck evaluates fn under NoGradGuard for its numerical part
    tensor_list x(in.begin(), in.begin() + n), cotangents(in.begin() + n, in.end());
    tensor_list outs = fn(x), diff_outs, wrt;
    for (size_t k : diff_outputs) diff_outs.push_back(outs[k]);
    for (size_t i : wrt_inputs) wrt.push_back(x[i]);
    tensor_list g = grad(diff_outs, wrt, cotangents, true, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = zeros(wrt[i].sizes(), wrt[i].options());
    return g;
  };
  // The checked function's outputs are the first derivatives, its inputs fn's inputs and the cotangents.
  Names names;
  names.check = "gradgradcheck";
  names.output = [&wrt_inputs](size_t k) {
    return "the first derivative (a vector-Jacobian product) with respect to input " + std::to_string(wrt_inputs.at(k));
  };
  names.input = [n, &diff_outputs](size_t i) {
    return i < n ? "input " + std::to_string(i)
                 : "the grad_output (random cotangent) of output " + std::to_string(diff_outputs.at(i - n));
  };
  return check_jacobians(vjp, all, options, names);
}

bool gradgradcheck(const std::function<Tensor(const tensor_list&)>& fn, const tensor_list& inputs,
                   const GradcheckOptions& options) {
  return gradgradcheck([&](const tensor_list& in) { return tensor_list{fn(in)}; }, inputs, options);
}

}  // namespace strata::autograd
