#include "strata/optim/sgd.h"

#include "strata/autograd/grad_mode.h"
#include "strata/tensor/creation.h"

namespace strata::optim {

StateDict SGDOptions::to_tensors() const {
  return {{"lr", scalar_tensor(lr_, kDouble)},
          {"momentum", scalar_tensor(momentum_, kDouble)},
          {"dampening", scalar_tensor(dampening_, kDouble)},
          {"weight_decay", scalar_tensor(weight_decay_, kDouble)},
          {"nesterov", scalar_tensor(nesterov_, kBool)}};
}

void SGDOptions::from_tensors(const StateDict& values) {
  lr_ = values.at("lr").item<double>();
  momentum_ = values.at("momentum").item<double>();
  dampening_ = values.at("dampening").item<double>();
  weight_decay_ = values.at("weight_decay").item<double>();
  nesterov_ = values.at("nesterov").item<bool>();
}

void SGDOptions::check(const std::string& where) const {
  STRATA_CHECK(lr_ >= 0, where, ": invalid lr ", lr_, " (expected >= 0)");
  STRATA_CHECK(momentum_ >= 0, where, ": invalid momentum ", momentum_, " (expected >= 0)");
  STRATA_CHECK(weight_decay_ >= 0, where, ": invalid weight_decay ", weight_decay_, " (expected >= 0)");
  STRATA_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0), where,
               ": nesterov momentum requires a momentum and zero dampening, got momentum ", momentum_,
               " and dampening ", dampening_);
}

std::vector<std::string> SGD::state_names(const OptimizerOptions& options) const {
  if (static_cast<const SGDOptions&>(options).momentum() == 0) return {};
  return {"momentum_buffer"};
}

void SGD::step() {
  check_grads();
  NoGradGuard no_grad;
  size_t i = 0;
  for (const OptimizerParamGroup& group : groups_) {
    const auto& o = static_cast<const SGDOptions&>(group.options());
    for (Tensor p : group.params()) {
      ParamState& state = state_[i++];
      const Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      // d is a new tensor when decayed: the gradient stays as backward left it.
      Tensor d = o.weight_decay() != 0 ? grad.add(p, o.weight_decay()) : grad;
      if (o.momentum() != 0) {
        auto [it, first_step] = state.try_emplace("momentum_buffer");
        Tensor& buf = it->second;
        if (first_step) {
          buf = d.clone();
        } else {
          buf.mul_(o.momentum()).add_(d, 1 - o.dampening());
        }
        if (!o.nesterov()) {
          d = buf;
        } else if (d.is_same(grad)) {
          d = grad.add(buf, o.momentum());
        } else {
          d.add_(buf, o.momentum());
        }
      }
      p.add_(d, -o.lr());
    }
  }
}

}  // namespace strata::optim
