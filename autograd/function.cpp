// The non-template half of custom Functions (autograd/function.h).

#include "strata/autograd/function.h"

#include <algorithm>

#include "strata/tensor/creation.h"
#include "strata/tensor/kernels.h"

namespace strata::autograd {

tensor_list AutogradContext::get_saved_variables() const {
  STRATA_CHECK(!released_,
               "get_saved_variables: saved variables were freed by a previous backward; "
               "specify retain_graph=true to backward through the graph a second time.");
  tensor_list out;
  out.reserve(saved_.size());
  for (const SavedVariable& v : saved_) out.push_back(v.unpack());
  return out;
}

void AutogradContext::mark_dirty(const tensor_list& inputs) {
  for (const Tensor& t : inputs) dirty_.insert(t.impl_ptr().get());
}

void AutogradContext::mark_non_differentiable(const tensor_list& outputs) {
  for (const Tensor& t : outputs) non_differentiable_.insert(t.impl_ptr().get());
}

void finish_custom_function(Node& node, AutogradContext& ctx, const tensor_list& inputs, tensor_list& outputs,
                            std::vector<std::pair<DimVector, ScalarType>>& output_info,
                            std::vector<DimVector>& input_sizes, bool needs_grad, const std::shared_ptr<Node>& self) {
  const char* name = node.name();
  for (Tensor& out : outputs) {
    STRATA_CHECK(out.defined(), name, ": forward returned an undefined tensor");
    // An input returned unchanged gets its own handle, so recording history does not rewrite the input's.
    const bool is_input = std::any_of(inputs.begin(), inputs.end(), [&](const Tensor& in) { return in.is_same(out); });
    if (is_input && !ctx.dirty_.count(out.impl_ptr().get()))
      out = make_view(out, out.sizes(), out.strides(), out.storage_offset());
  }
  if (!needs_grad) {
    ctx.to_save_.clear();
    return;
  }
  node.next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node.next_edges.push_back(in.defined() ? gradient_edge(in) : Edge{});
    input_sizes.emplace_back(in.defined() ? in.sizes() : IntArrayRef());
  }
  node.num_outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    output_info.emplace_back(DimVector(out.sizes()), out.dtype());
    if (ctx.non_differentiable_.count(out.impl_ptr().get())) continue;
    if (ctx.dirty_.count(out.impl_ptr().get())) {
      const AutogradMeta* m = meta(out);
      STRATA_CHECK(!(m && m->requires_grad && !m->grad_fn), name,
                   ": a leaf Variable that requires grad has been used in an in-place operation (mark_dirty).");
      // Its base would keep a history that no longer matches its values (CopySlices covers strata's own ops).
      STRATA_CHECK(!out.impl().view_base, name,
                   ": mark_dirty on a view is not supported; apply the function to "
                   "the tensor the view was taken from, or to a clone of the view");
    }
    if (out.is_floating_point()) set_history(out, self, static_cast<uint32_t>(i));
  }
  for (const Tensor& t : ctx.to_save_) {
    const bool is_output =
        std::any_of(outputs.begin(), outputs.end(), [&](const Tensor& o) { return t.defined() && o.is_same(t); });
    ctx.saved_.emplace_back(t, is_output);
  }
  ctx.to_save_.clear();
}

namespace detail {

std::string demangle(const char* name) {
  int status = 0;
  char* s = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && s ? s : name;
  std::free(s);
  return out;
}

void materialize(tensor_list& grads, const std::vector<std::pair<DimVector, ScalarType>>& outputs) {
  for (size_t i = 0; i < grads.size() && i < outputs.size(); ++i)
    if (!grads[i].defined()) grads[i] = zeros(outputs[i].first, outputs[i].second);
}

void check_gradient_shape(const char* name, size_t index, const Tensor& grad, IntArrayRef input_sizes) {
  STRATA_CHECK(!grad.defined() || grad.sizes() == input_sizes, name,
               ": function backward returned a gradient of shape ", grad.sizes(), " for argument ", index,
               ", whose shape is ", input_sizes);
}

void check_gradient_count(const char* name, size_t expected, size_t got) {
  STRATA_CHECK(expected == got, name, ": function backward returned an incorrect number of gradients (expected ",
               expected, ", got ", got, ")");
}

}  // namespace detail

}  // namespace strata::autograd
