// CPU kernel: batched matrix product through Eigen's GEMM.

#include "strata/tensor/cpu/eigen.h"

#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/creation.h"

namespace strata::cpu {

namespace {

// Below this many multiply-adds per matrix, batches run one per thread instead of Eigen
// threading each product.
constexpr int64_t kSmallGemm = int64_t(1) << 21;

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

template <class T>
void matmul_typed(const Tensor& a, const Tensor& c, const Tensor& out, const Kernels& kernels) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  BatchOperand<T> pa = prepare<T>(a, kernels), pc = prepare<T>(c, kernels);
  T* o = static_cast<T*>(out.data_ptr());
  const int64_t work = M * N * K;
  // Small products: one batch per thread (Eigen then runs single-threaded inside the region).
  const bool batch_parallel = B > 1 && use_threads(B * work) && (work < kSmallGemm || B >= 4 * omp_get_max_threads());
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

void CpuKernels::matmul(const Tensor& a, const Tensor& c, const Tensor& out) const {
  check_matmul_operands(a, c, out);
  if (out.numel() == 0) return;
  if (a.size(2) == 0) return fill(out, 0);
  STRATA_CHECK(!is_reduced_floating_point(out.dtype()), "matmul does not support ", out.dtype(),
               " on the CPU: compute on CUDA or convert with .to(kFloat) first");
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) return matmul_typed<T>(a, c, out, *this);
    STRATA_CHECK(false, "matmul does not support ", out.dtype());
  });
}

}  // namespace strata::cpu
