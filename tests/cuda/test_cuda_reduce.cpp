// CPU-versus-CUDA parity of reductions (sum, mean, prod, max/min with indices, amax/amin, argmax/argmin,
// var, std, norm, logsumexp over one dim, several dims and all, with and without keepdim), softmax,
// log_softmax and layer_norm, over contiguous, permuted, strided, expanded (ties) and large inputs;
// int64 where the op takes it, and float16/bfloat16 against a float64 reference.

#include <cmath>
#include <limits>

#include "parity.h"

using namespace strata;
using strata::testing::cuda_matches_cpu;
using strata::testing::indices;
using strata::testing::matches;
using strata::testing::normalized_error;
using strata::testing::uniform;

namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using ReduceFn = std::function<tensor_list(const Tensor&)>;

/// A [5, 6, 7] operand (or a large 3-D one) made from a base tensor by a view.
struct Layout {
  const char* name;
  DimVector base;
  UnaryFn view;
};
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"contiguous", {5, 6, 7}, [](const Tensor& t) { return t; }},
      {"permuted",
       {7, 5, 6},
       [](const Tensor& t) {
         return t.permute({1, 2, 0});
       }},
      {"strided", {5, 12, 7}, [](const Tensor& t) { return t.slice(1, 1, 12, 2); }},
      {"expanded_ties",
       {5, 1, 7},
       [](const Tensor& t) {
         return t.expand({5, 6, 7});
       }},
      {"large", {16, 4099, 9}, [](const Tensor& t) { return t; }},
      {"large_transposed", {9, 4099, 16}, [](const Tensor& t) { return t.transpose(0, 2); }},
  };
  return all;
}

struct Reduction {
  const char* name;
  ReduceFn fn;
  double lo, hi;  // floating inputs from [lo, hi)
  bool integers;  // also on int64 inputs in [-5, 5] (1 and 2 for prod)
};
void PrintTo(const Reduction& r, std::ostream* os) { *os << r.name; }

tensor_list one(Tensor t) { return {std::move(t)}; }
tensor_list pair(std::tuple<Tensor, Tensor> t) { return {std::get<0>(t), std::get<1>(t)}; }

const std::vector<Reduction> kReductions = {
    {"sum_all", [](const Tensor& a) { return one(sum(a)); }, -3, 3, true},
    {"sum_dim0", [](const Tensor& a) { return one(sum(a, {0})); }, -3, 3, true},
    {"sum_dim1_keepdim", [](const Tensor& a) { return one(sum(a, {1}, true)); }, -3, 3, true},
    {"sum_dims02",
     [](const Tensor& a) {
       return one(sum(a, {0, 2}));
     },
     -3, 3, true},
    {"sum_last", [](const Tensor& a) { return one(sum(a, {-1})); }, -3, 3, true},
    {"mean_all", [](const Tensor& a) { return one(mean(a)); }, -3, 3, false},
    {"mean_dim1", [](const Tensor& a) { return one(mean(a, {1})); }, -3, 3, false},
    {"mean_dims02_keepdim",
     [](const Tensor& a) {
       return one(mean(a, {0, 2}, true));
     },
     -3, 3, false},
    {"prod_dim2", [](const Tensor& a) { return one(prod(a, 2)); }, 0.9, 1.1, true},
    {"prod_dim1_keepdim", [](const Tensor& a) { return one(prod(a, 1, true)); }, 0.9, 1.1, true},
    {"max_all", [](const Tensor& a) { return one(max(a)); }, -3, 3, true},
    {"min_all", [](const Tensor& a) { return one(min(a)); }, -3, 3, true},
    {"max_dim1", [](const Tensor& a) { return pair(max(a, 1)); }, -3, 3, true},
    {"min_dim2_keepdim", [](const Tensor& a) { return pair(min(a, 2, true)); }, -3, 3, true},
    {"amax_dims02",
     [](const Tensor& a) {
       return one(amax(a, {0, 2}));
     },
     -3, 3, true},
    {"amin_dim1_keepdim", [](const Tensor& a) { return one(amin(a, {1}, true)); }, -3, 3, true},
    {"argmax_all", [](const Tensor& a) { return one(argmax(a)); }, -3, 3, true},
    {"argmax_dim2", [](const Tensor& a) { return one(argmax(a, 2)); }, -3, 3, true},
    {"argmin_dim0_keepdim", [](const Tensor& a) { return one(argmin(a, 0, true)); }, -3, 3, true},
    {"argmin_dim1", [](const Tensor& a) { return one(argmin(a, 1)); }, -3, 3, true},
    {"var_all", [](const Tensor& a) { return one(var(a)); }, -3, 3, false},
    {"var_dim1", [](const Tensor& a) { return one(var(a, {1})); }, -3, 3, false},
    {"var_dims02_biased_keepdim",
     [](const Tensor& a) {
       return one(var(a, {0, 2}, false, true));
     },
     -3, 3, false},
    {"std_all", [](const Tensor& a) { return one(a.std(true)); }, -3, 3, false},
    {"std_dim2_biased", [](const Tensor& a) { return one(a.std({2}, false)); }, -3, 3, false},
    {"norm2_all", [](const Tensor& a) { return one(norm(a)); }, -3, 3, false},
    {"norm1_dim1", [](const Tensor& a) { return one(norm(a, 1, {1})); }, -3, 3, false},
    {"norm3_dims02",
     [](const Tensor& a) {
       return one(norm(a, 3, {0, 2}));
     },
     -3, 3, false},
    {"norm_inf_dim2_keepdim",
     [](const Tensor& a) { return one(norm(a, std::numeric_limits<double>::infinity(), {2}, true)); }, -3, 3, false},
    {"logsumexp_dim1", [](const Tensor& a) { return one(logsumexp(a, {1})); }, -10, 10, false},
    {"logsumexp_large_values",
     [](const Tensor& a) {
       return one(logsumexp(a, {0, 2}, true));
     },
     80, 120, false},
    {"softmax_dim0", [](const Tensor& a) { return one(softmax(a, 0)); }, -5, 5, false},
    {"softmax_last", [](const Tensor& a) { return one(softmax(a, -1)); }, -5, 5, false},
    {"softmax_large_values", [](const Tensor& a) { return one(softmax(a, 1)); }, 100, 200, false},
    {"log_softmax_dim1", [](const Tensor& a) { return one(log_softmax(a, 1)); }, -5, 5, false},
    {"log_softmax_last", [](const Tensor& a) { return one(a.log_softmax(-1)); }, -30, 30, false},
    {"layer_norm_last_affine",
     [](const Tensor& a) {
       // weight and bias from the input's last row, so they live on the input's device
       const Tensor w = a.select(0, 0).select(0, 0) * 0.5 + 1, b = a.select(0, 1).select(0, 0) * 0.1;
       return one(layer_norm(a, {a.size(2)}, w.contiguous(), b.contiguous()));
     },
     -3, 3, false},
    {"layer_norm_last_two",
     [](const Tensor& a) {
       return one(layer_norm(a, {a.size(1), a.size(2)}));
     },
     -3, 3, false},
};

Tensor operand(IntArrayRef sizes, ScalarType dt, const Reduction& r, uint64_t seed) {
  if (dt == kLong) return r.lo > 0 ? indices(sizes, 2, seed) + 1 : indices(sizes, 11, seed) - 5;
  return uniform(sizes, r.lo, r.hi, dt, seed);
}

class CudaReduction : public ::testing::TestWithParam<Reduction> {};

TEST_P(CudaReduction, MatchesCpuOnEveryLayoutAndDtype) {
  STRATA_REQUIRE_CUDA();
  const Reduction& r = GetParam();
  std::vector<ScalarType> dtypes = {kFloat, kDouble};
  if (r.integers) dtypes.push_back(kLong);
  uint64_t seed = 1000;
  for (ScalarType dt : dtypes)
    for (const Layout& layout : layouts()) {
      SCOPED_TRACE(::testing::Message() << r.name << " " << dt << " " << layout.name);
      // Products of many int64 factors overflow differently in another order: large layouts are float only.
      if (dt == kLong && std::string(r.name).starts_with("prod") && layout.base[1] > 100) continue;
      const Tensor x = operand(layout.base, dt, r, ++seed);
      EXPECT_TRUE(cuda_matches_cpu([&](const tensor_list& in) { return r.fn(layout.view(in[0])); }, {x}));
    }
}

TEST_P(CudaReduction, ReducedPrecisionMatchesFloat64Reference) {
  STRATA_REQUIRE_CUDA();
  const Reduction& r = GetParam();
  for (ScalarType dt : {kHalf, kBFloat16})
    for (const Layout& layout : layouts()) {
      SCOPED_TRACE(::testing::Message() << r.name << " " << dt << " " << layout.name);
      // var, std and the 2-norm are compositions here whose sum of squares is itself a Half tensor: over the
      // large layouts' 590,000 elements it passes 65504 and overflows (torch sums in float32 inside one kernel).
      const std::string name = r.name;
      const bool squares = name.starts_with("var") || name.starts_with("std") || name.starts_with("norm2");
      if (dt == kHalf && squares && layout.base[1] > 100) continue;
      const Tensor x = uniform(layout.base, r.lo, r.hi, kFloat, 55).to(dt);
      const tensor_list out = r.fn(layout.view(x.cuda()));
      const tensor_list ref = r.fn(layout.view(x.to(kDouble)));
      ASSERT_EQ(out.size(), ref.size());
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_TRUE(out[i].is_cuda());
        if (ref[i].dtype() == kLong) {
          // Rounded inputs tie more often; both devices report the first extreme of the same values.
          EXPECT_TRUE(matches(out[i], ref[i]));
        } else {
          EXPECT_EQ(out[i].dtype(), dt);
          EXPECT_LT(normalized_error(out[i], ref[i]), 1e-2);
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaReduction, ::testing::ValuesIn(kReductions),
                         [](const ::testing::TestParamInfo<Reduction>& info) { return std::string(info.param.name); });

TEST(CudaReduce, BoolAndIntegerSumsCountExactly) {
  STRATA_REQUIRE_CUDA();
  const Tensor flags = uniform({300, 301}, -1, 1).gt(0.0);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const tensor_list& in) {
        return tensor_list{sum(in[0]), sum(in[0], {1})};
      },
      {flags}));
  // Sums of int64 past 2^53 stay exact: accumulation is not in double.
  const Tensor big = ones({1000}, kLong) + (int64_t{1} << 53);
  EXPECT_TRUE(cuda_matches_cpu([](const tensor_list& in) { return tensor_list{sum(in[0])}; }, {big}));
}

TEST(CudaReduce, EmptyAndSingleElementReductions) {
  STRATA_REQUIRE_CUDA();
  const Tensor empty_rows = zeros({0, 5});
  EXPECT_TRUE(cuda_matches_cpu(
      [](const tensor_list& in) {
        return tensor_list{sum(in[0], {0}), prod(in[0], 0)};
      },
      {empty_rows}));
  const Tensor single = uniform({1, 1, 1}, -2, 2);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const tensor_list& in) {
        return tensor_list{sum(in[0]), mean(in[0], {1}), argmax(in[0]), amax(in[0], {0, 2}), softmax(in[0], 2)};
      },
      {single}));
}

TEST(CudaReduce, NaNPropagatesThroughMaxArgmaxAndSum) {
  STRATA_REQUIRE_CUDA();
  Tensor x = uniform({4, 9}, -1, 1);
  x.select(0, 2).select(0, 5).fill_(std::numeric_limits<double>::quiet_NaN());
  const Tensor gx = x.cuda();
  // NaN wins max and argmax, as in torch, on both devices.
  EXPECT_TRUE(matches(argmax(gx, 1), argmax(x, 1)));
  EXPECT_TRUE(std::isnan(max(gx).item<float>()));
  EXPECT_TRUE(std::isnan(std::get<0>(max(gx, 1)).select(0, 2).item<float>()));
  EXPECT_EQ(std::get<1>(max(gx, 1)).select(0, 2).item<int64_t>(), 5);
  EXPECT_TRUE(std::isnan(sum(gx, {1}).select(0, 2).item<float>()));
  EXPECT_FALSE(std::isnan(sum(gx, {1}).select(0, 1).item<float>()));
}

TEST(CudaReduce, SoftmaxRowsSumToOneAndLayerNormNormalises) {
  STRATA_REQUIRE_CUDA();
  const Tensor logits = uniform({64, 1000}, -20, 20).cuda();
  const Tensor p = softmax(logits, 1);
  EXPECT_LT(normalized_error(sum(p, {1}), ones({64}, kDouble)), 1e-5);
  const Tensor y = layer_norm(uniform({32, 768}, -5, 9).cuda(), {768});
  EXPECT_LT(normalized_error(mean(y, {1}), zeros({32})), 1e-5);
  EXPECT_LT(normalized_error(var(y, {1}, false), ones({32})), 1e-3);  // eps = 1e-5 shrinks it slightly
}

}  // namespace
