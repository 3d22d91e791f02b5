// CPU-versus-CUDA parity of the elementwise ops: every unary and binary op over contiguous, transposed,
// strided, expanded, permuted, 0-dim and large inputs in float32 and float64 (int64 and bool where the op
// takes them); libtorch's type promotion, wrapped numbers, in-place ops into views (the rest of the base
// untouched), and float16/bfloat16 against a float64 reference of the rounded inputs.

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
using strata::testing::uniform;

namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

/// Inputs of dtype dt: floating uniform in [lo, hi), int64 the integers of [lo, hi] within [-5, 5], bool half true.
Tensor input(IntArrayRef sizes, ScalarType dt, double lo, double hi, uint64_t seed) {
  if (dt == kLong) {
    const auto low = std::max<int64_t>(-5, static_cast<int64_t>(std::ceil(lo)));
    const auto high = std::max(low, std::min<int64_t>(5, static_cast<int64_t>(std::floor(hi))));
    return indices(sizes, high - low + 1, seed) + low;
  }
  if (dt == kBool) return uniform(sizes, -1, 1, kFloat, seed).gt(0.0);
  return uniform(sizes, lo, hi, dt, seed);
}

/// Where an operand's elements lie: the base tensor made on the CPU and the view taken on each device.
struct Layout {
  const char* name;
  DimVector base;
  UnaryFn view;
};
UnaryFn same() {
  return [](const Tensor& t) { return t; };
}

/// One operand's layouts, each giving a [37, 129] tensor (or another shape where the name says).
const std::vector<Layout>& unary_layouts() {
  static const std::vector<Layout> layouts = {
      {"contiguous", {37, 129}, same()},
      {"transposed", {129, 37}, [](const Tensor& t) { return t.t(); }},
      {"strided", {37, 258}, [](const Tensor& t) { return t.slice(1, 1, 258, 2); }},
      {"expanded",
       {1, 129},
       [](const Tensor& t) {
         return t.expand({37, 129});
       }},
      {"permuted_3d",
       {8, 9, 10},
       [](const Tensor& t) {
         return t.permute({2, 0, 1});
       }},
      {"zero_dim", {}, same()},
      {"large", {(int64_t{1} << 21) + 5}, same()},  // many blocks, an odd tail
  };
  return layouts;
}

/// Two operands' layouts: sizes of a and b and the views that broadcast them together.
struct PairLayout {
  const char* name;
  DimVector a, b;
  UnaryFn view_a, view_b;
};
const std::vector<PairLayout>& binary_layouts() {
  static const std::vector<PairLayout> layouts = {
      {"contiguous", {37, 129}, {37, 129}, same(), same()},
      {"transposed_a", {129, 37}, {37, 129}, [](const Tensor& t) { return t.t(); }, same()},
      {"broadcast_col_row", {37, 1}, {129}, same(), same()},
      {"expanded_and_strided",
       {1, 129},
       {37, 258},
       [](const Tensor& t) {
         return t.expand({37, 129});
       },
       [](const Tensor& t) { return t.slice(1, 0, 258, 2); }},
      {"zero_dim_a", {}, {37, 129}, same(), same()},
      {"broadcast_3d", {4, 1, 6}, {5, 1}, same(), same()},
      {"large", {(int64_t{1} << 20) + 3}, {(int64_t{1} << 20) + 3}, same(), same()},
  };
  return layouts;
}

// ---- unary ops ----

struct Unary {
  const char* name;
  UnaryFn fn;
  double lo, hi;  // floating inputs are drawn from [lo, hi)
  bool integers;  // also run on int64 inputs
  bool bools;     // also run on bool inputs
};
void PrintTo(const Unary& u, std::ostream* os) { *os << u.name; }

const std::vector<Unary> kUnary = {
    {"neg", [](const Tensor& a) { return -a; }, -3, 3, true, false},
    {"exp", [](const Tensor& a) { return exp(a); }, -4, 4, true, false},
    {"log", [](const Tensor& a) { return log(a); }, 0.05, 10, false, false},
    {"sqrt", [](const Tensor& a) { return sqrt(a); }, 0.01, 10, false, false},
    {"rsqrt", [](const Tensor& a) { return rsqrt(a); }, 0.05, 10, false, false},
    {"abs", [](const Tensor& a) { return abs(a); }, -3, 3, true, false},
    {"tanh", [](const Tensor& a) { return tanh(a); }, -4, 4, false, false},
    {"sigmoid", [](const Tensor& a) { return sigmoid(a); }, -8, 8, false, false},
    {"relu", [](const Tensor& a) { return relu(a); }, -3, 3, true, false},
    {"gelu", [](const Tensor& a) { return gelu(a); }, -5, 5, false, false},
    {"gelu_tanh", [](const Tensor& a) { return gelu(a, "tanh"); }, -5, 5, false, false},
    {"silu", [](const Tensor& a) { return silu(a); }, -6, 6, false, false},
    {"clamp", [](const Tensor& a) { return clamp(a, -0.5, 0.75); }, -2, 2, true, false},
    {"clamp_min", [](const Tensor& a) { return a.clamp(0.1); }, -2, 2, false, false},
    {"clamp_max", [](const Tensor& a) { return a.clamp(std::nullopt, 2); }, -4, 4, true, false},
    {"square", [](const Tensor& a) { return a.pow(2); }, -3, 3, true, false},
    {"pow_half", [](const Tensor& a) { return a.pow(0.5); }, 0.01, 4, false, false},
    {"pow_neg", [](const Tensor& a) { return a.pow(-1.5); }, 0.1, 4, false, false},
    {"logical_not", [](const Tensor& a) { return logical_not(a); }, -1, 1, true, true},
    {"add_scalar", [](const Tensor& a) { return a + 2.5; }, -3, 3, true, true},
    {"add_int_scalar", [](const Tensor& a) { return a + 3; }, -3, 3, true, false},
    {"rsub_scalar", [](const Tensor& a) { return 2.5 - a; }, -3, 3, true, false},
    {"mul_scalar", [](const Tensor& a) { return a * -3.0; }, -3, 3, true, true},
    {"mul_int_scalar", [](const Tensor& a) { return a * 3; }, -3, 3, true, false},
    {"div_scalar", [](const Tensor& a) { return a / 7.0; }, -3, 3, true, false},
    {"rdiv_scalar", [](const Tensor& a) { return 2.0 / a; }, 0.5, 4, false, false},
    {"gt_scalar", [](const Tensor& a) { return a.gt(0.25); }, -1, 1, true, false},
    {"le_scalar", [](const Tensor& a) { return a.le(-0.5); }, -1, 1, true, false},
    {"eq_scalar", [](const Tensor& a) { return a.eq(1); }, -1, 1, true, true},
    {"ne_scalar", [](const Tensor& a) { return a.ne(0); }, -1, 1, true, true},
};

class CudaUnary : public ::testing::TestWithParam<Unary> {};

TEST_P(CudaUnary, MatchesCpuOnEveryLayoutAndDtype) {
  STRATA_REQUIRE_CUDA();
  const Unary& op = GetParam();
  std::vector<ScalarType> dtypes = {kFloat, kDouble};
  if (op.integers) dtypes.push_back(kLong);
  if (op.bools) dtypes.push_back(kBool);
  uint64_t seed = 10;
  for (ScalarType dt : dtypes)
    for (const Layout& layout : unary_layouts()) {
      SCOPED_TRACE(::testing::Message() << op.name << " " << dt << " " << layout.name);
      const Tensor x = input(layout.base, dt, op.lo, op.hi, ++seed);
      EXPECT_TRUE(cuda_matches_cpu([&](const tensor_list& in) { return tensor_list{op.fn(layout.view(in[0]))}; }, {x}));
    }
}

TEST_P(CudaUnary, ReducedPrecisionMatchesFloat64Reference) {
  STRATA_REQUIRE_CUDA();
  const Unary& op = GetParam();
  for (ScalarType dt : {kHalf, kBFloat16})
    for (const Layout& layout : unary_layouts()) {
      SCOPED_TRACE(::testing::Message() << op.name << " " << dt << " " << layout.name);
      const Tensor x = uniform(layout.base, op.lo, op.hi, kFloat, 77).to(dt);  // rounded on the host
      const Tensor out = op.fn(layout.view(x.cuda()));
      const Tensor ref = op.fn(layout.view(x.to(kDouble)));
      EXPECT_EQ(out.dtype(), ref.dtype() == kDouble ? dt : ref.dtype());
      EXPECT_TRUE(out.is_cuda());
      if (ref.dtype() == kBool)
        EXPECT_TRUE(matches(out, ref));
      else
        EXPECT_LT(normalized_error(out, ref), 1e-2);
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaUnary, ::testing::ValuesIn(kUnary),
                         [](const ::testing::TestParamInfo<Unary>& info) { return std::string(info.param.name); });

// ---- binary ops ----

struct Binary {
  const char* name;
  BinaryFn fn;
  double a_lo, a_hi, b_lo, b_hi;
  bool integral_values;  // floating inputs rounded to integers, so that comparisons see equal pairs
  bool integers, bools;
};
void PrintTo(const Binary& b, std::ostream* os) { *os << b.name; }

const std::vector<Binary> kBinary = {
    {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, -3, 3, -3, 3, false, true, false},
    {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); }, -3, 3, -3, 3, false, false, false},
    {"add_int_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 3); }, -3, 3, -3, 3, false, true, false},
    {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, -3, 3, -3, 3, false, true, false},
    {"sub_alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 0.5); }, -3, 3, -3, 3, false, false, false},
    {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, -3, 3, -3, 3, false, true, false},
    {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, -3, 3, 0.5, 3, false, true, false},
    {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.1, 3, -2, 2, false, false, false},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -3, 3, -3, 3, false, true, false},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -3, 3, -3, 3, false, true, false},
    {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, -2, 2, -2, 2, true, true, true},
    {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, -2, 2, -2, 2, true, true, true},
    {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, -2, 2, -2, 2, true, true, false},
    {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, -2, 2, -2, 2, true, true, false},
    {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, -2, 2, -2, 2, true, true, false},
    {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, -2, 2, -2, 2, true, true, false},
    {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, -1, 1, -1, 1, true, true, true},
    {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, -1, 1, -1, 1, true, true, true},
    {"where", [](const Tensor& a, const Tensor& b) { return where(a.gt(b), a, b * 2); }, -3, 3, -3, 3, false, true,
     false},
};

class CudaBinary : public ::testing::TestWithParam<Binary> {};

Tensor operand(IntArrayRef sizes, ScalarType dt, double lo, double hi, bool integral, uint64_t seed) {
  Tensor t = input(sizes, dt, lo, hi, seed);
  if (integral && is_floating_point(dt)) t = (t + 0.5 * (hi - lo) + 0.5).to(kLong).to(dt) - 0.5 * (hi - lo);
  return t;
}

TEST_P(CudaBinary, MatchesCpuOnEveryLayoutAndDtype) {
  STRATA_REQUIRE_CUDA();
  const Binary& op = GetParam();
  std::vector<ScalarType> dtypes = {kFloat, kDouble};
  if (op.integers) dtypes.push_back(kLong);
  if (op.bools) dtypes.push_back(kBool);
  uint64_t seed = 100;
  for (ScalarType dt : dtypes)
    for (const PairLayout& layout : binary_layouts()) {
      SCOPED_TRACE(::testing::Message() << op.name << " " << dt << " " << layout.name);
      const Tensor a = operand(layout.a, dt, op.a_lo, op.a_hi, op.integral_values, ++seed);
      const Tensor b = operand(layout.b, dt, op.b_lo, op.b_hi, op.integral_values, ++seed);
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const tensor_list& in) { return tensor_list{op.fn(layout.view_a(in[0]), layout.view_b(in[1]))}; },
          {a, b}));
    }
}

TEST_P(CudaBinary, ReducedPrecisionMatchesFloat64Reference) {
  STRATA_REQUIRE_CUDA();
  const Binary& op = GetParam();
  for (ScalarType dt : {kHalf, kBFloat16})
    for (const PairLayout& layout : binary_layouts()) {
      SCOPED_TRACE(::testing::Message() << op.name << " " << dt << " " << layout.name);
      const Tensor a = operand(layout.a, kFloat, op.a_lo, op.a_hi, op.integral_values, 5).to(dt);
      const Tensor b = operand(layout.b, kFloat, op.b_lo, op.b_hi, op.integral_values, 6).to(dt);
      const Tensor out = op.fn(layout.view_a(a.cuda()), layout.view_b(b.cuda()));
      const Tensor ref = op.fn(layout.view_a(a.to(kDouble)), layout.view_b(b.to(kDouble)));
      EXPECT_EQ(out.dtype(), ref.dtype() == kDouble ? dt : ref.dtype());
      if (ref.dtype() == kBool)
        EXPECT_TRUE(matches(out, ref));
      else
        EXPECT_LT(normalized_error(out, ref), 1e-2);
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaBinary, ::testing::ValuesIn(kBinary),
                         [](const ::testing::TestParamInfo<Binary>& info) { return std::string(info.param.name); });

// ---- type promotion and wrapped numbers ----

TEST(CudaElementwise, TypePromotionMatchesCpu) {
  STRATA_REQUIRE_CUDA();
  const ScalarType dts[] = {kBool, kLong, kFloat, kDouble};
  const std::vector<std::pair<const char*, BinaryFn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / (b + 10); }},  // b + 10 > 0 for every dtype here
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a.lt(b); }},
      {"where", [](const Tensor& a, const Tensor& b) { return where(a.ne(0), a, b); }},
  };
  uint64_t seed = 300;
  for (ScalarType da : dts)
    for (ScalarType db : dts)
      for (const auto& [name, fn] : ops) {
        if (da == kBool && db == kBool) continue;  // arithmetic on two bools is refused on both devices
        SCOPED_TRACE(::testing::Message() << name << " " << da << " with " << db);
        const Tensor a = input({6, 7}, da, -3, 3, ++seed), b = input({7}, db, -3, 3, ++seed);
        const Tensor b0 = input({}, db, -3, 3, ++seed);  // a 0-dim operand promotes by category only
        // fn = fn: clang before 16 cannot capture a structured binding.
        auto run = [&, fn = fn](const tensor_list& in) { return tensor_list{fn(in[0], in[1])}; };
        EXPECT_TRUE(cuda_matches_cpu(run, {a, b}));
        EXPECT_TRUE(cuda_matches_cpu(run, {a, b0}));
      }
}

TEST(CudaElementwise, WrappedNumbersKeepIntegerResultsExact) {
  STRATA_REQUIRE_CUDA();
  const Tensor big = tensor({int64_t{1} << 53, (int64_t{1} << 53) + 1, -(int64_t{1} << 60)});
  const Tensor out = big.cuda() * 3 + 1;
  EXPECT_EQ(out.dtype(), kLong);
  EXPECT_TRUE(matches(out, big * 3 + 1));  // exact beyond 2^53: no trip through double
  EXPECT_EQ((big.cuda() * 2.5).dtype(), kFloat);
  EXPECT_EQ((tensor({true, false}).cuda() + 1).dtype(), kLong);
  EXPECT_EQ((tensor({true, false}).cuda() * 1.5).dtype(), kFloat);
  EXPECT_EQ((uniform({3}, 0, 1, kHalf).cuda() + uniform({3}, 0, 1, kBFloat16).cuda()).dtype(), kFloat);
  EXPECT_EQ((uniform({3}, 0, 1, kHalf).cuda() + uniform({3}, 0, 1).cuda()).dtype(), kFloat);
  EXPECT_EQ((uniform({3}, 0, 1, kBFloat16).cuda() * 2.0).dtype(), kBFloat16);
  EXPECT_EQ((indices({3}, 5).cuda() + uniform({3}, 0, 1, kHalf).cuda()).dtype(), kHalf);
  EXPECT_EQ((indices({3}, 5).cuda() / 2).dtype(), kFloat);  // true division
}

// The bitwise operators and the comparisons written as operators agree with the CPU, contiguous (the
// vectorised path), transposed and broadcast; floats are refused on both devices.
TEST(CudaElementwise, BitwiseAndComparisonOperatorsMatchCpu) {
  STRATA_REQUIRE_CUDA();
  const Tensor i = indices({40, 33}, 1000) - 500, j = indices({40, 33}, 1000, 7) - 500;
  const Tensor p = i > 0, q = j.t().contiguous().t() < 100;
  EXPECT_TRUE(matches((i.cuda() & j.cuda()), i & j));
  EXPECT_TRUE(matches((i.cuda().t() | j.cuda().t()), (i.t() | j.t())));
  EXPECT_TRUE(matches((i.cuda() ^ 0x55), i ^ 0x55));
  EXPECT_TRUE(matches(~i.cuda(), ~i));
  EXPECT_TRUE(matches((p.cuda() & q.cuda()) | !p.cuda(), (p & q) | !p));
  EXPECT_TRUE(matches(p.cuda() ^ q.cuda(), p ^ q));
  EXPECT_TRUE(matches(~p.cuda(), ~p));
  EXPECT_TRUE(matches(i.cuda() >= j.cuda(), i >= j));
  EXPECT_TRUE(matches(3 < i.cuda(), 3 < i));
  EXPECT_THROW((void)(uniform({3}, 0, 1).cuda() & uniform({3}, 0, 1).cuda()), Error);
}

TEST(CudaElementwise, ReducedPrecisionMixedWithFloatComputesInFloat) {
  STRATA_REQUIRE_CUDA();
  for (ScalarType dt : {kHalf, kBFloat16}) {
    const Tensor a = uniform({33, 17}, -2, 2, kFloat, 1).to(dt), b = uniform({17}, -2, 2, kFloat, 2);
    const Tensor out = a.cuda() * b.cuda() + 1.0;
    EXPECT_EQ(out.dtype(), kFloat);
    // The 16-bit operand converts exactly, so only float32 rounding remains.
    EXPECT_LT(normalized_error(out, a.to(kDouble) * b.to(kDouble) + 1.0), 1e-6);
  }
}

// ---- in place ----

using InPlaceFn = std::function<void(Tensor&, const Tensor&)>;

TEST(CudaElementwise, InPlaceOpsIntoViewsMatchCpuAndLeaveTheRestAlone) {
  STRATA_REQUIRE_CUDA();
  const std::vector<std::pair<const char*, InPlaceFn>> ops = {
      {"add_", [](Tensor& a, const Tensor& b) { a.add_(b); }},
      {"add_alpha_", [](Tensor& a, const Tensor& b) { a.add_(b, -0.5); }},
      {"sub_", [](Tensor& a, const Tensor& b) { a.sub_(b, 2); }},
      {"mul_", [](Tensor& a, const Tensor& b) { a.mul_(b); }},
      {"div_", [](Tensor& a, const Tensor& b) { a.div_(b.abs() + 0.5); }},
      {"add_scalar_", [](Tensor& a, const Tensor&) { a.add_(1.25); }},
      {"sub_scalar_", [](Tensor& a, const Tensor&) { a.sub_(3); }},
      {"mul_scalar_", [](Tensor& a, const Tensor&) { a *= -2.0; }},
      {"div_scalar_", [](Tensor& a, const Tensor&) { a /= 8.0; }},
      {"clamp_", [](Tensor& a, const Tensor&) { a.clamp_(-0.25, 0.5); }},
      {"zero_", [](Tensor& a, const Tensor&) { a.zero_(); }},
      {"fill_", [](Tensor& a, const Tensor&) { a.fill_(-7.5); }},
      {"copy_", [](Tensor& a, const Tensor& b) { a.copy_(b); }},
      {"copy_broadcast_", [](Tensor& a, const Tensor& b) { a.copy_(b.select(0, 3)); }},
      {"masked_fill_like", [](Tensor& a, const Tensor& b) { a.copy_(a.masked_fill(b.gt(0), 4.0)); }},
  };
  // Views of a [40, 131] base: an interior block, its transpose, and a stride-2 slice.
  const std::vector<std::pair<const char*, UnaryFn>> views = {
      {"block", [](const Tensor& t) { return t.slice(0, 2, 39).slice(1, 1, 130); }},
      {"transposed", [](const Tensor& t) { return t.t().slice(0, 2, 39).slice(1, 1, 38); }},
      {"stride_2", [](const Tensor& t) { return t.slice(1, 0, 131, 2).slice(0, 3, 40); }},
  };
  uint64_t seed = 500;
  for (ScalarType dt : {kFloat, kDouble})
    for (const auto& [name, op] : ops)
      for (const auto& [view_name, view] : views) {
        SCOPED_TRACE(::testing::Message() << name << " " << dt << " " << view_name);
        const Tensor base = uniform({40, 131}, -3, 3, dt, ++seed);
        const Tensor other_base = uniform({40, 131}, -3, 3, kDouble, ++seed);  // copy_ converts it
        EXPECT_TRUE(cuda_matches_cpu(
            [&, name = name, op = op, view = view](const tensor_list& in) {  // clang < 16: no structured bindings
              Tensor b = in[0].clone();
              Tensor target = view(b);
              const Tensor other = view(in[1]);
              op(target, other.dtype() == dt || std::string(name).starts_with("copy") ? other : other.to(dt));
              return tensor_list{b};
            },
            {base, other_base}));
      }
}

TEST(CudaElementwise, InPlaceBumpsTheVersionAndRefusesAWideningResult) {
  STRATA_REQUIRE_CUDA();
  Tensor a = uniform({4, 5}, -1, 1).cuda();
  const uint32_t v = a._version();
  a.add_(1.0);
  a.mul_(uniform({5}, -1, 1).cuda());
  EXPECT_EQ(a._version(), v + 2);
  Tensor l = indices({4}, 9).cuda();
  EXPECT_THROW(l.add_(uniform({4}, 0, 1).cuda()), Error);  // float result into int64, as torch refuses
  EXPECT_THROW(l.mul_(0.5), Error);
}

}  // namespace
