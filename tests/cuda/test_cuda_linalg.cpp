// matmul, mm and bmm through cuBLAS against a float64 CPU reference of the same inputs: float32
// (normalized error < 1e-5), TF32 as an explicit opt-in (< 1e-3, and the flag restored), float64
// (< 1e-12), bfloat16 and float16 (< 1e-2 against the float64 product of the rounded inputs), over
// transposed, strided, broadcast-batched, 1-D and empty operands.

#include <cmath>

#include "parity.h"

using namespace strata;
using strata::testing::AllowTf32Guard;
using strata::testing::gpu;
using strata::testing::normal;
using strata::testing::normalized_error;
using strata::testing::poison_gpu_pool;
using strata::testing::same_tensor;

namespace {

using MatmulFn = std::function<Tensor(const Tensor&, const Tensor&)>;

/// One product: operand sizes (before the views) and the function taking the views and multiplying.
struct Product {
  const char* name;
  DimVector a, b;
  MatmulFn fn;
};
void PrintTo(const Product& p, std::ostream* os) { *os << p.name; }

const std::vector<Product> kProducts = {
    {"mm", {64, 96}, {96, 80}, [](const Tensor& a, const Tensor& b) { return mm(a, b); }},
    {"mm_odd_sizes", {33, 65}, {65, 17}, [](const Tensor& a, const Tensor& b) { return a.mm(b); }},
    {"mm_a_transposed", {96, 64}, {96, 80}, [](const Tensor& a, const Tensor& b) { return mm(a.t(), b); }},
    {"mm_b_transposed", {64, 96}, {80, 96}, [](const Tensor& a, const Tensor& b) { return mm(a, b.t()); }},
    {"mm_both_transposed", {96, 64}, {80, 96}, [](const Tensor& a, const Tensor& b) { return mm(a.t(), b.t()); }},
    {"mm_strided_columns",
     {64, 192},
     {96, 80},  // no unit stride in a: cuBLAS cannot take it as it is
     [](const Tensor& a, const Tensor& b) { return mm(a.slice(1, 0, 192, 2), b); }},
    {"mm_row_slice", {70, 96}, {96, 80}, [](const Tensor& a, const Tensor& b) { return mm(a.slice(0, 3, 67), b); }},
    {"mm_large", {512, 1024}, {1024, 768}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"bmm", {4, 32, 48}, {4, 48, 16}, [](const Tensor& a, const Tensor& b) { return bmm(a, b); }},
    {"bmm_transposed_batches",
     {4, 48, 32},
     {16, 48, 4},
     [](const Tensor& a, const Tensor& b) {
       return bmm(a.transpose(1, 2), b.permute({2, 1, 0}));
     }},
    {"matmul_broadcast_batch",
     {2, 1, 16, 24},
     {3, 24, 8},
     [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_expanded_batch",
     {16, 24},
     {5, 24, 8},
     [](const Tensor& a, const Tensor& b) {
       return matmul(a.expand({5, 16, 24}), b);
     }},
    {"matmul_vec_vec", {50}, {50}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_mat_vec", {30, 50}, {50}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_vec_mat", {50}, {50, 20}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_batch_vec", {3, 30, 50}, {50}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_empty_inner", {7, 0}, {0, 5}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_empty_rows", {0, 6}, {6, 5}, [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
    {"matmul_empty_batch", {0, 3, 6}, {0, 6, 5}, [](const Tensor& a, const Tensor& b) { return bmm(a, b); }},
};

/// fn on CUDA copies of a and b in dtype dt, and the float64 CPU reference of the same (rounded) values.
std::pair<Tensor, Tensor> run(const Product& p, ScalarType dt, uint64_t seed) {
  const Tensor a = normal(p.a, kFloat, seed).to(dt), b = normal(p.b, kFloat, seed + 1).to(dt);
  poison_gpu_pool();
  Tensor out = p.fn(a.cuda(), b.cuda());
  return {out, p.fn(a.to(kDouble), b.to(kDouble))};
}

class CudaMatmul : public ::testing::TestWithParam<Product> {};

TEST_P(CudaMatmul, Float32) {
  STRATA_REQUIRE_CUDA();
  AllowTf32Guard exact(false);
  auto [out, ref] = run(GetParam(), kFloat, 1);
  EXPECT_EQ(out.dtype(), kFloat);
  EXPECT_EQ(out.sizes(), ref.sizes());
  EXPECT_TRUE(out.is_cuda());
  EXPECT_LT(normalized_error(out, ref), 1e-5);
}

TEST_P(CudaMatmul, Tf32WhenAllowed) {
  STRATA_REQUIRE_CUDA();
  AllowTf32Guard tf32(true);
  auto [out, ref] = run(GetParam(), kFloat, 2);
  EXPECT_EQ(out.dtype(), kFloat);
  EXPECT_LT(normalized_error(out, ref), 1e-3);
}

TEST_P(CudaMatmul, Float64) {
  STRATA_REQUIRE_CUDA();
  auto [out, ref] = run(GetParam(), kDouble, 3);
  EXPECT_EQ(out.dtype(), kDouble);
  EXPECT_LT(normalized_error(out, ref), 1e-12);
}

TEST_P(CudaMatmul, BFloat16AndFloat16AccumulateInFloat32) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kBFloat16, kHalf}) {
    auto [out, ref] = run(GetParam(), dt, 4);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_EQ(out.sizes(), ref.sizes());
    // Only the output's rounding (2^-9 for bfloat16, 2^-12 for float16) and float32 sums remain.
    EXPECT_LT(normalized_error(out, ref), 1e-2) << dt;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMatmul, ::testing::ValuesIn(kProducts),
                         [](const ::testing::TestParamInfo<Product>& info) { return std::string(info.param.name); });

TEST(CudaLinalg, Tf32IsOffByDefaultAndTheFlagRoundTrips) {
  STRATA_REQUIRE_CUDA();
  EXPECT_FALSE(cuda::allow_tf32()) << "TF32 must be an explicit opt-in, as torch.backends.cuda.matmul.allow_tf32";
  {
    AllowTf32Guard on(true);
    EXPECT_TRUE(cuda::allow_tf32());
  }
  EXPECT_FALSE(cuda::allow_tf32());
}

TEST(CudaLinalg, Tf32ChangesALargeProductAndFloat32DoesNot) {
  STRATA_REQUIRE_CUDA();
  const Tensor a = normal({1024, 1024}, kFloat, 7).cuda(), b = normal({1024, 1024}, kFloat, 8).cuda();
  const Tensor ref = matmul(a.cpu().to(kDouble), b.cpu().to(kDouble));
  Tensor exact, fast;
  {
    AllowTf32Guard off(false);
    exact = matmul(a, b);
  }
  {
    AllowTf32Guard on(true);
    fast = matmul(a, b);
  }
  const double exact_error = normalized_error(exact, ref), fast_error = normalized_error(fast, ref);
  EXPECT_LT(exact_error, 1e-5);
  EXPECT_LT(fast_error, 1e-3);
  // TF32 keeps 10 mantissa bits: about 3e-4 here (METHOD.md), far above float32's 1e-7.
  EXPECT_GT(fast_error, 1e-5) << "set_allow_tf32(true) did not reach cuBLAS";
  EXPECT_FALSE(same_tensor(exact.cpu(), fast.cpu()));
}

TEST(CudaLinalg, ReducedPrecisionProductOfLargeSquares) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kBFloat16, kHalf}) {
    const Tensor a = normal({1024, 2048}, kFloat, 9).to(dt), b = normal({2048, 512}, kFloat, 10).to(dt);
    const Tensor out = matmul(a.cuda(), b.cuda());
    const double err = normalized_error(out, matmul(a.to(kDouble), b.to(kDouble)));
    EXPECT_LT(err, 1e-2) << dt;
    // Accumulating in 16 bits over k = 2048 would land near 1e-2 or worse; float32 accumulation stays
    // at the output rounding.
    EXPECT_LT(err, dt == kBFloat16 ? 5e-3 : 1e-3) << dt;
  }
}

TEST(CudaLinalg, MismatchedOperandsThrow) {
  STRATA_REQUIRE_CUDA();
  const Tensor a = normal({3, 4}).cuda();
  EXPECT_THROW(mm(a, normal({5, 2}).cuda()), Error);
  EXPECT_THROW(bmm(a, a), Error);
  EXPECT_THROW_MSG(matmul(a, normal({4, 2})), "cpu");
}

}  // namespace
