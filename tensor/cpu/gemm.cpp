// CPU kernel: batched matrix product through oneDNN's sgemm (float32) or Eigen's GEMM (the rest).

#include "strata/tensor/cpu/eigen.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/dispatch_log.h"

namespace strata::cpu {

namespace {

// Below this many multiply-adds per matrix, batches run one per thread instead of the GEMM
// threading each product.
constexpr int64_t kSmallGemm = int64_t(1) << 21;

// Note [GEMM backend]: float32 products go to oneDNN's sgemm, which took 0.4 to 0.8 of Eigen's time at char_gpt's
// and the transformer block's shapes on an AMD EPYC (AVX2), close to MKL's speed, at 1 and 2 threads. Two kinds
// stay with Eigen, measured on that CPU:
// - products under 2^15 multiply-adds, where oneDNN's per-call set-up costs more than it saves (16^3: 1.1 to 1.5
//   times Eigen's time, 8^3: 3 times);
// - a long inner dim (K > M, N) into an output of 2^16 elements or more: the weight gradients X^T G over a batch of
//   2048 rows (256 x 2048 x 1024: 1.4 to 1.7 times Eigen's time, whether X^T is read transposed or copied, or K is
//   cut into chunks). With a smaller output oneDNN is ahead again (128 x 2048 x 128: 0.65 to 0.85).
// float64 and the integer types stay with Eigen: oneDNN has no GEMM for them. `last_dispatch("matmul")` names the
// backend a product took.
bool onednn_is_faster(int64_t m, int64_t n, int64_t k) {
  return m * n * k >= (int64_t(1) << 15) && !(k > std::max(m, n) && m * n >= (int64_t(1) << 16));
}

/// How a rows x cols slice with element strides (rs, cs) maps onto an Eigen matrix without copying.
struct MatrixLayout {
  bool mappable = false;
  bool row_major = false;
  int64_t outer_stride = 0;
};

MatrixLayout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  // A size-1 dim's stride is irrelevant: pick whatever makes the slice dense in that direction.
  if (cols == 1 ? true : cs == 1) {
    const int64_t outer = rows == 1 ? cols : rs;
    if (outer >= cols) return {true, true, outer};
  }
  if (rows == 1 ? true : rs == 1) {
    const int64_t outer = cols == 1 ? rows : cs;
    if (outer >= rows) return {true, false, outer};
  }
  return {};
}

template <class T, int kOrder>
using MatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, kOrder>, 0, Eigen::OuterStride<>>;
template <class T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

/// One 3-D operand: its data, batch stride and the Eigen layout of every [rows, cols] slice.
template <class T>
struct BatchOperand {
  Tensor holder;  // keeps a contiguous copy alive when the strides were not mappable
  const T* data;
  int64_t batch_stride;
  MatrixLayout layout;
};

template <class T>
BatchOperand<T> prepare(const Tensor& t, const Kernels& kernels) {
  const int64_t rows = t.size(1), cols = t.size(2);
  MatrixLayout layout = layout_of(rows, cols, t.stride(1), t.stride(2));
  if (layout.mappable) return {Tensor(), static_cast<const T*>(t.data_ptr()), t.stride(0), layout};
  // Copy to contiguous, keeping a broadcast (stride-0) batch dim unexpanded.
  const int64_t batches = t.stride(0) == 0 ? 1 : t.size(0);
  Tensor src = make_view(t, {batches, rows, cols}, t.strides(), t.storage_offset());
  Tensor dense = empty({batches, rows, cols}, t.options());
  kernels.copy(src, dense);
  return {dense, static_cast<const T*>(dense.data_ptr()), batches == 1 ? 0 : rows * cols, {true, true, cols}};
}

template <class T, int kOrderA, int kOrderC>
void gemm_batches(const BatchOperand<T>& a, const BatchOperand<T>& c, T* out, int64_t B, int64_t M, int64_t K,
                  int64_t N, bool batch_parallel) {
  auto one = [&](int64_t b) {
    MatrixMap<T, kOrderA> ma(a.data + b * a.batch_stride, M, K, Eigen::OuterStride<>(a.layout.outer_stride));
    MatrixMap<T, kOrderC> mc(c.data + b * c.batch_stride, K, N, Eigen::OuterStride<>(c.layout.outer_stride));
    OutMap<T> mo(out + b * M * N, M, N);
    mo.noalias() = ma * mc;
  };
  parallel_for(B, batch_parallel, one);
}

void dnnl_batches(const BatchOperand<float>& a, const BatchOperand<float>& c, float* out, int64_t B, int64_t M,
                  int64_t K, int64_t N, bool batch_parallel) {
  const bool ta = !a.layout.row_major, tc = !c.layout.row_major;
  std::atomic<bool> refused{false};  // an exception must not leave an OpenMP region
  parallel_for(B, batch_parallel, [&](int64_t b) {
    if (!gemm(ta, tc, M, N, K, 1.0f, a.data + b * a.batch_stride, a.layout.outer_stride, c.data + b * c.batch_stride,
              c.layout.outer_stride, 0.0f, out + b * M * N, N))
      refused.store(true);
  });
  STRATA_CHECK(!refused.load(), "matmul: oneDNN's sgemm refused a [", M, ", ", K, "] by [", K, ", ", N, "] product (",
               ta ? "T" : "N", tc ? "T" : "N", ", leading dims ", a.layout.outer_stride, " and ", c.layout.outer_stride,
               ")");
}

template <class T>
void matmul_typed(const Tensor& a, const Tensor& c, const Tensor& out, const Kernels& kernels) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  BatchOperand<T> pa = prepare<T>(a, kernels), pc = prepare<T>(c, kernels);
  T* o = static_cast<T*>(out.data_ptr());
  const int64_t work = M * N * K;
  // Small products: one batch per thread (the GEMM then runs single-threaded inside the region).
  const bool batch_parallel = B > 1 && use_threads(B * work) && (work < kSmallGemm || B >= 4 * omp_get_max_threads());
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_is_faster(M, N, K)) {
      log_dispatch("matmul", "onednn sgemm (Float)");
      return dnnl_batches(pa, pc, o, B, M, K, N, batch_parallel);
    }
  }
  log_dispatch("matmul", "eigen gemm");
  const bool ra = pa.layout.row_major, rc = pc.layout.row_major;
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (ra && rc)
    gemm_batches<T, R, R>(pa, pc, o, B, M, K, N, batch_parallel);
  else if (ra)
    gemm_batches<T, R, C>(pa, pc, o, B, M, K, N, batch_parallel);
  else if (rc)
    gemm_batches<T, C, R>(pa, pc, o, B, M, K, N, batch_parallel);
  else
    gemm_batches<T, C, C>(pa, pc, o, B, M, K, N, batch_parallel);
}

}  // namespace

template <class T>
bool gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  // dnnl_sgemm reads row-major operands with a leading dimension; a transposed one is read as such ('T').
  if constexpr (std::is_same_v<T, float>)
    if (onednn_is_faster(m, n, k))
      return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
             dnnl_success;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Stride> out(c, m, n, Stride(ldc));
  auto product = [&](const auto& x, const auto& y) {
    if (beta == T(0)) {
      out.noalias() = alpha * x * y;
      return;
    }
    if (beta != T(1)) out *= beta;
    out.noalias() += alpha * x * y;
  };
  const MatrixMap<T, Eigen::RowMajor> ma(a, trans_a ? k : m, trans_a ? m : k, Stride(lda)),
      mb(b, trans_b ? n : k, trans_b ? k : n, Stride(ldb));
  if (trans_a && trans_b)
    product(ma.transpose(), mb.transpose());
  else if (trans_a)
    product(ma.transpose(), mb);
  else if (trans_b)
    product(ma, mb.transpose());
  else
    product(ma, mb);
  return true;
}
template bool gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template bool gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);

void CpuKernels::matmul(const Tensor& a, const Tensor& c, const Tensor& out) const {
  check_matmul_operands(a, c, out);
  if (out.numel() == 0) return;
  if (a.size(2) == 0) return fill(out, 0);
  if (in_float32(*this, {&a, &c}, {&out}, [&](const tensor_list& t) { matmul(t[0], t[1], t[2]); })) return;
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) return matmul_typed<T>(a, c, out, *this);
    STRATA_CHECK(false, "matmul does not support ", out.dtype());
  });
}

}  // namespace strata::cpu
