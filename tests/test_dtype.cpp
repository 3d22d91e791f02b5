// The 16-bit float types on the CPU: Half and BFloat16 conversions (exact values, ties to even,
// subnormals, overflow, NaN, signed zero, every bit pattern), libtorch's type promotion, and CPU
// tensors of those dtypes, which store, convert and print but refuse arithmetic.

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>

#include "helpers.h"

using namespace strata;
using strata::testing::same_tensor;
using strata::testing::values;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint16_t half_bits(float f) { return Half(f).bits; }
uint16_t bf16_bits(float f) { return BFloat16(f).bits; }
float bf16_value(uint16_t bits) { return from_bits(static_cast<uint32_t>(bits) << 16); }

// The float value of a finite Half from its fields, written apart from Half::to_float.
double half_reference(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const double magnitude = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// The 16-bit pattern nearest to f among the representable values `value(bits)` of one sign, ties to the
// even pattern: a search in double arithmetic, independent of the bit tricks in dtype.h. `top` is the
// largest finite magnitude's pattern; anything at or past the midpoint to the next binade is infinite.
template <class Value>
uint16_t nearest(float f, Value value, uint16_t top, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double x = std::abs(static_cast<double>(f));
  uint16_t lo = 0, hi = top;  // largest pattern with value <= x, by bisection
  if (x >= value(top)) {
    lo = top;
  } else {
    while (hi - lo > 1) {
      const auto mid = static_cast<uint16_t>((lo + hi) / 2);
      (value(mid) <= x ? lo : hi) = mid;
    }
  }
  const double below = value(lo);
  // Above the largest finite value the next step is infinity, at the distance of one more ulp.
  const double above = lo == top ? 2 * value(top) - value(static_cast<uint16_t>(top - 1)) : value(lo + 1);
  const uint16_t up = lo == top ? inf_bits : static_cast<uint16_t>(lo + 1);
  if (x == below) return sign | lo;
  const double d_lo = x - below, d_hi = above - x;
  const uint16_t pick = d_lo < d_hi ? lo : d_hi < d_lo ? up : ((lo & 1) ? up : lo);
  return sign | pick;
}
uint16_t half_nearest(float f) {
  return nearest(
      f, [](uint16_t b) { return half_reference(b); }, 0x7bff, 0x7c00);
}
uint16_t bf16_nearest(float f) {
  return nearest(
      f, [](uint16_t b) { return static_cast<double>(bf16_value(b)); }, 0x7f7f, 0x7f80);
}

// Floats that probe rounding around every positive finite 16-bit value v (pattern b): v itself, the
// midpoint to the next value, and the floats one ulp either side of v and of that midpoint.
template <class Value>
std::vector<float> probes(Value value, uint16_t top) {
  std::vector<float> out;
  for (uint32_t b = 0; b <= top; ++b) {
    const double v = value(static_cast<uint16_t>(b));
    const double next = b == top ? 2 * v - value(static_cast<uint16_t>(b - 1)) : value(static_cast<uint16_t>(b + 1));
    const auto mid = static_cast<float>((v + next) / 2);  // exact: a 16-bit midpoint fits in a float
    for (float f : {static_cast<float>(v), mid}) {
      out.push_back(f);
      out.push_back(std::nextafter(f, kInf));
      out.push_back(std::nextafter(f, -kInf));
    }
  }
  return out;
}

}  // namespace

// ---- Half ----

TEST(Half, ExactValues) {
  EXPECT_EQ(half_bits(1.0f), 0x3c00);
  EXPECT_EQ(half_bits(-2.0f), 0xc000);
  EXPECT_EQ(half_bits(0.5f), 0x3800);
  EXPECT_EQ(half_bits(65504.0f), 0x7bff);         // largest finite
  EXPECT_EQ(half_bits(0x1p-14f), 0x0400);         // smallest normal
  EXPECT_EQ(half_bits(0x1p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(half_bits(1023 * 0x1p-24f), 0x03ff);  // largest subnormal
  EXPECT_EQ(half_bits(0.1f), 0x2e66);
  EXPECT_EQ(half_bits(0.0f), 0x0000);
  EXPECT_EQ(half_bits(-0.0f), 0x8000);
  EXPECT_EQ(half_bits(kInf), 0x7c00);
  EXPECT_EQ(half_bits(-kInf), 0xfc00);
  EXPECT_EQ(static_cast<float>(Half(0.1f)), 0.0999755859375f);
  EXPECT_TRUE(std::signbit(static_cast<float>(Half(-0.0f))));
  EXPECT_EQ(Half::to_float(0x7bff), 65504.0f);
  EXPECT_EQ(Half::to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(Half::to_float(0xfc00), -kInf);
}

TEST(Half, RoundsToNearestTiesToEven) {
  EXPECT_EQ(half_bits(1 + 0x1p-11f), 0x3c00);                        // tie, 1.0 is even
  EXPECT_EQ(half_bits(1 + 3 * 0x1p-11f), 0x3c02);                    // tie, 1 + 2^-9 is even
  EXPECT_EQ(half_bits(std::nextafter(1 + 0x1p-11f, 2.0f)), 0x3c01);  // just past the tie
  EXPECT_EQ(half_bits(std::nextafter(1 + 3 * 0x1p-11f, 0.0f)), 0x3c01);
  EXPECT_EQ(half_bits(-(1 + 0x1p-11f)), 0xbc00);  // the same for negatives
  // Subnormals count in units of 2^-24.
  EXPECT_EQ(half_bits(0x1p-25f), 0x0000);      // tie between 0 and 2^-24
  EXPECT_EQ(half_bits(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 units
  EXPECT_EQ(half_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(half_bits(0x1p-30f), 0x0000);             // underflows to zero
  EXPECT_EQ(half_bits(-0x1p-30f), 0x8000);            // keeping the sign
  EXPECT_EQ(half_bits(0x1p-14f - 0x1p-25f), 0x0400);  // tie across the subnormal boundary
}

TEST(Half, OverflowAndNaN) {
  EXPECT_EQ(half_bits(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(half_bits(65520.0f), 0x7c00);  // the midpoint: 65536 is even, and is infinity
  EXPECT_EQ(half_bits(1e6f), 0x7c00);
  EXPECT_EQ(half_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(half_bits(std::numeric_limits<float>::max()), 0x7c00);
  for (float nan : {kNaN, -kNaN, from_bits(0x7f800001), from_bits(0x7fffffff), from_bits(0xff800001)}) {
    const uint16_t h = half_bits(nan);
    EXPECT_EQ(h & 0x7c00, 0x7c00) << std::hex << h;
    EXPECT_NE(h & 0x3ff, 0) << "NaN " << std::hex << std::bit_cast<uint32_t>(nan) << " became infinity";
    EXPECT_TRUE(std::isnan(Half::to_float(h)));
  }
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = Half::to_float(h);
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan(Half::to_float(Half::from_float(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(Half::from_float(f), h) << "pattern 0x" << std::hex << h;
    if ((h & 0x7c00) != 0x7c00) {
      ASSERT_EQ(static_cast<double>(f), half_reference(h)) << std::hex << h;
    }
  }
}

TEST(Half, RoundingMatchesAReferenceEverywhere) {
  std::vector<float> fs = probes([](uint16_t b) { return half_reference(b); }, 0x7bff);
  std::mt19937 rng(6);
  for (int i = 0; i < 200000; ++i) {  // random floats within and beyond Half's range
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) fs.push_back(f);
  }
  for (float f : std::vector<float>(fs)) fs.push_back(-f);
  for (float f : fs) {
    ASSERT_EQ(half_bits(f), half_nearest(f))
        << "float " << f << " (0x" << std::hex << std::bit_cast<uint32_t>(f) << ")";
#if defined(__FLT16_MAX__)  // the compiler's own IEEE binary16 conversion, where it has one
    ASSERT_EQ(half_bits(f), std::bit_cast<uint16_t>(static_cast<_Float16>(f))) << "float " << f;
#endif
  }
}

// ---- BFloat16 ----

TEST(BFloat16, ExactValues) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(bf16_bits(3.14159265f), 0x4049);  // pi: 0x40490fdb rounds down
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(kInf), 0x7f80);
  EXPECT_EQ(bf16_bits(-kInf), 0xff80);
  EXPECT_EQ(bf16_bits(from_bits(0x00010000)), 0x0001);              // smallest subnormal
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::min()), 0x0080);  // smallest normal
  EXPECT_EQ(static_cast<float>(BFloat16(3.14159265f)), 3.140625f);
  EXPECT_TRUE(std::signbit(static_cast<float>(BFloat16(-0.0f))));
}

TEST(BFloat16, RoundsToNearestTiesToEvenOverflowsAndKeepsNaN) {
  EXPECT_EQ(bf16_bits(from_bits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(bf16_bits(from_bits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(bf16_bits(from_bits(0x3f808001)), 0x3f81);  // past the tie
  EXPECT_EQ(bf16_bits(from_bits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(bf16_bits(from_bits(0x00008000)), 0x0000);  // subnormal tie
  EXPECT_EQ(bf16_bits(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(bf16_bits(from_bits(0x80008000)), 0x8000);
  EXPECT_EQ(bf16_bits(from_bits(0x7f7f7fff)), 0x7f7f);  // largest finite stays finite
  EXPECT_EQ(bf16_bits(from_bits(0x7f7f8000)), 0x7f80);  // the tie above it rounds to infinity
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(bf16_bits(-std::numeric_limits<float>::max()), 0xff80);
  // A NaN whose payload sits in the low half would truncate to infinity: it must stay NaN.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t b = bf16_bits(from_bits(nan));
    EXPECT_TRUE(std::isnan(bf16_value(b))) << std::hex << nan << " -> " << b;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000);
  }
}

TEST(BFloat16, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = static_cast<float>(BFloat16(bf16_value(h)));
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_value(h)), b << 16);  // operator float is exact
    if (std::isnan(bf16_value(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(BFloat16::from_float(bf16_value(h)), h) << "pattern 0x" << std::hex << h;
  }
}

TEST(BFloat16, RoundingMatchesAReferenceEverywhere) {
  std::vector<float> fs = probes([](uint16_t b) { return static_cast<double>(bf16_value(b)); }, 0x7f7f);
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) fs.push_back(f);
  }
  for (float f : std::vector<float>(fs)) fs.push_back(-f);
  for (float f : fs)
    ASSERT_EQ(bf16_bits(f), bf16_nearest(f))
        << "float " << f << " (0x" << std::hex << std::bit_cast<uint32_t>(f) << ")";
}

// ---- type promotion ----

TEST(Dtype, PromoteTypesIsLibtorchsTable) {
  const ScalarType types[] = {kBool, kLong, kFloat, kDouble, kHalf, kBFloat16};
  // torch.promote_types for rows and columns in the order above.
  const ScalarType table[6][6] = {
      {kBool, kLong, kFloat, kDouble, kHalf, kBFloat16}, {kLong, kLong, kFloat, kDouble, kHalf, kBFloat16},
      {kFloat, kFloat, kFloat, kDouble, kFloat, kFloat}, {kDouble, kDouble, kDouble, kDouble, kDouble, kDouble},
      {kHalf, kHalf, kFloat, kDouble, kHalf, kFloat},    {kBFloat16, kBFloat16, kFloat, kDouble, kFloat, kBFloat16},
  };
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      EXPECT_EQ(promote_types(types[i], types[j]), table[i][j]) << types[i] << " with " << types[j];
  static_assert(promote_types(kHalf, kBFloat16) == kFloat);
}

TEST(Dtype, PropertiesAndNames) {
  EXPECT_EQ(element_size(kHalf), 2u);
  EXPECT_EQ(element_size(kBFloat16), 2u);
  EXPECT_EQ(sizeof(Half), 2u);
  EXPECT_EQ(sizeof(BFloat16), 2u);
  EXPECT_TRUE(is_floating_point(kHalf) && is_floating_point(kBFloat16));
  EXPECT_TRUE(is_reduced_floating_point(kHalf) && is_reduced_floating_point(kBFloat16));
  EXPECT_FALSE(is_reduced_floating_point(kFloat) || is_reduced_floating_point(kLong));
  EXPECT_EQ(kFloat16, kHalf);
  EXPECT_EQ(std::string(to_string(kHalf)), "Half");
  EXPECT_EQ(std::string(to_string(kBFloat16)), "BFloat16");
  std::ostringstream os;
  os << kBFloat16;
  EXPECT_EQ(os.str(), "BFloat16");
  EXPECT_EQ(scalar_type_of<Half>(), kHalf);
  EXPECT_EQ(scalar_type_of<BFloat16>(), kBFloat16);
}

TEST(Dtype, ResultTypeWithReducedFloats) {
  Tensor h = zeros({2}, kHalf), b = zeros({2}, kBFloat16);
  EXPECT_EQ(result_type(h, b), kFloat);
  EXPECT_EQ(result_type(h, zeros({2}, kLong)), kHalf);
  EXPECT_EQ(result_type(zeros({2}, kBool), b), kBFloat16);
  EXPECT_EQ(result_type(h, zeros({2})), kFloat);
  EXPECT_EQ(result_type(b, zeros({2}, kDouble)), kDouble);
  EXPECT_EQ(result_type(h, Scalar(2.5)), kHalf);  // a float number does not widen a float tensor
  EXPECT_EQ(result_type(b, Scalar(int64_t{3})), kBFloat16);
}

// ---- CPU tensors of Half and BFloat16 ----

TEST(ReducedFloatTensor, FactoriesStoreTheRoundedValues) {
  for (ScalarType dt : {kHalf, kBFloat16}) {
    Tensor z = zeros({2, 3}, dt);
    EXPECT_EQ(z.dtype(), dt);
    EXPECT_EQ(z.element_size(), 2u);
    EXPECT_EQ(z.nbytes(), 12u);
    EXPECT_VALUES(z, {0, 0, 0, 0, 0, 0});
    Tensor f = full({4}, 1.5, dt);
    EXPECT_VALUES(f, {1.5, 1.5, 1.5, 1.5});
  }
  EXPECT_EQ(full({1}, 0.1, kHalf).item<float>(), 0.0999755859375f);
  EXPECT_EQ(full({1}, 0.1, kBFloat16).item<float>(), 0.10009765625f);
  EXPECT_EQ(full({1}, 1e6, kHalf).item<float>(), kInf);
  EXPECT_EQ(full({1}, 3.0, kBFloat16).item<double>(), 3.0);
  EXPECT_EQ(full({1}, -2.0, kHalf).item<int64_t>(), -2);
}

TEST(ReducedFloatTensor, ConversionsRoundTrip) {
  manual_seed(3);
  Tensor x = randn({5, 7}) * 100;
  for (ScalarType dt : {kHalf, kBFloat16}) {
    Tensor r = x.to(dt);
    EXPECT_EQ(r.dtype(), dt);
    const std::vector<double> xv = values(x), rv = values(r);
    for (size_t i = 0; i < xv.size(); ++i) {
      const auto f = static_cast<float>(xv[i]);
      const float expected = dt == kHalf ? static_cast<float>(Half(f)) : static_cast<float>(BFloat16(f));
      ASSERT_EQ(rv[i], expected) << dt << " element " << i;
    }
    // Back to float32 and again: exact, since every 16-bit value is a float.
    EXPECT_TRUE(same_tensor(r.to(kFloat).to(dt), r));
    EXPECT_TRUE(same_tensor(r.to(kDouble).to(dt), r));
    // A transposed source converts through its strides.
    EXPECT_TRUE(same_tensor(x.t().to(dt), r.t().contiguous()));
    EXPECT_TRUE(same_tensor(r.t().to(kFloat), r.to(kFloat).t().contiguous()));
    // Integers and bools convert exactly where they fit.
    EXPECT_VALUES(tensor({-3, 0, 7}).to(dt), {-3, 0, 7});
    EXPECT_VALUES(tensor({true, false}).to(dt), {1, 0});
    EXPECT_VALUES(tensor({2.5, -0.5}).to(dt).to(kLong), {2, 0});
    EXPECT_VALUES(tensor({2.5, 0.0}).to(dt).to(kBool), {1, 0});
  }
  // Half to BFloat16 goes through float: the nearest BFloat16 of the Half's value.
  Tensor h = x.to(kHalf);
  const std::vector<double> hv = values(h), bv = values(h.to(kBFloat16));
  for (size_t i = 0; i < hv.size(); ++i) ASSERT_EQ(bv[i], static_cast<float>(BFloat16(static_cast<float>(hv[i]))));
}

TEST(ReducedFloatTensor, CopiesViewsAndClones) {
  Tensor base = full({3, 4}, -1.0, kBFloat16);
  Tensor col = base.select(1, 2);
  col.copy_(tensor({0.5, 1.5, 2.5}));  // float32 into a strided BFloat16 view
  EXPECT_VALUES(base, {-1, -1, 0.5, -1, -1, -1, 1.5, -1, -1, -1, 2.5, -1});
  Tensor c = base.t().clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.dtype(), kBFloat16);
  EXPECT_TRUE(same_tensor(c, base.t().contiguous()));
  Tensor h = empty({2}, kHalf);
  h.fill_(0.25);
  EXPECT_VALUES(h, {0.25, 0.25});
  EXPECT_VALUES(h.reshape({2, 1}).expand({2, 3}).to(kFloat), {0.25, 0.25, 0.25, 0.25, 0.25, 0.25});
}

TEST(ReducedFloatTensor, Printing) {
  std::ostringstream h, b;
  h << tensor({1.5, -2.0, 0.1}).to(kHalf);
  b << tensor({1.5, -2.0}).to(kBFloat16);
  EXPECT_NE(h.str().find("dtype=Half"), std::string::npos) << h.str();
  EXPECT_NE(h.str().find("1.5"), std::string::npos) << h.str();
  EXPECT_NE(h.str().find("0.0999756"), std::string::npos) << h.str();  // the stored value, not 0.1
  EXPECT_NE(b.str().find("dtype=BFloat16"), std::string::npos) << b.str();
  EXPECT_NE(b.str().find("-2"), std::string::npos) << b.str();
  std::ostringstream s;
  s << scalar_tensor(0.5, kHalf);
  EXPECT_NE(s.str().find("0.5"), std::string::npos) << s.str();
}

TEST(ReducedFloatTensor, CpuArithmeticRunsInFloat32AndRounds) {
  // Each kernel computes on float32 copies and rounds its results once (in_float32, tensor/cpu/cpu_kernels.h):
  // the same bits as the float32 op on the converted operands, rounded.
  manual_seed(4);
  const Tensor x = randn({6, 5}), y = randn({6, 5}), w = randn({5, 3});
  for (ScalarType dt : {kHalf, kBFloat16}) {
    SCOPED_TRACE(to_string(dt));
    const Tensor a = x.to(dt), b = y.to(dt), m = w.to(dt);
    const Tensor af = a.to(kFloat), bf = b.to(kFloat), mf = m.to(kFloat);
    // got is want, rounded to dt where want is float32.
    auto same = [&](const Tensor& got, const Tensor& want, int line) {
      EXPECT_EQ(got.dtype(), want.dtype() == kFloat ? dt : want.dtype()) << "line " << line;
      EXPECT_TRUE(same_tensor(got, want.dtype() == kFloat ? want.to(dt) : want)) << "line " << line;
    };
    same(a + b, af + bf, __LINE__);
    same(a * 2.0, af * 2.0, __LINE__);
    same(a.t() - b.t(), af.t() - bf.t(), __LINE__);  // strided operands
    same(a + b[0], af + bf[0], __LINE__);            // a broadcast row
    same(a.add(b, 0.5), af.add(bf, 0.5), __LINE__);
    same(a.exp(), af.exp(), __LINE__);
    same(a > b, af > bf, __LINE__);
    same(where(a > 0, a, b), where(af > 0, af, bf), __LINE__);
    same(a.sum(), af.sum(), __LINE__);
    same(a.mean(1), af.mean(1), __LINE__);
    same(std::get<0>(a.max(1)), std::get<0>(af.max(1)), __LINE__);
    same(std::get<1>(a.max(1)), std::get<1>(af.max(1)), __LINE__);
    same(a.matmul(m), af.matmul(mf), __LINE__);
    // An op made of several kernels rounds after each (softmax: max, exp, sum, divide), so it is close, not exact.
    EXPECT_LT(strata::testing::normalized_error(softmax(a, -1), softmax(af, -1)), dt == kHalf ? 2e-3 : 1.5e-2);
    same(std::get<0>(a.sort(1)), std::get<0>(af.sort(1)), __LINE__);
    same(a.gather(1, tensor({{0}, {1}, {2}, {3}, {4}, {0}})), af.gather(1, tensor({{0}, {1}, {2}, {3}, {4}, {0}})),
         __LINE__);
    // Gradients flow through 16-bit ops: d/da sum(a * a) = 2a, rounded.
    const Tensor leaf = a.clone().requires_grad_(true);
    (leaf * leaf).sum().backward();
    same(leaf.grad(), 2.0 * af, __LINE__);
    // Draws: the float32 draw rounded (as on CUDA), uniforms kept below hi.
    manual_seed(9);
    const Tensor r = rand({1000}, dt);
    manual_seed(9);
    const Tensor rounded = rand({1000}).to(dt);
    EXPECT_TRUE(same_tensor(where(rounded < 1.0, r, rounded), rounded));
    EXPECT_LT(r.max().item<double>(), 1.0);
    manual_seed(9);
    const Tensor n = randn({100}, dt);
    manual_seed(9);
    same(n, randn({100}), __LINE__);
  }
}
