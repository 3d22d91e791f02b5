// The tensor core: metadata, factories, views sharing storage, random streams, printing, errors.

#include <limits>
#include <set>

#include "helpers.h"

using namespace strata;

TEST(Tensor, MetadataAndFactories) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.sizes(), IntArrayRef({2, 3}));
  EXPECT_EQ(z.strides(), IntArrayRef({3, 1}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_FALSE(z.requires_grad());
  EXPECT_VALUES(z, {0, 0, 0, 0, 0, 0});
  EXPECT_VALUES(ones({2}, kInt64), {1, 1});
  EXPECT_EQ(ones({2}, kInt64).dtype(), kLong);
  EXPECT_VALUES(full({3}, 2.5, kFloat64), {2.5, 2.5, 2.5});
  EXPECT_VALUES(arange(4), {0, 1, 2, 3});
  EXPECT_VALUES(arange(1, 2, 0.25, kFloat64), {1, 1.25, 1.5, 1.75});
  EXPECT_VALUES(arange(5, 0, -2, kLong), {5, 3, 1});
  EXPECT_VALUES(eye(2, 3), {1, 0, 0, 0, 1, 0});
  EXPECT_VALUES(tensor({1.5, 2.5}), {1.5, 2.5});
  EXPECT_EQ(tensor({1.5, 2.5}).dtype(), kFloat32);  // as torch::tensor: floating literals give the default dtype
  EXPECT_EQ(tensor({1, 2, 3}).dtype(), kInt64);
  EXPECT_EQ(tensor({true, false}).dtype(), kBool);
  EXPECT_EQ(scalar_tensor(3).dim(), 0);
  EXPECT_EQ(scalar_tensor(3).item<double>(), 3.0);
  Tensor like = zeros_like(ones({4, 1}, kFloat64));
  EXPECT_EQ(like.dtype(), kFloat64);
  EXPECT_EQ(like.sizes(), IntArrayRef({4, 1}));
  EXPECT_EQ(empty({0, 3}).numel(), 0);
}

// libtorch infers the dtype from a factory's numbers when none is given: integers give Long.
TEST(Tensor, FactoriesInferDtypeFromTheirNumbers) {
  EXPECT_EQ(arange(5).dtype(), kLong);
  EXPECT_VALUES(arange(0, 10, 3), {0, 3, 6, 9});
  EXPECT_EQ(arange(0, 10, 3).dtype(), kLong);
  EXPECT_EQ(arange(2, 5).dtype(), kLong);
  EXPECT_EQ(arange(5.0).dtype(), kFloat);
  EXPECT_EQ(arange(0, 1, 0.25).dtype(), kFloat);
  EXPECT_EQ(arange(0, 5, kDouble).dtype(), kDouble);
  EXPECT_EQ(full({2}, 7).dtype(), kLong);
  EXPECT_VALUES(full({2}, 7), {7, 7});
  EXPECT_EQ(full({2}, 7.0).dtype(), kFloat);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(full({2}, 7, kDouble).dtype(), kDouble);
  EXPECT_EQ(zeros({2}).dtype(), kFloat);  // zeros and ones keep the default dtype
  EXPECT_EQ(full_like(zeros({2}, kDouble), 3).dtype(), kDouble);
  // An integer dtype with a fractional start or step: libtorch truncates the step and returns wrong values.
  EXPECT_THROW_MSG(arange(0, 10, 0.5, kLong), "arange: an integer dtype (Long) needs an integral start and step");
  EXPECT_THROW_MSG(arange(0.5, 3, 1, kLong), "needs an integral start and step");
  EXPECT_VALUES(arange(0, 4.5, 1, kLong), {0, 1, 2, 3, 4});
  // Exact int64 fills, or an error where the double fill would change the value.
  EXPECT_EQ(full({1}, int64_t{1} << 53).item<int64_t>(), int64_t{1} << 53);
  EXPECT_THROW_MSG(full({1}, (int64_t{1} << 53) + 1), "is not exactly representable");
}

TEST(Tensor, TensorOptionsRequiresGrad) {
  Tensor w = zeros({2, 2}, TensorOptions().dtype(kFloat64).requires_grad(true));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_THROW_MSG(zeros({2}, TensorOptions().dtype(kLong).requires_grad(true)),
                   "only tensors of floating point dtype can require gradients");
}

TEST(Tensor, FromBlobSharesMemory) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(data, {2, 3});
  EXPECT_EQ(t.data_ptr<float>(), data);
  data[4] = 50;
  EXPECT_EQ(t.select(0, 1).select(0, 1).item<float>(), 50.0f);
  bool freed = false;
  {
    Tensor owned = from_blob(data, {6}, kFloat32, [&](void*) { freed = true; });
    Tensor view = owned.narrow(0, 1, 2);
    owned = Tensor();
    EXPECT_FALSE(freed);  // the view keeps the storage alive
  }
  EXPECT_TRUE(freed);
  Tensor strided = from_blob(data, {2, 2}, {1, 3});  // a transposed window
  EXPECT_VALUES(strided, {1, 4, 2, 50});
  EXPECT_FALSE(strided.is_contiguous());
}

TEST(Tensor, ItemAndDataPtrErrors) {
  EXPECT_EQ(tensor({7.0}).item<float>(), 7.0f);
  EXPECT_EQ(tensor({7}).item<int64_t>(), 7);
  EXPECT_THROW_MSG(zeros({2, 3}).item<float>(), "item: a Tensor with 6 elements cannot be converted to a scalar");
  EXPECT_THROW_MSG(zeros({2}).data_ptr<double>(), "data_ptr: expected Double but the tensor holds Float");
  EXPECT_THROW_MSG(zeros({2, 3}).size(2),
                   "size: dimension out of range (expected to be in range of [-2, 1], but got 2)");
  EXPECT_THROW_MSG(empty({-1}), "empty: negative dimension -1");
  EXPECT_THROW_MSG(zeros({2, -3}), "zeros: negative dimension -3 in size [2, -3]");
  EXPECT_THROW_MSG(Tensor().dim(), "tensor is undefined");
}

TEST(Tensor, RandomStreamsAreSeeded) {
  manual_seed(42);
  Tensor a = randn({1000});
  Tensor u = rand({5, 7}, kFloat64);
  Tensor i = randint(3, 9, {100});
  manual_seed(42);
  Tensor b = randn({1000});
  EXPECT_EQ(strata::testing::values(a), strata::testing::values(b));  // bit-identical
  EXPECT_EQ(strata::testing::values(u), strata::testing::values(rand({5, 7}, kFloat64)));
  EXPECT_EQ(strata::testing::values(i), strata::testing::values(randint(3, 9, {100})));
  Tensor c = randn({1000});
  EXPECT_NE(strata::testing::values(a), strata::testing::values(c));  // the stream moves on
  for (double v : strata::testing::values(i)) EXPECT_TRUE(v >= 3 && v < 9);
  Generator gen(7);
  Tensor g1 = rand({10}, {}, &gen);
  gen.manual_seed(7);
  EXPECT_EQ(strata::testing::values(g1), strata::testing::values(rand({10}, {}, &gen)));
  EXPECT_THROW_MSG(randint(5, 5, {2}), "randint: expected low < high");
  EXPECT_THROW_MSG(rand({2}, kLong), "rand: expected a floating point dtype, got Long");
}

// Bounds reach the kernel as int64, exactly: ranges near the ends of int64 and the whole of it.
TEST(Tensor, RandintTakesAnyInt64Range) {
  manual_seed(3);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  std::set<int64_t> top;
  const Tensor near_max = randint(kMax - 3, kMax, {300});
  for (int64_t k = 0; k < near_max.numel(); ++k) top.insert(near_max.data_ptr<int64_t>()[k]);
  EXPECT_EQ(top, (std::set<int64_t>{kMax - 3, kMax - 2, kMax - 1}));
  const Tensor whole = randint(kMin, kMax, {1000});
  int64_t negative = 0;
  for (int64_t k = 0; k < whole.numel(); ++k) negative += whole.data_ptr<int64_t>()[k] < 0;
  EXPECT_GT(negative, 400);
  EXPECT_LT(negative, 600);
  const Tensor low = randint(kMin, kMin + 2, {100});
  for (int64_t k = 0; k < low.numel(); ++k) EXPECT_LE(low.data_ptr<int64_t>()[k], kMin + 1);
  EXPECT_EQ(randint(0, kMax, {4}).dtype(), kLong);
}

TEST(Tensor, Printing) {
  std::ostringstream os;
  os << tensor({1, 2, 3, 4}).view({2, 2});
  EXPECT_EQ(os.str(), "tensor([[1, 2],\n        [3, 4]], dtype=Long)");
  std::ostringstream s2;
  s2 << scalar_tensor(2.5, kFloat64);
  EXPECT_EQ(s2.str(), "tensor(2.5, dtype=Double)");
}

TEST(Tensor, ThreadsSetting) {
  const int before = get_num_threads();
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(get_num_threads(), before);
}

TEST(Tensor, SizesThatOverflowAreRejected) {
  EXPECT_THROW_MSG(zeros({(int64_t{1} << 61) + 1}, kFloat64), "overflow the address space");
  EXPECT_THROW_MSG(zeros({int64_t{1} << 32, int64_t{1} << 32}), "has too many elements");
  EXPECT_THROW_MSG(empty({0}).view({int64_t{1} << 32, int64_t{1} << 32, 0, int64_t{1} << 32}), "too many elements");
  EXPECT_THROW_MSG(ones({4}).as_strided({3}, {int64_t{1} << 62}), "as_strided");
  EXPECT_THROW_MSG(ones({1}).expand({-5}), "expand: cannot expand shape [1] to shape [-5]: negative size -5");
}

TEST(Tensor, LikeFactoriesMergeOptions) {
  Tensor d = ones({2}, kFloat64);
  Tensor z = zeros_like(d, requires_grad(true));
  EXPECT_EQ(z.dtype(), kFloat64);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_EQ(ones_like(d, kLong).dtype(), kLong);
}

TEST(Tensor, RandintWithFloatDtypeGivesIntegers) {
  manual_seed(3);
  for (double v : strata::testing::values(randint(0, 10, {50}, kFloat))) EXPECT_EQ(v, std::floor(v));
}

TEST(Tensor, VarAndStdTakeUnbiasedFlag) {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64);
  EXPECT_DOUBLE_EQ(x.var(false).item<double>(), 1.25);
  EXPECT_DOUBLE_EQ(x.var(true).item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(x.std(false).item<double>(), std::sqrt(1.25));
}

TEST(Tensor, VarWithABracedDimIsNotTheUnbiasedFlag) {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).view({2, 2});
  EXPECT_EQ(x.var({1}).sizes(), IntArrayRef({2}));
  EXPECT_EQ(x.var(1).sizes(), IntArrayRef({2}));
}
