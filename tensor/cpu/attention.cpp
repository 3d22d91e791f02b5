// CPU kernels: fused attention, forward and backward (FlashAttention-2's schedule on the CPU).
//
// Note [CPU flash attention]: the composite builds the scores [N, L, S], softmaxes them and
// multiplies again, so memory grows as L * S. Here a task takes one slice n and a block of kQBlock
// query rows and walks the keys kKBlock at a time: scores of one block pair [kQBlock, kKBlock] live in
// a thread's scratch, and an online softmax keeps each row's running maximum m and denominator l,
// rescaling the output accumulator by exp(m_old - m_new) when the maximum grows. What is stored for
// backward is the output and each row's logsumexp, m + log(l), so backward recomputes the weights
// P = exp(s - logsumexp) block by block instead of keeping them (Note [attention backward]). Dropout
// draws each weight's keep bit from the counter-based stream by its (n, i, j), so backward and the
// composite draw the same bits without storing a mask. Products over the blocks go through gemm()
// (oneDNN's sgemm for float32, Eigen's for float64); the exponentials run vectorised through Eigen's arrays.

#include "strata/tensor/cpu/eigen.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/random_stream.h"

namespace strata::cpu {

namespace {

// Query rows and keys per block: a [64, 128] score block and its gradient stay in L2 beside the q, k and v
// blocks for head dims up to 256, and 128-wide rows keep the exponentials vectorised. Backward sweeps a slice's
// k, v and their gradients once per query block, so it takes 128 rows: at T 4096 on 2 threads that was 10% faster
// than 64 (and 256 spilled its three score-sized blocks out of a 512 KiB L2, 15% slower on one thread).
constexpr int64_t kQBlock = 64;
constexpr int64_t kKBlock = 128;
constexpr int64_t kQBlockBackward = 128;

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstRows = Eigen::Map<const Matrix<T>>;
template <class T>
using Rows = Eigen::Map<Matrix<T>>;

/// The operands of one call as raw pointers, and the block walk they share.
template <class T>
struct Problem {
  int64_t N, L, S, E, Ev;
  const T* q;
  const T* k;
  const T* v;
  const T* mask;  // null, or element (n, i, j) at n * mask_strides[0] + i * [1] + j * [2]
  int64_t mask_strides[3];
  AttentionParams params;
  T keep_scale;  // what a kept weight is multiplied by under dropout

  explicit Problem(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& maskt, const AttentionParams& p)
      : N(qt.size(0)),
        L(qt.size(1)),
        S(kt.size(1)),
        E(qt.size(2)),
        Ev(vt.size(2)),
        q(static_cast<const T*>(qt.data_ptr())),
        k(static_cast<const T*>(kt.data_ptr())),
        v(static_cast<const T*>(vt.data_ptr())),
        mask(maskt.defined() ? static_cast<const T*>(maskt.data_ptr()) : nullptr),
        mask_strides{maskt.defined() ? maskt.stride(0) : 0, maskt.defined() ? maskt.stride(1) : 0,
                     maskt.defined() ? maskt.stride(2) : 0},
        params(p),
        keep_scale(p.dropout_p < 1 ? static_cast<T>(1.0 / (1.0 - p.dropout_p)) : T(0)) {}

  int64_t q_blocks() const { return (L + kQBlock - 1) / kQBlock; }
  /// Keys past this one are all in the future of rows [i0, i0 + rows) when causal.
  int64_t key_end(int64_t i0, int64_t rows) const { return params.causal ? std::min(S, i0 + rows) : S; }

  /// scores = q[n, i0:i0+rows] k[n, j0:j0+cols]^T * scale + mask, -inf above the causal diagonal.
  void scores(int64_t n, int64_t i0, int64_t rows, int64_t j0, int64_t cols, Matrix<T>& s,
              std::atomic<bool>& refused) const {
    s.resize(rows, cols);
    if (!gemm(false, true, rows, cols, E, T(1), q + (n * L + i0) * E, E, k + (n * S + j0) * E, E, T(0), s.data(), cols))
      refused = true;
    s *= static_cast<T>(params.scale);
    if (mask) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* m = mask + n * mask_strides[0] + (i0 + r) * mask_strides[1] + j0 * mask_strides[2];
        if (mask_strides[2] == 1) {
          s.row(r).array() += Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(m, cols);
        } else {
          for (int64_t c = 0; c < cols; ++c) s(r, c) += m[c * mask_strides[2]];
        }
      }
    }
    if (params.causal && j0 + cols - 1 > i0) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < cols; ++c)
          s(r, c) = -std::numeric_limits<T>::infinity();
    }
  }

  /// z [rows, cols] = each weight's dropout factor: keep_scale where kept, 0 where dropped.
  void dropout_factors(int64_t n, int64_t i0, int64_t rows, int64_t j0, int64_t cols, Matrix<T>& z) const {
    constexpr int kBits = std::is_same_v<T, double> ? 53 : 24;
    const random_stream::Stream bits(params.seed, 0);
    const T p_drop = static_cast<T>(params.dropout_p), unit = std::ldexp(T(1), -kBits);
    z.resize(rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t c0 = params.offset + static_cast<uint64_t>((n * L + i0 + r) * S + j0);
      for (int64_t c = 0; c < cols; ++c) {
        const T u = static_cast<T>(bits(c0 + c) >> (64 - kBits)) * unit;  // exact: uniform()'s value
        z(r, c) = u >= p_drop ? keep_scale : T(0);
      }
    }
  }
  bool dropout() const { return params.dropout_p > 0; }
};

/// After an OpenMP region: an error if gemm() refused one of its products (no exception may leave the region).
void check_products(const std::atomic<bool>& refused, const char* pass) {
  STRATA_CHECK(!refused.load(), "scaled_dot_product_attention: oneDNN's sgemm refused a block product of the fused ",
               pass);
}

template <class T>
void forward(const Problem<T>& pb, T* out, T* lse_out) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t tasks = pb.N * pb.q_blocks();
  std::atomic<bool> refused{false};
#pragma omp parallel if (use_threads(pb.N * pb.L * pb.S * (pb.E + pb.Ev)))
  {
    Matrix<T> s, z, acc;
    Eigen::Array<T, Eigen::Dynamic, 1> m, l;
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t n = task / pb.q_blocks(), i0 = (task % pb.q_blocks()) * kQBlock;
      const int64_t rows = std::min(kQBlock, pb.L - i0);
      acc.setZero(rows, pb.Ev);
      m.setConstant(rows, kNegInf);
      l.setZero(rows);
      for (int64_t j0 = 0; j0 < pb.key_end(i0, rows); j0 += kKBlock) {
        const int64_t cols = std::min(kKBlock, pb.S - j0);
        pb.scores(n, i0, rows, j0, cols, s, refused);
        for (int64_t r = 0; r < rows; ++r) {
          const T m_new = std::max(m(r), s.row(r).maxCoeff());
          if (m_new == kNegInf) {  // nothing seen yet: exp(-inf - -inf) would be NaN
            s.row(r).setZero();
            continue;
          }
          const T alpha = std::exp(m(r) - m_new);
          s.row(r).array() = exp_or_zero(s.row(r).array() - m_new);
          l(r) = l(r) * alpha + s.row(r).sum();
          acc.row(r) *= alpha;
          m(r) = m_new;
        }
        if (pb.dropout()) {
          pb.dropout_factors(n, i0, rows, j0, cols, z);
          s.array() *= z.array();
        }
        if (!gemm(false, false, rows, pb.Ev, cols, T(1), s.data(), cols, pb.v + (n * pb.S + j0) * pb.Ev, pb.Ev, T(1),
                  acc.data(), pb.Ev))
          refused = true;
      }
      Rows<T> o(out + (n * pb.L + i0) * pb.Ev, rows, pb.Ev);
      for (int64_t r = 0; r < rows; ++r) {
        if (l(r) > 0) {
          o.row(r) = acc.row(r) / l(r);
          lse_out[n * pb.L + i0 + r] = m(r) + std::log(l(r));
        } else {  // the row saw no key
          o.row(r).setZero();
          lse_out[n * pb.L + i0 + r] = kNegInf;
        }
      }
    }
  }
  check_products(refused, "forward");
}

// Note [attention backward]: with P the weights (recomputed from logsumexp), Z the dropout factors
// (1 without dropout) and D_i = sum_c dO[i, c] O[i, c] (which equals sum_j P_ij Z_ij dPZ_ij, the softmax
// backward's row term):
//   dV = (P Z)^T dO,   dP = (dO V^T) Z,   dS = P (dP - D) scale,   dQ = dS K,   dK = dS^T Q.
// dK and dV sum over every query block, so a task owns a whole slice n: no two threads write one row.
template <class T>
void backward(const Problem<T>& pb, const T* out, const T* lse, const T* grad_out, T* grad_q, T* grad_k, T* grad_v) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = static_cast<T>(pb.params.scale);
  std::atomic<bool> refused{false};
  // row-major [rows, cols] blocks with leading dim ld: c (+)= op(a) op(b)
  auto product = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                     int64_t ldb, bool accumulate, T* c, int64_t ldc) {
    if (!gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc)) refused = true;
  };
#pragma omp parallel if (use_threads(pb.N * pb.L * pb.S * (pb.E + pb.Ev)))
  {
    Matrix<T> s, z, pz, dp, dq;
    Eigen::Array<T, Eigen::Dynamic, 1> d;
#pragma omp for schedule(dynamic)
    for (int64_t n = 0; n < pb.N; ++n) {
      Rows<T> gk(grad_k + n * pb.S * pb.E, pb.S, pb.E), gv(grad_v + n * pb.S * pb.Ev, pb.S, pb.Ev);
      gk.setZero();
      gv.setZero();
      for (int64_t i0 = 0; i0 < pb.L; i0 += kQBlockBackward) {
        const int64_t rows = std::min(kQBlockBackward, pb.L - i0);
        ConstRows<T> qb(pb.q + (n * pb.L + i0) * pb.E, rows, pb.E);
        ConstRows<T> ob(out + (n * pb.L + i0) * pb.Ev, rows, pb.Ev),
            gob(grad_out + (n * pb.L + i0) * pb.Ev, rows, pb.Ev);
        const T* lse_rows = lse + n * pb.L + i0;
        d = (ob.array() * gob.array()).rowwise().sum();
        dq.setZero(rows, pb.E);
        for (int64_t j0 = 0; j0 < pb.key_end(i0, rows); j0 += kKBlock) {
          const int64_t cols = std::min(kKBlock, pb.S - j0);
          const T* kb = pb.k + (n * pb.S + j0) * pb.E;
          const T* vb = pb.v + (n * pb.S + j0) * pb.Ev;
          T* gkb = grad_k + (n * pb.S + j0) * pb.E;
          T* gvb = grad_v + (n * pb.S + j0) * pb.Ev;
          pb.scores(n, i0, rows, j0, cols, s, refused);
          for (int64_t r = 0; r < rows; ++r) {
            if (lse_rows[r] == kNegInf)  // a row that saw no key has weights 0, not exp(-inf - -inf)
              s.row(r).setZero();
            else
              s.row(r).array() = exp_or_zero(s.row(r).array() - lse_rows[r]);
          }
          // s holds P from here on.
          dp.resize(rows, cols);
          product(false, true, rows, cols, pb.Ev, gob.data(), pb.Ev, vb, pb.Ev, false, dp.data(), cols);
          if (pb.dropout()) {
            pb.dropout_factors(n, i0, rows, j0, cols, z);
            pz = s.array() * z.array();
            dp.array() *= z.array();
            product(true, false, cols, pb.Ev, rows, pz.data(), cols, gob.data(), pb.Ev, true, gvb, pb.Ev);
          } else {
            product(true, false, cols, pb.Ev, rows, s.data(), cols, gob.data(), pb.Ev, true, gvb, pb.Ev);
          }
          dp.array() = s.array() * (dp.array().colwise() - d) * scale;
          product(false, false, rows, pb.E, cols, dp.data(), cols, kb, pb.E, true, dq.data(), pb.E);
          product(true, false, cols, pb.E, rows, dp.data(), cols, qb.data(), pb.E, true, gkb, pb.E);
        }
        Rows<T>(grad_q + (n * pb.L + i0) * pb.E, rows, pb.E) = dq;
      }
    }
  }
  check_products(refused, "backward");
}

/// The dtypes the CPU's fused attention computes in.
bool has_kernel(const Tensor& q) { return q.dtype() == kFloat || q.dtype() == kDouble; }

}  // namespace

bool CpuKernels::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           const AttentionParams& params, const Tensor& out, const Tensor& logsumexp) const {
  bool ran = false;
  if (in_float32(*this, {&q, &k, &v, &mask}, {&out, &logsumexp},
                 [&](const tensor_list& t) { ran = attention(t[0], t[1], t[2], t[3], params, t[4], t[5]); }))
    return ran;
  if (!has_kernel(q)) return false;
  visit_dtype(q.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      forward(Problem<T>(q, k, v, mask, params), static_cast<T*>(out.data_ptr()),
              static_cast<T*>(logsumexp.data_ptr()));
  });
  return true;
}

bool CpuKernels::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    const Tensor& out, const Tensor& logsumexp, const Tensor& grad_out,
                                    const AttentionParams& params, const Tensor& grad_q, const Tensor& grad_k,
                                    const Tensor& grad_v) const {
  bool ran = false;
  if (in_float32(*this, {&q, &k, &v, &mask, &out, &logsumexp, &grad_out}, {&grad_q, &grad_k, &grad_v},
                 [&](const tensor_list& t) {
                   ran = attention_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], params, t[7], t[8], t[9]);
                 }))
    return ran;
  if (!has_kernel(q)) return false;
  visit_dtype(q.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      backward(Problem<T>(q, k, v, mask, params), static_cast<const T*>(out.data_ptr()),
               static_cast<const T*>(logsumexp.data_ptr()), static_cast<const T*>(grad_out.data_ptr()),
               static_cast<T*>(grad_q.data_ptr()), static_cast<T*>(grad_k.data_ptr()),
               static_cast<T*>(grad_v.data_ptr()));
  });
  return true;
}

}  // namespace strata::cpu
