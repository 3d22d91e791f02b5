#include "strata/optim/optimizer.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <typeinfo>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/dispatch_log.h"

namespace strata::optim {

OptimizerParamGroup::OptimizerParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}

OptimizerParamGroup::OptimizerParamGroup(std::vector<Tensor> params, const OptimizerOptions& options)
    : params_(std::move(params)), options_(options.clone()) {}

OptimizerParamGroup::OptimizerParamGroup(const OptimizerParamGroup& other)
    : params_(other.params_), options_(other.options_ ? other.options_->clone() : nullptr) {}

OptimizerOptions& OptimizerParamGroup::options() {
  STRATA_CHECK(options_, "OptimizerParamGroup: the group has no options until an optimizer takes it");
  return *options_;
}

const OptimizerOptions& OptimizerParamGroup::options() const {
  STRATA_CHECK(options_, "OptimizerParamGroup: the group has no options until an optimizer takes it");
  return *options_;
}

Optimizer::Optimizer(std::string name, std::vector<OptimizerParamGroup> groups, const OptimizerOptions& defaults)
    : name_(std::move(name)), groups_(std::move(groups)) {
  std::unordered_map<const TensorImpl*, size_t> seen;  // parameter -> its number
  for (size_t g = 0; g < groups_.size(); ++g) {
    OptimizerParamGroup& group = groups_[g];
    if (!group.options_) group.options_ = defaults.clone();
    const OptimizerOptions& options = *group.options_;
    STRATA_CHECK(typeid(options) == typeid(defaults), name_, ": param group ", g,
                 " was given another optimizer's options");
    options.check(name_ + ": param group " + std::to_string(g));
    for (const Tensor& p : group.params_) {
      const size_t i = seen.size();
      STRATA_CHECK(p.defined(), name_, ": parameter ", i, " is undefined");
      STRATA_CHECK(p.is_leaf(), name_, ": parameter ", i, " is not a leaf tensor (it has a grad_fn); ",
                   "optimize the leaf it was computed from");
      STRATA_CHECK(p.is_floating_point(), name_, ": parameter ", i, " has dtype ", p.dtype(),
                   "; only floating point tensors can be optimized");
      STRATA_CHECK(p.requires_grad(), name_, ": parameter ", i, " does not require grad");
      auto [it, added] = seen.emplace(&p.impl(), i);
      STRATA_CHECK(added, name_, ": parameter ", i, " is parameter ", it->second,
                   " again; a parameter may appear only once");
    }
  }
  STRATA_CHECK(!seen.empty(), name_, ": got an empty parameter list");
  state_.resize(seen.size());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const OptimizerParamGroup& group : groups_) autograd::zero_grad(group.params_, set_to_none);
}

void Optimizer::check_grads() const {
  size_t i = 0;
  for (const OptimizerParamGroup& group : groups_) {
    for (const Tensor& p : group.params_) {
      const Tensor& grad = p.grad();
      STRATA_CHECK(
          !grad.defined() || (grad.sizes() == p.sizes() && grad.dtype() == p.dtype() && grad.device() == p.device()),
          name_, "::step: parameter ", i, " has shape ", p.sizes(), ", dtype ", p.dtype(), " and device ", p.device(),
          " but its gradient has ", grad.sizes(), ", ", grad.dtype(), " and ", grad.device());
      ++i;
    }
  }
}

// Note [fused steps]: with `fused` or `foreach` a group's step is one kernel-table call per dtype and
// device (Kernels::adam_step, sgd_step) instead of about eight elementwise kernels per parameter, with the
// same arithmetic, so the results are the per-parameter path's bit for bit in float64. The kernels write
// raw memory, so the step bumps each written tensor's version as an in-place op would. A parameter or
// gradient that is not contiguous takes the per-parameter path, and the dispatch log names it.
Optimizer::FusedSplit Optimizer::split_for_fused(const OptimizerParamGroup& group, const char* step) const {
  FusedSplit split;
  std::vector<std::pair<ScalarType, Device>> keys;
  for (size_t j = 0; j < group.params_.size(); ++j) {
    const Tensor& p = group.params_[j];
    const Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    if (!p.is_contiguous() || !grad.is_contiguous()) {
      log_dispatch(step, "per-parameter: a parameter or its gradient is not contiguous");
      split.rest.push_back(j);
      continue;
    }
    auto key = std::find_if(keys.begin(), keys.end(),
                            [&](const auto& k) { return k.first == p.dtype() && k.second == p.device(); });
    if (key == keys.end()) {
      keys.emplace_back(p.dtype(), p.device());
      split.buckets.emplace_back();
      key = keys.end() - 1;
    }
    split.buckets[key - keys.begin()].push_back(j);
  }
  for (const auto& [dtype, device] : keys)
    log_dispatch(step, str("fused ", device.is_cpu() ? "cpu" : "cuda", " kernel (", dtype, ")"));
  return split;
}

double Optimizer::lr() const { return groups_.front().options_->get_lr(); }

void Optimizer::set_lr(double lr) {
  STRATA_CHECK(lr >= 0, name_, "::set_lr: invalid learning rate ", lr, " (expected >= 0)");
  for (OptimizerParamGroup& group : groups_) group.options_->set_lr(lr);
}

namespace {

std::string group_prefix(size_t g) { return "param_groups." + std::to_string(g) + "."; }

// The prefix of each of `count` parameters' state keys: "state.<i>." (names null) or "state.<names[i]>.", empty
// for a parameter named "" (left out). Checks that the names name every parameter once.
std::vector<std::string> state_prefixes(size_t count, const std::vector<std::string>* names, const std::string& where) {
  std::vector<std::string> prefixes(count);
  if (!names) {
    for (size_t i = 0; i < count; ++i) prefixes[i] = "state." + std::to_string(i) + ".";
    return prefixes;
  }
  STRATA_CHECK(names->size() == count, where, ": got ", names->size(), " names for ", count, " parameters");
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < count; ++i) {
    const std::string& name = (*names)[i];
    if (name.empty()) continue;
    auto [it, added] = seen.emplace(name, i);
    STRATA_CHECK(added, where, ": parameters ", it->second, " and ", i, " are both named \"", name, "\"");
    prefixes[i] = "state." + name + ".";
  }
  return prefixes;
}

// The numbers of a group of `count` parameters whose first is number `first`.
Tensor param_numbers(size_t first, size_t count) {
  std::vector<int64_t> numbers(count);
  for (size_t k = 0; k < count; ++k) numbers[k] = static_cast<int64_t>(first + k);
  return tensor(numbers);
}

}  // namespace

const Tensor& detail::state_entry(const StateDict& dict, const std::string& key, IntArrayRef sizes, ScalarType dtype,
                                  const std::string& where) {
  auto it = dict.find(key);
  STRATA_CHECK(it != dict.end(), where, ": missing key \"", key, "\"");
  const Tensor& t = it->second;
  STRATA_CHECK(t.defined(), where, ": \"", key, "\" is undefined in the state dict");
  STRATA_CHECK(t.sizes() == sizes && t.dtype() == dtype, where, ": \"", key, "\" has shape ", t.sizes(), " and dtype ",
               t.dtype(), ", expected shape ", sizes, " and dtype ", dtype);
  return t;
}

StateDict Optimizer::state_dict() const { return save(nullptr); }
StateDict Optimizer::state_dict(const std::vector<std::string>& names) const { return save(&names); }
void Optimizer::load_state_dict(const StateDict& dict) { load(dict, nullptr, /*strict=*/true); }
void Optimizer::load_state_dict(const StateDict& dict, const std::vector<std::string>& names, bool strict) {
  load(dict, &names, strict);
}

StateDict Optimizer::save(const std::vector<std::string>* names) const {
  const std::vector<std::string> prefixes = state_prefixes(state_.size(), names, name_ + "::state_dict");
  StateDict dict;
  size_t first = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = group_prefix(g);
    for (auto& [name, value] : groups_[g].options_->to_tensors()) dict.emplace(prefix + name, value);
    if (!names) dict.emplace(prefix + "params", param_numbers(first, groups_[g].params_.size()));
    first += groups_[g].params_.size();
  }
  const std::vector<ParamState> state = full_state();
  for (size_t i = 0; i < state.size(); ++i)
    if (!prefixes[i].empty())
      for (auto& [name, value] : state[i]) dict.emplace(prefixes[i] + name, value);
  return dict;
}

void Optimizer::load(const StateDict& dict, const std::vector<std::string>* names, bool strict) {
  const std::string where = name_ + "::load_state_dict";
  const std::vector<std::string> prefixes = state_prefixes(state_.size(), names, where);
  std::set<std::string> used;  // the keys read, so that any other key can be named as unexpected

  // Note [load before commit]: the new options and state are built and checked aside and only
  // swapped in at the end, so a bad dict leaves the optimizer as it was.
  std::vector<std::unique_ptr<OptimizerOptions>> options;
  std::vector<ParamState> state(state_.size());
  const std::vector<std::string> optional_list = optional_state_names();
  const std::set<std::string> optional(optional_list.begin(), optional_list.end());
  size_t first = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const OptimizerParamGroup& group = groups_[g];
    const std::string prefix = group_prefix(g);
    const size_t count = group.params_.size();

    if (!names) {  // by number: the groups must hold the same parameters
      const std::string params_key = prefix + "params";
      const Tensor& numbers = detail::state_entry(dict, params_key, {static_cast<int64_t>(count)}, kLong, where);
      STRATA_CHECK(numbers.ne(param_numbers(first, count)).sum().item<int64_t>() == 0, where, ": \"", params_key,
                   "\" holds ", numbers, " but this optimizer's group ", g, " has parameters ",
                   param_numbers(first, count), " (the param groups differ)");
      used.insert(params_key);
    }

    StateDict values;
    for (auto& [name, current] : group.options_->to_tensors()) {
      values.emplace(name, detail::state_entry(dict, prefix + name, current.sizes(), current.dtype(), where));
      used.insert(prefix + name);
    }
    options.push_back(group.options_->clone());
    options.back()->from_tensors(values);
    options.back()->check(where + ": \"" + prefix.substr(0, prefix.size() - 1) + "\"");

    std::vector<std::string> buffers = state_names(*options.back());
    for (const std::string& name : optional_list)
      if (std::find(buffers.begin(), buffers.end(), name) == buffers.end()) buffers.push_back(name);
    for (size_t i = first; i < first + count; ++i) {
      const std::string& state_key = prefixes[i];
      if (state_key.empty()) continue;  // left out
      bool any = false;
      for (const std::string& name : buffers) any = any || dict.contains(state_key + name);
      if (!any) continue;  // not stepped yet
      const Tensor& p = group.params_[i - first];
      NoGradGuard no_grad;
      for (const std::string& name : buffers) {
        const std::string key = state_key + name;
        if (!dict.contains(key) && optional.contains(name)) continue;
        const Tensor& value = name == "step" ? detail::state_entry(dict, key, {}, kLong, where)
                                             : detail::state_entry(dict, key, p.sizes(), p.dtype(), where);
        STRATA_CHECK(name != "step" || value.item<int64_t>() >= 0, where, ": \"", key,
                     "\" holds a negative step count ", value.item<int64_t>());
        // A copy where step() keeps it: the count on the host, buffers on the parameter's device (a file is
        // read to the CPU).
        state[i].emplace(name,
                         value.to(name == "step" ? Device(kCPU) : p.device(), /*non_blocking=*/false, /*copy=*/true));
        used.insert(key);
      }
    }
    first += count;
  }
  if (strict)
    for (const auto& [key, value] : dict)
      STRATA_CHECK(used.contains(key), where, ": unexpected key \"", key, "\" (this optimizer has ", state_.size(),
                   " parameters in ", groups_.size(), " param groups)");

  set_full_state(std::move(state));  // first: a sharded optimizer may still refuse the state
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options_ = std::move(options[g]);
}

}  // namespace strata::optim
