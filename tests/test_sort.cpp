// Sorting and sampling: sort, argsort, msort, topk and kthvalue against hand-computed results (descending,
// ties, NaN, dims, layouts, dtypes, k = 0 and k = size), their gradients (gradcheck and gradgradcheck in
// float64), the kernel writing strided outputs, multinomial's frequencies and reproducibility, and the errors.

#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <strata/tensor/kernels.h>

#include "helpers.h"

using namespace strata;
using strata::testing::same_tensor;
using strata::testing::values;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Pearson's chi-square statistic of observed counts against expected probabilities (which sum to 1).
double chi_square(const std::vector<double>& counts, const std::vector<double>& probs) {
  double total = 0, stat = 0;
  for (double c : counts) total += c;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = total * probs[i];
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return stat;
}

/// How often each category appears in the int64 samples, over `categories` categories.
std::vector<double> histogram(const Tensor& samples, int64_t categories) {
  std::vector<double> counts(categories, 0);
  for (double v : values(samples)) counts.at(static_cast<size_t>(v)) += 1;
  return counts;
}

}  // namespace

// ---- sort, argsort, msort ----

TEST(Sort, ValuesAndIndices) {
  Tensor x = tensor({3.0, 1.0, 2.0, 5.0, 4.0}, kFloat64);
  auto [up, up_at] = sort(x);
  EXPECT_VALUES(up, {1, 2, 3, 4, 5});
  EXPECT_VALUES(up_at, {1, 2, 0, 4, 3});
  EXPECT_EQ(up.dtype(), kFloat64);
  EXPECT_EQ(up_at.dtype(), kLong);
  auto [down, down_at] = x.sort(0, /*descending=*/true);
  EXPECT_VALUES(down, {5, 4, 3, 2, 1});
  EXPECT_VALUES(down_at, {3, 4, 0, 2, 1});
  EXPECT_VALUES(x.argsort(), {1, 2, 0, 4, 3});
  EXPECT_VALUES(argsort(x, 0, true), {3, 4, 0, 2, 1});
  EXPECT_VALUES(x, {3, 1, 2, 5, 4});  // the input is left alone
}

TEST(Sort, AlongEveryDim) {
  Tensor x = tensor({4.0, 9.0, 1.0, 7.0, 2.0, 8.0}, kFloat64).reshape({2, 3});
  auto [rows, row_at] = x.sort();  // dim -1
  EXPECT_VALUES(rows, {1, 4, 9, 2, 7, 8});
  EXPECT_VALUES(row_at, {2, 0, 1, 1, 0, 2});
  auto [cols, col_at] = x.sort(0, true);
  EXPECT_EQ(cols.sizes(), IntArrayRef({2, 3}));
  EXPECT_VALUES(cols, {7, 9, 8, 4, 2, 1});
  EXPECT_VALUES(col_at, {1, 0, 1, 0, 1, 0});
  EXPECT_VALUES(x.msort(), {4, 2, 1, 7, 9, 8});

  // The middle dim of a 3-D tensor, read through a transpose and through a stride-2 slice.
  Tensor cube = tensor({5.0, 3.0, 0.0, 1.0, 6.0, 2.0, 4.0, 7.0}, kFloat64).reshape({2, 2, 2});
  auto [mid, mid_at] = cube.transpose(0, 2).sort(1);  // element [i][j][k] is cube[k][j][i]
  EXPECT_VALUES(mid, {0, 4, 5, 6, 1, 2, 3, 7});
  EXPECT_VALUES(mid_at, {1, 1, 0, 0, 1, 0, 0, 1});
  Tensor wide = arange(12, kFloat64).reshape({3, 4}).neg();
  auto [strided, strided_at] = wide.slice(1, 0, 4, 2).sort(1);  // columns 0 and 2
  EXPECT_VALUES(strided, {-2, 0, -6, -4, -10, -8});
  EXPECT_VALUES(strided_at, {1, 0, 1, 0, 1, 0});
}

TEST(Sort, EqualValuesKeepTheirOrder) {
  Tensor x = tensor({2.0, 1.0, 2.0, 1.0, 2.0}, kFloat64);
  EXPECT_VALUES(x.argsort(), {1, 3, 0, 2, 4});
  EXPECT_VALUES(x.argsort(0, true), {0, 2, 4, 1, 3});  // descending ties keep input order too
  auto [v, i] = x.sort(/*stable=*/true, 0, true);
  EXPECT_VALUES(v, {2, 2, 2, 1, 1});
  EXPECT_VALUES(i, {0, 2, 4, 1, 3});
  EXPECT_VALUES(std::get<1>(sort(x, std::nullopt)), {1, 3, 0, 2, 4});
  EXPECT_VALUES(argsort(x, /*stable=*/true), {1, 3, 0, 2, 4});
  // Ties made by expand (stride 0) and a long run of equal values.
  EXPECT_VALUES(tensor({7.0}).expand({4}).argsort(0, true), {0, 1, 2, 3});
  Tensor many = zeros({1000}, kFloat64);
  EXPECT_TRUE(same_tensor(many.argsort(), arange(1000)));
}

TEST(Sort, NanIsTheLargestValue) {
  Tensor x = tensor({kNaN, 1.0, kNaN, -kInf, kInf, 0.0}, kFloat64);
  auto [up, up_at] = x.sort();
  EXPECT_TRUE(same_tensor(up, tensor({-kInf, 0.0, 1.0, kInf, kNaN, kNaN}, kFloat64)));  // NaN's own bits
  EXPECT_VALUES(up_at, {3, 5, 1, 4, 0, 2});
  auto [down, down_at] = x.sort(-1, true);
  EXPECT_TRUE(same_tensor(down, tensor({kNaN, kNaN, kInf, 1.0, 0.0, -kInf}, kFloat64)));
  EXPECT_VALUES(down_at, {0, 2, 4, 1, 5, 3});
  EXPECT_VALUES(std::get<1>(x.to(kFloat).topk(3)), {0, 2, 4});
  EXPECT_VALUES(std::get<1>(x.topk(2, 0, /*largest=*/false)), {3, 5});
  // -0.0 equals 0.0: the two keep their order, and the values keep their sign bits.
  auto [zeros_sorted, zeros_at] = tensor({0.0, -0.0, -1.0}, kFloat64).sort();
  EXPECT_VALUES(zeros_at, {2, 0, 1});
  EXPECT_TRUE(std::signbit(values(zeros_sorted)[2]));
}

TEST(Sort, IntegerAndBoolDtypes) {
  const int64_t big = (int64_t{1} << 62) + 1;
  Tensor longs = tensor({big, -big, int64_t{0}, big - 1, std::numeric_limits<int64_t>::min()});
  auto [sorted_longs, long_at] = longs.sort();
  EXPECT_TRUE(same_tensor(sorted_longs, tensor({std::numeric_limits<int64_t>::min(), -big, int64_t{0}, big - 1, big})));
  EXPECT_VALUES(long_at, {4, 1, 2, 3, 0});
  Tensor flags = tensor({true, false, true, false});
  auto [sorted_flags, flag_at] = flags.sort(0, true);
  EXPECT_EQ(sorted_flags.dtype(), kBool);
  EXPECT_VALUES(sorted_flags, {1, 1, 0, 0});
  EXPECT_VALUES(flag_at, {0, 2, 1, 3});
  Tensor floats = tensor({0.5, -0.25, 0.125});
  EXPECT_EQ(std::get<0>(floats.sort()).dtype(), kFloat);
  EXPECT_VALUES(std::get<0>(floats.sort()), {-0.25, 0.125, 0.5});
}

TEST(Sort, ZeroDimAndEmptyTensors) {
  auto [v, i] = scalar_tensor(3.5).sort();
  EXPECT_EQ(v.dim(), 0);
  EXPECT_VALUES(v, {3.5});
  EXPECT_VALUES(i, {0});
  auto [empty_v, empty_i] = zeros({3, 0}).sort(1);
  EXPECT_EQ(empty_v.sizes(), IntArrayRef({3, 0}));
  EXPECT_EQ(empty_i.sizes(), IntArrayRef({3, 0}));
  EXPECT_EQ(std::get<0>(zeros({0, 4}).topk(2)).sizes(), IntArrayRef({0, 2}));
}

TEST(Sort, Errors) {
  EXPECT_THROW_MSG(zeros({2, 3}).sort(2),
                   "sort: dimension out of range (expected to be in range of [-2, 1], but got 2)");
  EXPECT_THROW_MSG(zeros({2}).argsort(-2), "sort: dimension out of range");
  EXPECT_THROW_MSG(zeros({2, 5}).topk(6),
                   "topk: k (6) is out of range for dimension 1 of size 5 (input of shape [2, 5])");
  EXPECT_THROW_MSG(zeros({4}).topk(-1), "topk: k (-1) is out of range for dimension 0 of size 4");
  EXPECT_THROW_MSG(zeros({4}).topk(1, 1), "topk: dimension out of range");
  EXPECT_THROW_MSG(zeros({3, 4}).kthvalue(0, 0), "kthvalue: k (0) is out of range for dimension 0 of size 3");
  EXPECT_THROW_MSG(zeros({3, 4}).kthvalue(5), "kthvalue: k (5) is out of range for dimension 1 of size 4");
}

// ---- topk and kthvalue ----

TEST(Topk, LargestAndSmallest) {
  Tensor x = tensor({1.0, 6.0, 3.0, 9.0, 2.0, 8.0}, kFloat64).reshape({2, 3});
  auto [top, top_at] = x.topk(2);
  EXPECT_EQ(top.sizes(), IntArrayRef({2, 2}));
  EXPECT_VALUES(top, {6, 3, 9, 8});
  EXPECT_VALUES(top_at, {1, 2, 0, 2});
  auto [low, low_at] = topk(x, 1, 0, /*largest=*/false);
  EXPECT_EQ(low.sizes(), IntArrayRef({1, 3}));
  EXPECT_VALUES(low, {1, 2, 3});
  EXPECT_VALUES(low_at, {0, 1, 0});
  auto [unsorted, unsorted_at] = x.topk(2, 1, true, /*sorted=*/false);  // sorted either way here
  EXPECT_VALUES(unsorted, {6, 3, 9, 8});
  EXPECT_VALUES(std::get<1>(x.t().topk(1, 0)), {1, 0});  // non-contiguous, dim 0
}

TEST(Topk, KZeroAndKSize) {
  Tensor x = tensor({5.0, 1.0, 4.0}, kFloat64);
  auto [none, none_at] = x.topk(0);
  EXPECT_EQ(none.sizes(), IntArrayRef({0}));
  EXPECT_EQ(none_at.sizes(), IntArrayRef({0}));
  auto [all, all_at] = x.topk(3);
  EXPECT_VALUES(all, {5, 4, 1});
  EXPECT_VALUES(all_at, {0, 2, 1});
  EXPECT_VALUES(std::get<0>(scalar_tensor(2.0).topk(1)), {2});
}

TEST(Topk, TiesKeepTheEarliest) {
  Tensor x = tensor({1.0, 3.0, 3.0, 2.0, 3.0});
  EXPECT_VALUES(std::get<1>(x.topk(2)), {1, 2});
  EXPECT_VALUES(std::get<1>(x.topk(4)), {1, 2, 4, 3});
  EXPECT_VALUES(std::get<1>(tensor({2.0, 1.0, 1.0, 1.0}).topk(2, 0, false)), {1, 2});
  // A partial sort (k < size) and a full one agree on ties.
  Tensor ties = tensor({4.0, 4.0, 1.0, 4.0, 1.0, 4.0});
  for (int64_t k = 1; k <= 6; ++k)
    EXPECT_TRUE(same_tensor(std::get<1>(ties.topk(k)), ties.argsort(0, true).slice(0, 0, k))) << "k = " << k;
}

TEST(Topk, Kthvalue) {
  Tensor x = tensor({3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0}, kFloat64).reshape({2, 4});
  auto [second, second_at] = x.kthvalue(2);
  EXPECT_EQ(second.sizes(), IntArrayRef({2}));
  EXPECT_VALUES(second, {1, 5});
  EXPECT_VALUES(second_at, {3, 0});  // the later of the two 1s: the earlier is the first smallest
  auto [kept, kept_at] = kthvalue(x, 2, 0, /*keepdim=*/true);
  EXPECT_EQ(kept.sizes(), IntArrayRef({1, 4}));
  EXPECT_VALUES(kept, {5, 9, 4, 6});
  EXPECT_VALUES(kept_at, {1, 1, 0, 1});
  EXPECT_VALUES(std::get<0>(scalar_tensor(7.0).kthvalue(1)), {7});
}

// ---- gradients ----

TEST(SortGrad, ScattersToTheIndices) {
  Tensor x = tensor({3.0, 1.0, 2.0}, f64());
  auto [v, i] = x.sort();
  (v * tensor({1.0, 10.0, 100.0}, kFloat64)).sum().backward();
  EXPECT_VALUES(x.grad(), {100, 1, 10});
  EXPECT_EQ(std::string(v.grad_fn()->name()), "SortBackward0");
  EXPECT_FALSE(i.requires_grad());

  Tensor y = tensor({1.0, 5.0, 5.0, 2.0}, f64());
  std::get<0>(y.topk(2)).sum().backward();
  EXPECT_VALUES(y.grad(), {0, 1, 1, 0});
  Tensor z = tensor({1.0, 5.0, 5.0, 2.0}, f64());
  std::get<0>(z.topk(1)).sum().backward();
  EXPECT_VALUES(z.grad(), {0, 1, 0, 0});  // the kept one of the tie
  EXPECT_FALSE(argsort(z).requires_grad());
}

TEST(SortGrad, Gradcheck) {
  Tensor x = leaf({3, 5});
  auto sort_last = [](const tensor_list& in) { return std::get<0>(in[0].sort()); };
  auto sort_dim0_descending = [](const tensor_list& in) { return std::get<0>(in[0].sort(0, true)); };
  auto sort_transposed = [](const tensor_list& in) { return std::get<0>(in[0].t().sort(1)); };
  auto topk_dim0 = [](const tensor_list& in) { return std::get<0>(in[0].topk(2, 0)); };
  auto topk_smallest_transposed = [](const tensor_list& in) { return std::get<0>(in[0].t().topk(3, 0, false)); };
  auto kth = [](const tensor_list& in) { return std::get<0>(in[0].kthvalue(2, 1, true)); };
  auto msorted = [](const tensor_list& in) { return in[0].msort(); };
  const std::vector<std::function<Tensor(const tensor_list&)>> fns = {
      sort_last, sort_dim0_descending, sort_transposed, topk_dim0, topk_smallest_transposed, kth, msorted};
  for (const auto& fn : fns) {
    EXPECT_GRADCHECK(fn, {x});
    EXPECT_GRADGRADCHECK(fn, {x});
  }
  // A 3-D input sorted along its middle dim, read through a permutation.
  Tensor cube = leaf({2, 3, 4});
  auto sort_middle = [](const tensor_list& in) { return std::get<0>(in[0].permute({2, 0, 1}).sort(2, true)); };
  EXPECT_GRADCHECK(sort_middle, {cube});
  EXPECT_GRADGRADCHECK(sort_middle, {cube});
}

// ---- the kernel ----

TEST(SortKernel, WritesStridedOutputs) {
  Tensor x = tensor({3.0, 1.0, 2.0, 0.0, 5.0, 4.0}, kFloat64).reshape({2, 3});
  // Outputs laid out transposed: element [r][j] of each sits at j * 2 + r.
  Tensor values_t = empty({2, 2}, kFloat64).t(), indices_t = empty({2, 2}, kLong).t();
  cpu_kernels().sort(x, 1, /*descending=*/true, values_t, indices_t);
  EXPECT_VALUES(values_t, {3, 2, 5, 4});
  EXPECT_VALUES(indices_t, {0, 2, 1, 2});
  EXPECT_THROW_MSG(cpu_kernels().sort(x, 1, false, empty({2, 4}, kFloat64), empty({2, 4}, kLong)),
                   "sort: expected values and indices of [2, 3] with at most 3 elements along dim 1, got [2, 4]");
  EXPECT_THROW_MSG(cpu_kernels().sort(x, 1, false, empty({2, 3}, kFloat), empty({2, 3}, kLong)),
                   "sort: expected Double values and Long indices, got Float and Long");
}

// ---- multinomial ----

TEST(Multinomial, WithReplacementFollowsTheWeights) {
  Generator gen(7);
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  Tensor weights = tensor({1.0, 2.0, 3.0, 4.0});  // unnormalised
  Tensor samples = weights.multinomial(20000, /*replacement=*/true, &gen);
  EXPECT_EQ(samples.dtype(), kLong);
  EXPECT_EQ(samples.sizes(), IntArrayRef({20000}));
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
  EXPECT_LT(chi_square(histogram(samples, 4), probs), 16.27);

  // Rows draw from their own weights; a zero weight is never drawn.
  Tensor rows = tensor({0.0, 1.0, 0.0, 3.0, 5.0, 0.0, 5.0, 0.0}, kFloat64).reshape({2, 4});
  Tensor drawn = multinomial(rows, 8000, true, &gen);
  EXPECT_EQ(drawn.sizes(), IntArrayRef({2, 8000}));
  const std::vector<double> first = histogram(drawn[0], 4), second = histogram(drawn[1], 4);
  EXPECT_EQ(first[0] + first[2] + second[1] + second[3], 0);
  EXPECT_LT(chi_square({first[1], first[3]}, {0.25, 0.75}), 10.83);  // 1 degree of freedom, p = 0.001
  EXPECT_LT(chi_square({second[0], second[2]}, {0.5, 0.5}), 10.83);
}

TEST(Multinomial, WithoutReplacementDrawsInSequence) {
  // The first two draws of each of 20000 rows: P(i then j) = p_i p_j / (1 - p_i).
  Generator gen(11);
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  Tensor rows = tensor(p, kFloat64).expand({20000, 4});
  Tensor drawn = rows.multinomial(2, false, &gen);
  EXPECT_EQ(drawn.sizes(), IntArrayRef({20000, 2}));
  std::vector<double> counts(16, 0), expected(16, 0);
  const std::vector<double> v = values(drawn);
  for (size_t r = 0; r < v.size(); r += 2) counts[static_cast<size_t>(v[r] * 4 + v[r + 1])] += 1;
  std::vector<double> pair_counts, pair_probs;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      if (i == j) {
        EXPECT_EQ(counts[i * 4 + j], 0) << "category " << i << " drawn twice";
        continue;
      }
      pair_counts.push_back(counts[i * 4 + j]);
      pair_probs.push_back(p[i] * p[j] / (1 - p[i]));
    }
  EXPECT_LT(chi_square(pair_counts, pair_probs), 31.26);  // 11 degrees of freedom, p = 0.001
}

TEST(Multinomial, WithoutReplacementNeverRepeats) {
  Generator gen(3);
  Tensor weights = rand({6, 10}, kFloat, &gen) + 0.01;
  Tensor all = weights.multinomial(10, false, &gen);
  for (int64_t r = 0; r < 6; ++r)
    EXPECT_TRUE(same_tensor(std::get<0>(all[r].sort()), arange(10))) << "row " << r << " is not a permutation";
  Tensor some = weights.multinomial(4, false, &gen);
  for (int64_t r = 0; r < 6; ++r) {
    const std::vector<double> row = values(some[r]);
    EXPECT_EQ(std::set<double>(row.begin(), row.end()).size(), 4u) << "row " << r;
  }
  // Categories of weight 0 come only after every category of positive weight.
  Tensor half_zero = tensor({0.0, 1.0, 0.0, 2.0});
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<double> order = values(half_zero.multinomial(4, false, &gen));
    EXPECT_EQ(std::set<double>(order.begin(), order.begin() + 2), (std::set<double>{1, 3}));
    EXPECT_EQ(std::set<double>(order.begin() + 2, order.end()), (std::set<double>{0, 2}));
  }
}

TEST(Multinomial, SeedReproduces) {
  Tensor weights = tensor({0.2, 0.5, 0.3});
  for (bool replacement : {true, false}) {
    Generator a(42), b(42), c(43);
    Tensor first = weights.multinomial(3, replacement, &a), again = weights.multinomial(3, replacement, &b);
    EXPECT_TRUE(same_tensor(first, again));
    std::vector<std::vector<double>> runs;
    for (int i = 0; i < 8; ++i) runs.push_back(values(weights.multinomial(3, replacement, &c)));
    EXPECT_GT(std::set<std::vector<double>>(runs.begin(), runs.end()).size(), 1u);  // the stream moves on
  }
  manual_seed(5);
  Tensor from_default = tensor({1.0, 1.0, 1.0, 1.0}).multinomial(16, true);
  manual_seed(5);
  EXPECT_TRUE(same_tensor(tensor({1.0, 1.0, 1.0, 1.0}).multinomial(16, true), from_default));
  EXPECT_EQ(zeros({0, 2}).multinomial(3, true).sizes(), IntArrayRef({0, 3}));
}

TEST(Multinomial, Errors) {
  EXPECT_THROW_MSG(tensor({0.5, -0.5, 1.0}).multinomial(1),
                   "multinomial: probability tensor contains either inf, nan or element < 0: category 1 is -0.5");
  EXPECT_THROW_MSG(tensor({0.5, 1.0, 0.0, kInf}).reshape({2, 2}).multinomial(1, true), "category 1 of row 1 is inf");
  EXPECT_THROW_MSG(tensor({kNaN, 1.0}).multinomial(1), "category 0 is nan");
  EXPECT_THROW_MSG(tensor({1.0, 1.0, 0.0, 0.0}, kFloat64).reshape({2, 2}).multinomial(1, true),
                   "multinomial: invalid multinomial distribution (sum of probabilities <= 0) in row 1");
  EXPECT_THROW_MSG(zeros({3}).multinomial(1), "invalid multinomial distribution (sum of probabilities <= 0)");
  EXPECT_THROW_MSG(ones({3}).multinomial(4),
                   "multinomial: cannot sample n_sample (4) > prob_dist.size(-1) (3) samples without replacement");
  EXPECT_THROW_MSG(ones({3}).multinomial(0), "multinomial: cannot sample n_sample <= 0 samples, got 0");
  EXPECT_THROW_MSG(ones({2, 2, 2}).multinomial(1), "multinomial: prob_dist must be 1 or 2 dim, got shape [2, 2, 2]");
  EXPECT_THROW_MSG(ones({3}, kLong).multinomial(1),
                   "multinomial: expected a floating point probability tensor, got Long");
  EXPECT_THROW_MSG(cpu_kernels().multinomial(ones({2, 3}), empty({3, 1}, kLong), 0, 0),
                   "multinomial: expected weights [N, C] and an output [N, S], got [2, 3] and [3, 1]");
}
