#include "strata/optim/adam.h"

#include <cmath>

#include "strata/autograd/grad_mode.h"
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
}

template <bool kDecoupled>
std::vector<std::string> BasicAdam<kDecoupled>::state_names(const OptimizerOptions&) const {
  // max_exp_avg_sq is optional: amsgrad may be switched on or off between steps (see step()).
  return {"step", "exp_avg", "exp_avg_sq"};
}

// Note [one scratch tensor]: every intermediate (the decayed gradient, g * g, the denominator, the
// update) is written into one scratch tensor per parameter through the kernel table, instead of a new
// tensor per intermediate: above the allocator's block cache each allocation costs page faults.
// Operations on the parameter itself go through Tensor's in-place methods, which bump its version.
template <bool kDecoupled>
void BasicAdam<kDecoupled>::step() {
  check_grads();
  NoGradGuard no_grad;
  size_t i = 0;
  for (const OptimizerParamGroup& group : groups_) {
    const auto& o = static_cast<const Options&>(group.options());
    const auto [beta1, beta2] = o.betas();
    for (Tensor p : group.params()) {
      ParamState& state = state_[i++];
      const Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      if (state.empty()) {
        state.emplace("step", zeros({}, kLong));
        state.emplace("exp_avg", zeros_like(p));
        state.emplace("exp_avg_sq", zeros_like(p));
      }
      // The count lives in a CPU int64 tensor so that state_dict carries it; bias corrections are host math.
      const int64_t step = ++*state.at("step").data_ptr<int64_t>();
      Tensor& exp_avg = state.at("exp_avg");
      Tensor& exp_avg_sq = state.at("exp_avg_sq");
      const Kernels& k = kernels_for(p.device());
      Tensor scratch = empty_like(p);

      Tensor g = grad;  // the gradient itself stays as backward left it
      if (o.weight_decay() != 0) {
        if constexpr (kDecoupled) {
          p.mul_(1 - o.lr() * o.weight_decay());
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
        // try_emplace: amsgrad may have been switched on after the first steps.
        auto [it, fresh] = state.try_emplace("max_exp_avg_sq");
        if (fresh) it->second = zeros_like(p);
        k.binary(BinaryOp::Maximum, it->second, exp_avg_sq, it->second);
        v = &it->second;
      }

      const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
      const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
      k.unary(UnaryOp::Sqrt, *v, scratch);
      scratch.div_(std::sqrt(bias_correction2)).add_(o.eps());  // denom
      k.binary(BinaryOp::Div, exp_avg, scratch, scratch);
      p.add_(scratch, -o.lr() / bias_correction1);
    }
  }
}

template class BasicAdamOptions<false>;
template class BasicAdamOptions<true>;
template class BasicAdam<false>;
template class BasicAdam<true>;

}  // namespace strata::optim
