// In-place ops: values, version counters, dtype and broadcast rules, and autograd's rules
// (saved tensors modified in place, leaves, NoGradGuard, gradients through in-place ops on non-leaves).

#include "helpers.h"

using namespace strata;

TEST(Inplace, Values) {
  Tensor a = tensor({1.0, 2.0, 3.0});
  Tensor& r = a.add_(tensor({1.0, 1.0, 1.0}));
  EXPECT_EQ(&r, &a);
  EXPECT_VALUES(a, {2, 3, 4});
  a.add_(tensor({1.0, 2.0, 3.0}), 2);
  EXPECT_VALUES(a, {4, 7, 10});
  a.sub_(tensor({1.0, 1.0, 1.0}), 3);
  EXPECT_VALUES(a, {1, 4, 7});
  a.mul_(tensor({2.0, 0.5, 1.0}));
  EXPECT_VALUES(a, {2, 2, 7});
  a.div_(tensor({2.0, 4.0, 7.0}));
  EXPECT_VALUES(a, {1, 0.5, 1});
  a.add_(1.0).mul_(4.0).sub_(2.0).div_(2.0);
  EXPECT_VALUES(a, {3, 2, 3});
  a += tensor({1.0, 1.0, 1.0});
  a -= 1.0;
  a *= 2.0;
  a /= tensor({2.0, 2.0, 3.0});
  EXPECT_VALUES(a, {3, 2, 2});
  a.clamp_(2.5, std::nullopt);
  EXPECT_VALUES(a, {3, 2.5, 2.5});
  a.clamp_(std::nullopt, 2.75);
  EXPECT_VALUES(a, {2.75, 2.5, 2.5});
  a.fill_(7);
  EXPECT_VALUES(a, {7, 7, 7});
  a.zero_();
  EXPECT_VALUES(a, {0, 0, 0});
}

TEST(Inplace, BroadcastsOtherAndWritesThroughViews) {
  Tensor m = zeros({2, 3});
  m.add_(tensor({1.0, 2.0, 3.0}));  // [3] into [2, 3]
  m.mul_(tensor({1.0, 10.0}).reshape({2, 1}));
  EXPECT_VALUES(m, {1, 2, 3, 10, 20, 30});
  m.t().narrow(0, 1, 1).fill_(0);  // column 1 through a transposed, narrowed view
  EXPECT_VALUES(m, {1, 0, 3, 10, 0, 30});
  m.narrow(1, 2, 1).add_(scalar_tensor(5));  // a 0-dim other
  EXPECT_VALUES(m, {1, 0, 8, 10, 0, 35});
}

TEST(Inplace, VersionCounter) {
  Tensor a = zeros({3});
  Tensor view = a.narrow(0, 1, 2);
  const uint32_t v0 = a._version();
  a.add_(1.0);
  EXPECT_EQ(a._version(), v0 + 1);
  view.mul_(2.0);
  EXPECT_EQ(a._version(), v0 + 2);  // views share the counter
  EXPECT_EQ(view._version(), v0 + 2);
  a.zero_();
  a.fill_(1);
  a.clamp_(0.0, 0.5);
  EXPECT_EQ(a._version(), v0 + 5);
  // A rejected op writes nothing and does not bump the version.
  EXPECT_THROW(a.add_(zeros({2})), Error);
  EXPECT_EQ(a._version(), v0 + 5);
  Tensor b = a + 1.0;  // out-of-place ops leave the input's version alone
  EXPECT_EQ(a._version(), v0 + 5);
}

TEST(Inplace, DtypeRules) {
  Tensor i = tensor({1, 2, 3});
  i.add_(tensor({1, 1, 1}));
  i.mul_(tensor({2, 2, 2}));
  EXPECT_EQ(i.dtype(), kLong);
  EXPECT_VALUES(i, {4, 6, 8});
  EXPECT_THROW_MSG(i.add_(tensor({0.5, 0.5, 0.5})),
                   "add_: result type Float can't be cast to the desired output type Long");
  EXPECT_THROW_MSG(i.add_(1.0), "add_: result type Float can't be cast to the desired output type Long");
  EXPECT_THROW_MSG(i.div_(tensor({2, 2, 2})), "div_: result type Float can't be cast to the desired output type Long");
  EXPECT_THROW_MSG(i.clamp_(0.5), "clamp_: result type Float can't be cast to the desired output type Long");
  EXPECT_THROW_MSG(tensor({true}).mul_(tensor({2})),
                   "mul_: result type Long can't be cast to the desired output type Bool");
  // A float32 target takes a float64 result (computed in float64, written as float32).
  Tensor f = tensor({1.0, 2.0});
  f.add_(tensor({0.25, 0.5}, kFloat64));
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_VALUES(f, {1.25, 2.5});
  f.mul_(tensor({2, 4}));  // integer other into a float target
  EXPECT_VALUES(f, {2.5, 10});
}

TEST(Inplace, ShapeErrors) {
  EXPECT_THROW_MSG(zeros({2, 1}).add_(zeros({3})),
                   "add_: shape [3] cannot be broadcast to the in-place target's shape [2, 1]");
  EXPECT_THROW_MSG(zeros({3}).mul_(zeros({2, 3})),
                   "mul_: shape [2, 3] cannot be broadcast to the in-place target's shape [3]");
  EXPECT_THROW_MSG(zeros({3}).sub_(zeros({4})), "sub_: shapes [3] and [4] cannot be broadcast together");
}

TEST(Inplace, ModifyingASavedTensorBreaksBackward) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = x.exp();  // exp saves its output
  y.add_(1.0);
  EXPECT_THROW_MSG(y.sum().backward(), "modified by an inplace operation");

  Tensor a = x * 2.0;
  Tensor b = a * x;  // mul saves a
  a.mul_(3.0);
  EXPECT_THROW_MSG(b.sum().backward(), "modified by an inplace operation");

  Tensor c = x.sigmoid();
  Tensor d = c.tanh();  // saves d, not c: modifying c afterwards is fine for tanh, not for sigmoid
  c.zero_();
  EXPECT_THROW_MSG(d.sum().backward(), "modified by an inplace operation");
}

TEST(Inplace, LeafRequiringGrad) {
  Tensor w = tensor({1.0, 2.0}, f64());
  EXPECT_THROW_MSG(w.add_(1.0), "add_: a leaf Variable that requires grad is being used in an in-place operation");
  EXPECT_THROW_MSG(w.mul_(tensor({2.0, 2.0}, kFloat64)), "mul_: a leaf Variable that requires grad");
  EXPECT_THROW_MSG(w.zero_(), "zero_: a leaf Variable that requires grad");
  EXPECT_THROW_MSG(w.clamp_(0.0), "clamp_: a leaf Variable that requires grad");
  EXPECT_VALUES(w, {1, 2});  // nothing was written
}

TEST(Inplace, NoGradGuardOptimizerStep) {
  Tensor w = tensor({1.0, 2.0}, f64());
  (w * w).sum().backward();
  const uint32_t v0 = w._version();
  {
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.25);  // w -= lr * 2w
    w.mutable_grad().zero_();
  }
  EXPECT_VALUES(w, {0.5, 1});
  EXPECT_EQ(w._version(), v0 + 1);
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_VALUES(w.grad(), {0, 0});
  (w * 3.0).sum().backward();  // the leaf still works after the step
  EXPECT_VALUES(w.grad(), {3, 3});
}

TEST(Inplace, GradientsThroughNonLeaves) {
  manual_seed(11);
  auto mul_self = [](const tensor_list& in) {
    Tensor y = in[0] * 2.0;
    y.mul_(in[0]);
    return y;
  };
  EXPECT_GRADCHECK(mul_self, {leaf({3})});
  auto chain = [](const tensor_list& in) {
    Tensor y = in[0] * 1.0;
    y.add_(in[1], 0.5);  // [2, 3] += 0.5 * [3]
    y.sub_(in[0]);
    y.mul_(in[1]);
    y.div_(in[2]);  // [2, 1] broadcast
    y.add_(1.0).mul_(3.0).sub_(0.5).div_(2.0);
    return y;
  };
  EXPECT_GRADCHECK(chain, {leaf({2, 3}), leaf({3}), leaf_in({2, 1}, 0.5, 2)});
  auto clamp_then_fill = [](const tensor_list& in) {
    Tensor y = in[0] * 2.0;
    y.clamp_(-0.5, 0.5);
    Tensor z = in[0] * 3.0;
    z.zero_();
    z.add_(y);  // z no longer depends on its old value
    return z;
  };
  EXPECT_GRADCHECK(clamp_then_fill, {tensor({-1.0, -0.1, 0.2, 0.9}, f64())});
  auto into_plain = [](const tensor_list& in) {
    Tensor y = zeros({3}, kFloat64);  // does not require grad until other does
    y.add_(in[0]);
    y.mul_(in[0]);
    return y;
  };
  EXPECT_GRADCHECK(into_plain, {leaf({3})});
}

TEST(Inplace, IntegralScalars) {
  Tensor i = tensor({-5, 3, 12});
  i.clamp_(0, 9);  // was rejected when every bound was a double
  EXPECT_EQ(i.dtype(), kLong);
  EXPECT_VALUES(i, {0, 3, 9});
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor l = tensor({int64_t{0}, big});
  l.add_(1).mul_(3).sub_(3);
  EXPECT_EQ(l[1].item<int64_t>(), 3 * big);
  l += 2;
  l *= 2;
  EXPECT_EQ(l[1].item<int64_t>(), 2 * (3 * big + 2));
  l.fill_(big);
  EXPECT_EQ(l[0].item<int64_t>(), big);
  EXPECT_THROW_MSG(l.mul_(1.5), "mul_: result type Float can't be cast to the desired output type Long");
  EXPECT_THROW_MSG(l.div_(2), "div_: result type Float can't be cast to the desired output type Long");
}

// Note [in-place operands] in elementwise.cpp: an other operand sharing self's storage is saved as it
// was before the write.
TEST(Inplace, OtherAliasingSelf) {
  Tensor x = tensor({1.0, 2.0, 3.0}, f64());
  Tensor y = x * 1.0;
  y.mul_(y);
  EXPECT_VALUES(y, {1, 4, 9});
  y.sum().backward();
  EXPECT_VALUES(x.grad(), {2, 4, 6});  // d(x^2) = 2x, not x^2 + x

  Tensor x2 = tensor({1.0, 2.0, 3.0}, f64());
  Tensor z = x2 * 2.0;
  z.div_(z);
  EXPECT_VALUES(z, {1, 1, 1});
  z.sum().backward();
  EXPECT_VALUES(x2.grad(), {0, 0, 0});

  // other a view of self: y[0] scales every element, and is read before the write.
  Tensor x3 = tensor({2.0, 3.0}, f64());
  Tensor w = x3 * 1.0;
  w.mul_(w.select(0, 0));  // [x0^2, x1 x0]
  EXPECT_VALUES(w, {4, 6});
  w.sum().backward();
  EXPECT_VALUES(x3.grad(), {2 * 2 + 3, 2});

  auto square_inplace = [](const tensor_list& in) {
    Tensor y = in[0] * 1.0;
    y.mul_(y);
    return y;
  };
  EXPECT_GRADCHECK(square_inplace, {leaf({3})});
  EXPECT_GRADGRADCHECK(square_inplace, {leaf({3})});
  auto div_row = [](const tensor_list& in) {
    Tensor y = in[0] * 1.0;
    y.div_(y.select(0, 1));  // [2, 3] / its row 1, broadcast
    return y;
  };
  EXPECT_GRADCHECK(div_row, {leaf_in({2, 3}, 0.5, 2)});
}

// The saved clone does not point back at the node that rebased self: the graph is freed with y.
TEST(Inplace, OtherAliasingSelfLeavesNoCycle) {
  std::weak_ptr<autograd::Node> node;
  {
    Tensor x = tensor({1.0, 2.0}, f64());
    Tensor y = x * 1.0;
    y.mul_(y);
    node = y.grad_fn();
    EXPECT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
}

TEST(Inplace, HistoryAfterInplace) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = x * 2.0;
  y.mul_(x);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_STREQ(y.grad_fn()->name(), "MulBackward0");
  Tensor plain = zeros({2}, kFloat64);
  plain.add_(x);
  EXPECT_TRUE(plain.requires_grad());
  plain.sum().backward();
  EXPECT_VALUES(x.grad(), {1, 1});
  // A float32 target with a float64 other that requires grad: the other's gradient is float64.
  Tensor o = tensor({1.0, 2.0}, f64());
  Tensor t32 = ones({2});
  t32.mul_(o);
  (t32 * 3.0).sum().backward();
  EXPECT_EQ(o.grad().dtype(), kFloat64);
  EXPECT_VALUES(o.grad(), {3, 3});
}

TEST(Inplace, ThroughAViewWithAGradOperand) {
  Tensor out = zeros({2, 2}, kFloat64);
  Tensor w = tensor({1.0, 2.0}, f64());
  out.select(0, 0).add_(w);
  EXPECT_VALUES(out, {1, 2, 0, 0});
  (out * out).sum().backward();
  EXPECT_VALUES(w.grad(), {2, 4});
}

// CopySlices (libtorch's): an in-place op on a view of a tensor with history rebases the base, and the
// gradients equal those of the same computation written out of place.
TEST(Inplace, ThroughViewsWithHistory) {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 5.0}, f64());
  Tensor y = x * 1.0;
  y.narrow(0, 1, 3).mul_(2);
  EXPECT_VALUES(y, {1, 4, 6, 8, 5});
  EXPECT_STREQ(y.grad_fn()->name(), "CopySlices");
  (y * y).sum().backward();
  EXPECT_VALUES(x.grad(), {2, 16, 24, 32, 10});

  // Against out-of-place compositions, through several view kinds, with gradcheck and gradgradcheck.
  auto narrow_mul = [](const tensor_list& in) {
    Tensor y = in[0] * 1.0;
    y.narrow(1, 1, 2).mul_(in[1]);  // [3, 2] * [2]: the other operand broadcasts
    return y * y;
  };
  auto transposed_select = [](const tensor_list& in) {
    Tensor y = in[0] * 2.0;                 // (exp would save its output, and writing into it would then be an error)
    y.t().select(0, 2).add_(in[1].sum(1));  // column 2 through a transpose
    return y * y;
  };
  auto strided_copy = [](const tensor_list& in) {
    Tensor y = in[0] * 2.0;
    y.slice(0, 0, 4, 2).copy_(in[1]);  // rows 0 and 2
    return y * y * y;
  };
  auto other_is_a_view_of_the_base = [](const tensor_list& in) {
    Tensor y = in[0] * 1.0;
    Tensor row1 = y[1];
    y.select(0, 0).mul_(row1);  // reads row 1 of the base it writes into
    return y + row1 * 3.0;      // row1 was taken before: it follows y's new history
  };
  auto zero_a_row = [](const tensor_list& in) {
    Tensor y = in[0] * in[0];
    y[0].zero_();
    y.narrow(1, 0, 1).div_(in[0].narrow(1, 0, 1) + 3.0);  // two in-place ops through two views
    return y;
  };
  EXPECT_GRADCHECK(narrow_mul, {leaf({3, 4}), leaf({2})});
  EXPECT_GRADGRADCHECK(narrow_mul, {leaf({3, 4}), leaf({2})});
  EXPECT_GRADCHECK(transposed_select, {leaf({3, 4}), leaf({3, 2})});
  EXPECT_GRADGRADCHECK(transposed_select, {leaf({3, 4}), leaf({3, 2})});
  EXPECT_GRADCHECK(strided_copy, {leaf({4, 3}), leaf({2, 3})});
  EXPECT_GRADCHECK(other_is_a_view_of_the_base, {leaf({2, 3})});
  EXPECT_GRADGRADCHECK(other_is_a_view_of_the_base, {leaf({2, 3})});
  EXPECT_GRADCHECK(zero_a_row, {leaf({3, 2})});

  // The values are those of the out-of-place computation.
  Tensor a = randn({2, 3}, kFloat64);
  EXPECT_ALLCLOSE(other_is_a_view_of_the_base({a}), cat({(a[0] * a[1]).unsqueeze(0), a[1].unsqueeze(0)}) + a[1] * 3.0,
                  1e-15, 1e-15);
}

// The graph of an in-place op through a view is freed with its base: no reference cycle.
TEST(Inplace, ThroughViewsLeavesNoCycle) {
  std::weak_ptr<autograd::Node> node;
  {
    Tensor x = tensor({1.0, 2.0, 3.0}, f64());
    Tensor y = x * 1.0;
    Tensor v = y.narrow(0, 0, 2);
    v.mul_(v);
    node = y.grad_fn();
    EXPECT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
}

// An operand sharing the target's memory in another layout is read from a copy taken before the write,
// so the result is what the out-of-place op gives (libtorch refuses these).
TEST(Inplace, OperandOverlappingTheTargetIsReadBeforeTheWrite) {
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0}).reshape({2, 2});
  a.add_(a.t());
  EXPECT_VALUES(a, {2, 5, 5, 8});
  Tensor x = tensor({2.0, 4.0, 6.0, 8.0}).reshape({2, 2});
  x.div_(x[0]);
  EXPECT_VALUES(x, {1, 1, 3, 2});
  Tensor c = tensor({1.0, 2.0, 3.0, 4.0}).reshape({2, 2});
  c.copy_(c.t());
  EXPECT_VALUES(c, {1, 3, 2, 4});
  Tensor cols = tensor({1.0, 10.0, 2.0, 20.0}).reshape({2, 2});
  cols.select(1, 0).add_(cols.select(1, 1));  // disjoint interleaved columns
  EXPECT_VALUES(cols, {11, 10, 22, 20});
  Tensor shifted = arange(5, kFloat);
  shifted.narrow(0, 1, 4).copy_(shifted.narrow(0, 0, 4));  // overlapping ranges, as a memmove
  EXPECT_VALUES(shifted, {0, 0, 1, 2, 3});
}

// Writing into a tensor whose elements share memory (an expand) is refused before anything is written.
TEST(Inplace, ExpandedTargetIsRefused) {
  Tensor base = zeros({3});
  const std::string msg = "more than one element of the written-to tensor refers to a single memory location";
  EXPECT_THROW_MSG(base.expand({2, 3}).add_(1), "add_: unsupported operation: " + msg);
  EXPECT_THROW_MSG(base.expand({2, 3}).mul_(tensor({1.0, 2.0, 3.0})), msg);
  EXPECT_THROW_MSG(base.expand({2, 3}).fill_(1), msg);
  EXPECT_THROW_MSG(base.expand({2, 3}).zero_(), msg);
  EXPECT_THROW_MSG(base.expand({2, 3}).copy_(ones({2, 3})), msg);
  EXPECT_THROW_MSG(base.expand({2, 3}).clamp_(0, 1), msg);
  EXPECT_THROW_MSG(base.as_strided({2, 2}, {1, 1}).add_(1), msg);
  EXPECT_VALUES(base, {0, 0, 0});
  EXPECT_EQ(base._version(), 0u);
  base.expand({1, 3}).add_(1);  // size-1 dims may have any stride
  EXPECT_VALUES(base, {1, 1, 1});
  Tensor m = zeros({3, 4});
  m.as_strided({2, 2}, {4, 2}, 1).add_(1);  // strided but non-overlapping
  EXPECT_VALUES(m, {0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0});
}

// The inputs of what zero_() or copy_() overwrote get a zero gradient, as in libtorch, not none.
TEST(Inplace, OverwrittenValuesGetAZeroGradient) {
  Tensor x = tensor({1.0, 2.0}, f64());
  Tensor y = x * 2.0;
  y.zero_();
  (y + x).sum().backward();
  EXPECT_VALUES(x.grad(), {1, 1});
  Tensor a = tensor({1.0, 2.0}, f64()), b = tensor({3.0, 4.0}, f64());
  Tensor z = a * 2.0;
  z.copy_(b);
  (z * 3.0).sum().backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_VALUES(a.grad(), {0, 0});
  EXPECT_VALUES(b.grad(), {3, 3});
  Tensor c = tensor({1.0}, f64());
  Tensor w = c * 1.0;
  w.fill_(5);
  w.sum().backward();
  ASSERT_TRUE(c.grad().defined());
  EXPECT_VALUES(c.grad(), {0});
}
