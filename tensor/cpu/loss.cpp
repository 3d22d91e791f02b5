// CPU kernels: cross entropy over class-index targets, forward beside backward.
//
// As log_softmax then a gather, cross entropy writes the log-probabilities [N, C] and keeps them for backward,
// which scatters into a zero [N, C] and runs log_softmax's backward over it. Here each row is read once forward,
// leaving only its logsumexp, and once backward, recomputing the probabilities from it.

#include "strata/tensor/cpu/eigen.h"

#include <cmath>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/iteration.h"

namespace strata::cpu {

namespace {

/// That each target is in [0, C) or ignore_index: here, before the rows are split over threads, where an error
/// cannot be thrown.
void check_targets(const char* op, const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  const int64_t* t = target.data_ptr<int64_t>();
  const int64_t N = logits.size(0), C = logits.size(1);
  for (int64_t n = 0; n < N; ++n)
    STRATA_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < C), op, ": target ", t[n], " of row ", n,
                 " is out of bounds for ", C, " classes");
}

}  // namespace

void CpuKernels::cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                               const Tensor& nll, const Tensor& smooth, const Tensor& lse) const {
  check_cross_entropy_operands("cross_entropy", logits, target, weight, lse, nll, smooth);
  check_targets("cross_entropy", logits, target, ignore_index);
  if (in_float32(*this, {&logits, &target, &weight}, {&nll, &smooth, &lse},
                 [&](const tensor_list& t) { cross_entropy(t[0], t[1], t[2], ignore_index, t[3], t[4], t[5]); }))
    return;
  const int64_t C = logits.size(1);
  visit_floating("cross_entropy", logits.dtype(), [&]<class T>() {
    const T *x = logits.data_ptr<T>(), *w = weight.defined() ? weight.data_ptr<T>() : nullptr;
    const int64_t* target_of = target.data_ptr<int64_t>();
    T *nll_of = nll.data_ptr<T>(), *smooth_of = smooth.defined() ? smooth.data_ptr<T>() : nullptr,
      *lse_of = lse.data_ptr<T>();
    for_rows(logits.size(0), logits.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const int64_t t = target_of[n];
        if (t == ignore_index) {
          nll_of[n] = 0, lse_of[n] = 0;
          if (smooth_of) smooth_of[n] = 0;
          continue;
        }
        ConstArrayMap<T> row(x + n * C, C);
        const T m = row.maxCoeff(), l = m + std::log(exp_or_zero(row - m).sum());
        nll_of[n] = l - row[t], lse_of[n] = l;
        if (smooth_of) smooth_of[n] = w ? (ConstArrayMap<T>(w, C) * (l - row)).sum() : (l - row).sum();
      }
    });
  });
}

void CpuKernels::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                        int64_t ignore_index, const Tensor& lse, const Tensor& grad_nll,
                                        const Tensor& grad_smooth, const Tensor& grad_logits) const {
  const char* op = "cross_entropy_backward";
  check_cross_entropy_operands(op, logits, target, weight, lse, grad_nll, grad_smooth, grad_logits);
  check_targets(op, logits, target, ignore_index);
  if (in_float32(*this, {&logits, &target, &weight, &lse, &grad_nll, &grad_smooth}, {&grad_logits},
                 [&](const tensor_list& t) {
                   cross_entropy_backward(t[0], t[1], t[2], ignore_index, t[3], t[4], t[5], t[6]);
                 }))
    return;
  const int64_t C = logits.size(1);
  visit_floating(op, logits.dtype(), [&]<class T>() {
    const T *x = logits.data_ptr<T>(), *w = weight.defined() ? weight.data_ptr<T>() : nullptr,
            *lse_of = lse.data_ptr<T>(), *gn = grad_nll.data_ptr<T>(),
            *gs = grad_smooth.defined() ? grad_smooth.data_ptr<T>() : nullptr;
    const int64_t* target_of = target.data_ptr<int64_t>();
    T* gx = grad_logits.data_ptr<T>();
    const T total_weight = w ? ConstArrayMap<T>(w, C).sum() : T(C);
    for_rows(logits.size(0), logits.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        ArrayMap<T> out(gx + n * C, C);
        const int64_t t = target_of[n];
        if (t == ignore_index) {
          out.setZero();
          continue;
        }
        out = exp_or_zero(ConstArrayMap<T>(x + n * C, C) - lse_of[n]);  // the probabilities
        if (gs && w)
          out = out * (gn[n] + gs[n] * total_weight) - gs[n] * ConstArrayMap<T>(w, C);
        else if (gs)
          out = out * (gn[n] + gs[n] * total_weight) - gs[n];
        else
          out *= gn[n];
        out[t] -= gn[n];
      }
    });
  });
}

}  // namespace strata::cpu
