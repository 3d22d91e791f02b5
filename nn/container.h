#pragma once
// Sequential chains modules whose forward maps one Tensor to one Tensor; Functional wraps a
// plain function (a reshape, an activation) as a module, as in libtorch.
//
//   nn::Sequential mlp(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
//   mlp->push_back(nn::Functional([](const Tensor& x) { return log_softmax(x, 1); }));
//   Tensor images = randn({64, 28, 28});
//   Tensor logits = mlp(images.flatten(1));
//   std::cout << *mlp;   // Sequential( (0): Linear(...) (1): ReLU() ... )

#include <functional>
#include <string>

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

}  // namespace strata::nn
