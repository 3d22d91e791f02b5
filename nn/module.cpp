#include "strata/nn/module.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"

namespace strata::nn {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

const Tensor* find(const std::vector<std::pair<std::string, Tensor>>& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace

Module::Module(std::string name) : name_(std::move(name)) {}

void Module::check_new_name(const std::string& name, const char* what) const {
  STRATA_CHECK(!name.empty() && name.find('.') == std::string::npos, name_, "::", what,
               ": name must be non-empty and contain no dot, got \"", name, "\"");
  const bool taken = find(parameters_, name) || find(buffers_, name) ||
                     std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  STRATA_CHECK(!taken, name_, "::", what, ": \"", name, "\" is already registered");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  STRATA_CHECK(tensor.defined(), name_, "::register_parameter: parameter \"", name, "\" is undefined");
  STRATA_CHECK(tensor.is_leaf(), name_, "::register_parameter: parameter \"", name,
               "\" has history; register a leaf (e.g. tensor.detach())");
  STRATA_CHECK(!requires_grad || tensor.is_floating_point(), name_, "::register_parameter: parameter \"", name,
               "\" must be floating point to require grad, got ", tensor.dtype());
  tensor.set_requires_grad(requires_grad);
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_new_name(name, "register_buffer");
  STRATA_CHECK(tensor.defined(), name_, "::register_buffer: buffer \"", name, "\" is undefined");
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> child) {
  check_new_name(name, "register_module");
  STRATA_CHECK(child, name_, "::register_module: module \"", name, "\" is null");
  STRATA_CHECK(child.get() != this, name_, "::register_module: a module cannot be its own child");
  children_.emplace_back(std::move(name), std::move(child));
}

std::vector<std::pair<std::string, const Module*>> Module::walk(bool recurse) const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  if (!recurse) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    // Children go right after their parent, so the walk is depth first in registration order.
    const auto [prefix, m] = out[i];
    for (size_t c = 0; c < m->children_.size(); ++c)
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(i + 1 + c),
                 {join(prefix, m->children_[c].first), m->children_[c].second.get()});
  }
  return out;
}

NamedTensors Module::collect(bool recurse, bool buffers) const {
  NamedTensors out;
  // A module shared by two parents (tied weights) lists its tensors once, under the first name.
  std::set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : walk(recurse))
    for (const auto& [name, t] : buffers ? m->buffers_ : m->parameters_)
      if (seen.insert(t.impl_ptr().get()).second) out.insert(join(prefix, name), t);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const { return collect(recurse, false); }

NamedTensors Module::named_buffers(bool recurse) const { return collect(recurse, true); }

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  STRATA_CHECK(!weak_from_this().expired(), name_, "::named_modules: the module must be owned by a shared_ptr ",
               "(make it with std::make_shared or a ModuleHolder)");
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& [name, m] : walk(true)) out.emplace_back(name, const_cast<Module*>(m)->shared_from_this());
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [name, child] : children_) child->apply(fn);
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& name_prefix) {
  fn(name_prefix, *this);
  for (auto& [name, child] : children_) child->apply(fn, name_prefix.empty() ? name : name_prefix + "." + name);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) { autograd::zero_grad(parameters(), set_to_none); }

void Module::to(ScalarType dtype) {
  STRATA_CHECK(is_floating_point(dtype), name_, "::to: modules convert only to floating point dtypes, got ", dtype);
  convert(std::nullopt, dtype);
}

void Module::to(Device device) { convert(device, std::nullopt); }

void Module::to(Device device, ScalarType dtype) {
  STRATA_CHECK(is_floating_point(dtype), name_, "::to: modules convert only to floating point dtypes, got ", dtype);
  convert(device, dtype);
}

// Note [Module::to]: set_data swaps the data behind each handle, so optimizers and holders keep working. Every
// new tensor is made before any is swapped in: a failed copy (no GPU) leaves the module as it was. A gradient
// moves with its tensor (as torch's Module._apply) and is dropped when the dtype changes.
void Module::convert(std::optional<Device> device, std::optional<ScalarType> dtype) {
  NoGradGuard no_grad;
  struct Change {
    Tensor tensor, data, grad;
  };
  std::vector<Change> changes;
  auto plan = [&](const Tensor& t) {
    const ScalarType type = dtype && t.is_floating_point() ? *dtype : t.dtype();
    const Device target = device.value_or(t.device());
    if (type == t.dtype() && target == t.device()) return;
    Change change{t, t.to(target, type), Tensor()};
    if (type == t.dtype() && t.grad().defined()) change.grad = t.grad().to(target);
    changes.push_back(std::move(change));
  };
  for (const Tensor& p : parameters()) plan(p);
  for (const Tensor& b : buffers()) plan(b);
  for (Change& change : changes) {
    change.tensor.set_data(change.data);
    if (change.grad.defined() || change.tensor.grad().defined()) change.tensor.mutable_grad() = std::move(change.grad);
  }
}

StateDict Module::state_dict() const {
  StateDict dict;
  for (auto& [name, t] : named_parameters()) dict.emplace(name, t.detach());
  for (auto& [name, t] : named_buffers()) dict.emplace(name, t.detach());
  return dict;
}

void Module::load_state_dict(const StateDict& dict, bool strict) {
  check_state_dict(dict, strict);
  NoGradGuard no_grad;
  for (auto& [name, t] : state_dict())  // handles to the parameters and buffers themselves
    if (auto it = dict.find(name); it != dict.end()) t.copy_(it->second);
}

void Module::check_state_dict(const StateDict& dict, bool strict) const {
  NamedTensors own = named_parameters();
  for (auto& [name, t] : named_buffers()) own.insert(name, t);
  std::vector<std::string> missing;
  for (const auto& [name, t] : own) {
    auto it = dict.find(name);
    if (it == dict.end()) {
      missing.push_back(name);
      continue;
    }
    STRATA_CHECK(it->second.defined(), name_, "::load_state_dict: \"", name, "\" is undefined in the state dict");
    STRATA_CHECK(it->second.sizes() == t.sizes(), name_, "::load_state_dict: size mismatch for \"", name,
                 "\": the state dict has ", it->second.sizes(), ", the module has ", t.sizes());
    STRATA_CHECK(it->second.is_floating_point() == t.is_floating_point(), name_, "::load_state_dict: dtype ",
                 "mismatch for \"", name, "\": the state dict has ", it->second.dtype(), ", the module has ",
                 t.dtype());
  }
  auto list = [](const std::vector<std::string>& names) {
    std::ostringstream os;
    for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << '"' << names[i] << '"';
    return os.str();
  };
  if (strict) {
    STRATA_CHECK(missing.empty(), name_, "::load_state_dict: missing keys: ", list(missing));
    std::vector<std::string> unexpected;
    for (const auto& [name, t] : dict)
      if (!own.contains(name)) unexpected.push_back(name);
    STRATA_CHECK(unexpected.empty(), name_, "::load_state_dict: unexpected keys: ", list(unexpected));
  }
}

void Module::pretty_print(std::ostream& os) const { os << name_; }

namespace {

void print_tree(std::ostream& os, const Module& m, int indent) {
  m.pretty_print(os);
  const auto children = m.named_children();
  if (children.empty()) return;
  os << "(\n";
  for (const auto& [name, child] : children) {
    os << std::string(indent + 2, ' ') << "(" << name << "): ";
    print_tree(os, *child, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Module& module) {
  print_tree(os, module, 0);
  return os;
}

std::optional<Device> parameters_device(const Module& module, const char* op) {
  const NamedTensors params = module.named_parameters();
  if (params.empty()) return std::nullopt;
  const auto& [first_name, first] = params.front();
  for (const auto& [name, p] : params)
    STRATA_CHECK(p.device() == first.device(), op, ": the module's parameters are on more than one device (",
                 first_name, " on ", first.device(), ", ", name, " on ", p.device(),
                 "); move the whole module with Module::to(device)");
  return first.device();
}

Tensor impl::maybe_inplace(const Tensor& input, const Tensor& result, bool inplace) {
  if (!inplace) return result;
  Tensor out = input;
  out.copy_(result);
  return out;
}

}  // namespace strata::nn
