// CPU kernels: the fused recurrent cells, LSTM's and GRU's pointwise steps and their gradients. Each batch
// row is a few Eigen array expressions over its H-wide gate segments, so sigmoid and tanh use Eigen's SIMD
// implementations; rows are split over OpenMP threads when a step is large enough. The backwards recompute
// the gates from the saved pre-activations instead of reading a saved copy of them.

#include "strata/tensor/cpu/eigen.h"

#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"
#include "strata/tensor/iteration.h"

namespace strata::cpu {

void CpuKernels::lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx, const Tensor& hy,
                           const Tensor& cy) const {
  const int64_t H = check_rnn_cell_operands("lstm_cell", 4, {&input_gates, &hidden_gates}, {&cx, &hy, &cy});
  if (in_float32(*this, {&input_gates, &hidden_gates, &cx}, {&hy, &cy},
                 [&](const tensor_list& t) { lstm_cell(t[0], t[1], t[2], t[3], t[4]); }))
    return;
  visit_floating("lstm_cell", cx.dtype(), [&]<class T>() {
    const T *ig = input_gates.data_ptr<T>(), *hg = hidden_gates.data_ptr<T>(), *c0 = cx.data_ptr<T>();
    T *h1 = hy.data_ptr<T>(), *c1 = cy.data_ptr<T>();
    for_rows(cx.size(0), input_gates.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        auto gate = [&](int k) {
          return ConstArrayMap<T>(ig + (4 * b + k) * H, H) + ConstArrayMap<T>(hg + (4 * b + k) * H, H);
        };
        ArrayMap<T> c(c1 + b * H, H);
        c = gate(1).logistic() * ConstArrayMap<T>(c0 + b * H, H) + gate(0).logistic() * gate(2).tanh();
        ArrayMap<T>(h1 + b * H, H) = gate(3).logistic() * c.tanh();
      }
    });
  });
}

// With i, f, g, o the activated gates, c = f cx + i g and tc = tanh(c):
//   dc = grad_cy + grad_hy o (1 - tc^2)
//   d(i, f, g, o) = (dc g i (1 - i), dc cx f (1 - f), dc i (1 - g^2), grad_hy tc o (1 - o)),  grad_cx = dc f
void CpuKernels::lstm_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                                    const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& grad_gates,
                                    const Tensor& grad_cx) const {
  const int64_t H = check_rnn_cell_operands("lstm_cell_backward", 4, {&input_gates, &hidden_gates, &grad_gates},
                                            {&cx, &grad_hy, &grad_cy, &grad_cx});
  if (in_float32(*this, {&input_gates, &hidden_gates, &cx, &grad_hy, &grad_cy}, {&grad_gates, &grad_cx},
                 [&](const tensor_list& t) { lstm_cell_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6]); }))
    return;
  visit_floating("lstm_cell_backward", cx.dtype(), [&]<class T>() {
    const T *ig = input_gates.data_ptr<T>(), *hg = hidden_gates.data_ptr<T>(), *c0 = cx.data_ptr<T>();
    const T *gh = grad_hy.data_ptr<T>(), *gc = grad_cy.data_ptr<T>();
    T *dgates = grad_gates.data_ptr<T>(), *dcx = grad_cx.data_ptr<T>();
    for_rows(cx.size(0), input_gates.numel(), [&](int64_t begin, int64_t end) {
      Scratch<T> scratch(6 * H);
      auto i = scratch.segment(0, H), f = scratch.segment(H, H), g = scratch.segment(2 * H, H);
      auto o = scratch.segment(3 * H, H), tc = scratch.segment(4 * H, H), dc = scratch.segment(5 * H, H);
      for (int64_t b = begin; b < end; ++b) {
        auto gate = [&](int k) {
          return ConstArrayMap<T>(ig + (4 * b + k) * H, H) + ConstArrayMap<T>(hg + (4 * b + k) * H, H);
        };
        const ConstArrayMap<T> c_prev(c0 + b * H, H), dh(gh + b * H, H);
        i = gate(0).logistic();
        f = gate(1).logistic();
        g = gate(2).tanh();
        o = gate(3).logistic();
        tc = (f * c_prev + i * g).tanh();
        dc = ConstArrayMap<T>(gc + b * H, H) + dh * o * (T(1) - tc.square());
        T* d = dgates + 4 * b * H;
        ArrayMap<T>(d, H) = dc * g * i * (T(1) - i);
        ArrayMap<T>(d + H, H) = dc * c_prev * f * (T(1) - f);
        ArrayMap<T>(d + 2 * H, H) = dc * i * (T(1) - g.square());
        ArrayMap<T>(d + 3 * H, H) = dh * tc * o * (T(1) - o);
        ArrayMap<T>(dcx + b * H, H) = dc * f;
      }
    });
  });
}

void CpuKernels::gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                          const Tensor& hy) const {
  const int64_t H = check_rnn_cell_operands("gru_cell", 3, {&input_gates, &hidden_gates}, {&hx, &hy});
  if (in_float32(*this, {&input_gates, &hidden_gates, &hx}, {&hy},
                 [&](const tensor_list& t) { gru_cell(t[0], t[1], t[2], t[3]); }))
    return;
  visit_floating("gru_cell", hx.dtype(), [&]<class T>() {
    const T *ig = input_gates.data_ptr<T>(), *hg = hidden_gates.data_ptr<T>(), *h0 = hx.data_ptr<T>();
    T* h1 = hy.data_ptr<T>();
    for_rows(hx.size(0), input_gates.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        auto in = [&](int k) { return ConstArrayMap<T>(ig + (3 * b + k) * H, H); };
        auto hidden = [&](int k) { return ConstArrayMap<T>(hg + (3 * b + k) * H, H); };
        ArrayMap<T> h(h1 + b * H, H);
        h = (in(2) + (in(0) + hidden(0)).logistic() * hidden(2)).tanh();  // n
        h += (in(1) + hidden(1)).logistic() * (ConstArrayMap<T>(h0 + b * H, H) - h);
      }
    });
  });
}

// With r, z the activated gates and n = tanh(i_n + r h_n):
//   dn = grad_hy (1 - z) (1 - n^2),  dz = grad_hy (hx - n) z (1 - z),  dr = dn h_n r (1 - r)
//   grad_input_gates = (dr, dz, dn), grad_hidden_gates = (dr, dz, dn r), grad_hx = grad_hy z
void CpuKernels::gru_cell_backward(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                   const Tensor& grad_hy, const Tensor& grad_input_gates,
                                   const Tensor& grad_hidden_gates, const Tensor& grad_hx) const {
  const int64_t H = check_rnn_cell_operands("gru_cell_backward", 3,
                                            {&input_gates, &hidden_gates, &grad_input_gates, &grad_hidden_gates},
                                            {&hx, &grad_hy, &grad_hx});
  if (in_float32(*this, {&input_gates, &hidden_gates, &hx, &grad_hy}, {&grad_input_gates, &grad_hidden_gates, &grad_hx},
                 [&](const tensor_list& t) { gru_cell_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6]); }))
    return;
  visit_floating("gru_cell_backward", hx.dtype(), [&]<class T>() {
    const T *ig = input_gates.data_ptr<T>(), *hg = hidden_gates.data_ptr<T>(), *h0 = hx.data_ptr<T>(),
            *gh = grad_hy.data_ptr<T>();
    T *dig = grad_input_gates.data_ptr<T>(), *dhg = grad_hidden_gates.data_ptr<T>();
    T* dhx = grad_hx.data_ptr<T>();
    for_rows(hx.size(0), input_gates.numel(), [&](int64_t begin, int64_t end) {
      Scratch<T> scratch(3 * H);
      auto r = scratch.segment(0, H), z = scratch.segment(H, H), n = scratch.segment(2 * H, H);
      for (int64_t b = begin; b < end; ++b) {
        auto in = [&](int k) { return ConstArrayMap<T>(ig + (3 * b + k) * H, H); };
        auto hidden = [&](int k) { return ConstArrayMap<T>(hg + (3 * b + k) * H, H); };
        const ConstArrayMap<T> dh(gh + b * H, H);
        r = (in(0) + hidden(0)).logistic();
        z = (in(1) + hidden(1)).logistic();
        n = (in(2) + r * hidden(2)).tanh();
        T *di = dig + 3 * b * H, *dhid = dhg + 3 * b * H;
        ArrayMap<T> dn(di + 2 * H, H);
        dn = dh * (T(1) - z) * (T(1) - n.square());
        ArrayMap<T>(di, H) = dn * hidden(2) * r * (T(1) - r);
        ArrayMap<T>(di + H, H) = dh * (ConstArrayMap<T>(h0 + b * H, H) - n) * z * (T(1) - z);
        ArrayMap<T>(dhid, 2 * H) = ArrayMap<T>(di, 2 * H);
        ArrayMap<T>(dhid + 2 * H, H) = dn * r;
        ArrayMap<T>(dhx + b * H, H) = dh * z;
      }
    });
  });
}

}  // namespace strata::cpu
