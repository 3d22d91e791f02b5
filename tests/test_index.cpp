// Indexing ops: forward values on hand-worked cases, gradients (gradcheck in float64, repeated
// indices accumulating, non-contiguous inputs, gradgradcheck) and the errors users hit.

#include "helpers.h"

using namespace strata;

namespace {
/// arange(numel).reshape(sizes) as float32.
Tensor iota(IntArrayRef sizes) { return arange(multiply(sizes), kFloat).reshape(sizes); }
/// An int64 tensor of the given values and sizes.
Tensor longs(std::initializer_list<int64_t> values, IntArrayRef sizes) { return tensor(values).view(sizes); }
}  // namespace

// ---- index_select ----

TEST(Index, IndexSelectValues) {
  Tensor x = iota({3, 4});
  Tensor rows = x.index_select(0, tensor({2, 0, 2}));
  EXPECT_EQ(rows.sizes(), IntArrayRef({3, 4}));
  EXPECT_VALUES(rows, {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  EXPECT_VALUES(x.index_select(1, tensor({3, 1})), {3, 1, 7, 5, 11, 9});
  EXPECT_VALUES(index_select(x.t(), -1, tensor({1})), {4, 5, 6, 7});  // non-contiguous input
  EXPECT_VALUES(x.index_select(0, tensor({0, 1, 2}).slice(0, 0, 3, 2)), {0, 1, 2, 3, 8, 9, 10, 11});  // strided index
  Tensor one = x.index_select(0, scalar_tensor(1, kLong));
  EXPECT_EQ(one.sizes(), IntArrayRef({1, 4}));
  EXPECT_EQ(x.index_select(1, tensor(std::vector<int64_t>{})).sizes(), IntArrayRef({3, 0}));
}

TEST(Index, IndexSelectGradients) {
  Tensor x = leaf({3, 4});
  x.index_select(0, tensor({2, 0, 2})).sum().backward();  // row 2 picked twice: gradients accumulate
  EXPECT_VALUES(x.grad(), {1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2});

  auto rows_fn = [](const tensor_list& in) { return in[0].index_select(0, tensor({1, 1, 0})); };
  auto cols_fn = [](const tensor_list& in) { return in[0].t().index_select(1, tensor({2, 0, 2})); };
  EXPECT_GRADCHECK(rows_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(cols_fn, {leaf({3, 2})});
  auto square_fn = [](const tensor_list& in) {
    Tensor y = in[0].index_select(1, tensor({0, 2, 0}));
    return y * y;
  };
  EXPECT_GRADGRADCHECK(square_fn, {leaf({2, 3})});
}

TEST(Index, IndexSelectErrors) {
  Tensor x = iota({3, 4});
  EXPECT_THROW_MSG(x.index_select(0, tensor({1.0})),
                   "index_select(): Expected dtype int32 or int64 for index, got Float");
  EXPECT_THROW_MSG(x.index_select(0, tensor({0, -1})),
                   "index_select(): index -1 is out of range for dimension 0 with size 3");
  EXPECT_THROW_MSG(x.index_select(1, tensor({4})),
                   "index_select(): index 4 is out of range for dimension 1 with size 4");
  EXPECT_THROW_MSG(x.index_select(0, longs({0, 1}, {1, 2})),
                   "index_select(): index must be 0-D or 1-D, got shape [1, 2]");
  EXPECT_THROW_MSG(x.index_select(2, tensor({0})), "index_select(): dimension out of range");
}

// ---- gather ----

TEST(Index, GatherValues) {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}).view({2, 2});
  EXPECT_VALUES(x.gather(1, longs({0, 0, 1, 0}, {2, 2})), {1, 1, 4, 3});
  Tensor g0 = x.gather(0, longs({1, 0}, {1, 2}));  // index smaller than the input along dim 1
  EXPECT_EQ(g0.sizes(), IntArrayRef({1, 2}));
  EXPECT_VALUES(g0, {3, 2});
  EXPECT_VALUES(gather(x.t(), 1, longs({1, 1, 1}, {1, 3})).view({-1}).slice(0, 0, 2), {3, 3});
  EXPECT_VALUES(x.gather(0, longs({1, 1, 0, 0, 1, 0}, {3, 2})), {3, 4, 1, 2, 3, 2});  // larger along dim
}

TEST(Index, GatherGradients) {
  Tensor x = leaf({2, 3});
  x.gather(1, longs({2, 2, 0, 1}, {2, 2})).sum().backward();
  EXPECT_VALUES(x.grad(), {0, 0, 2, 1, 1, 0});

  auto gather_fn = [](const tensor_list& in) { return in[0].gather(0, longs({1, 0, 1, 1, 0, 0}, {2, 3})); };
  auto strided_fn = [](const tensor_list& in) { return in[0].t().gather(1, longs({0, 0, 1, 1}, {2, 2})); };
  EXPECT_GRADCHECK(gather_fn, {leaf({2, 3})});
  EXPECT_GRADCHECK(strided_fn, {leaf({3, 2})});
  auto square_fn = [](const tensor_list& in) {
    Tensor y = in[0].gather(1, longs({2, 2, 0, 1}, {2, 2}));
    return y * y;
  };
  EXPECT_GRADGRADCHECK(square_fn, {leaf({2, 3})});
}

TEST(Index, GatherErrors) {
  Tensor x = zeros({2, 2});
  EXPECT_THROW_MSG(x.gather(0, tensor({0.0, 1.0}).view({1, 2})), "gather(): Expected dtype int64 for index, got Float");
  EXPECT_THROW_MSG(x.gather(0, tensor({0, 1})),
                   "gather(): index of shape [2] must have as many dimensions as the input of shape [2, 2]");
  EXPECT_THROW_MSG(x.gather(0, longs({0, 0, 0}, {1, 3})),
                   "gather(): index of shape [1, 3] is larger than the input of shape [2, 2] at dimension 1");
  EXPECT_THROW_MSG(x.gather(3, longs({0}, {1, 1})), "gather(): dimension out of range");
  EXPECT_THROW(x.gather(0, longs({2, 0}, {1, 2})), strata::Error);  // index value out of range
}

// ---- scatter_add ----

TEST(Index, ScatterAddValues) {
  // torch's documented example.
  Tensor src = ones({2, 5});
  Tensor a = zeros({3, 5});
  Tensor corner = a.scatter_add(0, longs({0, 1, 2, 0, 0}, {1, 5}), src);  // only src's first row is used
  EXPECT_VALUES(corner, {1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0});
  Tensor both = a.scatter_add(0, longs({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}, {2, 5}), src);
  EXPECT_VALUES(both, {2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1});
  EXPECT_TRUE(::strata::testing::values_are(a, std::vector<double>(15, 0.0)));  // out of place: a is untouched
  Tensor base = iota({2, 3});
  EXPECT_VALUES(scatter_add(base, 1, longs({2, 2, 0}, {1, 3}), tensor({1.0, 10.0, 100.0}).view({1, 3})),
                {100, 1, 13, 3, 4, 5});
}

TEST(Index, ScatterAddGradients) {
  Tensor a = leaf({3, 2}), src = leaf({2, 2});
  Tensor index = longs({2, 0, 2, 2}, {2, 2});
  Tensor w = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, kFloat64).view({3, 2});
  (a.scatter_add(0, index, src) * w).sum().backward();
  EXPECT_VALUES(a.grad(), {1, 2, 3, 4, 5, 6});
  EXPECT_VALUES(src.grad(), {5, 2, 5, 6});  // src.grad[i][j] = w[index[i][j]][j]

  auto fn = [](const tensor_list& in) { return in[0].scatter_add(1, longs({1, 1, 0, 0}, {2, 2}), in[1]); };
  EXPECT_GRADCHECK(fn, {leaf({2, 3}), leaf({2, 2})});
  auto corner_fn = [](const tensor_list& in) {
    return in[0].t().scatter_add(0, longs({0, 2}, {1, 2}), in[1]);  // src [2, 3] larger than index
  };
  EXPECT_GRADCHECK(corner_fn, {leaf({2, 3}), leaf({2, 3})});
  auto square_fn = [](const tensor_list& in) {
    Tensor y = in[0].scatter_add(0, longs({1, 1}, {1, 2}), in[1]);
    return y * y;
  };
  EXPECT_GRADGRADCHECK(square_fn, {leaf({2, 2}), leaf({1, 2})});
}

TEST(Index, ScatterAddErrors) {
  Tensor a = zeros({3, 2});
  EXPECT_THROW_MSG(a.scatter_add(0, tensor({0.0}).view({1, 1}), ones({1, 1})),
                   "scatter_add(): Expected dtype int64 for index, got Float");
  EXPECT_THROW_MSG(a.scatter_add(0, longs({0}, {1, 1}), ones({1, 1}, kFloat64)),
                   "scatter_add(): expected src of dtype Float like self, got Double");
  EXPECT_THROW_MSG(a.scatter_add(0, tensor({0}), ones({1})), "must have the same number of dimensions");
  EXPECT_THROW_MSG(a.scatter_add(0, longs({0, 0}, {1, 2}), ones({1, 1})),
                   "scatter_add(): index of shape [1, 2] is larger than src of shape [1, 1]");
}

// ---- masked_fill ----

TEST(Index, MaskedFill) {
  Tensor x = iota({2, 3});
  Tensor mask = tensor({true, false, true});
  EXPECT_VALUES(x.masked_fill(mask, -1), {-1, 1, -1, -1, 4, -1});
  EXPECT_VALUES(x, {0, 1, 2, 3, 4, 5});  // out of place
  EXPECT_VALUES(masked_fill(x.t(), tensor({false, true}), 9), {0, 9, 1, 9, 2, 9});
  EXPECT_EQ(x.masked_fill(mask, 1).dtype(), kFloat);
  // The value is converted exactly to the tensor's dtype: an int64 above 2^53 survives.
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor filled = tensor({1, 2}).masked_fill(tensor({false, true}), big);
  EXPECT_EQ(filled.dtype(), kLong);
  EXPECT_EQ(filled[1].item<int64_t>(), big);

  Tensor y = leaf({2, 3});
  y.masked_fill(mask, 5).sum().backward();
  EXPECT_VALUES(y.grad(), {0, 1, 0, 0, 1, 0});
  auto fn = [](const tensor_list& in) { return in[0].t().masked_fill(tensor({true, false}), 2.5) * in[0].t(); };
  EXPECT_GRADCHECK(fn, {leaf({2, 3})});

  EXPECT_THROW_MSG(x.masked_fill(zeros({3}), 1), "masked_fill: expected a mask of dtype Bool, got Float");
  EXPECT_THROW_MSG(zeros({3}).masked_fill(tensor({true, false, true, true, false, true}).view({2, 3}), 1),
                   "masked_fill: mask of shape [2, 3] does not broadcast to the tensor's shape [3]");
}

// ---- embedding ----

TEST(Index, EmbeddingValuesAndAccumulation) {
  Tensor weight = arange(15, kFloat64).reshape({5, 3}).requires_grad_(true);
  Tensor indices = longs({0, 2, 2, 4}, {2, 2});
  Tensor out = embedding(weight, indices);
  EXPECT_EQ(out.sizes(), IntArrayRef({2, 2, 3}));
  EXPECT_VALUES(out, {0, 1, 2, 6, 7, 8, 6, 7, 8, 12, 13, 14});
  out.sum().backward();  // row 2 is used twice: its gradient accumulates
  EXPECT_VALUES(weight.grad(), {1, 1, 1, 0, 0, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1});
  EXPECT_EQ(embedding(weight, scalar_tensor(3, kLong)).sizes(), IntArrayRef({3}));
  EXPECT_VALUES(embedding(weight.t().t(), indices.t()).select(0, 1), {6, 7, 8, 12, 13, 14});

  auto fn = [](const tensor_list& in) { return embedding(in[0], longs({1, 3, 1, 1, 0, 3}, {2, 3}).t()); };
  EXPECT_GRADCHECK(fn, {leaf({4, 2})});
  auto square_fn = [](const tensor_list& in) {
    Tensor y = embedding(in[0].t(), tensor({1, 1, 0}));
    return y * y;
  };
  EXPECT_GRADGRADCHECK(square_fn, {leaf({3, 2})});
}

TEST(Index, EmbeddingErrors) {
  Tensor weight = zeros({5, 3});
  EXPECT_THROW_MSG(embedding(weight, tensor({1, 7})),
                   "embedding: index 7 is out of range for num_embeddings V = 5 (weight shape [5, 3])");
  EXPECT_THROW_MSG(embedding(weight, tensor({-1})), "embedding: index -1 is out of range for num_embeddings V = 5");
  EXPECT_THROW_MSG(embedding(weight, tensor({1.0})),
                   "embedding(): Expected dtype int32 or int64 for indices, got Float");
  EXPECT_THROW_MSG(embedding(zeros({5}), tensor({1})),
                   "embedding: expected weight of shape [num_embeddings, embedding_dim], got shape [5]");
}
