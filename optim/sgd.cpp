#include "strata/optim/sgd.h"

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/kernels.h"

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
  STRATA_CHECK(!(fused_ && foreach_), where, ": fused and foreach cannot both be true");
}

std::vector<std::string> SGD::state_names(const OptimizerOptions& options) const {
  if (static_cast<const SGDOptions&>(options).momentum() == 0) return {};
  return {"momentum_buffer"};
}

namespace {

/// One parameter's update by composed elementwise ops: the per-parameter path.
void sgd_one(const SGDOptions& o, Tensor& p, ParamState& state) {
  const Tensor& grad = p.grad();
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

}  // namespace

void SGD::step() {
  check_grads();
  NoGradGuard no_grad;
  size_t first = 0;  // the state number of the group's first parameter
  for (const OptimizerParamGroup& group : groups_) {
    const auto& o = static_cast<const SGDOptions&>(group.options());
    std::vector<Tensor> params = group.params();
    if (!o.fused() && !o.foreach()) {
      for (size_t j = 0; j < params.size(); ++j)
        if (params[j].grad().defined()) sgd_one(o, params[j], state_[first + j]);
    } else {
      const FusedSplit split = split_for_fused(group, "SGD.step");
      for (size_t j : split.rest) sgd_one(o, params[j], state_[first + j]);
      const SgdHyper hyper{o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()};
      for (const std::vector<size_t>& bucket : split.buckets) {
        std::vector<SgdParam> slots;
        for (size_t j : bucket) {
          SgdParam slot{params[j], params[j].grad(), Tensor(), false};
          autograd::check_inplace(slot.param, "SGD.step");
          if (o.momentum() != 0) {
            auto [it, first_step] = state_[first + j].try_emplace("momentum_buffer");
            if (first_step) it->second = empty_like(slot.param);
            slot.momentum_buffer = it->second;
            slot.first_step = first_step;
            autograd::check_inplace(slot.momentum_buffer, "SGD.step");
          }
          slots.push_back(std::move(slot));
        }
        kernels_for(slots.front().param.device()).sgd_step(slots, hyper);
      }
    }
    first += params.size();
  }
}

}  // namespace strata::optim
