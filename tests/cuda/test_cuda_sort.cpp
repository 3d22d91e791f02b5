// CPU-versus-CUDA parity of sort, argsort, topk, kthvalue and msort (values and indices bit for bit) over
// contiguous, permuted, strided and expanded (ties) inputs, every dim, both directions, NaN and signed zeros,
// one long row (DeviceRadixSort), many short rows and a few long ones (DeviceSegmentedSort); float16 and
// bfloat16 against the CPU's sort of the same values in float32; gradients on the GPU; and multinomial:
// the same samples as the CPU for one seed, never a repeat without replacement, and the CPU's errors.

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <vector>

#include "parity.h"

using namespace strata;
using strata::testing::cuda_matches_cpu;
using strata::testing::gpu;
using strata::testing::indices;
using strata::testing::matches;
using strata::testing::same_tensor;
using strata::testing::uniform;
using strata::testing::values;

namespace {

tensor_list pair(std::tuple<Tensor, Tensor> t) { return {std::get<0>(t), std::get<1>(t)}; }

/// Small integers in [-3, 3] as dtype dt: many ties, exact in every dtype.
Tensor ties(IntArrayRef sizes, ScalarType dt, uint64_t seed) { return (indices(sizes, 7, seed) - 3).to(dt); }

/// Every sorting op along dim on the input, both directions.
tensor_list sorts_along(const Tensor& a, int64_t dim) {
  const int64_t size = a.size(dim);
  tensor_list out;
  for (bool descending : {false, true})
    for (const Tensor& t : pair(a.sort(dim, descending))) out.push_back(t);
  out.push_back(a.argsort(dim, true));
  for (const Tensor& t : pair(a.topk(std::min<int64_t>(3, size), dim))) out.push_back(t);
  for (const Tensor& t : pair(a.topk(size / 2, dim, /*largest=*/false))) out.push_back(t);
  for (const Tensor& t : pair(a.kthvalue(std::max<int64_t>(1, size / 3), dim, true))) out.push_back(t);
  return out;
}

/// fn on x and on x's CUDA copy: the same dtypes, sizes and bytes (a sort moves values and computes none, so
/// NaN payloads and signed zeros must match too; cuda_matches_cpu's measure would take NaN or inf for an error).
::testing::AssertionResult same_on_both(const std::function<tensor_list(const Tensor&)>& fn, const Tensor& x) {
  const tensor_list ref = fn(x), out = fn(x.cuda());
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!out[i].is_cuda()) return ::testing::AssertionFailure() << "output " << i << " is on " << out[i].device();
    if (auto same = same_tensor(out[i].cpu(), ref[i]); !same) return same << " (output " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(CudaSort, MatchesCpuOnEveryLayoutDimAndDtype) {
  STRATA_REQUIRE_CUDA();
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> layouts = {
      {"contiguous", [](const Tensor& t) { return t; }},
      {"permuted",
       [](const Tensor& t) {
         return t.permute({2, 0, 1});
       }},
      {"strided", [](const Tensor& t) { return t.slice(1, 0, 6, 2); }},
      {"expanded",
       [](const Tensor& t) {
         return t.slice(2, 0, 1).expand({5, 6, 7});
       }},
  };
  uint64_t seed = 100;
  for (ScalarType dt : {kFloat, kDouble, kLong, kBool})
    for (const auto& [name, view] : layouts)
      for (int64_t dim = 0; dim < 3; ++dim) {
        SCOPED_TRACE(::testing::Message() << dt << " " << name << " dim " << dim);
        const Tensor base = dt == kBool ? indices({5, 6, 7}, 2, ++seed).to(kBool) : ties({5, 6, 7}, dt, ++seed);
        // view = view: clang before 16 cannot capture a structured binding.
        EXPECT_TRUE(cuda_matches_cpu([&, view = view](const tensor_list& in) { return sorts_along(view(in[0]), dim); },
                                     {base}));
      }
}

TEST(CudaSort, NanInfinitiesAndSignedZeros) {
  STRATA_REQUIRE_CUDA();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (ScalarType dt : {kFloat, kDouble}) {
    // Rows of specials among small values, with -NaN (sign bit set) beside NaN.
    const Tensor specials = tensor({nan, -0.0, 1.0, -inf, 0.0, inf, -nan, -1.0, 0.0, nan, -0.0, 2.0}, dt);
    const Tensor x = cat({specials, uniform({36}, -2, 2, dt, 9)}).reshape({4, 12});
    EXPECT_TRUE(same_on_both([](const Tensor& t) { return sorts_along(t, 1); }, x));
    EXPECT_TRUE(same_on_both([](const Tensor& t) { return sorts_along(t, 0); }, x));
    // Values come back with their own bits: -0.0 stays -0.0.
    const Tensor zeros_sorted = std::get<0>(tensor({0.0, -0.0}, dt).cuda().sort());
    EXPECT_TRUE(std::signbit(values(zeros_sorted)[1]));
  }
}

TEST(CudaSort, LongRowsManyRowsAndFewLongRows) {
  STRATA_REQUIRE_CUDA();
  struct Case {
    DimVector sizes;
    int64_t dim;
  };
  // One row of 100,000 (DeviceRadixSort), 20,000 rows of 3, 3 rows of 5,000 and 64 of 700 (segmented), and a
  // long dim that is not the last.
  for (const Case& c :
       std::vector<Case>{{{100000}, 0}, {{20000, 3}, 1}, {{3, 5000}, 1}, {{64, 700}, -1}, {{4000, 5}, 0}}) {
    SCOPED_TRACE(::testing::Message() << "sizes " << IntArrayRef(c.sizes) << " dim " << c.dim);
    for (const Tensor& x : {uniform(c.sizes, -1, 1, kFloat, 21), ties(c.sizes, kDouble, 22), ties(c.sizes, kLong, 23)})
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const tensor_list& in) {
            tensor_list out = pair(in[0].sort(c.dim, true));
            for (const Tensor& t : pair(in[0].topk(std::min<int64_t>(5, in[0].size(c.dim)), c.dim))) out.push_back(t);
            return out;
          },
          {x}));
  }
}

TEST(CudaSort, ReducedPrecisionMatchesFloat32Sort) {
  STRATA_REQUIRE_CUDA();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (ScalarType dt : {kHalf, kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << dt);
    // Rounded to dt, so the float32 copy holds the very same values (and their ties).
    const Tensor x = cat({uniform({94}, -3, 3, kFloat, 31), tensor({nan, -0.0})}).reshape({4, 24}).to(dt);
    const Tensor ref = x.to(kFloat);
    for (int64_t dim : {0, 1})
      for (bool descending : {false, true}) {
        auto [v, i] = x.cuda().sort(dim, descending);
        auto [ref_v, ref_i] = ref.sort(dim, descending);
        EXPECT_EQ(v.dtype(), dt);
        EXPECT_TRUE(same_tensor(v.cpu().to(kFloat), ref_v));  // both converted by the CPU
        EXPECT_TRUE(matches(i, ref_i));
        EXPECT_TRUE(
            matches(std::get<1>(x.cuda().topk(3, dim, !descending)), std::get<1>(ref.topk(3, dim, !descending))));
      }
  }
}

TEST(CudaSort, StridedOutputsOfTheKernel) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = uniform({6, 9}, -1, 1, kFloat, 41).cuda();
  Tensor values_t = empty({4, 6}, x.options()).t(), indices_t = empty({4, 6}, x.options().dtype(kLong)).t();
  cuda_kernels().sort(x, 1, /*descending=*/false, values_t, indices_t);
  auto [ref_v, ref_i] = x.cpu().topk(4, 1, false);
  EXPECT_TRUE(matches(values_t, ref_v, 0));
  EXPECT_TRUE(matches(indices_t, ref_i));
}

TEST(CudaSort, Gradients) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = uniform({4, 6}, -2, 2, kDouble, 51).requires_grad_(true);
  auto fn = [](const tensor_list& in) {
    return tensor_list{std::get<0>(in[0].t().sort(0, true)) * 2, std::get<0>(in[0].topk(3, 1)).exp(),
                       std::get<0>(in[0].kthvalue(2, 0))};
  };
  EXPECT_GRADCHECK(fn, strata::testing::to_gpu({x}));
  EXPECT_GRADGRADCHECK(fn, strata::testing::to_gpu({x}));
  const Tensor g = x.detach().cuda().requires_grad_(true);
  std::get<0>(g.sort(1)).mul(arange(6, TensorOptions(kDouble).device(g.device()))).sum().backward();
  Tensor cpu_x = x.detach().clone().requires_grad_(true);
  std::get<0>(cpu_x.sort(1)).mul(arange(6, kDouble)).sum().backward();
  EXPECT_TRUE(matches(g.grad(), cpu_x.grad()));
}

// ---- multinomial ----

TEST(CudaMultinomial, SameSamplesAsTheCpuForOneSeed) {
  STRATA_REQUIRE_CUDA();
  const Tensor weights = uniform({5, 300}, 0, 1, kDouble, 61) * indices({5, 300}, 2, 62).to(kDouble);  // zeros too
  for (bool replacement : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "replacement " << replacement);
    Generator cpu_gen(7), gpu_gen(7);
    const Tensor ref = weights.multinomial(40, replacement, &cpu_gen);
    const Tensor out = weights.cuda().multinomial(40, replacement, &gpu_gen);
    EXPECT_TRUE(matches(out, ref));
    EXPECT_EQ(cpu_gen.get_offset(), gpu_gen.get_offset());
    EXPECT_TRUE(matches(weights.cuda().select(0, 2).multinomial(9, replacement, &gpu_gen),
                        weights.select(0, 2).multinomial(9, replacement, &cpu_gen)));
  }
  // float32 weights, drawn with replacement, read through a transpose.
  Generator cpu_gen(8), gpu_gen(8);
  const Tensor columns = uniform({300, 4}, 0.1, 1, kFloat, 63);
  EXPECT_TRUE(
      matches(columns.cuda().t().multinomial(1000, true, &gpu_gen), columns.t().multinomial(1000, true, &cpu_gen)));
}

TEST(CudaMultinomial, FrequenciesAndNoRepeats) {
  STRATA_REQUIRE_CUDA();
  Generator gen(9);
  for (ScalarType dt : {kFloat, kHalf, kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << dt);
    const Tensor weights = tensor({1.0, 2.0, 3.0, 4.0}).to(gpu(), dt);
    const std::vector<double> drawn = values(weights.multinomial(40000, true, &gen));
    std::vector<double> counts(4, 0);
    for (double v : drawn) counts.at(static_cast<size_t>(v)) += 1;
    double chi2 = 0;
    for (int c = 0; c < 4; ++c) chi2 += std::pow(counts[c] - 4000.0 * (c + 1), 2) / (4000.0 * (c + 1));
    EXPECT_LT(chi2, 16.27);  // 3 degrees of freedom, p = 0.001
    const Tensor perms = uniform({50, 30}, 0.01, 1, kFloat, 71).to(dt).cuda().multinomial(30, false, &gen);
    for (int64_t r = 0; r < 50; ++r) {
      const std::vector<double> row = values(perms[r]);
      EXPECT_EQ(std::set<double>(row.begin(), row.end()).size(), 30u) << "row " << r;
    }
  }
}

TEST(CudaMultinomial, Errors) {
  STRATA_REQUIRE_CUDA();
  const TensorOptions on_gpu = TensorOptions(kFloat).device(gpu());
  EXPECT_THROW_MSG(
      tensor({1.0, 0.5, -2.0, 1.0}, on_gpu).reshape({2, 2}).multinomial(1),
      "multinomial: probability tensor contains either inf, nan or element < 0: category 0 of row 1 is -2");
  EXPECT_THROW_MSG(tensor({1.0, 0.0, 0.0, 0.0}, on_gpu).reshape({2, 2}).multinomial(2, true),
                   "multinomial: invalid multinomial distribution (sum of probabilities <= 0) in row 1");
  EXPECT_THROW_MSG(tensor({1.0, 2.0}, on_gpu).multinomial(3),
                   "cannot sample n_sample (3) > prob_dist.size(-1) (2) samples without replacement");
}
