// Sliding-window ops: im2col and col2im, convolution (1-D, 2-D, transposed 2-D) and pooling (max,
// average, adaptive average), and feature dropout.
//
// Note [windows as im2col]: a window op reads its input through im2col (the kernel table's entry:
// [N, C, H, W] to [N, C, K, L], padding filled with a value) and writes back through col2im, its
// adjoint (each input position sums what the windows read from it). Here they are two
// differentiable ops, unfold_windows and fold_windows, each the other's backward, so every op in this
// file is a composite: convolution is unfold_windows plus one matmul with the weight (unless the device
// has a direct kernel, Note [direct convolution]), pooling a reduction over the window offsets, and
// every backward, double backward included, comes from the ops it is made of. Max pooling's indices
// come from a table of the flat input index each window offset reads (window_index), gathered at the
// maxima.

#include <array>
#include <cmath>
#include <limits>
#include <variant>
#include <tuple>
#include <vector>

#include "strata/autograd/ops/common.h"

namespace strata {
namespace {

using Pair = std::array<int64_t, 2>;

/// One value, or one per spatial dim, as libtorch's int-or-pair arguments: `what` names it in errors.
Pair pair_of(IntArrayRef v, const char* op, const char* what) {
  STRATA_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must be one value or two, got ", v);
  return {v[0], v[v.size() - 1]};
}

/// Where the windows of a 2-D sliding window op lie (the kernel table's geometry of im2col and col2im).
using Window = Window2d;

/// Checks the window's sizes (kernel, stride and dilation positive, padding non-negative).
void check_window(const Window& g, const char* op) {
  for (int d = 0; d < 2; ++d) {
    STRATA_CHECK(g.kernel[d] > 0, op, ": kernel size must be positive, got ", g.kernel[d]);
    STRATA_CHECK(g.stride[d] > 0, op, ": stride must be positive, got ", g.stride[d]);
    STRATA_CHECK(g.dilation[d] > 0, op, ": dilation must be positive, got ", g.dilation[d]);
    STRATA_CHECK(g.pad[d] >= 0, op, ": padding must be non-negative, got ", g.pad[d]);
  }
}

/// The window over `in` with `pad_after` extra padding at the end of each dim (convolution, im2col).
Window conv_window(Pair in, Pair kernel, Pair stride, Pair dilation, Pair pad, Pair pad_after, const char* op) {
  Window g{kernel, stride, dilation, pad, in, {}};
  check_window(g, op);
  for (int d = 0; d < 2; ++d) {
    STRATA_CHECK(pad_after[d] >= 0, op, ": padding must be non-negative, got ", pad_after[d]);
    const int64_t span = g.dilation[d] * (g.kernel[d] - 1) + 1, padded = in[d] + pad[d] + pad_after[d];
    STRATA_CHECK(padded >= span, op, ": the input's spatial size (", in[0], ", ", in[1], ") with padding is smaller ",
                 "than the kernel's extent (", g.dilation[0] * (g.kernel[0] - 1) + 1, ", ",
                 g.dilation[1] * (g.kernel[1] - 1) + 1, ")");
    g.out[d] = (padded - span) / g.stride[d] + 1;
  }
  return g;
}

/// The window of a pooling op: torch's output size, where ceil_mode rounds up but never starts a window
/// in the right padding; padding at most half the kernel's extent, so every window sees the input.
Window pool_window(Pair in, Pair kernel, Pair stride, Pair pad, Pair dilation, bool ceil_mode, const char* op) {
  Window g{kernel, stride, dilation, pad, in, {}};
  check_window(g, op);
  for (int d = 0; d < 2; ++d) {
    const int64_t span = g.dilation[d] * (g.kernel[d] - 1) + 1;
    STRATA_CHECK(2 * pad[d] <= span, op, ": pad should be at most half of effective kernel size, but got pad=", pad[d],
                 ", kernel_size=", kernel[d], " and dilation=", dilation[d]);
    const int64_t room = in[d] + 2 * pad[d] - span;
    STRATA_CHECK(room >= 0, op, ": the input's spatial size (", in[0], ", ", in[1],
                 ") with padding is smaller than the kernel");
    int64_t out = (room + (ceil_mode ? stride[d] - 1 : 0)) / stride[d] + 1;
    if (ceil_mode && (out - 1) * stride[d] >= in[d] + pad[d]) --out;
    g.out[d] = out;
  }
  return g;
}

/// For kernel offset k (row-major over the kernel) and position l (row-major over out), the flat input
/// index read there, or in[0] * in[1] where it is padding. Shape [K * L].
Tensor window_index(const Window& g, Device device) {
  const int64_t positions = g.positions(), padding = g.in[0] * g.in[1];
  std::vector<int64_t> index(static_cast<size_t>(g.offsets() * positions));
  size_t i = 0;
  for (int64_t ky = 0; ky < g.kernel[0]; ++ky)
    for (int64_t kx = 0; kx < g.kernel[1]; ++kx)
      for (int64_t oy = 0; oy < g.out[0]; ++oy)
        for (int64_t ox = 0; ox < g.out[1]; ++ox) {
          const int64_t y = oy * g.stride[0] - g.pad[0] + ky * g.dilation[0];
          const int64_t x = ox * g.stride[1] - g.pad[1] + kx * g.dilation[1];
          const bool inside = y >= 0 && y < g.in[0] && x >= 0 && x < g.in[1];
          index[i++] = inside ? y * g.in[1] + x : padding;
        }
  return tensor(index, TensorOptions(kLong).device(device));
}

Tensor fold_windows(const Tensor& cols, const Window& g);

/// The windows of x [N, C, H, W] as [N, C, K, L] (im2col), `pad_value` over the padding.
Tensor unfold_windows(const Tensor& x, const Window& g, Scalar pad_value) {
  const Tensor in = x.detach().contiguous();  // the kernel's operand; the history is x's, recorded below
  Tensor cols = empty({x.size(0), x.size(1), g.offsets(), g.positions()}, x.options());
  ops::kernels(in).im2col(in, g, pad_value.toDouble(), cols);
  if (auto node = autograd::record("Im2ColBackward", x, cols))
    node->backward = [g](const tensor_list& grads) { return tensor_list{fold_windows(grads[0], g)}; };
  return cols;
}

/// The sum, at each input position, of what the windows in cols [N, C, K * L] (or [N, C, K, L]) hold for it:
/// [N, C, H, W] (col2im).
Tensor fold_windows(const Tensor& cols, const Window& g) {
  const Tensor in = cols.detach().reshape({cols.size(0), cols.size(1), g.offsets(), g.positions()}).contiguous();
  Tensor out = empty({cols.size(0), cols.size(1), g.in[0], g.in[1]}, cols.options());
  ops::kernels(in).col2im(in, g, out);
  if (auto node = autograd::record("Col2ImBackward", cols, out))
    node->backward = [g, sizes = DimVector(cols.sizes())](const tensor_list& grads) {
      return tensor_list{unfold_windows(grads[0], g, 0).reshape(sizes)};
    };
  return out;
}

// Note [direct convolution]: where the device has a direct kernel for the operands (the CPU's oneDNN, for
// float32), convolution is three recorded ops whose derivatives are each other, so every order of derivative
// runs on the kernel: with y = convolution(x, w),
//   convolution(x, w)                 gives dx = convolution_backward_input(dy, w), dw = convolution_backward_weight(x, dy)
//   convolution_backward_input(dy, w) gives d(dy) = convolution(g, w),                dw = convolution_backward_weight(g, dy)
//   convolution_backward_weight(x, dy) gives dx = convolution_backward_input(dy, g),  d(dy) = convolution(x, g)
// for an incoming gradient g. Where it has none, each is its composite over unfold_windows, matmul and
// fold_windows (Note [windows as im2col]), whose derivatives come from the ops it is made of.

Tensor convolution_backward_input(const Tensor& grad_out, const Tensor& weight, const Window& g, int64_t groups,
                                  const char* op);
Tensor convolution_backward_weight(const Tensor& x, const Tensor& grad_out, const Window& g, int64_t groups,
                                   const char* op);

/// The operands of a convolution's kernel: off the graph (the caller records), contiguous, and of one dtype and
/// device, which `op` names in its error.
std::array<Tensor, 2> kernel_operands(const Tensor& a, const Tensor& b, const char* op) {
  STRATA_CHECK(a.dtype() == b.dtype() && a.device() == b.device(), op, ": expected the input and weight of one ",
               "dtype and device, got ", a.dtype(), " on ", a.device(), " and ", b.dtype(), " on ", b.device());
  return {a.detach().contiguous(), b.detach().contiguous()};
}

/// Records out = f(a, b), bilinear, as one node: a's gradient is grad_a(g, b) and b's is grad_b(a, g) for the
/// incoming gradient g, each saving only the operand the other's gradient needs.
template <class GradA, class GradB>
void record_bilinear(const char* name, const Tensor& a, const Tensor& b, const Tensor& out, GradA grad_a,
                     GradB grad_b) {
  auto node = autograd::record(name, a, b, out);
  if (!node) return;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // Either gradient alone is one convolution: a split backward computes b's (the weight's) later.
  auto gradients = [saved_a = need_b ? autograd::SavedVariable(a) : autograd::SavedVariable(),
                    saved_b = need_a ? autograd::SavedVariable(b) : autograd::SavedVariable(), need_a, need_b, grad_a,
                    grad_b](const tensor_list& grads, bool want_a, bool want_b) -> tensor_list {
    return {need_a && want_a ? grad_a(grads[0], saved_b.unpack()) : Tensor(),
            need_b && want_b ? grad_b(saved_a.unpack(), grads[0]) : Tensor()};
  };
  node->backward = [gradients](const tensor_list& grads) { return gradients(grads, true, true); };
  node->backward_some = [gradients](const tensor_list& grads, const std::vector<bool>& wanted) {
    return gradients(grads, wanted[0], wanted[1]);
  };
}

/// The convolution of x [N, C, H, W] with weight [O, C / groups, kH, kW] over g, without bias: [N, O, oH, oW].
Tensor convolution(const Tensor& x, const Tensor& weight, const Window& g, int64_t groups, const char* op) {
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0);
  const auto [in, w] = kernel_operands(x, weight, op);
  Tensor out = empty({n, o, g.out[0], g.out[1]}, x.options());
  if (!ops::kernels(in).conv2d(in, w, g, groups, out)) {
    const int64_t depth = c / groups * g.offsets();  // one group's rows of the unfolded input
    Tensor cols = unfold_windows(x, g, 0).reshape({n, groups, depth, g.positions()});
    return matmul(weight.reshape({groups, o / groups, depth}), cols).reshape({n, o, g.out[0], g.out[1]});
  }
  record_bilinear(
      "ConvolutionBackward0", x, weight, out,
      [g, groups, op](const Tensor& dy, const Tensor& w) { return convolution_backward_input(dy, w, g, groups, op); },
      [g, groups, op](const Tensor& x, const Tensor& dy) { return convolution_backward_weight(x, dy, g, groups, op); });
  return out;
}

/// The gradient of convolution(x, weight) with respect to x [N, C, H, W] (H, W from g.in) for grad_out [N, O, oH,
/// oW]: a transposed convolution.
Tensor convolution_backward_input(const Tensor& grad_out, const Tensor& weight, const Window& g, int64_t groups,
                                  const char* op) {
  const int64_t n = grad_out.size(0), o = weight.size(0), c = weight.size(1) * groups;
  const auto [dy, w] = kernel_operands(grad_out, weight, op);
  Tensor grad_in = empty({n, c, g.in[0], g.in[1]}, grad_out.options());
  if (!ops::kernels(dy).conv2d_backward_input(dy, w, g, groups, grad_in)) {
    const int64_t depth = c / groups * g.offsets();
    Tensor w_t = weight.reshape({groups, o / groups, depth}).transpose(1, 2);             // [G, depth, O / G]
    Tensor cols = matmul(w_t, grad_out.reshape({n, groups, o / groups, g.positions()}));  // [N, G, depth, L]
    return fold_windows(cols.reshape({n, c, g.offsets() * g.positions()}), g);
  }
  record_bilinear(
      "ConvolutionBackwardInput", grad_out, weight, grad_in,
      [g, groups, op](const Tensor& gg, const Tensor& w) { return convolution(gg, w, g, groups, op); },
      [g, groups, op](const Tensor& dy, const Tensor& gg) {
        return convolution_backward_weight(gg, dy, g, groups, op);
      });
  return grad_in;
}

/// The gradient of convolution(x, weight) with respect to weight [O, C / groups, kH, kW] for grad_out [N, O, oH,
/// oW].
Tensor convolution_backward_weight(const Tensor& x, const Tensor& grad_out, const Window& g, int64_t groups,
                                   const char* op) {
  const int64_t n = x.size(0), c = x.size(1), o = grad_out.size(1);
  const auto [in, dy] = kernel_operands(x, grad_out, op);
  Tensor grad_w = empty({o, c / groups, g.kernel[0], g.kernel[1]}, x.options());
  if (!ops::kernels(in).conv2d_backward_weight(in, dy, g, groups, grad_w)) {
    const int64_t depth = c / groups * g.offsets();
    Tensor cols = unfold_windows(x, g, 0).reshape({n, groups, depth, g.positions()});
    Tensor per_sample = matmul(grad_out.reshape({n, groups, o / groups, g.positions()}), cols.transpose(-1, -2));
    return sum(per_sample, {0}).reshape(grad_w.sizes());  // [G, O / G, depth] summed over the batch
  }
  record_bilinear(
      "ConvolutionBackwardWeight", x, grad_out, grad_w,
      [g, groups, op](const Tensor& gg, const Tensor& dy) { return convolution_backward_input(dy, gg, g, groups, op); },
      [g, groups, op](const Tensor& x, const Tensor& gg) { return convolution(x, gg, g, groups, op); });
  return grad_w;
}

/// input with a batch dim: [C, H, W] becomes [1, C, H, W]; `dims` is the batched rank the op takes.
Tensor batched(const Tensor& input, int64_t dims, const char* op) {
  STRATA_CHECK(input.dim() == dims || input.dim() == dims - 1, op, ": expected a ", dims - 1, "-D (unbatched) or ",
               dims, "-D (batched) input, got shape ", input.sizes());
  STRATA_CHECK(input.is_floating_point(), op, ": expected a floating point input, got ", input.dtype());
  return input.dim() == dims ? input : input.unsqueeze(0);
}

/// out without the batch dim batched() added.
Tensor unbatched(const Tensor& out, const Tensor& input, int64_t dims) {
  return input.dim() == dims ? out : out.squeeze(0);
}

/// A convolution weight's rank: [out_channels, in_channels / groups, kernel...] with `dims` dims in all.
void check_weight(const Tensor& weight, int64_t dims, const char* op) {
  STRATA_CHECK(weight.dim() == dims, op, ": expected a ", dims, "-D weight [out_channels, in_channels / groups, ",
               dims == 3 ? "kW" : "kH, kW", "], got ", weight.sizes());
}

/// conv2d on a batched input, with the padding before and after each spatial dim given apart ("same").
Tensor conv2d_impl(const Tensor& input, const Tensor& weight, const Tensor& bias, Pair stride, Pair pad, Pair pad_after,
                   Pair dilation, int64_t groups, const char* op) {
  Tensor x = batched(input, 4, op);
  check_weight(weight, 4, op);
  STRATA_CHECK(groups > 0, op, ": groups must be positive, got ", groups);
  const int64_t c = x.size(1), o = weight.size(0);
  STRATA_CHECK(o % groups == 0, op, ": out_channels (", o, ") must be divisible by groups (", groups, ")");
  STRATA_CHECK(c == weight.size(1) * groups, op, ": Given groups=", groups, ", weight of size ", weight.sizes(),
               ", expected input", x.sizes(), " to have ", weight.size(1) * groups, " channels, but got ", c,
               " channels instead");
  STRATA_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == o), op, ": expected a bias of shape [", o,
               "], got ", bias.sizes());
  const Window g =
      conv_window({x.size(2), x.size(3)}, {weight.size(2), weight.size(3)}, stride, dilation, pad, pad_after, op);
  Tensor out = convolution(x, weight, g, groups, op);
  if (bias.defined()) out = out + bias.reshape({1, o, 1, 1});
  return unbatched(out, input, 4);
}

/// The padding before and after each dim of kValid (none) or kSame (the output keeps the input's size;
/// stride 1 only, the odd one out of an even total goes after, as torch).
std::array<Pair, 2> padding_of(PaddingMode padding, Pair kernel, Pair stride, Pair dilation, const char* op) {
  if (std::holds_alternative<enumtype::kValid>(padding)) return {Pair{0, 0}, Pair{0, 0}};
  STRATA_CHECK(stride[0] == 1 && stride[1] == 1, op, ": padding='same' is not supported for strided convolutions");
  Pair before{}, after{};
  for (int d = 0; d < 2; ++d) {
    const int64_t total = dilation[d] * (kernel[d] - 1);
    before[d] = total / 2;
    after[d] = total - before[d];
  }
  return {before, after};
}

/// conv1d as conv2d over a height of 1, its arguments already in 2-D form.
Tensor conv1d_impl(const Tensor& input, const Tensor& weight, const Tensor& bias, Pair stride, Pair pad, Pair pad_after,
                   Pair dilation, int64_t groups) {
  const char* op = "conv1d";
  Tensor x = batched(input, 3, op);
  check_weight(weight, 3, op);
  Tensor out = conv2d_impl(x.unsqueeze(2), weight.unsqueeze(2), bias, stride, pad, pad_after, dilation, groups, op);
  return unbatched(out.squeeze(2), input, 3);
}

/// A 1-D op's arguments in 2-D form: a size-1 height in front of the length.
Pair as_width(IntArrayRef v, int64_t height_value, const char* op, const char* what) {
  STRATA_CHECK(v.size() == 1, op, ": ", what, " must be one value, got ", v);
  return {height_value, v[0]};
}

}  // namespace

// ---- im2col and col2im ----

Tensor im2col(const Tensor& input, IntArrayRef kernel_size, IntArrayRef dilation, IntArrayRef padding,
              IntArrayRef stride) {
  const char* op = "im2col";
  Tensor x = batched(input, 4, op);
  const Pair pad = pair_of(padding, op, "padding");
  const Window g = conv_window({x.size(2), x.size(3)}, pair_of(kernel_size, op, "kernel_size"),
                               pair_of(stride, op, "stride"), pair_of(dilation, op, "dilation"), pad, pad, op);
  Tensor cols = unfold_windows(x, g, 0).reshape({x.size(0), x.size(1) * g.offsets(), g.positions()});
  return input.dim() == 4 ? cols : cols.squeeze(0);
}

Tensor col2im(const Tensor& input, IntArrayRef output_size, IntArrayRef kernel_size, IntArrayRef dilation,
              IntArrayRef padding, IntArrayRef stride) {
  const char* op = "col2im";
  Tensor cols = batched(input, 3, op);
  const Pair pad = pair_of(padding, op, "padding");
  const Window g = conv_window(pair_of(output_size, op, "output_size"), pair_of(kernel_size, op, "kernel_size"),
                               pair_of(stride, op, "stride"), pair_of(dilation, op, "dilation"), pad, pad, op);
  STRATA_CHECK(cols.size(1) % g.offsets() == 0, op, ": expected size of input's dimension 1 to be divisible by the ",
               "product of kernel_size, but got input.size(1)=", cols.size(1), " and kernel_size=(", g.kernel[0], ", ",
               g.kernel[1], ")");
  STRATA_CHECK(cols.size(2) == g.positions(), op, ": given output_size=(", g.in[0], ", ", g.in[1], "), kernel_size=(",
               g.kernel[0], ", ", g.kernel[1], "), dilation, padding and stride, expected ",
               "size of input's dimension 2 to match the calculated number of sliding blocks ", g.out[0], " * ",
               g.out[1], " = ", g.positions(), ", but got input.size(2)=", cols.size(2));
  const int64_t channels = cols.size(1) / g.offsets();
  Tensor out = fold_windows(cols.reshape({cols.size(0), channels, g.offsets() * g.positions()}), g);
  return input.dim() == 3 ? out : out.squeeze(0);
}

// ---- convolution ----

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, IntArrayRef padding,
              IntArrayRef dilation, int64_t groups) {
  if (ops::AutocastArgs cast{"conv2d", {input, weight, bias}})
    return conv2d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  const Pair pad = pair_of(padding, "conv2d", "padding");
  return conv2d_impl(input, weight, bias, pair_of(stride, "conv2d", "stride"), pad, pad,
                     pair_of(dilation, "conv2d", "dilation"), groups, "conv2d");
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, PaddingMode padding,
              IntArrayRef dilation, int64_t groups) {
  if (ops::AutocastArgs cast{"conv2d", {input, weight, bias}})
    return conv2d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  const char* op = "conv2d";
  check_weight(weight, 4, op);
  const Pair s = pair_of(stride, op, "stride"), d = pair_of(dilation, op, "dilation");
  const auto [before, after] = padding_of(padding, {weight.size(2), weight.size(3)}, s, d, op);
  return conv2d_impl(input, weight, bias, s, before, after, d, groups, op);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, IntArrayRef padding,
              IntArrayRef dilation, int64_t groups) {
  if (ops::AutocastArgs cast{"conv1d", {input, weight, bias}})
    return conv1d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  const char* op = "conv1d";
  const Pair pad = as_width(padding, 0, op, "padding");
  return conv1d_impl(input, weight, bias, as_width(stride, 1, op, "stride"), pad, pad,
                     as_width(dilation, 1, op, "dilation"), groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, PaddingMode padding,
              IntArrayRef dilation, int64_t groups) {
  if (ops::AutocastArgs cast{"conv1d", {input, weight, bias}})
    return conv1d(cast[0], cast[1], cast[2], stride, padding, dilation, groups);
  const char* op = "conv1d";
  check_weight(weight, 3, op);
  const Pair s = as_width(stride, 1, op, "stride"), d = as_width(dilation, 1, op, "dilation");
  const auto [before, after] = padding_of(padding, {1, weight.size(2)}, s, d, op);
  return conv1d_impl(input, weight, bias, s, before, after, d, groups);
}

// The transposed convolution is the gradient of conv2d with respect to its input (convolution_backward_input):
// each input position spreads weight-times-value over a window of the output.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride,
                        IntArrayRef padding, IntArrayRef output_padding, int64_t groups, IntArrayRef dilation) {
  if (ops::AutocastArgs cast{"conv_transpose2d", {input, weight, bias}})
    return conv_transpose2d(cast[0], cast[1], cast[2], stride, padding, output_padding, groups, dilation);
  const char* op = "conv_transpose2d";
  Tensor x = batched(input, 4, op);
  STRATA_CHECK(weight.dim() == 4, op, ": expected a 4-D weight [in_channels, out_channels / groups, kH, kW], got ",
               weight.sizes());
  STRATA_CHECK(groups > 0, op, ": groups must be positive, got ", groups);
  const int64_t c = x.size(1), h = x.size(2), w = x.size(3), o = weight.size(1) * groups;
  STRATA_CHECK(c == weight.size(0) && c % groups == 0, op, ": Given transposed=1, weight of size ", weight.sizes(),
               ", expected input", x.sizes(), " to have ", weight.size(0), " channels (divisible by groups=", groups,
               "), but got ", c, " channels instead");
  STRATA_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == o), op, ": expected a bias of shape [", o,
               "], got ", bias.sizes());
  Window g{{weight.size(2), weight.size(3)},
           pair_of(stride, op, "stride"),
           pair_of(dilation, op, "dilation"),
           pair_of(padding, op, "padding"),
           {},
           {h, w}};
  check_window(g, op);
  const Pair extra = pair_of(output_padding, op, "output_padding");
  for (int d = 0; d < 2; ++d) {
    STRATA_CHECK(extra[d] >= 0 && (extra[d] < g.stride[d] || extra[d] < g.dilation[d]), op,
                 ": output padding must be smaller than either stride or dilation, but got output_padding=", extra[d],
                 ", stride=", g.stride[d], " and dilation=", g.dilation[d]);
    g.in[d] = (g.out[d] - 1) * g.stride[d] - 2 * g.pad[d] + g.dilation[d] * (g.kernel[d] - 1) + extra[d] + 1;
    STRATA_CHECK(g.in[d] > 0, op, ": the output's spatial size would be (", g.in[0], ", ", g.in[1], ")");
  }
  Tensor out = convolution_backward_input(x, weight, g, groups, op);
  if (bias.defined()) out = out + bias.reshape({1, o, 1, 1});
  return unbatched(out, input, 4);
}

// ---- pooling ----

namespace {

/// max_pool2d on a batched [N, C, H, W] with its arguments in 2-D form; the flat input index of each maximum
/// only when `with_indices` (otherwise undefined), read from the same window table the values came through.
std::tuple<Tensor, Tensor> max_pool(const Tensor& x, Pair kernel, Pair stride, Pair padding, Pair dilation,
                                    bool ceil_mode, bool with_indices, const char* op) {
  const Window g = pool_window({x.size(2), x.size(3)}, kernel, stride, padding, dilation, ceil_mode, op);
  const int64_t n = x.size(0), c = x.size(1);
  auto [values, offset] = max(unfold_windows(x, g, -std::numeric_limits<double>::infinity()), 2);  // [N, C, L]
  values = values.reshape({n, c, g.out[0], g.out[1]});
  if (!with_indices) return {values, Tensor()};
  Tensor expanded = window_index(g, x.device())
                        .reshape({1, 1, g.offsets(), g.positions()})
                        .expand({n, c, g.offsets(), g.positions()});
  return {values, gather(expanded, 2, offset.unsqueeze(2)).reshape({n, c, g.out[0], g.out[1]})};
}

std::tuple<Tensor, Tensor> max_pool2d_any(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                          IntArrayRef padding, IntArrayRef dilation, bool ceil_mode,
                                          bool with_indices) {
  const char* op = "max_pool2d";
  const Pair kernel = pair_of(kernel_size, op, "kernel_size");
  auto [values, indices] =
      max_pool(batched(input, 4, op), kernel, stride.empty() ? kernel : pair_of(stride, op, "stride"),
               pair_of(padding, op, "padding"), pair_of(dilation, op, "dilation"), ceil_mode, with_indices, op);
  return {unbatched(values, input, 4), with_indices ? unbatched(indices, input, 4) : Tensor()};
}

std::tuple<Tensor, Tensor> max_pool1d_any(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                          IntArrayRef padding, IntArrayRef dilation, bool ceil_mode,
                                          bool with_indices) {
  const char* op = "max_pool1d";
  const Pair kernel = as_width(kernel_size, 1, op, "kernel_size");
  auto [values, indices] =
      max_pool(batched(input, 3, op).unsqueeze(2), kernel, stride.empty() ? kernel : as_width(stride, 1, op, "stride"),
               as_width(padding, 0, op, "padding"), as_width(dilation, 1, op, "dilation"), ceil_mode, with_indices, op);
  return {unbatched(values.squeeze(2), input, 3), with_indices ? unbatched(indices.squeeze(2), input, 3) : Tensor()};
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return max_pool2d_any(input, kernel_size, stride, padding, dilation, ceil_mode, true);
}

Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode) {
  return std::get<0>(max_pool2d_any(input, kernel_size, stride, padding, dilation, ceil_mode, false));
}

std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return max_pool1d_any(input, kernel_size, stride, padding, dilation, ceil_mode, true);
}

Tensor max_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode) {
  return std::get<0>(max_pool1d_any(input, kernel_size, stride, padding, dilation, ceil_mode, false));
}

// Each window's sum over a divisor from the host, as torch: the window clipped to the input and its
// padding (count_include_pad), or to the input alone, or divisor_override.
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  if (ops::AutocastArgs cast{"avg_pool2d", {input}})
    return avg_pool2d(cast[0], kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
  const char* op = "avg_pool2d";
  Tensor x = batched(input, 4, op);
  const Pair kernel = pair_of(kernel_size, op, "kernel_size");
  const Window g = pool_window({x.size(2), x.size(3)}, kernel, stride.empty() ? kernel : pair_of(stride, op, "stride"),
                               pair_of(padding, op, "padding"), {1, 1}, ceil_mode, op);
  STRATA_CHECK(!divisor_override || *divisor_override != 0, op, ": divisor must be not zero");
  std::vector<double> divisors(static_cast<size_t>(g.positions()));
  for (int64_t oy = 0, i = 0; oy < g.out[0]; ++oy)
    for (int64_t ox = 0; ox < g.out[1]; ++ox, ++i) {
      Pair lo{}, hi{};
      const Pair at{oy, ox};
      for (int d = 0; d < 2; ++d) {
        lo[d] = at[d] * g.stride[d] - g.pad[d];
        hi[d] = std::min(lo[d] + g.kernel[d], g.in[d] + g.pad[d]);
      }
      const int64_t with_pad = (hi[0] - lo[0]) * (hi[1] - lo[1]);
      for (int d = 0; d < 2; ++d) {
        lo[d] = std::max<int64_t>(lo[d], 0);
        hi[d] = std::min(hi[d], g.in[d]);
      }
      const int64_t inside = (hi[0] - lo[0]) * (hi[1] - lo[1]);
      divisors[static_cast<size_t>(i)] = static_cast<double>(divisor_override    ? *divisor_override
                                                             : count_include_pad ? with_pad
                                                                                 : inside);
    }
  const int64_t n = x.size(0), c = x.size(1);
  Tensor sums = sum(unfold_windows(x, g, 0), {2});  // [N, C, L]
  Tensor out = sums / tensor(divisors, TensorOptions(x.dtype()).device(x.device()));
  return unbatched(out.reshape({n, c, g.out[0], g.out[1]}), input, 4);
}

// Windows of varying size (start floor(i * in / out), end ceil((i + 1) * in / out)) as two averaging
// matrices: out = P_h @ x @ P_w^T, exact and differentiable.
Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size) {
  if (ops::AutocastArgs cast{"adaptive_avg_pool2d", {input}}) return adaptive_avg_pool2d(cast[0], output_size);
  const char* op = "adaptive_avg_pool2d";
  Tensor x = batched(input, 4, op);
  const Pair out = pair_of(output_size, op, "output_size");
  Tensor p[2];
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x.size(2 + d);
    STRATA_CHECK(out[d] > 0, op, ": output_size must be positive, got (", out[0], ", ", out[1], ")");
    STRATA_CHECK(in > 0, op, ": expected non-empty spatial dims, got input of shape ", input.sizes());
    std::vector<double> m(static_cast<size_t>(out[d] * in), 0.0);
    for (int64_t i = 0; i < out[d]; ++i) {
      const int64_t start = i * in / out[d], end = ((i + 1) * in + out[d] - 1) / out[d];
      for (int64_t j = start; j < end; ++j) m[static_cast<size_t>(i * in + j)] = 1.0 / static_cast<double>(end - start);
    }
    p[d] = tensor(m, TensorOptions(x.dtype()).device(x.device())).reshape({out[d], in});
  }
  return unbatched(matmul(matmul(p[0], x), p[1].t()), input, 4);
}

// ---- feature dropout ----

Tensor feature_dropout(const Tensor& input, double p, bool train, Generator* gen) {
  STRATA_CHECK(input.dim() >= 2, "feature_dropout: expected an input [N, C, ...], got shape ", input.sizes());
  if (!train || p == 0) return dropout(input, p, train, gen);
  // One draw per (batch, channel): a dropout mask of ones [N, C, 1, ...], broadcast over the rest.
  DimVector mask_sizes(input.sizes());
  for (int64_t d = 2; d < input.dim(); ++d) mask_sizes[d] = 1;
  return input * dropout(ones(mask_sizes, input.options()), p, train, gen);
}

}  // namespace strata
