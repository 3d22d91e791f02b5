#include "strata/nn/container.h"

namespace strata::nn {

FunctionalImpl::FunctionalImpl(std::function<Tensor(const Tensor&)> f, std::string name)
    : Module(std::move(name)), f_(std::move(f)) {
  STRATA_CHECK(f_, "Functional: got an empty function");
}

Tensor SequentialImpl::forward(const Tensor& x) {
  STRATA_CHECK(!forwards_.empty(), "Sequential::forward: the Sequential is empty");
  Tensor h = x;
  for (const auto& f : forwards_) h = f(h);
  return h;
}

const std::shared_ptr<Module>& SequentialImpl::operator[](size_t i) const {
  STRATA_CHECK(i < modules_.size(), "Sequential: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

}  // namespace strata::nn
