#pragma once
// nn::Module, the base of every layer and model, and ModuleHolder, the handle users pass
// around (libtorch's `nn::Linear` is a holder of a `LinearImpl`).
//
//   struct NetImpl : nn::Module {
//     NetImpl() : Module("Net") {
//       fc1 = register_module("fc1", nn::Linear(784, 256));
//       fc2 = register_module("fc2", nn::Linear(256, 10));
//     }
//     Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
//     nn::Linear fc1{nullptr}, fc2{nullptr};
//   };
//   STRATA_MODULE(Net);
//
//   Net net;                                    // makes a NetImpl
//   net->to(Device(kCUDA, 0));                  // parameters and buffers move; handles to them stay valid
//   for (auto& [name, p] : net->named_parameters()) std::cout << name << " " << p.sizes() << "\n";
//   Tensor logits = net(randn({64, 784}));      // NetImpl::forward
//   std::cout << *net;                          // the module tree

#include <concepts>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "strata/nn/ordered_dict.h"
#include "strata/tensor/tensor.h"

/// Modules with libtorch's holder pattern, layers, losses, initialisation, safetensors checkpoints and
/// DistributedDataParallel.
namespace strata::nn {

/// Tensors with their dotted names, in registration order, found by name: named_parameters() returns one.
using NamedTensors = OrderedDict<std::string, Tensor>;
/// Name to tensor, what checkpoints hold (parameters and buffers of a module, or optimizer state).
using StateDict = std::map<std::string, Tensor>;

/// Base of every layer and model: owns named parameters, buffers and child modules.
class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name = "Module");  ///< `name` is the type name printed by operator<<
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }  ///< the type name, e.g. "Linear"

  /// Adds a parameter (a leaf; requires grad unless told otherwise) and returns it.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  /// Adds a buffer: state saved in checkpoints and converted by to(), but not trained.
  Tensor register_buffer(std::string name, Tensor tensor);
  /// Adds a child module and returns it.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }
  /// Adds the module behind a holder (nn::Linear(...)) and returns it.
  template <class H>
  requires requires(const H& h) { h.ptr(); }
  auto register_module(std::string name, const H& holder) { return register_module(std::move(name), holder.ptr()); }

  std::vector<Tensor> parameters(bool recurse = true) const;  ///< every parameter, depth first
  NamedTensors named_parameters(bool recurse = true) const;   ///< parameters as "child.weight"
  std::vector<Tensor> buffers(bool recurse = true) const;     ///< every buffer, depth first
  NamedTensors named_buffers(bool recurse = true) const;      ///< buffers with dotted names
  std::vector<std::shared_ptr<Module>> children() const;      ///< direct children, in order
  /// Direct children with their names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// This module and every descendant, depth first, as ("", this), ("fc1", ...), ("block.attn", ...).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  /// Number of parameter elements (only those that require grad when trainable_only).
  int64_t num_parameters(bool trainable_only = false) const;
  /// Calls fn on this module, then on every descendant depth first (as libtorch's apply), e.g. to initialise
  void apply(const std::function<void(Module&)>& fn);
  /// Calls fn with each module's dotted name (name_prefix for this one) and the module, in the same order
  void apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& name_prefix = "");
  /// This module as a T (nullptr when it is not one), as libtorch's as<T>(): module.as<nn::LinearImpl>()
  template <class T>
  T* as() {
    return dynamic_cast<T*>(this);
  }

  virtual void train(bool on = true);             ///< sets training mode here and below
  void eval() { train(false); }                   ///< train(false)
  bool is_training() const { return training_; }  ///< whether in training mode
  /// Clears every parameter's gradient: undefined (the default, as torch) or zero-filled.
  void zero_grad(bool set_to_none = true);
  /// Converts floating-point parameters and buffers to dtype in place (handles stay valid; grads are dropped).
  void to(ScalarType dtype);
  /// Moves every parameter, buffer and gradient to `device` in place (handles stay valid); a module is on the
  /// device its parameters are on. On an error (no GPU) nothing has moved.
  void to(Device device);
  /// to(device) and to(dtype) in one copy per tensor (grads of converted tensors are dropped).
  void to(Device device, ScalarType dtype);

  /// Parameters and buffers by dotted name (what nn::save writes).
  StateDict state_dict() const;
  /// Copies values from `dict` into parameters and buffers; every name and shape is checked before anything is
  /// written. strict (as torch): missing and unexpected keys are errors; otherwise both are skipped.
  void load_state_dict(const StateDict& dict, bool strict = true);
  /// Throws exactly as load_state_dict(dict, strict) would, but writes nothing: for loading several
  /// modules all or nothing.
  void check_state_dict(const StateDict& dict, bool strict = true) const;

  /// Writes this module's own line, e.g. "Linear(in_features=784, out_features=256, bias=true)".
  virtual void pretty_print(std::ostream& os) const;

 private:
  void add_child(std::string name, std::shared_ptr<Module> child);
  void convert(std::optional<Device> device, std::optional<ScalarType> dtype);
  void check_new_name(const std::string& name, const char* what) const;
  std::vector<std::pair<std::string, const Module*>> walk(bool recurse) const;
  NamedTensors collect(bool recurse, bool buffers) const;
  using Entries = std::vector<std::pair<std::string, Tensor>>;

  std::string name_;
  bool training_ = true;
  Entries parameters_;
  Entries buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

/// Prints the module tree, one child per line under its parent, as libtorch does.
std::ostream& operator<<(std::ostream& os, const Module& module);

/// The device of `module`'s parameters, or std::nullopt when it has none. Parameters on two devices throw,
/// naming both, with a message that starts with `op` (data parallel and the pipeline engine need one device).
std::optional<Device> parameters_device(const Module& module, const char* op);

/// A shared handle to a module implementation; call it to run forward. Made by STRATA_MODULE.
template <class Impl>
class ModuleHolder {
 public:
  using ContainedType = Impl;  ///< the module type it holds (libtorch's name)
  /// Default-constructs the module.
  ModuleHolder() requires std::default_initializable<Impl> : impl_(std::make_shared<Impl>()) {}
  ModuleHolder(std::nullptr_t) {}                                       ///< an empty holder, to be assigned later
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}  ///< wraps an existing module
  /// Constructs the module from arguments: nn::Linear(784, 256).
  template <class First, class... Rest>
  requires(!std::convertible_to<First, std::shared_ptr<Impl>> &&
           !std::derived_from<std::remove_cvref_t<First>, ModuleHolder> &&
           std::constructible_from<Impl, First, Rest...>) explicit ModuleHolder(First&& first, Rest&&... rest)
      : impl_(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  Impl* operator->() const { return get(); }  ///< the module
  Impl& operator*() const { return *get(); }  ///< the module
  Impl* get() const {                         ///< the module; throws when empty
    STRATA_CHECK(impl_, "ModuleHolder: the module is empty (constructed from nullptr and never assigned)");
    return impl_.get();
  }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }  ///< the shared module
  bool is_empty() const { return impl_ == nullptr; }          ///< true when made from nullptr
  /// Calls the module's forward.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<Impl> impl_;
};

namespace impl {
/// For layers with libtorch's inplace option: result, written into input (by copy_, so autograd's in-place
/// rules apply) when inplace.
Tensor maybe_inplace(const Tensor& input, const Tensor& result, bool inplace);
}  // namespace impl

}  // namespace strata::nn

/// Declares `Name` as the holder of `NameImpl`, as libtorch's TORCH_MODULE.
#define STRATA_MODULE(Name)                                     \
  class Name : public ::strata::nn::ModuleHolder<Name##Impl> {  \
   public:                                                      \
    using ::strata::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
