// The integer dtypes uint8 (Byte), int8 (Char), int16 (Short) and int32 (Int) beside bool and int64:
// libtorch's promotion table and result_type, conversions (out-of-range values wrap), arithmetic that
// wraps in two's complement, reductions into Long, indexing, printing and the errors of float-only ops.

#include <cstdint>
#include <limits>
#include <sstream>

#include "helpers.h"

using namespace strata;
using strata::testing::same_tensor;

namespace {

constexpr ScalarType kIntTypes[] = {kUInt8, kInt8, kInt16, kInt32};

std::string printed(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace

// ---- names, sizes, promotion ----

TEST(IntDtypes, NamesSizesAndAliasesAreLibtorchs) {
  EXPECT_EQ(kByte, kUInt8);
  EXPECT_EQ(kChar, kInt8);
  EXPECT_EQ(kShort, kInt16);
  EXPECT_EQ(kInt, kInt32);
  const std::pair<ScalarType, const char*> names[] = {
      {kUInt8, "Byte"}, {kInt8, "Char"}, {kInt16, "Short"}, {kInt32, "Int"}};
  for (const auto& [t, name] : names) EXPECT_EQ(std::string(to_string(t)), name);
  EXPECT_EQ(element_size(kUInt8), 1u);
  EXPECT_EQ(element_size(kInt8), 1u);
  EXPECT_EQ(element_size(kInt16), 2u);
  EXPECT_EQ(element_size(kInt32), 4u);
  EXPECT_EQ(scalar_type_of<uint8_t>(), kUInt8);
  EXPECT_EQ(scalar_type_of<int8_t>(), kInt8);
  EXPECT_EQ(scalar_type_of<int16_t>(), kInt16);
  EXPECT_EQ(scalar_type_of<int32_t>(), kInt32);
  for (ScalarType t : kIntTypes) {
    EXPECT_TRUE(is_integral(t, false)) << t;
    EXPECT_FALSE(is_floating_point(t)) << t;
    EXPECT_EQ(visit_dtype(t, []<class T>() { return scalar_type_of<T>(); }), t);
    EXPECT_EQ(visit_all_dtypes(t, []<class T>() { return sizeof(T); }), element_size(t));
  }
  EXPECT_FALSE(is_integral(kBool, false));
  EXPECT_TRUE(is_integral(kBool, true));
  EXPECT_EQ(static_cast<int>(kInt32) + 1, kNumScalarTypes);
}

TEST(IntDtypes, PromoteTypesIsLibtorchsTable) {
  const ScalarType b1 = kBool, u1 = kUInt8, i1 = kInt8, i2 = kInt16, i4 = kInt32, i8 = kLong, f2 = kHalf,
                   bf = kBFloat16, f4 = kFloat, f8 = kDouble;
  const ScalarType types[] = {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8};
  // torch.promote_types (c10's _promoteTypesLookup) for rows and columns in the order above.
  const ScalarType table[10][10] = {
      {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8}, {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8}, {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8}, {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8}, {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8}, {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 10; ++j)
      EXPECT_EQ(promote_types(types[i], types[j]), table[i][j]) << types[i] << " with " << types[j];
  static_assert(promote_types(kUInt8, kInt8) == kInt16);
}

TEST(IntDtypes, ResultTypeKeepsTheTensorsIntegerTypeForIntegerScalars) {
  const Tensor i = zeros({2}, kInt32), u = zeros({2}, kUInt8), c = zeros({2}, kInt8);
  EXPECT_EQ(result_type(i, Scalar(1)), kInt32);  // int32_t + 1 stays Int
  EXPECT_EQ((i + 1).dtype(), kInt32);
  EXPECT_EQ((u * int64_t{3}).dtype(), kUInt8);
  EXPECT_EQ(result_type(i, Scalar(2.5)), kFloat);  // a floating number gives the default dtype
  EXPECT_EQ((u + 0.5).dtype(), kFloat);
  EXPECT_EQ(result_type(zeros({2}, kBool), Scalar(1)), kLong);
  EXPECT_EQ(result_type(u, c), kInt16);
  EXPECT_EQ((u + c).dtype(), kInt16);
  EXPECT_EQ(result_type(i, zeros({2}, kLong)), kLong);
  EXPECT_EQ(result_type(i, zeros({2}, kHalf)), kHalf);
  // A 0-dim tensor only raises the category: an int64 one leaves uint8 alone, a double one makes it Double.
  EXPECT_EQ(result_type(u, zeros({}, kLong)), kUInt8);
  EXPECT_EQ(result_type(u, zeros({}, kDouble)), kDouble);
  EXPECT_EQ(result_type(zeros({2}, kBool), zeros({}, kInt8)), kInt8);
}

// ---- factories and conversions ----

TEST(IntDtypes, FactoriesMakeEveryIntegerType) {
  for (ScalarType t : kIntTypes) {
    SCOPED_TRACE(::testing::Message() << t);
    EXPECT_EQ(tensor({1, 2, 3}, t).dtype(), t);
    EXPECT_VALUES(tensor({1, 2, 3}, t), {1, 2, 3});
    EXPECT_VALUES(arange(5, t), {0, 1, 2, 3, 4});
    EXPECT_VALUES(arange(1, 8, 3, t), {1, 4, 7});
    EXPECT_VALUES(full({2}, 7, t), {7, 7});
    EXPECT_VALUES(zeros({2}, t), {0, 0});
    EXPECT_VALUES(ones({2}, t), {1, 1});
    EXPECT_EQ(ones({2}, t).sum().item<int64_t>(), 2);
    const Tensor r = randint(3, 10, {200}, t);
    EXPECT_EQ(r.dtype(), t);
    EXPECT_TRUE(r.ge(3).logical_and(r.lt(10)).all().item<bool>());
  }
  // Fill values must fit, as libtorch's checked conversion (uint8 also takes down to -255, which wraps).
  EXPECT_THROW_MSG(full({2}, 300, kUInt8), "full: value 300 cannot be converted to type Byte without overflow");
  EXPECT_THROW_MSG(zeros({2}, kInt8).fill_(-129), "fill_: value -129 cannot be converted to type Char");
  EXPECT_THROW_MSG(zeros({2}, kInt32).fill_(3e9), "fill_: value 3e+09 cannot be converted to type Int");
  EXPECT_VALUES(full({2}, -1, kUInt8), {255, 255});
  EXPECT_VALUES(zeros({2}, kInt16).fill_(-32768), {-32768, -32768});
  int32_t data[] = {5, -6, 7, 8};
  const Tensor b = from_blob(data, {2, 2}, kInt32);
  EXPECT_EQ(b.data_ptr<int32_t>(), data);
  EXPECT_VALUES(b, {5, -6, 7, 8});
  EXPECT_EQ(b[0][1].item<int>(), -6);
  EXPECT_TRUE(b[0][1].item().isIntegral());
  EXPECT_EQ(tensor(int64_t{3}, kInt32).item<int32_t>(), 3);
}

TEST(IntDtypes, ConversionsWrapAsLibtorch) {
  // Integer to narrower integer keeps the low bits (two's complement).
  EXPECT_VALUES(tensor({200, -1, 256, 1000}, kInt32).to(kInt8), {-56, -1, 0, -24});
  EXPECT_VALUES(tensor({-1, -128, 127}, kInt8).to(kUInt8), {255, 128, 127});
  EXPECT_VALUES(tensor({255, 0}, kUInt8).to(kInt32), {255, 0});
  EXPECT_VALUES(tensor({int64_t{1} << 40, -(int64_t{1} << 33) - 1}, kLong).to(kInt32), {0, -1});
  // Floating to integer truncates toward zero; whole values out of range wrap through int64, as libtorch's
  // conversion to uint8.
  EXPECT_VALUES(tensor({2.9, -2.9, 300.5, -1.0, 255.0}).to(kUInt8), {2, 254, 44, 255, 255});
  EXPECT_VALUES(tensor({2.9, -2.9, 200.0, -129.0}, kDouble).to(kInt8), {2, -2, -56, 127});
  EXPECT_VALUES(tensor({70000.0, -1.5}).to(kInt16), {4464, -1});
  EXPECT_VALUES(tensor({3e9}, kDouble).to(kInt32), {-1294967296});
  // Into the floating and bool types exactly, and back.
  EXPECT_VALUES(tensor({-128, 0, 127}, kInt8).to(kHalf), {-128, 0, 127});
  EXPECT_VALUES(tensor({0, 3, 255}, kUInt8).to(kBool), {0, 1, 1});
  EXPECT_VALUES(tensor({true, false}).to(kInt16), {1, 0});
  EXPECT_VALUES(tensor({-3, 77}, kInt32).to(kBFloat16).to(kInt32), {-3, 77});
  for (ScalarType from : kIntTypes)
    for (ScalarType to : kIntTypes) {
      SCOPED_TRACE(::testing::Message() << from << " -> " << to);
      EXPECT_VALUES(tensor({0, 1, 100, 127}, from).to(to), {0, 1, 100, 127});
      EXPECT_VALUES(tensor({0, 1, 100, 127}, from).t().to(to), {0, 1, 100, 127});  // strided
    }
  EXPECT_EQ(tensor({1, 2}, kUInt8).to(kUInt8).dtype(), kUInt8);
  Tensor dst = zeros({3}, kInt16);
  dst.copy_(tensor({1.5, -2.5, 3.0}));
  EXPECT_VALUES(dst, {1, -2, 3});
}

TEST(IntDtypes, PrintingShowsNumbersAndLibtorchsNames) {
  EXPECT_EQ(printed(tensor({1, 200}, kUInt8)), "tensor([1, 200], dtype=Byte)");
  EXPECT_EQ(printed(tensor({-5, 65}, kInt8)), "tensor([-5, 65], dtype=Char)");  // numbers, not characters
  EXPECT_EQ(printed(tensor({-300}, kInt16)), "tensor([-300], dtype=Short)");
  EXPECT_EQ(printed(scalar_tensor(7, kInt32)), "tensor(7, dtype=Int)");
  std::ostringstream os;
  os << kInt8 << ' ' << kInt32;
  EXPECT_EQ(os.str(), "Char Int");
}

// ---- arithmetic ----

TEST(IntDtypes, ArithmeticWrapsInTwosComplement) {
  EXPECT_VALUES(tensor({200, 255}, kUInt8) + 100, {44, 99});
  EXPECT_VALUES(tensor({0}, kUInt8) - 1, {255});
  EXPECT_VALUES(tensor({127, -128}, kInt8) + tensor({1, -1}, kInt8), {-128, 127});
  EXPECT_VALUES(tensor({100}, kInt8) * 3, {44});
  EXPECT_VALUES(tensor({std::numeric_limits<int32_t>::max()}, kInt32) + 1, {std::numeric_limits<int32_t>::min()});
  EXPECT_VALUES(tensor({300}, kInt16) * tensor({300}, kInt16), {24464});
  EXPECT_VALUES(tensor({1, 2, 3}, kInt32).sub(tensor({1, 1, 1}, kInt32), 2), {-1, 0, 1});
  EXPECT_VALUES(tensor({3, -2}, kInt32).pow(3), {27, -8});
  Tensor x = tensor({250, 5}, kUInt8);
  x.add_(10);
  EXPECT_VALUES(x, {4, 15});
  EXPECT_EQ(x.dtype(), kUInt8);
  x.mul_(tensor({2, 2}, kUInt8));
  EXPECT_VALUES(x, {8, 30});
  EXPECT_THROW_MSG(x.add_(0.5), "result type Float can't be cast to the desired output type Byte");
}

TEST(IntDtypes, MixedTypesPromoteBeforeComputing) {
  const Tensor u = tensor({200, 1}, kUInt8), c = tensor({-1, 100}, kInt8);
  const Tensor s = u + c;  // in int16: no wrap at 8 bits
  EXPECT_EQ(s.dtype(), kInt16);
  EXPECT_VALUES(s, {199, 101});
  EXPECT_EQ((tensor({1}, kInt32) + tensor({1}, kLong)).dtype(), kLong);
  const Tensor f = tensor({3, 4}, kInt32) * 0.5;
  EXPECT_EQ(f.dtype(), kFloat);
  EXPECT_VALUES(f, {1.5, 2.0});
  EXPECT_EQ((tensor({1}, kInt8) + tensor({1.5}, kDouble)).dtype(), kDouble);
  EXPECT_EQ((tensor({true}) + tensor({2}, kUInt8)).dtype(), kUInt8);
}

TEST(IntDtypes, DivisionIsTrueDivisionInTheDefaultDtype) {
  const Tensor q = tensor({7, -7, 1}, kInt32) / tensor({2, 2, 0}, kInt32);
  EXPECT_EQ(q.dtype(), kFloat);
  EXPECT_VALUES(q.slice(0, 0, 2), {3.5, -3.5});
  EXPECT_EQ(q[2].item<double>(), std::numeric_limits<double>::infinity());
  EXPECT_EQ((tensor({1}, kUInt8) / 2).dtype(), kFloat);
  EXPECT_EQ((2 / tensor({4}, kInt16)).dtype(), kFloat);
  Tensor i = tensor({4}, kInt32);
  EXPECT_THROW_MSG(i.div_(2), "div_: result type Float can't be cast to the desired output type Int");
}

TEST(IntDtypes, ComparisonsBitwiseAndLogicalOps) {
  const Tensor u = tensor({0, 200, 255}, kUInt8), c = tensor({-1, 100, 127}, kInt8);
  EXPECT_VALUES(c.lt(u), {1, 1, 1});  // compared in int16: -1 < 0
  EXPECT_VALUES(u.eq(200), {0, 1, 0});
  EXPECT_VALUES(u.gt(199.5), {0, 1, 1});
  EXPECT_VALUES(~u, {255, 55, 0});
  EXPECT_VALUES(~tensor({0, -1}, kInt32), {-1, 0});
  EXPECT_VALUES(u & 0x0F, {0, 8, 15});
  EXPECT_EQ((u & 0x0F).dtype(), kUInt8);
  EXPECT_VALUES(tensor({5, 6}, kInt16) | tensor({2, 1}, kInt16), {7, 7});
  EXPECT_VALUES(tensor({5, 6}, kInt32) ^ tensor({1, 6}, kInt32), {4, 0});
  EXPECT_EQ((u ^ c).dtype(), kInt16);
  EXPECT_VALUES(logical_and(u, c), {0, 1, 1});
  EXPECT_VALUES(logical_not(u), {1, 0, 0});
  EXPECT_THROW_MSG(bitwise_and(u, tensor({1.0, 2.0, 3.0})), "bitwise_and: expected integer or bool operands");
}

TEST(IntDtypes, UnaryOpsKeepTheDtype) {
  EXPECT_VALUES(tensor({1, 0}, kUInt8).neg(), {255, 0});
  EXPECT_VALUES(tensor({-128, -5, 7}, kInt8).abs(), {-128, 5, 7});  // abs(INT8_MIN) wraps, as libtorch
  EXPECT_VALUES(tensor({200}, kUInt8).abs(), {200});
  EXPECT_VALUES(tensor({-3, 4}, kInt32).relu(), {0, 4});
  EXPECT_EQ(tensor({-3}, kInt32).abs().dtype(), kInt32);
}

TEST(IntDtypes, FloatOpsPromoteToTheDefaultDtype) {
  const Tensor i = tensor({0, 1, 4}, kInt32);
  EXPECT_EQ(i.exp().dtype(), kFloat);
  EXPECT_VALUES(i.sqrt(), {0, 1, 2});
  EXPECT_VALUES(tensor({1}, kUInt8).log(), {0});
  EXPECT_EQ(tensor({1}, kInt8).sigmoid().dtype(), kFloat);
  EXPECT_EQ(tensor({1}, kInt16).tanh().dtype(), kFloat);
  EXPECT_THROW_MSG(tensor({1}, kInt32).mean(), "mean(): could not infer output dtype");
  EXPECT_THROW_MSG(tensor({1}, kInt32).requires_grad_(true), "floating");
}

TEST(IntDtypes, MatmulComputesInTheIntegerType) {
  const Tensor a = tensor({1, 2, 3, 4}, kInt32).reshape({2, 2}), b = tensor({5, 6, 7, 8}, kInt32).reshape({2, 2});
  const Tensor p = a.mm(b);
  EXPECT_EQ(p.dtype(), kInt32);
  EXPECT_VALUES(p, {19, 22, 43, 50});
  EXPECT_VALUES(tensor({16, 16}, kUInt8).reshape({1, 2}).matmul(tensor({8, 8}, kUInt8).reshape({2, 1})), {0});
  EXPECT_THROW_MSG(a.mm(tensor({1, 2}, kInt8).reshape({2, 1})), "expected both operands to have the same dtype");
}

TEST(IntDtypes, WhereClampAndMaskedFill) {
  const Tensor c = tensor({true, false, true});
  const Tensor w = where(c, tensor({1, 2, 3}, kInt8), tensor({-1, -2, -3}, kInt8));
  EXPECT_EQ(w.dtype(), kInt8);
  EXPECT_VALUES(w, {1, -2, 3});
  EXPECT_EQ(where(c, tensor({1, 2, 3}, kUInt8), tensor({-1, -2, -3}, kInt8)).dtype(), kInt16);
  const Tensor clamped = tensor({-5, 50, 500}, kInt16).clamp(0, 100);
  EXPECT_EQ(clamped.dtype(), kInt16);
  EXPECT_VALUES(clamped, {0, 50, 100});
  EXPECT_EQ(tensor({1}, kInt32).clamp(0.5).dtype(), kFloat);
  Tensor m = tensor({1, 2, 3}, kUInt8).masked_fill(c, 9);
  EXPECT_EQ(m.dtype(), kUInt8);
  EXPECT_VALUES(m, {9, 2, 9});
  EXPECT_VALUES(tensor({1, 2}, kInt32).maximum(tensor({3, -4}, kInt32)), {3, 2});
  EXPECT_VALUES(tensor({1, 2}, kUInt8).minimum(tensor({3, 0}, kUInt8)), {1, 0});
}

// ---- reductions, sorting and indexing ----

TEST(IntDtypes, SumAndProdAccumulateInLongMaxAndMinKeepTheType) {
  for (ScalarType t : kIntTypes) {
    SCOPED_TRACE(::testing::Message() << t);
    const Tensor x = full({300}, 100, t);  // 30000: past every 8-bit type
    EXPECT_EQ(x.sum().dtype(), kLong);
    EXPECT_EQ(x.sum().item<int64_t>(), 30000);
    EXPECT_EQ(x.sum(t).dtype(), t);  // a named dtype is the result's, as libtorch
    EXPECT_EQ(x.sum(kInt32).item<int64_t>(), 30000);
    EXPECT_VALUES(x.reshape({3, 100}).sum({1}), {10000, 10000, 10000});
    EXPECT_EQ(full({5}, 10, t).prod().item<int64_t>(), 100000);
    EXPECT_EQ(full({5}, 10, t).prod().dtype(), kLong);
    const Tensor y = tensor({3, 9, 1, 9}, t);
    EXPECT_EQ(y.max().dtype(), t);
    EXPECT_EQ(y.max().item<int>(), 9);
    EXPECT_EQ(y.min().item<int>(), 1);
    EXPECT_EQ(y.argmax().item<int64_t>(), 1);  // the first maximum
    EXPECT_VALUES(amin(y, {0}, true), {1});
  }
  EXPECT_EQ(tensor({-128, -1}, kInt8).min().item<int>(), -128);
  EXPECT_EQ(tensor({255, 0}, kUInt8).max().item<int>(), 255);
}

TEST(IntDtypes, SortTopkOrderSignedAndUnsignedValues) {
  const auto [values, idx] = tensor({5, -3, 127, -128, 0}, kInt8).sort();
  EXPECT_VALUES(values, {-128, -3, 0, 5, 127});
  EXPECT_VALUES(idx, {3, 1, 4, 0, 2});
  const auto [top, top_idx] = tensor({7, 255, 128, 0}, kUInt8).topk(2);
  EXPECT_VALUES(top, {255, 128});
  EXPECT_VALUES(top_idx, {1, 2});
}

TEST(IntDtypes, IndexSelectAndEmbeddingTakeIntIndicesGatherTakesLongOnly) {
  const Tensor a = arange(12, kFloat).reshape({3, 4});
  EXPECT_TRUE(same_tensor(a.index_select(0, tensor({2, 0}, kInt32)), a.index_select(0, tensor({2, 0}, kLong))));
  EXPECT_TRUE(same_tensor(embedding(a, tensor({1, 1}, kInt32)), embedding(a, tensor({1, 1}, kLong))));
  EXPECT_THROW_MSG(a.index_select(0, tensor({1}, kInt16)),
                   "index_select(): Expected dtype int32 or int64 for index, got Short");
  EXPECT_THROW_MSG(a.gather(0, tensor({{1}}, kInt32)), "gather(): Expected dtype int64 for index, got Int");
  // Integer tensors are gathered, scattered and selected like any other.
  const Tensor u = arange(6, kUInt8).reshape({2, 3});
  EXPECT_VALUES(u.index_select(1, tensor({2, 2}, kLong)), {2, 2, 5, 5});
  EXPECT_VALUES(u.gather(1, tensor({{0}, {1}}, kLong)), {0, 4});
  EXPECT_VALUES(zeros({3}, kInt16).scatter_add(0, tensor({0, 0, 2}, kLong), tensor({5, 6, 7}, kInt16)), {11, 0, 7});
  EXPECT_VALUES(cat({u, u}, 0).sum(), {30});
}
