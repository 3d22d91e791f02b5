// nn functional ops: softmax, log_softmax, layer_norm, dropout, one_hot and the losses, against
// hand-computed values, with gradcheck (float64) and the errors users hit.

#include <cmath>
#include <limits>

#include "helpers.h"

using namespace strata;

// ---- softmax / log_softmax ----

TEST(NnFunctional, SoftmaxValues) {
  // exp([1, 2, 3]) / sum = [e^-2, e^-1, 1] / (1 + e^-1 + e^-2)
  Tensor x = tensor({1.0, 2.0, 3.0});
  EXPECT_VALUES(softmax(x, 0), {0.09003057317038043, 0.24472847105479764, 0.6652409557748218});
  EXPECT_VALUES(x.log_softmax(0), {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804});
  // Stable for large inputs (a naive exp would overflow to inf / inf).
  EXPECT_VALUES(tensor({1000.0, 1001.0, 1002.0}).softmax(-1),
                {0.09003057317038043, 0.24472847105479764, 0.6652409557748218});
  EXPECT_VALUES(log_softmax(tensor({-1000.0, 0.0}), 0), {-1000, 0});
  // Along dim 0 of a [2, 2]: each column sums to 1.
  Tensor m = tensor({0.0, 1.0, 0.0, 3.0}).reshape({2, 2});
  EXPECT_VALUES(softmax(m, 0), {0.5, 1 / (1 + std::exp(2.0)), 0.5, 1 / (1 + std::exp(-2.0))});
  EXPECT_EQ(softmax(m, 1).dtype(), kFloat32);
}

TEST(NnFunctional, SoftmaxGradients) {
  manual_seed(21);
  auto sm0 = [](const tensor_list& in) { return softmax(in[0], 0); };
  auto sm1 = [](const tensor_list& in) { return softmax(in[0], -1); };
  auto lsm = [](const tensor_list& in) { return log_softmax(in[0], 1); };
  auto lsm_t = [](const tensor_list& in) { return log_softmax(in[0].t(), 1) * 2.0; };  // non-contiguous input
  auto sm_narrow = [](const tensor_list& in) { return softmax(in[0].narrow(1, 1, 3), 0); };
  EXPECT_GRADCHECK(sm0, {leaf({3, 4})});
  EXPECT_GRADCHECK(sm1, {leaf({2, 3, 4})});
  EXPECT_GRADCHECK(lsm, {leaf({3, 4})});
  EXPECT_GRADCHECK(lsm_t, {leaf({4, 3})});
  EXPECT_GRADCHECK(sm_narrow, {leaf({2, 5})});
  EXPECT_GRADGRADCHECK(sm1, {leaf({2, 3})});
  EXPECT_GRADGRADCHECK(lsm, {leaf({2, 3})});
}

TEST(NnFunctional, SoftmaxErrors) {
  EXPECT_THROW_MSG(softmax(tensor({1, 2}), 0), "softmax: expected a floating point tensor, got Long");
  EXPECT_THROW_MSG(log_softmax(zeros({2, 3}), 2), "log_softmax: dimension out of range");
}

// The fused kernels against softmax written as ops, along every dim (inner > 1 included), with a masked (-inf)
// entry, values and gradients in float64.
TEST(NnFunctional, SoftmaxFusedMatchesTheComposite) {
  manual_seed(23);
  for (int64_t d : {0, 1, 2})
    for (bool log : {false, true}) {
      Tensor x = randn({3, 4, 5}, kFloat64);
      x.select(d, 1).fill_(-std::numeric_limits<double>::infinity());
      x.requires_grad_(true);
      Tensor xc = x.detach().requires_grad_(true), g = randn({3, 4, 5}, kFloat64);
      Tensor y = log ? log_softmax(x, d) : softmax(x, d);
      Tensor shifted = xc - amax(xc, d, true).detach();
      Tensor yc = log ? shifted - logsumexp(shifted, d, true) : exp(shifted) / sum(exp(shifted), d, true);
      // The -inf entries: probability 0, log-probability -inf, gradient 0.
      const double inf = std::numeric_limits<double>::infinity();
      const Tensor masked = x.detach().eq(-inf);
      EXPECT_ALLCLOSE(y.masked_fill(masked, 0), yc.masked_fill(masked, 0), 1e-12, 1e-12)
          << "dim " << d << (log ? " log_softmax" : " softmax");
      EXPECT_TRUE(y.eq(log ? -inf : 0.0).logical_or(masked.logical_not()).all().item<bool>()) << y;
      (y.masked_fill(masked, 0) * g).sum().backward();
      (yc.masked_fill(masked, 0) * g).sum().backward();
      EXPECT_ALLCLOSE(x.grad(), xc.grad(), 1e-12, 1e-12) << "dim " << d << (log ? " log_softmax" : " softmax");
    }
}

// As torch: a NaN spreads over its row, and a row that is all -inf has no distribution (NaN).
TEST(NnFunctional, SoftmaxNanAndEmptyRows) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Tensor y = softmax(tensor({1.0, nan, 2.0, -inf, -inf, -inf}, kFloat64).reshape({2, 3}), 1);
  EXPECT_TRUE(y.ne(y).all().item<bool>()) << y;  // NaN everywhere
  EXPECT_EQ(softmax(empty({0, 4}), 1).sizes(), IntArrayRef({0, 4}));
  EXPECT_EQ(log_softmax(empty({4, 0}), 1).sizes(), IntArrayRef({4, 0}));
}

// ---- layer_norm ----

TEST(NnFunctional, LayerNormValues) {
  // mean 2, biased variance 2/3: (x - 2) / sqrt(2/3 + 1e-5)
  Tensor x = tensor({1.0, 2.0, 3.0, 2.0, 2.0, 2.0}, kFloat64).reshape({2, 3});
  Tensor y = layer_norm(x, {3});
  const double s = 1 / std::sqrt(2.0 / 3.0 + 1e-5);
  EXPECT_VALUES(y, {-s, 0, s, 0, 0, 0});
  Tensor w = tensor({1.0, 2.0, 3.0}, kFloat64), b = tensor({0.5, 0.5, 0.5}, kFloat64);
  EXPECT_VALUES(layer_norm(x, {3}, w, b), {0.5 - s, 0.5, 0.5 + 3 * s, 0.5, 0.5, 0.5});
  // Over both dims: the 6 values [1, 2, 3, 2, 2, 2] have mean 2 and biased variance 1/3.
  const double s2 = 1 / std::sqrt(1.0 / 3.0 + 1e-5);
  EXPECT_VALUES(layer_norm(x, {2, 3}), {-s2, 0, s2, 0, 0, 0});
}

TEST(NnFunctional, LayerNormGradients) {
  manual_seed(22);
  auto ln = [](const tensor_list& in) { return layer_norm(in[0], {4}, in[1], in[2]); };
  auto ln2 = [](const tensor_list& in) { return layer_norm(in[0], {3, 4}, in[1], {}, 1e-3); };
  auto ln_t = [](const tensor_list& in) { return layer_norm(in[0].t(), {3}); };
  EXPECT_GRADCHECK(ln, {leaf({2, 3, 4}), leaf({4}), leaf({4})});
  EXPECT_GRADCHECK(ln2, {leaf({2, 3, 4}), leaf({3, 4})});
  EXPECT_GRADCHECK(ln_t, {leaf({3, 5})});
}

TEST(NnFunctional, LayerNormErrors) {
  EXPECT_THROW_MSG(layer_norm(zeros({2, 3}), {4}),
                   "layer_norm: normalized_shape [4] does not match the trailing dims of input shape [2, 3]");
  EXPECT_THROW_MSG(layer_norm(zeros({3}), {2, 3}),
                   "layer_norm: normalized_shape [2, 3] does not match the trailing dims of input shape [3]");
  EXPECT_THROW_MSG(layer_norm(zeros({2, 3}), {3}, zeros({4})),
                   "layer_norm: weight of shape [4] does not match normalized_shape [3]");
  EXPECT_THROW_MSG(layer_norm(zeros({2, 3}), {3}, {}, zeros({2})),
                   "layer_norm: bias of shape [2] does not match normalized_shape [3]");
}

// The fused kernels against layer norm written as ops: values and every gradient in float64, with and without
// the affine parameters, over one and two trailing dims; and second derivatives, which take the composite.
TEST(NnFunctional, LayerNormFusedMatchesTheComposite) {
  manual_seed(24);
  auto composite = [](const Tensor& x, IntArrayRef shape, const Tensor& w, const Tensor& b) {
    DimVector dims;
    for (int64_t d = x.dim() - static_cast<int64_t>(shape.size()); d < x.dim(); ++d) dims.push_back(d);
    Tensor c = x - mean(x, dims, true);
    Tensor y = c * rsqrt(mean(c * c, dims, true) + 1e-5);
    if (w.defined()) y = y * w;
    return b.defined() ? y + b : y;
  };
  for (DimVector shape : {DimVector{5}, DimVector{4, 5}})
    for (bool affine : {false, true}) {
      Tensor x = leaf({3, 4, 5}), w = affine ? leaf(shape) : Tensor(), b = affine ? leaf(shape) : Tensor();
      Tensor xc = x.detach().requires_grad_(true), wc = affine ? w.detach().requires_grad_(true) : Tensor(),
             bc = affine ? b.detach().requires_grad_(true) : Tensor(), g = randn({3, 4, 5}, kFloat64);
      Tensor y = layer_norm(x, shape, w, b);
      EXPECT_EQ(last_dispatch("layer_norm"), "fused kernel (Double)");
      Tensor yc = composite(xc, shape, wc, bc);
      EXPECT_ALLCLOSE(y, yc, 1e-12, 1e-12);
      (y * g).sum().backward();
      (yc * g).sum().backward();
      EXPECT_ALLCLOSE(x.grad(), xc.grad(), 1e-12, 1e-12);
      if (affine) {
        EXPECT_ALLCLOSE(w.grad(), wc.grad(), 1e-12, 1e-12);
        EXPECT_ALLCLOSE(b.grad(), bc.grad(), 1e-12, 1e-12);
      }
    }
  auto ln = [](const tensor_list& in) { return layer_norm(in[0], {4}, in[1], in[2]); };
  EXPECT_GRADGRADCHECK(ln, {leaf({2, 3, 4}), leaf({4}), leaf({4})});
}

// The parameter gradients are summed in fixed chunks of rows, so they do not change with the thread count.
TEST(NnFunctional, LayerNormParameterGradientsDoNotDependOnThreads) {
  manual_seed(25);
  const Tensor x0 = randn({700, 64}), w0 = randn({64}), b0 = randn({64}), g = randn({700, 64});
  const int saved = get_num_threads();
  std::vector<Tensor> grads;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
           b = b0.clone().requires_grad_(true);
    (layer_norm(x, {64}, w, b) * g).sum().backward();
    grads.insert(grads.end(), {x.grad(), w.grad(), b.grad()});
  }
  set_num_threads(saved);
  for (size_t i = 3; i < grads.size(); ++i)
    EXPECT_EQ(strata::testing::values(grads[i]), strata::testing::values(grads[i % 3])) << "gradient " << i;
}

// A weight of another dtype than the input's takes the composite (which promotes), and the dispatch log says so;
// 16-bit inputs run the kernels in float32 and store 16 bits.
TEST(NnFunctional, LayerNormPathsAndSixteenBitTypes) {
  manual_seed(26);
  Tensor x = randn({6, 8}), w = randn({8}, kFloat64);
  EXPECT_EQ(layer_norm(x, {8}, w).dtype(), kFloat64);
  EXPECT_EQ(last_dispatch("layer_norm"),
            "composite: weight or bias of another dtype or device than the input's Float on cpu");
  EXPECT_ALLCLOSE(layer_norm(x, {8}, w), layer_norm(x.to(kFloat64), {8}, w), 1e-6, 1e-6);
  for (ScalarType t : {kBFloat16, kHalf}) {
    Tensor xl = x.to(t).requires_grad_(true), wl = w.to(t).requires_grad_(true);
    Tensor y = layer_norm(xl, {8}, wl);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_ALLCLOSE(y.to(kFloat), layer_norm(xl.to(kFloat), {8}, wl.to(kFloat)), 0.02, 0.02);
    y.sum().backward();
    EXPECT_EQ(xl.grad().dtype(), t);
    EXPECT_EQ(wl.grad().dtype(), t);
  }
  // Empty rows normalise to nothing, forward and backward.
  Tensor empty_rows = zeros({3, 0}).requires_grad_(true);
  layer_norm(empty_rows, {0}).sum().backward();
  EXPECT_EQ(empty_rows.grad().sizes(), IntArrayRef({3, 0}));
}

// ---- dropout ----

TEST(NnFunctional, Dropout) {
  Tensor x = ones({1000}, kFloat64);
  EXPECT_TRUE(dropout(x, 0.5, /*train=*/false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0).is_same(x));
  EXPECT_VALUES(dropout(tensor({1.0, 2.0}), 1.0), {0, 0});
  Generator g1(7), g2(7);
  Tensor a = dropout(x, 0.25, true, &g1), b = dropout(x, 0.25, true, &g2);
  EXPECT_ALLCLOSE(a, b);  // same seed, same mask
  int64_t kept = 0;
  for (double v : strata::testing::values(a)) {
    EXPECT_TRUE(v == 0 || std::abs(v - 1 / 0.75) < 1e-12) << v;
    kept += v != 0;
  }
  EXPECT_GT(kept, 680);  // 750 expected; the binomial std is about 14
  EXPECT_LT(kept, 820);
  EXPECT_THROW_MSG(dropout(x, 1.5), "dropout: probability has to be between 0 and 1, but got 1.5");
  EXPECT_THROW_MSG(dropout(x, -0.1), "dropout: probability has to be between 0 and 1");
}

TEST(NnFunctional, DropoutGradientIsTheMask) {
  Tensor x = randn({200}, f64());
  Generator gen(3);
  Tensor y = dropout(x, 0.5, true, &gen);
  y.sum().backward();
  auto yv = strata::testing::values(y), gv = strata::testing::values(x.grad()), xv = strata::testing::values(x);
  for (size_t i = 0; i < yv.size(); ++i) {
    EXPECT_DOUBLE_EQ(yv[i], xv[i] * gv[i]);
    EXPECT_TRUE(gv[i] == 0 || gv[i] == 2) << gv[i];
  }
}

// ---- one_hot ----

TEST(NnFunctional, OneHot) {
  Tensor h = one_hot(tensor({0, 2, 1}), 4);
  EXPECT_EQ(h.dtype(), kLong);
  EXPECT_EQ(h.sizes(), IntArrayRef({3, 4}));
  EXPECT_VALUES(h, {1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0});
  Tensor inferred = one_hot(tensor({1, 3}).reshape({2, 1}));  // num_classes = max + 1 = 4
  EXPECT_EQ(inferred.sizes(), IntArrayRef({2, 1, 4}));
  EXPECT_VALUES(inferred, {0, 1, 0, 0, 0, 0, 0, 1});
  EXPECT_THROW_MSG(one_hot(tensor({1.0, 2.0}), 3),
                   "one_hot: expected an int64 (Long) tensor of class indices, got Float");
  EXPECT_THROW_MSG(one_hot(tensor({0, -1}), 3), "one_hot: class values must be non-negative, got -1");
  EXPECT_THROW_MSG(one_hot(tensor({0, 5}), 3), "one_hot: class value 5 is out of range for num_classes 3");
}

// ---- losses ----
//
// Reference values below, for logits [[1, 2, 3], [0, 0, 0]] and targets [2, 0]:
//   log_softmax row 0 = [1, 2, 3] - logsumexp = [-2.4076059644, -1.4076059644, -0.4076059644]
//   log_softmax row 1 = -log 3 each = -1.0986122887
//   nll = [0.4076059644443804, 1.0986122886681098]: mean 0.7531091265562451, sum 1.5062182531124901
//   label smoothing 0.1: loss_i = 0.9 * nll_i + 0.1 / 3 * (-sum_c log_softmax_ic)
//     row 0: 0.9 * 0.40760596 + 0.1 / 3 * 4.22281788 = 0.5076059644
//     row 1: 0.9 * 1.09861229 + 0.1 / 3 * 3.29583687 = 1.0986122887; mean 0.8031091265562451
//   weight [1, 2, 0.5]: mean = (0.5 * 0.40760596 + 1 * 1.09861229) / (0.5 + 1) = 0.8682768472602
//     with smoothing 0.1: (0.9 * sum_i w_ti nll_i + 0.1 / 3 * sum_i (-sum_c w_c lsm_ic)) / 1.5 = 0.9874883599984848
//     same with sum reduction (no division): 1.4812325399977273

namespace {
Tensor logits() { return tensor({1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, kFloat64).reshape({2, 3}); }
}  // namespace

TEST(NnFunctional, CrossEntropyValues) {
  Tensor t = tensor({2, 0});
  EXPECT_VALUES(cross_entropy(logits(), t), {0.7531091265562451});
  EXPECT_VALUES(cross_entropy(logits(), t, {.reduction = Reduction::Sum}), {1.5062182531124901});
  Tensor none = cross_entropy(logits(), t, {.reduction = Reduction::None});
  EXPECT_EQ(none.sizes(), IntArrayRef({2}));
  EXPECT_VALUES(none, {0.4076059644443804, 1.0986122886681098});
  EXPECT_VALUES(nll_loss(log_softmax(logits(), 1), t), {0.7531091265562451});
  // ignore_index: the mean is over the one remaining target.
  EXPECT_VALUES(cross_entropy(logits(), tensor({2, -100})), {0.4076059644443804});
  EXPECT_VALUES(cross_entropy(logits(), tensor({2, 1}), {.ignore_index = 1}), {0.4076059644443804});
  EXPECT_VALUES(cross_entropy(logits(), tensor({2, -100}), {.reduction = Reduction::None}), {0.4076059644443804, 0});
  // One sample: [C] logits with a 0-dim target.
  EXPECT_VALUES(cross_entropy(tensor({1.0, 2.0, 3.0}, kFloat64), tensor({2}).reshape({})), {0.4076059644443804});
}

TEST(NnFunctional, CrossEntropyLabelSmoothingAndWeight) {
  Tensor t = tensor({2, 0});
  EXPECT_VALUES(cross_entropy(logits(), t, {.label_smoothing = 0.1}), {0.8031091265562451});
  EXPECT_VALUES(cross_entropy(logits(), t, {.reduction = Reduction::None, .label_smoothing = 0.1}),
                {0.5076059644443804, 1.0986122886681098});
  // Smoothing with an ignored target: row 1 contributes neither to the sum nor to the count.
  EXPECT_VALUES(cross_entropy(logits(), tensor({2, -100}), {.label_smoothing = 0.1}), {0.5076059644443804});
  Tensor w = tensor({1.0, 2.0, 0.5}, kFloat64);
  EXPECT_VALUES(cross_entropy(logits(), t, {.weight = w}), {0.8682768472602});
  EXPECT_VALUES(nll_loss(log_softmax(logits(), 1), t, {.weight = w}), {0.8682768472602});
  EXPECT_VALUES(cross_entropy(logits(), t, {.label_smoothing = 0.1, .weight = w}), {0.9874883599984848});
  EXPECT_VALUES(cross_entropy(logits(), t, {.reduction = Reduction::Sum, .label_smoothing = 0.1, .weight = w}),
                {1.4812325399977273});
}

TEST(NnFunctional, CrossEntropySpatialMatchesFlattened) {
  // [N, C, d] with targets [N, d] equals the [N * d, C] problem with the class dim moved last.
  manual_seed(23);
  Tensor x = randn({2, 3, 4}, kFloat64);
  Tensor t = randint(0, 3, {2, 4});
  Tensor flat_x = x.permute({0, 2, 1}).reshape({8, 3});
  Tensor flat_t = t.reshape({8});
  for (double eps : {0.0, 0.2}) {
    LossOptions o{.label_smoothing = eps, .weight = tensor({0.5, 1.0, 2.0}, kFloat64)};
    EXPECT_ALLCLOSE(cross_entropy(x, t, o), cross_entropy(flat_x, flat_t, o));
    o.reduction = Reduction::None;
    EXPECT_ALLCLOSE(cross_entropy(x, t, o), cross_entropy(flat_x, flat_t, o).reshape({2, 4}));
  }
}

TEST(NnFunctional, LossGradients) {
  manual_seed(24);
  Tensor t = tensor({2, 0, 1, -100});
  Tensor w = tensor({0.5, 1.0, 2.0}, kFloat64);
  auto ce = [t](const tensor_list& in) { return cross_entropy(in[0], t); };
  auto ce_smooth = [t, w](const tensor_list& in) {
    return cross_entropy(in[0], t, {.reduction = Reduction::Sum, .label_smoothing = 0.2, .weight = w});
  };
  auto ce_none = [t](const tensor_list& in) {
    return cross_entropy(in[0], t, {.reduction = Reduction::None, .label_smoothing = 0.1});
  };
  auto ce_t = [t](const tensor_list& in) { return cross_entropy(in[0].t(), t); };  // non-contiguous logits
  Tensor ts = randint(0, 3, {2, 2});
  auto ce_spatial = [ts, w](const tensor_list& in) {
    return cross_entropy(in[0], ts, {.label_smoothing = 0.1, .weight = w});
  };
  auto nll = [t, w](const tensor_list& in) { return nll_loss(in[0], t, {.weight = w}); };
  auto mse = [](const tensor_list& in) { return mse_loss(in[0], in[1]); };
  auto mse_sum = [](const tensor_list& in) { return mse_loss(in[0], in[1], Reduction::Sum); };
  EXPECT_GRADCHECK(ce, {leaf({4, 3})});
  EXPECT_GRADCHECK(ce_smooth, {leaf({4, 3})});
  EXPECT_GRADCHECK(ce_none, {leaf({4, 3})});
  EXPECT_GRADCHECK(ce_t, {leaf({3, 4})});
  EXPECT_GRADCHECK(ce_spatial, {leaf({2, 3, 2})});
  EXPECT_GRADCHECK(nll, {leaf({4, 3})});
  EXPECT_GRADCHECK(mse, {leaf({2, 3}), leaf({2, 3})});
  EXPECT_GRADCHECK(mse_sum, {leaf({2, 3}), leaf({3})});
  EXPECT_GRADGRADCHECK(ce, {leaf({4, 3})});
}

// The fused kernels (2-D logits) against the composite (the same rows as [N, C, 1] logits), values and gradients
// in float64, over class weights, ignored targets, label smoothing and every reduction.
TEST(NnFunctional, CrossEntropyFusedMatchesTheComposite) {
  manual_seed(27);
  const Tensor target = tensor({2, 0, 4, -100, 1, 4});
  const Tensor w = tensor({0.5, 1.0, 2.0, 1.5, 0.25}, kFloat64);
  for (bool weighted : {false, true})
    for (int64_t ignore : {-100, 4})
      for (double smoothing : {0.0, 0.15})
        for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
          const LossOptions o{
              .reduction = r, .ignore_index = ignore, .label_smoothing = smoothing, .weight = weighted ? w : Tensor()};
          const Tensor safe = where(target.eq(-100.0), zeros_like(target), target);  // -100 only where ignored
          const Tensor t = ignore == -100 ? target : safe;
          Tensor x = leaf({6, 5}), xc = x.detach().requires_grad_(true);
          Tensor loss = cross_entropy(x, t, o);
          EXPECT_EQ(last_dispatch("cross_entropy"), "fused kernel (Double)");
          Tensor lc = cross_entropy(xc.unsqueeze(2), t.unsqueeze(1), o);
          EXPECT_EQ(last_dispatch("cross_entropy"), "composite: logits of more than 2 dims");
          if (r == Reduction::None) lc = lc.squeeze(1);
          const std::string where_ = str("weighted ", weighted, " ignore ", ignore, " smoothing ", smoothing);
          EXPECT_ALLCLOSE(loss, lc, 1e-12, 1e-12) << where_;
          const Tensor g = randn(loss.sizes(), kFloat64);
          (loss * g).sum().backward();
          (lc * g).sum().backward();
          EXPECT_ALLCLOSE(x.grad(), xc.grad(), 1e-12, 1e-12) << where_;
        }
  auto ce = [w](const tensor_list& in) {
    return cross_entropy(in[0], tensor({1, 0, -100}), {.label_smoothing = 0.1, .weight = w});
  };
  EXPECT_GRADGRADCHECK(ce, {leaf({3, 5})});
  // A weight that requires grad takes the composite, whose smoothing term gives it a gradient.
  Tensor wg = w.detach().requires_grad_(true);
  cross_entropy(randn({3, 5}, kFloat64), tensor({1, 0, 3}), {.label_smoothing = 0.1, .weight = wg}).backward();
  EXPECT_EQ(last_dispatch("cross_entropy"),
            "composite: a weight of another dtype or device, or one that requires grad with label smoothing");
  EXPECT_TRUE(wg.grad().defined());
  // Without smoothing the fused path gives the weight its gradient through the weighted mean.
  Tensor wf = w.detach().requires_grad_(true), wc = w.detach().requires_grad_(true), xw = randn({3, 5}, kFloat64);
  cross_entropy(xw, tensor({1, 0, 3}), {.weight = wf}).backward();
  EXPECT_EQ(last_dispatch("cross_entropy"), "fused kernel (Double)");
  cross_entropy(xw.unsqueeze(2), tensor({1, 0, 3}).unsqueeze(1), {.weight = wc}).backward();
  EXPECT_ALLCLOSE(wf.grad(), wc.grad(), 1e-12, 1e-12);
  // 16 bits: the kernels compute in float32.
  const Tensor xb = randn({6, 5}).to(kBFloat16), tb = tensor({2, 0, 4, 3, 1, 4});
  EXPECT_ALLCLOSE(cross_entropy(xb, tb).to(kFloat), cross_entropy(xb.to(kFloat), tb), 1e-2, 1e-2);
}

// Every target ignored (a fully padded batch): the mean over no targets is NaN, as in libtorch, and the
// gradient is 0 (libtorch's), not NaN, so one such batch cannot poison the weights.
TEST(NnFunctional, LossesWithEveryTargetIgnoredHaveZeroGradients) {
  const Tensor ignored = tensor({-100, -100});
  const Tensor w = tensor({0.5, 2.0, 1.0}, kFloat64);
  for (const LossOptions& o : {LossOptions{}, LossOptions{.weight = w}, LossOptions{.label_smoothing = 0.1},
                               LossOptions{.label_smoothing = 0.2, .weight = w}}) {
    Tensor logits = randn({2, 3}, f64());
    Tensor loss = cross_entropy(logits, ignored, o);
    EXPECT_TRUE(std::isnan(loss.item<double>()));
    loss.backward();
    EXPECT_VALUES(logits.grad(), {0, 0, 0, 0, 0, 0});
    if (o.label_smoothing != 0) continue;
    Tensor log_probs = randn({2, 3}, f64());
    Tensor nll = nll_loss(log_probs, ignored, o);
    EXPECT_TRUE(std::isnan(nll.item<double>()));
    nll.backward();
    EXPECT_VALUES(log_probs.grad(), {0, 0, 0, 0, 0, 0});
  }
  // Sum over no targets is 0 with a 0 gradient; one kept target is unaffected by the guard.
  Tensor logits = randn({2, 3}, f64());
  cross_entropy(logits, ignored, {.reduction = Reduction::Sum}).backward();
  EXPECT_VALUES(logits.grad(), {0, 0, 0, 0, 0, 0});
  auto one_kept = [](const tensor_list& in) { return cross_entropy(in[0], tensor({-100, 2})); };
  EXPECT_GRADCHECK(one_kept, {leaf({2, 3})});
}

TEST(NnFunctional, MseLossValues) {
  Tensor a = tensor({1.0, 2.0, 4.0}), b = tensor({1.0, 0.0, 1.0});
  EXPECT_VALUES(mse_loss(a, b), {13.0 / 3});  // (0 + 4 + 9) / 3
  EXPECT_VALUES(mse_loss(a, b, Reduction::Sum), {13});
  EXPECT_VALUES(mse_loss(a, b, Reduction::None), {0, 4, 9});
}

TEST(NnFunctional, LossErrors) {
  Tensor x = zeros({2, 3});
  EXPECT_THROW_MSG(cross_entropy(x, tensor({0, 3})), "cross_entropy: target 3 is out of bounds for 3 classes");
  EXPECT_THROW_MSG(nll_loss(x, tensor({-2, 0})), "nll_loss: target -2 is out of bounds for 3 classes");
  EXPECT_THROW_MSG(cross_entropy(x, tensor({0.0, 1.0})),
                   "cross_entropy: expected target of dtype Long (int64 class indices), got Float");
  EXPECT_THROW_MSG(cross_entropy(x, tensor({0, 1, 2})),
                   "cross_entropy: expected target of shape [2] for input of shape [2, 3], got [3]");
  EXPECT_THROW_MSG(cross_entropy(x, tensor({0, 1}), {.label_smoothing = 1.5}),
                   "cross_entropy: label_smoothing must be between 0.0 and 1.0, got 1.5");
  EXPECT_THROW_MSG(nll_loss(x, tensor({0, 1}), {.weight = ones({4})}),
                   "nll_loss: expected weight of shape [3], got [4]");
}

// libtorch's positional nll_loss(out, target, weight, reduction, ignore_index), and STRATA_CHECK without a
// message (as TORCH_CHECK), which names the condition.
TEST(NnFunctional, NllLossPositionalFormAndCheckWithoutMessage) {
  Tensor lp = log_softmax(tensor({1.0, 2.0, 0.5, 0.1, 0.3, 2.0}).reshape({2, 3}), 1);
  Tensor t = tensor({1, 2});
  Tensor w = tensor({1.0, 2.0, 3.0});
  EXPECT_TRUE(strata::testing::allclose(nll_loss(lp, t, {}, Reduction::Sum),
                                        nll_loss(lp, t, {.reduction = Reduction::Sum}), 0, 0));
  EXPECT_TRUE(strata::testing::allclose(nll_loss(lp, t, w, Reduction::Mean, 2),
                                        nll_loss(lp, t, {.ignore_index = 2, .weight = w}), 0, 0));
  EXPECT_THROW_MSG(STRATA_CHECK(lp.dim() == 3), "Expected lp.dim() == 3 to be true, but got false");
}

// triu / tril over the last two dims (any diagonal, batched, with gradient), clamp_min / clamp_max, and
// F::linear, as libtorch's.
TEST(NnFunctional, TriangleClampAndLinear) {
  Tensor m = arange(1, 13, kFloat64).reshape({3, 4});
  EXPECT_VALUES(triu(m), {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  EXPECT_VALUES(triu(m, 1), {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  EXPECT_VALUES(tril(m), {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  EXPECT_VALUES(tril(m, -1), {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  Tensor batch = m.unsqueeze(0).expand({2, 3, 4});
  EXPECT_TRUE(strata::testing::allclose(triu(batch)[1], triu(m), 0, 0));
  EXPECT_THROW_MSG(triu(arange(3)), "triu: input tensor must have at least 2 dimensions");
  EXPECT_GRADCHECK([](const tensor_list& in) { return tril(in[0], 1); }, {leaf({2, 3, 4})});
  EXPECT_VALUES(clamp_min(tensor({-1.0, 0.5, 2.0}), 0.0), {0, 0.5, 2});
  EXPECT_VALUES(clamp_max(tensor({-1.0, 0.5, 2.0}), 1.0), {-1, 0.5, 1});
  Tensor x = randn({2, 5, 3}, kFloat64), w = randn({4, 3}, kFloat64), b = randn({4}, kFloat64);
  EXPECT_TRUE(strata::testing::allclose(nn::functional::linear(x, w, b), matmul(x, w.t()) + b, 1e-14, 1e-14));
  EXPECT_THROW_MSG(linear(x, randn({4, 2})), "linear: input of shape [2, 5, 3] does not match weight of shape [4, 2]");
  EXPECT_GRADCHECK([](const tensor_list& in) { return linear(in[0], in[1], in[2]); },
                   {leaf({2, 3}), leaf({4, 3}), leaf({4})});
}
