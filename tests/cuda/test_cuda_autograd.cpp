// Backward on CUDA: the gradients of every op family (elementwise with broadcasting, reductions,
// softmax and layer_norm, matmul, indexing and views, losses, dropout, in-place ops in the graph)
// equal the CPU's for the same inputs and output weights, in float32 and float64; and gradcheck
// (float64 central differences) passes with CUDA inputs.

#include <cmath>

#include "parity.h"

using namespace strata;
using strata::testing::gpu;
using strata::testing::indices;
using strata::testing::matches;
using strata::testing::normal;
using strata::testing::uniform;

namespace {

/// One differentiable function of several inputs; `inputs` makes them on the CPU in float64 (int64
/// indices as they are). Every floating input gets requires_grad.
struct Case {
  const char* name;
  std::function<Tensor(const tensor_list&)> fn;
  std::function<tensor_list()> inputs;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor in_range(IntArrayRef sizes, double lo, double hi, uint64_t seed) {
  return uniform(sizes, lo, hi, kDouble, seed);
}
Tensor gaussian(IntArrayRef sizes, uint64_t seed) { return normal(sizes, kDouble, seed); }
tensor_list one(Tensor a) { return {std::move(a)}; }

/// A case of one input of the given sizes and domain.
Case unary(const char* name, std::function<Tensor(const Tensor&)> f, double lo, double hi) {
  return {name, [f](const tensor_list& in) { return f(in[0]); }, [lo, hi] { return one(in_range({4, 5}, lo, hi, 1)); }};
}
/// A case of two broadcasting inputs, [4, 1, 5] and [3, 5].
Case binary(const char* name, std::function<Tensor(const Tensor&, const Tensor&)> f, double lo, double hi) {
  return {name, [f](const tensor_list& in) { return f(in[0], in[1]); },
          [lo, hi] {
            return tensor_list{in_range({4, 1, 5}, lo, hi, 2), in_range({3, 5}, lo, hi, 3)};
          }};
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // ---- elementwise ----
      unary(
          "exp", [](const Tensor& a) { return exp(a); }, -2, 2),
      unary(
          "log", [](const Tensor& a) { return log(a); }, 0.2, 3),
      unary(
          "sqrt", [](const Tensor& a) { return sqrt(a); }, 0.2, 3),
      unary(
          "rsqrt", [](const Tensor& a) { return rsqrt(a); }, 0.2, 3),
      unary(
          "tanh", [](const Tensor& a) { return tanh(a); }, -2, 2),
      unary(
          "sigmoid", [](const Tensor& a) { return sigmoid(a); }, -3, 3),
      unary(
          "relu", [](const Tensor& a) { return relu(a); }, -2, 2),
      unary(
          "gelu", [](const Tensor& a) { return gelu(a); }, -3, 3),
      unary(
          "gelu_tanh", [](const Tensor& a) { return gelu(a, "tanh"); }, -3, 3),
      unary(
          "silu", [](const Tensor& a) { return silu(a); }, -3, 3),
      unary(
          "abs", [](const Tensor& a) { return abs(a); }, -2, 2),
      unary(
          "clamp", [](const Tensor& a) { return clamp(a, -0.5, 0.5); }, -1, 1),
      unary(
          "pow_scalar", [](const Tensor& a) { return a.pow(2.5); }, 0.2, 2),
      unary(
          "neg_and_scalars", [](const Tensor& a) { return (2.0 - a) / 3.0 * -a + 1.5; }, -2, 2),
      unary(
          "used_twice", [](const Tensor& a) { return a * a + exp(a) * a.t().t(); }, -1, 1),
      binary(
          "add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }, -2, 2),
      binary(
          "sub", [](const Tensor& a, const Tensor& b) { return a - b; }, -2, 2),
      binary(
          "mul", [](const Tensor& a, const Tensor& b) { return a * b; }, -2, 2),
      binary(
          "div", [](const Tensor& a, const Tensor& b) { return a / b; }, 0.5, 2),
      binary(
          "pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2),
      binary(
          "maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -2, 2),
      binary(
          "minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -2, 2),
      binary(
          "where", [](const Tensor& a, const Tensor& b) { return where(a.gt(b), a * 2, b); }, -2, 2),
      // ---- reductions ----
      unary(
          "sum_dims", [](const Tensor& a) { return sum(a, {1}) + sum(a, {0}, true).sum(); }, -2, 2),
      unary(
          "mean", [](const Tensor& a) { return mean(a, {0}); }, -2, 2),
      unary(
          "prod", [](const Tensor& a) { return prod(a, 1) + prod(a); }, 0.5, 1.5),
      unary(
          "max_min", [](const Tensor& a) { return std::get<0>(max(a, 1)) + min(a) + amax(a, {0}).sum(); }, -2, 2),
      unary(
          "var_std", [](const Tensor& a) { return var(a, {1}) + a.std(true); }, -2, 2),
      unary(
          "norms", [](const Tensor& a) { return norm(a) + norm(a, 1, {0}).sum() + norm(a, 3, {1}).sum(); }, -2, 2),
      unary(
          "logsumexp", [](const Tensor& a) { return logsumexp(a, {1}); }, -3, 3),
      // ---- nn ----
      unary(
          "softmax", [](const Tensor& a) { return softmax(a, 1); }, -3, 3),
      unary(
          "log_softmax_dim0", [](const Tensor& a) { return log_softmax(a, 0); }, -3, 3),
      {"layer_norm", [](const tensor_list& in) { return layer_norm(in[0], {6}, in[1], in[2]); },
       [] {
         return tensor_list{gaussian({3, 4, 6}, 4), in_range({6}, 0.5, 1.5, 5), gaussian({6}, 6)};
       }},
      {"dropout",
       [](const tensor_list& in) {
         manual_seed(21);  // the same mask on both devices
         return dropout(in[0], 0.4);
       },
       [] {
         return one(gaussian({8, 9}, 7));
       }},
      // ---- linear algebra ----
      {"mm_transposed", [](const tensor_list& in) { return mm(in[0].t(), in[1]); },
       [] {
         return tensor_list{gaussian({7, 5}, 8), gaussian({7, 6}, 9)};
       }},
      {"bmm", [](const tensor_list& in) { return bmm(in[0], in[1]); },
       [] {
         return tensor_list{gaussian({3, 4, 5}, 10), gaussian({3, 5, 2}, 11)};
       }},
      {"matmul_broadcast", [](const tensor_list& in) { return matmul(in[0], in[1]); },
       [] {
         return tensor_list{gaussian({2, 1, 4, 5}, 12), gaussian({3, 5, 2}, 13)};
       }},
      {"matmul_vec", [](const tensor_list& in) { return matmul(in[0], in[1]) + matmul(in[1], in[1]); },
       [] {
         return tensor_list{gaussian({4, 5}, 14), gaussian({5}, 15)};
       }},
      // ---- indexing and views ----
      {"index_select", [](const tensor_list& in) { return index_select(in[0], 0, in[1]); },
       [] {
         return tensor_list{gaussian({6, 4}, 16), indices({9}, 6, 17)};
       }},
      {"gather", [](const tensor_list& in) { return gather(in[0], 1, in[1]); },
       [] {
         return tensor_list{gaussian({4, 6}, 18), indices({4, 10}, 6, 19)};
       }},
      {"scatter_add", [](const tensor_list& in) { return scatter_add(in[0], 1, in[1], in[2]); },
       [] {
         return tensor_list{gaussian({4, 6}, 20), indices({4, 9}, 6, 21), gaussian({4, 9}, 22)};
       }},
      {"masked_fill", [](const tensor_list& in) { return masked_fill(in[0], in[0].gt(0.5), -1.0); },
       [] {
         return one(gaussian({5, 6}, 23));
       }},
      {"embedding", [](const tensor_list& in) { return embedding(in[0], in[1]); },
       [] {
         return tensor_list{gaussian({10, 3}, 24), indices({4, 6}, 10, 25)};
       }},
      {"views",
       [](const tensor_list& in) {
         const Tensor& a = in[0];
         return a.slice(1, 1, 6, 2).sum() + a.select(0, 2).exp().sum() + a.narrow(1, 0, 3).t().reshape({-1}).sum() +
                a.permute({1, 0}).flatten().pow(2).sum() + a.unsqueeze(0).expand({3, 4, 6}).sum();
       },
       [] {
         return one(gaussian({4, 6}, 26));
       }},
      {"cat_stack_split",
       [](const tensor_list& in) {
         const tensor_list parts = in[0].split(2, 1);
         const tensor_list chunks = chunk(in[1], 3, 0);
         return cat({parts[0] * 2, in[1].t(), parts[2]}, 1).sum({1}) + stack({chunks[0], chunks[1]}, 2).sum() +
                in[0].repeat({2, 1}).sum({0}).sum();
       },
       [] {
         return tensor_list{gaussian({3, 6}, 27), gaussian({5, 3}, 28)};
       }},
      {"in_place_in_graph",
       [](const tensor_list& in) {
         Tensor y = in[0] * 2;
         y.add_(in[1]);
         y.mul_(in[1].sigmoid());
         y.clamp_(-1.5, 1.5);
         return y;
       },
       [] {
         return tensor_list{gaussian({4, 5}, 29), gaussian({4, 5}, 30)};
       }},
      // ---- losses ----
      {"cross_entropy",
       [](const tensor_list& in) {
         LossOptions o;
         o.label_smoothing = 0.1;
         o.ignore_index = 1;
         o.weight = in[2];
         return cross_entropy(in[0], in[1]) + cross_entropy(in[0], in[1], o);
       },
       [] {
         return tensor_list{gaussian({8, 5}, 31), indices({8}, 5, 32), in_range({5}, 0.5, 2, 33)};
       }},
      {"nll_mse",
       [](const tensor_list& in) {
         return nll_loss(log_softmax(in[0], 1), in[1]) + mse_loss(in[0].slice(1, 0, 2), in[2]);
       },
       [] {
         return tensor_list{gaussian({6, 4}, 34), indices({6}, 4, 35), gaussian({6, 2}, 36)};
       }},
  };
  return all;
}

class CudaBackward : public ::testing::TestWithParam<Case> {};

/// Gradients of sum(fn(inputs) * w) on the CPU and on CUDA, for inputs converted to dt.
void expect_same_gradients(const Case& c, ScalarType dt) {
  tensor_list cpu_in = c.inputs();
  for (Tensor& t : cpu_in)
    if (t.is_floating_point()) t = t.to(dt).requires_grad_(true);
  tensor_list gpu_in = strata::testing::to_gpu(cpu_in);
  const Tensor y = c.fn(cpu_in);
  const Tensor w = normal(y.sizes(), y.dtype(), 99);
  (y * w).sum().backward();
  const Tensor yg = c.fn(gpu_in);
  EXPECT_TRUE(matches(yg, y)) << "forward";
  (yg * w.cuda()).sum().backward();
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    EXPECT_TRUE(gpu_in[i].grad().defined()) << "input " << i;
    EXPECT_TRUE(matches(gpu_in[i].grad(), cpu_in[i].grad())) << "gradient of input " << i;
  }
}

TEST_P(CudaBackward, GradientsMatchCpuFloat32) {
  STRATA_REQUIRE_CUDA();
  expect_same_gradients(GetParam(), kFloat);
}

TEST_P(CudaBackward, GradientsMatchCpuFloat64) {
  STRATA_REQUIRE_CUDA();
  expect_same_gradients(GetParam(), kDouble);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaBackward, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// ---- gradcheck with CUDA inputs ----

/// The cases gradcheck runs on CUDA (float64 central differences, two forwards per input element): one
/// or two per family, on small inputs.
const char* const kGradcheckCases[] = {"exp",         "div",     "pow",           "sum_dims",         "var_std",
                                       "logsumexp",   "softmax", "layer_norm",    "matmul_broadcast", "gather",
                                       "scatter_add", "views",   "cross_entropy", "nll_mse"};

TEST(CudaGradcheck, SampleOfOpsPassesInFloat64OnCuda) {
  STRATA_REQUIRE_CUDA();
  for (const char* name : kGradcheckCases) {
    SCOPED_TRACE(name);
    const auto it =
        std::find_if(cases().begin(), cases().end(), [&](const Case& c) { return std::string(c.name) == name; });
    ASSERT_NE(it, cases().end());
    tensor_list in = strata::testing::to_gpu(it->inputs());
    for (Tensor& t : in)
      if (t.is_floating_point()) t.requires_grad_(true);
    EXPECT_GRADCHECK(it->fn, in);
  }
}

TEST(CudaGradcheck, GradgradcheckOnCuda) {
  STRATA_REQUIRE_CUDA();
  const tensor_list in = {in_range({3, 4}, -1, 1, 40).cuda().requires_grad_(true),
                          in_range({4, 2}, -1, 1, 41).cuda().requires_grad_(true)};
  EXPECT_GRADGRADCHECK([](const tensor_list& x) { return tanh(matmul(x[0], x[1])).sum({1}); }, in);
}

TEST(CudaGradcheck, AWrongGradientIsCaughtOnCuda) {
  STRATA_REQUIRE_CUDA();
  // A function whose backward ignores half the input: gradcheck must fail, so the check can fail.
  const Tensor x = in_range({3}, -1, 1, 42).cuda().requires_grad_(true);
  autograd::GradcheckOptions o;
  o.raise_exception = false;
  EXPECT_FALSE(autograd::gradcheck([](const tensor_list& in) { return in[0] * in[0].detach(); }, {x}, o));
}

}  // namespace
