// CPU kernels: softmax and log_softmax along one dim, and layer norm, each forward beside its backward.
//
// As compositions of ops, softmax costs five passes over its input and layer norm nine, each writing a
// temporary, and their backwards as many again. Here one row (a softmax slice, a layer norm row) is read
// into cache once and everything is computed from it with Eigen's SIMD arrays (autograd/ops/nn.cpp has the
// gain). Rows are split over OpenMP threads.

#include "strata/tensor/cpu/eigen.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/iteration.h"

namespace strata::cpu {

namespace {

using Stride = Eigen::InnerStride<Eigen::Dynamic>;
/// The `size` elements of one (outer, inner) slice, `inner` apart.
template <class T>
using StridedRow = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, 0, Stride>;
/// A read-only StridedRow.
template <class T>
using ConstStridedRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, 0, Stride>;

/// Calls body(out_row, in_row...) for each (outer, inner) slice of out and the inputs [outer, size, inner], as Eigen
/// arrays: plain maps where inner is 1 (the common case, and the only one Eigen vectorises), strided otherwise.
template <class T, class F, class... In>
void for_slices(const Tensor& out, const F& body, const In&... in) {
  const int64_t outer = out.size(0), size = out.size(1), inner = out.size(2);
  for_rows(outer * inner, out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t first = s / inner * size * inner + s % inner;
      if (inner == 1)
        body(ArrayMap<T>(out.data_ptr<T>() + first, size),
             ConstArrayMap<T>(in.template data_ptr<T>() + first, size)...);
      else
        body(StridedRow<T>(out.data_ptr<T>() + first, size, Stride(inner)),
             ConstStridedRow<T>(in.template data_ptr<T>() + first, size, Stride(inner))...);
    }
  });
}

}  // namespace

// Each slice: m = max(x), then y = exp(x - m) / sum(exp(x - m)), or (x - m) - log(sum(exp(x - m))).
void CpuKernels::softmax(const Tensor& in, bool log, const Tensor& out) const {
  const char* op = log ? "log_softmax" : "softmax";
  check_softmax_operands(op, {&in, &out});
  if (in_float32(*this, {&in}, {&out}, [&](const tensor_list& t) { softmax(t[0], log, t[1]); })) return;
  if (in.size(1) == 0) return;
  visit_floating(op, in.dtype(), [&]<class T>() {
    for_slices<T>(
        out,
        [&](auto result, const auto& row) {
          const T m = row.maxCoeff();
          if (log) {
            result = row - (m + std::log(exp_or_zero(row - m).sum()));
          } else {
            result = exp_or_zero(row - m);
            result *= T(1) / result.sum();
          }
        },
        in);
  });
}

void CpuKernels::softmax_backward(const Tensor& y, const Tensor& grad, bool log, const Tensor& grad_in) const {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_softmax_operands(op, {&y, &grad, &grad_in});
  if (in_float32(*this, {&y, &grad}, {&grad_in},
                 [&](const tensor_list& t) { softmax_backward(t[0], t[1], log, t[2]); }))
    return;
  if (y.size(1) == 0) return;
  visit_floating(op, y.dtype(), [&]<class T>() {
    for_slices<T>(
        grad_in,
        [&](auto result, const auto& yr, const auto& g) {
          if (log)
            result = g - exp_or_zero(yr) * g.sum();
          else
            result = yr * (g - (g * yr).sum());
        },
        y, grad);
  });
}

void CpuKernels::layer_norm(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                            const Tensor& mean, const Tensor& rstd) const {
  const int64_t N = check_layer_norm_operands("layer_norm", in, {&in, &out}, {&weight, &bias}, mean, rstd);
  if (in_float32(*this, {&in, &weight, &bias}, {&out, &mean, &rstd},
                 [&](const tensor_list& t) { layer_norm(t[0], t[1], t[2], eps, t[3], t[4], t[5]); }))
    return;
  if (N == 0) {  // an empty row: mean 0, variance 0
    fill(mean, 0);
    fill(rstd, 1 / std::sqrt(eps));
    return;
  }
  visit_floating("layer_norm", in.dtype(), [&]<class T>() {
    const T *x = in.data_ptr<T>(), *w = weight.defined() ? weight.data_ptr<T>() : nullptr,
            *b = bias.defined() ? bias.data_ptr<T>() : nullptr;
    T *y = out.data_ptr<T>(), *mp = mean.data_ptr<T>(), *rp = rstd.data_ptr<T>();
    for_rows(in.size(0), in.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        ConstArrayMap<T> row(x + r * N, N);
        ArrayMap<T> result(y + r * N, N);
        // Two passes (the mean, then the centred squares): one pass's E[x^2] - E[x]^2 cancels badly.
        const T mu = row.mean();
        result = row - mu;
        const T inv = T(1) / std::sqrt(result.square().mean() + static_cast<T>(eps));
        mp[r] = mu, rp[r] = inv;
        if (w && b)
          result = result * inv * ConstArrayMap<T>(w, N) + ConstArrayMap<T>(b, N);
        else if (w)
          result *= inv * ConstArrayMap<T>(w, N);
        else if (b)
          result = result * inv + ConstArrayMap<T>(b, N);
        else
          result *= inv;
      }
    });
  });
}

void CpuKernels::layer_norm_backward(const Tensor& grad_out, const Tensor& in, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& weight, const Tensor& grad_in, const Tensor& grad_weight,
                                     const Tensor& grad_bias) const {
  const int64_t N = check_layer_norm_operands("layer_norm_backward", in, {&in, &grad_out, &grad_in},
                                              {&weight, &grad_weight, &grad_bias}, mean, rstd);
  if (in_float32(*this, {&grad_out, &in, &mean, &rstd, &weight}, {&grad_in, &grad_weight, &grad_bias},
                 [&](const tensor_list& t) { layer_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]); }))
    return;
  if (N == 0) return;  // nothing to write: every output is empty
  visit_floating("layer_norm_backward", in.dtype(), [&]<class T>() {
    const T *x = in.data_ptr<T>(), *g = grad_out.data_ptr<T>(), *mp = mean.data_ptr<T>(), *rp = rstd.data_ptr<T>(),
            *w = weight.defined() ? weight.data_ptr<T>() : nullptr;
    T* gi = grad_in.defined() ? grad_in.data_ptr<T>() : nullptr;
    const bool params = grad_weight.defined() || grad_bias.defined();
    // Rows go in at most kChunks fixed chunks, each summing its own grad_out * xhat and grad_out; the chunks
    // are added in order, so the parameter gradients do not depend on the number of threads.
    constexpr int64_t kChunks = 64;
    const int64_t M = in.size(0), chunks = std::min(kChunks, M), rows = chunks ? (M + chunks - 1) / chunks : 0;
    // Chunk c's sum of grad_out * xhat at part(c), of grad_out at part(chunks + c): one allocation for all.
    Scratch<T> partial = Scratch<T>::Zero(params ? 2 * chunks * N : 0);
    const auto part = [&](int64_t i) { return ArrayMap<T>(partial.data() + i * N, N); };
    parallel_for(chunks, use_threads(in.numel()), [&](int64_t chunk) {
      Scratch<T> xhat(N), dxhat(N);
      for (int64_t r = chunk * rows; r < std::min(M, (chunk + 1) * rows); ++r) {
        ConstArrayMap<T> gr(g + r * N, N);
        xhat = (ConstArrayMap<T>(x + r * N, N) - mp[r]) * rp[r];
        if (params) part(chunk) += gr * xhat, part(chunks + chunk) += gr;
        if (!gi) continue;
        if (w)
          dxhat = gr * ConstArrayMap<T>(w, N);
        else
          dxhat = gr;
        const T a = dxhat.mean(), c = (dxhat * xhat).mean();
        ArrayMap<T>(gi + r * N, N) = rp[r] * (dxhat - a - xhat * c);
      }
    });
    for (const auto& [grad, first] : {std::pair{&grad_weight, int64_t{0}}, std::pair{&grad_bias, chunks}}) {
      if (!grad->defined()) continue;
      ArrayMap<T> sum(grad->template data_ptr<T>(), N);
      sum.setZero();
      for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += part(first + chunk);
    }
  });
}

}  // namespace strata::cpu
