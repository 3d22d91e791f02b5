// CUDA kernel: batched matrix product through cuBLAS (cublasGemmStridedBatchedEx), on the
// device's current stream. float32 accumulates in float32 (TensorFloat-32 only after
// cuda::set_allow_tf32(true)), float64 in float64, float16 and bfloat16 in float32.
//
// Note [row-major GEMM]: cuBLAS is column-major. The row-major [M, N] out is, read column-major,
// the [N, M] matrix out^T, and out^T = c^T a^T, so cuBLAS computes m = N, n = M, k = K with c as
// its first operand and a as its second. An operand's row-major [rows, cols] slice with unit
// column stride, read column-major with ld = its row stride, is exactly the transpose the trick
// needs (CUBLAS_OP_N); one with unit row stride, read with ld = its column stride, is the slice
// itself, which cuBLAS transposes (CUBLAS_OP_T). Any other layout is copied to contiguous first.

#include <climits>

#include "strata/tensor/creation.h"
#include "strata/tensor/cuda.h"
#include "strata/tensor/cuda/cuda_kernels.h"
#include "strata/tensor/iteration.h"

namespace strata::cuda {

namespace {

/// One 3-D operand as cuBLAS reads it (Note [row-major GEMM]).
struct GemmOperand {
  Tensor holder;  // keeps a contiguous copy alive when the strides did not map
  const void* data;
  cublasOperation_t op;
  int64_t ld;            // elements between the starts of consecutive cuBLAS columns
  int64_t batch_stride;  // elements between batches; 0 for a broadcast batch dim
};

GemmOperand prepare(const Tensor& t, const Kernels& kernels) {
  const int64_t rows = t.size(1), cols = t.size(2), rs = t.stride(1), cs = t.stride(2);
  // A size-1 dim's stride is irrelevant: pick whatever makes the slice dense in that direction.
  if (cols == 1 || cs == 1) {
    const int64_t ld = rows == 1 ? cols : rs;
    if (ld >= cols) return {Tensor(), t.data_ptr(), CUBLAS_OP_N, ld, t.stride(0)};
  }
  if (rows == 1 || rs == 1) {
    const int64_t ld = cols == 1 ? rows : cs;
    if (ld >= rows) return {Tensor(), t.data_ptr(), CUBLAS_OP_T, ld, t.stride(0)};
  }
  // Copy to contiguous, keeping a broadcast (stride-0) batch dim unexpanded.
  const int64_t batches = t.stride(0) == 0 ? 1 : t.size(0);
  Tensor src = make_view(t, {batches, rows, cols}, t.strides(), t.storage_offset());
  Tensor dense = empty({batches, rows, cols}, t.options());
  kernels.copy(src, dense);
  return {dense, dense.data_ptr(), CUBLAS_OP_N, cols, batches == 1 ? 0 : rows * cols};
}

/// cuBLAS's element type of a dtype and the compute type strata uses for it.
struct GemmTypes {
  cudaDataType data;
  cublasComputeType_t compute;
};

GemmTypes gemm_types(ScalarType t) {
  switch (t) {
    case kFloat:
      return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case kDouble:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case kHalf:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case kBFloat16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default:
      break;
  }
  STRATA_CHECK(false, "matmul: CUDA supports float32, float64, float16 and bfloat16, got ", t);
}

}  // namespace

void CudaKernels::matmul(const Tensor& a, const Tensor& c, const Tensor& out) const {
  check_matmul_operands(a, c, out);
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const GemmTypes types = gemm_types(out.dtype());
  if (out.numel() == 0) return;
  if (K == 0) return fill(out, 0);

  const int d = out.device().index;
  DeviceGuard guard(d);
  const cublasHandle_t handle = cublas_handle(d);
  const GemmOperand pa = prepare(a, *this), pc = prepare(c, *this);
  for (int64_t v : {B, M, N, K, pa.ld, pc.ld})
    STRATA_CHECK(v <= INT_MAX, "matmul: cuBLAS takes sizes below 2^31, got shapes ", a.sizes(), " and ", c.sizes());
  // alpha and beta have the compute type's precision: double for 64F, float otherwise.
  const double alpha64 = 1, beta64 = 0;
  const float alpha32 = 1, beta32 = 0;
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, pc.op, pa.op, i(N), i(M), i(K), f64 ? static_cast<const void*>(&alpha64) : &alpha32,  //
      pc.data, types.data, i(pc.ld), pc.batch_stride,                                               //
      pa.data, types.data, i(pa.ld), pa.batch_stride,                                               //
      f64 ? static_cast<const void*>(&beta64) : &beta32,                                            //
      out.data_ptr(), types.data, i(N), M * N, i(B), types.compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace strata::cuda
