// Fused scaled-dot-product attention on CUDA (tensor/cuda/attention.cu) against the CPU: the output and the
// gradients of query, key and value without a mask, causal with L != S, with broadcast bool and float masks, with
// rows that see no key, with dropout, in the 16-bit floats, at head dims up to the kernels' 256 (and past it, where
// the composite takes over), and at L = S = 1024, where the scores [N, L, S] must never be held. Every test skips
// without a GPU.
//
// Tolerances (normalized_error, an L2 norm relative to the reference's). The reference is the CPU in float64
// rounded to float32, so only the GPU's float32 rounding counts: dot products over E and sums over up to 1024 keys
// or queries, whose errors grow as the square root of their terms, land near 1e-6. Outputs get parity_tolerance's
// 1e-5; gradients, which sum the recomputed weights once more over every query and difference dP - D, 3e-5. A
// wrong mask element, tile edge or dropout bit moves a weight by about 1/S, 1e-3 of the output or more.

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <strata/tensor/cuda.h>
#include <strata/tensor/dispatch_log.h>

#include "parity.h"

namespace strata {
namespace {

using testing::matches;
using testing::normal;

constexpr double kOutputTol = 1e-5;
constexpr double kGradTol = 3e-5;

/// scaled_dot_product_attention's options that the tests vary.
struct Options {
  double dropout_p = 0;
  bool causal = false;
  bool enable_gqa = false;
  bool mask_transposed = false;  ///< the mask is given [..., S, L] and attention sees its transpose, a strided view
};

/// {query [B, H, L, E], key and value [B, Hkv, S, E or Ev], a weight [B, H, L, Ev] for the loss, mask}, standard
/// normal; Hkv = H unless given (enable_gqa).
tensor_list inputs(int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, int64_t Ev, const Tensor& mask = {},
                   int64_t Hkv = -1) {
  if (Hkv < 0) Hkv = H;
  return {normal({B, H, L, E}, kDouble, 11), normal({B, Hkv, S, E}, kDouble, 12), normal({B, Hkv, S, Ev}, kDouble, 13),
          normal({B, H, L, Ev}, kDouble, 14), mask};
}

/// in's floating tensors converted to dt (a bool mask, and an undefined one, as they are).
tensor_list to_dtype(const tensor_list& in, ScalarType dt) {
  tensor_list out;
  for (const Tensor& t : in) out.push_back(!t.defined() || t.dtype() == kBool ? t : t.to(dt));
  return out;
}

/// Attention over `in` (see inputs): its output, then the gradients of sum(out * weight) for query, key and value.
tensor_list attention_and_grads(const tensor_list& in, const Options& o = {}) {
  const Tensor q = in[0].detach().requires_grad_(true), k = in[1].detach().requires_grad_(true),
               v = in[2].detach().requires_grad_(true);
  std::optional<Tensor> mask;
  if (in[4].defined()) mask = o.mask_transposed ? in[4].transpose(-2, -1) : in[4];
  const Tensor out = scaled_dot_product_attention(q, k, v, mask, o.dropout_p, o.causal, std::nullopt, o.enable_gqa);
  tensor_list result{out};
  for (const Tensor& g : autograd::grad({(out * in[3]).sum()}, {q, k, v})) result.push_back(g);
  return result;
}

/// Whether the last call took the fused CUDA kernel (tensor/dispatch_log.h), so that a kernel that refuses its
/// operands cannot pass as the composite.
::testing::AssertionResult ran_fused_cuda_kernel() {
  const std::string path = last_dispatch("scaled_dot_product_attention");
  if (path.rfind("fused cuda", 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the last attention took \"" << path << "\"";
}

/// Attention on the GPU against the CPU with reference dtype ref_dt (float64 unless both must draw dropout's bits
/// alike), the GPU in float32 and by the fused kernel when `fused`: output and gradients within kOutputTol and
/// kGradTol.
void expect_matches_cpu(const tensor_list& in, const Options& o = {}, ScalarType ref_dt = kDouble, bool fused = true) {
  manual_seed(7);
  const tensor_list ref = attention_and_grads(to_dtype(in, ref_dt), o);
  testing::poison_gpu_pool();
  manual_seed(7);
  const tensor_list out = attention_and_grads(testing::to_gpu(to_dtype(in, kFloat)), o);
  if (fused) {
    EXPECT_TRUE(ran_fused_cuda_kernel());
  } else {
    EXPECT_FALSE(ran_fused_cuda_kernel());
  }
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(matches(out[0], ref[0].to(kFloat), kOutputTol)) << "output";
  for (size_t i = 1; i < out.size(); ++i)
    EXPECT_TRUE(matches(out[i], ref[i].to(kFloat), kGradTol)) << "gradient of input " << i - 1;
}

/// The largest |element| of t.
double max_abs(const Tensor& t) { return t.abs().max().item<double>(); }

TEST(CudaAttention, MatchesTheCpuWithoutAMask) {
  STRATA_REQUIRE_CUDA();
  expect_matches_cpu(inputs(2, 3, 45, 70, 64, 64));  // ragged last tiles of 16 queries and 32 keys
  expect_matches_cpu(inputs(1, 4, 33, 17, 32, 32, {}, 2), {.enable_gqa = true});
  // No atomics: a second run gives the same bits.
  const tensor_list in = testing::to_gpu(to_dtype(inputs(2, 2, 50, 40, 48, 48), kFloat));
  const tensor_list first = attention_and_grads(in), second = attention_and_grads(in);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(testing::same_tensor(first[i].cpu(), second[i].cpu())) << i;
}

TEST(CudaAttention, CausalWithUnequalLengths) {
  STRATA_REQUIRE_CUDA();
  // Top-left aligned: with L > S the last queries see every key, with L < S the last keys are seen by none.
  for (auto [L, S] : {std::pair<int64_t, int64_t>{37, 70}, {70, 37}, {1, 5}, {64, 64}}) {
    SCOPED_TRACE(::testing::Message() << "L=" << L << " S=" << S);
    expect_matches_cpu(inputs(2, 2, L, S, 48, 48), {.causal = true});
  }
}

TEST(CudaAttention, BroadcastMasks) {
  STRATA_REQUIRE_CUDA();
  const int64_t B = 2, H = 3, L = 29, S = 45;
  // bool [L, S], shared by every batch and head (stride 0 over N); true takes part.
  expect_matches_cpu(inputs(B, H, L, S, 32, 32, gt(testing::uniform({L, S}, 0, 1, kDouble, 21), 0.3)));
  // float [B, 1, L, S], shared by the heads: the op calls the kernel once per b.
  expect_matches_cpu(inputs(B, H, L, S, 32, 32, normal({B, 1, L, S}, kDouble, 22)));
  // float [L, S] read through a transpose: stride 1 along L and L along S.
  expect_matches_cpu(inputs(B, H, L, S, 32, 32, normal({S, L}, kDouble, 23)), {.mask_transposed = true});
  // bool [L, 1]: one flag per query, broadcast along the keys (stride 0 along S); query 5 sees none.
  expect_matches_cpu(inputs(B, H, L, S, 32, 32, ne(arange(L, kLong).unsqueeze(1), 5)));
}

TEST(CudaAttention, RowThatSeesNoKeyIsZero) {
  STRATA_REQUIRE_CUDA();
  const int64_t L = 20, S = 40;
  const Tensor rows = arange(L, kLong).unsqueeze(1);
  // Query 3 sees no key through a bool mask, query 7 through -inf in a float one: output rows 0, gradients finite
  // (matches fails on NaN) and 0 for those queries.
  const Tensor bool_mask = logical_and(gt(testing::uniform({L, S}, 0, 1, kDouble, 31), 0.2), ne(rows, 3));
  const Tensor float_mask =
      where(eq(rows, 7), full({1}, -std::numeric_limits<double>::infinity(), kDouble), normal({L, S}, kDouble, 32));
  for (const auto& [mask, row] : {std::pair<Tensor, int64_t>{bool_mask, 3}, {float_mask, 7}}) {
    SCOPED_TRACE(::testing::Message() << "row " << row);
    const tensor_list in = inputs(2, 2, L, S, 32, 32, mask);
    expect_matches_cpu(in);
    const tensor_list out = attention_and_grads(testing::to_gpu(to_dtype(in, kFloat)));
    EXPECT_EQ(max_abs(out[0].select(2, row)), 0.0);
    EXPECT_EQ(max_abs(out[1].select(2, row)), 0.0);
    EXPECT_GT(max_abs(out[0].select(2, row + 1)), 0.0);
  }
}

TEST(CudaAttention, DropoutMatchesTheCpu) {
  STRATA_REQUIRE_CUDA();
  // The CPU kernel draws the same bits by the same rule, so both devices drop the same weights: the reference is
  // the CPU in float32, the dtype whose 24-bit rule the GPU follows, and the two agree to float32 rounding.
  const tensor_list in = inputs(2, 2, 40, 50, 32, 32);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    expect_matches_cpu(in, {.dropout_p = 0.3, .causal = causal}, kFloat);
    // And the weights were dropped: the output is far from the one without dropout.
    manual_seed(7);
    const tensor_list gpu_in = testing::to_gpu(to_dtype(in, kFloat));
    const tensor_list dropped = attention_and_grads(gpu_in, {.dropout_p = 0.3, .causal = causal});
    const tensor_list kept = attention_and_grads(gpu_in, {.causal = causal});
    EXPECT_GT(testing::normalized_error(dropped[0], kept[0].cpu()), 0.1);
  }
  // p = 1 drops everything: output and gradients 0, no NaN from 1 / (1 - p).
  manual_seed(7);
  const tensor_list none = attention_and_grads(testing::to_gpu(to_dtype(in, kFloat)), {.dropout_p = 1});
  EXPECT_TRUE(ran_fused_cuda_kernel());
  for (const Tensor& t : none) EXPECT_EQ(max_abs(t), 0.0);
}

TEST(CudaAttention, HalfAndBFloat16) {
  STRATA_REQUIRE_CUDA();
  // The reference is the CPU in float32 on the inputs rounded to dt, rounded to dt at the end. The GPU rounds its
  // output to dt (2^-11 for half, 2^-8 for bfloat16, relative) and its backward reads that rounded output for D:
  // a few 1e-3 of normalized error for bfloat16, within parity_tolerance's 1e-2 for the 16-bit floats.
  const Tensor mask = normal({45, 70}, kDouble, 41);
  for (ScalarType dt : {kHalf, kBFloat16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dt << (causal ? " causal" : " masked"));
      const tensor_list in = to_dtype(inputs(2, 2, 45, 70, 64, 64, causal ? Tensor() : mask), dt);
      const tensor_list ref = attention_and_grads(to_dtype(in, kFloat), {.causal = causal});
      const tensor_list out = attention_and_grads(testing::to_gpu(in), {.causal = causal});
      EXPECT_TRUE(ran_fused_cuda_kernel());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(matches(out[i], ref[i].to(dt), 1e-2)) << "result " << i;
    }
  }
}

TEST(CudaAttention, HeadDims) {
  STRATA_REQUIRE_CUDA();
  // Odd and unequal head dims leave lanes idle in the accumulators; 256 is the largest the kernels take (and needs
  // more than the default 48 KiB of shared memory); past it the composite runs instead, with the same result.
  for (auto [E, Ev] : {std::pair<int64_t, int64_t>{64, 64}, {40, 40}, {40, 24}, {24, 72}, {1, 3}, {256, 256}}) {
    SCOPED_TRACE(::testing::Message() << "E=" << E << " Ev=" << Ev);
    expect_matches_cpu(inputs(1, 2, 33, 40, E, Ev));
  }
  expect_matches_cpu(inputs(1, 2, 33, 40, 300, 8), {}, kDouble, /*fused=*/false);
}

TEST(CudaAttention, LongSequenceNeverHoldsTheScores) {
  STRATA_REQUIRE_CUDA();
  const int64_t B = 2, H = 4, L = 1024, S = 1024, E = 64;
  const int64_t scores_bytes = B * H * L * S * int64_t{sizeof(float)};  // one float32 [N, L, S]: 32 MiB
  const tensor_list in = inputs(B, H, L, S, E, E);
  const tensor_list gpu_in = testing::to_gpu(to_dtype(in, kFloat));
  const Tensor q = gpu_in[0].detach().requires_grad_(true), k = gpu_in[1].detach().requires_grad_(true),
               v = gpu_in[2].detach().requires_grad_(true);
  cuda::synchronize();  // the copies' staging buffers are back in the pool
  const int64_t allocated = cuda::memory_allocated(), reserved = cuda::memory_reserved();
  const Tensor out = scaled_dot_product_attention(q, k, v);
  EXPECT_TRUE(ran_fused_cuda_kernel());
  // What forward keeps for backward is out (2 MiB) and logsumexp (32 KiB); the composite keeps the weights, a
  // whole [N, L, S].
  EXPECT_LT(cuda::memory_allocated() - allocated, scores_bytes / 4);
  const tensor_list grads = autograd::grad({(out * gpu_in[3]).sum()}, {q, k, v});
  // Forward and backward together need some 12 MiB besides the inputs; the composite holds several [N, L, S] at
  // once. (The pool keeps what it reserved, so this sees the peak when the test runs in a process of its own, as
  // under CTest; after other tests the pool may hold enough already and the check passes trivially.)
  EXPECT_LT(cuda::memory_reserved() - reserved, 2 * scores_bytes);
  const tensor_list ref = attention_and_grads(to_dtype(in, kDouble));
  EXPECT_TRUE(matches(out, ref[0].to(kFloat), kOutputTol)) << "output";
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_TRUE(matches(grads[i], ref[i + 1].to(kFloat), kGradTol)) << "gradient of input " << i;
}

}  // namespace
}  // namespace strata
