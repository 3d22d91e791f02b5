// CUDA kernels: the fused optimizer steps, Adam's (and AdamW's) and SGD's update of every parameter of a call in
// one launch. The per-parameter path (optim/adam.cpp, optim/sgd.cpp) runs about eight elementwise kernels per
// parameter, each a launch and a pass over memory; here one kernel reads and writes each element once.
//
// Note [multi-tensor chunks]: every non-empty parameter is cut into chunks of kChunk elements, numbered across
// the list in order. The launcher writes one slot per parameter (its pointers, numel, per-parameter scalars and
// the number of its first chunk) to device memory with one copy; blocks take chunks on a grid-stride loop and
// find a chunk's parameter by a binary search over the slots' first chunks.
//
// The arithmetic is kernels.h's, operation for operation: fma where it says fma, and the _rn intrinsics, which
// nvcc never merges into an fma, for every other multiply, add, divide and square root. So float32 and float64
// results are the per-parameter path's bit for bit (its add with alpha, x + alpha * y, is contracted into
// fma(alpha, y, x); its other kernels round each op). The 16-bit floats compute in float32 and round only what
// is stored (p, m, v, v_max, the momentum buffer), with float32 scalars.

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"

namespace strata::cuda {

namespace {

/// Elements of one parameter a block updates at a time (16 per thread).
constexpr int64_t kChunk = 16 * kThreads;

// ---- kernels ----

// Rounded arithmetic that nvcc never contracts: the per-parameter path rounds each of these ops.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ inline float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ inline double fma_rn(double a, double b, double c) { return __fma_rn(a, b, c); }

/// One parameter of adam_step (Note [multi-tensor chunks]); scalars in the compute type.
template <class T>
struct AdamSlot {
  int64_t first_chunk;
  int64_t numel;
  T* p;
  const T* g;
  T* m;
  T* v;
  T* v_max;            ///< null without amsgrad
  acc_t<T> step_size;  ///< -lr / bias_correction1
  acc_t<T> root_bc2;   ///< sqrt(bias_correction2)
};

/// adam_step's hyperparameters in the compute type A.
template <class A>
struct AdamScalars {
  A beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  A decay;         ///< 1 - lr * weight_decay
  bool l2;         ///< Adam's weight decay: g = fma(wd, p, g)
  bool decoupled;  ///< AdamW's: p = p * decay
  bool amsgrad;
};

/// One parameter of sgd_step.
template <class T>
struct SgdSlot {
  int64_t first_chunk;
  int64_t numel;
  T* p;
  const T* g;
  T* buf;           ///< null without momentum
  bool first_step;  ///< the buffer takes d instead of decaying
};

/// sgd_step's hyperparameters in the compute type A.
template <class A>
struct SgdScalars {
  A neg_lr, weight_decay, momentum, one_minus_dampening;
  bool decay, has_momentum, nesterov;
};

/// The slot of chunk c: the last with first_chunk <= c (slot 0 starts at chunk 0). A copy, so that the
/// kernel's stores cannot make the compiler read it again.
template <class Slot>
__device__ inline Slot slot_of(const Slot* slots, int64_t n, int64_t c) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (slots[mid].first_chunk <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return slots[lo];
}

/// Runs body(slot, i) for every element i of every chunk, chunks on a grid-stride loop over blocks.
template <class Slot, class Body>
__device__ inline void for_each_element(const Slot* slots, int64_t n, int64_t chunks, const Body& body) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Slot s = slot_of(slots, n, c);
    const int64_t begin = (c - s.first_chunk) * kChunk;
    const int64_t end = begin + kChunk < s.numel ? begin + kChunk : s.numel;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) body(s, i);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(const AdamSlot<T>* slots, int64_t n, int64_t chunks, AdamScalars<acc_t<T>> h) {
  using A = acc_t<T>;
  for_each_element(slots, n, chunks, [&](const AdamSlot<T>& s, int64_t i) {
    A p = convert<A>(s.p[i]), g = convert<A>(s.g[i]);
    if (h.l2) g = fma_rn(h.weight_decay, p, g);
    if (h.decoupled) p = mul_rn(p, h.decay);
    const A m = fma_rn(h.one_minus_beta1, g, mul_rn(convert<A>(s.m[i]), h.beta1));
    const A v = fma_rn(h.one_minus_beta2, mul_rn(g, g), mul_rn(convert<A>(s.v[i]), h.beta2));
    s.m[i] = convert<T>(m);
    s.v[i] = convert<T>(v);
    A vv = v;
    if (h.amsgrad) {
      const A v_max = convert<A>(s.v_max[i]);
      vv = (v_max > v || v_max != v_max) ? v_max : v;  // NaN propagates, as the Maximum kernel's
      s.v_max[i] = convert<T>(vv);
    }
    const A d = add_rn(div_rn(sqrt_rn(vv), s.root_bc2), h.eps);
    s.p[i] = convert<T>(fma_rn(s.step_size, div_rn(m, d), p));
  });
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(const SgdSlot<T>* slots, int64_t n, int64_t chunks, SgdScalars<acc_t<T>> h) {
  using A = acc_t<T>;
  for_each_element(slots, n, chunks, [&](const SgdSlot<T>& s, int64_t i) {
    const A p = convert<A>(s.p[i]);
    A d = convert<A>(s.g[i]);
    if (h.decay) d = fma_rn(h.weight_decay, p, d);
    if (h.has_momentum) {
      const A buf = s.first_step ? d : fma_rn(h.one_minus_dampening, d, mul_rn(convert<A>(s.buf[i]), h.momentum));
      s.buf[i] = convert<T>(buf);
      d = h.nesterov ? fma_rn(h.momentum, buf, d) : buf;
    }
    s.p[i] = convert<T>(fma_rn(h.neg_lr, d, p));
  });
}

// ---- launchers ----

/// Chunks of a parameter of numel elements.
int64_t chunks_of(int64_t numel) { return (numel + kChunk - 1) / kChunk; }

/// Checks one parameter's tensors: p of `first`'s dtype and device, every state tensor defined, of p's dtype, sizes
/// and device, and all contiguous (the kernels index them flat).
void check_param(const char* op, const Tensor& first, const Tensor& p,
                 std::initializer_list<std::pair<const char*, const Tensor*>> state) {
  check_one_device(op, {&first, &p});
  STRATA_CHECK(p.dtype() == first.dtype(), op, ": expected every parameter of dtype ", first.dtype(), ", got ",
               p.dtype());
  STRATA_CHECK(p.is_contiguous(), op, ": expected contiguous parameters");
  for (const auto& [name, t] : state) {
    STRATA_CHECK(t->defined(), op, ": a parameter has no ", name);
    check_one_device(op, {&p, t});
    STRATA_CHECK(t->dtype() == p.dtype() && t->sizes() == p.sizes(), op, ": expected ", name, " of dtype ", p.dtype(),
                 " and sizes ", p.sizes(), ", got ", t->dtype(), " and ", t->sizes());
    STRATA_CHECK(t->is_contiguous(), op, ": expected a contiguous ", name);
  }
}

/// Copies the slots to device memory with one copy on device's stream, then launches
/// launch(blocks, stream, slots on the device, slot count), one block per chunk up to blocks_for's cap.
template <class Slot, class F>
void launch_chunks(std::vector<Slot> slots, int64_t chunks, Device device, const F& launch) {
  if (chunks == 0) return;  // an empty list, or only empty parameters
  const int64_t n = static_cast<int64_t>(slots.size());
  const size_t bytes = slots.size() * sizeof(Slot);
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  // Freed when this returns, after the kernel that reads it was queued: the pool is stream-ordered.
  const Tensor table = empty({static_cast<int64_t>(bytes)}, TensorOptions(kByte).device(device));
  // From pageable memory cudaMemcpyAsync need not have read its source when it returns (CUDA's "API
  // synchronization behavior" says only that it might be synchronous; Note [host copies] in copy.cu), so a host
  // function queued behind the copy frees the host slots. It owns them from the call on: should queueing fail,
  // they leak rather than being freed under a pending copy.
  auto host = std::make_unique<std::vector<Slot>>(std::move(slots));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(table.data_ptr(), host->data(), bytes, cudaMemcpyHostToDevice, stream));
  STRATA_CUDA_CHECK(cudaLaunchHostFunc(
      stream, [](void* kept) { delete static_cast<std::vector<Slot>*>(kept); }, host.release()));
  launch(blocks_for(chunks * kThreads), stream, static_cast<const Slot*>(table.data_ptr()), n);
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace

void CudaKernels::adam_step(const std::vector<AdamParam>& params, const AdamHyper& hyper) const {
  if (params.empty()) return;
  const Tensor& first = params.front().param;
  for (const AdamParam& a : params) {
    check_param("adam_step", first, a.param,
                {{"grad", &a.grad}, {"exp_avg", &a.exp_avg}, {"exp_avg_sq", &a.exp_avg_sq}});
    if (hyper.amsgrad) check_param("adam_step", first, a.param, {{"max_exp_avg_sq", &a.max_exp_avg_sq}});
  }
  visit_cuda_dtype(first.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      using A = acc_t<T>;
      std::vector<AdamSlot<T>> slots;
      int64_t chunks = 0;
      for (const AdamParam& a : params) {
        if (a.param.numel() == 0) continue;
        slots.push_back(
            {chunks, a.param.numel(), elements<T>(a.param), elements<const T>(a.grad), elements<T>(a.exp_avg),
             elements<T>(a.exp_avg_sq), hyper.amsgrad ? elements<T>(a.max_exp_avg_sq) : nullptr,
             static_cast<A>(-hyper.lr / a.bias_correction1), static_cast<A>(std::sqrt(a.bias_correction2))});
        chunks += chunks_of(a.param.numel());
      }
      const bool decay = hyper.weight_decay != 0;
      const AdamScalars<A> h{static_cast<A>(hyper.beta1), static_cast<A>(1 - hyper.beta1),
                             static_cast<A>(hyper.beta2), static_cast<A>(1 - hyper.beta2),
                             static_cast<A>(hyper.eps),   static_cast<A>(hyper.weight_decay),
                             static_cast<A>(hyper.decay), decay && !hyper.decoupled,
                             decay && hyper.decoupled,    hyper.amsgrad};
      launch_chunks(std::move(slots), chunks, first.device(),
                    [&](unsigned blocks, cudaStream_t stream, const AdamSlot<T>* table, int64_t n) {
                      adam_kernel<T><<<blocks, kThreads, 0, stream>>>(table, n, chunks, h);
                    });
    } else {
      STRATA_CHECK(false, "adam_step does not support ", first.dtype());
    }
  });
}

void CudaKernels::sgd_step(const std::vector<SgdParam>& params, const SgdHyper& hyper) const {
  if (params.empty()) return;
  const Tensor& first = params.front().param;
  const bool has_momentum = hyper.momentum != 0;
  for (const SgdParam& s : params) {
    check_param("sgd_step", first, s.param, {{"grad", &s.grad}});
    if (has_momentum) check_param("sgd_step", first, s.param, {{"momentum_buffer", &s.momentum_buffer}});
  }
  visit_cuda_dtype(first.dtype(), [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      using A = acc_t<T>;
      std::vector<SgdSlot<T>> slots;
      int64_t chunks = 0;
      for (const SgdParam& s : params) {
        if (s.param.numel() == 0) continue;
        slots.push_back({chunks, s.param.numel(), elements<T>(s.param), elements<const T>(s.grad),
                         has_momentum ? elements<T>(s.momentum_buffer) : nullptr, s.first_step});
        chunks += chunks_of(s.param.numel());
      }
      const SgdScalars<A> h{static_cast<A>(-hyper.lr),
                            static_cast<A>(hyper.weight_decay),
                            static_cast<A>(hyper.momentum),
                            static_cast<A>(1 - hyper.dampening),
                            hyper.weight_decay != 0,
                            has_momentum,
                            hyper.nesterov};
      launch_chunks(std::move(slots), chunks, first.device(),
                    [&](unsigned blocks, cudaStream_t stream, const SgdSlot<T>* table, int64_t n) {
                      sgd_kernel<T><<<blocks, kThreads, 0, stream>>>(table, n, chunks, h);
                    });
    } else {
      STRATA_CHECK(false, "sgd_step does not support ", first.dtype());
    }
  });
}

}  // namespace strata::cuda
