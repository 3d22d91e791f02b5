#include "strata/nn/rnn.h"

#include <cmath>
#include <string>
#include <utility>

#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {

using detail::RNNMode;

namespace {

/// Gates stacked in each weight's rows.
int64_t gates_of(RNNMode mode) {
  switch (mode) {
    case RNNMode::LSTM:
      return 4;
    case RNNMode::GRU:
      return 3;
    case RNNMode::RNN_TANH:
    case RNNMode::RNN_RELU:
      return 1;
  }
  return 1;
}

/// Every parameter of `module` from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch's RNNBase and RNNCellBase.
void reset_uniform(Module& module, int64_t hidden_size) {
  const double bound = hidden_size > 0 ? 1.0 / std::sqrt(static_cast<double>(hidden_size)) : 0.0;
  for (Tensor& p : module.parameters(/*recurse=*/false)) init::uniform_(p, -bound, bound);
}

/// The options RNN, LSTM and GRU share.
template <class Options>
detail::RNNOptionsBase base_options(RNNMode mode, const Options& o) {
  return detail::RNNOptionsBase(mode, o.input_size(), o.hidden_size())
      .num_layers(o.num_layers())
      .bias(o.bias())
      .batch_first(o.batch_first())
      .dropout(o.dropout())
      .bidirectional(o.bidirectional());
}

RNNMode rnn_mode(const RNNOptions::nonlinearity_t& nonlinearity) {
  return std::holds_alternative<enumtype::kReLU>(nonlinearity) ? RNNMode::RNN_RELU : RNNMode::RNN_TANH;
}

const char* boolean(bool b) { return b ? "true" : "false"; }

}  // namespace

namespace detail {

RNNImplBase::RNNImplBase(std::string name, const RNNOptionsBase& options)
    : Module(std::move(name)), options_base(options) {
  const RNNOptionsBase& o = options_base;
  const std::string& op = this->name();
  STRATA_CHECK(o.input_size() >= 0 && o.hidden_size() > 0, op,
               ": expected input_size >= 0 and hidden_size > 0, got input_size=", o.input_size(),
               " and hidden_size=", o.hidden_size());
  STRATA_CHECK(o.num_layers() > 0, op, ": num_layers must be greater than zero, got ", o.num_layers());
  STRATA_CHECK(o.dropout() >= 0 && o.dropout() <= 1, op,
               ": dropout should be a number in range [0, 1] representing the probability of an element being "
               "zeroed, got ",
               o.dropout());
  STRATA_CHECK(o.proj_size() == 0 || o.mode() == RNNMode::LSTM, op, " does not support proj_size (only LSTM does)");
  STRATA_CHECK(o.proj_size() >= 0 && o.proj_size() < o.hidden_size(), op,
               ": proj_size must be 0 (no projection) or positive and smaller than hidden_size, got proj_size=",
               o.proj_size(), " and hidden_size=", o.hidden_size());
  const int64_t rows = gates_of(o.mode()) * o.hidden_size(), directions = o.bidirectional() ? 2 : 1;
  const int64_t h_size = o.proj_size() > 0 ? o.proj_size() : o.hidden_size();
  for (int64_t layer = 0; layer < o.num_layers(); ++layer) {
    for (int64_t direction = 0; direction < directions; ++direction) {
      const std::string suffix = "_l" + std::to_string(layer) + (direction == 1 ? "_reverse" : "");
      const int64_t in = layer == 0 ? o.input_size() : h_size * directions;
      flat_weights_.push_back(register_parameter("weight_ih" + suffix, empty({rows, in})));
      flat_weights_.push_back(register_parameter("weight_hh" + suffix, empty({rows, h_size})));
      if (o.bias()) {
        flat_weights_.push_back(register_parameter("bias_ih" + suffix, empty({rows})));
        flat_weights_.push_back(register_parameter("bias_hh" + suffix, empty({rows})));
      }
      if (o.proj_size() > 0)
        flat_weights_.push_back(register_parameter("weight_hr" + suffix, empty({o.proj_size(), o.hidden_size()})));
    }
  }
  reset_parameters();
}

void RNNImplBase::reset_parameters() { reset_uniform(*this, options_base.hidden_size()); }

void RNNImplBase::pretty_print(std::ostream& os) const {
  const RNNOptionsBase& o = options_base;
  os << name() << "(input_size=" << o.input_size() << ", hidden_size=" << o.hidden_size()
     << ", num_layers=" << o.num_layers() << ", bias=" << boolean(o.bias())
     << ", batch_first=" << boolean(o.batch_first()) << ", dropout=" << o.dropout()
     << ", bidirectional=" << boolean(o.bidirectional());
  if (o.proj_size() > 0) os << ", proj_size=" << o.proj_size();
  os << ")";
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  const RNNOptionsBase& o = options_base;
  const std::string& op = name();
  const bool batched = input.dim() == 3;
  STRATA_CHECK((batched || input.dim() == 2) && input.size(-1) == o.input_size(), op, ": expected input of shape ",
               o.batch_first() ? "[batch, seq_len, " : "[seq_len, batch, ", o.input_size(), "] or unbatched [seq_len, ",
               o.input_size(), "], got ", input.sizes());
  const Tensor& w0 = flat_weights_[0];
  STRATA_CHECK(input.dtype() == w0.dtype() && input.device() == w0.device(), op, ": expected input of dtype ",
               w0.dtype(), " on ", w0.device(), " as the parameters, got ", input.dtype(), " on ", input.device());
  // An unbatched input is a batch of one, as torch.nn's.
  const int64_t batch_dim = o.batch_first() ? 0 : 1;
  const Tensor x = batched ? input : input.unsqueeze(batch_dim);
  const int64_t batch = x.size(batch_dim);
  STRATA_CHECK(x.size(1 - batch_dim) > 0 && batch > 0, op,
               ": expected a sequence of at least one step and a batch of at least one, got input of shape ",
               input.sizes());
  const int64_t states = o.num_layers() * (o.bidirectional() ? 2 : 1);
  // A given state is [num_layers * num_directions, batch, features], or without the batch dim for an unbatched input.
  auto initial = [&](const Tensor& given, const char* what, int64_t features) {
    if (!given.defined()) return zeros({states, batch, features}, x.options());
    const DimVector expected = batched ? DimVector{states, batch, features} : DimVector{states, features};
    STRATA_CHECK(given.sizes() == IntArrayRef(expected), op, ": expected ", what, " of shape ", IntArrayRef(expected),
                 batched ? " (num_layers * num_directions, batch, " : " (num_layers * num_directions, ",
                 o.proj_size() > 0 && features == o.proj_size() ? "proj_size" : "hidden_size", ") for input of shape ",
                 input.sizes(), ", got ", given.sizes());
    return batched ? given : given.unsqueeze(1);
  };
  const Tensor h_init = initial(h0, "h_0", o.proj_size() > 0 ? o.proj_size() : o.hidden_size());
  const bool train = is_training();
  Tensor output, h_n, c_n;
  switch (o.mode()) {
    case RNNMode::LSTM:
      std::tie(output, h_n, c_n) =
          strata::lstm(x, {h_init, initial(c0, "c_0", o.hidden_size())}, flat_weights_, o.bias(), o.num_layers(),
                       o.dropout(), train, o.bidirectional(), o.batch_first());
      break;
    case RNNMode::GRU:
      std::tie(output, h_n) = strata::gru(x, h_init, flat_weights_, o.bias(), o.num_layers(), o.dropout(), train,
                                          o.bidirectional(), o.batch_first());
      break;
    case RNNMode::RNN_TANH:
      std::tie(output, h_n) = strata::rnn_tanh(x, h_init, flat_weights_, o.bias(), o.num_layers(), o.dropout(), train,
                                               o.bidirectional(), o.batch_first());
      break;
    case RNNMode::RNN_RELU:
      std::tie(output, h_n) = strata::rnn_relu(x, h_init, flat_weights_, o.bias(), o.num_layers(), o.dropout(), train,
                                               o.bidirectional(), o.batch_first());
      break;
  }
  if (batched) return {output, h_n, c_n};
  return {output.squeeze(batch_dim), h_n.squeeze(1), c_n.defined() ? c_n.squeeze(1) : c_n};
}

}  // namespace detail

RNNImpl::RNNImpl(const RNNOptions& o) : RNNImplBase("RNN", base_options(rnn_mode(o.nonlinearity()), o)), options(o) {}

std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& input, Tensor hx) {
  auto [output, h_n, c_n] = run(input, hx, {});
  return {output, h_n};
}

LSTMImpl::LSTMImpl(const LSTMOptions& o)
    : RNNImplBase("LSTM", base_options(RNNMode::LSTM, o).proj_size(o.proj_size())), options(o) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input,
                                                                 std::optional<std::tuple<Tensor, Tensor>> hx_opt) {
  const auto [h0, c0] = hx_opt.value_or(std::tuple<Tensor, Tensor>{});
  auto [output, h_n, c_n] = run(input, h0, c0);
  return {output, {h_n, c_n}};
}

GRUImpl::GRUImpl(const GRUOptions& o) : RNNImplBase("GRU", base_options(RNNMode::GRU, o)), options(o) {}

std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& input, Tensor hx) {
  auto [output, h_n, c_n] = run(input, hx, {});
  return {output, h_n};
}

// ---- cells ----

namespace detail {

RNNCellImplBase::RNNCellImplBase(std::string name, const RNNCellOptionsBase& options)
    : Module(std::move(name)), options_base(options) {
  const RNNCellOptionsBase& o = options_base;
  STRATA_CHECK(o.input_size() >= 0 && o.hidden_size() > 0, this->name(),
               ": expected input_size >= 0 and hidden_size > 0, got input_size=", o.input_size(),
               " and hidden_size=", o.hidden_size());
  const int64_t rows = o.num_chunks() * o.hidden_size();
  weight_ih = register_parameter("weight_ih", empty({rows, o.input_size()}));
  weight_hh = register_parameter("weight_hh", empty({rows, o.hidden_size()}));
  if (o.bias()) {
    bias_ih = register_parameter("bias_ih", empty({rows}));
    bias_hh = register_parameter("bias_hh", empty({rows}));
  }
  reset_parameters();
}

void RNNCellImplBase::reset_parameters() { reset_uniform(*this, options_base.hidden_size()); }

void RNNCellImplBase::pretty_print(std::ostream& os) const {
  os << name() << "(" << options_base.input_size() << ", " << options_base.hidden_size();
  if (!options_base.bias()) os << ", bias=false";
  if (const std::string nonlinearity = nonlinearity_str(); !nonlinearity.empty())
    os << ", nonlinearity=" << nonlinearity;
  os << ")";
}

Tensor RNNCellImplBase::batched_input(const Tensor& input) const {
  const int64_t in = options_base.input_size();
  STRATA_CHECK((input.dim() == 1 || input.dim() == 2) && input.size(-1) == in, name(),
               ": expected input of shape [batch, ", in, "] or unbatched [", in, "], got ", input.sizes());
  return input.dim() == 1 ? input.unsqueeze(0) : input;
}

Tensor RNNCellImplBase::batched_state(const Tensor& state, const Tensor& input, const char* what) const {
  const int64_t hidden = options_base.hidden_size(), batch = input.dim() == 1 ? 1 : input.size(0);
  if (!state.defined()) return zeros({batch, hidden}, input.options());
  const DimVector expected = input.dim() == 1 ? DimVector{hidden} : DimVector{batch, hidden};
  STRATA_CHECK(state.sizes() == IntArrayRef(expected), name(), ": expected ", what, " of shape ", IntArrayRef(expected),
               " for input of shape ", input.sizes(), ", got ", state.sizes());
  return input.dim() == 1 ? state.unsqueeze(0) : state;
}

Tensor RNNCellImplBase::unbatched_like(const Tensor& result, const Tensor& input) {
  return input.dim() == 1 ? result.squeeze(0) : result;
}

}  // namespace detail

RNNCellImpl::RNNCellImpl(const RNNCellOptions& o)
    : RNNCellImplBase("RNNCell", detail::RNNCellOptionsBase(o.input_size(), o.hidden_size(), o.bias(), 1)),
      options(o) {}

Tensor RNNCellImpl::forward(const Tensor& input, Tensor hx) {
  const Tensor x = batched_input(input), h = batched_state(hx, input, "hx");
  const Tensor y = rnn_mode(options.nonlinearity()) == RNNMode::RNN_RELU
                       ? rnn_relu_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)
                       : rnn_tanh_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh);
  return unbatched_like(y, input);
}

std::string RNNCellImpl::nonlinearity_str() const {
  return rnn_mode(options.nonlinearity()) == RNNMode::RNN_RELU ? "kReLU" : "";
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o)
    : RNNCellImplBase("LSTMCell", detail::RNNCellOptionsBase(o.input_size(), o.hidden_size(), o.bias(), 4)),
      options(o) {}

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input,
                                                 std::optional<std::tuple<Tensor, Tensor>> hx_opt) {
  const auto [h0, c0] = hx_opt.value_or(std::tuple<Tensor, Tensor>{});
  const Tensor x = batched_input(input);
  auto [h, c] = lstm_cell(x, {batched_state(h0, input, "h_0"), batched_state(c0, input, "c_0")}, weight_ih, weight_hh,
                          bias_ih, bias_hh);
  return {unbatched_like(h, input), unbatched_like(c, input)};
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& o)
    : RNNCellImplBase("GRUCell", detail::RNNCellOptionsBase(o.input_size(), o.hidden_size(), o.bias(), 3)),
      options(o) {}

Tensor GRUCellImpl::forward(const Tensor& input, Tensor hx) {
  const Tensor x = batched_input(input), h = batched_state(hx, input, "hx");
  return unbatched_like(gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh), input);
}

}  // namespace strata::nn
