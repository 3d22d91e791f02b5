// CUDA kernels: fused scaled-dot-product attention, forward and backward. The math and its conventions (the
// safe softmax, the dropout bits, Note [attention backward]) are cpu/attention.cpp's; 16-bit floats load into
// float32 and every sum runs in float32.
//
// Note [CUDA flash attention]: the composite writes the scores [N, L, S] to global memory (and their weights and
// gradients after them), so its memory grows as L * S. Here a block owns kRows rows of one slice n, two per warp,
// and walks their partners (keys in forward and for dQ, queries for dK and dV) a tile of 32 at a time through
// shared memory, one partner per lane. A lane's score is then a plain dot product that needs no reduction across
// lanes; tile rows sit at an odd stride so that the 32 lanes, each reading its own row, hit 32 different banks. The
// warp takes the row's maximum and sum by shuffles and broadcasts each weight back, lane by lane, into
// accumulators in which a lane holds every 32nd column of the row (8 registers for the largest head dim, 256).
// Forward keeps an online softmax (running maximum m and denominator l, the accumulator rescaled by
// exp(m_old - m_new)) and stores only out and logsumexp. Backward recomputes the weights from logsumexp and uses
// no atomics, so its sums have one order whatever the scheduling: a kernel forms D = rowsum(dO * O), a block per
// key tile sums dK and dV over every query, and a block per query tile sums dQ over every key (the scores are
// recomputed in both, the price of determinism).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda/device.cuh"
#include "strata/tensor/random_stream.h"

namespace strata::cuda {

namespace {

using random_stream::Stream;

constexpr int kWarps = 8;                         ///< warps per block
constexpr int kBlockThreads = kWarps * kWarp;     ///< threads per block
constexpr int kRowsPerWarp = 2;                   ///< rows a warp owns
constexpr int kRows = kWarps * kRowsPerWarp;      ///< rows a block owns
constexpr int kMaxHeadDim = 256;                  ///< the largest E and Ev with a kernel
constexpr int kCols = kMaxHeadDim / kWarp;        ///< accumulator columns per lane and row
constexpr size_t kDefaultSharedBytes = 48 << 10;  ///< dynamic shared memory a launch gets without opting in
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// The row stride of a tile: dim, made odd, so that lane r reading element e of row r hits bank
/// (r * stride + e) % 32, a different one for each lane.
__host__ __device__ constexpr int odd_stride(int dim) { return dim | 1; }

// ---- kernels ----

/// One call's operands and constants, passed by value to every kernel.
template <class T>
struct Problem {
  const T* q;     // [N, L, E]
  const T* k;     // [N, S, E]
  const T* v;     // [N, S, Ev]
  const T* mask;  // null, or element (n, i, j) at n * mask_stride[0] + i * mask_stride[1] + j * mask_stride[2]
  int64_t mask_stride[3];
  int64_t L, S;
  int E, Ev;
  float scale;
  bool causal;
  bool dropout;
  Stream bits;         // dropout's stream
  uint64_t offset;     // dropout's first counter
  uint64_t keep_from;  // a weight is kept when the top 24 bits of its counter's draw are at least this
  float keep_scale;    // what a kept weight is multiplied by

  Problem(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& maskt, const AttentionParams& p)
      : q(static_cast<const T*>(qt.data_ptr())),
        k(static_cast<const T*>(kt.data_ptr())),
        v(static_cast<const T*>(vt.data_ptr())),
        mask(maskt.defined() ? static_cast<const T*>(maskt.data_ptr()) : nullptr),
        mask_stride{maskt.defined() ? maskt.stride(0) : 0, maskt.defined() ? maskt.stride(1) : 0,
                    maskt.defined() ? maskt.stride(2) : 0},
        L(qt.size(1)),
        S(kt.size(1)),
        E(static_cast<int>(qt.size(2))),
        Ev(static_cast<int>(vt.size(2))),
        scale(static_cast<float>(p.scale)),
        causal(p.causal),
        dropout(p.dropout_p > 0),
        bits(p.seed, 0),
        offset(p.offset),
        // The CPU keeps u = bits * 2^-24 when u >= float(p); that is bits >= ceil(float(p) * 2^24), exactly.
        keep_from(
            static_cast<uint64_t>(std::ceil(std::ldexp(static_cast<double>(static_cast<float>(p.dropout_p)), 24)))),
        keep_scale(p.dropout_p < 1 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 0.f) {}

  /// The score of query i and key j from their dot product; -inf where the query does not see the key, or where i
  /// or j is past the end (the last tiles' padding).
  __device__ float score(float dot, int64_t n, int64_t i, int64_t j) const {
    if (i >= L || j >= S || (causal && j > i)) return kNegInf;
    const float s = dot * scale;
    return mask ? s + convert<float>(mask[n * mask_stride[0] + i * mask_stride[1] + j * mask_stride[2]]) : s;
  }

  /// Weight (n, i, j)'s dropout factor: keep_scale where kept, 0 where dropped, 1 without dropout.
  __device__ float dropout_factor(int64_t n, int64_t i, int64_t j) const {
    if (!dropout) return 1.f;
    const uint64_t c = offset + static_cast<uint64_t>((n * L + i) * S + j);
    return (bits(c) >> 40) >= keep_from ? keep_scale : 0.f;
  }
};

/// The maximum of x over the warp, in every lane.
__device__ inline float warp_max(float x) {
  for (int lanes = kWarp / 2; lanes > 0; lanes /= 2) x = fmaxf(x, __shfl_xor_sync(kAllLanes, x, lanes));
  return x;
}

/// The sum of x over the warp, in every lane (the butterfly adds the same pairs in every lane).
__device__ inline float warp_sum(float x) {
  for (int lanes = kWarp / 2; lanes > 0; lanes /= 2) x += __shfl_xor_sync(kAllLanes, x, lanes);
  return x;
}

/// a[0, dim) . b[0, dim).
__device__ inline float dot(const float* a, const float* b, int dim) {
  float s = 0.f;
  for (int e = 0; e < dim; ++e) s = fmaf(a[e], b[e], s);
  return s;
}

/// acc[c] += w * row[lane + 32 c] for each of the lane's columns below dim.
__device__ inline void axpy(float (&acc)[kCols], float w, const float* row, int dim, int lane) {
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    if (lane + kWarp * c < dim) acc[c] = fmaf(w, row[lane + kWarp * c], acc[c]);
}

/// Copies `rows` rows of the row-major [*, dim] array src into the first rows of dst [count, stride] as float, and
/// zeros dst's rows past them: a weight of 0 times a stale NaN would be NaN. The whole block takes part.
template <class T>
__device__ inline void load_rows(float* dst, int stride, const T* src, int64_t rows, int count, int dim) {
  for (int idx = threadIdx.x; idx < count * dim; idx += blockDim.x) {
    const int r = idx / dim, c = idx - r * dim;
    dst[r * stride + c] = r < rows ? convert<float>(src[idx]) : 0.f;
  }
}

/// Writes the lane's columns of a row [dim] from acc times factor.
template <class T>
__device__ inline void store_row(T* dst, const float (&acc)[kCols], float factor, int dim, int lane) {
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    if (lane + kWarp * c < dim) dst[lane + kWarp * c] = convert<T>(acc[c] * factor);
}

/// out [N, L, Ev] and logsumexp [N, L] for kRows query rows of slice n per block (block = n * row_tiles + tile).
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    attention_forward_kernel(Problem<T> pb, T* out, float* lse, int64_t row_tiles) {
  extern __shared__ float smem[];
  const int E = pb.E, Ev = pb.Ev, k_stride = odd_stride(E);
  float* q_s = smem;                    // [kRows, E]: the block's queries
  float* k_s = q_s + kRows * E;         // [kWarp, k_stride]: a tile of keys, lane j's is row j
  float* v_s = k_s + kWarp * k_stride;  // [kWarp, Ev]: their values
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x / row_tiles, i0 = blockIdx.x % row_tiles * kRows;
  load_rows(q_s, E, pb.q + (n * pb.L + i0) * E, pb.L - i0, kRows, E);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = kNegInf;
    l[r] = 0.f;
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.f;
  }
  const int64_t key_end = pb.causal ? std::min(pb.S, i0 + kRows) : pb.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kWarp) {
    __syncthreads();  // every warp is done with the previous tile
    load_rows(k_s, k_stride, pb.k + (n * pb.S + j0) * E, pb.S - j0, kWarp, E);
    load_rows(v_s, Ev, pb.v + (n * pb.S + j0) * Ev, pb.S - j0, kWarp, Ev);
    __syncthreads();
    const int64_t j = j0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int64_t i = i0 + row;
      const float s = pb.score(dot(q_s + row * E, k_s + lane * k_stride, E), n, i, j);
      const float m_new = fmaxf(m[r], warp_max(s));
      const float m_ref = m_new == kNegInf ? 0.f : m_new;  // no key seen yet: the exps below are 0, not NaN
      const float p = expf(s - m_ref), alpha = expf(m[r] - m_ref);
      l[r] = l[r] * alpha + warp_sum(p);  // the denominator never sees dropout
      m[r] = m_new;
      const float pz = p * pb.dropout_factor(n, i, j);
      for (int c = 0; c < kCols; ++c) acc[r][c] *= alpha;
      for (int jj = 0; jj < kWarp; ++jj) axpy(acc[r], __shfl_sync(kAllLanes, pz, jj), v_s + jj * Ev, Ev, lane);
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = i0 + warp * kRowsPerWarp + r;
    if (i >= pb.L) break;
    const bool seen = l[r] > 0;  // a row that saw no key gets 0 and logsumexp -inf
    store_row(out + (n * pb.L + i) * Ev, acc[r], seen ? 1.f / l[r] : 0.f, Ev, lane);
    if (lane == 0) lse[n * pb.L + i] = seen ? m[r] + logf(l[r]) : kNegInf;
  }
}

/// d[r] = out[r] . grad_out[r] for the rows of [rows, Ev], one warp per row.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    row_dot_kernel(const T* out, const T* grad_out, float* d, int64_t rows, int Ev) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= rows) return;  // the whole warp
  float s = 0.f;
  for (int c = lane; c < Ev; c += kWarp)
    s = fmaf(convert<float>(out[r * Ev + c]), convert<float>(grad_out[r * Ev + c]), s);
  s = warp_sum(s);
  if (lane == 0) d[r] = s;
}

/// grad_k and grad_v for kRows keys of slice n per block (block = n * key_tiles + tile), summed over the queries in
/// order.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_kv_kernel(Problem<T> pb, const T* grad_out, const float* lse, const float* d, T* grad_k,
                                 T* grad_v, int64_t key_tiles) {
  extern __shared__ float smem[];
  const int E = pb.E, Ev = pb.Ev, q_stride = odd_stride(E), g_stride = odd_stride(Ev);
  float* k_s = smem;                    // [kRows, E]: the block's keys
  float* v_s = k_s + kRows * E;         // [kRows, Ev]: their values
  float* q_s = v_s + kRows * Ev;        // [kWarp, q_stride]: a tile of queries, lane i's is row i
  float* g_s = q_s + kWarp * q_stride;  // [kWarp, g_stride]: their output gradients
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x / key_tiles, j0 = blockIdx.x % key_tiles * kRows;
  load_rows(k_s, E, pb.k + (n * pb.S + j0) * E, pb.S - j0, kRows, E);
  load_rows(v_s, Ev, pb.v + (n * pb.S + j0) * Ev, pb.S - j0, kRows, Ev);

  float dk[kRowsPerWarp][kCols], dv[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r)
    for (int c = 0; c < kCols; ++c) dk[r][c] = dv[r][c] = 0.f;
  // When causal, the queries before the block's first key see none of its keys.
  for (int64_t i0 = pb.causal ? j0 : 0; i0 < pb.L; i0 += kWarp) {
    __syncthreads();  // every warp is done with the previous tile
    load_rows(q_s, q_stride, pb.q + (n * pb.L + i0) * E, pb.L - i0, kWarp, E);
    load_rows(g_s, g_stride, grad_out + (n * pb.L + i0) * Ev, pb.L - i0, kWarp, Ev);
    __syncthreads();
    const int64_t i = i0 + lane;
    const float lse_i = i < pb.L ? lse[n * pb.L + i] : kNegInf, d_i = i < pb.L ? d[n * pb.L + i] : 0.f;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int64_t j = j0 + row;
      const float s = pb.score(dot(q_s + lane * q_stride, k_s + row * E, E), n, i, j);
      const float p = lse_i == kNegInf ? 0.f : expf(s - lse_i);  // a row that saw no key has weights 0
      const float z = pb.dropout_factor(n, i, j);
      const float dp = dot(g_s + lane * g_stride, v_s + row * Ev, Ev) * z;
      const float pz = p * z, ds = p * (dp - d_i);
      for (int ii = 0; ii < kWarp; ++ii) {
        axpy(dv[r], __shfl_sync(kAllLanes, pz, ii), g_s + ii * g_stride, Ev, lane);
        axpy(dk[r], __shfl_sync(kAllLanes, ds, ii), q_s + ii * q_stride, E, lane);
      }
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = j0 + warp * kRowsPerWarp + r;
    if (j >= pb.S) break;
    store_row(grad_k + (n * pb.S + j) * E, dk[r], pb.scale, E, lane);
    store_row(grad_v + (n * pb.S + j) * Ev, dv[r], 1.f, Ev, lane);
  }
}

/// grad_q for kRows queries of slice n per block (block = n * row_tiles + tile), summed over the keys in order.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    attention_backward_q_kernel(Problem<T> pb, const T* grad_out, const float* lse, const float* d, T* grad_q,
                                int64_t row_tiles) {
  extern __shared__ float smem[];
  const int E = pb.E, Ev = pb.Ev, k_stride = odd_stride(E), v_stride = odd_stride(Ev);
  float* q_s = smem;                    // [kRows, E]: the block's queries
  float* g_s = q_s + kRows * E;         // [kRows, Ev]: their output gradients
  float* k_s = g_s + kRows * Ev;        // [kWarp, k_stride]: a tile of keys, lane j's is row j
  float* v_s = k_s + kWarp * k_stride;  // [kWarp, v_stride]: their values
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x / row_tiles, i0 = blockIdx.x % row_tiles * kRows;
  load_rows(q_s, E, pb.q + (n * pb.L + i0) * E, pb.L - i0, kRows, E);
  load_rows(g_s, Ev, grad_out + (n * pb.L + i0) * Ev, pb.L - i0, kRows, Ev);

  float lse_r[kRowsPerWarp], d_r[kRowsPerWarp], dq[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = i0 + warp * kRowsPerWarp + r;
    lse_r[r] = i < pb.L ? lse[n * pb.L + i] : kNegInf;
    d_r[r] = i < pb.L ? d[n * pb.L + i] : 0.f;
    for (int c = 0; c < kCols; ++c) dq[r][c] = 0.f;
  }
  const int64_t key_end = pb.causal ? std::min(pb.S, i0 + kRows) : pb.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kWarp) {
    __syncthreads();  // every warp is done with the previous tile
    load_rows(k_s, k_stride, pb.k + (n * pb.S + j0) * E, pb.S - j0, kWarp, E);
    load_rows(v_s, v_stride, pb.v + (n * pb.S + j0) * Ev, pb.S - j0, kWarp, Ev);
    __syncthreads();
    const int64_t j = j0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int64_t i = i0 + row;
      const float s = pb.score(dot(q_s + row * E, k_s + lane * k_stride, E), n, i, j);
      const float p = lse_r[r] == kNegInf ? 0.f : expf(s - lse_r[r]);
      const float dp = dot(g_s + row * Ev, v_s + lane * v_stride, Ev) * pb.dropout_factor(n, i, j);
      const float ds = p * (dp - d_r[r]);
      for (int jj = 0; jj < kWarp; ++jj) axpy(dq[r], __shfl_sync(kAllLanes, ds, jj), k_s + jj * k_stride, E, lane);
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = i0 + warp * kRowsPerWarp + r;
    if (i >= pb.L) break;
    store_row(grad_q + (n * pb.L + i) * E, dq[r], pb.scale, E, lane);
  }
}

// ---- launchers ----

/// Dynamic shared memory of the forward kernel, in bytes.
size_t forward_shared_bytes(int E, int Ev) {
  return sizeof(float) * (static_cast<size_t>(kRows) * E + static_cast<size_t>(kWarp) * (odd_stride(E) + Ev));
}

/// Dynamic shared memory of each backward kernel (both lay out kRows rows and a tile of 32), in bytes.
size_t backward_shared_bytes(int E, int Ev) {
  return sizeof(float) *
         (static_cast<size_t>(kRows) * (E + Ev) + static_cast<size_t>(kWarp) * (odd_stride(E) + odd_stride(Ev)));
}

/// Whether the kernels cover these operands: float32 or a 16-bit float, head dims up to kMaxHeadDim, and the
/// backward's shared memory within what the device lets a block opt into. Forward and backward answer alike.
bool has_kernel(const Tensor& q, const Tensor& v) {
  if (q.dtype() != kFloat && q.dtype() != kHalf && q.dtype() != kBFloat16) return false;
  if (q.size(2) > kMaxHeadDim || v.size(2) > kMaxHeadDim) return false;
  int max_bytes = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, q.device().index));
  return backward_shared_bytes(static_cast<int>(q.size(2)), static_cast<int>(v.size(2))) <=
         static_cast<size_t>(max_bytes);
}

/// Launches kernel on `blocks` blocks of kBlockThreads with `bytes` of dynamic shared memory on stream (opting in
/// beyond the default), and checks the launch; nothing when there are no blocks.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), int64_t blocks, size_t bytes, cudaStream_t stream, const Args&... args) {
  if (blocks == 0) return;
  if (bytes > kDefaultSharedBytes)
    STRATA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<static_cast<unsigned>(blocks), kBlockThreads, bytes, stream>>>(args...);
  STRATA_CUDA_LAUNCH_CHECK();
}

/// Calls f.template operator()<T>() with T the device type of q's dtype, which has_kernel accepted.
template <class F>
void visit_attention_dtype(const Tensor& q, const F& f) {
  visit_cuda_dtype(q.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || is_reduced_v<T>) f.template operator()<T>();
  });
}

/// Blocks of kRows rows covering `rows`.
int64_t tiles(int64_t rows) { return (rows + kRows - 1) / kRows; }

}  // namespace

bool CudaKernels::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                            const AttentionParams& params, const Tensor& out, const Tensor& logsumexp) const {
  check_one_device("attention", {&q, &k, &v, &out, &logsumexp});
  if (mask.defined()) check_one_device("attention", {&q, &mask});
  if (!has_kernel(q, v)) return false;
  const int device = q.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const int64_t N = q.size(0), L = q.size(1);
  const int E = static_cast<int>(q.size(2)), Ev = static_cast<int>(v.size(2));
  visit_attention_dtype(q, [&]<class T>() {
    const Problem<T> pb(q, k, v, mask, params);
    launch(attention_forward_kernel<T>, N * tiles(L), forward_shared_bytes(E, Ev), stream, pb, elements<T>(out),
           elements<float>(logsumexp), tiles(L));
  });
  return true;
}

bool CudaKernels::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                     const Tensor& out, const Tensor& logsumexp, const Tensor& grad_out,
                                     const AttentionParams& params, const Tensor& grad_q, const Tensor& grad_k,
                                     const Tensor& grad_v) const {
  check_one_device("attention_backward", {&q, &k, &v, &out, &logsumexp, &grad_out, &grad_q, &grad_k, &grad_v});
  if (mask.defined()) check_one_device("attention_backward", {&q, &mask});
  if (!has_kernel(q, v)) return false;
  const int device = q.device().index;
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  const int E = static_cast<int>(q.size(2)), Ev = static_cast<int>(v.size(2));
  // D is freed when this returns, after the kernels that read it were queued: the pool is stream-ordered.
  const Tensor d = empty({N, L}, TensorOptions(kFloat).device(q.device()));
  visit_attention_dtype(q, [&]<class T>() {
    const Problem<T> pb(q, k, v, mask, params);
    const float* lse = elements<float>(logsumexp);
    launch(row_dot_kernel<T>, (N * L + kWarps - 1) / kWarps, 0, stream, elements<T>(out), elements<T>(grad_out),
           elements<float>(d), N * L, Ev);
    launch(attention_backward_kv_kernel<T>, N * tiles(S), backward_shared_bytes(E, Ev), stream, pb,
           elements<T>(grad_out), lse, elements<float>(d), elements<T>(grad_k), elements<T>(grad_v), tiles(S));
    launch(attention_backward_q_kernel<T>, N * tiles(L), backward_shared_bytes(E, Ev), stream, pb,
           elements<T>(grad_out), lse, elements<float>(d), elements<T>(grad_q), tiles(L));
  });
  return true;
}

}  // namespace strata::cuda
