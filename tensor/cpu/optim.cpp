// CPU kernels: the fused optimizer steps, every parameter of a call in one parallel pass.
//
// Note [fused optimizer arithmetic]: the per-parameter path composes about eight elementwise kernels,
// each a pass over the parameter. Here one loop reads each element once and performs the same
// operations in the same order with the same roundings (kernels.h spells them out): multiply_add (loops.h)
// where the composed path adds with alpha, which calls it too, a plain product where it multiplies by a Scalar. So a
// float64 step is bit for bit the per-parameter step (tests/optim/test_fused_optim.cpp), and so is SGD's in
// float32; Adam's float32 differs in the last bits, as the composed path's float square root is Eigen's
// vectorised one, not always correctly rounded, where std::sqrt is. The work is split into chunks of
// kChunk elements over all parameters, so one OpenMP region serves the whole model.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

constexpr int64_t kChunk = 16384;

/// Runs body(param_index, first, count) over chunks of every parameter's elements, in parallel when the
/// total is large enough.
template <class Body>
void for_each_chunk(const std::vector<int64_t>& numels, const Body& body) {
  std::vector<std::pair<size_t, int64_t>> chunks;  // (parameter, first element)
  int64_t total = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    for (int64_t first = 0; first < numels[i]; first += kChunk) chunks.emplace_back(i, first);
    total += numels[i];
  }
  parallel_for(static_cast<int64_t>(chunks.size()), use_threads(total), [&](int64_t c) {
    const auto [i, first] = chunks[c];
    body(i, first, std::min(kChunk, numels[i] - first));
  });
}

/// The floating dtype every parameter of a step shares; throws naming the step otherwise.
template <class P>
ScalarType step_dtype(const std::vector<P>& params, const char* step) {
  const ScalarType dtype = params.front().param.dtype();
  STRATA_CHECK(dtype == kFloat || dtype == kDouble, step, " on the CPU computes in float32 and float64, got ", dtype);
  return dtype;
}

template <class T>
T* data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <class T>
void adam(const std::vector<AdamParam>& params, const AdamHyper& h) {
  const T beta1 = static_cast<T>(h.beta1), beta2 = static_cast<T>(h.beta2);
  const T one_minus_beta1 = static_cast<T>(1 - h.beta1), one_minus_beta2 = static_cast<T>(1 - h.beta2);
  const T eps = static_cast<T>(h.eps), wd = static_cast<T>(h.weight_decay);
  const T decay = static_cast<T>(h.decay);
  const bool l2 = !h.decoupled && h.weight_decay != 0, decoupled = h.decoupled && h.weight_decay != 0;
  std::vector<int64_t> numels;
  for (const AdamParam& a : params) numels.push_back(a.param.numel());
  for_each_chunk(numels, [&](size_t i, int64_t first, int64_t n) {
    const AdamParam& a = params[i];
    T* p = data<T>(a.param) + first;
    const T* grad = data<T>(a.grad) + first;
    T* m = data<T>(a.exp_avg) + first;
    T* v = data<T>(a.exp_avg_sq) + first;
    T* v_max = h.amsgrad ? data<T>(a.max_exp_avg_sq) + first : nullptr;
    const T root_bc2 = static_cast<T>(std::sqrt(a.bias_correction2));
    const T step = static_cast<T>(-h.lr / a.bias_correction1);
    for (int64_t e = 0; e < n; ++e) {
      T g = grad[e];
      if (l2) g = multiply_add(wd, p[e], g);
      if (decoupled) p[e] = p[e] * decay;
      m[e] = multiply_add(one_minus_beta1, g, m[e] * beta1);
      const T g2 = g * g;
      v[e] = multiply_add(one_minus_beta2, g2, v[e] * beta2);
      T vv = v[e];
      if (v_max) {
        const T a_max = v_max[e];
        vv = v_max[e] = (a_max != a_max || a_max > vv) ? a_max : vv;  // NaN propagates, as Maximum's
      }
      const T d = std::sqrt(vv) / root_bc2 + eps;
      p[e] = multiply_add(step, m[e] / d, p[e]);
    }
  });
}

template <class T>
void sgd(const std::vector<SgdParam>& params, const SgdHyper& h) {
  const T wd = static_cast<T>(h.weight_decay), momentum = static_cast<T>(h.momentum);
  const T keep = static_cast<T>(1 - h.dampening), step = static_cast<T>(-h.lr);
  std::vector<int64_t> numels;
  for (const SgdParam& s : params) numels.push_back(s.param.numel());
  for_each_chunk(numels, [&](size_t i, int64_t first, int64_t n) {
    const SgdParam& s = params[i];
    T* p = data<T>(s.param) + first;
    const T* grad = data<T>(s.grad) + first;
    T* buf = h.momentum != 0 ? data<T>(s.momentum_buffer) + first : nullptr;
    for (int64_t e = 0; e < n; ++e) {
      T d = h.weight_decay != 0 ? multiply_add(wd, p[e], grad[e]) : grad[e];
      if (buf) {
        buf[e] = s.first_step ? d : multiply_add(keep, d, buf[e] * momentum);
        d = h.nesterov ? multiply_add(momentum, buf[e], d) : buf[e];
      }
      p[e] = multiply_add(step, d, p[e]);
    }
  });
}

}  // namespace

void CpuKernels::adam_step(const std::vector<AdamParam>& params, const AdamHyper& hyper) const {
  if (params.empty()) return;
  if (step_dtype(params, "adam_step") == kFloat) return adam<float>(params, hyper);
  adam<double>(params, hyper);
}

void CpuKernels::sgd_step(const std::vector<SgdParam>& params, const SgdHyper& hyper) const {
  if (params.empty()) return;
  if (step_dtype(params, "sgd_step") == kFloat) return sgd<float>(params, hyper);
  sgd<double>(params, hyper);
}

}  // namespace strata::cpu
