// Shape, view and conversion ops: storage sharing, forward values on hand-worked cases, gradients
// (gradcheck in float64 including non-contiguous inputs, gradgradcheck), and the errors users hit.

#include "helpers.h"

using namespace strata;

namespace {
/// arange(numel).reshape(sizes) as float32.
Tensor iota(IntArrayRef sizes) { return arange(multiply(sizes), kFloat).reshape(sizes); }
}  // namespace

// ---- storage sharing ----

TEST(Shape, ViewsShareStorage) {
  Tensor x = iota({2, 3});
  float* base = x.data_ptr<float>();
  Tensor v = x.view({3, 2});
  EXPECT_TRUE(v.is_alias_of(x));
  EXPECT_EQ(v.data_ptr<float>(), base);
  v.data_ptr<float>()[1] = 42;  // writing through the view changes the base
  EXPECT_VALUES(x, {0, 42, 2, 3, 4, 5});

  EXPECT_EQ(x.select(1, 2).data_ptr<float>(), base + 2);
  EXPECT_EQ(x[1].data_ptr<float>(), base + 3);
  EXPECT_EQ(x.narrow(1, 1, 2).data_ptr<float>(), base + 1);
  EXPECT_EQ(x.slice(0, 1).storage_offset(), 3);
  EXPECT_EQ(x.t().data_ptr<float>(), base);
  EXPECT_EQ(x.t().strides(), IntArrayRef({1, 3}));
  for (const Tensor& part : x.split(1, 1)) EXPECT_TRUE(part.is_alias_of(x));
  EXPECT_EQ(x.chunk(3, 1)[2].data_ptr<float>(), base + 2);
  for (const Tensor& t : {x.unsqueeze(0), x.squeeze(), x.expand({4, 2, 3}), x.permute({1, 0}), x.flatten(),
                          x.reshape({6}), x.as_strided({2}, {2}, 1)})
    EXPECT_TRUE(t.is_alias_of(x));

  // copy_ into a view writes the base.
  x.narrow(1, 0, 2).copy_(zeros({2, 2}));
  EXPECT_VALUES(x, {0, 0, 2, 0, 0, 5});
  x.select(0, 1).copy_(tensor({7.0}));  // broadcast src
  EXPECT_VALUES(x, {0, 0, 2, 7, 7, 7});
}

TEST(Shape, ContiguousCopiesOnlyWhenNeeded) {
  Tensor x = iota({2, 3});
  EXPECT_TRUE(x.contiguous().is_same(x));
  Tensor xt = x.t();
  EXPECT_FALSE(xt.is_contiguous());
  Tensor c = xt.contiguous();
  EXPECT_FALSE(c.is_same(xt));
  EXPECT_FALSE(c.is_alias_of(x));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_VALUES(c, {0, 3, 1, 4, 2, 5});
  EXPECT_EQ(c.strides(), IntArrayRef({2, 1}));

  EXPECT_FALSE(x.unsqueeze(0).expand({4, 2, 3}).is_contiguous());
  EXPECT_TRUE(x.expand({2, 3}).is_contiguous());
  EXPECT_TRUE(x.unsqueeze(1).is_contiguous());
  EXPECT_FALSE(x.slice(1, 0, 3, 2).is_contiguous());
  EXPECT_TRUE(x.narrow(0, 1, 1).is_contiguous());
}

TEST(Shape, ViewAndReshape) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(x.view({-1}).sizes(), IntArrayRef({6}));
  EXPECT_EQ(x.view({3, -1}).sizes(), IntArrayRef({3, 2}));
  EXPECT_EQ(x.view({1, 6, 1}).strides(), IntArrayRef({6, 1, 1}));
  EXPECT_THROW_MSG(x.t().view({6}), "view size is not compatible with input tensor's size and stride");
  EXPECT_THROW_MSG(x.t().view({6}), "Use .reshape(...) instead.");
  EXPECT_EQ(x.t().view({3, 2}).strides(), IntArrayRef({1, 3}));  // same shape: always a view
  EXPECT_EQ(x.t().unsqueeze(0).view({3, 2}).strides(), IntArrayRef({1, 3}));

  // A sliced tensor views as long as the merged dims stay contiguous.
  Tensor big = iota({4, 6});
  Tensor cols = big.slice(1, 0, 3);
  EXPECT_EQ(cols.view({2, 2, 3}).strides(), IntArrayRef({12, 6, 1}));
  EXPECT_THROW_MSG(cols.view({12}), "view size is not compatible");
  Tensor rows = big.slice(0, 1, 3);  // rows 1..2: contiguous
  EXPECT_EQ(rows.view({3, 4}).storage_offset(), 6);

  Tensor r = x.t().reshape({6});  // a copy
  EXPECT_FALSE(r.is_alias_of(x));
  EXPECT_VALUES(r, {0, 3, 1, 4, 2, 5});
  EXPECT_TRUE(x.reshape({3, 2}).is_alias_of(x));
  EXPECT_VALUES(x.reshape({3, 2}), {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(scalar_tensor(3).reshape({1, 1}).sizes(), IntArrayRef({1, 1}));
  EXPECT_EQ(zeros({0, 3}).reshape({3, 0}).sizes(), IntArrayRef({3, 0}));

  EXPECT_THROW_MSG(x.view({4, 2}), "view: shape [4, 2] (8 elements) is invalid for input of shape [2, 3] (6 elements)");
  EXPECT_THROW_MSG(x.reshape({4, -1}), "reshape: shape [4, -1] is invalid for input of shape [2, 3] (6 elements)");
  EXPECT_THROW_MSG(x.view({-1, -1}), "only one dimension can be inferred");
  EXPECT_THROW_MSG(x.view({-2, 3}), "invalid shape dimension -2");
  EXPECT_THROW_MSG(zeros({0, 3}).reshape({0, -1}), "can be any value");
}

// ---- forward values ----

TEST(Shape, UnsqueezeSqueezeFlatten) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(x.unsqueeze(0).sizes(), IntArrayRef({1, 2, 3}));
  EXPECT_EQ(x.unsqueeze(-1).sizes(), IntArrayRef({2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(1).sizes(), IntArrayRef({2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(1).strides(), IntArrayRef({3, 3, 1}));
  EXPECT_EQ(scalar_tensor(1).unsqueeze(0).sizes(), IntArrayRef({1}));
  Tensor y = zeros({1, 2, 1, 3});
  EXPECT_EQ(y.squeeze().sizes(), IntArrayRef({2, 3}));
  EXPECT_EQ(y.squeeze(2).sizes(), IntArrayRef({1, 2, 3}));
  EXPECT_EQ(y.squeeze(1).sizes(), IntArrayRef({1, 2, 1, 3}));  // not size 1: unchanged
  EXPECT_EQ(squeeze(y, -4).sizes(), IntArrayRef({2, 1, 3}));
  EXPECT_EQ(zeros({1, 1}).squeeze().dim(), 0);

  Tensor z = iota({2, 3, 4});
  EXPECT_EQ(z.flatten().sizes(), IntArrayRef({24}));
  EXPECT_EQ(z.flatten(1).sizes(), IntArrayRef({2, 12}));
  EXPECT_EQ(z.flatten(0, 1).sizes(), IntArrayRef({6, 4}));
  EXPECT_TRUE(z.flatten(1, 1).is_same(z));
  EXPECT_EQ(scalar_tensor(1).flatten().sizes(), IntArrayRef({1}));
  EXPECT_VALUES(z.transpose(0, 2).flatten(1).select(0, 1), {1, 13, 5, 17, 9, 21});
}

TEST(Shape, ExpandPermuteTranspose) {
  Tensor x = tensor({1.0, 2.0, 3.0});
  Tensor e = x.expand({2, 3});
  EXPECT_EQ(e.strides(), IntArrayRef({0, 1}));
  EXPECT_VALUES(e, {1, 2, 3, 1, 2, 3});
  Tensor col = x.view({3, 1}).expand({-1, 2});
  EXPECT_EQ(col.sizes(), IntArrayRef({3, 2}));
  EXPECT_VALUES(col, {1, 1, 2, 2, 3, 3});
  EXPECT_EQ(x.expand_as(zeros({4, 3})).sizes(), IntArrayRef({4, 3}));

  Tensor z = iota({2, 3, 4});
  Tensor p = z.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), IntArrayRef({4, 2, 3}));
  EXPECT_EQ(p.strides(), IntArrayRef({1, 12, 4}));
  EXPECT_VALUES(p.select(0, 1), {1, 5, 9, 13, 17, 21});
  EXPECT_EQ(z.permute({-1, 0, 1}).sizes(), IntArrayRef({4, 2, 3}));
  EXPECT_EQ(z.transpose(0, -1).sizes(), IntArrayRef({4, 3, 2}));
  EXPECT_VALUES(iota({2, 3}).t(), {0, 3, 1, 4, 2, 5});
  EXPECT_EQ(x.t().sizes(), IntArrayRef({3}));
}

TEST(Shape, NarrowSliceSelect) {
  Tensor x = iota({3, 4});
  EXPECT_VALUES(x.narrow(1, 1, 2), {1, 2, 5, 6, 9, 10});
  EXPECT_VALUES(x.narrow(0, -1, 1), {8, 9, 10, 11});
  EXPECT_VALUES(x.slice(1, 1, std::nullopt, 2), {1, 3, 5, 7, 9, 11});
  EXPECT_VALUES(x.slice(1, -3, -1), {1, 2, 5, 6, 9, 10});
  EXPECT_VALUES(x.slice(0, std::nullopt, 100), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});  // clamped
  EXPECT_EQ(x.slice(1, 3, 1).sizes(), IntArrayRef({3, 0}));                              // end before start: empty
  EXPECT_EQ(x.slice(1, -100, 2).sizes(), IntArrayRef({3, 2}));
  EXPECT_EQ(x.slice(1, 0, 4, 3).sizes(), IntArrayRef({3, 2}));
  EXPECT_VALUES(x.select(1, -1), {3, 7, 11});
  EXPECT_VALUES(x[2], {8, 9, 10, 11});
  EXPECT_EQ(x[1][2].dim(), 0);
  EXPECT_EQ(x[1][2].item<float>(), 6);
  EXPECT_VALUES(x.t().slice(0, 1, 3).select(1, 2), {9, 10});
}

TEST(Shape, SplitChunk) {
  Tensor x = iota({5, 2});
  tensor_list s = x.split(2);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_VALUES(s[0], {0, 1, 2, 3});
  EXPECT_VALUES(s[1], {4, 5, 6, 7});
  EXPECT_VALUES(s[2], {8, 9});
  tensor_list w = x.split({1, 4});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].sizes(), IntArrayRef({4, 2}));
  EXPECT_VALUES(w[1], {2, 3, 4, 5, 6, 7, 8, 9});
  tensor_list cols = split(x, 1, 1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_VALUES(cols[1], {1, 3, 5, 7, 9});
  EXPECT_EQ(x.split(10).size(), 1u);

  tensor_list c = x.chunk(2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].sizes(), IntArrayRef({3, 2}));
  EXPECT_EQ(c[1].sizes(), IntArrayRef({2, 2}));
  EXPECT_EQ(iota({6}).chunk(4).size(), 3u);  // sizes 2, 2, 2 as in torch
  EXPECT_EQ(iota({5}).chunk(5).size(), 5u);
  EXPECT_EQ(zeros({0}).chunk(3).size(), 3u);
}

TEST(Shape, CatStackRepeat) {
  Tensor a = iota({2, 2});
  Tensor b = iota({1, 2}) + 10;
  EXPECT_VALUES(cat({a, b}), {0, 1, 2, 3, 10, 11});
  Tensor c = cat({a, a.t()}, 1);
  EXPECT_EQ(c.sizes(), IntArrayRef({2, 4}));
  EXPECT_VALUES(c, {0, 1, 0, 2, 2, 3, 1, 3});
  EXPECT_VALUES(cat({a, zeros({0}), b}, -2), {0, 1, 2, 3, 10, 11});  // 1-D empty tensors are skipped
  EXPECT_VALUES(cat({zeros({0, 2}), b}), {10, 11});
  Tensor promoted = cat({tensor({1, 2}), tensor({0.5}, kFloat64)});
  EXPECT_EQ(promoted.dtype(), kFloat64);
  EXPECT_VALUES(promoted, {1, 2, 0.5});

  Tensor s0 = stack({tensor({1.0, 2.0}), tensor({3.0, 4.0})});
  EXPECT_EQ(s0.sizes(), IntArrayRef({2, 2}));
  EXPECT_VALUES(s0, {1, 2, 3, 4});
  Tensor s1 = stack({tensor({1.0, 2.0}), tensor({3.0, 4.0})}, 1);
  EXPECT_VALUES(s1, {1, 3, 2, 4});
  EXPECT_EQ(stack({scalar_tensor(1), scalar_tensor(2)}).sizes(), IntArrayRef({2}));

  Tensor r = tensor({1.0, 2.0}).repeat({2, 3});
  EXPECT_EQ(r.sizes(), IntArrayRef({2, 6}));
  EXPECT_VALUES(r, {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2});
  Tensor r2 = iota({2, 2}).t().repeat({1, 2});
  EXPECT_VALUES(r2, {0, 2, 0, 2, 1, 3, 1, 3});
  EXPECT_EQ(iota({2}).repeat({0, 1}).sizes(), IntArrayRef({0, 2}));
}

TEST(Shape, AsStrided) {
  Tensor x = iota({6});
  Tensor w = x.as_strided({2, 3}, {1, 1});  // overlapping sliding windows
  EXPECT_VALUES(w, {0, 1, 2, 1, 2, 3});
  EXPECT_VALUES(x.as_strided({2}, {2}, 1), {1, 3});
  EXPECT_VALUES(x.slice(0, 2).as_strided({2}, {1}), {2, 3});  // offset defaults to the input's
  EXPECT_THROW_MSG(x.as_strided({2, 3}, {3, 2}), "need a storage of 8 elements, but the storage holds 6");
  EXPECT_THROW_MSG(x.as_strided({2, 3}, {1}), "as_strided: got 2 sizes [2, 3] but 1 strides [1]");
}

// ---- conversion and copies ----

TEST(Shape, ToCloneCopy) {
  Tensor x = tensor({1.5, -2.5});
  EXPECT_TRUE(x.to(kFloat).is_same(x));
  // libtorch's signature: to(dtype, non_blocking, copy); only copy forces a new tensor.
  EXPECT_TRUE(x.to(kFloat, /*non_blocking=*/true).is_same(x));
  Tensor forced = x.to(kFloat, false, /*copy=*/true);
  EXPECT_FALSE(forced.is_alias_of(x));
  EXPECT_FALSE(x.to(Device(kCPU), false, true).is_alias_of(x));
  EXPECT_TRUE(x.to(TensorOptions()).is_same(x));
  EXPECT_EQ(x.to(TensorOptions().dtype(kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(x.to(TensorOptions(Device(kCPU))).dtype(), kFloat);
  EXPECT_EQ(x.to(tensor({1}, kLong)).dtype(), kLong);
  EXPECT_TRUE(x.to(tensor({1.0})).is_same(x));
  EXPECT_THROW_MSG(x.to(TensorOptions().requires_grad(true)), "to(options): options must not set requires_grad");
  EXPECT_VALUES(x.to(kLong), {1, -2});
  EXPECT_EQ(x.to(kFloat64).dtype(), kFloat64);
  Tensor c = x.clone();
  EXPECT_FALSE(c.is_alias_of(x));
  EXPECT_VALUES(c, {1.5, -2.5});
  Tensor d = zeros({2, 2}, kFloat64);
  d.copy_(tensor({1, 2}));  // int64 broadcast into float64
  EXPECT_VALUES(d, {1, 2, 1, 2});
  EXPECT_THROW_MSG(d.copy_(zeros({3})), "copy_: cannot expand shape [3] to shape [2, 2]");
  uint32_t v = d._version();
  d.copy_(ones({2}));
  EXPECT_GT(d._version(), v);
}

TEST(Shape, ConversionGradients) {
  Tensor x = randn({3}).requires_grad_(true);  // float32
  Tensor y = x.to(kFloat64);
  EXPECT_TRUE(y.requires_grad());
  (y * y).sum().backward();
  EXPECT_EQ(x.grad().dtype(), kFloat);
  EXPECT_ALLCLOSE(x.grad(), x.detach() * 2, 1e-5, 1e-6);
  EXPECT_FALSE(x.to(kLong).requires_grad());

  auto clone_fn = [](const tensor_list& in) { return in[0].t().clone() * in[0].t(); };
  EXPECT_GRADCHECK(clone_fn, {leaf({2, 3})});
  auto contiguous_fn = [](const tensor_list& in) { return in[0].t().contiguous().view({-1}); };
  EXPECT_GRADCHECK(contiguous_fn, {leaf({2, 3})});
  auto to_fn = [](const tensor_list& in) { return in[0].to(kFloat64, false, true) * in[0]; };
  EXPECT_GRADCHECK(to_fn, {leaf({4})});
}

TEST(Shape, CopyGradients) {
  // Into a tensor without history: src gets sum_to of the gradient, cast to its dtype.
  Tensor src = tensor({2.0}, kFloat64).requires_grad_(true);
  Tensor dst = zeros({2, 3});
  dst.copy_(src);
  EXPECT_TRUE(dst.requires_grad());
  (dst * iota({2, 3})).sum().backward();
  EXPECT_EQ(src.grad().dtype(), kFloat64);
  EXPECT_VALUES(src.grad(), {15});

  // Into a non-leaf: its old history gets nothing.
  Tensor x = leaf({3}), w = leaf({3});
  Tensor y = x * 2;
  y.copy_(w);
  (y * y).sum().backward();
  EXPECT_TRUE(!x.grad().defined() || ::strata::testing::values(x.grad()) == std::vector<double>(3, 0.0));
  EXPECT_ALLCLOSE(w.grad(), w.detach() * 2);

  auto copy_fn = [](const tensor_list& in) {
    Tensor y = in[0] * 1;
    y.copy_(in[1]);
    return y * in[0];
  };
  EXPECT_GRADCHECK(copy_fn, {leaf({2, 3}), leaf({3})});
  Tensor l = leaf({2});
  EXPECT_THROW_MSG(l.copy_(zeros({2})), "a leaf Variable that requires grad is being used in an in-place operation");
}

// ---- gradients ----

TEST(Shape, ViewGradcheck) {
  Tensor x = leaf({2, 3, 4});
  auto view_fn = [](const tensor_list& in) { return in[0].view({4, -1}) * 2; };
  auto reshape_fn = [](const tensor_list& in) { return in[0].transpose(0, 2).reshape({-1, 2}); };
  auto flatten_fn = [](const tensor_list& in) { return in[0].permute({1, 0, 2}).flatten(1); };
  auto unsqueeze_fn = [](const tensor_list& in) { return in[0].unsqueeze(1).squeeze() * in[0]; };
  auto squeeze_fn = [](const tensor_list& in) { return in[0].narrow(1, 0, 1).squeeze(1).unsqueeze(0); };
  auto expand_fn = [](const tensor_list& in) { return in[0].slice(2, 0, 1).expand({3, 2, 3, 5}); };
  auto permute_fn = [](const tensor_list& in) { return in[0].permute({2, 0, 1}) * in[0].permute({2, 0, 1}); };
  auto transpose_fn = [](const tensor_list& in) { return in[0].transpose(0, 1).select(0, 1).t(); };
  auto slice_fn = [](const tensor_list& in) { return in[0].slice(2, 1, std::nullopt, 2).slice(0, -1); };
  auto narrow_fn = [](const tensor_list& in) { return in[0].t().narrow(0, 1, 2); };  // t of a 2-D input
  auto select_fn = [](const tensor_list& in) { return in[0].select(-1, 2) * in[0].select(0, 0).select(-1, 3); };
  auto strided_fn = [](const tensor_list& in) { return in[0].as_strided({3, 4}, {1, 2}, 1); };  // overlapping
  auto strided_view_fn = [](const tensor_list& in) { return in[0].t().as_strided({2, 2}, {1, 1}); };
  EXPECT_GRADCHECK(view_fn, {x});
  EXPECT_GRADCHECK(reshape_fn, {x});
  EXPECT_GRADCHECK(flatten_fn, {x});
  EXPECT_GRADCHECK(unsqueeze_fn, {x});
  EXPECT_GRADCHECK(squeeze_fn, {x});
  EXPECT_GRADCHECK(expand_fn, {x});
  EXPECT_GRADCHECK(permute_fn, {x});
  EXPECT_GRADCHECK(transpose_fn, {x});
  EXPECT_GRADCHECK(slice_fn, {x});
  EXPECT_GRADCHECK(narrow_fn, {leaf({4, 3})});
  EXPECT_GRADCHECK(select_fn, {x});
  EXPECT_GRADCHECK(strided_fn, {x});
  EXPECT_GRADCHECK(strided_view_fn, {leaf({3, 2})});
  auto square = [](Tensor y) { return y * y; };
  auto slice2_fn = [&](const tensor_list& in) { return square(in[0].slice(1, 1, 3)); };
  auto select2_fn = [&](const tensor_list& in) { return square(in[0].select(2, -1)); };
  auto expand2_fn = [&](const tensor_list& in) { return square(in[0].unsqueeze(0).expand({2, 2, 3, 4})); };
  auto strided2_fn = [&](const tensor_list& in) { return square(in[0].as_strided({2, 5}, {1, 2})); };
  EXPECT_GRADGRADCHECK(slice2_fn, {x});
  EXPECT_GRADGRADCHECK(select2_fn, {x});
  EXPECT_GRADGRADCHECK(expand2_fn, {x});
  EXPECT_GRADGRADCHECK(strided2_fn, {x});
}

TEST(Shape, SeveralTensorGradcheck) {
  auto cat_fn = [](const tensor_list& in) { return cat({in[0], in[1].t(), in[0]}, 1); };
  EXPECT_GRADCHECK(cat_fn, {leaf({3, 2}), leaf({1, 3})});
  auto stack_fn = [](const tensor_list& in) { return stack({in[0], in[1].t()}, -1); };
  EXPECT_GRADCHECK(stack_fn, {leaf({2, 3}), leaf({3, 2})});
  auto split_fn = [](const tensor_list& in) { return in[0].t().split(2, 0); };
  EXPECT_GRADCHECK(split_fn, {leaf({3, 5})});
  auto split_sizes_fn = [](const tensor_list& in) { return in[0].split({1, 0, 3}, 1); };
  EXPECT_GRADCHECK(split_sizes_fn, {leaf({2, 4})});
  auto chunk_fn = [](const tensor_list& in) {
    tensor_list c = in[0].chunk(3, -1);
    return c[0] * c[2];
  };
  EXPECT_GRADCHECK(chunk_fn, {leaf({2, 6})});
  auto repeat_fn = [](const tensor_list& in) { return in[0].t().repeat({2, 1, 3}); };
  EXPECT_GRADCHECK(repeat_fn, {leaf({2, 3})});
  auto cat2_fn = [](const tensor_list& in) { return cat({in[0] * in[0], in[1]}); };
  EXPECT_GRADGRADCHECK(cat2_fn, {leaf({2, 2}), leaf({1, 2})});
  auto split2_fn = [](const tensor_list& in) {
    tensor_list s = in[0].split(1);
    return s[1] * s[1];  // s[0] gets no gradient
  };
  EXPECT_GRADGRADCHECK(split2_fn, {leaf({2, 3})});
  auto repeat2_fn = [](const tensor_list& in) { return in[0].repeat({2, 2}) * in[0].repeat({2, 2}); };
  EXPECT_GRADGRADCHECK(repeat2_fn, {leaf({2})});
}

TEST(Shape, CatMixedRequiresGrad) {
  Tensor a = leaf({2}), b = tensor({5.0, 6.0, 7.0}, kFloat64);
  Tensor c = cat({a, b});
  EXPECT_TRUE(c.requires_grad());
  (c * tensor({1.0, 2.0, 3.0, 4.0, 5.0}, kFloat64)).sum().backward();
  EXPECT_VALUES(a.grad(), {1, 2});
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(cat({b, b}).requires_grad());

  // Promotion: the float32 input gets a float32 gradient.
  Tensor f = randn({2}).requires_grad_(true);
  Tensor mixed = cat({f, leaf({1})});
  EXPECT_EQ(mixed.dtype(), kFloat64);
  mixed.sum().backward();
  EXPECT_EQ(f.grad().dtype(), kFloat);
  EXPECT_VALUES(f.grad(), {1, 1});

  // libtorch's legacy empty 1-D input is skipped, yet gets a defined, empty gradient of its own dtype.
  Tensor none = empty({0}, kFloat).requires_grad_(true), x = leaf({2, 3});
  cat({none, x}).sum().backward();
  ASSERT_TRUE(none.grad().defined());
  EXPECT_EQ(none.grad().sizes(), IntArrayRef({0}));
  EXPECT_EQ(none.grad().dtype(), kFloat);
  EXPECT_VALUES(x.grad(), {1, 1, 1, 1, 1, 1});
}

TEST(Shape, SplitPartialGradients) {
  Tensor x = leaf({5});
  tensor_list parts = x.split(2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].grad_fn(), parts[2].grad_fn());  // one node, several outputs
  EXPECT_EQ(parts[2].output_nr(), 2u);
  ((parts[0] * 2).sum() + parts[2].sum()).backward();
  EXPECT_VALUES(x.grad(), {2, 2, 0, 0, 1});
}

TEST(Shape, InPlaceThroughViewOfGradLeafThrows) {
  Tensor x = leaf({2, 3});
  Tensor v = x.view({6});
  EXPECT_THROW_MSG(v.copy_(zeros({6})),
                   "copy_: a view of a leaf Variable that requires grad is being used in an "
                   "in-place operation.");
  EXPECT_THROW_MSG(x.t().select(0, 1).mul_(2), "a view of a leaf Variable that requires grad");
  {
    NoGradGuard no_grad;  // optimizer-style writes through views are fine without grad
    x.select(0, 0).copy_(zeros({3}));
  }
  EXPECT_VALUES(x.select(0, 0), {0, 0, 0});
}

// ---- errors ----

TEST(Shape, Errors) {
  Tensor x = iota({3, 4});
  EXPECT_THROW_MSG(x.unsqueeze(3), "unsqueeze: dimension out of range (expected to be in range of [-3, 2], but got 3)");
  EXPECT_THROW_MSG(x.squeeze(2), "squeeze: dimension out of range");
  EXPECT_THROW_MSG(x.transpose(0, 2), "transpose: dimension out of range");
  EXPECT_THROW_MSG(x.select(0, 5), "select(): index 5 out of range for tensor of size [3, 4] at dimension 0");
  EXPECT_THROW_MSG(x.select(1, -5), "select(): index -5 out of range for tensor of size [3, 4] at dimension 1");
  EXPECT_THROW_MSG(scalar_tensor(1).select(0, 0), "select: cannot be applied to a 0-dim tensor");
  EXPECT_THROW_MSG(x.narrow(1, 2, 3), "narrow: start (2) + length (3) exceeds the size of dimension 1 (4)");
  EXPECT_THROW_MSG(x.narrow(1, 0, -1), "narrow: length must be non-negative");
  EXPECT_THROW_MSG(x.slice(1, 0, 2, 0), "slice: step must be positive, got 0");
  EXPECT_THROW_MSG(x.permute({0, 0}), "permute: dims [0, 0] are not a permutation (dimension 0 repeats)");
  EXPECT_THROW_MSG(x.permute({1}),
                   "permute: dims [1] do not have one entry per dimension of the tensor of shape [3, 4]");
  EXPECT_THROW_MSG(x.permute({0, 2}), "permute: dimension out of range");
  EXPECT_THROW_MSG(x.expand({3, 5}), "expand: cannot expand shape [3, 4] to shape [3, 5]");
  EXPECT_THROW_MSG(x.expand({4}), "expand: cannot expand shape [3, 4] to shape [4]");
  EXPECT_THROW_MSG(x.expand({-1, 3, 4}), "not allowed in a new leading dimension");
  EXPECT_THROW_MSG(zeros({2, 3, 4}).t(), "t: expects a tensor with <= 2 dimensions, but got shape [2, 3, 4]");
  EXPECT_THROW_MSG(x.flatten(1, 0), "flatten: start_dim 1 cannot come after end_dim 0");
  EXPECT_THROW_MSG(x.split({1, 1}), "split: split sizes [1, 1] must sum to 3, the size of dimension 0");
  EXPECT_THROW_MSG(x.split(0), "split: split_size must be positive, got 0");
  EXPECT_THROW_MSG(x.chunk(0), "chunk: expects `chunks` to be greater than 0, got 0");
  EXPECT_THROW_MSG(x.repeat({2}), "repeat: got 1 repeats [2] for a tensor of shape [3, 4]");
  EXPECT_THROW_MSG(x.repeat({2, -1}), "repeat: repeats must be non-negative");
  EXPECT_THROW_MSG(cat({}), "cat: expected a non-empty list of tensors");
  EXPECT_THROW_MSG(cat({x, zeros({5, 4}), zeros({2, 3})}),
                   "cat: tensor 2 has shape [2, 3] but tensor 0 has shape [3, 4]; shapes must match except in "
                   "dimension 0");
  EXPECT_THROW_MSG(cat({x, zeros({3})}, 1), "cat: tensor 1 has shape [3] but tensor 0 has shape [3, 4]");
  EXPECT_THROW_MSG(cat({x, x}, 2), "cat: dimension out of range");
  EXPECT_THROW_MSG(cat({scalar_tensor(1)}), "cat: zero-dimensional tensor 0 cannot be concatenated");
  EXPECT_THROW_MSG(stack({x, x.t()}), "stack: tensor 1 has shape [4, 3] but tensor 0 has shape [3, 4]");
  EXPECT_THROW_MSG(stack({}), "stack: expected a non-empty list of tensors");
}
