#pragma once
// Recurrent layers with libtorch's names, options, parameters and forward signatures: RNN (tanh or ReLU),
// LSTM (optionally with projections) and GRU over whole sequences, stacked and optionally bidirectional;
// RNNCell, LSTMCell and GRUCell for one step. Inputs are [seq_len, batch, input_size] ([batch, seq_len,
// input_size] with batch_first) or unbatched [seq_len, input_size]; states are [num_layers * num_directions,
// batch, hidden_size], zeros when not given.
//
//   nn::LSTM lstm(nn::LSTMOptions(10, 20).num_layers(2).dropout(0.1).batch_first(true));
//   auto [output, state] = lstm(randn({3, 5, 10}));          // [batch, seq, 10] -> output [3, 5, 20]
//   auto [h_n, c_n] = state;                                 // [2, 3, 20] each: the last step of every layer
//   nn::GRU gru(nn::GRUOptions(10, 20).bidirectional(true));
//   auto [y, h] = gru(randn({5, 3, 10}));                    // y [5, 3, 40], both directions; h [2, 3, 20]
//   nn::RNN rnn(nn::RNNOptions(10, 20).nonlinearity(kReLU));
//   auto [z, h_z] = rnn(randn({5, 10}), zeros({1, 20}));     // unbatched: [seq, 10] -> [5, 20]
//   nn::LSTMCell cell(10, 20);
//   auto [h_1, c_1] = cell(randn({3, 10}));                  // one step from zero states
//   std::cout << *lstm;  // LSTM(input_size=10, hidden_size=20, num_layers=2, bias=true, batch_first=true, ...)

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata {

namespace enumtype {
struct kTanh {};  ///< an RNN's nonlinearity: tanh
struct kReLU {};  ///< an RNN's nonlinearity: relu
}  // namespace enumtype
inline constexpr enumtype::kTanh kTanh{};  ///< RNN nonlinearity tanh, as torch::kTanh
inline constexpr enumtype::kReLU kReLU{};  ///< RNN nonlinearity relu, as torch::kReLU

namespace nn {

/// RNN's options: RNNOptions(input_size, hidden_size).num_layers(2).nonlinearity(kReLU), as libtorch's.
class RNNOptions {
 public:
  using nonlinearity_t = std::variant<enumtype::kTanh, enumtype::kReLU>;  ///< kTanh or kReLU
  /// The sizes; one layer, tanh, biases, [seq, batch, feature], no dropout, one direction.
  RNNOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(int64_t, input_size);                   ///< features of each input step
  STRATA_ARG(int64_t, hidden_size);                  ///< features of the hidden state
  STRATA_ARG(int64_t, num_layers) = 1;               ///< stacked layers, each fed the previous one's output
  STRATA_ARG(nonlinearity_t, nonlinearity) = kTanh;  ///< kTanh or kReLU
  STRATA_ARG(bool, bias) = true;                     ///< whether the layers have bias_ih and bias_hh
  STRATA_ARG(bool, batch_first) = false;             ///< input and output [batch, seq, feature]
  STRATA_ARG(double, dropout) = 0.0;                 ///< dropout on every layer's output but the last's, in training
  STRATA_ARG(bool, bidirectional) = false;           ///< a second layer per level reading the sequence backwards
};

/// LSTM's options: LSTMOptions(input_size, hidden_size).num_layers(2).proj_size(8), as libtorch's.
class LSTMOptions {
 public:
  /// The sizes; one layer, biases, [seq, batch, feature], no dropout, one direction, no projection.
  LSTMOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(int64_t, input_size);          ///< features of each input step
  STRATA_ARG(int64_t, hidden_size);         ///< features of the cell state (and of h without proj_size)
  STRATA_ARG(int64_t, num_layers) = 1;      ///< stacked layers, each fed the previous one's output
  STRATA_ARG(bool, bias) = true;            ///< whether the layers have bias_ih and bias_hh
  STRATA_ARG(bool, batch_first) = false;    ///< input and output [batch, seq, feature]
  STRATA_ARG(double, dropout) = 0.0;        ///< dropout on every layer's output but the last's, in training
  STRATA_ARG(bool, bidirectional) = false;  ///< a second layer per level reading the sequence backwards
  STRATA_ARG(int64_t, proj_size) = 0;       ///< > 0: h = (o * tanh(c)) weight_hr^T has proj_size features
};

/// GRU's options: GRUOptions(input_size, hidden_size).num_layers(2).bidirectional(true), as libtorch's.
class GRUOptions {
 public:
  /// The sizes; one layer, biases, [seq, batch, feature], no dropout, one direction.
  GRUOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(int64_t, input_size);          ///< features of each input step
  STRATA_ARG(int64_t, hidden_size);         ///< features of the hidden state
  STRATA_ARG(int64_t, num_layers) = 1;      ///< stacked layers, each fed the previous one's output
  STRATA_ARG(bool, bias) = true;            ///< whether the layers have bias_ih and bias_hh
  STRATA_ARG(bool, batch_first) = false;    ///< input and output [batch, seq, feature]
  STRATA_ARG(double, dropout) = 0.0;        ///< dropout on every layer's output but the last's, in training
  STRATA_ARG(bool, bidirectional) = false;  ///< a second layer per level reading the sequence backwards
};

namespace detail {

/// The cell every layer of a recurrent stack runs.
enum class RNNMode { RNN_TANH, RNN_RELU, LSTM, GRU };

/// What RNN, LSTM and GRU share, as libtorch's RNNOptionsBase: the cell and the stack's shape.
class RNNOptionsBase {
 public:
  /// The cell and the sizes; the rest as in the layers' options.
  RNNOptionsBase(RNNMode mode, int64_t input_size, int64_t hidden_size)
      : mode_(mode), input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(RNNMode, mode);                ///< the cell
  STRATA_ARG(int64_t, input_size);          ///< features of each input step
  STRATA_ARG(int64_t, hidden_size);         ///< features of the hidden (LSTM: cell) state
  STRATA_ARG(int64_t, num_layers) = 1;      ///< stacked layers
  STRATA_ARG(bool, bias) = true;            ///< whether the layers have biases
  STRATA_ARG(bool, batch_first) = false;    ///< input and output [batch, seq, feature]
  STRATA_ARG(double, dropout) = 0.0;        ///< dropout between layers, in training
  STRATA_ARG(bool, bidirectional) = false;  ///< two directions per layer
  STRATA_ARG(int64_t, proj_size) = 0;       ///< LSTM only: projected size of h, 0 for none
};

/// RNN's, LSTM's and GRU's parameters and checks, as libtorch's RNNImplBase; the recurrence is strata::lstm, gru,
/// rnn_tanh or rnn_relu (autograd/ops.h). Layer k's parameters are weight_ih_lk [gates * hidden_size, input
/// features], weight_hh_lk [gates * hidden_size, h features], bias_ih_lk and bias_hh_lk [gates * hidden_size]
/// (gates: RNN 1, LSTM 4 as i, f, g, o, GRU 3 as r, z, n), LSTM's weight_hr_lk [proj_size, hidden_size]; the
/// reverse direction's end in _reverse.
class RNNImplBase : public Module {
 public:
  /// `name` is the type name printed ("LSTM"); registers the parameters and draws them.
  RNNImplBase(std::string name, const RNNOptionsBase& options);
  /// Draws every parameter again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch.
  void reset_parameters();
  /// "LSTM(input_size=10, hidden_size=20, num_layers=2, bias=true, batch_first=false, dropout=0,
  /// bidirectional=false)", with ", proj_size=8" when set.
  void pretty_print(std::ostream& os) const override;
  /// The parameters in the order the recurrence takes them: per layer and direction w_ih, w_hh[, b_ih,
  /// b_hh][, w_hr], as libtorch's all_weights.
  std::vector<Tensor> all_weights() const { return flat_weights_; }
  /// libtorch's call that packs the weights into one cuDNN buffer; strata has no cuDNN and the recurrence reads
  /// the parameters themselves, so, as libtorch on a CPU, it changes nothing.
  void flatten_parameters() {}

  RNNOptionsBase options_base;  ///< what it was made with

 protected:
  /// Checks input and the states, then runs the stack (strata::lstm, gru, rnn_tanh or rnn_relu) from h0 (and
  /// LSTM's c0; undefined: zeros): output, h_n and (LSTM) c_n.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0, const Tensor& c0);

  /// The parameters in the order the stack ops take them: per layer and direction w_ih, w_hh[, b_ih, b_hh][, w_hr].
  std::vector<Tensor> flat_weights_;
};

}  // namespace detail

/// Elman RNN over sequences: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu), as torch.nn.RNN.
class RNNImpl : public detail::RNNImplBase {
 public:
  /// input_size -> hidden_size, one layer, tanh
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  explicit RNNImpl(const RNNOptions& options);  ///< from options
  /// input [seq, batch, input_size] (batch_first: [batch, seq, ...]; unbatched: [seq, input_size]) and h_0
  /// [num_layers * num_directions, batch, hidden_size] (zeros when undefined) -> (output [seq, batch,
  /// num_directions * hidden_size], h_n of h_0's shape)
  std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {});

  RNNOptions options;  ///< what it was made with
};
STRATA_MODULE(RNN);

/// Long short-term memory over sequences (gates i, f, g, o; c_t = f c_{t-1} + i g, h_t = o tanh(c_t)), as
/// torch.nn.LSTM, with proj_size as torch's projections.
class LSTMImpl : public detail::RNNImplBase {
 public:
  /// input_size -> hidden_size, one layer
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  explicit LSTMImpl(const LSTMOptions& options);  ///< from options
  /// input as RNN's and (h_0, c_0) (zeros when not given) -> (output, (h_n, c_n)); h has proj_size features when
  /// set, c has hidden_size.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         std::optional<std::tuple<Tensor, Tensor>> hx_opt = {});

  LSTMOptions options;  ///< what it was made with
};
STRATA_MODULE(LSTM);

/// Gated recurrent unit over sequences (gates r, z, n; n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z)
/// n + z h), as torch.nn.GRU.
class GRUImpl : public detail::RNNImplBase {
 public:
  /// input_size -> hidden_size, one layer
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  explicit GRUImpl(const GRUOptions& options);  ///< from options
  /// input and h_0 as RNN's -> (output, h_n)
  std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {});

  GRUOptions options;  ///< what it was made with
};
STRATA_MODULE(GRU);

/// RNNCell's options: RNNCellOptions(input_size, hidden_size).nonlinearity(kReLU), as libtorch's.
class RNNCellOptions {
 public:
  using nonlinearity_t = RNNOptions::nonlinearity_t;  ///< kTanh or kReLU
  /// The sizes; biases, tanh.
  RNNCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(int64_t, input_size);                   ///< features of the input
  STRATA_ARG(int64_t, hidden_size);                  ///< features of the hidden state
  STRATA_ARG(bool, bias) = true;                     ///< whether the cell has bias_ih and bias_hh
  STRATA_ARG(nonlinearity_t, nonlinearity) = kTanh;  ///< kTanh or kReLU
};

/// LSTMCell's options: LSTMCellOptions(input_size, hidden_size).bias(false), as libtorch's.
class LSTMCellOptions {
 public:
  /// The sizes; biases.
  LSTMCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(int64_t, input_size);   ///< features of the input
  STRATA_ARG(int64_t, hidden_size);  ///< features of the states
  STRATA_ARG(bool, bias) = true;     ///< whether the cell has bias_ih and bias_hh
};

/// GRUCell's options: GRUCellOptions(input_size, hidden_size).bias(false), as libtorch's.
class GRUCellOptions {
 public:
  /// The sizes; biases.
  GRUCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  STRATA_ARG(int64_t, input_size);   ///< features of the input
  STRATA_ARG(int64_t, hidden_size);  ///< features of the hidden state
  STRATA_ARG(bool, bias) = true;     ///< whether the cell has bias_ih and bias_hh
};

namespace detail {

/// What the cells' options share, as libtorch's RNNCellOptionsBase: the sizes, the bias and the gate count.
class RNNCellOptionsBase {
 public:
  /// The sizes, whether there are biases, and the gates (RNN 1, LSTM 4, GRU 3).
  RNNCellOptionsBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t num_chunks)
      : input_size_(input_size), hidden_size_(hidden_size), bias_(bias), num_chunks_(num_chunks) {}
  STRATA_ARG(int64_t, input_size);   ///< features of the input
  STRATA_ARG(int64_t, hidden_size);  ///< features of the states
  STRATA_ARG(bool, bias);            ///< whether the cell has bias_ih and bias_hh
  STRATA_ARG(int64_t, num_chunks);   ///< gates stacked in the weights' rows
};

/// What the cells share, as libtorch's RNNCellImplBase: weight_ih [gates * hidden_size, input_size], weight_hh
/// [gates * hidden_size, hidden_size], bias_ih and bias_hh [gates * hidden_size].
class RNNCellImplBase : public Module {
 public:
  /// `name` is the type name printed ("LSTMCell"); registers the parameters and draws them.
  RNNCellImplBase(std::string name, const RNNCellOptionsBase& options);
  /// Draws every parameter again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch.
  void reset_parameters();
  /// "LSTMCell(10, 20)", with ", bias=false" and RNNCell's ", nonlinearity=kReLU" where they differ from the default.
  void pretty_print(std::ostream& os) const override;

  RNNCellOptionsBase options_base;  ///< what it was made with
  Tensor weight_ih;                 ///< [gates * hidden_size, input_size]
  Tensor weight_hh;                 ///< [gates * hidden_size, hidden_size]
  Tensor bias_ih;                   ///< [gates * hidden_size], undefined without bias
  Tensor bias_hh;                   ///< [gates * hidden_size], undefined without bias

 protected:
  /// Checks input ([batch, input_size] or unbatched [input_size]) and returns it as [batch, input_size].
  Tensor batched_input(const Tensor& input) const;
  /// Checks a state `what` against input's batch and returns it as [batch, hidden_size] (zeros when undefined).
  Tensor batched_state(const Tensor& state, const Tensor& input, const char* what) const;
  /// A [batch, hidden_size] result back in the input's batchedness.
  static Tensor unbatched_like(const Tensor& result, const Tensor& input);
  /// "kReLU" for a ReLU RNNCell, else empty (libtorch's get_nonlinearity_str).
  virtual std::string nonlinearity_str() const { return ""; }
};

}  // namespace detail

/// One Elman RNN step, as torch.nn.RNNCell.
class RNNCellImpl : public detail::RNNCellImplBase {
 public:
  /// input_size -> hidden_size, tanh
  RNNCellImpl(int64_t input_size, int64_t hidden_size) : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  explicit RNNCellImpl(const RNNCellOptions& options);  ///< from options
  /// input [batch, input_size] or [input_size], hx [batch, hidden_size] or [hidden_size] (zeros when undefined) -> h'
  Tensor forward(const Tensor& input, Tensor hx = {});

  RNNCellOptions options;  ///< what it was made with

 protected:
  std::string nonlinearity_str() const override;  ///< "kReLU" with the ReLU nonlinearity, else empty (tanh)
};
STRATA_MODULE(RNNCell);

/// One LSTM step, as torch.nn.LSTMCell.
class LSTMCellImpl : public detail::RNNCellImplBase {
 public:
  /// input_size -> hidden_size
  LSTMCellImpl(int64_t input_size, int64_t hidden_size) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  explicit LSTMCellImpl(const LSTMCellOptions& options);  ///< from options
  /// input as RNNCell's and (h, c) (zeros when not given) -> (h', c')
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx_opt = {});

  LSTMCellOptions options;  ///< what it was made with
};
STRATA_MODULE(LSTMCell);

/// One GRU step, as torch.nn.GRUCell.
class GRUCellImpl : public detail::RNNCellImplBase {
 public:
  /// input_size -> hidden_size
  GRUCellImpl(int64_t input_size, int64_t hidden_size) : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  explicit GRUCellImpl(const GRUCellOptions& options);  ///< from options
  /// input and hx as RNNCell's -> h'
  Tensor forward(const Tensor& input, Tensor hx = {});

  GRUCellOptions options;  ///< what it was made with
};
STRATA_MODULE(GRUCell);

}  // namespace nn

}  // namespace strata
