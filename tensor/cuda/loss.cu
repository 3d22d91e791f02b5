// CUDA kernels: cross entropy over class-index targets, forward beside backward (the CPU's are in cpu/loss.cpp).
// 16-bit floats load and store 16 bits and compute in float32; float64 stays float64.
//
// Each row of logits [N, C] is a line of Note [CUDA row kernels] (rows.cuh). Forward reads it once, for its maximum
// and denominator together and, with label smoothing, sum(weight * x) and sum(weight), keeping only its logsumexp;
// backward reads it once more, recomputing the probabilities from it. The smoothing term's gradient needs
// sum(weight) in every row: a one-block kernel sums it first, so the total is the same in every row and every run.
//
// Note [cross entropy targets]: a kernel cannot report a target outside [0, C) that is not ignore_index, so the
// caller guarantees the range (the op checks the targets before it calls: check_targets, autograd/ops/nn.cpp). A
// target that slips through is never read at: its row's outputs are NaN (nll, smooth and lse forward, every
// gradient backward), so the error shows.

#include <cuda/std/limits>

#include <cstdint>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/rows.cuh"

namespace strata::cuda {

namespace {

// ---- kernels ----

/// nll, smooth (null where not wanted) and lse of each of the N rows of logits [N, C]; weight null where undefined.
template <class T, int kGroup>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(const T* logits, const int64_t* target, const T* weight, int64_t ignore_index, T* nll,
                         T* smooth, acc_t<T>* lse, int64_t N, int64_t C) {
  using A = acc_t<T>;
  for_each_line<kGroup>(N, [&](int64_t n, int lane) {
    const int64_t t = target[n];
    if (t == ignore_index || t < 0 || t >= C) {  // Note [cross entropy targets]
      if (lane == 0) {
        const A value = t == ignore_index ? A(0) : ::cuda::std::numeric_limits<A>::quiet_NaN();
        nll[n] = convert<T>(value);
        if (smooth) smooth[n] = convert<T>(value);
        lse[n] = value;
      }
      return;
    }
    const T* x = logits + n * C;
    // sum(weight * (x - x0)), x0 the row's first logit where finite: an offset common to the row would cancel in
    // l * sum(weight) - sum(weight * x), losing the digits smooth is made of.
    const A first = convert<A>(x[0]), x0 = isfinite(first) ? first : A(0);
    MaxSum<A> st{-::cuda::std::numeric_limits<A>::infinity(), A(0)};
    A weighted = 0, total = 0;  // sum(weight * (x - x0)) and sum(weight), for smooth
    for (int64_t c = lane; c < C; c += kGroup) {
      const A v = convert<A>(x[c]);
      st = merge(st, MaxSum<A>{v, A(1)});
      if (smooth) {
        const A w = weight ? convert<A>(weight[c]) : A(1);
        weighted += w * (v - x0);
        total += w;
      }
    }
    st = group_reduce<kGroup>(st, Merge{});
    const A l = st.m + log(st.s);
    if (smooth) {
      weighted = group_reduce<kGroup>(weighted, Plus{});
      total = group_reduce<kGroup>(total, Plus{});
    }
    if (lane != 0) return;
    nll[n] = convert<T>(l - convert<A>(x[t]));
    if (smooth) smooth[n] = convert<T>((l - x0) * total - weighted);  // sum_c weight[c] * (l - x[c])
    lse[n] = l;
  });
}

/// *total = the sum of in's n elements, by one block in a fixed order.
template <class T>
__global__ void __launch_bounds__(kThreads) sum_kernel(const T* in, int64_t n, acc_t<T>* total) {
  using A = acc_t<T>;
  A sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += convert<A>(in[i]);
  sum = group_reduce<kThreads>(sum, Plus{});
  if (threadIdx.x == 0) *total = sum;
}

/// grad_logits for the N rows of [N, C] (Kernels::cross_entropy_backward's formula); weight, grad_smooth null where
/// undefined, total_weight = sum(weight), null where weight or grad_smooth is.
template <class T, int kGroup>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(const T* logits, const int64_t* target, const T* weight, const acc_t<T>* total_weight,
                                  int64_t ignore_index, const acc_t<T>* lse, const T* grad_nll, const T* grad_smooth,
                                  T* grad_logits, int64_t N, int64_t C) {
  using A = acc_t<T>;
  for_each_line<kGroup>(N, [&](int64_t n, int lane) {
    const T* x = logits + n * C;
    T* g = grad_logits + n * C;
    const int64_t t = target[n];
    if (t == ignore_index || t < 0 || t >= C) {  // Note [cross entropy targets]
      const A value = t == ignore_index ? A(0) : ::cuda::std::numeric_limits<A>::quiet_NaN();
      for (int64_t c = lane; c < C; c += kGroup) g[c] = convert<T>(value);
      return;
    }
    const A l = lse[n], gn = convert<A>(grad_nll[n]), gs = grad_smooth ? convert<A>(grad_smooth[n]) : A(0);
    const A scale = gn + gs * (total_weight ? *total_weight : static_cast<A>(C));
    for (int64_t c = lane; c < C; c += kGroup) {
      A v = exp(convert<A>(x[c]) - l) * scale;
      if (grad_smooth) v -= weight ? gs * convert<A>(weight[c]) : gs;
      if (c == t) v -= gn;
      g[c] = convert<T>(v);
    }
  });
}

}  // namespace

// ---- launchers ----

void CudaKernels::cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                                const Tensor& nll, const Tensor& smooth, const Tensor& lse) const {
  const char* op = "cross_entropy";
  check_cross_entropy_operands(op, logits, target, weight, lse, nll, smooth);
  const int64_t N = logits.size(0), C = logits.size(1);
  on_device(op, logits, [&]<class T>(cudaStream_t stream) {
    using A = acc_t<T>;
    launch_lines(N, C, true, [&]<int kGroup>(unsigned blocks) {
      cross_entropy_kernel<T, kGroup><<<blocks, kThreads, 0, stream>>>(
          elements<const T>(logits), elements<const int64_t>(target), elements<const T>(weight), ignore_index,
          elements<T>(nll), elements<T>(smooth), elements<A>(lse), N, C);
    });
  });
}

void CudaKernels::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                         int64_t ignore_index, const Tensor& lse, const Tensor& grad_nll,
                                         const Tensor& grad_smooth, const Tensor& grad_logits) const {
  const char* op = "cross_entropy_backward";
  check_cross_entropy_operands(op, logits, target, weight, lse, grad_nll, grad_smooth, grad_logits);
  const int64_t N = logits.size(0), C = logits.size(1);
  on_device(op, logits, [&]<class T>(cudaStream_t stream) {
    using A = acc_t<T>;
    Tensor total_weight;
    if (weight.defined() && grad_smooth.defined()) {
      total_weight = empty({1}, lse.options());  // lse's dtype is A's
      sum_kernel<T><<<1, kThreads, 0, stream>>>(elements<const T>(weight), C, elements<A>(total_weight));
      STRATA_CUDA_LAUNCH_CHECK();
    }
    launch_lines(N, C, true, [&]<int kGroup>(unsigned blocks) {
      cross_entropy_backward_kernel<T, kGroup><<<blocks, kThreads, 0, stream>>>(
          elements<const T>(logits), elements<const int64_t>(target), elements<const T>(weight),
          elements<const A>(total_weight), ignore_index, elements<const A>(lse), elements<const T>(grad_nll),
          elements<const T>(grad_smooth), elements<T>(grad_logits), N, C);
    });
  });
}

}  // namespace strata::cuda
