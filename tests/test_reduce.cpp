// Reductions: values against hand-computed numbers and identities, gradients (gradcheck in float64,
// gradgradcheck), dtype rules, and the errors users hit.

#include <cmath>
#include <limits>
#include <functional>

#include <strata/autograd/ops/common.h>  // ops::sum_to, internal but tested here

#include "helpers.h"

using namespace strata;

namespace {
/// arange(numel).reshape(sizes) as float64.
Tensor iota(IntArrayRef sizes) { return arange(multiply(sizes), kFloat64).reshape(sizes); }
}  // namespace

// ---- sum_to ----

TEST(Reduce, SumToReducesBroadcastDims) {
  Tensor g = iota({2, 3, 4});
  EXPECT_TRUE(ops::sum_to(g, {2, 3, 4}).is_same(g));  // sizes match: no work at all
  Tensor bias = ops::sum_to(g, {4});
  EXPECT_EQ(bias.sizes(), IntArrayRef({4}));
  EXPECT_VALUES(bias, {60, 66, 72, 78});
  Tensor col = ops::sum_to(g, {3, 1});
  EXPECT_EQ(col.sizes(), IntArrayRef({3, 1}));
  EXPECT_VALUES(col, {60, 92, 124});
  Tensor keep = ops::sum_to(g, {2, 1, 4});
  EXPECT_EQ(keep.sizes(), IntArrayRef({2, 1, 4}));
  EXPECT_VALUES(keep, {12, 15, 18, 21, 48, 51, 54, 57});
  EXPECT_VALUES(ops::sum_to(g, {}), {276});
}

// ---- sum ----

TEST(Reduce, SumValues) {
  Tensor x = iota({2, 3, 4});
  Tensor s = x.sum({0, 2});
  EXPECT_EQ(s.sizes(), IntArrayRef({3}));
  EXPECT_VALUES(s, {60, 92, 124});
  EXPECT_EQ(x.sum({0, 2}, true).sizes(), IntArrayRef({1, 3, 1}));
  EXPECT_VALUES(x.sum({-1}), {6, 22, 38, 54, 70, 86});
  EXPECT_EQ(x.sum().dim(), 0);
  EXPECT_VALUES(x.sum(), {276});
  EXPECT_EQ(sum(x, {}, true).sizes(), IntArrayRef({1, 1, 1}));
  EXPECT_VALUES(x.transpose(0, 2).sum({1}), {12, 48, 15, 51, 18, 54, 21, 57});  // non-contiguous input
  EXPECT_VALUES(scalar_tensor(2.5).sum({0}), {2.5});                            // a 0-dim tensor accepts dim 0
  EXPECT_VALUES(zeros({0, 3}).sum({0}), {0, 0, 0});
}

TEST(Reduce, SumDtypes) {
  Tensor b = tensor({true, false, true});
  EXPECT_EQ(b.sum().dtype(), kLong);
  EXPECT_EQ(b.sum().item<int64_t>(), 2);
  Tensor i = tensor({1, 2, 3});
  EXPECT_EQ(i.sum().dtype(), kLong);
  EXPECT_EQ(i.sum().item<int64_t>(), 6);
  EXPECT_EQ(i.sum(kFloat64).dtype(), kFloat64);
  EXPECT_EQ(i.sum(kFloat64).item<double>(), 6.0);
  EXPECT_EQ(ones({2}).sum().dtype(), kFloat);
}

TEST(Reduce, SumGradients) {
  Tensor x = leaf({2, 3, 4});
  auto over_all = [](const tensor_list& in) { return in[0].sum(); };
  auto over_one = [](const tensor_list& in) { return in[0].sum({1}); };
  auto over_two = [](const tensor_list& in) { return in[0].sum({0, 2}); };
  auto keep = [](const tensor_list& in) { return in[0].sum({-1, 1}, true); };
  auto strided = [](const tensor_list& in) { return in[0].transpose(0, 2).slice(1, 0, 3, 2).sum({0, 1}); };
  EXPECT_GRADCHECK(over_all, {x});
  EXPECT_GRADCHECK(over_one, {x});
  EXPECT_GRADCHECK(over_two, {x});
  EXPECT_GRADCHECK(keep, {x});
  EXPECT_GRADCHECK(strided, {x});
  auto expanded = [](const tensor_list& in) { return in[0].expand({2, 3, 4}).sum({0, 1}); };
  EXPECT_GRADCHECK(expanded, {leaf({3, 1})});
  EXPECT_GRADGRADCHECK(over_two, {x});
  auto squared = [](const tensor_list& in) { return (in[0] * in[0]).sum({1}); };
  EXPECT_GRADGRADCHECK(squared, {x});

  Tensor y = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).reshape({2, 2}).requires_grad_();
  y.sum({0}).backward(tensor({10.0, 20.0}, kFloat64));
  EXPECT_VALUES(y.grad(), {10, 20, 10, 20});
}

TEST(Reduce, SumErrors) {
  Tensor x = zeros({2, 3});
  EXPECT_THROW_MSG(x.sum({1, -1}), "sum: dim 1 appears multiple times in the list of dims");
  EXPECT_THROW_MSG(x.sum({2}), "sum: dimension out of range (expected to be in range of [-2, 1], but got 2)");
  EXPECT_THROW_MSG(x.mean({-3}), "mean: dimension out of range");
}

// ---- mean ----

TEST(Reduce, MeanValuesAndGradients) {
  Tensor x = iota({2, 3});
  EXPECT_VALUES(x.mean(), {2.5});
  EXPECT_VALUES(x.mean({0}), {1.5, 2.5, 3.5});
  EXPECT_VALUES(x.mean({1}, true), {1, 4});
  EXPECT_EQ(x.mean({1}, true).sizes(), IntArrayRef({2, 1}));
  EXPECT_EQ(ones({2}).mean().dtype(), kFloat);

  Tensor y = leaf({3, 4, 2});
  auto all = [](const tensor_list& in) { return in[0].mean(); };
  auto some = [](const tensor_list& in) { return in[0].mean({0, 2}, true); };
  auto strided = [](const tensor_list& in) { return in[0].permute({2, 0, 1}).mean({-1}); };
  EXPECT_GRADCHECK(all, {y});
  EXPECT_GRADCHECK(some, {y});
  EXPECT_GRADCHECK(strided, {y});
  EXPECT_GRADGRADCHECK(some, {y});
}

TEST(Reduce, MeanRejectsIntegers) {
  EXPECT_THROW_MSG(tensor({1, 2}).mean(),
                   "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
                   "dtype. Got: Long");
}

// ---- prod ----

TEST(Reduce, ProdValues) {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, kFloat64).reshape({2, 3});
  EXPECT_VALUES(x.prod(), {720});
  EXPECT_VALUES(x.prod(0), {4, 10, 18});
  EXPECT_VALUES(x.prod(1, true), {6, 120});
  EXPECT_EQ(x.prod(-1, true).sizes(), IntArrayRef({2, 1}));
  EXPECT_EQ(tensor({2, 3}).prod().dtype(), kLong);
  EXPECT_EQ(tensor({2, 3}).prod().item<int64_t>(), 6);
}

TEST(Reduce, ProdGradientWithZeros) {
  // Row 0: no zero; row 1: one zero; row 2: two zeros.
  Tensor x = tensor({2.0, 3.0, 4.0, 2.0, 0.0, 5.0, 0.0, 3.0, 0.0}, kFloat64).reshape({3, 3}).requires_grad_();
  x.prod(1).sum().backward();
  EXPECT_VALUES(x.grad(), {12, 8, 6, 0, 10, 0, 0, 0, 0});
  Tensor y = tensor({2.0, 0.0, 3.0}, f64());
  y.prod().backward();
  EXPECT_VALUES(y.grad(), {0, 6, 0});

  auto along = [](const tensor_list& in) { return in[0].prod(1); };
  auto all = [](const tensor_list& in) { return in[0].prod(); };
  auto strided = [](const tensor_list& in) { return in[0].t().prod(0, true); };
  Tensor z = leaf({3, 4});
  EXPECT_GRADCHECK(along, {z});
  EXPECT_GRADCHECK(all, {z});
  EXPECT_GRADCHECK(strided, {z});
  EXPECT_GRADCHECK(along, {x.detach().requires_grad_()});  // zeros in the input
  EXPECT_GRADCHECK(all, {y.detach().requires_grad_()});
}

// ---- max and min ----

TEST(Reduce, MaxMinValues) {
  Tensor x = tensor({3.0, 7.0, 1.0, 7.0, -2.0, 5.0}, kFloat64).reshape({2, 3});
  EXPECT_VALUES(x.max(), {7});
  EXPECT_VALUES(x.min(), {-2});
  auto [values, indices] = x.max(1);
  EXPECT_VALUES(values, {7, 7});
  EXPECT_VALUES(indices, {1, 0});
  EXPECT_EQ(indices.dtype(), kLong);
  auto [mins, where_min] = x.min(0, true);
  EXPECT_EQ(mins.sizes(), IntArrayRef({1, 3}));
  EXPECT_VALUES(mins, {3, -2, 1});
  EXPECT_VALUES(where_min, {0, 1, 0});
  EXPECT_VALUES(x.argmax(), {1});  // the first of the ties
  EXPECT_VALUES(x.argmin(), {4});
  EXPECT_VALUES(x.argmax(0), {1, 0, 1});
  EXPECT_EQ(x.argmax(std::nullopt, true).sizes(), IntArrayRef({1, 1}));
  EXPECT_EQ(x.argmin(-1, true).sizes(), IntArrayRef({2, 1}));
  EXPECT_VALUES(x.t().argmax(1), {1, 0, 1});  // non-contiguous
  EXPECT_VALUES(x.t().argmin(), {3});
}

TEST(Reduce, MaxGradientSplitsTies) {
  Tensor x = tensor({1.0, 4.0, 4.0, 2.0, 4.0, 0.0}, f64());
  x.max().backward();
  EXPECT_VALUES(x.grad(), {0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 0});
  Tensor y = tensor({1.0, 0.0, 0.0}, f64());
  y.min().backward();
  EXPECT_VALUES(y.grad(), {0, 0.5, 0.5});

  Tensor z = tensor({1.0, 5.0, 5.0, 2.0}, kFloat64).reshape({2, 2}).requires_grad_();
  std::get<0>(z.max(1)).sum().backward();
  EXPECT_VALUES(z.grad(), {0, 1, 1, 0});  // along a dim the gradient goes to the returned index only
}

TEST(Reduce, MaxMinGradcheck) {
  Tensor x = leaf({3, 4});
  auto max_all = [](const tensor_list& in) { return in[0].max(); };
  auto min_all = [](const tensor_list& in) { return in[0].t().min(); };
  auto max_dim = [](const tensor_list& in) { return std::get<0>(in[0].max(1)); };
  auto min_dim = [](const tensor_list& in) { return std::get<0>(in[0].t().min(0, true)); };
  EXPECT_GRADCHECK(max_all, {x});
  EXPECT_GRADCHECK(min_all, {x});
  EXPECT_GRADCHECK(max_dim, {x});
  EXPECT_GRADCHECK(min_dim, {x});
  EXPECT_GRADGRADCHECK(max_dim, {x});
  // Ties made by expand share one input element, so the split gradients must add back up to 1.
  auto max_expanded = [](const tensor_list& in) { return in[0].expand({3, 4}).max(); };
  EXPECT_GRADCHECK(max_expanded, {leaf({4})});
}

TEST(Reduce, MaxErrors) {
  EXPECT_THROW_MSG(zeros({0}).max(), "max: cannot reduce over a dimension of size 0");
  EXPECT_THROW_MSG(zeros({2, 0}).min(1), "min: cannot reduce over a dimension of size 0");
  EXPECT_THROW_MSG(zeros({0}).argmax(), "argmax: expected a non-empty tensor");
  EXPECT_THROW_MSG(zeros({2}).max(1), "max: dimension out of range");
}

// ---- var and std ----

TEST(Reduce, VarStdValues) {
  Tensor x = tensor({1.0, 2.0, 4.0, 7.0, 0.0, -3.0}, kFloat64).reshape({2, 3});
  // Sum of squared deviations from the mean 11/6.
  const double ss = 1 + 4 + 16 + 49 + 0 + 9 - 6 * (11.0 / 6) * (11.0 / 6);
  EXPECT_VALUES(x.var(), {ss / 5});
  EXPECT_VALUES(x.var({}, false), {ss / 6});
  EXPECT_VALUES(x.std(), {std::sqrt(ss / 5)});
  // Row 0: mean 7/3; row 1: mean 4/3.
  const double r0 = (1 + 4 + 16) - 3 * (7.0 / 3) * (7.0 / 3), r1 = (49 + 0 + 9) - 3 * (4.0 / 3) * (4.0 / 3);
  EXPECT_VALUES(x.var({1}), {r0 / 2, r1 / 2});
  EXPECT_VALUES(x.var({1}, false, true), {r0 / 3, r1 / 3});
  EXPECT_EQ(x.var({1}, false, true).sizes(), IntArrayRef({2, 1}));
  EXPECT_VALUES(x.std({0}), {std::sqrt(18.0), std::sqrt(2.0), std::sqrt(24.5)});
  EXPECT_TRUE(std::isnan(tensor({1.0}).var().item<double>()));  // one element, unbiased: 0 / 0
  EXPECT_THROW_MSG(tensor({1, 2}).var(), "var: expected a floating point tensor, got Long");
}

TEST(Reduce, VarStdGradients) {
  Tensor x = leaf({3, 4});
  auto var_all = [](const tensor_list& in) { return in[0].var(); };
  auto var_dim = [](const tensor_list& in) { return in[0].var({1}, false, true); };
  auto std_dims = [](const tensor_list& in) { return in[0].t().std({0}); };
  EXPECT_GRADCHECK(var_all, {x});
  EXPECT_GRADCHECK(var_dim, {x});
  EXPECT_GRADCHECK(std_dims, {x});
  auto var_expanded = [](const tensor_list& in) { return in[0].expand({2, 3, 4}).var({0, 2}); };
  EXPECT_GRADCHECK(var_expanded, {leaf({3, 1})});
  EXPECT_GRADGRADCHECK(var_dim, {x});
  // std of a constant: the gradient is not required to be finite, but backward must not throw.
  Tensor c = ones({3}, f64());
  EXPECT_NO_THROW(c.std().backward());
}

// ---- norm ----

TEST(Reduce, NormValues) {
  EXPECT_VALUES(tensor({3.0, 4.0}).norm(), {5});
  Tensor x = tensor({3.0, -4.0, 0.0, 1.0, 2.0, -2.0}, kFloat64).reshape({2, 3});
  EXPECT_VALUES(x.norm(2, {1}), {5, 3});
  EXPECT_VALUES(x.norm(1), {12});
  EXPECT_VALUES(x.norm(1, {0}, true), {4, 6, 2});
  EXPECT_VALUES(x.norm(INFINITY, {1}), {4, 2});
  EXPECT_VALUES(x.norm(-INFINITY), {0});
  EXPECT_VALUES(x.norm(3, {1}), {std::cbrt(27.0 + 64.0), std::cbrt(1.0 + 8 + 8)});
  EXPECT_VALUES(x.norm(0), {5});
  EXPECT_THROW_MSG(tensor({1, 2}).norm(), "norm: expected a floating point tensor, got Long");
}

TEST(Reduce, NormGradients) {
  Tensor x = leaf({3, 4});
  auto l2 = [](const tensor_list& in) { return in[0].norm(); };
  auto l2_dim = [](const tensor_list& in) { return in[0].t().norm(2, {0}, true); };
  auto l1 = [](const tensor_list& in) { return in[0].norm(1, {1}); };
  auto l3 = [](const tensor_list& in) { return in[0].norm(3, {0, 1}); };
  auto linf = [](const tensor_list& in) { return in[0].norm(INFINITY, {1}); };
  EXPECT_GRADCHECK(l2, {x});
  EXPECT_GRADCHECK(l2_dim, {x});
  EXPECT_GRADCHECK(l1, {x});
  EXPECT_GRADCHECK(l3, {x});
  EXPECT_GRADCHECK(linf, {x});
  EXPECT_GRADGRADCHECK(l2_dim, {x});

  Tensor z = zeros({2, 3}, f64());
  z.norm(2, {1}).sum().backward();
  EXPECT_VALUES(z.grad(), {0, 0, 0, 0, 0, 0});  // the subgradient at 0, as torch
}

// ---- logsumexp ----

TEST(Reduce, LogsumexpValues) {
  Tensor x = tensor({0.5, -1.0, 2.0, 0.0, 1.0, 3.0}, kFloat64).reshape({2, 3});
  EXPECT_ALLCLOSE(x.logsumexp({1}), x.exp().sum({1}).log());
  EXPECT_ALLCLOSE(x.logsumexp({0, 1}, true), x.exp().sum({0, 1}, true).log());
  Tensor big = tensor({1000.0, 1000.0, 999.0});
  EXPECT_VALUES(big.logsumexp({0}), {1000 + std::log(2 + std::exp(-1.0))}, 1e-6);
  const double all_neg_inf = full({2}, -INFINITY).logsumexp({0}).item<double>();
  EXPECT_TRUE(std::isinf(all_neg_inf) && all_neg_inf < 0) << all_neg_inf;
  EXPECT_EQ(tensor({1, 2}).logsumexp({0}).dtype(), kFloat);
  // The log of an empty sum is -inf, as in libtorch.
  Tensor empty_rows = zeros({2, 0}, f64());
  Tensor lse = empty_rows.logsumexp({1});
  for (double v : strata::testing::values(lse)) EXPECT_TRUE(std::isinf(v) && v < 0) << v;
  EXPECT_EQ(lse.sizes(), IntArrayRef({2}));
  lse.sum().backward();
  EXPECT_EQ(empty_rows.grad().sizes(), IntArrayRef({2, 0}));
}

// Where std, var or a norm is 0 its gradient is 0 (libtorch's definition), not the NaN that sqrt's or
// pow's infinite slope times a zero gradient would give.
TEST(Reduce, ZeroStatisticsHaveZeroGradients) {
  using Fn = std::function<Tensor(const Tensor&)>;
  for (const Fn& fn :
       std::vector<Fn>{[](const Tensor& x) { return x.std(); }, [](const Tensor& x) { return x.std({0}, false); },
                       [](const Tensor& x) { return x.var(); }}) {
    Tensor constant = full({4}, 2.5, f64());
    fn(constant).backward();
    EXPECT_VALUES(constant.grad(), {0, 0, 0, 0});
  }
  for (double p : std::vector<double>{2, 3, 0.5, 1, INFINITY}) {
    Tensor zero = zeros({4}, f64());
    zero.norm(p).backward();
    for (double g : strata::testing::values(zero.grad())) EXPECT_FALSE(std::isnan(g)) << "p = " << p;
    if (p != 1 && p != INFINITY) {
      EXPECT_VALUES(zero.grad(), {0, 0, 0, 0});  // abs's subgradient is 0 there too
    }
  }
  // Rows with a zero std next to rows without: only the zero row's gradient is masked.
  Tensor x = tensor({1.0, 1.0, 1.0, 3.0}, kFloat64).reshape({2, 2}).requires_grad_(true);
  x.std({1}).sum().backward();
  EXPECT_VALUES(x.grad(), {0, 0, -std::sqrt(0.5), std::sqrt(0.5)}, 1e-12);
  // p < 1: a zero element next to non-zero ones gets 0, not NaN.
  Tensor y = tensor({0.0, 4.0}, f64());
  y.norm(0.5).backward();
  EXPECT_VALUES(y.grad(), {0, 1}, 1e-12);
  auto std_fn = [](const tensor_list& in) { return in[0].std({1}); };
  EXPECT_GRADCHECK(std_fn, {leaf({3, 4})});
  EXPECT_GRADGRADCHECK(std_fn, {leaf({3, 4})});
  auto pnorm_fn = [](const tensor_list& in) { return in[0].norm(3, {0}); };
  EXPECT_GRADCHECK(pnorm_fn, {leaf({3, 4})});
  EXPECT_GRADGRADCHECK(pnorm_fn, {leaf({3, 4})});
  auto half_norm_fn = [](const tensor_list& in) { return in[0].norm(0.5); };
  EXPECT_GRADCHECK(half_norm_fn, {leaf_in({5}, 0.5, 2)});
}

// A NaN is the extreme of its slice: max() and amax send the gradient to the NaN elements (libtorch's max()).
TEST(Reduce, NanExtremeGetsTheGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({1.0, nan, 3.0, nan}, f64());
  x.max().backward();
  EXPECT_VALUES(x.grad(), {0, 0.5, 0, 0.5});
  Tensor y = tensor({1.0, nan, 3.0, 4.0}, kFloat64).reshape({2, 2}).requires_grad_(true);
  amax(y, {1}).sum().backward();
  EXPECT_VALUES(y.grad(), {0, 1, 0, 1});
  Tensor z = tensor({nan, 1.0}, f64());
  std::get<0>(z.min(0)).backward();
  EXPECT_VALUES(z.grad(), {1, 0});
}

TEST(Reduce, LogsumexpGradients) {
  Tensor x = leaf({3, 4});
  auto lse = [](const tensor_list& in) { return in[0].logsumexp({1}); };
  auto lse_keep = [](const tensor_list& in) { return in[0].t().logsumexp({0, 1}, true); };
  EXPECT_GRADCHECK(lse, {x});
  EXPECT_GRADCHECK(lse_keep, {x});
  EXPECT_GRADGRADCHECK(lse, {x});
  Tensor big = tensor({1000.0, 1000.0}, f64());
  big.logsumexp({0}).backward();
  EXPECT_VALUES(big.grad(), {0.5, 0.5});
}

TEST(Reduce, AmaxAmin) {
  Tensor base = tensor({1.0, 3.0, 3.0, 2.0, 0.0, 5.0}, f64());
  Tensor x = base.view({2, 3});
  EXPECT_VALUES(amax(x, {1}), {3, 5});
  EXPECT_VALUES(amin(x, {0}, /*keepdim=*/true), {1, 0, 3});
  amax(x, {1}).sum().backward();
  EXPECT_VALUES(base.grad(), {0, 0.5, 0.5, 0, 0, 1});  // ties share the gradient
}
