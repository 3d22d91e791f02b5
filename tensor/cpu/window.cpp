// CPU kernels: im2col and col2im, the window reads behind convolution and pooling. Each (n, c)
// plane is independent, so threads split the planes; within a plane a kernel offset's window row
// reads (or adds into) one input row at a fixed stride between two bounds computed once, so the
// inner loops carry no padding test.

#include <algorithm>
#include <type_traits>
#include <utility>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

/// The window positions [lo, hi) of one dim whose input index o * stride + shift lies in [0, size).
std::pair<int64_t, int64_t> inside(int64_t shift, int64_t stride, int64_t size, int64_t positions) {
  const int64_t lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  const int64_t hi = size - 1 - shift < 0 ? 0 : (size - 1 - shift) / stride + 1;
  return {std::min(lo, positions), std::clamp(hi, std::min(lo, positions), positions)};
}

/// Calls row(at, start, shift, lo, hi) for each (kernel offset, window row) of one plane: at is the window row's
/// offset in the plane's columns, start the offset of the input row it reads (-1 over the padding), and
/// positions x in [lo, hi) of the row read input element start + shift + x * stride; the others are padding.
template <class F>
void for_each_window_row(const Window2d& g, const F& row) {
  for (int64_t ky = 0; ky < g.kernel[0]; ++ky)
    for (int64_t kx = 0; kx < g.kernel[1]; ++kx) {
      const int64_t shift_x = kx * g.dilation[1] - g.pad[1];
      const auto [lo, hi] = inside(shift_x, g.stride[1], g.in[1], g.out[1]);
      for (int64_t oy = 0; oy < g.out[0]; ++oy) {
        const int64_t iy = oy * g.stride[0] - g.pad[0] + ky * g.dilation[0];
        const int64_t at = ((ky * g.kernel[1] + kx) * g.out[0] + oy) * g.out[1];
        row(at, iy >= 0 && iy < g.in[0] ? iy * g.in[1] : -1, shift_x, lo, hi);
      }
    }
}

}  // namespace

void CpuKernels::im2col(const Tensor& in, const Window2d& g, double pad_value, const Tensor& cols) const {
  check_window_operands("im2col", in, g, cols);
  if (in_float32(*this, {&in}, {&cols}, [&](const tensor_list& t) { im2col(t[0], g, pad_value, t[1]); })) return;
  const int64_t planes = in.size(0) * in.size(1), plane = g.in[0] * g.in[1], span = g.offsets() * g.positions();
  visit_dtype(in.dtype(), [&]<class T>() {
    T pad;
    if constexpr (std::is_floating_point_v<T>)
      pad = static_cast<T>(pad_value);
    else
      pad = integer_pad<T>(pad_value);
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(cols.data_ptr());
    const int64_t stride = g.stride[1], width = g.out[1];
    parallel_for(planes, use_threads(cols.numel()), [&](int64_t p) {
      const T* image = src + p * plane;
      T* out = dst + p * span;
      for_each_window_row(g, [&](int64_t at, int64_t row, int64_t shift, int64_t lo, int64_t hi) {
        T* o = out + at;
        if (row < 0) return std::fill(o, o + width, pad);
        const int64_t base = row + shift;  // input index of position x: base + x * stride
        std::fill(o, o + lo, pad);
        if (stride == 1) {
          std::copy(image + base + lo, image + base + hi, o + lo);
        } else {
          for (int64_t x = lo; x < hi; ++x) o[x] = image[base + x * stride];
        }
        std::fill(o + hi, o + width, pad);
      });
    });
  });
}

void CpuKernels::col2im(const Tensor& cols, const Window2d& g, const Tensor& out) const {
  check_window_operands("col2im", out, g, cols);
  STRATA_CHECK(out.dtype() != kBool, "col2im does not support ", out.dtype());
  if (in_float32(*this, {&cols}, {&out}, [&](const tensor_list& t) { col2im(t[0], g, t[1]); })) return;
  const int64_t planes = out.size(0) * out.size(1), plane = g.in[0] * g.in[1], span = g.offsets() * g.positions();
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      const T* src = static_cast<const T*>(cols.data_ptr());
      T* dst = static_cast<T*>(out.data_ptr());
      const int64_t stride = g.stride[1];
      // Planes are disjoint, so threads never add into one element; within a plane the adds run in a fixed order.
      parallel_for(planes, use_threads(cols.numel()), [&](int64_t p) {
        T* image = dst + p * plane;
        const T* in = src + p * span;
        std::fill(image, image + plane, static_cast<T>(0));
        for_each_window_row(g, [&](int64_t at, int64_t row, int64_t shift, int64_t lo, int64_t hi) {
          if (row < 0) return;
          const int64_t base = row + shift;
          const T* c = in + at;
          for (int64_t x = lo; x < hi; ++x) image[base + x * stride] += c[x];
        });
      });
    }
  });
}

}  // namespace strata::cpu
