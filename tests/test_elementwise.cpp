// Elementwise ops: values against hand-computed numbers, libtorch's type promotion, broadcasting,
// gradients (gradcheck in float64 with broadcast and non-contiguous inputs, gradgradcheck) and errors.

#include <cmath>
#include <sstream>

#include <limits>

#include "helpers.h"

using namespace strata;

// ---- values ----

TEST(Elementwise, ArithmeticValuesAndBroadcast) {
  Tensor a = tensor({1.0, 2.0, 3.0});
  Tensor b = tensor({4.0, 5.0, 6.0});
  EXPECT_VALUES(a + b, {5, 7, 9});
  EXPECT_VALUES(a - b, {-3, -3, -3});
  EXPECT_VALUES(a * b, {4, 10, 18});
  EXPECT_VALUES(a / b, {0.25, 0.4, 0.5});
  EXPECT_VALUES(add(a, b, 2), {9, 12, 15});
  EXPECT_VALUES(sub(a, b, 0.5), {-1, -0.5, 0});
  EXPECT_VALUES(a.add(b, -1), {-3, -3, -3});
  EXPECT_VALUES(-a, {-1, -2, -3});
  // [2, 1] with [3] -> [2, 3]
  Tensor col = tensor({10.0, 20.0}).reshape({2, 1});
  Tensor sum = col + a;
  EXPECT_EQ(sum.sizes(), IntArrayRef({2, 3}));
  EXPECT_VALUES(sum, {11, 12, 13, 21, 22, 23});
  EXPECT_VALUES(col * a, {10, 20, 30, 20, 40, 60});
}

TEST(Elementwise, ScalarOverloads) {
  Tensor a = tensor({1.0, 2.0, 4.0});
  EXPECT_VALUES(a + 1.0, {2, 3, 5});
  EXPECT_VALUES(1.0 + a, {2, 3, 5});
  EXPECT_VALUES(a - 1.0, {0, 1, 3});
  EXPECT_VALUES(1.0 - a, {0, -1, -3});
  EXPECT_VALUES(a * 3.0, {3, 6, 12});
  EXPECT_VALUES(3.0 * a, {3, 6, 12});
  EXPECT_VALUES(a / 2.0, {0.5, 1, 2});
  EXPECT_VALUES(2.0 / a, {2, 1, 0.5});
  EXPECT_VALUES(a.add(0.5), {1.5, 2.5, 4.5});
  EXPECT_VALUES(a.sub(0.5), {0.5, 1.5, 3.5});
  EXPECT_VALUES(a.mul(-1.0), {-1, -2, -4});
  EXPECT_VALUES(a.div(4.0), {0.25, 0.5, 1});
  EXPECT_VALUES(a.pow(2.0), {1, 4, 16});
  EXPECT_VALUES(a.pow(0.5), {1, std::sqrt(2.0), 2});
  EXPECT_VALUES(a.pow(tensor({2.0, 3.0, 0.5})), {1, 8, 2});
}

TEST(Elementwise, UnaryValues) {
  Tensor x = tensor({-1.0, 0.5, 2.0}, kFloat64);
  EXPECT_VALUES(x.exp(), {std::exp(-1.0), std::exp(0.5), std::exp(2.0)});
  EXPECT_VALUES(x.abs(), {1, 0.5, 2});
  EXPECT_VALUES(x.abs().log(), {0, std::log(0.5), std::log(2.0)});
  EXPECT_VALUES(x.abs().sqrt(), {1, std::sqrt(0.5), std::sqrt(2.0)});
  EXPECT_VALUES(x.abs().rsqrt(), {1, 1 / std::sqrt(0.5), 1 / std::sqrt(2.0)});
  EXPECT_VALUES(x.tanh(), {-0.7615941559557649, 0.46211715726000974, 0.9640275800758169});
  EXPECT_VALUES(x.sigmoid(), {0.2689414213699951, 0.6224593312018546, 0.8807970779778823});
  EXPECT_VALUES(x.relu(), {0, 0.5, 2});
  // x * Phi(x) and the tanh approximation, computed with Python's math.erf / math.tanh.
  EXPECT_VALUES(gelu(x), {-0.15865525393145707, 0.34573123063700656, 1.9544997361036416});
  EXPECT_VALUES(gelu(x, "tanh"), {-0.15880800939172324, 0.34571400982514394, 1.954597694087775});
  EXPECT_VALUES(silu(x), {-0.2689414213699951, 0.3112296656009273, 1.7615941559557646});
  EXPECT_VALUES(x.clamp(0.0, 1.0), {0, 0.5, 1});
  EXPECT_VALUES(x.clamp(0.0), {0, 0.5, 2});
  EXPECT_VALUES(x.clamp(std::nullopt, 0.0), {-1, 0, 0});
  EXPECT_VALUES(x.clamp(1.0, 0.0), {0, 0, 0});  // min > max: everything becomes max, as torch
  EXPECT_VALUES(neg(tensor({1, -2})), {-1, 2});
  EXPECT_EQ(tensor({1, -2}).abs().dtype(), kLong);
}

TEST(Elementwise, MaximumMinimumWhere) {
  Tensor a = tensor({1.0, 5.0, 3.0});
  Tensor b = tensor({4.0, 2.0, 3.0});
  EXPECT_VALUES(maximum(a, b), {4, 5, 3});
  EXPECT_VALUES(minimum(a, b), {1, 2, 3});
  EXPECT_VALUES(a.maximum(tensor({2.0})), {2, 5, 3});
  Tensor cond = tensor({true, false, true});
  EXPECT_VALUES(where(cond, a, b), {1, 2, 3});
  Tensor w = where(cond, a, scalar_tensor(0, kFloat64));  // a 0-dim operand does not raise float32
  EXPECT_EQ(w.dtype(), kFloat32);
  EXPECT_VALUES(w, {1, 0, 3});
  Tensor grid = where(tensor({true, false}).reshape({2, 1}), a, b);  // [2, 1] with [3]
  EXPECT_EQ(grid.sizes(), IntArrayRef({2, 3}));
  EXPECT_VALUES(grid, {1, 5, 3, 4, 2, 3});
}

TEST(Elementwise, ComparisonsAndLogic) {
  Tensor a = tensor({1.0, 2.0, 3.0});
  Tensor b = tensor({3.0, 2.0, 1.0});
  EXPECT_VALUES(eq(a, b), {0, 1, 0});
  EXPECT_VALUES(ne(a, b), {1, 0, 1});
  EXPECT_VALUES(lt(a, b), {1, 0, 0});
  EXPECT_VALUES(le(a, b), {1, 1, 0});
  EXPECT_VALUES(gt(a, b), {0, 0, 1});
  EXPECT_VALUES(ge(a, b), {0, 1, 1});
  EXPECT_EQ(eq(a, b).dtype(), kBool);
  EXPECT_VALUES(a.gt(1.5), {0, 1, 1});
  EXPECT_VALUES(a.le(2.0), {1, 1, 0});
  EXPECT_VALUES(a.eq(3.0), {0, 0, 1});
  EXPECT_VALUES(a.ne(3.0), {1, 1, 0});
  EXPECT_VALUES(a.lt(2.0), {1, 0, 0});
  EXPECT_VALUES(a.ge(2.0), {0, 1, 1});
  // int64 against float32 compares in float32: 2 == 2.0
  EXPECT_VALUES(eq(tensor({1, 2, 3}), tensor({2.0, 2.0, 2.0})), {0, 1, 0});
  EXPECT_VALUES(tensor({1, 2, 3}).gt(1.5), {0, 1, 1});
  Tensor p = tensor({true, true, false, false});
  Tensor q = tensor({true, false, true, false});
  EXPECT_VALUES(logical_and(p, q), {1, 0, 0, 0});
  EXPECT_VALUES(logical_or(p, q), {1, 1, 1, 0});
  EXPECT_VALUES(logical_not(p), {0, 0, 1, 1});
  EXPECT_VALUES(tensor({0.0, 2.0}).logical_not(), {1, 0});
  EXPECT_VALUES(logical_and(tensor({0.0, 2.0}), tensor({1, 1})), {0, 1});
  EXPECT_EQ(logical_or(p, q).dtype(), kBool);
}

// ---- type promotion (libtorch's result_type) ----

TEST(Elementwise, PromotionAmongTensors) {
  Tensor i64 = tensor({1, 2});
  Tensor f32 = tensor({0.5, 1.5});
  Tensor f64t = tensor({0.5, 1.5}, kFloat64);
  Tensor b = tensor({true, false});
  EXPECT_EQ((i64 + f32).dtype(), kFloat32);
  EXPECT_VALUES(i64 + f32, {1.5, 3.5});
  EXPECT_EQ((f32 * f64t).dtype(), kFloat64);
  EXPECT_EQ((b + i64).dtype(), kLong);
  EXPECT_VALUES(b + i64, {2, 2});
  EXPECT_EQ(result_type(b, f32), kFloat32);
  EXPECT_EQ(result_type(i64, i64), kLong);
  // A 0-dim tensor only raises the result when its category is higher.
  EXPECT_EQ((f32 + scalar_tensor(1, kFloat64)).dtype(), kFloat32);
  EXPECT_EQ((scalar_tensor(1, kFloat64) * f32).dtype(), kFloat32);
  EXPECT_EQ((i64 + scalar_tensor(1, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ((i64 + scalar_tensor(1, kLong)).dtype(), kLong);
  EXPECT_EQ((f32 + scalar_tensor(7, kLong)).dtype(), kFloat32);
  EXPECT_EQ((b + scalar_tensor(7, kLong)).dtype(), kLong);
  // Two 0-dim tensors promote like dimensioned ones.
  EXPECT_EQ((scalar_tensor(1, kFloat32) + scalar_tensor(1, kFloat64)).dtype(), kFloat64);
  // Division is true division.
  Tensor q = tensor({1, 3}) / tensor({2, 2});
  EXPECT_EQ(q.dtype(), kFloat32);
  EXPECT_VALUES(q, {0.5, 1.5});
  // Integer arithmetic stays integral.
  EXPECT_EQ((i64 * i64).dtype(), kLong);
  EXPECT_VALUES(i64 * tensor({3, 4}), {3, 8});
  EXPECT_VALUES(tensor({7, -7}) - tensor({2, 2}), {5, -9});
  EXPECT_EQ(tensor({2, 3}).pow(tensor({2, 2})).dtype(), kLong);
  EXPECT_VALUES(tensor({2, 3}).pow(tensor({2, 2})), {4, 9});
  // Float ops on integers compute in float32.
  EXPECT_EQ(tensor({0, 1}).exp().dtype(), kFloat32);
  EXPECT_VALUES(tensor({0, 1}).exp(), {1, std::exp(1.0)});
}

TEST(Elementwise, PromotionWithDoubles) {
  Tensor i64 = tensor({1, 2});
  Tensor f32 = tensor({0.5, 1.5});
  EXPECT_EQ((f32 * 2.0).dtype(), kFloat32);
  EXPECT_EQ((2.0 * tensor({1.0}, kFloat64)).dtype(), kFloat64);
  Tensor r = i64 * 2.5;
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_VALUES(r, {2.5, 5});
  EXPECT_EQ((i64 + 1.0).dtype(), kFloat32);  // as torch.tensor([1]) + 1.0: any double is a float scalar
  EXPECT_EQ((1.0 - i64).dtype(), kFloat32);
  EXPECT_EQ((tensor({true}) * 2.0).dtype(), kFloat32);
  EXPECT_EQ((i64 / 2.0).dtype(), kFloat32);
  EXPECT_EQ(i64.pow(2.0).dtype(), kFloat32);
  EXPECT_EQ(i64.clamp(0.5).dtype(), kFloat32);
  EXPECT_VALUES(i64.clamp(1.5), {1.5, 2});
  EXPECT_EQ(scalar_tensor(3, kLong).mul(2.0).dtype(), kFloat32);
}

TEST(Elementwise, PromotionWithIntegralScalars) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable as a double (nor as a float32)
  Tensor l = tensor({int64_t{1}, big});
  Tensor r = l + 1;
  EXPECT_EQ(r.dtype(), kLong);
  EXPECT_EQ(r[0].item<int64_t>(), 2);
  EXPECT_EQ(r[1].item<int64_t>(), big + 1);
  EXPECT_EQ((1 + l).dtype(), kLong);
  EXPECT_EQ((l - 1)[1].item<int64_t>(), big - 1);
  EXPECT_EQ((10 - l)[0].item<int64_t>(), 9);
  Tensor tripled = l * 3;  // exact beyond 2^53: int64 math, no trip through a double
  EXPECT_EQ(tripled.dtype(), kLong);
  EXPECT_EQ(tripled[1].item<int64_t>(), 3 * big);
  EXPECT_EQ((2 * l)[1].item<int64_t>(), 2 * big);
  EXPECT_EQ(l.add(l, 2)[1].item<int64_t>(), 3 * big);
  EXPECT_EQ(add(l, 1, 2)[1].item<int64_t>(), big + 2);
  // Comparisons with an integral Scalar on int64 compute in int64: 16777217 is not a float32.
  Tensor c = tensor({16777216, 16777217});
  EXPECT_VALUES(c.eq(16777217), {0, 1});
  EXPECT_VALUES(c.ne(16777217), {1, 0});
  EXPECT_VALUES(c.lt(16777217), {1, 0});
  EXPECT_VALUES(tensor({int64_t{1}, big}).eq(big), {0, 1});
  EXPECT_VALUES(c.eq(16777217.0), {1, 1});  // a floating Scalar compares in float32, where both round alike (as torch)
  // bool tensor with an integral Scalar gives int64; with a floating one float32.
  Tensor b = tensor({true, false});
  EXPECT_EQ((b + 1).dtype(), kLong);
  EXPECT_VALUES(b + 1, {2, 1});
  EXPECT_EQ((b * 2.0).dtype(), kFloat32);
  EXPECT_VALUES(b.eq(1), {1, 0});
  // Floating tensors keep their dtype with any Scalar; integer tensors with a floating Scalar become float32.
  EXPECT_EQ((tensor({1.5}) * 2).dtype(), kFloat32);
  EXPECT_EQ((tensor({1.5}) * 2.0).dtype(), kFloat32);
  EXPECT_EQ((tensor({1.5}, kFloat64) + 1).dtype(), kFloat64);
  EXPECT_EQ((l * 2.5).dtype(), kFloat32);
  EXPECT_VALUES(tensor({2, 4}) * 2.5, {5, 10});
  EXPECT_EQ((tensor({3, 4}) / 2).dtype(), kFloat32);  // true division
  EXPECT_VALUES(tensor({3, 4}) / 2, {1.5, 2});
  EXPECT_VALUES(3 / tensor({2, 4}), {1.5, 0.75});
  EXPECT_EQ(tensor({2, 3}).pow(2).dtype(), kLong);
  EXPECT_VALUES(tensor({2, 3}).pow(2), {4, 9});
  EXPECT_THROW_MSG(tensor({2, 3}).pow(-1), "pow: integers to negative integer powers are not allowed");
  // clamp keeps int64 with integral bounds (exact), float32 with a floating one.
  Tensor cl = tensor({-5, 3, 12}).clamp(0, 9);
  EXPECT_EQ(cl.dtype(), kLong);
  EXPECT_VALUES(cl, {0, 3, 9});
  EXPECT_EQ(clamp(tensor({int64_t{0}, big + 5}), std::nullopt, big)[1].item<int64_t>(), big);
  EXPECT_EQ(tensor({-5, 3}).clamp(0, 9.5).dtype(), kFloat32);
}

TEST(Elementwise, ScalarOverloadsResolve) {
  // Each line is an overload the compiler must pick without ambiguity.
  Tensor f = tensor({1.0, 2.0});
  EXPECT_VALUES(f * 2, {2, 4});
  EXPECT_VALUES(2 * f, {2, 4});
  EXPECT_VALUES(f + 1.5f, {2.5, 3.5});
  EXPECT_VALUES(f - 2u, {-1, 0});
  EXPECT_VALUES(f / int64_t{2}, {0.5, 1});
  EXPECT_VALUES(f.add(f, 2), {3, 6});
  EXPECT_VALUES(f.sub(f, 0.5), {0.5, 1});
  EXPECT_VALUES(f.clamp(0, 1.5), {1, 1.5});
  EXPECT_VALUES(f.clamp(std::nullopt, 1), {1, 1});
  EXPECT_VALUES(f.pow(2), {1, 4});
  EXPECT_VALUES(f.gt(1), {0, 1});
  EXPECT_VALUES(f.masked_fill(tensor({true, false}), 7), {7, 2});
  Tensor g = f.clone();
  g += 1;
  g *= 2.0f;
  g -= 1L;
  g /= 2;
  EXPECT_VALUES(g, {1.5, 2.5});
}

TEST(Elementwise, ScalarPrints) {
  std::ostringstream os;
  os << Scalar(3) << " " << Scalar(2.5) << " " << Scalar(true);
  EXPECT_EQ(os.str(), "3 2.5 true");
  EXPECT_TRUE(Scalar(3).isIntegral());
  EXPECT_TRUE(Scalar(2.5f).isFloatingPoint());
  EXPECT_TRUE(Scalar(false).isBoolean());
  EXPECT_EQ(Scalar(2.5).to<int64_t>(), 2);
  EXPECT_EQ(Scalar(int64_t{1} << 60).to<int64_t>(), int64_t{1} << 60);
}

TEST(Elementwise, BoolArithmeticIsRejected) {
  Tensor b = tensor({true, false});
  EXPECT_THROW_MSG(b + b, "add: arithmetic on bool tensors is not supported; use logical_or");
  EXPECT_THROW_MSG(b * b, "mul: arithmetic on bool tensors is not supported");
  EXPECT_THROW_MSG(-b, "neg: arithmetic on bool tensors is not supported");
  EXPECT_VALUES(b * tensor({2.0, 3.0}), {2, 0});    // mixed with numbers it promotes
  EXPECT_VALUES(b / tensor({true, true}), {1, 0});  // division is true division, in float32
}

// libtorch refuses subtraction with any bool operand, Long - Bool included.
TEST(Elementwise, SubtractionWithABoolIsRejected) {
  const Tensor b = tensor({true, false}), l = tensor({3, 4});
  const std::string msg = "subtraction, the `-` operator, with a bool tensor is not supported";
  EXPECT_THROW_MSG(l - b, "sub: " + msg);
  EXPECT_THROW_MSG(b - l, msg);
  EXPECT_THROW_MSG(tensor({1.0, 2.0}) - b, msg);
  EXPECT_THROW_MSG(l - true, msg);
  EXPECT_THROW_MSG(1 - b, msg);
  EXPECT_THROW_MSG(l.sub(b), msg);
  Tensor target = tensor({5, 6});
  EXPECT_THROW_MSG(target.sub_(b), "sub_: " + msg);
  EXPECT_THROW_MSG(target -= true, msg);
  EXPECT_VALUES(target, {5, 6});
  EXPECT_VALUES(l - b.logical_not().to(kLong), {3, 3});
}

// libtorch's NaN rules: relu passes the gradient of a NaN through (zero only where y <= 0); maximum and
// minimum give an input nothing only where it loses, so with a NaN on either side both get the gradient.
TEST(Elementwise, NanGradientRulesMatchLibtorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({nan, -1.0, 2.0}, f64());
  x.relu().sum().backward();
  EXPECT_VALUES(x.grad(), {1, 0, 1});
  // The same through relu's backward kernel, for a float32 input and in a backward that builds a graph.
  Tensor xf = tensor({nan, -1.0, 0.0, 2.0}).requires_grad_(true);
  xf.relu().sum().backward();
  EXPECT_VALUES(xf.grad(), {1, 0, 0, 1});
  Tensor xg = tensor({nan, -1.0, 0.0, 2.0}, f64());
  EXPECT_VALUES(autograd::grad({xg.relu().sum()}, {xg}, {}, std::nullopt, /*create_graph=*/true)[0], {1, 0, 0, 1});
  Tensor a = tensor({nan, 1.0, 3.0, 2.0}, f64()), b = tensor({0.0, nan, 1.0, 2.0}, f64());
  a.maximum(b).sum().backward();
  EXPECT_VALUES(a.grad(), {1, 1, 1, 0.5});
  EXPECT_VALUES(b.grad(), {1, 1, 0, 0.5});
  Tensor c = tensor({nan, 1.0, 3.0}, f64()), d = tensor({0.0, nan, 1.0}, f64());
  c.minimum(d).sum().backward();
  EXPECT_VALUES(c.grad(), {1, 1, 0});
  EXPECT_VALUES(d.grad(), {1, 1, 1});
}

// ---- errors ----

TEST(Elementwise, Errors) {
  EXPECT_THROW_MSG(zeros({2, 3}) + zeros({4}), "add: shapes [2, 3] and [4] cannot be broadcast together");
  EXPECT_THROW_MSG(mul(zeros({2}), zeros({3})), "mul: shapes [2] and [3]");
  EXPECT_THROW_MSG(where(tensor({1.0, 0.0}), zeros({2}), zeros({2})), "where: expected a bool condition, got Float");
  EXPECT_THROW_MSG(gelu(zeros({2}), "fast"), "gelu: approximate must be \"none\" or \"tanh\", got \"fast\"");
  EXPECT_THROW_MSG(zeros({2}).clamp(std::nullopt, std::nullopt), "clamp: at least one of 'min' or 'max'");
  EXPECT_THROW_MSG(add(tensor({1, 2}), tensor({1, 2}), 0.5),
                   "add: for integral input tensors, argument alpha must not be a floating point number, got 0.5");
  EXPECT_THROW_MSG(tensor({1, 2}).add_(tensor({1, 2}), 2.0), "add_: for integral input tensors, argument alpha");
}

// ---- gradients ----

TEST(Elementwise, GradcheckArithmeticWithBroadcast) {
  manual_seed(1);
  auto add_fn = [](const tensor_list& in) { return add(in[0], in[1], 0.5); };
  auto sub_fn = [](const tensor_list& in) { return sub(in[0], in[1], 2); };
  auto mul_fn = [](const tensor_list& in) { return in[0] * in[1]; };
  auto div_fn = [](const tensor_list& in) { return in[0] / in[1]; };
  for (auto [sa, sb] :
       {std::pair<DimVector, DimVector>{{3, 1}, {1, 4}}, {{2, 3}, {3}}, {{2, 3}, {2, 3}}, {{}, {2, 2}}}) {
    EXPECT_GRADCHECK(add_fn, {leaf(sa), leaf(sb)});
    EXPECT_GRADCHECK(sub_fn, {leaf(sa), leaf(sb)});
    EXPECT_GRADCHECK(mul_fn, {leaf(sa), leaf(sb)});
    EXPECT_GRADCHECK(div_fn, {leaf(sa), leaf_in(sb, 0.5, 2.0)});
  }
  auto scalars = [](const tensor_list& in) {
    return (in[0] + 1.5) * 2.0 - 3.0 / (in[0] * in[0] + 1.0) + (2.0 - in[0]) / 4.0 - (-in[0]) + in[0].mul(3.0);
  };
  EXPECT_GRADCHECK(scalars, {leaf({5})});
}

TEST(Elementwise, GradcheckNonContiguousInputs) {
  manual_seed(2);
  // Transposed, narrowed and expanded views made inside the function.
  auto f = [](const tensor_list& in) {
    Tensor at = in[0].t();              // [4, 3] with strides (1, 4)
    Tensor bn = in[1].narrow(1, 1, 3);  // [4, 3] out of [4, 5]
    Tensor ce = in[2].expand({4, 3});   // stride 0 along dim 0
    return (at * bn + ce) / (at.abs() + 1.0) - bn.exp() * ce.tanh();
  };
  EXPECT_GRADCHECK(f, {leaf({3, 4}), leaf({4, 5}), leaf({3})});
}

TEST(Elementwise, GradcheckMixedDtypes) {
  // float64 leaf times a float32 tensor: the result is float64 and the float32 input gets a float32 gradient.
  Tensor a = tensor({1.0, 2.0}, f64());
  Tensor b = tensor({3.0, 4.0}, TensorOptions().requires_grad(true));
  Tensor y = a * b;
  EXPECT_EQ(y.dtype(), kFloat64);
  y.sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat64);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  EXPECT_VALUES(a.grad(), {3, 4});
  EXPECT_VALUES(b.grad(), {1, 2});
}

TEST(Elementwise, GradcheckUnary) {
  manual_seed(3);
  auto exp_fn = [](const tensor_list& in) { return in[0].exp(); };
  auto log_fn = [](const tensor_list& in) { return in[0].log(); };
  auto sqrt_fn = [](const tensor_list& in) { return in[0].sqrt(); };
  auto rsqrt_fn = [](const tensor_list& in) { return in[0].rsqrt(); };
  auto abs_fn = [](const tensor_list& in) { return in[0].abs(); };
  auto tanh_fn = [](const tensor_list& in) { return in[0].tanh(); };
  auto sigmoid_fn = [](const tensor_list& in) { return in[0].sigmoid(); };
  auto relu_fn = [](const tensor_list& in) { return in[0].relu(); };
  auto neg_fn = [](const tensor_list& in) { return -in[0]; };
  auto gelu_fn = [](const tensor_list& in) { return gelu(in[0]); };
  auto gelu_tanh_fn = [](const tensor_list& in) { return gelu(in[0], "tanh"); };
  auto silu_fn = [](const tensor_list& in) { return silu(in[0]); };
  auto clamp_fn = [](const tensor_list& in) { return in[0].clamp(-0.5, 0.5); };
  EXPECT_GRADCHECK(exp_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(log_fn, {leaf_in({2, 3}, 0.5, 3)});
  EXPECT_GRADCHECK(sqrt_fn, {leaf_in({2, 3}, 0.5, 3)});
  EXPECT_GRADCHECK(rsqrt_fn, {leaf_in({2, 3}, 0.5, 3)});
  EXPECT_GRADCHECK(abs_fn, {tensor({-2.0, -0.5, 0.3, 1.7}, f64())});
  EXPECT_GRADCHECK(tanh_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(sigmoid_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(relu_fn, {tensor({-2.0, -0.5, 0.3, 1.7}, f64())});
  EXPECT_GRADCHECK(neg_fn, {leaf({3})});
  EXPECT_GRADCHECK(gelu_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(gelu_tanh_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(silu_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(clamp_fn, {tensor({-2.0, -0.3, 0.2, 1.7}, f64())});
}

TEST(Elementwise, GradcheckPow) {
  manual_seed(4);
  auto pow_t = [](const tensor_list& in) { return in[0].pow(in[1]); };
  auto pow_s = [](const tensor_list& in) { return in[0].pow(2.5) + in[0].pow(-1.0) + in[0].pow(3.0); };
  EXPECT_GRADCHECK(pow_t, {leaf_in({2, 3}, 0.5, 2), leaf({2, 3})});
  EXPECT_GRADCHECK(pow_t, {leaf_in({3, 1}, 0.5, 2), leaf({4})});  // broadcast base and exponent
  EXPECT_GRADCHECK(pow_s, {leaf_in({4}, 0.5, 2)});
  // pow(x, 0) has zero gradient, and 0 ** e with e >= 0 gives no NaN to the exponent.
  Tensor x = tensor({0.0, 2.0}, f64());
  x.pow(0.0).sum().backward();
  EXPECT_VALUES(x.grad(), {0, 0});
  Tensor e = tensor({2.0, 3.0}, f64());
  zeros({2}, kFloat64).pow(e).sum().backward();
  EXPECT_VALUES(e.grad(), {0, 0});
}

TEST(Elementwise, GradcheckMaximumMinimumWhere) {
  manual_seed(5);
  auto max_fn = [](const tensor_list& in) { return maximum(in[0], in[1]); };
  auto min_fn = [](const tensor_list& in) { return minimum(in[0], in[1]); };
  EXPECT_GRADCHECK(max_fn, {leaf({3, 1}), leaf({1, 4})});
  EXPECT_GRADCHECK(min_fn, {leaf({2, 3}), leaf({3})});
  Tensor cond = tensor({true, false, true, false, false, true}).reshape({2, 3});
  auto where_fn = [cond](const tensor_list& in) { return where(cond, in[0], in[1]); };
  EXPECT_GRADCHECK(where_fn, {leaf({2, 3}), leaf({3})});
  EXPECT_GRADCHECK(where_fn, {leaf({1}), leaf({2, 1})});
}

TEST(Elementwise, MaximumSplitsGradientOnTies) {
  Tensor a = tensor({1.0, 2.0, 3.0}, f64());
  Tensor b = tensor({2.0, 2.0, 1.0}, f64());
  maximum(a, b).sum().backward();
  EXPECT_VALUES(a.grad(), {0, 0.5, 1});
  EXPECT_VALUES(b.grad(), {1, 0.5, 0});
  Tensor c = tensor({1.0, 2.0}, f64());
  Tensor d = tensor({2.0, 2.0}, f64());
  minimum(c, d).sum().backward();
  EXPECT_VALUES(c.grad(), {1, 0.5});
  EXPECT_VALUES(d.grad(), {0, 0.5});
}

TEST(Elementwise, GradientReachesOnlyInputsThatNeedIt) {
  Tensor w = tensor({2.0, 3.0}, f64());
  Tensor x = tensor({5.0, 7.0}, kFloat64);
  Tensor y = (x * w + x) / (x - 1.0);
  y.sum().backward();
  EXPECT_VALUES(w.grad(), {5.0 / 4.0, 7.0 / 6.0});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(tensor({1.0, 2.0}).exp().requires_grad());
  NoGradGuard no_grad;
  EXPECT_FALSE((w * 2.0).requires_grad());
}

TEST(Elementwise, GradgradcheckSmoothOps) {
  manual_seed(6);
  auto mul_fn = [](const tensor_list& in) { return in[0] * in[1] * in[0]; };
  auto div_fn = [](const tensor_list& in) { return in[0] / in[1]; };
  auto pow_fn = [](const tensor_list& in) { return in[0].pow(in[1]) + in[0].pow(3.0); };
  auto exp_fn = [](const tensor_list& in) { return in[0].exp(); };
  auto tanh_fn = [](const tensor_list& in) { return in[0].tanh(); };
  auto sigmoid_fn = [](const tensor_list& in) { return in[0].sigmoid(); };
  auto gelu_fn = [](const tensor_list& in) { return gelu(in[0]) + gelu(in[0], "tanh"); };
  auto silu_fn = [](const tensor_list& in) { return silu(in[0]); };
  auto misc_fn = [](const tensor_list& in) { return in[0].log() + in[0].sqrt() + in[0].rsqrt() - 1.0 / in[0]; };
  EXPECT_GRADGRADCHECK(mul_fn, {leaf({2, 3}), leaf({3})});
  EXPECT_GRADGRADCHECK(div_fn, {leaf({2, 3}), leaf_in({2, 1}, 0.5, 2)});
  EXPECT_GRADGRADCHECK(pow_fn, {leaf_in({3}, 0.5, 2), leaf({3})});
  EXPECT_GRADGRADCHECK(exp_fn, {leaf({3})});
  EXPECT_GRADGRADCHECK(tanh_fn, {leaf({3})});
  EXPECT_GRADGRADCHECK(sigmoid_fn, {leaf({3})});
  EXPECT_GRADGRADCHECK(gelu_fn, {leaf({4})});
  EXPECT_GRADGRADCHECK(silu_fn, {leaf({4})});
  EXPECT_GRADGRADCHECK(misc_fn, {leaf_in({3}, 0.5, 2)});
}

// libtorch's operators: comparisons give bool tensors (a scalar on either side), & | ^ ~ are bitwise on
// integers and logical on bool, ! is logical_not.
TEST(Elementwise, ComparisonAndBitwiseOperators) {
  Tensor a = tensor({1.0, 2.0, 3.0}), b = tensor({3.0, 2.0, 1.0});
  EXPECT_VALUES(a > b, {0, 0, 1});
  EXPECT_VALUES(a >= b, {0, 1, 1});
  EXPECT_VALUES(a < b, {1, 0, 0});
  EXPECT_VALUES(a <= b, {1, 1, 0});
  EXPECT_VALUES(a == b, {0, 1, 0});
  EXPECT_VALUES(a != b, {1, 0, 1});
  EXPECT_EQ((a > b).dtype(), kBool);
  EXPECT_VALUES(a > 1.5, {0, 1, 1});
  EXPECT_VALUES(2 < a, {0, 0, 1});   // 2 < a is a > 2
  EXPECT_VALUES(2 >= a, {1, 1, 0});  // a <= 2
  EXPECT_VALUES(2 == a, {0, 1, 0});
  EXPECT_VALUES(2 != a, {1, 0, 1});
  Tensor i = tensor({12, 10, -1}), j = tensor({10, 6, 1});
  EXPECT_VALUES(i & j, {8, 2, 1});
  EXPECT_VALUES(i | j, {14, 14, -1});
  EXPECT_VALUES(i ^ j, {6, 12, -2});
  EXPECT_VALUES(i & 4, {4, 0, 4});
  EXPECT_VALUES(1 | i, {13, 11, -1});
  EXPECT_VALUES(~i, {-13, -11, 0});
  EXPECT_EQ((i & j).dtype(), kLong);
  Tensor p = a > 1.5, q = a < 2.5;
  EXPECT_VALUES(p & q, {0, 1, 0});
  EXPECT_VALUES(p | q, {1, 1, 1});
  EXPECT_VALUES(p ^ q, {1, 0, 1});
  EXPECT_VALUES(~p, {1, 0, 0});
  EXPECT_VALUES(!p, {1, 0, 0});
  EXPECT_VALUES(!a, {0, 0, 0});  // logical_not of floats
  EXPECT_EQ((p & q).dtype(), kBool);
  EXPECT_THROW_MSG(a & b, "bitwise_and: expected integer or bool operands, got Float and Float");
  EXPECT_THROW_MSG(i | 1.5, "bitwise_or: expected integer or bool operands");
  EXPECT_THROW_MSG(~a, "bitwise_not: expected an integer or bool tensor, got Float");
  // Strided and broadcast operands.
  Tensor m = arange(6).reshape({2, 3});
  EXPECT_VALUES(m.t() & tensor({1, 3}), {0, 3, 1, 0, 0, 1});
  EXPECT_VALUES(m.t() > tensor({1, 3}).to(kFloat), {0, 0, 0, 1, 1, 1});
}
