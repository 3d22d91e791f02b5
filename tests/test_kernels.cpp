// The CPU kernel table called directly: strided, transposed and broadcast operands, strided
// outputs, every dtype conversion, reductions and matmul against naive loops, index errors,
// and the counter-based random stream.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include <strata/tensor/kernels.h>

#include "helpers.h"

using namespace strata;
using strata::testing::values;

namespace {

const Kernels& K() { return cpu_kernels(); }

/// A contiguous tensor of dtype dt holding v (row-major) with the given sizes.
Tensor make(std::vector<double> v, IntArrayRef sizes, ScalarType dt = kFloat) {
  Tensor src = from_blob(v.data(), sizes, kFloat64);
  Tensor t = empty(sizes, dt);
  K().copy(src, t);
  return t;
}
/// 0, 1, ..., numel-1 (scaled) shaped as sizes.
Tensor iota(IntArrayRef sizes, ScalarType dt = kFloat, double scale = 1) {
  std::vector<double> v(multiply(sizes));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * scale;
  return make(v, sizes, dt);
}
/// A view of t with dims d0 and d1 swapped.
Tensor transposed(const Tensor& t, int64_t d0, int64_t d1) {
  DimVector sizes(t.sizes()), strides(t.strides());
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return make_view(t, sizes, strides, t.storage_offset());
}
/// Pseudo-random small integers in [-5, 5] as doubles (exact in every dtype).
std::vector<double> small_ints(int64_t n, uint64_t seed = 1) {
  std::vector<double> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<double>(static_cast<int64_t>((seed >> 33) % 11) - 5);
  }
  return v;
}

/// Values in {-1, 1, 2}: products of many of them stay exact in every dtype.
std::vector<double> mild(int64_t n, uint64_t seed = 1) {
  std::vector<double> v = small_ints(n, seed);
  for (auto& x : v) x = x > 2 ? 2 : x < 0 ? -1 : 1;
  return v;
}

}  // namespace

// ---- elementwise ----

TEST(Kernels, BinaryTransposedBroadcastAndStridedOutput) {
  for (int64_t rows : {3, 300}) {  // 300 x 200 crosses the threading threshold
    const int64_t cols = 200;
    Tensor a = transposed(iota({cols, rows}, kFloat64), 0, 1);  // [rows, cols], transposed
    Tensor row = iota({cols}, kFloat64, 0.5);
    Tensor b = make_view(row, {rows, cols}, {0, 1}, 0);  // broadcast over rows
    Tensor out_base = empty({cols, rows}, kFloat64);
    Tensor out = transposed(out_base, 0, 1);  // strided output
    K().binary(BinaryOp::Mul, a, b, out);
    auto va = values(a), vb = values(b), vo = values(out);
    for (size_t i = 0; i < vo.size(); ++i) ASSERT_EQ(vo[i], va[i] * vb[i]) << i;
  }
}

TEST(Kernels, BinaryOpsAllDtypes) {
  std::vector<double> x = {-3, -1, 0, 2, 5, 7}, y = {2, -1, 0, 3, 5, -2};
  for (ScalarType dt : {kLong, kFloat, kFloat64}) {
    Tensor a = make(x, {2, 3}, dt), b = make(y, {2, 3}, dt);
    auto check = [&](BinaryOp op, ScalarType out_dt, std::function<double(double, double)> f) {
      Tensor out = empty({2, 3}, out_dt);
      K().binary(op, a, b, out);
      auto v = values(out);
      for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(v[i], f(x[i], y[i])) << int(op) << " " << dt << " " << i;
    };
    check(BinaryOp::Add, dt, std::plus<>());
    check(BinaryOp::Sub, dt, std::minus<>());
    check(BinaryOp::Mul, dt, std::multiplies<>());
    check(BinaryOp::Maximum, dt, [](double p, double q) { return std::max(p, q); });
    check(BinaryOp::Minimum, dt, [](double p, double q) { return std::min(p, q); });
    check(BinaryOp::Eq, kBool, std::equal_to<>());
    check(BinaryOp::Ne, kBool, std::not_equal_to<>());
    check(BinaryOp::Lt, kBool, std::less<>());
    check(BinaryOp::Le, kBool, std::less_equal<>());
    check(BinaryOp::Gt, kBool, std::greater<>());
    check(BinaryOp::Ge, kBool, std::greater_equal<>());
    check(BinaryOp::LogicalAnd, kBool, [](double p, double q) { return p != 0 && q != 0; });
    check(BinaryOp::LogicalOr, kBool, [](double p, double q) { return p != 0 || q != 0; });
    if (dt == kLong) {
      check(BinaryOp::BitwiseAnd, dt, [](double p, double q) { return double(int64_t(p) & int64_t(q)); });
      check(BinaryOp::BitwiseOr, dt, [](double p, double q) { return double(int64_t(p) | int64_t(q)); });
      check(BinaryOp::BitwiseXor, dt, [](double p, double q) { return double(int64_t(p) ^ int64_t(q)); });
    } else {
      EXPECT_THROW_MSG(check(BinaryOp::BitwiseAnd, dt, nullptr), "bitwise_and does not support");
    }
    if (dt == kLong) {
      check(BinaryOp::Div, dt, [](double p, double q) { return q == 0 ? 0 : std::trunc(p / q); });
      check(BinaryOp::Pow, dt, [](double p, double q) {
        return q < 0 ? (p == 1 ? 1 : p == -1 ? -1 : 0) : std::pow(p, q);
      });
    } else {
      Tensor out = empty({2, 3}, dt);
      K().binary(BinaryOp::Div, a, b, out);
      auto v = values(out);
      EXPECT_TRUE(std::isnan(v[2]));  // 0 / 0
      v[2] = 0;
      EXPECT_TRUE(strata::testing::values_are(from_blob(v.data(), {6}, kFloat64), {-1.5, 1, 0, 2.0 / 3, 1, -3.5}));
    }
  }
  Tensor p = make({1, 0, 1}, {3}, kBool), q = make({1, 1, 0}, {3}, kBool), o = empty({3}, kBool);
  K().binary(BinaryOp::Add, p, q, o);
  EXPECT_VALUES(o, {1, 1, 1});
  K().binary(BinaryOp::Mul, p, q, o);
  EXPECT_VALUES(o, {1, 0, 0});
  EXPECT_THROW_MSG(K().binary(BinaryOp::Sub, p, q, o), "sub does not support Bool");
  EXPECT_THROW_MSG(K().binary(BinaryOp::Add, p, q, empty({3}, kFloat)), "add: expected a Bool output, got Float");
}

TEST(Kernels, PowAndNanPropagation) {
  Tensor a = make({-2, 0.25, 3, NAN}, {4}, kFloat64), out = empty({4}, kFloat64);
  for (double e : {2.0, 0.5, 1.0, 3.0, -1.5}) {
    Tensor scalar = make({e}, {1}, kFloat64);
    K().binary(BinaryOp::Pow, a, make_view(scalar, {4}, {0}, 0), out);
    auto v = values(out);
    for (int i = 0; i < 4; ++i) {
      double expected = std::pow(values(a)[i], e);
      EXPECT_TRUE(v[i] == expected || (std::isnan(v[i]) && std::isnan(expected))) << e << " " << i;
    }
  }
  Tensor b = make({1, NAN, 5, 0}, {4}, kFloat64);
  K().binary(BinaryOp::Maximum, a, b, out);
  auto v = values(out);
  EXPECT_EQ(v[0], 1);
  EXPECT_TRUE(std::isnan(v[1]) && std::isnan(v[3]));
}

namespace {
// GELU written from its definition, x * Phi(x) with Phi through erfc, and the tanh form.
double gelu_reference(double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_reference(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
}  // namespace

TEST(Kernels, UnaryMatchesStdOnContiguousAndStrided) {
  struct Case {
    UnaryOp op;
    double (*f)(double);
  };
  const Case cases[] = {{UnaryOp::Neg, [](double x) { return -x; }},
                        {UnaryOp::Exp, [](double x) { return std::exp(x); }},
                        {UnaryOp::Log, [](double x) { return std::log(x); }},
                        {UnaryOp::Sqrt, [](double x) { return std::sqrt(x); }},
                        {UnaryOp::Rsqrt, [](double x) { return 1 / std::sqrt(x); }},
                        {UnaryOp::Abs, [](double x) { return std::abs(x); }},
                        {UnaryOp::Tanh, [](double x) { return std::tanh(x); }},
                        {UnaryOp::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
                        {UnaryOp::Relu, [](double x) { return x < 0 ? 0 : x; }},
                        {UnaryOp::Sign, [](double x) { return double((0 < x) - (x < 0)); }},
                        {UnaryOp::Erf, [](double x) { return std::erf(x); }},
                        {UnaryOp::Gelu, gelu_reference},
                        {UnaryOp::GeluTanh, gelu_tanh_reference}};
  const bool positive_only[] = {false, false, true, true, true, false, false, false, false, false, false, false, false};
  std::vector<double> v(2 * 67);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - 60) / 7.0;
  for (ScalarType dt : {kFloat, kFloat64}) {
    for (size_t c = 0; c < std::size(cases); ++c) {
      std::vector<double> in_v = v;
      if (positive_only[c])
        for (auto& x : in_v) x = std::abs(x) + 0.01;
      Tensor in = make(in_v, {2, 67}, dt);
      for (Tensor src : {in, transposed(make(in_v, {67, 2}, dt), 0, 1)}) {  // Eigen path, strided path
        Tensor out = empty(src.sizes(), dt);
        K().unary(cases[c].op, src, out);
        auto vi = values(src), vo = values(out);
        for (size_t i = 0; i < vo.size(); ++i)
          ASSERT_NEAR(vo[i], cases[c].f(vi[i]), 3e-6 * (1 + std::abs(vo[i]))) << int(cases[c].op) << " " << dt;
      }
    }
  }
  Tensor i = make({-3, 0, 4}, {3}, kLong), out = empty({3}, kLong);
  K().unary(UnaryOp::Abs, i, out);
  EXPECT_VALUES(out, {3, 0, 4});
  K().unary(UnaryOp::Sign, i, out);
  EXPECT_VALUES(out, {-1, 0, 1});
  EXPECT_THROW_MSG(K().unary(UnaryOp::Exp, i, out), "exp does not support Long");
  EXPECT_THROW_MSG(K().unary(UnaryOp::Neg, make({1}, {1}, kBool), empty({1}, kBool)), "neg does not support Bool");
  Tensor bools = empty({3}, kBool);
  K().unary(UnaryOp::LogicalNot, make({0.5, 0, -1}, {3}, kFloat), bools);
  EXPECT_VALUES(bools, {0, 1, 0});
}

// GeluBackward and GeluTanhBackward give grad * gelu'(x): checked against central differences of the
// definitions above, contiguous (Eigen) and transposed (scalar path), with a broadcast gradient too.
// Float's bound is its rounding of 1 - t^2 where tanh saturates (|x| ~ 4), about 1e-6 here.
TEST(Kernels, GeluBackwardIsGradTimesTheDerivative) {
  const struct {
    BinaryOp op;
    double (*f)(double);
  } cases[] = {{BinaryOp::GeluBackward, gelu_reference}, {BinaryOp::GeluTanhBackward, gelu_tanh_reference}};
  std::vector<double> xs(2 * 67), gs(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    xs[i] = (static_cast<double>(i) - 70) / 9.0;
    gs[i] = 1.5 - static_cast<double>(i % 5) * 0.75;
  }
  for (const auto& c : cases) {
    for (ScalarType dt : {kFloat, kFloat64}) {
      const Tensor x = make(xs, {2, 67}, dt), g = make(gs, {2, 67}, dt);
      const Tensor xt = transposed(make(xs, {67, 2}, dt), 0, 1), gt = transposed(make(gs, {67, 2}, dt), 0, 1);
      const Tensor g_broadcast = make_view(make({-2}, {1}, dt), {2, 67}, {0, 0}, 0);
      for (const auto& [gv, xv] : {std::pair{g, x}, std::pair{gt, xt}, std::pair{g_broadcast, x}}) {
        Tensor out = empty({2, 67}, dt);
        K().binary(c.op, gv, xv, out);
        const auto vg = values(gv), vx = values(xv), vo = values(out);
        for (size_t i = 0; i < vo.size(); ++i) {
          const double h = 1e-5, slope = (c.f(vx[i] + h) - c.f(vx[i] - h)) / (2 * h);
          ASSERT_NEAR(vo[i], vg[i] * slope, (dt == kFloat ? 1e-5 : 1e-9) * (1 + std::abs(vo[i])))
              << to_string(c.op) << " " << dt << " at x = " << vx[i];
        }
      }
    }
  }
  EXPECT_THROW_MSG(K().binary(BinaryOp::GeluBackward, make({1}, {1}, kLong), make({1}, {1}, kLong), empty({1}, kLong)),
                   "gelu_backward does not support Long");
}

// Eigen's SIMD exp returns 2^-128 (float) for every input below the smallest normal result, -inf included; the
// kernels give 0 there, so a masked (-inf) weight is exactly 0 in exp, softmax and attention.
TEST(Kernels, ExpOfMinusInfinityIsExactlyZero) {
  const double inf = std::numeric_limits<double>::infinity();
  for (ScalarType dt : {kFloat, kFloat64}) {
    std::vector<double> xs(32, -inf);
    xs[1] = -1000, xs[2] = 0;
    Tensor out = empty({32}, dt), probs = empty({1, 32, 1}, dt);
    K().unary(UnaryOp::Exp, make(xs, {32}, dt), out);
    EXPECT_EQ(values(out)[0], 0.0) << dt;
    EXPECT_EQ(values(out)[1], 0.0) << dt;
    EXPECT_EQ(values(out)[2], 1.0) << dt;
    K().softmax(make(xs, {1, 32, 1}, dt), /*log=*/false, probs);
    EXPECT_EQ(values(probs), std::vector<double>(values(out))) << dt;
  }
}

// softmax's, layer_norm's and cross_entropy's operand contracts, named in the errors.
TEST(Kernels, NormAndLossKernelsCheckTheirOperands) {
  EXPECT_THROW_MSG(K().softmax(empty({2, 3}), false, empty({2, 3})),
                   "softmax: expected [outer, size, inner] operands, got shape [2, 3]");
  EXPECT_THROW_MSG(
      K().softmax_backward(empty({1, 2, 3}), empty({1, 3, 2}).transpose(1, 2), true, empty({1, 2, 3})),
      "log_softmax_backward: expected contiguous operands of shape [1, 2, 3] and dtype Float, got [1, 2, 3] "
      "Float (not contiguous)");
  EXPECT_THROW_MSG(K().layer_norm(empty({2, 3}), empty({4}), Tensor(), 1e-5, empty({2, 3}), empty({2}), empty({2})),
                   "layer_norm: expected contiguous [3] weight, bias and their gradients of Float, got [4] Float");
  EXPECT_THROW_MSG(
      K().layer_norm(empty({2, 3}), Tensor(), Tensor(), 1e-5, empty({2, 3}), empty({2}, kFloat64), empty({2})),
      "layer_norm: expected mean and rstd [2] of Float, got [2] Double");
  EXPECT_THROW_MSG(K().layer_norm_backward(empty({2, 3}), empty({2, 3}, kFloat64), empty({2}, kFloat64),
                                           empty({2}, kFloat64), Tensor(), empty({2, 3}, kFloat64), Tensor(), Tensor()),
                   "layer_norm_backward: expected contiguous [M, N] operands of Double as the input [2, 3], got [2, 3] "
                   "Float");
  EXPECT_THROW_MSG(
      K().cross_entropy(empty({2, 3}), make({1, 3}, {2}, kLong), Tensor(), -100, empty({2}), Tensor(), empty({2})),
      "cross_entropy: target 3 of row 1 is out of bounds for 3 classes");
}

TEST(Kernels, CopyAllDtypePairsAndIntoTransposedView) {
  const std::vector<double> v = {0, 1, 2, -3, 4, 1};
  for (ScalarType from : {kBool, kLong, kFloat, kFloat64}) {
    Tensor src = make(v, {2, 3}, from);
    auto sv = values(src);
    for (ScalarType to : {kBool, kLong, kFloat, kFloat64}) {
      Tensor dst = empty({2, 3}, to);
      K().copy(src, dst);
      auto dv = values(dst);
      for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(dv[i], to == kBool ? double(sv[i] != 0) : sv[i]) << from << to;
    }
  }
  EXPECT_VALUES(make({2.7, -2.7}, {2}, kLong), {2, -2});  // float to int truncates
  Tensor base = zeros({3, 2}, kFloat);
  K().copy(iota({2, 3}), transposed(base, 0, 1));
  EXPECT_VALUES(base, {0, 3, 1, 4, 2, 5});
  // Large transposes take the tiled walk (partial tiles, an outer dim, a dtype change).
  for (int64_t outer : {1, 5}) {
    Tensor src = transposed(iota({outer, 150, 70}, kLong), 1, 2);  // [outer, 70, 150]
    Tensor dst = empty({outer, 70, 150}, kFloat64);
    K().copy(src, dst);
    EXPECT_EQ(values(dst), values(src));
    Tensor back = empty({outer, 150, 70}, kLong);
    K().copy(dst, transposed(back, 1, 2));  // strided writes
    EXPECT_EQ(values(back), values(iota({outer, 150, 70}, kLong)));
  }
}

TEST(Kernels, FillWhereArange) {
  Tensor base = zeros({4, 4}, kLong);
  K().fill(make_view(base, {2, 2}, {8, 2}, 1), 7);  // every other element of rows 0 and 2, from column 1
  EXPECT_VALUES(base, {0, 7, 0, 7, 0, 0, 0, 0, 0, 7, 0, 7, 0, 0, 0, 0});
  Tensor cond = make({1, 0, 1}, {3}, kBool), out = empty({3}, kFloat);
  Tensor scalar = make({-1}, {1}, kFloat);
  K().where(cond, make({1, 2, 3}, {3}, kFloat), make_view(scalar, {3}, {0}, 0), out);
  EXPECT_VALUES(out, {1, -1, 3});
  Tensor r = empty({4}, kLong);
  K().arange(r, 3, -2);
  EXPECT_VALUES(r, {3, 1, -1, -3});
  Tensor f = empty({3}, kFloat);
  K().arange(f, 0.5, 0.25);
  EXPECT_VALUES(f, {0.5, 0.75, 1.0});
}

// ---- reductions ----

namespace {
/// Naive keepdim reduction over dims (computed in double), for checking reduce().
std::vector<double> naive_reduce(ReduceKind op, const Tensor& in, const std::vector<int64_t>& dims) {
  DimVector out_sizes(in.sizes());
  for (int64_t d : dims) out_sizes[d] = 1;
  const auto v = values(in);
  const double init = op == ReduceKind::Sum    ? 0
                      : op == ReduceKind::Prod ? 1
                      : op == ReduceKind::Max  ? -INFINITY
                                               : INFINITY;
  std::vector<double> out(multiply(out_sizes), init);
  DimVector idx(in.dim(), 0);
  for (double x : v) {
    int64_t o = 0;
    for (int64_t d = 0; d < in.dim(); ++d) o = o * out_sizes[d] + (out_sizes[d] == 1 ? 0 : idx[d]);
    double& acc = out[o];
    acc = op == ReduceKind::Sum    ? acc + x
          : op == ReduceKind::Prod ? acc * x
          : op == ReduceKind::Max  ? std::max(acc, x)
                                   : std::min(acc, x);
    for (int64_t d = in.dim() - 1; d >= 0; --d) {
      if (++idx[d] < in.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}
}  // namespace

TEST(Kernels, ReduceMatchesNaiveOverDimSets) {
  const std::vector<std::vector<int64_t>> dim_sets = {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}, {}};
  for (ScalarType dt : {kLong, kFloat, kFloat64}) {
    for (ReduceKind op : {ReduceKind::Sum, ReduceKind::Prod, ReduceKind::Max, ReduceKind::Min}) {
      auto data = op == ReduceKind::Prod ? mild : small_ints;
      Tensor contiguous = make(data(3 * 4 * 5, 1), {3, 4, 5}, dt);
      Tensor permuted = transposed(make(data(5 * 4 * 3, 7), {5, 4, 3}, dt), 0, 2);  // [3, 4, 5], strided
      for (const Tensor& in : {contiguous, permuted}) {
        for (const auto& dims : dim_sets) {
          DimVector out_sizes(in.sizes());
          for (int64_t d : dims) out_sizes[d] = 1;
          Tensor out = empty(out_sizes, dt);
          K().reduce(op, in, dims, out);
          auto expected = naive_reduce(op, in, dims);
          auto got = values(out);
          ASSERT_EQ(got.size(), expected.size());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], expected[i], 1e-9 * std::abs(expected[i])) << int(op) << " " << dt << " " << i;
        }
      }
    }
  }
}

TEST(Kernels, ReduceLargeUsesExactAccumulation) {
  // 3e6 ones in float: a float accumulator would stall at 2^24; the double accumulator does not.
  const int64_t n = 3000000;
  Tensor ones_f = empty({n / 1000, 1000}, kFloat);
  K().fill(ones_f, 1);
  for (std::vector<int64_t> dims : {std::vector<int64_t>{0, 1}, std::vector<int64_t>{0}, std::vector<int64_t>{1}}) {
    DimVector out_sizes(ones_f.sizes());
    for (int64_t d : dims) out_sizes[d] = 1;
    Tensor out = empty(out_sizes, kFloat);
    K().reduce(ReduceKind::Sum, ones_f, dims, out);
    EXPECT_EQ(values(out)[0], dims.size() == 2 ? n : dims[0] == 0 ? n / 1000 : 1000);
  }
  Tensor per_row = empty({1, 3000}, kFloat);
  K().reduce(ReduceKind::Sum, transposed(ones_f, 0, 1), {0}, per_row);  // [1000, 3000] view, reduced dim has stride 1
  EXPECT_EQ(values(per_row)[2999], 1000);
}

TEST(Kernels, ReduceDtypesNanAndEmpty) {
  Tensor b = make({1, 0, 1, 1}, {2, 2}, kBool), s = empty({1, 1}, kLong);
  K().reduce(ReduceKind::Sum, b, {0, 1}, s);
  EXPECT_VALUES(s, {3});
  Tensor any = empty({2, 1}, kBool);
  K().reduce(ReduceKind::Max, b, {1}, any);
  EXPECT_VALUES(any, {1, 1});
  Tensor x = make({1, NAN, 3, 4, 5, 6}, {2, 3}), m = empty({2, 1});
  K().reduce(ReduceKind::Max, x, {1}, m);
  EXPECT_TRUE(std::isnan(values(m)[0]));
  EXPECT_EQ(values(m)[1], 6);
  Tensor e = empty({0, 3}), out = empty({1, 3});
  K().reduce(ReduceKind::Sum, e, {0}, out);
  EXPECT_VALUES(out, {0, 0, 0});
  K().reduce(ReduceKind::Prod, e, {0}, out);
  EXPECT_VALUES(out, {1, 1, 1});
  EXPECT_THROW_MSG(K().reduce(ReduceKind::Max, e, {0}, out), "max(): cannot reduce over a zero-size dimension");
  EXPECT_THROW_MSG(K().reduce(ReduceKind::Sum, b, {0}, empty({1, 2}, kBool)), "sum: expected a Long output");
}

TEST(Kernels, ArgReduceFirstOccurrenceAndNan) {
  Tensor x = make({3, 1, 3, 1, 2, NAN, 0, NAN, 5, 5, 5, -1}, {3, 4});
  Tensor v = empty({3, 1}), i = empty({3, 1}, kLong);
  K().arg_reduce(ReduceKind::Max, x, 1, v, i);
  EXPECT_VALUES(i, {0, 1, 0});
  EXPECT_EQ(values(v)[0], 3);
  EXPECT_TRUE(std::isnan(values(v)[1]));
  K().arg_reduce(ReduceKind::Min, x, 1, v, i);
  EXPECT_VALUES(i, {1, 1, 3});
  Tensor v0 = empty({1, 4}), i0 = empty({1, 4}, kLong);
  K().arg_reduce(ReduceKind::Max, x, 0, v0, i0);
  EXPECT_VALUES(i0, {2, 1, 2, 1});
  Tensor it = empty({1, 3}, kLong), vt = empty({1, 3});
  K().arg_reduce(ReduceKind::Min, transposed(x, 0, 1), 0, vt, it);  // strided scan
  EXPECT_VALUES(it, {1, 1, 3});
  EXPECT_THROW_MSG(K().arg_reduce(ReduceKind::Max, empty({2, 0}), 1, empty({2, 1}), empty({2, 1}, kLong)),
                   "max(): cannot reduce over a zero-size dimension");
}

// ---- matmul ----

namespace {
std::vector<double> naive_matmul(const Tensor& a, const Tensor& c) {
  const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = c.size(2);
  auto va = values(a), vc = values(c);
  std::vector<double> out(B * M * N, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) out[(b * M + i) * N + j] += va[(b * M + i) * K + k] * vc[(b * K + k) * N + j];
  return out;
}
}  // namespace

TEST(Kernels, MatmulLayoutsAgainstNaive) {
  const int64_t B = 3, M = 5, Kd = 7, N = 4;
  for (ScalarType dt : {kFloat, kFloat64, kLong}) {
    Tensor a = make(small_ints(B * M * Kd), {B, M, Kd}, dt);
    Tensor at = transposed(make(small_ints(B * Kd * M, 3), {B, Kd, M}, dt), 1, 2);  // column-major slices
    Tensor c = make(small_ints(B * Kd * N, 5), {B, Kd, N}, dt);
    Tensor ct = transposed(make(small_ints(B * N * Kd, 9), {B, N, Kd}, dt), 1, 2);
    Tensor c1 = make(small_ints(Kd * N, 11), {1, Kd, N}, dt);
    Tensor cb = make_view(c1, {B, Kd, N}, {0, N, 1}, 0);  // broadcast batch
    Tensor wide = make(small_ints(B * M * Kd * 2, 13), {B, M, 2 * Kd}, dt);
    Tensor as = make_view(wide, {B, M, Kd}, {2 * M * Kd, 2 * Kd, 2}, 1);  // stride 2: copied
    for (const Tensor& lhs : {a, at, as})
      for (const Tensor& rhs : {c, ct, cb}) {
        Tensor out = empty({B, M, N}, dt);
        K().matmul(lhs, rhs, out);
        auto expected = naive_matmul(lhs, rhs), got = values(out);
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << dt << " " << i;
      }
  }
  // Many small batches (batch-parallel path) and one large product (Eigen-threaded path).
  for (auto [b, m] : {std::pair<int64_t, int64_t>{512, 8}, {1, 128}}) {
    Tensor x = make(small_ints(b * m * m), {b, m, m}), out = empty({b, m, m});
    K().matmul(x, transposed(x, 1, 2), out);
    auto expected = naive_matmul(x, transposed(x, 1, 2)), got = values(out);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << i;
  }
  Tensor z = empty({1, 2, 2}, kBool);
  EXPECT_THROW_MSG(K().matmul(z, z, z), "matmul does not support Bool");
  Tensor e = empty({1, 2, 0}), f = empty({1, 0, 3}), o = empty({1, 2, 3});
  K().matmul(e, f, o);
  EXPECT_VALUES(o, {0, 0, 0, 0, 0, 0});
}

// ---- gather / scatter_add ----

TEST(Kernels, GatherAndScatterAdd) {
  Tensor in = iota({2, 3});
  Tensor index = make({2, 0, 1, 1}, {2, 2}, kLong), out = empty({2, 2});
  K().gather(in, 1, index, out);
  EXPECT_VALUES(out, {2, 0, 4, 4});
  // index_select through an expanded 1-D index: rows 1, 0, 1 of a [2, 3] tensor.
  Tensor rows = make({1, 0, 1}, {3}, kLong);
  Tensor sel = empty({3, 3});
  K().gather(in, 0, make_view(rows, {3, 3}, {1, 0}, 0), sel);
  EXPECT_VALUES(sel, {3, 4, 5, 0, 1, 2, 3, 4, 5});
  Tensor acc = zeros({2, 3});
  K().scatter_add(acc, 0, make_view(rows, {3, 3}, {1, 0}, 0), sel);  // index_add with collisions
  EXPECT_VALUES(acc, {0, 1, 2, 6, 8, 10});
  Tensor acc_t = zeros({3, 2}, kLong);
  K().scatter_add(transposed(acc_t, 0, 1), 1, index, make({1, 2, 3, 4}, {2, 2}, kLong));  // strided output
  EXPECT_VALUES(acc_t, {2, 0, 0, 7, 1, 0});
  EXPECT_THROW_MSG(K().gather(in, 1, make({0, 7}, {1, 2}, kLong), empty({1, 2})),
                   "gather: index 7 is out of bounds for dim 1 with size 3");
  EXPECT_THROW_MSG(K().scatter_add(acc, 0, make({-1, 0}, {1, 2}, kLong), empty({1, 2})),
                   "scatter_add: index -1 is out of bounds for dim 0 with size 2");
  EXPECT_VALUES(acc, {0, 1, 2, 6, 8, 10});  // nothing written before the check
}

// One row read or summed through a run of indices along the inner dim (the index expanded over the outer
// dims), and an arg reduction over an outer dim of contiguous runs (max pooling's max over window offsets).
// They take typed loops, and scatter_add splits them over threads by rows; both must equal naive loops.
TEST(Kernels, RowGatherScatterAndOuterArgReduceMatchNaiveLoops) {
  const int64_t rows = 64, len = 37, picks = 600;
  const std::vector<double> v = small_ints(rows * len, 3), src_v = small_ints(rows * picks, 5);
  std::vector<double> idx_v(picks);
  for (int64_t i = 0; i < picks; ++i) idx_v[i] = static_cast<double>((i * 7 + i / 5) % len);  // repeats
  Tensor in = make(v, {2, rows / 2, len}), src = make(src_v, {2, rows / 2, picks});
  Tensor idx = make(idx_v, {picks}, kLong);
  Tensor index = make_view(idx, {2, rows / 2, picks}, {0, 0, 1}, 0);
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor out = empty({2, rows / 2, picks}), acc = zeros({2, rows / 2, len});
    K().gather(in, 2, index, out);
    K().scatter_add(acc, 2, index, src);
    std::vector<double> want_out(rows * picks), want_acc(rows * len, 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < picks; ++i) {
        const auto j = static_cast<int64_t>(idx_v[i]);
        want_out[r * picks + i] = v[r * len + j];
        want_acc[r * len + j] += src_v[r * picks + i];
      }
    EXPECT_EQ(values(out), want_out) << threads << " thread(s)";
    EXPECT_EQ(values(acc), want_acc) << threads << " thread(s)";
  }
  set_num_threads(saved);

  // Max and min over dim 1 of [3, 4, 50]: first extreme value wins, the first NaN wins over everything.
  std::vector<double> w = small_ints(3 * 4 * 50, 9);
  w[1 * 50 + 7] = NAN;        // batch 0, offset 1, position 7
  w[(8 + 3) * 50 + 7] = NAN;  // batch 2, offset 3, position 7: a later NaN after the first
  w[(8 + 0) * 50 + 7] = NAN;  // batch 2, offset 0
  Tensor x = make(w, {3, 4, 50});
  for (ReduceKind kind : {ReduceKind::Max, ReduceKind::Min}) {
    Tensor best = empty({3, 1, 50}), at = empty({3, 1, 50}, kLong);
    K().arg_reduce(kind, x, 1, best, at);
    const auto got_best = values(best), got_at = values(at);
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t p = 0; p < 50; ++p) {
        int64_t want = 0;
        for (int64_t k = 1; k < 4 && !std::isnan(w[(b * 4 + want) * 50 + p]); ++k) {
          const double c = w[(b * 4 + k) * 50 + p], cur = w[(b * 4 + want) * 50 + p];
          if (std::isnan(c) || (kind == ReduceKind::Max ? c > cur : c < cur)) want = k;
        }
        ASSERT_EQ(got_at[b * 50 + p], want) << b << " " << p;
        const double want_v = w[(b * 4 + want) * 50 + p];
        if (std::isnan(want_v)) {
          ASSERT_TRUE(std::isnan(got_best[b * 50 + p]));
        } else {
          ASSERT_EQ(got_best[b * 50 + p], want_v);
        }
      }
  }
}

// im2col against the definition (strided, padded, dilated, non-square, the pad value, an integer dtype's -inf),
// and col2im as its adjoint: <im2col(x), c> == <x, col2im(c)> with padding contributing nothing.
TEST(Kernels, Im2colMatchesTheWindowsAndCol2imIsItsAdjoint) {
  const Window2d g{{2, 3}, {2, 1}, {1, 2}, {1, 2}, {5, 6}, {3, 6}};  // kernel, stride, dilation, pad, in, out
  const int64_t n = 2, c = 3, offsets = g.offsets(), positions = g.positions(), hw = g.in[0] * g.in[1];
  const std::vector<double> xv = small_ints(n * c * hw, 7), cv = small_ints(n * c * offsets * positions, 11);
  for (ScalarType dt : {kFloat, kFloat64, kLong}) {
    Tensor x = make(xv, {n, c, g.in[0], g.in[1]}, dt), cols = empty({n, c, offsets, positions}, dt);
    const double pad = dt == kLong ? -INFINITY : -7.5;
    K().im2col(x, g, pad, cols);
    const double want_pad = dt == kLong ? static_cast<double>(std::numeric_limits<int64_t>::lowest()) : -7.5;
    std::vector<double> want(n * c * offsets * positions);
    for (int64_t p = 0; p < n * c; ++p)
      for (int64_t k = 0; k < offsets; ++k)
        for (int64_t l = 0; l < positions; ++l) {
          const int64_t y = l / g.out[1] * g.stride[0] - g.pad[0] + k / g.kernel[1] * g.dilation[0];
          const int64_t x_ = l % g.out[1] * g.stride[1] - g.pad[1] + k % g.kernel[1] * g.dilation[1];
          const bool inside = y >= 0 && y < g.in[0] && x_ >= 0 && x_ < g.in[1];
          want[(p * offsets + k) * positions + l] = inside ? xv[p * hw + y * g.in[1] + x_] : want_pad;
        }
    EXPECT_EQ(values(cols), want) << dt;

    Tensor folded = empty({n, c, g.in[0], g.in[1]}, dt);
    K().col2im(make(cv, {n, c, offsets, positions}, dt), g, folded);
    K().im2col(x, g, 0, cols);
    double lhs = 0, rhs = 0;
    const auto colv = values(cols), fv = values(folded);
    for (size_t i = 0; i < cv.size(); ++i) lhs += colv[i] * cv[i];
    for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * fv[i];
    EXPECT_EQ(lhs, rhs) << dt;
  }
  Tensor x = empty({1, 1, 5, 6}), bad = empty({1, 1, offsets, positions + 1});
  EXPECT_THROW_MSG(K().im2col(x, g, 0, bad), "im2col: expected columns [1, 1, 6, 18], got [1, 1, 6, 19]");
  EXPECT_THROW_MSG(K().col2im(empty({1, 1, offsets, positions}, kBool), g, empty({1, 1, 5, 6}, kBool)),
                   "col2im does not support Bool");
}

// Blocks above the small-block classes are reused at their exact size and never handed out for a larger
// request. (Sanitizer builds bypass the cache, where only the second half holds.)
TEST(Kernels, LargeBlocksAreReusedOnlyAtTheirSize) {
  const size_t big = size_t{12} << 20;
  void* p = K().allocate(Device(kCPU), big);
  K().deallocate(Device(kCPU), p, big);
  void* larger = K().allocate(Device(kCPU), big + (size_t{1} << 20));
  EXPECT_NE(larger, p);  // p is cached (under ASan: quarantined), so a larger block lies elsewhere
#if !defined(__SANITIZE_ADDRESS__)
  void* again = K().allocate(Device(kCPU), big - 1000);  // the same 64 KiB grain
  EXPECT_EQ(again, p);
  K().deallocate(Device(kCPU), again, big - 1000);
#endif
  K().deallocate(Device(kCPU), larger, big + (size_t{1} << 20));
}

// ---- random ----

TEST(Kernels, RandomIsReproducibleAndOffsetAddressed) {
  const int64_t n = 100000;
  for (ScalarType dt : {kFloat, kFloat64}) {
    Tensor a = empty({n}, dt), b = empty({n}, dt), tail = empty({n - 10}, dt);
    K().uniform(a, 0, 1, 42, 0);
    K().uniform(b, 0, 1, 42, 0);
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
    K().uniform(tail, 0, 1, 42, 10);  // value i of offset 10 is value i + 10 of offset 0
    EXPECT_EQ(std::memcmp(tail.data_ptr(), static_cast<char*>(a.data_ptr()) + 10 * a.element_size(), tail.nbytes()), 0);
    K().uniform(b, 0, 1, 42, n);
    EXPECT_NE(values(a), values(b));
    K().uniform(b, 0, 1, 43, 0);
    EXPECT_NE(values(a), values(b));
    auto v = values(a);
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
    EXPECT_NEAR(mean, 0.5, 0.01);
    for (double x : v) ASSERT_TRUE(x >= 0 && x < 1);
    // A range where float rounding of lo + u * (hi - lo) would reach hi.
    K().uniform(a, 1, 1.0000001, 7, 0);
    for (double x : values(a)) ASSERT_TRUE(x >= 1 && x < static_cast<double>(static_cast<float>(1.0000001)));

    K().normal(a, 2, 3, 42, 0);
    v = values(a);
    mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    EXPECT_NEAR(mean, 2, 0.05);
    EXPECT_NEAR(std::sqrt(var / n), 3, 0.05);
  }
  Tensor ints = empty({n}, kLong);
  K().uniform_int(ints, -3, 4, 1, 0);
  std::vector<int64_t> counts(7, 0);
  for (double x : values(ints)) {
    ASSERT_TRUE(x >= -3 && x < 4) << x;
    ++counts[static_cast<int64_t>(x) + 3];
  }
  for (int64_t c : counts) EXPECT_NEAR(c, n / 7.0, n / 7.0 * 0.05);
  EXPECT_THROW_MSG(K().normal(ints, 0, 1, 0, 0), "normal does not support Long");
}

TEST(Kernels, ThreadCountDoesNotChangeResults) {
  const int64_t n = 1 << 20;
  const int saved = get_num_threads();
  std::vector<std::vector<double>> randoms, sums;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    EXPECT_EQ(get_num_threads(), threads);
    Tensor r = empty({n}), s = empty({1}), si = empty({1}, kLong), ri = empty({n}, kLong);
    K().uniform(r, -1, 1, 5, 123);
    K().reduce(ReduceKind::Sum, r, {0}, s);
    K().uniform_int(ri, -1000, 1000, 5, 0);
    K().reduce(ReduceKind::Sum, ri, {0}, si);
    randoms.push_back(values(r));
    sums.push_back({values(s)[0], values(si)[0]});
  }
  set_num_threads(saved);
  EXPECT_EQ(randoms[0], randoms[1]);
  EXPECT_EQ(randoms[0], randoms[2]);
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
  EXPECT_THROW_MSG(set_num_threads(0), "set_num_threads: expected a positive thread count");
  // 100000 threads crashed the OpenMP runtime in the next parallel kernel; the bound itself still runs one.
  EXPECT_GE(max_num_threads(), 1024);
  EXPECT_THROW_MSG(set_num_threads(100000), "set_num_threads: 100000 threads is more than max_num_threads() = " +
                                                std::to_string(max_num_threads()));
  EXPECT_EQ(get_num_threads(), saved);
  set_num_threads(max_num_threads());
  Tensor r = empty({n}), s = empty({1});
  K().uniform(r, -1, 1, 5, 123);
  K().reduce(ReduceKind::Sum, r, {0}, s);
  set_num_threads(saved);
  EXPECT_EQ(values(r), randoms[0]);
  EXPECT_EQ(values(s)[0], sums[0][0]);
}

TEST(Kernels, AllocateIsAligned) {
  for (size_t n : {0, 1, 63, 64, 1000}) {
    void* p = K().allocate(Device(kCPU), n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    K().deallocate(Device(kCPU), p, n);
  }
}

// INT64_MIN / -1 overflows: it wraps as two's complement negation instead of trapping (SIGFPE on x86).
TEST(Kernels, IntegerDivisionByMinusOneWraps) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  Tensor a = tensor({kMin, int64_t{7}, int64_t{-7}, int64_t{5}});
  Tensor b = tensor({int64_t{-1}, int64_t{-1}, int64_t{2}, int64_t{0}});
  Tensor out = empty({4}, kLong);
  K().binary(BinaryOp::Div, a, b, out);
  const int64_t* p = out.data_ptr<int64_t>();
  EXPECT_EQ(p[0], kMin);
  EXPECT_EQ(p[1], -7);
  EXPECT_EQ(p[2], -3);  // truncates toward zero
  EXPECT_EQ(p[3], 0);   // x / 0 gives 0
}
