#pragma once
// Sequential chains modules whose forward maps one Tensor to one Tensor; Functional wraps a
// plain function (a reshape, an activation) as a module; ModuleList and ModuleDict hold children
// by position or by name for a forward written by hand. As in libtorch.
//
//   nn::Sequential mlp(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
//   mlp->push_back(nn::Functional([](const Tensor& x) { return log_softmax(x, 1); }));
//   Tensor images = randn({64, 28, 28});
//   Tensor logits = mlp(images.flatten(1));
//   std::cout << *mlp;   // Sequential( (0): Linear(...) (1): ReLU() ... )
//   nn::ModuleList blocks(nn::Linear(8, 8), nn::Linear(8, 8));
//   Tensor h = randn({2, 8});
//   for (const auto& block : *blocks) h = block->as<nn::LinearImpl>()->forward(h);
//   std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> named = {{"cls", nn::Linear(8, 10).ptr()},
//                                                                            {"box", nn::Linear(8, 4).ptr()}};
//   nn::ModuleDict heads(named);
//   Tensor boxes = heads->at<nn::LinearImpl>("box").forward(h);

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/nn/module.h"

namespace strata::nn {

/// A parameterless module that calls a function.
class FunctionalImpl : public Module {
 public:
  /// Wraps f; `name` is what operator<< prints.
  explicit FunctionalImpl(std::function<Tensor(const Tensor&)> f, std::string name = "Functional");
  Tensor forward(const Tensor& x) { return f_(x); }  ///< f(x)

 private:
  std::function<Tensor(const Tensor&)> f_;
};
STRATA_MODULE(Functional);

/// Modules applied in order; children are named "0", "1", ... unless given names.
class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}  ///< empty; add layers with push_back
  /// The given modules (holders or shared_ptrs), in order.
  template <class... Modules>
  requires(sizeof...(Modules) > 0) explicit SequentialImpl(Modules&&... modules) : Module("Sequential") {
    (push_back(std::forward<Modules>(modules)), ...);
  }

  /// Appends a module (holder or shared_ptr) named by its position.
  template <class M>
  void push_back(M&& module) {
    push_back(std::to_string(size()), std::forward<M>(module));
  }
  /// Appends a named module (holder or shared_ptr); its forward must map a Tensor to a Tensor.
  template <class M>
  void push_back(std::string name, M&& module) {
    auto impl = register_module(std::move(name), std::forward<M>(module));
    forwards_.emplace_back([impl](const Tensor& x) -> Tensor { return impl->forward(x); });
    modules_.push_back(impl);
  }

  Tensor forward(const Tensor& x);                            ///< each module's forward, in order
  size_t size() const { return modules_.size(); }             ///< number of modules
  const std::shared_ptr<Module>& operator[](size_t i) const;  ///< module i

 private:
  std::vector<std::function<Tensor(const Tensor&)>> forwards_;
  std::vector<std::shared_ptr<Module>> modules_;
};
STRATA_MODULE(Sequential);

/// Children by position, for a forward written by hand, as libtorch's ModuleList; named "0", "1", ...
class ModuleListImpl : public Module {
 public:
  ModuleListImpl() : Module("ModuleList") {}  ///< empty
  /// The given modules (holders or shared_ptrs), in order
  template <class... Modules>
  requires(sizeof...(Modules) > 0) explicit ModuleListImpl(Modules&&... modules) : Module("ModuleList") {
    (push_back(std::forward<Modules>(modules)), ...);
  }
  /// Appends a module (holder or shared_ptr)
  template <class M>
  void push_back(M&& module) {
    modules_.push_back(register_module(std::to_string(modules_.size()), std::forward<M>(module)));
  }
  size_t size() const { return modules_.size(); }                                    ///< number of modules
  bool is_empty() const { return modules_.empty(); }                                 ///< whether it holds none
  const std::shared_ptr<Module>& operator[](size_t index) const;                     ///< module `index`, checked
  const std::shared_ptr<Module>& ptr(size_t index) const { return (*this)[index]; }  ///< module `index`
  /// Module `index` as a T; throws when it is another type
  template <class T>
  T& at(size_t index) const {
    T* module = (*this)[index]->as<T>();
    STRATA_CHECK(module, "ModuleList::at: module ", index, " is a ", (*this)[index]->name(),
                 ", not the type asked for");
    return *module;
  }
  auto begin() const { return modules_.begin(); }  ///< iterator over shared_ptr<Module>, in order
  auto end() const { return modules_.end(); }      ///< past the last module

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
STRATA_MODULE(ModuleList);

/// Children by name, in insertion order, as libtorch's ModuleDict.
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() : Module("ModuleDict") {}  ///< empty
  /// The given (name, module) pairs, in order
  explicit ModuleDictImpl(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules);
  void insert(const std::string& key, std::shared_ptr<Module> module);  ///< adds a module under a new key
  /// Adds the module behind a holder
  template <class H>
  requires requires(const H& h) { h.ptr(); }
  void insert(const std::string& key, const H& holder) { insert(key, std::shared_ptr<Module>(holder.ptr())); }
  size_t size() const { return named_children().size(); }                     ///< number of modules
  bool contains(const std::string& key) const;                                ///< whether key is present
  std::shared_ptr<Module> operator[](const std::string& key) const;           ///< the module under key, checked
  std::vector<std::string> keys() const;                                      ///< the keys, in insertion order
  std::vector<std::shared_ptr<Module>> values() const { return children(); }  ///< the modules, in order
  /// The module under key as a T; throws when it is another type
  template <class T>
  T& at(const std::string& key) const {
    T* module = (*this)[key]->as<T>();
    STRATA_CHECK(module, "ModuleDict::at: \"", key, "\" is a ", (*this)[key]->name(), ", not the type asked for");
    return *module;
  }
};
STRATA_MODULE(ModuleDict);

}  // namespace strata::nn
