// Sliding-window ops (autograd/ops/conv.cpp) and their layers (nn/conv.h, nn/pooling.h): values against
// direct loops written from the definitions, adjoint identities (conv_transpose2d and col2im are the
// adjoints of conv2d and im2col), gradcheck and gradgradcheck in float64 over strided, padded, dilated,
// grouped and non-contiguous cases, the errors users hit, and the modules' shapes, options and printing.

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include "helpers.h"
#include "strata/tensor/kernels.h"

using namespace strata;
namespace F = strata::nn::functional;
using strata::testing::allclose;

namespace {

/// conv2d from its definition: out[n, o, y, x] = b[o] + sum over the group's channels and the kernel of
/// w[o, c, ky, kx] * in[n, g * C/G + c, y * s - p + ky * d, x * s - p + kx * d] (zero outside), in double.
Tensor direct_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t sy, int64_t sx,
                     int64_t py_before, int64_t px_before, int64_t py_after, int64_t px_after, int64_t dy, int64_t dx,
                     int64_t groups) {
  const Tensor in = input.to(kFloat64).contiguous(), w = weight.to(kFloat64).contiguous();
  const int64_t n = in.size(0), c = in.size(1), h = in.size(2), wd = in.size(3);
  const int64_t o = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t oh = (h + py_before + py_after - dy * (kh - 1) - 1) / sy + 1;
  const int64_t ow = (wd + px_before + px_after - dx * (kw - 1) - 1) / sx + 1;
  std::vector<double> out(static_cast<size_t>(n * o * oh * ow));
  const double* x = in.data_ptr<double>();
  const double* k = w.data_ptr<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc) {
      const int64_t g = oc / (o / groups);
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo) {
          double acc = bias.defined() ? bias[oc].item<double>() : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = y * sy - py_before + ky * dy, ix = xo * sx - px_before + kx * dx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += k[((oc * cg + ci) * kh + ky) * kw + kx] * x[((b * c + g * cg + ci) * h + iy) * wd + ix];
              }
          out[static_cast<size_t>(((b * o + oc) * oh + y) * ow + xo)] = acc;
        }
    }
  return tensor(out, kFloat64).reshape({n, o, oh, ow});
}

/// Sum of a * b over every element: the inner product the adjoint identities compare.
double dot(const Tensor& a, const Tensor& b) { return (a * b).sum().item<double>(); }

}  // namespace

// ---- convolution values ----

TEST(Conv, Conv2dMatchesTheDefinition) {
  manual_seed(1);
  struct Case {
    int64_t n, c, h, w, o, kh, kw, s, p, d, g;
    bool bias;
  };
  const Case cases[] = {
      {2, 3, 7, 6, 4, 3, 3, 1, 0, 1, 1, true},   // plain
      {1, 2, 9, 8, 3, 3, 2, 2, 1, 1, 1, false},  // strided, padded, rectangular kernel
      {2, 4, 8, 8, 6, 3, 3, 1, 2, 2, 2, true},   // dilated, grouped
      {1, 6, 5, 7, 6, 1, 3, 3, 1, 1, 6, true},   // depthwise
  };
  for (const Case& t : cases) {
    Tensor x = randn({t.n, t.c, t.h, t.w}, kFloat64), w = randn({t.o, t.c / t.g, t.kh, t.kw}, kFloat64);
    Tensor b = t.bias ? randn({t.o}, kFloat64) : Tensor();
    Tensor got = conv2d(x, w, b, t.s, t.p, t.d, t.g);
    EXPECT_TRUE(allclose(got, direct_conv2d(x, w, b, t.s, t.s, t.p, t.p, t.p, t.p, t.d, t.d, t.g), 1e-12, 1e-12))
        << "kernel " << t.kh << "x" << t.kw << " stride " << t.s << " padding " << t.p << " groups " << t.g;
  }
  // A non-contiguous input and an unbatched one give the same values.
  Tensor x = randn({2, 3, 6, 5}, kFloat64), w = randn({4, 3, 2, 2}, kFloat64);
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);
  EXPECT_TRUE(allclose(conv2d(xt, w), conv2d(x, w), 0, 0));
  EXPECT_TRUE(allclose(conv2d(x[1], w), conv2d(x, w)[1], 0, 0));
  // Separate strides, paddings and dilations per dim.
  EXPECT_TRUE(allclose(conv2d(x, w, {}, {2, 1}, {0, 1}, {1, 2}), direct_conv2d(x, w, {}, 2, 1, 0, 1, 0, 1, 1, 2, 1),
                       1e-12, 1e-12));
}

TEST(Conv, SamePaddingKeepsTheSizeAndPutsTheOddOneAfter) {
  manual_seed(2);
  Tensor x = randn({1, 2, 6, 7}, kFloat64);
  for (int64_t k : {3, 4}) {
    Tensor w = randn({3, 2, k, k}, kFloat64);
    Tensor same = conv2d(x, w, {}, 1, kSame);
    EXPECT_EQ(same.sizes(), IntArrayRef({1, 3, 6, 7}));
    const int64_t before = (k - 1) / 2, after = (k - 1) - before;  // torch: the extra one goes after
    EXPECT_TRUE(allclose(same, direct_conv2d(x, w, {}, 1, 1, before, before, after, after, 1, 1, 1), 1e-12, 1e-12));
  }
  EXPECT_EQ(conv2d(x, randn({3, 2, 3, 3}, kFloat64), {}, 1, kValid).sizes(), IntArrayRef({1, 3, 4, 5}));
  EXPECT_THROW_MSG(conv2d(x, randn({3, 2, 3, 3}, kFloat64), {}, 2, kSame),
                   "padding='same' is not supported for strided convolutions");
}

TEST(Conv, Conv1dIsConv2dOverARow) {
  manual_seed(3);
  Tensor x = randn({2, 4, 11}, kFloat64), w = randn({6, 2, 3}, kFloat64), b = randn({6}, kFloat64);
  Tensor got = conv1d(x, w, b, 2, 1, 2, 2);
  Tensor want = conv2d(x.unsqueeze(2), w.unsqueeze(2), b, {1, 2}, {0, 1}, {1, 2}, 2).squeeze(2);
  EXPECT_TRUE(allclose(got, want, 0, 0));
  EXPECT_EQ(got.sizes(), IntArrayRef({2, 6, 5}));
  EXPECT_EQ(conv1d(x[0], w, b, 1, kSame, 1, 2).sizes(), IntArrayRef({6, 11}));
}

// conv_transpose2d is conv2d's adjoint in its input: <conv2d(x, w), y> = <x, conv_transpose2d(y, w)>.
TEST(Conv, TransposedConvolutionIsTheAdjointOfConvolution) {
  manual_seed(4);
  struct Case {
    int64_t h, w, k, s, p, d, g, output_padding;
  };
  for (const Case& t : {Case{7, 6, 3, 1, 0, 1, 1, 0}, Case{9, 8, 3, 2, 1, 1, 1, 1}, Case{8, 9, 2, 2, 0, 2, 2, 1},
                        Case{10, 10, 3, 3, 2, 2, 2, 2}}) {
    Tensor x = randn({2, 4, t.h, t.w}, kFloat64), w = randn({6, 4 / t.g, t.k, t.k}, kFloat64);
    Tensor y = conv2d(x, w, {}, t.s, t.p, t.d, t.g);
    Tensor r = randn(y.sizes(), kFloat64);
    // The transposed op maps y's shape back onto x's (output_padding picks among the sizes that do).
    const int64_t extra = t.h - ((y.size(2) - 1) * t.s - 2 * t.p + t.d * (t.k - 1) + 1);
    Tensor back = conv_transpose2d(r, w, {}, t.s, t.p,
                                   {extra, t.w - ((y.size(3) - 1) * t.s - 2 * t.p + t.d * (t.k - 1) + 1)}, t.g, t.d);
    ASSERT_EQ(back.sizes(), x.sizes()) << "stride " << t.s;
    EXPECT_NEAR(dot(y, r), dot(x, back), 1e-10 * (1 + std::abs(dot(y, r))));
  }
  // With a bias and output_padding the size grows as torch's formula says.
  Tensor up = conv_transpose2d(randn({1, 2, 5, 5}), randn({2, 3, 3, 3}), randn({3}), 2, 1, 1);
  EXPECT_EQ(up.sizes(), IntArrayRef({1, 3, 10, 10}));
  EXPECT_THROW_MSG(conv_transpose2d(randn({1, 2, 5, 5}), randn({2, 3, 3, 3}), {}, 2, 0, 2),
                   "output padding must be smaller than either stride or dilation");
}

TEST(Conv, Col2imIsTheAdjointOfIm2col) {
  manual_seed(5);
  Tensor x = randn({2, 3, 7, 6}, kFloat64);
  Tensor cols = im2col(x, {3, 2}, {2, 1}, {1, 0}, {2, 1});
  // [N, C * kH * kW, L]: L = ((7 + 2 - 5) / 2 + 1) * ((6 - 2) / 1 + 1) = 3 * 5.
  EXPECT_EQ(cols.sizes(), IntArrayRef({2, 18, 15}));
  Tensor r = randn(cols.sizes(), kFloat64);
  Tensor back = col2im(r, {7, 6}, {3, 2}, {2, 1}, {1, 0}, {2, 1});
  EXPECT_EQ(back.sizes(), x.sizes());
  EXPECT_NEAR(dot(cols, r), dot(x, back), 1e-10);
  // Each column of a 2x2 unfold with stride 2 is one block of the input.
  Tensor v = arange(16, kFloat64).reshape({1, 1, 4, 4});
  EXPECT_VALUES(im2col(v, 2, 1, 0, 2).select(2, 3), {10, 11, 14, 15});
  EXPECT_THROW_MSG(col2im(r, {7, 6}, {3, 2}, {2, 1}, {1, 0}, {1, 1}), "calculated number of sliding blocks");
}

// ---- pooling values ----

TEST(Pool, MaxPoolPicksEachWindowsMaximumAndItsIndex) {
  manual_seed(6);
  Tensor x = randn({2, 3, 7, 8}, kFloat64);
  auto [values, indices] = max_pool2d_with_indices(x, {3, 2}, {2, 2}, {1, 1}, 1, true);
  // ceil_mode: (7 + 2 - 3 + 1) / 2 + 1 = 4 rows, (8 + 2 - 2 + 1) / 2 + 1 = 5 columns.
  EXPECT_EQ(values.sizes(), IntArrayRef({2, 3, 4, 5}));
  EXPECT_TRUE(allclose(values, x.flatten(2).gather(2, indices.flatten(2)).reshape(values.sizes()), 0, 0));
  // The direct maximum of window (1, 2) of sample 1, channel 2: rows 1..3, columns 3..4.
  EXPECT_EQ(values[1][2][1][2].item<double>(), x[1][2].narrow(0, 1, 3).narrow(1, 3, 2).max().item<double>());
  // Dilation, and max_pool1d as a row of max_pool2d.
  Tensor dilated = max_pool2d(x, 2, 1, 0, 2);
  EXPECT_EQ(dilated.sizes(), IntArrayRef({2, 3, 5, 6}));
  EXPECT_EQ(dilated[0][0][0][0].item<double>(), std::max({x[0][0][0][0].item<double>(), x[0][0][0][2].item<double>(),
                                                          x[0][0][2][0].item<double>(), x[0][0][2][2].item<double>()}));
  Tensor row = randn({2, 3, 9}, kFloat64);
  EXPECT_TRUE(
      allclose(max_pool1d(row, 3, 2, 1), max_pool2d(row.unsqueeze(2), {1, 3}, {1, 2}, {0, 1}).squeeze(2), 0, 0));
  // NaN wins, as torch.
  Tensor nan = zeros({1, 1, 2, 2}, kFloat64);
  nan[0][0][1][0].fill_(std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(max_pool2d(nan, 2).item<double>()));
  EXPECT_THROW_MSG(max_pool2d(x, 2, 2, 2), "pad should be at most half of effective kernel size");
}

TEST(Pool, AvgPoolDividesAsTorch) {
  manual_seed(7);
  Tensor x = randn({1, 2, 5, 5}, kFloat64);
  // Window at (0, 0) with padding 1, kernel 3: it covers rows -1..1 and columns -1..1 (four inputs).
  const double corner = x[0][1].narrow(0, 0, 2).narrow(1, 0, 2).sum().item<double>();
  EXPECT_NEAR(avg_pool2d(x, 3, 2, 1)[0][1][0][0].item<double>(), corner / 9, 1e-15);                // counts padding
  EXPECT_NEAR(avg_pool2d(x, 3, 2, 1, false, false)[0][1][0][0].item<double>(), corner / 4, 1e-15);  // inputs only
  EXPECT_NEAR(avg_pool2d(x, 3, 2, 1, false, true, 5)[0][1][0][0].item<double>(), corner / 5, 1e-15);
  // ceil_mode: a last window past the padding divides by what it covers of input and padding.
  Tensor ceil = avg_pool2d(x, 2, 2, 0, true);
  EXPECT_EQ(ceil.sizes(), IntArrayRef({1, 2, 3, 3}));
  EXPECT_NEAR(ceil[0][0][2][2].item<double>(), x[0][0][4][4].item<double>(), 1e-15);  // a 1x1 window
  EXPECT_TRUE(allclose(avg_pool2d(x, 5), x.mean({2, 3}, true), 1e-15, 1e-15));
  EXPECT_THROW_MSG(avg_pool2d(x, 3, 1, 0, false, true, 0), "divisor must be not zero");
}

TEST(Pool, AdaptiveAvgPoolAveragesTorchsWindows) {
  manual_seed(8);
  Tensor x = randn({2, 3, 7, 5}, kFloat64);
  Tensor out = adaptive_avg_pool2d(x, {3, 2});
  ASSERT_EQ(out.sizes(), IntArrayRef({2, 3, 3, 2}));
  // Rows: [0, 3), [2, 5), [4, 7); columns: [0, 3), [2, 5).
  const int64_t r0[] = {0, 2, 4}, r1[] = {3, 5, 7}, c0[] = {0, 2}, c1[] = {3, 5};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_NEAR(out[1][2][i][j].item<double>(),
                  x[1][2].narrow(0, r0[i], r1[i] - r0[i]).narrow(1, c0[j], c1[j] - c0[j]).mean().item<double>(), 1e-14);
  EXPECT_TRUE(allclose(adaptive_avg_pool2d(x, 1), x.mean({2, 3}, true), 1e-14, 1e-14));
}

TEST(Pool, FeatureDropoutZeroesWholeChannels) {
  manual_seed(9);
  Tensor x = ones({16, 8, 3, 3});
  Tensor y = F::dropout2d(x, F::Dropout2dFuncOptions().p(0.5));
  Tensor per_channel = y.flatten(2);
  // Every channel is all zeros or all 2 (= 1 / (1 - p)).
  EXPECT_TRUE(allclose(amax(per_channel, {2}), amin(per_channel, {2}), 0, 0));
  const double kept = amax(per_channel, {2}).ne(0.0).to(kFloat64).mean().item<double>();
  EXPECT_GT(kept, 0.3);
  EXPECT_LT(kept, 0.7);
  EXPECT_TRUE(F::dropout2d(x, F::Dropout2dFuncOptions().training(false)).is_same(x));
  EXPECT_EQ(F::dropout2d(x[0], F::Dropout2dFuncOptions()).sizes(), IntArrayRef({8, 3, 3}));
}

// ---- gradients ----

TEST(ConvGrad, ConvolutionsPassGradcheckAndGradgradcheck) {
  manual_seed(10);
  auto strided = [](const tensor_list& in) { return conv2d(in[0], in[1], in[2], 2, 1); };
  auto dilated_grouped = [](const tensor_list& in) { return conv2d(in[0], in[1], {}, 1, {1, 2}, 2, 2); };
  auto non_contiguous = [](const tensor_list& in) { return conv2d(in[0].transpose(2, 3), in[1]); };
  auto same = [](const tensor_list& in) { return conv2d(in[0], in[1], {}, 1, kSame); };
  auto one_d = [](const tensor_list& in) { return conv1d(in[0], in[1], in[2], 2, 1, 1, 1); };
  auto transposed = [](const tensor_list& in) { return conv_transpose2d(in[0], in[1], in[2], 2, 1, 1, 2, 1); };
  EXPECT_GRADCHECK(strided, {leaf({2, 2, 5, 4}), leaf({3, 2, 3, 3}), leaf({3})});
  EXPECT_GRADCHECK(dilated_grouped, {leaf({1, 4, 6, 6}), leaf({2, 2, 2, 2})});
  EXPECT_GRADCHECK(non_contiguous, {leaf({1, 2, 4, 5}), leaf({2, 2, 2, 2})});
  EXPECT_GRADCHECK(same, {leaf({1, 2, 4, 5}), leaf({2, 2, 2, 3})});
  EXPECT_GRADCHECK(one_d, {leaf({2, 2, 7}), leaf({3, 2, 3}), leaf({3})});
  EXPECT_GRADCHECK(transposed, {leaf({1, 4, 3, 3}), leaf({4, 1, 3, 3}), leaf({2})});
  EXPECT_GRADGRADCHECK(strided, {leaf({1, 2, 4, 4}), leaf({2, 2, 2, 2}), leaf({2})});
  EXPECT_GRADGRADCHECK(transposed, {leaf({1, 2, 2, 2}), leaf({2, 1, 2, 2}), leaf({2})});
}

// On the CPU, float32 convolutions run on oneDNN's direct kernels (Note [direct convolution]): their values,
// gradients and second derivatives agree with the float64 composite over im2col, for every geometry the
// ops take, the padding after an input that the last window does not reach included.
TEST(ConvGrad, Float32DirectConvolutionsMatchTheFloat64Composite) {
  manual_seed(12);
  struct Case {
    const char* name;
    std::vector<int64_t> x, w;
    std::function<Tensor(const Tensor&, const Tensor&)> fn;
  };
  const std::vector<Case> cases = {
      {"plain", {2, 3, 9, 8}, {4, 3, 3, 3}, [](const Tensor& x, const Tensor& w) { return conv2d(x, w); }},
      {"strided past the end",
       {2, 3, 10, 9},
       {5, 3, 3, 2},
       [](const Tensor& x, const Tensor& w) {
         return conv2d(x, w, {}, {3, 2}, {1, 0});
       }},
      {"dilated grouped",
       {1, 4, 9, 9},
       {6, 2, 3, 3},
       [](const Tensor& x, const Tensor& w) {
         return conv2d(x, w, {}, 1, {2, 1}, {2, 3}, 2);
       }},
      {"depthwise same",
       {2, 6, 7, 8},
       {6, 1, 4, 4},
       [](const Tensor& x, const Tensor& w) { return conv2d(x, w, {}, 1, kSame, 1, 6); }},
      {"one channel 5x5", {3, 1, 12, 12}, {10, 1, 5, 5}, [](const Tensor& x, const Tensor& w) { return conv2d(x, w); }},
      {"conv1d", {2, 4, 13}, {6, 2, 3}, [](const Tensor& x, const Tensor& w) { return conv1d(x, w, {}, 2, 1, 2, 2); }},
      {"transposed",
       {2, 4, 5, 5},
       {4, 3, 3, 3},
       [](const Tensor& x, const Tensor& w) { return conv_transpose2d(x, w, {}, 2, 1, 1); }},
  };
  for (const Case& c : cases) {
    Tensor x64 = randn(c.x, kFloat64), w64 = randn(c.w, kFloat64);
    Tensor x32 = x64.to(kFloat).requires_grad_(true), w32 = w64.to(kFloat).requires_grad_(true);
    x64.requires_grad_(true);
    w64.requires_grad_(true);
    Tensor y64 = c.fn(x64, w64), y32 = c.fn(x32, w32);
    EXPECT_TRUE(allclose(y32, y64, 1e-4, 1e-4)) << c.name;
    // float32 took the direct kernels and float64 the composite; without this both sides could be composites.
    if (std::string(c.name) == "plain") {
      EXPECT_STREQ(y32.grad_fn()->name(), "ConvolutionBackward0");
      EXPECT_STRNE(y64.grad_fn()->name(), "ConvolutionBackward0");
    }
    // First derivatives with a graph, then the derivatives of <grads, v>: every edge of the op triple.
    Tensor r = randn(y64.sizes(), kFloat64);
    tensor_list g64 = autograd::grad({y64}, {x64, w64}, {r}, true, true);
    tensor_list g32 = autograd::grad({y32}, {x32, w32}, {r.to(kFloat)}, true, true);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(allclose(g32[i], g64[i], 1e-4, 1e-4)) << c.name << " grad " << i;
    Tensor vx = randn(x64.sizes(), kFloat64), vw = randn(w64.sizes(), kFloat64);
    tensor_list gg64 = autograd::grad({(g64[0] * vx).sum() + (g64[1] * vw).sum()}, {x64, w64}, {}, {}, false, true);
    tensor_list gg32 = autograd::grad({(g32[0] * vx.to(kFloat)).sum() + (g32[1] * vw.to(kFloat)).sum()}, {x32, w32}, {},
                                      {}, false, true);
    // A convolution is bilinear: d2/dx2 is zero (undefined), the mixed terms are not.
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(gg64[i].defined()) << c.name;
      EXPECT_TRUE(allclose(gg32[i], gg64[i], 1e-4, 1e-3)) << c.name << " second derivative " << i;
    }
  }
}

// The kernel table's direct convolution: float32 on the CPU, a false answer that writes nothing elsewhere,
// and a named error for operands that do not fit the window.
TEST(ConvGrad, DirectConvolutionKernelsAnswerForFloat32Only) {
  const Window2d g{{3, 3}, {1, 1}, {1, 1}, {1, 1}, {6, 6}, {6, 6}};  // kernel, stride, dilation, pad, in, out
  const Kernels& k = cpu_kernels();
  Tensor x = randn({2, 3, 6, 6}, kFloat64), w = randn({4, 3, 3, 3}, kFloat64), out = zeros({2, 4, 6, 6}, kFloat64);
  EXPECT_FALSE(k.conv2d(x, w, g, 1, out));
  EXPECT_FALSE(k.conv2d_backward_input(out, w, g, 1, x));
  EXPECT_FALSE(k.conv2d_backward_weight(x, out, g, 1, w));
  EXPECT_EQ(out.abs().sum().item<double>(), 0.0);
  Tensor x32 = x.to(kFloat), w32 = w.to(kFloat), out32 = empty({2, 4, 6, 6});
  ASSERT_TRUE(k.conv2d(x32, w32, g, 1, out32));
  EXPECT_TRUE(allclose(out32, conv2d(x, w, {}, 1, 1), 1e-4, 1e-4));
  EXPECT_THROW_MSG(k.conv2d(x32, w32, g, 1, empty({2, 4, 6, 5})),
                   "conv2d: input [2, 3, 6, 6], weight [4, 3, 3, 3] and output [2, 4, 6, 5] do not fit a convolution "
                   "with 1 groups, kernel (3, 3) and output size (6, 6)");
  EXPECT_THROW_MSG(k.conv2d_backward_weight(x32, empty({2, 4, 6, 6}, kFloat64), g, 1, w32),
                   "conv2d_backward_weight: operands of one dtype expected, got Float, Float and Double");
  EXPECT_THROW_MSG(conv2d(x32, w),
                   "conv2d: expected the input and weight of one dtype and device, got Float on cpu "
                   "and Double on cpu");
}

TEST(ConvGrad, PoolingAndFoldsPassGradcheckAndGradgradcheck) {
  manual_seed(11);
  // Max pooling is differentiable away from ties: distinct values spaced well beyond gradcheck's step.
  auto spread = [](IntArrayRef sizes) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 37) % n) * 0.1;  // a shuffle
    return tensor(v, kFloat64).reshape(sizes).requires_grad_(true);
  };
  auto max2d = [](const tensor_list& in) { return max_pool2d(in[0], {3, 2}, 2, 1, 1, true); };
  auto max_dilated = [](const tensor_list& in) { return max_pool2d(in[0], 2, 1, 0, 2); };
  auto max1d = [](const tensor_list& in) { return max_pool1d(in[0], 3, 2, 1); };
  auto avg = [](const tensor_list& in) { return avg_pool2d(in[0], 3, 2, 1, true, false); };
  auto adaptive = [](const tensor_list& in) { return adaptive_avg_pool2d(in[0], {3, 2}); };
  auto unfold = [](const tensor_list& in) { return im2col(in[0], {2, 3}, 1, 1, {2, 1}); };
  auto fold = [](const tensor_list& in) { return col2im(in[0], {4, 5}, 2, 1, 0, 1); };
  EXPECT_GRADCHECK(max2d, {spread({1, 2, 5, 6})});
  EXPECT_GRADCHECK(max_dilated, {spread({1, 1, 5, 5})});
  EXPECT_GRADCHECK(max1d, {spread({2, 2, 7})});
  EXPECT_GRADCHECK(avg, {leaf({1, 2, 5, 6})});
  EXPECT_GRADCHECK(adaptive, {leaf({2, 1, 7, 5})});
  EXPECT_GRADCHECK(unfold, {leaf({1, 2, 4, 5})});
  EXPECT_GRADCHECK(fold, {leaf({1, 8, 12})});
  EXPECT_GRADGRADCHECK(max2d, {spread({1, 1, 4, 4})});
  EXPECT_GRADGRADCHECK(avg, {leaf({1, 1, 4, 4})});
  EXPECT_GRADGRADCHECK(adaptive, {leaf({1, 1, 5, 4})});
}

// ---- errors ----

TEST(Conv, ErrorsNameTheShapes) {
  Tensor x = randn({1, 3, 8, 8});
  EXPECT_THROW_MSG(conv2d(x, randn({4, 2, 3, 3})), "expected input[1, 3, 8, 8] to have 2 channels, but got 3");
  EXPECT_THROW_MSG(conv2d(x, randn({4, 3, 9, 9})), "smaller than the kernel's extent (9, 9)");
  EXPECT_THROW_MSG(conv2d(x, randn({3, 1, 3, 3}), {}, 1, 0, 1, 2), "out_channels (3) must be divisible by groups (2)");
  EXPECT_THROW_MSG(conv2d(randn({3, 8}), randn({4, 3, 3, 3})), "expected a 3-D (unbatched) or 4-D (batched) input");
  EXPECT_THROW_MSG(conv2d(x, randn({4, 3, 3, 3}), randn({5})), "expected a bias of shape [4]");
  EXPECT_THROW_MSG(conv2d(x, randn({4, 3, 3, 3}), {}, 0), "stride must be positive, got 0");
  EXPECT_THROW_MSG(conv2d(x, randn({4, 3, 3, 3}), {}, {1, 1, 1}), "stride must be one value or two");
  EXPECT_THROW_MSG(conv2d(x.to(kLong), randn({4, 3, 3, 3}).to(kLong)), "expected a floating point input");
  EXPECT_THROW_MSG(max_pool2d(randn({1, 1, 2, 2}), 3), "smaller than the kernel");
}

// ---- modules ----

TEST(ConvModules, ShapesParametersAndPrinting) {
  manual_seed(12);
  nn::Conv2d conv1(1, 10, 5);
  EXPECT_EQ(conv1->weight.sizes(), IntArrayRef({10, 1, 5, 5}));
  EXPECT_EQ(conv1->bias.sizes(), IntArrayRef({10}));
  // torch's init: every weight within 1 / sqrt(fan_in) = 1 / 5.
  EXPECT_LE(conv1->weight.abs().max().item<double>(), 0.2);
  nn::Conv2d conv2(nn::Conv2dOptions(10, 20, 3).stride(2).padding(1).bias(false));
  nn::Conv2d same(nn::Conv2dOptions(20, 20, {3, 2}).padding(kSame).groups(4));
  Tensor y = same(conv2(conv1(randn({4, 1, 28, 28}))));
  EXPECT_EQ(y.sizes(), IntArrayRef({4, 20, 12, 12}));
  EXPECT_FALSE(conv2->bias.defined());
  EXPECT_EQ(conv2->parameters().size(), 1u);
  std::ostringstream printed;
  printed << *conv1 << " " << *conv2 << " " << *same;
  EXPECT_EQ(printed.str(),
            "Conv2d(1, 10, kernel_size=[5, 5], stride=[1, 1]) "
            "Conv2d(10, 20, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], bias=false) "
            "Conv2d(20, 20, kernel_size=[3, 2], stride=[1, 1], padding=kSame, groups=4)");
  nn::Conv1d c1(nn::Conv1dOptions(4, 8, 3).dilation(2));
  EXPECT_EQ(c1(randn({2, 4, 10})).sizes(), IntArrayRef({2, 8, 6}));
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(20, 10, 2).stride(2));
  EXPECT_EQ(up->weight.sizes(), IntArrayRef({20, 10, 2, 2}));
  EXPECT_EQ(up(y).sizes(), IntArrayRef({4, 10, 24, 24}));
  EXPECT_THROW_MSG(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)), "in_channels must be divisible by groups");
  // The functional forms take the same options.
  Tensor x = randn({1, 2, 6, 6}), w = randn({3, 2, 3, 3}), b = randn({3});
  EXPECT_TRUE(
      allclose(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(2).padding(1)), conv2d(x, w, b, 2, 1), 0, 0));
  EXPECT_EQ(F::conv2d(x, w, F::Conv2dFuncOptions().padding(kSame)).sizes(), IntArrayRef({1, 3, 6, 6}));
  EXPECT_EQ(F::conv_transpose2d(x, randn({2, 3, 2, 2}), F::ConvTranspose2dFuncOptions().stride(2)).sizes(),
            IntArrayRef({1, 3, 12, 12}));
}

TEST(ConvModules, PoolingFlattenAndDropout2d) {
  manual_seed(13);
  Tensor x = randn({2, 4, 8, 8});
  nn::MaxPool2d pool(2);
  EXPECT_EQ(pool(x).sizes(), IntArrayRef({2, 4, 4, 4}));
  auto [values, indices] = pool->forward_with_indices(x);
  EXPECT_EQ(indices.dtype(), kLong);
  EXPECT_TRUE(allclose(values, F::max_pool2d(x, F::MaxPool2dFuncOptions(2)), 0, 0));
  nn::AvgPool2d avg(nn::AvgPool2dOptions(3).stride(1).padding(1));
  EXPECT_EQ(avg(x).sizes(), x.sizes());
  nn::AdaptiveAvgPool2d gap(1);
  EXPECT_EQ(gap(x).sizes(), IntArrayRef({2, 4, 1, 1}));
  nn::MaxPool1d pool1(nn::MaxPool1dOptions(3).stride(1).padding(1));
  EXPECT_EQ(pool1(randn({2, 4, 9})).sizes(), IntArrayRef({2, 4, 9}));
  nn::Flatten flat;
  nn::Unflatten unflat(nn::UnflattenOptions(1, {4, 8, 8}));
  EXPECT_EQ(flat(x).sizes(), IntArrayRef({2, 256}));
  EXPECT_TRUE(allclose(unflat(flat(x)), x, 0, 0));
  EXPECT_THROW_MSG(nn::Unflatten(nn::UnflattenOptions(1, {4, 4}))(flat(x)), "must multiply to the size of dim 1");
  nn::Dropout2d drop(0.25);
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x));
  std::ostringstream printed;
  printed << *pool << " " << *avg << " " << *gap << " " << *flat << " " << *unflat << " " << *drop;
  EXPECT_EQ(printed.str(),
            "MaxPool2d(kernel_size=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil_mode=false) "
            "AvgPool2d(kernel_size=[3, 3], stride=[1, 1], padding=[1, 1]) AdaptiveAvgPool2d(output_size=[1, 1]) "
            "Flatten(start_dim=1, end_dim=-1) Unflatten(dim=1, unflattened_size=[4, 8, 8]) Dropout2d(p=0.25)");
}

// pytorch/examples' cpp/mnist network, as written there with torch:: renamed, trains a step.
TEST(ConvModules, TheMnistExampleNetRunsForwardAndBackward) {
  struct NetImpl : nn::Module {
    NetImpl() : conv1(1, 10, 5), conv2(10, 20, 5), fc1(320, 50), fc2(50, 10) {
      register_module("conv1", conv1);
      register_module("conv2", conv2);
      register_module("conv2_drop", conv2_drop);
      register_module("fc1", fc1);
      register_module("fc2", fc2);
    }
    Tensor forward(Tensor x) {
      x = relu(max_pool2d(conv1->forward(x), 2));
      x = relu(max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
      x = x.view({-1, 320});
      x = relu(fc1->forward(x));
      x = dropout(x, /*p=*/0.5, /*training=*/is_training());
      x = fc2->forward(x);
      return log_softmax(x, /*dim=*/1);
    }
    nn::Conv2d conv1;
    nn::Conv2d conv2;
    nn::Dropout2d conv2_drop;
    nn::Linear fc1;
    nn::Linear fc2;
  };
  manual_seed(14);
  NetImpl net;
  Tensor out = net.forward(randn({8, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), IntArrayRef({8, 10}));
  nll_loss(out, randint(0, 10, {8})).backward();
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.grad().defined());
}
