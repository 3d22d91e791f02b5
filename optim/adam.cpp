#include "strata/optim/adam.h"

#include <cmath>

#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/kernels.h"

namespace strata::optim {

template <bool kDecoupled>
StateDict BasicAdamOptions<kDecoupled>::to_tensors() const {
  return {{"lr", scalar_tensor(lr_, kDouble)},
          {"betas", tensor({std::get<0>(betas_), std::get<1>(betas_)}, kDouble)},
          {"eps", scalar_tensor(eps_, kDouble)},
          {"weight_decay", scalar_tensor(weight_decay_, kDouble)},
          {"amsgrad", scalar_tensor(amsgrad_, kBool)}};
}

template <bool kDecoupled>
void BasicAdamOptions<kDecoupled>::from_tensors(const StateDict& values) {
  const Tensor& betas = values.at("betas");
  lr_ = values.at("lr").item<double>();
  betas_ = {betas[0].item<double>(), betas[1].item<double>()};
  eps_ = values.at("eps").item<double>();
  weight_decay_ = values.at("weight_decay").item<double>();
  amsgrad_ = values.at("amsgrad").item<bool>();
}

template <bool kDecoupled>
void BasicAdamOptions<kDecoupled>::check(const std::string& where) const {
  const auto [beta1, beta2] = betas_;
  STRATA_CHECK(lr_ >= 0, where, ": invalid lr ", lr_, " (expected >= 0)");
  STRATA_CHECK(eps_ >= 0, where, ": invalid eps ", eps_, " (expected >= 0)");
  STRATA_CHECK(beta1 >= 0 && beta1 < 1, where, ": invalid beta1 ", beta1, " (expected in [0, 1))");
  STRATA_CHECK(beta2 >= 0 && beta2 < 1, where, ": invalid beta2 ", beta2, " (expected in [0, 1))");
  STRATA_CHECK(weight_decay_ >= 0, where, ": invalid weight_decay ", weight_decay_, " (expected >= 0)");
  STRATA_CHECK(!(fused_ && foreach_), where, ": fused and foreach cannot both be true");
}

template <bool kDecoupled>
std::vector<std::string> BasicAdam<kDecoupled>::state_names(const OptimizerOptions&) const {
  // max_exp_avg_sq is optional: amsgrad may be switched on or off between steps (see step()).
  return {"step", "exp_avg", "exp_avg_sq"};
}

namespace {

/// AdamW's factor 1 - lr * weight_decay, computed in this one place: the compiler may fuse the product and
/// difference into one rounding, and the fused kernels must use the very value the per-parameter path does.
template <bool kDecoupled>
double decoupled_decay(const BasicAdamOptions<kDecoupled>& o) {
  return 1 - o.lr() * o.weight_decay();
}

/// 1 - beta^step, computed in this one place for the per-parameter path and the fused kernels alike.
double bias_correction(double beta, int64_t step) { return 1 - std::pow(beta, static_cast<double>(step)); }

// Note [one scratch tensor]: every intermediate (the decayed gradient, g * g, the denominator, the
// update) is written into one scratch tensor per parameter through the kernel table, instead of a new
// tensor per intermediate: above the allocator's block cache each allocation costs page faults.
// Operations on the parameter itself go through Tensor's in-place methods, which bump its version.
/// One parameter's update by composed elementwise ops (the per-parameter path), its step already counted.
template <bool kDecoupled>
void adam_one(const BasicAdamOptions<kDecoupled>& o, Tensor& p, ParamState& state, int64_t step) {
  const auto [beta1, beta2] = o.betas();
  const Tensor& grad = p.grad();
  Tensor& exp_avg = state.at("exp_avg");
  Tensor& exp_avg_sq = state.at("exp_avg_sq");
  const Kernels& k = kernels_for(p.device());
  Tensor scratch = empty_like(p);

  Tensor g = grad;  // the gradient itself stays as backward left it
  if (o.weight_decay() != 0) {
    if constexpr (kDecoupled) {
      p.mul_(decoupled_decay(o));
    } else {
      k.add_scaled(grad, p, o.weight_decay(), scratch);
      g = scratch;
    }
  }
  exp_avg.mul_(beta1).add_(g, 1 - beta1);
  k.binary(BinaryOp::Mul, g, g, scratch);
  exp_avg_sq.mul_(beta2).add_(scratch, 1 - beta2);
  const Tensor* v = &exp_avg_sq;
  if (o.amsgrad()) {
    Tensor& v_max = state.at("max_exp_avg_sq");
    k.binary(BinaryOp::Maximum, v_max, exp_avg_sq, v_max);
    v = &v_max;
  }

  const double bias_correction1 = bias_correction(beta1, step);
  const double bias_correction2 = bias_correction(beta2, step);
  k.unary(UnaryOp::Sqrt, *v, scratch);
  scratch.div_(std::sqrt(bias_correction2)).add_(o.eps());  // denom
  k.binary(BinaryOp::Div, exp_avg, scratch, scratch);
  p.add_(scratch, -o.lr() / bias_correction1);
}

}  // namespace

template <bool kDecoupled>
void BasicAdam<kDecoupled>::step() {
  check_grads();
  NoGradGuard no_grad;
  size_t first = 0;  // the state number of the group's first parameter
  for (const OptimizerParamGroup& group : groups_) {
    const auto& o = static_cast<const Options&>(group.options());
    const auto [beta1, beta2] = o.betas();
    std::vector<Tensor> params = group.params();
    // Makes a parameter's state on its first step (and v_max once amsgrad is on: it may be switched on after
    // the first steps) and counts the step. The count lives in a CPU int64 tensor so that state_dict carries
    // it; bias corrections are host math.
    const auto count_step = [&](size_t j) {
      ParamState& state = state_[first + j];
      if (state.empty()) {
        state.emplace("step", zeros({}, kLong));
        state.emplace("exp_avg", zeros_like(params[j]));
        state.emplace("exp_avg_sq", zeros_like(params[j]));
      }
      if (o.amsgrad()) {
        auto [it, fresh] = state.try_emplace("max_exp_avg_sq");
        if (fresh) it->second = zeros_like(params[j]);
      }
      return ++*state.at("step").data_ptr<int64_t>();
    };
    if (!o.fused() && !o.foreach()) {
      for (size_t j = 0; j < params.size(); ++j)
        if (params[j].grad().defined()) adam_one(o, params[j], state_[first + j], count_step(j));
    } else {
      const FusedSplit split = split_for_fused(group, kDecoupled ? "AdamW.step" : "Adam.step");
      for (size_t j : split.rest) adam_one(o, params[j], state_[first + j], count_step(j));
      const AdamHyper hyper{o.lr(),     beta1,      beta2, o.eps(), o.weight_decay(), decoupled_decay(o),
                            kDecoupled, o.amsgrad()};
      for (const std::vector<size_t>& bucket : split.buckets) {
        std::vector<AdamParam> slots;
        for (size_t j : bucket) {
          const int64_t step = count_step(j);
          ParamState& state = state_[first + j];
          AdamParam slot{params[j],
                         params[j].grad(),
                         state.at("exp_avg"),
                         state.at("exp_avg_sq"),
                         o.amsgrad() ? state.at("max_exp_avg_sq") : Tensor(),
                         bias_correction(beta1, step),
                         bias_correction(beta2, step)};
          for (const Tensor& written : {slot.param, slot.exp_avg, slot.exp_avg_sq, slot.max_exp_avg_sq})
            if (written.defined()) autograd::check_inplace(written, kDecoupled ? "AdamW.step" : "Adam.step");
          slots.push_back(std::move(slot));
        }
        kernels_for(slots.front().param.device()).adam_step(slots, hyper);
      }
    }
    first += params.size();
  }
}

template class BasicAdamOptions<false>;
template class BasicAdamOptions<true>;
template class BasicAdam<false>;
template class BasicAdam<true>;

}  // namespace strata::optim
