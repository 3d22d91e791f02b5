// The tensor API a libtorch user types without thinking, as pytorch/examples' C++ programs use it:
// nested tensor() lists, item() as a Scalar, set_default_dtype, all/any, uniform_/normal_ and str.

#include "helpers.h"

using namespace strata;
using strata::testing::values;

TEST(TensorApi, NestedListsGiveTheirShapeAndDtype) {
  Tensor m = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  EXPECT_EQ(m.sizes(), IntArrayRef({2, 3}));
  EXPECT_EQ(m.dtype(), kFloat);
  EXPECT_EQ(values(m), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor column = tensor({{1.0}, {2.0}});  // one-element rows stay rows, as torch::tensor
  EXPECT_EQ(column.sizes(), IntArrayRef({2, 1}));
  Tensor cube = tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}});
  EXPECT_EQ(cube.sizes(), IntArrayRef({2, 2, 2}));
  EXPECT_EQ(cube.dtype(), kLong);
  EXPECT_EQ(cube[1][0][1].item<int64_t>(), 6);
  EXPECT_EQ(tensor({{true, false}}).dtype(), kBool);
  EXPECT_EQ(tensor({1, 2}, kDouble).dtype(), kDouble);
  EXPECT_EQ(tensor({1, 2.5}).dtype(), kFloat);  // an integer and a float make floats
  Tensor scalar = tensor(3.5);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<double>(), 3.5);
  Tensor none = tensor({});
  EXPECT_EQ(none.sizes(), IntArrayRef({0}));
  EXPECT_EQ(none.dtype(), kFloat);
  EXPECT_EQ(tensor(std::vector<int64_t>{int64_t{1} << 60}).item<int64_t>(), int64_t{1} << 60);  // exact
}

TEST(TensorApi, RaggedListsAreRefused) {
  EXPECT_THROW_MSG(tensor({{1.0, 2.0}, {3.0}}),
                   "tensor: expected every row of a nested list to have shape [2] (as row 0), but row 1 has shape [1]");
}

TEST(TensorApi, ItemWithoutATypeIsAScalar) {
  Scalar f = tensor({2.5}).item();
  EXPECT_TRUE(f.isFloatingPoint());
  EXPECT_EQ(f.toDouble(), 2.5);
  Scalar i = tensor({7}).item();
  EXPECT_TRUE(i.isIntegral());
  EXPECT_EQ(i.toLong(), 7);
  EXPECT_TRUE(tensor({true}).item().toBool());
  EXPECT_EQ(values(ones({2}) + tensor({2.0}).item()), (std::vector<double>{3, 3}));  // as regression.cpp uses it
  EXPECT_THROW_MSG(ones({2}).item(), "item: a Tensor with 2 elements cannot be converted to a scalar");
}

TEST(TensorApi, DefaultDtypeGovernsFloatingFactoriesAndPromotion) {
  set_default_dtype(kDouble);
  const ScalarType got = get_default_dtype();
  const ScalarType made = randn({2}).dtype(), listed = tensor({1.5}).dtype(), promoted = (arange(3) * 2.5).dtype();
  const ScalarType divided = (arange(3) / 2).dtype(), integers = tensor({1, 2}).dtype();
  set_default_dtype(kFloat);
  EXPECT_EQ(got, kDouble);
  EXPECT_EQ(made, kDouble);
  EXPECT_EQ(listed, kDouble);
  EXPECT_EQ(promoted, kDouble);
  EXPECT_EQ(divided, kDouble);
  EXPECT_EQ(integers, kLong);
  EXPECT_EQ(zeros({1}).dtype(), kFloat);
  EXPECT_THROW_MSG(set_default_dtype(kLong), "set_default_dtype: only floating point dtypes are supported");
}

TEST(TensorApi, AllAndAny) {
  Tensor t = tensor({{1, 0, 2}, {3, 4, 5}});
  EXPECT_FALSE(t.all().item<bool>());
  EXPECT_TRUE(t.any().item<bool>());
  EXPECT_EQ(t.all().dtype(), kBool);
  EXPECT_EQ(values(t.all(1)), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(all(t, 0, true)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(all(t, 0, true).sizes(), IntArrayRef({1, 3}));
  EXPECT_EQ(values(zeros({2, 2}).any(0)), (std::vector<double>{0, 0}));
  EXPECT_TRUE(zeros({0}).all().item<bool>());  // vacuous truth, as torch
  EXPECT_FALSE(zeros({0}).any().item<bool>());
  Tensor x = randn({3});
  EXPECT_TRUE(x.eq(x.detach()).all().item<bool>());
}

TEST(TensorApi, UniformAndNormalFillInPlaceFromTheGenerator) {
  Tensor u = empty({1000}, kDouble);
  Generator gen(5);
  u.uniform_(0.8, 1.0, &gen);
  EXPECT_GE(u.min().item<double>(), 0.8);
  EXPECT_LT(u.max().item<double>(), 1.0);
  Tensor again = empty({1000}, kDouble);
  Generator same(5);
  again.uniform_(0.8, 1.0, &same);
  EXPECT_EQ(values(u), values(again));
  Tensor n = zeros({2, 5000}, kDouble).t();  // non-contiguous: filled through copy_
  n.normal_(3.0, 0.5);
  EXPECT_NEAR(n.mean().item<double>(), 3.0, 0.05);
  EXPECT_NEAR(n.std().item<double>(), 0.5, 0.05);
  EXPECT_THROW_MSG(zeros({2}, kLong).uniform_(), "uniform_: expected a floating point tensor, got Long");
  EXPECT_THROW_MSG(zeros({2}).uniform_(1, 0), "uniform_: expected from <= to, got from=1 to=0");
  EXPECT_THROW_MSG(zeros({2}).normal_(0, -1), "normal_: expected std >= 0, got -1");
}

TEST(TensorApi, StrConcatenatesLikeC10Str) { EXPECT_EQ(str("dcgan-sample-", 3, ".pt"), "dcgan-sample-3.pt"); }

TEST(TensorApi, EmptyTypedListsKeepTheirElementType) {
  EXPECT_EQ(tensor(std::vector<int64_t>{}).dtype(), kLong);
  EXPECT_EQ(tensor(std::vector<bool>{}).dtype(), kBool);
  EXPECT_EQ(tensor(std::vector<double>{}).dtype(), kFloat);  // floating lists take the default dtype, as libtorch
  EXPECT_EQ(tensor(std::vector<double>{1.0, 2.0}).dtype(), kFloat);
}

// Assigning to a temporary writes into the tensor it views, as in libtorch; assigning to a named handle rebinds it.
TEST(TensorApi, AssigningToATemporaryWritesItsElements) {
  Tensor x = zeros({3, 2});
  x[0] = 5;
  x.narrow(0, 1, 1) = tensor({{1.0, 2.0}}, kFloat);
  x[2] = tensor({7.0}, kFloat);  // broadcast, as copy_
  EXPECT_VALUES(x, {5, 5, 1, 2, 7, 7});
  Tensor w = ones({2}).requires_grad_(true);
  (w * 3).sum().backward();
  w.grad().data() = w.grad().data() / 3;  // pytorch/examples' dist-mnist.cpp scales its gradients so
  EXPECT_VALUES(w.grad(), {1, 1});
  Tensor handle = x;
  handle = zeros({1});
  EXPECT_EQ(x.numel(), 6);  // x still refers to its own tensor
}
