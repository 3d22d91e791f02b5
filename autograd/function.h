#pragma once
// Custom differentiable functions in libtorch's shape.
//
//   using namespace strata::autograd;
//   struct MulConst : Function<MulConst> {
//     static Tensor forward(AutogradContext* ctx, Tensor x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
//       return {grads[0] * ctx->saved_data["c"].toDouble(), Tensor()};  // one per forward argument
//     }
//   };
//   Tensor x = randn({3}, requires_grad());
//   Tensor y = MulConst::apply(x, 2.0);

#include <cxxabi.h>

#include <cstdlib>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"

namespace strata::autograd {

using strata::tensor_list;          ///< a list of tensors, as torch::autograd::tensor_list
using variable_list = tensor_list;  ///< libtorch's other name for it

class AutogradContext;
/// Shared by every Function<T>::apply: aliases outputs that are unmodified inputs, wires edges and history.
void finish_custom_function(Node& node, AutogradContext& ctx, const tensor_list& inputs, tensor_list& outputs,
                            std::vector<std::pair<DimVector, ScalarType>>& output_info,
                            std::vector<DimVector>& input_sizes, bool needs_grad, const std::shared_ptr<Node>& self);

/// A value kept in AutogradContext::saved_data, with libtorch's accessors.
class IValue {
 public:
  IValue() = default;
  IValue(double v) : v_(v) {}             ///< a floating value
  IValue(int64_t v) : v_(v) {}            ///< an integer
  IValue(int v) : v_(int64_t{v}) {}       ///< an integer
  IValue(bool v) : v_(v) {}               ///< a flag
  IValue(Tensor v) : v_(std::move(v)) {}  ///< a tensor (not checked for in-place changes; prefer save_for_backward)
  IValue(std::string v) : v_(std::move(v)) {}                                    ///< a string
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}                           ///< a list of ints, e.g. sizes
  double toDouble() const { return get<double>("double"); }                      ///< the double held
  int64_t toInt() const { return get<int64_t>("int"); }                          ///< the integer held
  bool toBool() const { return get<bool>("bool"); }                              ///< the flag held
  const Tensor& toTensor() const { return get<Tensor>("Tensor"); }               ///< the tensor held
  const std::string& toStringRef() const { return get<std::string>("string"); }  ///< the string held
  const std::vector<int64_t>& toIntVector() const { return get<std::vector<int64_t>>("int list"); }  ///< the ints held

 private:
  template <class V>
  const V& get(const char* what) const {
    const V* p = std::get_if<V>(&v_);
    STRATA_CHECK(p, "IValue: expected a ", what, " but this value holds another type (index ", v_.index(), ")");
    return *p;
  }
  std::variant<std::monostate, double, int64_t, bool, Tensor, std::string, std::vector<int64_t>> v_;
};

/// Carries state from a custom Function's forward to its backward.
class AutogradContext {
 public:
  /// Saves tensors for backward; unpacking checks they were not modified in place meanwhile.
  void save_for_backward(tensor_list to_save) { to_save_ = std::move(to_save); }
  /// The tensors given to save_for_backward.
  tensor_list get_saved_variables() const;
  /// Marks inputs that forward modified in place.
  void mark_dirty(const tensor_list& inputs);
  /// Marks outputs that have no gradient (e.g. indices).
  void mark_non_differentiable(const tensor_list& outputs);
  /// When false, backward receives undefined tensors for outputs that got no gradient (default true: zeros).
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  /// Whether the i-th forward argument needs a gradient.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  /// Arbitrary non-tensor state for backward.
  std::unordered_map<std::string, IValue> saved_data;

 private:
  template <class T>
  friend struct CppNode;
  template <class T>
  friend struct Function;
  friend void finish_custom_function(Node&, AutogradContext&, const tensor_list&, tensor_list&,
                                     std::vector<std::pair<DimVector, ScalarType>>&, std::vector<DimVector>&, bool,
                                     const std::shared_ptr<Node>&);
  tensor_list to_save_;
  std::vector<SavedVariable> saved_;
  std::unordered_set<TensorImpl*> dirty_, non_differentiable_;
  std::vector<bool> needs_input_grad_;
  bool materialize_grads_ = true;
  bool released_ = false;
};

namespace detail {
std::string demangle(const char* name);
/// Undefined gradients of outputs become zeros shaped like the output when materializing.
void materialize(tensor_list& grads, const std::vector<std::pair<DimVector, ScalarType>>& outputs);
void check_gradient_count(const char* name, size_t expected, size_t got);
/// Throws when backward's gradient for argument `index` does not have its input's shape.
void check_gradient_shape(const char* name, size_t index, const Tensor& grad, IntArrayRef input_sizes);

inline void flatten_arg(tensor_list& tensors, std::vector<bool>& is_var, const Tensor& t) {
  tensors.push_back(t);
  is_var.push_back(true);
}
inline void flatten_arg(tensor_list& tensors, std::vector<bool>& is_var, const tensor_list& ts) {
  for (const auto& t : ts) flatten_arg(tensors, is_var, t);
}
template <class A>
void flatten_arg(tensor_list&, std::vector<bool>& is_var, const A&) {
  is_var.push_back(false);
}
}  // namespace detail

/// The graph node of a custom Function T.
template <class T>
struct CppNode final : Node {
  CppNode() : Node(0) {}
  tensor_list apply(tensor_list&& grads) override {
    if (ctx.released_) throw_released(name());
    if (ctx.materialize_grads_) detail::materialize(grads, output_info);
    tensor_list all = T::backward(&ctx, std::move(grads));
    // Trailing undefined gradients for non-tensor arguments may be left out, as in libtorch.
    while (all.size() > is_variable_input.size() && !all.back().defined()) all.pop_back();
    detail::check_gradient_count(name(), is_variable_input.size(), all.size());
    tensor_list out;
    out.reserve(next_edges.size());
    for (size_t i = 0; i < all.size(); ++i) {
      if (!is_variable_input[i]) continue;
      detail::check_gradient_shape(name(), i, all[i], input_sizes[out.size()]);
      out.push_back(std::move(all[i]));
    }
    return out;
  }
  const char* name() const override {
    static const std::string n = detail::demangle(typeid(T).name()) + "Backward";
    return n.c_str();
  }
  /// T declares `static constexpr bool spans_processes = true` when its backward runs a collective.
  bool spans_processes() const override {
    if constexpr (requires { T::spans_processes; }) return T::spans_processes;
    return false;
  }
  void release_variables() override {
    ctx.saved_.clear();
    ctx.released_ = true;
  }
  AutogradContext ctx;                                        ///< what forward saved for backward
  std::vector<bool> is_variable_input;                        ///< per flattened forward argument: a tensor?
  std::vector<std::pair<DimVector, ScalarType>> output_info;  ///< per output, to materialize missing grads
  std::vector<DimVector> input_sizes;                         ///< per tensor input, to check returned grads
};

/// CRTP base of a custom differentiable function: define static forward(ctx, args...) and backward(ctx, grads).
template <class T>
struct Function {
  /// Runs T::forward without recording, then records one node whose backward is T::backward.
  template <class... Args>
  static auto apply(Args&&... args) {
    auto node = std::make_shared<CppNode<T>>();
    tensor_list inputs;
    (detail::flatten_arg(inputs, node->is_variable_input, args), ...);
    const bool needs_grad = GradMode::is_enabled() && any_requires_grad(inputs);
    {
      size_t k = 0;
      for (bool is_var : node->is_variable_input) {
        const bool needs = is_var && needs_grad && inputs[k].defined() && inputs[k].requires_grad();
        if (is_var) ++k;
        node->ctx.needs_input_grad_.push_back(needs);
      }
    }
    using Out = decltype(T::forward(&node->ctx, std::forward<Args>(args)...));
    Out out = [&] {
      AutoGradMode no_grad(false);
      return T::forward(&node->ctx, std::forward<Args>(args)...);
    }();
    tensor_list outputs;
    if constexpr (std::is_same_v<Out, Tensor>)
      outputs = {out};
    else
      outputs = out;
    finish_custom_function(*node, node->ctx, inputs, outputs, node->output_info, node->input_sizes, needs_grad, node);
    if constexpr (std::is_same_v<Out, Tensor>)
      return outputs[0];
    else
      return outputs;
  }
};

}  // namespace strata::autograd
