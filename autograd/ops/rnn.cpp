// Recurrent ops: LSTM's and GRU's fused pointwise steps, each forward beside its backward; ATen's functional
// cells over them (lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell); and ATen's whole stacks (lstm, gru,
// rnn_tanh, rnn_relu), which nn::LSTM, nn::GRU and nn::RNN run.
//
// Note [fused cells]: an LSTM step written as ops is a dozen nodes and kernels forward (chunk, three
// sigmoids, two tanhs, the products) and about twenty backward; fused_lstm_cell is one node and one kernel
// each way, and saves only its three inputs (the backward kernel recomputes the gates, cheaper than keeping a
// [B, 4H] copy of them). On the LSTM step of benchmarks/bench_strata.cpp (2 layers, hidden 256, seq 64, batch
// 32, one thread) it took the forward from 58 to 42 ms and the training step from 190 to 173 ms. A backward
// that builds a graph (create_graph) writes the same closed-form derivatives in differentiable ops instead, so
// both cells are twice differentiable, as gelu is.

#include "strata/autograd/ops/common.h"

namespace strata {

using autograd::SavedVariable;

namespace {

/// Checks a fused cell's operands: state [B, H], input_gates and hidden_gates [B, gates * H], one floating dtype,
/// one device.
void check_cell_operands(const char* op, int64_t gates, const Tensor& input_gates, const Tensor& hidden_gates,
                         const Tensor& state) {
  STRATA_CHECK(input_gates.defined() && hidden_gates.defined() && state.defined(), op,
               ": expected defined input_gates, hidden_gates and state");
  STRATA_CHECK(state.dim() == 2, op, ": expected a state of shape [batch, hidden_size], got ", state.sizes());
  const DimVector gate_shape{state.size(0), gates * state.size(1)};
  STRATA_CHECK(input_gates.sizes() == IntArrayRef(gate_shape) && hidden_gates.sizes() == IntArrayRef(gate_shape), op,
               ": expected input_gates and hidden_gates of shape ", IntArrayRef(gate_shape), " for a state of shape ",
               state.sizes(), ", got ", input_gates.sizes(), " and ", hidden_gates.sizes());
  STRATA_CHECK(
      state.is_floating_point() && input_gates.dtype() == state.dtype() && hidden_gates.dtype() == state.dtype(), op,
      ": expected floating operands of one dtype, got ", input_gates.dtype(), ", ", hidden_gates.dtype(), " and ",
      state.dtype());
  STRATA_CHECK(input_gates.device() == state.device() && hidden_gates.device() == state.device(), op,
               ": expected every operand on one device, got ", input_gates.device(), ", ", hidden_gates.device(),
               " and ", state.device());
}

/// t without history and contiguous, for a kernel operand.
Tensor dense(const Tensor& t) {
  NoGradGuard no_grad;
  return t.contiguous();
}

/// g, or zeros like `like` where the output received no gradient.
Tensor or_zeros(const Tensor& g, const Tensor& like) { return g.defined() ? g : zeros_like(like); }

}  // namespace

// With i, f, g, o the activated gates, c' = f cx + i g, tc = tanh(c') and dc = grad_c' + grad_h' o (1 - tc^2):
// d(i, f, g, o) = (dc g i (1 - i), dc cx f (1 - f), dc i (1 - g^2), grad_h' tc o (1 - o)), grad_cx = dc f; both
// gate operands get d(i, f, g, o).
std::tuple<Tensor, Tensor> fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx) {
  check_cell_operands("fused_lstm_cell", 4, input_gates, hidden_gates, cx);
  Tensor hy = empty_like(cx), cy = empty_like(cx);
  ops::kernels(cx).lstm_cell(dense(input_gates), dense(hidden_gates), dense(cx), hy, cy);
  if (auto node = autograd::record("FusedLstmCellBackward", {input_gates, hidden_gates, cx}, {hy, cy}))
    node->backward = [ig = SavedVariable(input_gates), hg = SavedVariable(hidden_gates),
                      c = SavedVariable(cx)](const tensor_list& grads) -> tensor_list {
      const Tensor input = ig.unpack(), hidden = hg.unpack(), cxv = c.unpack();
      const Tensor grad_hy = or_zeros(grads[0], cxv), grad_cy = or_zeros(grads[1], cxv);
      if (GradMode::is_enabled()) {
        const tensor_list gates = chunk(input + hidden, 4, 1);
        const Tensor i = sigmoid(gates[0]), f = sigmoid(gates[1]), g = tanh(gates[2]), o = sigmoid(gates[3]);
        const Tensor tc = tanh(f * cxv + i * g);
        const Tensor dc = grad_cy + grad_hy * o * (1.0 - tc * tc);
        const Tensor grad_gates = cat(
            {dc * g * i * (1.0 - i), dc * cxv * f * (1.0 - f), dc * i * (1.0 - g * g), grad_hy * tc * o * (1.0 - o)},
            1);
        return {grad_gates, grad_gates, dc * f};
      }
      Tensor grad_gates = empty_like(input), grad_cx = empty_like(cxv);
      ops::kernels(cxv).lstm_cell_backward(dense(input), dense(hidden), dense(cxv), dense(grad_hy), dense(grad_cy),
                                           grad_gates, grad_cx);
      return {grad_gates, grad_gates, grad_cx};
    };
  return {hy, cy};
}

// With r, z the activated gates, h_n the hidden n gate and n = tanh(i_n + r h_n):
// dn = grad_h' (1 - z) (1 - n^2), dz = grad_h' (hx - n) z (1 - z), dr = dn h_n r (1 - r);
// grad_input_gates = (dr, dz, dn), grad_hidden_gates = (dr, dz, dn r), grad_hx = grad_h' z.
Tensor fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx) {
  check_cell_operands("fused_gru_cell", 3, input_gates, hidden_gates, hx);
  Tensor hy = empty_like(hx);
  ops::kernels(hx).gru_cell(dense(input_gates), dense(hidden_gates), dense(hx), hy);
  if (auto node = autograd::record("FusedGruCellBackward", {input_gates, hidden_gates, hx}, {hy}))
    node->backward = [ig = SavedVariable(input_gates), hg = SavedVariable(hidden_gates),
                      h = SavedVariable(hx)](const tensor_list& grads) -> tensor_list {
      const Tensor input = ig.unpack(), hidden = hg.unpack(), hxv = h.unpack();
      if (GradMode::is_enabled()) {
        const tensor_list in = chunk(input, 3, 1), hid = chunk(hidden, 3, 1);
        const Tensor r = sigmoid(in[0] + hid[0]), z = sigmoid(in[1] + hid[1]), n = tanh(in[2] + r * hid[2]);
        const Tensor dn = grads[0] * (1.0 - z) * (1.0 - n * n);
        const Tensor dr = dn * hid[2] * r * (1.0 - r), dz = grads[0] * (hxv - n) * z * (1.0 - z);
        return {cat({dr, dz, dn}, 1), cat({dr, dz, dn * r}, 1), grads[0] * z};
      }
      Tensor grad_input = empty_like(input), grad_hidden = empty_like(hidden), grad_hx = empty_like(hxv);
      ops::kernels(hxv).gru_cell_backward(dense(input), dense(hidden), dense(hxv), dense(grads[0]), grad_input,
                                          grad_hidden, grad_hx);
      return {grad_input, grad_hidden, grad_hx};
    };
  return hy;
}

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const tensor_list& hx, const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih, const Tensor& b_hh) {
  STRATA_CHECK(hx.size() == 2, "lstm_cell: expected hx = {h, c}, got ", hx.size(), " tensors");
  if (ops::AutocastArgs cast{"lstm_cell", {input, hx[0], hx[1], w_ih, w_hh, b_ih, b_hh}})
    return lstm_cell(cast[0], {cast[1], cast[2]}, cast[3], cast[4], cast[5], cast[6]);
  return fused_lstm_cell(linear(input, w_ih, b_ih), linear(hx[0], w_hh, b_hh), hx[1]);
}

Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh) {
  if (ops::AutocastArgs cast{"gru_cell", {input, hx, w_ih, w_hh, b_ih, b_hh}})
    return gru_cell(cast[0], cast[1], cast[2], cast[3], cast[4], cast[5]);
  return fused_gru_cell(linear(input, w_ih, b_ih), linear(hx, w_hh, b_hh), hx);
}

Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  if (ops::AutocastArgs cast{"rnn_tanh_cell", {input, hx, w_ih, w_hh, b_ih, b_hh}})
    return rnn_tanh_cell(cast[0], cast[1], cast[2], cast[3], cast[4], cast[5]);
  return tanh(linear(input, w_ih, b_ih) + linear(hx, w_hh, b_hh));
}

Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  if (ops::AutocastArgs cast{"rnn_relu_cell", {input, hx, w_ih, w_hh, b_ih, b_hh}})
    return rnn_relu_cell(cast[0], cast[1], cast[2], cast[3], cast[4], cast[5]);
  return relu(linear(input, w_ih, b_ih) + linear(hx, w_hh, b_hh));
}

// ---- stacks ----

namespace {

enum class Cell { RnnTanh, RnnRelu, Lstm, Gru };

/// One layer direction's parameters; the biases and w_hr may be undefined.
struct LayerParams {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;
};

// Note [recurrent weight gradient]: w_hh is used once per step, so as plain ops its gradient would be a
// [gates * H, H] product with inner size batch at every step, summed one step at a time: on the LSTM step of
// benchmarks/bench_strata.cpp about 50 of 173 ms. Where a step's hidden gates get the same gradient as its input
// gates (RNN and LSTM, whose cells see only their sum), that gradient already arrives whole, for every step at
// once, at the input projection (Note [input projections]). So each step's product is recurrent_mm, which hands
// only h its gradient, and the projection passes through with_recurrent_weight_grad, whose backward gives w_hh
// g^T @ [the h each step read]: one product with inner size seq * batch. The states are saved as the recurrence
// makes them (after the node was recorded); those made inside it are saved as outputs are (Note [saved outputs]),
// without a reference back into the graph. Under create_graph both backwards are ops on w_hh and on the states
// with their history, so second derivatives stay right. GRU's hidden n gate gets r times the input n gate's
// gradient, so GRU keeps one product per step.

/// The h that each step's hidden product read, by step, filled while the recurrence runs.
using RecurrentStates = std::vector<SavedVariable>;

/// h @ w^T whose backward hands h its gradient g @ w and w none (with_recurrent_weight_grad gives w its gradient).
Tensor recurrent_mm(const Tensor& h, const Tensor& w) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mm(h, w.t());
  }
  if (auto node = autograd::record("RecurrentMmBackward", h, out))
    node->backward = [w = SavedVariable(w)](const tensor_list& g) -> tensor_list { return {mm(g[0], w.unpack())}; };
  return out;
}

/// projected itself, whose backward also gives w_hh its gradient over every step: g^T @ the states, stacked.
Tensor with_recurrent_weight_grad(const Tensor& projected, const Tensor& w_hh,
                                  const std::shared_ptr<RecurrentStates>& states) {
  Tensor out = make_view(projected, projected.sizes(), projected.strides(), projected.storage_offset());
  if (auto node = autograd::record("RecurrentWeightBackward", projected, w_hh, out))
    node->backward = [states, need_w = w_hh.requires_grad()](const tensor_list& g) -> tensor_list {
      if (!need_w) return {g[0], Tensor()};
      tensor_list h;
      h.reserve(states->size());
      for (const SavedVariable& s : *states) h.push_back(s.unpack());
      return {g[0], mm(g[0].t(), cat(h, 0))};
    };
  return out;
}

// Note [input projections]: a layer's input is known for every step before its recurrence starts, so the
// projections x_t W_ih^T + b of all steps are one [seq * batch, features] x [features, gates * hidden] matmul,
// and each step adds only h_{t-1} W_hh^T (libtorch's CPU path does the same). b holds both biases for RNN and
// LSTM, whose cells see only their sum; GRU keeps b_hh in the step, since r scales the n gate's W_hn h + b_hn.
// The steps are views of the projection from one split node, whose backward concatenates their gradients once.

/// One direction of one layer over x [seq, batch, features] from h [batch, h features] (and LSTM's c): the output
/// [seq, batch, h features] and the last step's states.
std::tuple<Tensor, Tensor, Tensor> run_direction(Cell cell, const Tensor& x, Tensor h, Tensor c, const LayerParams& w,
                                                 bool reverse) {
  const int64_t seq = x.size(0), batch = x.size(1);
  Tensor projected = matmul(x, w.w_ih.t());
  if (w.b_ih.defined()) projected = projected + (cell == Cell::Gru ? w.b_ih : w.b_ih + w.b_hh);
  projected = projected.reshape({seq * batch, projected.size(2)});
  const bool whole_weight_grad = cell != Cell::Gru;  // Note [recurrent weight gradient]
  auto states = std::make_shared<RecurrentStates>(whole_weight_grad ? seq : 0);
  if (whole_weight_grad) projected = with_recurrent_weight_grad(projected, w.w_hh, states);
  const tensor_list steps = split(projected, batch, 0);
  const Tensor w_hh_t = whole_weight_grad ? Tensor() : w.w_hh.t(), w_hr_t = w.w_hr.defined() ? w.w_hr.t() : Tensor();
  tensor_list outputs(seq);
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t t = reverse ? seq - 1 - i : i;
    if (whole_weight_grad) (*states)[t] = SavedVariable(h, /*is_output=*/i > 0);
    const Tensor hidden = whole_weight_grad ? recurrent_mm(h, w.w_hh) : mm(h, w_hh_t);
    switch (cell) {
      case Cell::RnnTanh:
        h = tanh(steps[t] + hidden);
        break;
      case Cell::RnnRelu:
        h = relu(steps[t] + hidden);
        break;
      case Cell::Lstm: {
        auto [hy, cy] = fused_lstm_cell(steps[t], hidden, c);
        c = cy;
        h = w_hr_t.defined() ? mm(hy, w_hr_t) : hy;
        break;
      }
      case Cell::Gru:
        h = fused_gru_cell(steps[t], w.b_hh.defined() ? hidden + w.b_hh : hidden, h);
        break;
    }
    outputs[t] = h;
  }
  return {cat(outputs, 0).view({seq, batch, h.size(1)}), h, c};
}

/// The stack over input [seq, batch, features] (batch_first: [batch, seq, features]) from h0 (and LSTM's c0)
/// [layers * directions, batch, features]: output, h_n and (LSTM) c_n.
std::tuple<Tensor, Tensor, Tensor> run_stack(const char* op, Cell cell, const Tensor& input, const Tensor& h0,
                                             const Tensor& c0, const tensor_list& params, bool has_biases,
                                             int64_t num_layers, double dropout_p, bool train, bool bidirectional,
                                             bool batch_first) {
  tensor_list operands{input, h0, c0};
  operands.insert(operands.end(), params.begin(), params.end());
  if (ops::AutocastArgs cast{op, operands}) {
    const tensor_list& all = cast.operands();
    return run_stack(op, cell, all[0], all[1], all[2], tensor_list(all.begin() + 3, all.end()), has_biases, num_layers,
                     dropout_p, train, bidirectional, batch_first);
  }
  STRATA_CHECK(input.dim() == 3, op, ": expected input of 3 dims ",
               batch_first ? "[batch, seq_len, input_size]" : "[seq_len, batch, input_size]", ", got shape ",
               input.sizes());
  STRATA_CHECK(num_layers > 0, op, ": num_layers must be greater than zero, got ", num_layers);
  const int64_t directions = bidirectional ? 2 : 1, stacks = num_layers * directions;
  const int64_t plain = has_biases ? 4 : 2,
                per_layer = params.size() == size_t(stacks * (plain + 1)) ? plain + 1 : plain;
  STRATA_CHECK(params.size() == size_t(stacks * per_layer) && (per_layer == plain || cell == Cell::Lstm), op,
               ": expected ", stacks * plain, " parameters (w_ih, w_hh", has_biases ? ", b_ih, b_hh" : "",
               " for each of ", num_layers, " layers and ", directions, " directions",
               cell == Cell::Lstm ? "; with projections w_hr after each" : "", "), got ", params.size());
  const Tensor x = batch_first ? input.transpose(0, 1).contiguous() : input;  // one projection matmul per layer
  const int64_t batch = x.size(1);
  auto check_state = [&](const Tensor& state, const char* what, int64_t features) {
    STRATA_CHECK(state.dim() == 3 && state.size(0) == stacks && state.size(1) == batch && state.size(2) == features, op,
                 ": expected ", what, " of shape [", stacks, ", ", batch, ", ", features, "], got ", state.sizes());
  };
  std::vector<LayerParams> layers(stacks);
  for (int64_t k = 0; k < stacks; ++k) {
    const Tensor* p = params.data() + k * per_layer;
    layers[k] = {p[0], p[1], has_biases ? p[2] : Tensor(), has_biases ? p[3] : Tensor(),
                 per_layer > plain ? p[per_layer - 1] : Tensor()};
  }
  check_state(h0, "h_0", layers[0].w_hh.size(1));
  if (cell == Cell::Lstm) check_state(c0, "c_0", layers[0].w_hh.size(0) / 4);

  tensor_list h_n, c_n;
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    tensor_list outputs;
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t k = layer * directions + direction;
      auto [output, h, c] = run_direction(cell, layer_input, h0.select(0, k), c0.defined() ? c0.select(0, k) : Tensor(),
                                          layers[k], direction == 1);
      outputs.push_back(output);
      h_n.push_back(h);
      c_n.push_back(c);
    }
    layer_input = directions == 1 ? outputs[0] : cat(outputs, 2);
    if (layer + 1 < num_layers && dropout_p > 0 && train) layer_input = dropout(layer_input, dropout_p, true);
  }
  return {batch_first ? layer_input.transpose(0, 1) : layer_input, stack(h_n),
          cell == Cell::Lstm ? stack(c_n) : Tensor()};
}

/// run_stack of a cell without a cell state (RNN, GRU): output and h_n.
std::tuple<Tensor, Tensor> state_free_stack(const char* op, Cell cell, const Tensor& input, const Tensor& hx,
                                            const tensor_list& params, bool has_biases, int64_t num_layers,
                                            double dropout_p, bool train, bool bidirectional, bool batch_first) {
  auto [output, h_n, c_n] =
      run_stack(op, cell, input, hx, {}, params, has_biases, num_layers, dropout_p, train, bidirectional, batch_first);
  return {output, h_n};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const tensor_list& hx, const tensor_list& params,
                                        bool has_biases, int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first) {
  STRATA_CHECK(hx.size() == 2, "lstm: expected hx = {h_0, c_0}, got ", hx.size(), " tensors");
  return run_stack("lstm", Cell::Lstm, input, hx[0], hx[1], params, has_biases, num_layers, dropout, train,
                   bidirectional, batch_first);
}

std::tuple<Tensor, Tensor> gru(const Tensor& input, const Tensor& hx, const tensor_list& params, bool has_biases,
                               int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first) {
  return state_free_stack("gru", Cell::Gru, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                          batch_first);
}

std::tuple<Tensor, Tensor> rnn_tanh(const Tensor& input, const Tensor& hx, const tensor_list& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train, bool bidirectional,
                                    bool batch_first) {
  return state_free_stack("rnn_tanh", Cell::RnnTanh, input, hx, params, has_biases, num_layers, dropout, train,
                          bidirectional, batch_first);
}

std::tuple<Tensor, Tensor> rnn_relu(const Tensor& input, const Tensor& hx, const tensor_list& params, bool has_biases,
                                    int64_t num_layers, double dropout, bool train, bool bidirectional,
                                    bool batch_first) {
  return state_free_stack("rnn_relu", Cell::RnnRelu, input, hx, params, has_biases, num_layers, dropout, train,
                          bidirectional, batch_first);
}

}  // namespace strata
