// CPU-versus-CUDA parity of indexing (index_select, gather, scatter_add with repeated indices,
// masked_fill, slicing views), shape ops on non-contiguous inputs (cat, stack, split, chunk, repeat,
// reshape, permute, expand), embedding and one_hot, the losses (cross_entropy with ignore_index,
// label smoothing and class weights, nll_loss, mse_loss), dropout under one seed, and the random
// streams: uniforms and integers bit for bit, normals within 1e-6.

#include <cmath>
#include <limits>

#include "parity.h"

using namespace strata;
using strata::testing::cuda_matches_cpu;
using strata::testing::gpu;
using strata::testing::indices;
using strata::testing::matches;
using strata::testing::normalized_error;
using strata::testing::OpFn;
using strata::testing::same_tensor;
using strata::testing::uniform;

namespace {

/// One parity case: a function of several inputs and the CPU inputs it gets.
struct Case {
  const char* name;
  OpFn fn;
  std::function<tensor_list()> inputs;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor f32(IntArrayRef sizes, uint64_t seed) { return uniform(sizes, -2, 2, kFloat, seed); }
/// int64 targets in [0, classes) with about a quarter set to `ignore`.
Tensor targets(IntArrayRef sizes, int64_t classes, int64_t ignore, uint64_t seed) {
  return indices(sizes, classes, seed).masked_fill(uniform(sizes, 0, 1, kFloat, seed + 1).gt(0.75), ignore);
}
LossOptions loss_options(Reduction reduction, int64_t ignore_index = -100, double smoothing = 0, Tensor weight = {}) {
  LossOptions o;
  o.reduction = reduction;
  o.ignore_index = ignore_index;
  o.label_smoothing = smoothing;
  o.weight = std::move(weight);
  return o;
}

const std::vector<Case> kCases = {
    // ---- indexing ----
    {"index_select_dim0", [](const tensor_list& in) { return tensor_list{index_select(in[0], 0, in[1])}; },
     [] {
       return tensor_list{f32({10, 7}, 1), indices({12}, 10, 2)};
     }},
    {"index_select_dim1_transposed",
     [](const tensor_list& in) { return tensor_list{in[0].t().index_select(1, in[1])}; },
     [] {
       return tensor_list{f32({10, 7}, 3), indices({15}, 7, 4)};
     }},
    {"index_select_strided_index",
     [](const tensor_list& in) { return tensor_list{index_select(in[0], 0, in[1].slice(0, 0, 20, 2))}; },
     [] {
       return tensor_list{f32({10, 7}, 5), indices({20}, 10, 6)};
     }},
    {"index_select_int64", [](const tensor_list& in) { return tensor_list{index_select(in[0], 1, in[1])}; },
     [] {
       return tensor_list{indices({6, 9}, 1000, 7), indices({11}, 9, 8)};
     }},
    {"gather_dim1", [](const tensor_list& in) { return tensor_list{gather(in[0], 1, in[1])}; },
     [] {
       return tensor_list{f32({6, 9}, 9), indices({6, 4}, 9, 10)};
     }},
    {"gather_dim0_transposed", [](const tensor_list& in) { return tensor_list{in[0].t().gather(0, in[1])}; },
     [] {
       return tensor_list{f32({6, 9}, 11), indices({5, 6}, 9, 12)};
     }},
    {"scatter_add_repeated", [](const tensor_list& in) { return tensor_list{scatter_add(in[0], 1, in[1], in[2])}; },
     [] {
       return tensor_list{f32({6, 9}, 13), indices({6, 40}, 9, 14), f32({6, 40}, 15)};
     }},
    {"scatter_add_dim0_int64", [](const tensor_list& in) { return tensor_list{in[0].scatter_add(0, in[1], in[2])}; },
     [] {
       return tensor_list{indices({7, 5}, 100, 16), indices({30, 5}, 7, 17), indices({30, 5}, 100, 18)};
     }},
    {"scatter_add_many_collisions",  // 100,000 additions into 10 slots: atomics in any order
     [](const tensor_list& in) { return tensor_list{scatter_add(in[0], 0, in[1], in[2])}; },
     [] {
       return tensor_list{f32({10}, 19), indices({100000}, 10, 20), f32({100000}, 21)};
     }},
    {"masked_fill_broadcast_mask",
     [](const tensor_list& in) { return tensor_list{masked_fill(in[0], in[1].gt(0.0), 3.5)}; },
     [] {
       return tensor_list{f32({6, 9}, 22), f32({1, 9}, 23)};
     }},
    {"masked_fill_neg_inf_transposed",
     [](const tensor_list& in) {
       return tensor_list{in[0].t().masked_fill(in[1].gt(0.5), -std::numeric_limits<double>::infinity())};
     },
     [] {
       return tensor_list{f32({6, 9}, 24), f32({9, 6}, 25)};
     }},
    {"slicing_views",
     [](const tensor_list& in) {
       const Tensor& a = in[0];
       return tensor_list{a.slice(1, 1, 8, 3) * 2, a.narrow(0, 2, 3).contiguous(), a.select(1, 4) + 1, a[3].exp(),
                          a.slice(0, std::nullopt, std::nullopt, 2).t().contiguous()};
     },
     [] {
       return tensor_list{f32({7, 9}, 26)};
     }},
    // ---- shape ----
    {"cat_non_contiguous",
     [](const tensor_list& in) {
       return tensor_list{cat({in[0].t(), in[1], in[2].slice(1, 0, 10, 2)}, 0), cat({in[0], in[1].t()}, 1),
                          cat({in[1].narrow(0, 0, 0), in[1]}, 0)};
     },
     [] {
       return tensor_list{f32({5, 4}, 27), f32({3, 5}, 28), f32({2, 10}, 29)};
     }},
    {"stack_transposed",
     [](const tensor_list& in) {
       return tensor_list{stack({in[0].t(), in[1]}, 1)};
     },
     [] {
       return tensor_list{f32({5, 4}, 30), f32({4, 5}, 31)};
     }},
    {"split_chunk",
     [](const tensor_list& in) {
       tensor_list out;
       for (const Tensor& t : in[0].t().split(3, 1)) out.push_back(t.contiguous());
       for (const Tensor& t : chunk(in[0], 4, 0)) out.push_back(t * 1.5);
       for (const Tensor& t : in[0].split({2, 5, 3}, 0)) out.push_back(t.sum({0}));
       return out;
     },
     [] {
       return tensor_list{f32({10, 8}, 32)};
     }},
    {"repeat_reshape_permute",
     [](const tensor_list& in) {
       const Tensor t = in[0].transpose(0, 2);  // [4, 3, 2], not contiguous
       return tensor_list{t.repeat({2, 1, 3}),
                          t.reshape({-1}),
                          t.flatten(1),
                          t.permute({1, 0, 2}).contiguous(),
                          t.select(2, 1).unsqueeze(1).expand({4, 5, 3}).contiguous(),
                          t.unsqueeze(0).squeeze(0).clone()};
     },
     [] {
       return tensor_list{f32({2, 3, 4}, 33)};
     }},
    // ---- embedding ----
    {"embedding", [](const tensor_list& in) { return tensor_list{embedding(in[0], in[1])}; },
     [] {
       return tensor_list{f32({50, 16}, 34), indices({4, 7}, 50, 35)};
     }},
    {"embedding_transposed_weight", [](const tensor_list& in) { return tensor_list{embedding(in[0].t(), in[1])}; },
     [] {
       return tensor_list{f32({16, 50}, 36), indices({9}, 50, 37)};
     }},
    {"one_hot",
     [](const tensor_list& in) {
       return tensor_list{one_hot(in[0], 10), one_hot(in[0])};
     },
     [] {
       return tensor_list{indices({3, 7}, 10, 38)};
     }},
    // ---- losses ----
    {"cross_entropy_mean_ignore_index", [](const tensor_list& in) { return tensor_list{cross_entropy(in[0], in[1])}; },
     [] {
       return tensor_list{f32({16, 5}, 39) * 3, targets({16}, 5, -100, 40)};
     }},
    {"cross_entropy_sum_none",
     [](const tensor_list& in) {
       return tensor_list{cross_entropy(in[0], in[1], loss_options(Reduction::Sum)),
                          cross_entropy(in[0], in[1], loss_options(Reduction::None))};
     },
     [] {
       return tensor_list{f32({16, 5}, 41), targets({16}, 5, -100, 42)};
     }},
    {"cross_entropy_smoothing_weight_custom_ignore",
     [](const tensor_list& in) {
       return tensor_list{cross_entropy(in[0], in[1], loss_options(Reduction::Mean, 2, 0.1, in[2])),
                          cross_entropy(in[0], in[1], loss_options(Reduction::None, 2, 0.2))};
     },
     [] {
       return tensor_list{f32({12, 6}, 43), indices({12}, 6, 44), uniform({6}, 0.5, 2, kFloat, 45)};
     }},
    {"cross_entropy_spatial",  // [N, C, d] logits with [N, d] targets
     [](const tensor_list& in) { return tensor_list{cross_entropy(in[0], in[1])}; },
     [] {
       return tensor_list{f32({4, 5, 3}, 46), targets({4, 3}, 5, -100, 47)};
     }},
    {"cross_entropy_large_logits",
     [](const tensor_list& in) { return tensor_list{cross_entropy(in[0], in[1], loss_options(Reduction::None))}; },
     [] {
       return tensor_list{f32({8, 1000}, 48) * 50, indices({8}, 1000, 49)};
     }},
    {"nll_loss",
     [](const tensor_list& in) {
       const Tensor lp = log_softmax(in[0], 1);
       return tensor_list{nll_loss(lp, in[1]), nll_loss(lp, in[1], loss_options(Reduction::None)),
                          nll_loss(lp, in[1], loss_options(Reduction::Sum, -100, 0, in[2]))};
     },
     [] {
       return tensor_list{f32({10, 4}, 50), targets({10}, 4, -100, 51), uniform({4}, 0.5, 2, kFloat, 52)};
     }},
    {"mse_loss",
     [](const tensor_list& in) {
       return tensor_list{mse_loss(in[0], in[1]), mse_loss(in[0].t(), in[1].t(), Reduction::Sum),
                          mse_loss(in[0], in[1], Reduction::None)};
     },
     [] {
       return tensor_list{f32({9, 11}, 53), f32({9, 11}, 54)};
     }},
};

class CudaIndexShapeLoss : public ::testing::TestWithParam<Case> {};

TEST_P(CudaIndexShapeLoss, MatchesCpu) {
  STRATA_REQUIRE_CUDA();
  const Case& c = GetParam();
  EXPECT_TRUE(cuda_matches_cpu(c.fn, c.inputs()));
  // The same in float64 where the inputs are float32 (indices stay int64).
  tensor_list wide = c.inputs();
  for (Tensor& t : wide)
    if (t.dtype() == kFloat) t = t.to(kDouble);
  EXPECT_TRUE(cuda_matches_cpu(c.fn, wide));
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaIndexShapeLoss, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(CudaIndex, OutOfRangeIndicesThrowOnBothDevices) {
  STRATA_REQUIRE_CUDA();
  const Tensor a = f32({4, 5}, 1).cuda();
  EXPECT_THROW(index_select(a, 0, tensor({0, 4}).cuda()), Error);
  EXPECT_THROW(gather(a, 1, tensor({5}).reshape({1, 1}).cuda()), Error);
  EXPECT_THROW(embedding(a, tensor({-1}).cuda()), Error);
  // The device is still usable afterwards.
  EXPECT_TRUE(matches(index_select(a, 0, tensor({3, 0}).cuda()), index_select(a.cpu(), 0, tensor({3, 0}))));
}

// ---- dropout and random numbers ----

TEST(CudaRandom, DropoutDrawsTheSameMaskForTheSameSeed) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = uniform({64, 129}, 0.5, 2);  // never zero, so zeros in the output are the mask
  for (double p : {0.1, 0.5, 0.9}) {
    manual_seed(11);
    const Tensor c = dropout(x, p);
    manual_seed(11);
    const Tensor g = dropout(x.cuda(), p);
    EXPECT_TRUE(matches(g.eq(0.0), c.eq(0.0))) << "p " << p;
    EXPECT_TRUE(matches(g, c, 1e-7)) << "p " << p;
  }
  manual_seed(12);
  const Tensor twice = dropout(x.cuda(), 0.5);
  EXPECT_FALSE(same_tensor(twice.cpu(), dropout(x.cuda(), 0.5).cpu()));  // the stream moved on
  EXPECT_TRUE(same_tensor(dropout(x.cuda(), 0.5, /*train=*/false).cpu(), x));
}

TEST(CudaRandom, UniformsAndIntegersAreBitIdenticalToTheCpu) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kFloat, kDouble}) {
    manual_seed(42);
    const Tensor c1 = rand({1000, 37}, dt), c2 = rand({5}, dt);
    manual_seed(42);
    const Tensor g1 = rand({1000, 37}, TensorOptions(dt).device(gpu())),
                 g2 = rand({5}, TensorOptions(dt).device(gpu()));
    EXPECT_TRUE(g1.is_cuda());
    EXPECT_TRUE(same_tensor(g1.cpu(), c1)) << dt;
    EXPECT_TRUE(same_tensor(g2.cpu(), c2)) << dt << ": the stream continues at the same offset";
    Generator gc(9), gg(9);
    EXPECT_TRUE(same_tensor(rand({777}, dt, &gc), rand({777}, TensorOptions(dt).device(gpu()), &gg).cpu()));
  }
  Generator gc(3), gg(3);
  EXPECT_TRUE(same_tensor(randint(-5, 1000, {4096}, kLong, &gc),
                          randint(-5, 1000, {4096}, TensorOptions(kLong).device(gpu()), &gg).cpu()));
  EXPECT_TRUE(same_tensor(randint(int64_t{1} << 40, {333}, kLong, &gc),
                          randint(int64_t{1} << 40, {333}, TensorOptions(kLong).device(gpu()), &gg).cpu()));
  EXPECT_TRUE(
      same_tensor(randint(7, {100}, kFloat, &gc), randint(7, {100}, TensorOptions(kFloat).device(gpu()), &gg).cpu()));
}

TEST(CudaRandom, NormalsMatchTheCpuWithin1em6) {
  STRATA_REQUIRE_CUDA();
  Generator gc(5), gg(5);
  const Tensor c = randn({100000}, kFloat, &gc), g = randn({100000}, TensorOptions(kFloat).device(gpu()), &gg);
  EXPECT_LT(normalized_error(g, c), 1e-6);
  EXPECT_LT(max(abs(g.cpu() - c)).item<double>(), 1e-5);  // no single value off by more than rounding
  const Tensor c64 = randn({100001}, kDouble, &gc), g64 = randn({100001}, TensorOptions(kDouble).device(gpu()), &gg);
  EXPECT_LT(normalized_error(g64, c64), 1e-12);
  // Mean and spread of the GPU stream itself.
  EXPECT_NEAR(mean(g).item<double>(), 0, 0.02);
  EXPECT_NEAR(g.std(true).item<double>(), 1, 0.02);
}

TEST(CudaRandom, ReducedPrecisionUniformsStayBelowOne) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kHalf, kBFloat16}) {
    const Tensor u = rand({1 << 20}, TensorOptions(dt).device(gpu()));
    EXPECT_EQ(u.dtype(), dt);
    EXPECT_LT(max(u).item<double>(), 1.0) << dt << ": rounding must not reach 1";
    EXPECT_GE(min(u).item<double>(), 0.0) << dt;
    EXPECT_NEAR(mean(u.to(kFloat)).item<double>(), 0.5, 0.01) << dt;
    const Tensor n = randn({1 << 20}, TensorOptions(dt).device(gpu()));
    EXPECT_NEAR(n.to(kFloat).std(true).item<double>(), 1, 0.02) << dt;
  }
}

}  // namespace
