// CPU-versus-CUDA parity of the integer dtypes uint8, int8, int16 and int32: arithmetic that wraps,
// mixed-type promotion, true division, comparisons, bitwise ops, unary ops, where and clamp, reductions
// into Long, sort, gather and scatter_add (the 1- and 2-byte atomic adds), over contiguous, transposed
// and large inputs. Integers must match bit for bit (divisors are odd, so no 0 / 0 NaN).

#include <cstdint>

#include "parity.h"

using namespace strata;
using strata::testing::cuda_matches_cpu;
using strata::testing::indices;

namespace {

constexpr ScalarType kIntTypes[] = {kUInt8, kInt8, kInt16, kInt32};

/// Integers of dtype dt spanning its whole range (so sums and products wrap), from a private stream.
Tensor wide_ints(IntArrayRef sizes, ScalarType dt, uint64_t seed) {
  return (indices(sizes, int64_t{1} << 40, seed) - (int64_t{1} << 39)).to(dt);
}

/// Integers in [-1000, 1000] as dtype dt (the 8-bit types wrap), exact in float32 with their products.
Tensor moderate_ints(IntArrayRef sizes, ScalarType dt, uint64_t seed) {
  return (indices(sizes, 2001, seed) - 1000).to(dt);
}

/// Small integers in [-3, 3] as dtype dt (uint8 wraps the negatives), for exponents and divisors.
Tensor small_ints(IntArrayRef sizes, ScalarType dt, uint64_t seed) { return (indices(sizes, 7, seed) - 3).to(dt); }

}  // namespace

TEST(CudaIntDtypes, ArithmeticWrapsAsOnTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : kIntTypes) {
    SCOPED_TRACE(::testing::Message() << dt);
    const tensor_list in = {wide_ints({37, 45}, dt, 1), wide_ints({37, 45}, dt, 2)};
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          return tensor_list{x[0] + x[1],       x[0] - x[1],       x[0] * x[1],        x[0].t() + x[1].t(), x[0] + 100,
                             x[0] * 3,          x[0].sub(x[1], 5), x[0].neg(),         x[0].abs(),          x[0].relu(),
                             x[0] / (x[1] | 1), x[0] / 7,          x[0].maximum(x[1]), x[0].minimum(x[1])};
        },
        in));
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          return tensor_list{x[0].pow(x[1]), x[0].pow(3)};
        },
        {wide_ints({64}, dt, 3), small_ints({64}, dt, 4).abs()}));
    EXPECT_TRUE(cuda_matches_cpu(  // vectorised and grid-stride paths
        [](const tensor_list& x) {
          return tensor_list{x[0] + x[1], x[0] * x[1]};
        },
        {wide_ints({1 << 18}, dt, 5), wide_ints({1 << 18}, dt, 6)}));
  }
}

TEST(CudaIntDtypes, MixedTypesPromoteAsOnTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType a : kIntTypes)
    for (ScalarType b : {kUInt8, kInt8, kInt16, kInt32, kLong, kBool, kFloat, kDouble}) {
      SCOPED_TRACE(::testing::Message() << a << " with " << b);
      const Tensor y = b == kBool ? moderate_ints({5, 6}, kInt32, 8).gt(0) : moderate_ints({5, 6}, b, 8);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const tensor_list& x) {
            return tensor_list{x[0] + x[1], x[0] * x[1], x[0].lt(x[1]), x[0].eq(x[1]),
                               where(x[0].gt(x[1]), x[0], x[1])};
          },
          {moderate_ints({5, 6}, a, 7), y}));
    }
}

TEST(CudaIntDtypes, ConversionsMatchTheCpuBitForBit) {
  STRATA_REQUIRE_CUDA();
  // Floating values inside int64 range, out of every narrower type's range: they wrap on both devices.
  const Tensor floats = (strata::testing::normal({999}, kDouble, 9) * 1e6).to(kFloat);
  const Tensor halves = (strata::testing::normal({999}, kDouble, 9) * 1e4).to(kHalf);  // finite: under 65504
  for (ScalarType to : kIntTypes) {
    SCOPED_TRACE(::testing::Message() << to);
    EXPECT_TRUE(cuda_matches_cpu(
        [to](const tensor_list& x) {
          return tensor_list{x[0].to(to), x[1].to(to)};
        },
        {floats, halves}));
    for (ScalarType from : {kUInt8, kInt8, kInt16, kInt32, kLong, kBool})
      EXPECT_TRUE(cuda_matches_cpu(
          [to](const tensor_list& x) {
            return tensor_list{x[0].to(to), x[0].t().to(to)};
          },
          {from == kBool ? wide_ints({7, 9}, kInt32, 10).gt(0) : wide_ints({7, 9}, from, 10)}));
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          return tensor_list{x[0].to(kFloat), x[0].to(kHalf)};
        },
        {wide_ints({7, 9}, to, 11)}));
  }
}

TEST(CudaIntDtypes, BitwiseComparisonsAndFloatOps) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : kIntTypes) {
    SCOPED_TRACE(::testing::Message() << dt);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          return tensor_list{x[0] & x[1],       x[0] | x[1],        x[0] ^ x[1], ~x[0],
                             x[0] & 0x5A,       x[0].le(x[1]),      x[0].ne(7),  logical_and(x[0], x[1]),
                             logical_not(x[0]), x[0].clamp(-20, 90)};
        },
        {wide_ints({33, 17}, dt, 12), wide_ints({33, 17}, dt, 13)}));
    // Float ops compute in float32 on both devices.
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          return tensor_list{x[0].sqrt(), x[0].sigmoid()};
        },
        {small_ints({40}, dt, 14).abs()}));
  }
}

TEST(CudaIntDtypes, ReductionsSortAndIndexing) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : kIntTypes) {
    SCOPED_TRACE(::testing::Message() << dt);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          auto [values, idx] = x[0].sort(1);
          auto [top, top_idx] = x[0].topk(5, 0);
          return tensor_list{x[0].sum(),
                             x[0].sum({0}),
                             x[0].sum({1}, true),
                             x[0].max(),
                             x[0].min(),
                             x[0].argmax(),
                             amax(x[0], {1}),
                             values,
                             idx,
                             top,
                             top_idx,
                             x[1].prod(0)};
        },
        {wide_ints({67, 129}, dt, 15), small_ints({9, 4}, dt, 16)}));
    const Tensor index = indices({50, 8}, 4, 17);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const tensor_list& x) {
          // Many sums land on each of the 4 x 8 targets: the narrow atomic adds must not lose one.
          return tensor_list{x[0].gather(0, x[1]), x[2].scatter_add(0, x[1], x[0])};
        },
        {wide_ints({50, 8}, dt, 18), index, zeros({4, 8}, dt)}));
    EXPECT_TRUE(cuda_matches_cpu([](const tensor_list& x) { return tensor_list{x[0].index_select(0, x[1])}; },
                                 {wide_ints({6, 5}, dt, 19), tensor({5, 0, 5, 2}, kInt32)}));
  }
}
