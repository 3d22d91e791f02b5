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

const std::shared_ptr<Module>& ModuleListImpl::operator[](size_t index) const {
  STRATA_CHECK(index < modules_.size(), "ModuleList: index ", index, " is out of range for ", modules_.size(),
               " modules");
  return modules_[index];
}

ModuleDictImpl::ModuleDictImpl(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules)
    : Module("ModuleDict") {
  for (const auto& [key, module] : modules) insert(key, module);
}

void ModuleDictImpl::insert(const std::string& key, std::shared_ptr<Module> module) {
  STRATA_CHECK(module, "ModuleDict::insert: the module for \"", key, "\" is null");
  register_module(key, std::move(module));
}

bool ModuleDictImpl::contains(const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return true;
  return false;
}

std::shared_ptr<Module> ModuleDictImpl::operator[](const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return module;
  STRATA_CHECK(false, "ModuleDict: no module under \"", key, "\"");
  return nullptr;
}

std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, module] : named_children()) out.push_back(name);
  return out;
}

}  // namespace strata::nn
