// Matrix products: matmul in every rank combination (against hand-computed values and loops of
// mm), gradients including broadcast batch dims and strided operands, and the errors.

#include "helpers.h"

using namespace strata;

TEST(Linalg, MatmulByHand) {
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}).reshape({2, 3});
  Tensor b = tensor({7.0, 8.0, 9.0, 10.0, 11.0, 12.0}).reshape({3, 2});
  Tensor c = a.matmul(b);
  EXPECT_EQ(c.sizes(), IntArrayRef({2, 2}));
  EXPECT_EQ(c.dtype(), kFloat);
  EXPECT_VALUES(c, {58, 64, 139, 154});
  EXPECT_VALUES(mm(a, b), {58, 64, 139, 154});
  // Transposed operands are used as they are: (b^T a^T)^T = a b.
  EXPECT_VALUES(b.t().matmul(a.t()).t(), {58, 64, 139, 154});
  EXPECT_VALUES(a.matmul(a.t()), {14, 32, 32, 77});
}

TEST(Linalg, MatmulVectorCases) {
  Tensor v = tensor({1.0, 2.0, 3.0}, kFloat64);
  Tensor w = tensor({4.0, -5.0, 6.0}, kFloat64);
  Tensor dot = v.matmul(w);
  EXPECT_EQ(dot.dim(), 0);
  EXPECT_VALUES(dot, {12});
  Tensor int_dot = tensor({1, 2}).matmul(tensor({3, 4}));  // int64 products stay int64
  EXPECT_EQ(int_dot.dtype(), kLong);
  EXPECT_EQ(int_dot.item<int64_t>(), 11);
  Tensor m = tensor({1.0, 0.0, 2.0, 0.0, 1.0, -1.0}, kFloat64).reshape({3, 2});
  Tensor vm = v.matmul(m);  // [3] @ [3, 2] -> [2]
  EXPECT_EQ(vm.sizes(), IntArrayRef({2}));
  EXPECT_VALUES(vm, {8, -3});
  Tensor mv = m.t().matmul(v);  // [2, 3] @ [3] -> [2]
  EXPECT_EQ(mv.sizes(), IntArrayRef({2}));
  EXPECT_VALUES(mv, {8, -3});
  Tensor batch = arange(12, kFloat64).reshape({2, 2, 3});
  Tensor bv = batch.matmul(v);  // [2, 2, 3] @ [3] -> [2, 2]
  EXPECT_EQ(bv.sizes(), IntArrayRef({2, 2}));
  EXPECT_VALUES(bv, {8, 26, 44, 62});
  Tensor vb = tensor({1.0, -1.0}, kFloat64).matmul(batch);  // [2] @ [2, 2, 3] -> [2, 3]
  EXPECT_EQ(vb.sizes(), IntArrayRef({2, 3}));
  EXPECT_VALUES(vb, {-3, -3, -3, -3, -3, -3});
}

// float32 products run on oneDNN's sgemm except the small ones and a long inner dim into a large output, which
// stay with Eigen's, as float64 does (Note [GEMM backend] in tensor/cpu/gemm.cpp): each layout the kernel maps
// without a copy (row- and column-major slices, leading dims wider than a row, a broadcast batch, one batch per
// thread), against float64 products.
TEST(Linalg, Float32ProductsTakeOneDnnInEveryLayout) {
  manual_seed(5);
  auto check = [](const Tensor& a, const Tensor& b, const char* path) {
    const Tensor expected = a.to(kFloat64).matmul(b.to(kFloat64));
    const Tensor c = a.matmul(b);
    EXPECT_EQ(last_dispatch("matmul"), path);
    EXPECT_LT(strata::testing::normalized_error(c, expected), 1e-6);
  };
  const char* onednn = "onednn sgemm (Float)";
  Tensor a = randn({40, 48}), b = randn({48, 36});
  check(a, b, onednn);
  check(randn({48, 40}).t(), b, onednn);                                            // left operand column-major
  check(a, randn({36, 48}).t(), onednn);                                            // right operand column-major
  check(randn({48, 40}).t(), randn({36, 48}).t(), onednn);                          // both
  check(randn({40, 60}).slice(1, 0, 48), randn({48, 50}).slice(1, 5, 41), onednn);  // leading dims > cols
  check(randn({60, 40}).slice(0, 6, 54).t(), b, onednn);                        // column-major with a wide leading dim
  check(randn({3, 40, 48}), b, onednn);                                         // a batch folded into the rows
  check(randn({3, 40, 48}), randn({1, 48, 36}).expand({3, 48, 36}), onednn);    // a broadcast batch
  check(randn({5, 2, 40, 48}).transpose(0, 1), randn({2, 5, 48, 36}), onednn);  // a batch that is copied
  check(randn({64, 32, 32}), randn({64, 32, 32}), onednn);        // many small products, one batch per thread
  check(randn({16, 16}), randn({16, 16}), "eigen gemm");          // 2^12 multiply-adds: below the threshold
  check(randn({300, 256}).t(), randn({300, 256}), "eigen gemm");  // X^T G: K 300 > 256, a 2^16 output
  check(randn({300, 40}).t(), randn({300, 36}), onednn);          // the same with a small output
  check(randn({40, 48}, kFloat64), randn({48, 36}, kFloat64), "eigen gemm");
}

TEST(Linalg, BatchedBroadcastMatchesLoopOfMm) {
  Tensor a = randn({2, 1, 3, 4}, kFloat64);
  Tensor b = randn({3, 4, 5}, kFloat64);
  Tensor c = a.matmul(b);
  ASSERT_EQ(c.sizes(), IntArrayRef({2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_ALLCLOSE(c[i][j], a[i][0].mm(b[j]));
  // [.., M, K] @ [K, N] folds the batch into M.
  Tensor x = randn({2, 3, 4}, kFloat64), w = randn({4, 5}, kFloat64);
  Tensor y = x.matmul(w);
  ASSERT_EQ(y.sizes(), IntArrayRef({2, 3, 5}));
  for (int64_t i = 0; i < 2; ++i) EXPECT_ALLCLOSE(y[i], x[i].mm(w));
  // The same through a batch that cannot be folded (a transposed batch).
  Tensor xt = randn({3, 2, 4}, kFloat64).transpose(0, 1);
  Tensor yt = xt.matmul(w);
  for (int64_t i = 0; i < 2; ++i) EXPECT_ALLCLOSE(yt[i], xt[i].mm(w));
  // Batch dims that broadcast in a way no single stride describes: copied, still right.
  Tensor p = randn({2, 1, 3, 4}, kFloat64).transpose(0, 1);  // [1, 2, 3, 4] with a permuted batch
  Tensor q = randn({3, 1, 4, 2}, kFloat64);
  Tensor r = p.matmul(q);
  ASSERT_EQ(r.sizes(), IntArrayRef({3, 2, 3, 2}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) EXPECT_ALLCLOSE(r[i][j], p[0][j].mm(q[i][0]));
  Tensor bm = bmm(randn({2, 3, 4}, kFloat64), randn({2, 4, 2}, kFloat64));
  EXPECT_EQ(bm.sizes(), IntArrayRef({2, 3, 2}));
}

TEST(Linalg, EmptyAndZeroInnerDims) {
  Tensor c = zeros({2, 0}).matmul(zeros({0, 3}));
  EXPECT_EQ(c.sizes(), IntArrayRef({2, 3}));
  EXPECT_VALUES(c, {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(zeros({0, 4}).matmul(zeros({4, 3})).sizes(), IntArrayRef({0, 3}));
}

TEST(Linalg, MatmulGradients) {
  auto product = [](const tensor_list& in) { return in[0].matmul(in[1]); };
  EXPECT_GRADCHECK(product, {leaf({3, 4}), leaf({4, 2})});
  EXPECT_GRADCHECK(product, {leaf({4}), leaf({4})});
  EXPECT_GRADCHECK(product, {leaf({4}), leaf({4, 2})});
  EXPECT_GRADCHECK(product, {leaf({3, 4}), leaf({4})});
  EXPECT_GRADCHECK(product, {leaf({2, 3, 4}), leaf({4})});
  EXPECT_GRADCHECK(product, {leaf({4}), leaf({2, 4, 3})});
  EXPECT_GRADCHECK(product, {leaf({2, 3, 4}), leaf({4, 2})});  // folded batch
  EXPECT_GRADCHECK(product, {leaf({3, 4}), leaf({2, 4, 2})});
  EXPECT_GRADCHECK(product, {leaf({2, 1, 3, 4}), leaf({3, 4, 2})});  // broadcast batch dims
  auto strided = [](const tensor_list& in) {
    return in[0].transpose(-1, -2).matmul(in[1].slice(0, 0, 4, 2).t());  // [2, 3] @ [3, 2]
  };
  EXPECT_GRADCHECK(strided, {leaf({3, 2}), leaf({8, 3})});
  auto expanded = [](const tensor_list& in) { return in[0].expand({2, 3, 4}).matmul(in[1]); };
  EXPECT_GRADCHECK(expanded, {leaf({3, 4}), leaf({2, 4, 2})});
  auto with_mm = [](const tensor_list& in) { return mm(in[0], in[1].t()); };
  auto with_bmm = [](const tensor_list& in) { return in[0].bmm(in[1]); };
  EXPECT_GRADCHECK(with_mm, {leaf({2, 3}), leaf({4, 3})});
  EXPECT_GRADCHECK(with_bmm, {leaf({2, 3, 4}), leaf({2, 4, 2})});

  EXPECT_GRADGRADCHECK(product, {leaf({3, 4}), leaf({4, 2})});
  EXPECT_GRADGRADCHECK(product, {leaf({2, 3, 4}), leaf({4})});
  EXPECT_GRADGRADCHECK(product, {leaf({2, 1, 3, 4}), leaf({3, 4, 2})});
}

TEST(Linalg, MatmulGradientByHand) {
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).reshape({2, 2}).requires_grad_();
  Tensor b = tensor({5.0, 6.0}, f64());
  a.matmul(b).sum().backward();  // d/da = 1 b^T per row, d/db = column sums of a
  EXPECT_VALUES(a.grad(), {5, 6, 5, 6});
  EXPECT_VALUES(b.grad(), {4, 6});
  Tensor w = ones({3, 2}, f64());
  zeros({4, 3}, kFloat64).matmul(w).sum().backward();  // only w needs a gradient
  EXPECT_VALUES(w.grad(), {0, 0, 0, 0, 0, 0});
  EXPECT_STREQ(ones({2, 2}, f64()).matmul(ones({2, 2}, kFloat64)).grad_fn()->name(), "MatmulBackward");
  // A linear layer, x @ w.t(): w's gradient comes out in w's own (contiguous) layout.
  Tensor x = randn({5, 3}, kFloat64), lin = randn({4, 3}, f64());
  x.matmul(lin.t()).sum().backward();
  EXPECT_TRUE(lin.grad().is_contiguous());
  EXPECT_ALLCLOSE(lin.grad(), ones({5, 4}, kFloat64).t().matmul(x));
}

TEST(Linalg, Errors) {
  EXPECT_THROW_MSG(ones({2, 3}).matmul(ones({4, 5})), "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(ones({3}).matmul(ones({4})), "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(ones({2, 3}).matmul(ones({3, 2}, kFloat64)),
                   "matmul: expected both operands to have the same dtype, got Float and Double");
  EXPECT_THROW_MSG(ones({2, 2}, kBool).matmul(ones({2, 2}, kBool)), "matmul does not support Bool tensors");
  EXPECT_THROW_MSG(scalar_tensor(1).matmul(ones({2})), "matmul: both arguments need to be at least 1-D");
  EXPECT_THROW_MSG(ones({2, 2, 3}).matmul(ones({3, 3, 2})), "matmul");
  EXPECT_THROW_MSG(mm(ones({2, 2, 2}), ones({2, 2})), "mm: expected 2-D tensors, got shapes [2, 2, 2] and [2, 2]");
  EXPECT_THROW_MSG(mm(ones({2, 3}), ones({2, 3})), "mm: shapes [2, 3] and [2, 3] cannot be multiplied (3 != 2)");
  EXPECT_THROW_MSG(bmm(ones({2, 3}), ones({3, 2})), "bmm: expected 3-D tensors");
  EXPECT_THROW_MSG(bmm(ones({2, 2, 3}), ones({3, 3, 2})), "bmm: expected equal batch sizes");
}
