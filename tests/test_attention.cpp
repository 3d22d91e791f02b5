// scaled_dot_product_attention: the fused CPU kernel against the maths written out in ops, gradcheck and
// gradgradcheck, dropout drawn alike on both paths, masks of every broadcast form, and the errors users hit.

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "helpers.h"

namespace strata {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kFused = "fused cpu kernel (Double)";

bool all_finite(const Tensor& t) {
  const std::vector<double> v = testing::values(t);
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

/// softmax(q k^T scale + mask) v written out in ops, with torch's tril for causal; the reference every test uses.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {}, bool causal = false,
                 std::optional<double> scale = std::nullopt) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (mask.defined()) s = mask.dtype() == kBool ? masked_fill(s, logical_not(mask), -kInf) : s + mask;
  if (causal) s = masked_fill(s, triu(ones({q.size(-2), k.size(-2)}, kBool), 1), -kInf);
  return matmul(softmax(s, -1), v);
}

/// Values and the gradients of q, k and v under a fixed upstream gradient agree between f and g.
void expect_same_maths(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                       const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& g, IntArrayRef qs,
                       IntArrayRef ks, IntArrayRef vs, double tol = 1e-12) {
  const Tensor q = randn(qs, kDouble), k = randn(ks, kDouble), v = randn(vs, kDouble);
  tensor_list grads[2];
  Tensor outs[2];
  for (int side = 0; side < 2; ++side) {
    const Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true),
                 vv = v.clone().requires_grad_(true);
    outs[side] = side == 0 ? f(qq, kk, vv) : g(qq, kk, vv);
    Generator upstream(5);
    outs[side].backward(randn(outs[side].sizes(), kDouble, &upstream));
    grads[side] = {qq.grad(), kk.grad(), vv.grad()};
  }
  EXPECT_ALLCLOSE(outs[0], outs[1], tol, tol);
  for (int i = 0; i < 3; ++i) EXPECT_ALLCLOSE(grads[0][i], grads[1][i], tol, tol) << "gradient of input " << i;
}

TEST(Attention, FusedMatchesTheMathsAcrossBlocks) {
  // 150 query rows and 300 keys span several of the kernel's 64-row and 128-key blocks, with ragged last ones.
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    expect_same_maths(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          Tensor y = scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
          EXPECT_EQ(last_dispatch("scaled_dot_product_attention"), kFused);
          return y;
        },
        [&](const Tensor& q, const Tensor& k, const Tensor& v) { return reference(q, k, v, {}, causal); },
        {2, 3, 150, 16}, {2, 3, 300, 16}, {2, 3, 300, 24});
  }
}

TEST(Attention, CausalIsTopLeftAlignedWhenQueriesOutnumberKeys) {
  expect_same_maths([](const Tensor& q, const Tensor& k,
                       const Tensor& v) { return scaled_dot_product_attention(q, k, v, {}, 0.0, true); },
                    [](const Tensor& q, const Tensor& k, const Tensor& v) { return reference(q, k, v, {}, true); },
                    {2, 200, 8}, {2, 70, 8}, {2, 70, 8});
}

TEST(Attention, MasksOfEveryBroadcastForm) {
  const int64_t B = 2, H = 3, L = 70, S = 140, E = 8;
  // A full mask, one per query row and key shared by all slices, a key-padding mask per batch (whose batch dims
  // do not collapse into one stride), and a bool mask per head.
  const Tensor masks[] = {randn({B, H, L, S}, kDouble), randn({L, S}, kDouble), randn({B, 1, L, S}, kDouble),
                          randn({B, 1, 1, S}, kDouble), rand({H, L, S}, kDouble).gt(0.3)};
  for (const Tensor& mask : masks) {
    SCOPED_TRACE(::testing::Message() << "mask " << mask.sizes() << " " << mask.dtype());
    expect_same_maths(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, false, 0.3);
          EXPECT_EQ(last_dispatch("scaled_dot_product_attention"), kFused);
          return y;
        },
        [&](const Tensor& q, const Tensor& k, const Tensor& v) { return reference(q, k, v, mask, false, 0.3); },
        {B, H, L, E}, {B, H, S, E}, {B, H, S, E});
  }
}

TEST(Attention, BatchDimsBroadcastAndGroupedQueryHeadsShareKeys) {
  // One key and value for every batch element.
  expect_same_maths(
      [](const Tensor& q, const Tensor& k, const Tensor& v) { return scaled_dot_product_attention(q, k, v); },
      [](const Tensor& q, const Tensor& k, const Tensor& v) { return reference(q, k, v); }, {3, 2, 10, 4},
      {1, 2, 12, 4}, {1, 2, 12, 5});
  // enable_gqa: 6 query heads over 2 key heads, query head h using key head h / 3 (torch's repeat_interleave).
  expect_same_maths(
      [](const Tensor& q, const Tensor& k, const Tensor& v) {
        return scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, /*enable_gqa=*/true);
      },
      [](const Tensor& q, const Tensor& k, const Tensor& v) {
        const Tensor idx = tensor({0, 0, 0, 1, 1, 1});
        return reference(q, index_select(k, 1, idx), index_select(v, 1, idx), {}, true);
      },
      {2, 6, 9, 4}, {2, 2, 9, 4}, {2, 2, 9, 4});
}

TEST(Attention, QueryThatSeesNoKeyGetsZerosAndNoNaN) {
  const Tensor q = leaf({1, 4, 3}), k = leaf({1, 5, 3}), v = leaf({1, 5, 2});
  Tensor mask = ones({4, 5}, kBool);
  mask.select(0, 2).fill_(0);  // query 2 may look at nothing
  const Tensor y = scaled_dot_product_attention(q, k, v, mask);
  EXPECT_VALUES(y.select(1, 2), {0, 0});
  y.sum().backward();
  EXPECT_VALUES(q.grad().select(1, 2), {0, 0, 0});
  for (const Tensor& g : {q.grad(), k.grad(), v.grad()}) EXPECT_TRUE(all_finite(g));
  // The composite (a mask that requires grad) follows the same rule.
  const Tensor float_mask = zeros({4, 5}, kDouble).masked_fill(logical_not(mask), -kInf).requires_grad_(true);
  const Tensor yc = scaled_dot_product_attention(q, k, v, float_mask);
  EXPECT_EQ(last_dispatch("scaled_dot_product_attention"),
            "composite: attn_mask requires grad, and the fused kernels give it none");
  EXPECT_ALLCLOSE(yc, y, 1e-12, 1e-12);
  yc.sum().backward();
  EXPECT_TRUE(all_finite(float_mask.grad()));
  // No keys at all: every row is 0.
  EXPECT_VALUES(scaled_dot_product_attention(randn({2, 3}), randn({0, 3}), randn({0, 2})), {0, 0, 0, 0});
}

TEST(Attention, Gradcheck) {
  const Tensor q = leaf({2, 2, 5, 3}), k = leaf({2, 2, 7, 3}), v = leaf({2, 2, 7, 4});
  const Tensor mask = randn({2, 1, 5, 7}, kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return scaled_dot_product_attention(in[0], in[1], in[2], mask); },
                   {q, k, v});
  EXPECT_GRADCHECK(
      [](const tensor_list& in) { return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true); },
      {q, k, v});
  // Dropout: reseeded in every call, so each evaluation drops the same weights.
  EXPECT_GRADCHECK(
      [](const tensor_list& in) {
        manual_seed(11);
        return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.4, true);
      },
      {q, k, v});
  // A float mask that requires grad gets its gradient (through the composite).
  EXPECT_GRADCHECK([](const tensor_list& in) { return scaled_dot_product_attention(in[0], in[1], in[2], in[3]); },
                   {q, k, v, leaf({5, 7})});
}

TEST(Attention, GradgradcheckThroughTheCompositeBackward) {
  // The fused backward has no backward of its own: a graph of it is the composite's closed form.
  const Tensor q = leaf({2, 4, 3}), k = leaf({2, 5, 3}), v = leaf({2, 5, 2});
  EXPECT_GRADGRADCHECK(
      [](const tensor_list& in) {
        manual_seed(3);
        return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.25, true);
      },
      {q, k, v});
  EXPECT_GRADGRADCHECK(
      [](const tensor_list& in) { return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, false, 0.7); },
      {q, k, v});
}

TEST(Attention, DropoutDrawsTheSameWeightsOnBothPaths) {
  const Tensor q = randn({2, 3, 90, 8}, kDouble), k = randn({2, 3, 150, 8}, kDouble),
               v = randn({2, 3, 150, 8}, kDouble);
  const Tensor no_mask = zeros({90, 150}, kDouble);
  manual_seed(21);
  const Tensor fused = scaled_dot_product_attention(q, k, v, no_mask, 0.3, false);
  EXPECT_EQ(last_dispatch("scaled_dot_product_attention"), kFused);
  manual_seed(21);
  const Tensor composite = scaled_dot_product_attention(q, k, v, no_mask.clone().requires_grad_(true), 0.3, false);
  EXPECT_NE(last_dispatch("scaled_dot_product_attention"), kFused);
  EXPECT_ALLCLOSE(fused, composite, 1e-12, 1e-12);
  // The stream moved on: the next call drops other weights.
  EXPECT_FALSE(testing::allclose(scaled_dot_product_attention(q, k, v, no_mask, 0.3), fused, 1e-12, 1e-12));
  // p = 1 drops every weight; the expected output keeps its scale: with v = 1 each row's mean is near 1.
  EXPECT_TRUE(all(eq(scaled_dot_product_attention(q, k, v, {}, 1.0), 0)).item<bool>());
  const Tensor mean = scaled_dot_product_attention(q, k, ones({2, 3, 150, 1}, kDouble), {}, 0.3).mean();
  EXPECT_NEAR(mean.item<double>(), 1.0, 0.02);
}

// Heads [first, first + count) of a larger attention, as a tensor-parallel rank holds them, drop what the whole
// attention drops there, on both paths and in backward, and leave the generator where the whole attention does.
TEST(Attention, SomeHeadsOfALargerAttentionDropWhatTheWholeDrops) {
  const Tensor q = randn({2, 6, 20, 8}, kDouble), k = randn({2, 6, 30, 8}, kDouble), v = randn({2, 6, 30, 8}, kDouble),
               upstream = randn({2, 6, 20, 8}, kDouble);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "composite");
    // A float mask that requires grad takes the composite path.
    const Tensor mask = fused ? Tensor() : zeros({20, 30}, kDouble).requires_grad_(true);
    auto run = [&](int64_t first, int64_t count, AttentionHeads heads) {
      const Tensor qq = q.narrow(1, first, count).clone().requires_grad_(true);
      manual_seed(21);
      const Tensor out = scaled_dot_product_attention(qq, k.narrow(1, first, count), v.narrow(1, first, count),
                                                      mask.defined() ? std::optional(mask) : std::nullopt, 0.3, false,
                                                      std::nullopt, false, heads);
      EXPECT_EQ(last_dispatch("scaled_dot_product_attention") == kFused, fused);
      out.backward(upstream.narrow(1, first, count));
      return std::tuple{out, qq.grad(), rand({1}, kDouble)};
    };
    const auto [whole, whole_grad, whole_next] = run(0, 6, {});
    for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {5, 1}, {0, 6}}) {
      SCOPED_TRACE(str("heads ", first, " to ", first + count));
      const auto [part, part_grad, part_next] = run(first, count, {first, 6});
      EXPECT_TRUE(testing::same_tensor(part, whole.narrow(1, first, count)));
      EXPECT_TRUE(testing::same_tensor(part_grad, whole_grad.narrow(1, first, count)));
      EXPECT_TRUE(testing::same_tensor(part_next, whole_next));
    }
  }
  EXPECT_THROW_MSG(scaled_dot_product_attention(q.narrow(1, 0, 2), k.narrow(1, 0, 2), v.narrow(1, 0, 2), {}, 0.3, false,
                                                std::nullopt, false, {5, 6}),
                   "query's 2 heads from head 5 do not fit in the whole attention's 6 heads (query [2, 2, 20, 8])");
  EXPECT_THROW_MSG(scaled_dot_product_attention(randn({4, 8}), randn({5, 8}), randn({5, 8}), {}, 0.3, false,
                                                std::nullopt, false, {0, 6}),
                   "heads needs a heads dim (-3) in query, got query [4, 8]");
}

TEST(Attention, SameBitsAtAnyThreadCount) {
  const Tensor q = randn({4, 4, 200, 16}), k = randn({4, 4, 200, 16}), v = randn({4, 4, 200, 16});
  Tensor out[2], grad[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const Tensor qq = q.clone().requires_grad_(true);
    manual_seed(1);
    out[threads - 1] = scaled_dot_product_attention(qq, k, v, {}, 0.1, true);
    out[threads - 1].sum().backward();
    grad[threads - 1] = qq.grad();
  }
  EXPECT_TRUE(testing::same_tensor(out[0], out[1]));
  EXPECT_TRUE(testing::same_tensor(grad[0], grad[1]));
}

TEST(Attention, FloatMatchesDouble) {
  // float32's block products run on oneDNN, or Eigen where they are small, float64's on Eigen
  // (tensor/cpu/gemm.cpp): forward and backward agree. 150 rows over 100 keys make ragged blocks and more keys
  // than a causal row sees; 5 rows over 7 keys make products too small for oneDNN.
  for (const auto& [L, S, E] : {std::tuple<int64_t, int64_t, int64_t>{150, 100, 32}, {5, 7, 4}}) {
    SCOPED_TRACE(str("L ", L, ", S ", S));
    const Tensor q = randn({2, 2, L, E}, kDouble), k = randn({2, 2, S, E}, kDouble), v = randn({2, 2, S, 24}, kDouble),
                 upstream = randn({2, 2, L, 24}, kDouble);
    tensor_list grads[2];
    Tensor outs[2];
    for (ScalarType dtype : {kFloat, kDouble}) {
      const int side = dtype == kFloat ? 0 : 1;
      const Tensor qq = q.to(dtype).requires_grad_(true), kk = k.to(dtype).requires_grad_(true),
                   vv = v.to(dtype).requires_grad_(true);
      outs[side] = scaled_dot_product_attention(qq, kk, vv, {}, 0.0, true);
      EXPECT_EQ(last_dispatch("scaled_dot_product_attention"), str("fused cpu kernel (", dtype, ")"));
      outs[side].backward(upstream.to(dtype));
      grads[side] = {qq.grad(), kk.grad(), vv.grad()};
    }
    EXPECT_EQ(outs[0].dtype(), kFloat);
    EXPECT_LT(testing::normalized_error(outs[0], reference(q, k, v, {}, true)), 1e-6);
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(testing::normalized_error(grads[0][i], grads[1][i]), 1e-5) << "gradient of input " << i;
  }
}

TEST(Attention, ErrorsNameTheShapes) {
  const Tensor q = randn({2, 4, 8}), k = randn({2, 5, 8}), v = randn({2, 5, 6});
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, randn({2, 5, 4}), v),
                   "query's head dim 8 differs from key's 4 (query [2, 4, 8], key [2, 5, 4])");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, randn({2, 6, 6})), "key has 5 positions but value has 6");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v, ones({4, 4}, kBool)),
                   "attn_mask of shape [4, 4] does not broadcast to the scores' shape [2, 4, 5]");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v, ones({4, 5}, kBool), 0.0, true),
                   "attn_mask and is_causal were both given");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v, ones({4, 5}, kLong)),
                   "attn_mask must be bool or of query's dtype Float, got Long");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v, {}, 1.5), "dropout_p must be in [0, 1], got 1.5");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, k.to(kDouble), v),
                   "expected floating query, key and value of one dtype");
  EXPECT_THROW_MSG(scaled_dot_product_attention(randn({3, 4, 8}), k, v), "do not broadcast");
  EXPECT_THROW_MSG(scaled_dot_product_attention(randn({1, 3, 4, 8}), randn({1, 2, 5, 8}), randn({1, 2, 5, 8}), {}, 0.0,
                                                false, std::nullopt, true),
                   "query's 3 heads must be a multiple of key's 2");
  EXPECT_THROW_MSG(scaled_dot_product_attention(randn({4}), k, v), "at least 2 dims");
}

TEST(Attention, CpuFusedKernelRunsTheSixteenBitTypesInFloat32) {
  // The fused kernel computes on float32 copies and rounds the outputs and gradients once (in_float32).
  const Tensor q = randn({2, 40, 8}), k = randn({2, 30, 8}), v = randn({2, 30, 8}), g = randn({2, 40, 8});
  for (ScalarType dt : {kHalf, kBFloat16}) {
    SCOPED_TRACE(to_string(dt));
    tensor_list grads[2];
    Tensor outs[2];
    for (int side = 0; side < 2; ++side) {
      const ScalarType t = side == 0 ? dt : kFloat;
      const Tensor qq = q.to(dt).to(t).requires_grad_(true), kk = k.to(dt).to(t).requires_grad_(true),
                   vv = v.to(dt).to(t).requires_grad_(true);
      outs[side] = scaled_dot_product_attention(qq, kk, vv, {}, 0.0, true);
      EXPECT_EQ(last_dispatch("scaled_dot_product_attention"), str("fused cpu kernel (", t, ")"));
      outs[side].backward(g.to(dt).to(t));
      grads[side] = {qq.grad(), kk.grad(), vv.grad()};
    }
    EXPECT_TRUE(testing::same_tensor(outs[0], outs[1].to(dt)));
    // Backward reads the rounded output where float32's reads the exact one: close, not the same bits.
    for (int i = 0; i < 3; ++i)
      EXPECT_LT(testing::normalized_error(grads[0][i], grads[1][i]), dt == kHalf ? 2e-3 : 1.5e-2) << "input " << i;
  }
}

}  // namespace
}  // namespace strata
