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

/// The step's floating dtype, its first parameter's (data_ptr<T>() checks every other tensor against it); throws
/// naming the step when the CPU cannot compute in it.
template <class P>
ScalarType step_dtype(const std::vector<P>& params, const char* step) {
  const ScalarType dtype = params.front().param.dtype();
  STRATA_CHECK(dtype == kFloat || dtype == kDouble, step, " on the CPU computes in float32 and float64, got ", dtype);
  return dtype;
}

/// Calls f(std::bool_constant<b>{}): a runtime flag made a compile-time one.
template <class F>
void with_flag(bool b, const F& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// Adam's scalars for one parameter, converted to T once.
template <class T>
struct AdamScalars {
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd, decay, root_bc2, step;
};

// The loops take their options as template flags and their arrays as __restrict pointers: a branch or a
// possible alias in the loop keeps GCC from vectorising it, and unvectorised, its divisions and square root
// made the fused step slower than the eight vectorised passes it replaces.
template <class T, bool kL2, bool kDecoupled, bool kAmsgrad>
void adam_chunk(int64_t n, const AdamScalars<T>& s, T* __restrict p, const T* __restrict grad, T* __restrict m,
                T* __restrict v, T* __restrict v_max) {
  for (int64_t e = 0; e < n; ++e) {
    T g = grad[e];
    T pe = p[e];
    if constexpr (kL2) g = multiply_add(s.wd, pe, g);
    if constexpr (kDecoupled) pe = pe * s.decay;
    const T me = multiply_add(s.one_minus_beta1, g, m[e] * s.beta1);
    const T ve = multiply_add(s.one_minus_beta2, g * g, v[e] * s.beta2);
    m[e] = me;
    v[e] = ve;
    T vv = ve;
    if constexpr (kAmsgrad) {
      const T a_max = v_max[e];
      vv = (a_max != a_max || a_max > ve) ? a_max : ve;  // NaN propagates, as Maximum's
      v_max[e] = vv;
    }
    const T d = std::sqrt(vv) / s.root_bc2 + s.eps;
    p[e] = multiply_add(s.step, me / d, pe);
  }
}

template <class T>
void adam(const std::vector<AdamParam>& params, const AdamHyper& h) {
  const bool l2 = !h.decoupled && h.weight_decay != 0, decoupled = h.decoupled && h.weight_decay != 0;
  std::vector<int64_t> numels;
  for (const AdamParam& a : params) numels.push_back(a.param.numel());
  for_each_chunk(numels, [&](size_t i, int64_t first, int64_t n) {
    const AdamParam& a = params[i];
    const AdamScalars<T> s{static_cast<T>(h.beta1),
                           static_cast<T>(h.beta2),
                           static_cast<T>(1 - h.beta1),
                           static_cast<T>(1 - h.beta2),
                           static_cast<T>(h.eps),
                           static_cast<T>(h.weight_decay),
                           static_cast<T>(h.decay),
                           static_cast<T>(std::sqrt(a.bias_correction2)),
                           static_cast<T>(-h.lr / a.bias_correction1)};
    T* v_max = h.amsgrad ? a.max_exp_avg_sq.data_ptr<T>() + first : nullptr;
    with_flag(l2, [&](auto kL2) {
      with_flag(decoupled, [&](auto kDecoupled) {
        with_flag(h.amsgrad, [&](auto kAmsgrad) {
          adam_chunk<T, kL2, kDecoupled, kAmsgrad>(n, s, a.param.data_ptr<T>() + first, a.grad.data_ptr<T>() + first,
                                                   a.exp_avg.data_ptr<T>() + first, a.exp_avg_sq.data_ptr<T>() + first,
                                                   v_max);
        });
      });
    });
  });
}

template <class T, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_chunk(int64_t n, T wd, T momentum, T keep, T step, T* __restrict p, const T* __restrict grad,
               T* __restrict buf) {
  for (int64_t e = 0; e < n; ++e) {
    const T pe = p[e];
    T d = kDecay ? multiply_add(wd, pe, grad[e]) : grad[e];
    if constexpr (kMomentum) {
      const T b = kFirst ? d : multiply_add(keep, d, buf[e] * momentum);
      buf[e] = b;
      d = kNesterov ? multiply_add(momentum, b, d) : b;
    }
    p[e] = multiply_add(step, d, pe);
  }
}

template <class T>
void sgd(const std::vector<SgdParam>& params, const SgdHyper& h) {
  const T wd = static_cast<T>(h.weight_decay), momentum = static_cast<T>(h.momentum);
  const T keep = static_cast<T>(1 - h.dampening), step = static_cast<T>(-h.lr);
  std::vector<int64_t> numels;
  for (const SgdParam& s : params) numels.push_back(s.param.numel());
  for_each_chunk(numels, [&](size_t i, int64_t first, int64_t n) {
    const SgdParam& s = params[i];
    T* buf = h.momentum != 0 ? s.momentum_buffer.data_ptr<T>() + first : nullptr;
    with_flag(h.weight_decay != 0, [&](auto kDecay) {
      with_flag(h.momentum != 0, [&](auto kMomentum) {
        with_flag(s.first_step, [&](auto kFirst) {
          with_flag(h.nesterov, [&](auto kNesterov) {
            sgd_chunk<T, kDecay, kMomentum, kFirst, kNesterov>(
                n, wd, momentum, keep, step, s.param.data_ptr<T>() + first, s.grad.data_ptr<T>() + first, buf);
          });
        });
      });
    });
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
