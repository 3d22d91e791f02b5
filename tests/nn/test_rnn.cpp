// Recurrent layers and cells (nn/rnn.h) and the fused cells under them (autograd/ops/rnn.cpp): one step
// against values computed by hand, whole stacks against a step-by-step reference written from torch's
// equations with plain ops and against numbers printed by libtorch, libtorch's parameter names, shapes and
// initialisation, batch_first, unbatched input, initial states, dropout between layers, gradcheck in float64
// (gradgradcheck for the fused cells), and the errors users hit.

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "../helpers.h"

using namespace strata;
using strata::testing::allclose;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// Sets every parameter of m, in named_parameters order, to values from f(parameter number, element number).
template <class F>
void set_parameters(nn::Module& m, const F& f) {
  NoGradGuard no_grad;
  int64_t k = 0;
  for (Tensor& p : m.parameters()) {
    Tensor flat = p.view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) flat[i].fill_(f(k, i));
    ++k;
  }
}

/// A float64 tensor whose flat element i is f(i).
template <class F>
Tensor filled(IntArrayRef sizes, const F& f) {
  std::vector<double> v(static_cast<size_t>(multiply(sizes)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<int64_t>(i));
  return tensor(v, kFloat64).reshape(sizes);
}

/// The recurrence of a stack written from torch's equations, one step at a time with plain ops (no fused cell):
/// x [seq, batch, input], h0 and c0 [layers * directions, batch, features]; returns output, h_n, c_n.
std::tuple<Tensor, Tensor, Tensor> reference(const std::string& mode, nn::Module& m, const Tensor& x, const Tensor& h0,
                                             const Tensor& c0, int64_t layers, bool bidirectional) {
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = t;
  auto param = [&](const std::string& name) { return p.count(name) ? p[name] : Tensor(); };
  const int64_t directions = bidirectional ? 2 : 1, seq = x.size(0);
  Tensor input = x;
  tensor_list h_n, c_n;
  for (int64_t l = 0; l < layers; ++l) {
    tensor_list outs;
    for (int64_t d = 0; d < directions; ++d) {
      const std::string s = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const Tensor w_ih = param("weight_ih" + s), w_hh = param("weight_hh" + s), w_hr = param("weight_hr" + s);
      const Tensor b_ih = param("bias_ih" + s), b_hh = param("bias_hh" + s);
      Tensor h = h0[l * directions + d], c = c0.defined() ? c0[l * directions + d] : Tensor();
      tensor_list steps(seq);
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t t = d ? seq - 1 - i : i;
        Tensor gi = matmul(input[t], w_ih.t()), gh = matmul(h, w_hh.t());
        if (b_ih.defined()) {
          gi = gi + b_ih;
          gh = gh + b_hh;
        }
        if (mode == "lstm") {
          const tensor_list g = chunk(gi + gh, 4, 1);
          c = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
          h = sigmoid(g[3]) * tanh(c);
          if (w_hr.defined()) h = matmul(h, w_hr.t());
        } else if (mode == "gru") {
          const tensor_list a = chunk(gi, 3, 1), b = chunk(gh, 3, 1);
          const Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]), n = tanh(a[2] + r * b[2]);
          h = (1.0 - z) * n + z * h;
        } else {
          h = mode == "relu" ? relu(gi + gh) : tanh(gi + gh);
        }
        steps[t] = h;
      }
      outs.push_back(stack(steps));
      h_n.push_back(h);
      c_n.push_back(c);
    }
    input = cat(outs, 2);
  }
  return {input, stack(h_n), c0.defined() ? stack(c_n) : Tensor()};
}

/// The module's inputs for gradcheck: x, the given states, then every parameter.
tensor_list with_parameters(tensor_list inputs, const nn::Module& m) {
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  return inputs;
}

}  // namespace

// ---- parameters ----

TEST(Rnn, ParametersHaveLibtorchsNamesShapesAndInitialisation) {
  manual_seed(0);
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).proj_size(2));
  std::vector<std::string> names;
  std::ostringstream shapes;
  for (const auto& [name, p] : lstm->named_parameters()) {
    names.push_back(name);
    shapes << p.sizes();
    const double bound = 1 / std::sqrt(4.0);
    EXPECT_LE(p.abs().max().item<double>(), bound) << name;
  }
  // The order and shapes libtorch 1.13 prints for the same options.
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",           "bias_hh_l0",
                "weight_hr_l0",         "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                "bias_hh_l0_reverse",   "weight_hr_l0_reverse", "weight_ih_l1",         "weight_hh_l1",
                "bias_ih_l1",           "bias_hh_l1",           "weight_hr_l1",         "weight_ih_l1_reverse",
                "weight_hh_l1_reverse", "bias_ih_l1_reverse",   "bias_hh_l1_reverse",   "weight_hr_l1_reverse"}));
  EXPECT_EQ(shapes.str(),
            "[16, 3][16, 2][16][16][2, 4][16, 3][16, 2][16][16][2, 4]"
            "[16, 4][16, 2][16][16][2, 4][16, 4][16, 2][16][16][2, 4]");

  nn::GRU gru(nn::GRUOptions(5, 6).bias(false));
  const nn::NamedTensors gru_params = gru->named_parameters();
  ASSERT_EQ(gru_params.size(), 2u);
  EXPECT_EQ(gru_params[0].first, "weight_ih_l0");
  EXPECT_EQ(gru_params[0].second.sizes(), IntArrayRef({18, 5}));
  EXPECT_EQ(gru_params[1].second.sizes(), IntArrayRef({18, 6}));
  nn::RNN rnn(nn::RNNOptions(5, 6).num_layers(2).bidirectional(true));
  EXPECT_EQ(rnn->named_parameters()[8].first, "weight_ih_l1");
  EXPECT_EQ(rnn->named_parameters()[8].second.sizes(), IntArrayRef({6, 12}));  // both directions feed layer 1
  // all_weights: the parameters themselves, in the order the recurrence takes them; flatten_parameters keeps them.
  lstm->flatten_parameters();
  const std::vector<Tensor> all = lstm->all_weights(), params = lstm->parameters();
  ASSERT_EQ(all.size(), params.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(all[i].is_same(params[i])) << i;

  // Uniform over the whole range, as torch: the extremes come close to +-1/sqrt(hidden_size).
  nn::LSTMCell cell(nn::LSTMCellOptions(64, 100));
  EXPECT_EQ(cell->weight_ih.sizes(), IntArrayRef({400, 64}));
  EXPECT_EQ(cell->bias_hh.sizes(), IntArrayRef({400}));
  EXPECT_NEAR(cell->weight_hh.max().item<double>(), 0.1, 1e-3);
  EXPECT_NEAR(cell->weight_hh.min().item<double>(), -0.1, 1e-3);
  EXPECT_EQ(nn::GRUCell(nn::GRUCellOptions(3, 4).bias(false))->parameters().size(), 2u);
}

// ---- values ----

// hidden_size 1, input_size 1, one step: every gate from the definitions, in double.
TEST(Rnn, OneStepMatchesValuesComputedByHand) {
  const double x = 0.7, h0 = -0.4, c0 = 0.9;
  const Tensor input = full({1, 1, 1}, x, kFloat64), h = full({1, 1, 1}, h0, kFloat64);
  const Tensor c = full({1, 1, 1}, c0, kFloat64);
  // Parameter k (weight_ih, weight_hh, bias_ih, bias_hh) holds c_k * (i + 1) for gate i.
  auto value = [](int64_t k, int64_t i) { return (k == 0 ? 0.3 : k == 1 ? -0.6 : k == 2 ? 0.05 : -0.15) * (i + 1); };

  nn::LSTM lstm(1, 1);
  lstm->to(kFloat64);
  set_parameters(*lstm, value);
  auto pre = [&](int64_t g) { return value(0, g) * x + value(2, g) + value(1, g) * h0 + value(3, g); };
  const double i = sigmoid(pre(0)), f = sigmoid(pre(1)), g = std::tanh(pre(2)), o = sigmoid(pre(3));
  const double c1 = f * c0 + i * g, h1 = o * std::tanh(c1);
  auto [out, state] = lstm(input, std::tuple{h, c});
  EXPECT_VALUES(out, {h1});
  EXPECT_VALUES(std::get<0>(state), {h1});
  EXPECT_VALUES(std::get<1>(state), {c1});

  nn::GRU gru(1, 1);
  gru->to(kFloat64);
  set_parameters(*gru, value);
  auto in_gate = [&](int64_t k) { return value(0, k) * x + value(2, k); };
  auto hidden_gate = [&](int64_t k) { return value(1, k) * h0 + value(3, k); };
  const double r = sigmoid(in_gate(0) + hidden_gate(0)), z = sigmoid(in_gate(1) + hidden_gate(1));
  const double n = std::tanh(in_gate(2) + r * hidden_gate(2));  // r scales W_hn h + b_hn, as torch
  EXPECT_VALUES(std::get<0>(gru(input, h)), {(1 - z) * n + z * h0});

  for (bool relu_rnn : {false, true}) {
    nn::RNN rnn(nn::RNNOptions(1, 1).nonlinearity(relu_rnn ? nn::RNNOptions::nonlinearity_t(kReLU) : kTanh));
    rnn->to(kFloat64);
    set_parameters(*rnn, [](int64_t k, int64_t) { return k == 0 ? 0.5 : k == 1 ? 2.0 : k == 2 ? 0.25 : -0.125; });
    const double a = 0.5 * x + 2.0 * h0 + 0.25 - 0.125;
    EXPECT_VALUES(std::get<0>(rnn(input, h)), {relu_rnn ? std::max(a, 0.0) : std::tanh(a)});
  }
}

// Two layers, both directions, batch_first, projections and initial states against the reference recurrence;
// the gradients of a loss on the output alone (c_n unused) against the reference's.
TEST(Rnn, StacksMatchTheReferenceRecurrence) {
  manual_seed(1);
  const int64_t batch = 3, seq = 4, input_size = 5, hidden = 6;
  for (const std::string mode : {"lstm", "lstm_proj", "gru", "tanh", "relu"}) {
    SCOPED_TRACE(mode);
    std::shared_ptr<nn::detail::RNNImplBase> m;
    int64_t h_features = hidden;
    if (mode == "lstm" || mode == "lstm_proj") {
      auto o = nn::LSTMOptions(input_size, hidden).num_layers(2).bidirectional(true).batch_first(true);
      if (mode == "lstm_proj") h_features = 3;
      m = nn::LSTM(o.proj_size(mode == "lstm_proj" ? 3 : 0)).ptr();
    } else if (mode == "gru") {
      m = nn::GRU(nn::GRUOptions(input_size, hidden).num_layers(2).bidirectional(true).batch_first(true)).ptr();
    } else {
      auto o = nn::RNNOptions(input_size, hidden).num_layers(2).bidirectional(true).batch_first(true);
      m = nn::RNN(mode == "relu" ? o.nonlinearity(kReLU) : o).ptr();
    }
    m->to(kFloat64);
    const bool lstm = mode.starts_with("lstm");
    const Tensor x = randn({batch, seq, input_size}, f64()), h0 = randn({4, batch, h_features}, f64());
    const Tensor c0 = lstm ? randn({4, batch, hidden}, f64()) : Tensor();
    Tensor output, h_n, c_n;
    if (lstm) {
      std::tuple<Tensor, Tensor> state;
      std::tie(output, state) = static_cast<nn::LSTMImpl&>(*m).forward(x, std::tuple{h0, c0});
      std::tie(h_n, c_n) = state;
    } else if (mode == "gru") {
      std::tie(output, h_n) = static_cast<nn::GRUImpl&>(*m).forward(x, h0);
    } else {
      std::tie(output, h_n) = static_cast<nn::RNNImpl&>(*m).forward(x, h0);
    }
    auto [ref_output, ref_h, ref_c] = reference(lstm ? "lstm" : mode, *m, x.transpose(0, 1), h0, c0, 2, true);
    EXPECT_EQ(output.sizes(), IntArrayRef({batch, seq, 2 * h_features}));
    EXPECT_TRUE(allclose(output, ref_output.transpose(0, 1), 1e-12, 1e-13));
    EXPECT_TRUE(allclose(h_n, ref_h, 1e-12, 1e-13));
    if (lstm) {
      EXPECT_TRUE(allclose(c_n, ref_c, 1e-12, 1e-13));
    }

    tensor_list inputs = with_parameters({x, h0}, *m);
    if (lstm) inputs.push_back(c0);
    const tensor_list grads = autograd::grad({(output * output).sum()}, inputs);
    const tensor_list ref_grads = autograd::grad({(ref_output * ref_output).sum()}, inputs);
    for (size_t k = 0; k < grads.size(); ++k) EXPECT_TRUE(allclose(grads[k], ref_grads[k], 1e-10, 1e-12)) << k;
  }
}

// Numbers printed by libtorch 1.13.1 (Debian's libtorch-dev) in float64 for the same options, parameters and
// inputs: parameter k (named_parameters order), flat element i = 0.5 sin(0.7 i + 1.3 k); input element i =
// cos(0.9 i); h_0 element i = 0.3 sin(0.5 i + 0.2); c_0 element i = 0.4 cos(0.3 i). They were printed with 15
// significant digits; the two libraries sum in different orders, so agreement is to about 1e-15.
#define EXPECT_LIBTORCH(t, ...) EXPECT_TRUE(::strata::testing::values_are((t), std::vector<double> __VA_ARGS__, 1e-12))
TEST(Rnn, MatchesLibtorch) {
  auto param = [](int64_t k, int64_t i) { return 0.5 * std::sin(0.7 * i + 1.3 * k); };
  auto input = [](IntArrayRef s) { return filled(s, [](int64_t i) { return std::cos(0.9 * i); }); };
  auto h0 = [](IntArrayRef s) { return filled(s, [](int64_t i) { return 0.3 * std::sin(0.5 * i + 0.2); }); };
  auto c0 = [](IntArrayRef s) { return filled(s, [](int64_t i) { return 0.4 * std::cos(0.3 * i); }); };

  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true).proj_size(2));
  lstm->to(kFloat64);
  set_parameters(*lstm, param);
  auto [output, state] = lstm(input({2, 3, 3}), std::tuple{h0({4, 2, 2}), c0({4, 2, 4})});
  EXPECT_LIBTORCH(
      output, {0.00791029855972921, -0.0169216896061019, -0.323654337607826,   0.258252938752043,  -0.136921308590766,
               0.0936323495355678,  -0.27282646725141,   0.226816037273579,    -0.222743043020346, 0.158454027458625,
               -0.184884477221201,  0.169286718720901,   -0.00805858445608061, 0.0288310613416115, -0.367934574540792,
               0.281629079827898,   -0.140595051909818,  0.117198602986693,    -0.341243283429723, 0.261284908414025,
               -0.225518659281748,  0.173521193161076,   -0.294910614140433,   0.220788245908918});
  EXPECT_LIBTORCH(std::get<0>(state), {-0.182172309937879, 0.138351167315452, -0.153671922728669, 0.0811400496828147,
                                       -0.242568160838228, 0.156758292593394, -0.160329309357312, 0.0664200061985542,
                                       -0.222743043020346, 0.158454027458625, -0.225518659281748, 0.173521193161076,
                                       -0.323654337607826, 0.258252938752043, -0.367934574540792, 0.281629079827898});
  EXPECT_LIBTORCH(
      std::get<1>(state),
      {-0.0809549451129095, 0.23654399169607,   -0.277926248835799, -0.518910425615513,  0.247802039711334,
       -0.19208825768775,   -0.290169734421333, -0.573357510979954, -0.161741451510621,  -0.0811530804469182,
       -0.519833720805573,  -0.743784265615631, 0.112969016672341,  -0.390750572095603,  -0.423520612097241,
       -0.425133055137378,  0.115198775987803,  -0.285221353469168, -0.363025738995093,  -0.390928728796891,
       0.174644579328486,   -0.20893045156718,  -0.323224067366978, -0.407203949395618,  0.0785791707345539,
       -0.332316272900322,  -0.487797079080887, -0.54382454199698,  0.00483508237331602, -0.437925860911613,
       -0.615698276500514,  -0.621824972552109});

  nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
  gru->to(kFloat64);
  set_parameters(*gru, param);
  auto [gru_output, gru_h] = gru(input({3, 2, 3}), h0({4, 2, 4}));
  EXPECT_LIBTORCH(gru_output[2], {0.0164945529399618, 0.491146610529282, 0.495059526534868, 0.126867938307673,
                                  -0.330887149007702, -0.0926026882237146, 0.274270778707411, 0.453652652989724,
                                  -0.0808872509106103, 0.700167621080231, 0.699453828921384, 0.45367098640483,
                                  0.0863380929662072, 0.0860796195177172, 0.428885929025772, 0.274802025740725});
  EXPECT_LIBTORCH(gru_h,
                  {-0.200214459166367,  0.647944833752285,  0.118327748123205, -0.389446267559644, 0.597952926195177,
                   -0.129717094025232,  -0.158229336034779, 0.050260419825625, 0.152166397758505,  0.259541298183223,
                   0.669987536657144,   -0.319008411352363, 0.68323132129693,  0.556826455166301,  -0.434762201158569,
                   0.407438231216011,   0.0164945529399618, 0.491146610529282, 0.495059526534868,  0.126867938307673,
                   -0.0808872509106103, 0.700167621080231,  0.699453828921384, 0.45367098640483,   -0.471985757396489,
                   -0.0773074028470894, 0.0675896411092298, 0.363914039920972, -0.236167228305994, 0.0266729115723379,
                   0.436243184435464,   0.326795974633183});

  nn::RNN rnn(nn::RNNOptions(3, 4).nonlinearity(kReLU));
  rnn->to(kFloat64);
  set_parameters(*rnn, param);
  EXPECT_LIBTORCH(std::get<0>(rnn(input({3, 2, 3}), h0({1, 2, 4}))), {0.140466339890713,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0.198041784335258,
                                                                      0,
                                                                      0.603354480577135,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0.129161990842342,
                                                                      0,
                                                                      0.905593959540009,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0,
                                                                      0});

  nn::GRUCell gru_cell(3, 4);
  gru_cell->to(kFloat64);
  set_parameters(*gru_cell, param);
  EXPECT_LIBTORCH(gru_cell(input({2, 3}), h0({2, 4})),
                  {-0.0351507027448101, 0.239936960683316, 0.281736016533385, 0.046383434007996, 0.65351009472091,
                   0.0592327047903309, -0.344897872723285, 0.0592844629985907});
  nn::LSTMCell lstm_cell(3, 4);
  lstm_cell->to(kFloat64);
  set_parameters(*lstm_cell, param);
  auto [h, c] = lstm_cell(input({2, 3}), std::tuple{h0({2, 4}), c0({2, 4})});
  EXPECT_LIBTORCH(h, {0.0412270967596576, 0.130952212916447, 0.0651211656046068, -0.0401537658634457, 0.092598724228722,
                      -0.0172270259546838, -0.374175525886362, -0.0378813579916937});
  EXPECT_LIBTORCH(c, {0.135868517439509, 0.198391937607787, 0.1869134894686, -0.0534731276251054, 0.394012174000452,
                      -0.0505536483107385, -0.508310156392032, -0.0716713954046248});
}

// ---- layouts and states ----

TEST(Rnn, BatchFirstUnbatchedAndDefaultStatesAgreeWithTheSeqFirstForm) {
  manual_seed(2);
  nn::GRU seq_first(nn::GRUOptions(4, 5).num_layers(2).bidirectional(true));
  nn::GRU batch_first(nn::GRUOptions(4, 5).num_layers(2).bidirectional(true).batch_first(true));
  batch_first->load_state_dict(seq_first->state_dict());
  const Tensor x = randn({6, 3, 4}), h0 = randn({4, 3, 5});
  auto [y, h] = seq_first(x, h0);
  auto [y_bf, h_bf] = batch_first(x.transpose(0, 1).contiguous(), h0);
  EXPECT_TRUE(allclose(y_bf, y.transpose(0, 1), 0, 0));
  EXPECT_TRUE(allclose(h_bf, h, 0, 0));  // states stay [layers * directions, batch, hidden] with batch_first

  // Unbatched [seq, input] is a batch of one without the batch dim, whatever batch_first says.
  for (nn::GRU& gru : {std::ref(seq_first), std::ref(batch_first)}) {
    auto [y1, h1] = gru(x.select(1, 2), h0.select(1, 2));
    EXPECT_EQ(y1.sizes(), IntArrayRef({6, 10}));
    EXPECT_EQ(h1.sizes(), IntArrayRef({4, 5}));
    EXPECT_TRUE(allclose(y1, y.select(1, 2), 1e-6, 1e-7));
    EXPECT_TRUE(allclose(h1, h.select(1, 2), 1e-6, 1e-7));
  }

  // No state means zeros; LSTM's (h_0, c_0) too, and unbatched LSTM input gives unbatched states.
  nn::LSTM lstm(nn::LSTMOptions(4, 5).proj_size(2));
  auto [out_default, state_default] = lstm(x);
  auto [out_zeros, state_zeros] = lstm(x, std::tuple{zeros({1, 3, 2}), zeros({1, 3, 5})});
  EXPECT_TRUE(allclose(out_default, out_zeros, 0, 0));
  EXPECT_TRUE(allclose(std::get<1>(state_default), std::get<1>(state_zeros), 0, 0));
  auto [out_unbatched, state_unbatched] = lstm(x.select(1, 0));
  EXPECT_EQ(out_unbatched.sizes(), IntArrayRef({6, 2}));
  EXPECT_EQ(std::get<0>(state_unbatched).sizes(), IntArrayRef({1, 2}));
  EXPECT_EQ(std::get<1>(state_unbatched).sizes(), IntArrayRef({1, 5}));
  EXPECT_TRUE(allclose(out_unbatched, out_default.select(1, 0), 1e-6, 1e-7));
  nn::RNN rnn(4, 5);
  EXPECT_TRUE(allclose(std::get<1>(rnn(x)), std::get<1>(rnn(x, zeros({1, 3, 5}))), 0, 0));

  // A given state changes the result and its gradient reaches it.
  const Tensor c0 = randn({1, 3, 5}, requires_grad());
  auto [out_c, state_c] = lstm(x, std::tuple{zeros({1, 3, 2}), c0});
  EXPECT_FALSE(allclose(out_c, out_default));
  out_c.sum().backward();
  EXPECT_TRUE(c0.grad().defined());
  EXPECT_GT(c0.grad().abs().sum().item<double>(), 0);
}

TEST(Rnn, DropoutActsBetweenLayersAndOnlyInTraining) {
  manual_seed(3);
  const Tensor x = randn({5, 2, 4});
  nn::LSTM plain(nn::LSTMOptions(4, 3).num_layers(2));
  nn::LSTM dropped(nn::LSTMOptions(4, 3).num_layers(2).dropout(1.0));
  dropped->load_state_dict(plain->state_dict());
  auto [y_plain, state_plain] = plain(x);
  // Training with p = 1: layer 0's output is all dropped, so layer 1 runs on zeros; the last layer's output is not
  // dropped, and layer 0's own states are untouched.
  auto [y, state] = dropped(x);
  nn::LSTM layer1(nn::LSTMOptions(3, 3));
  nn::StateDict second;
  for (const auto& [name, t] : dropped->state_dict())
    if (name.ends_with("_l1")) second[name.substr(0, name.size() - 1) + "0"] = t;
  layer1->load_state_dict(second);
  auto [y_zeros, state_zeros] = layer1(zeros({5, 2, 3}));
  EXPECT_TRUE(allclose(y, y_zeros, 0, 0));
  EXPECT_TRUE(allclose(std::get<0>(state)[0], std::get<0>(state_plain)[0], 0, 0));
  EXPECT_FALSE(allclose(y, y_plain));
  // Eval mode: no dropout at all.
  dropped->eval();
  EXPECT_TRUE(allclose(std::get<0>(dropped(x)), y_plain, 0, 0));
  // One layer: nothing lies between layers, so dropout changes nothing even in training (as torch, which warns).
  nn::GRU single(nn::GRUOptions(4, 3).dropout(0.5));
  const Tensor once = std::get<0>(single(x));
  single->eval();
  EXPECT_TRUE(allclose(std::get<0>(single(x)), once, 0, 0));
  // Two layers with p = 0.5 draw a mask: training differs from eval.
  nn::GRU half(nn::GRUOptions(4, 3).num_layers(2).dropout(0.5));
  const Tensor trained = std::get<0>(half(x));
  half->eval();
  EXPECT_FALSE(allclose(trained, std::get<0>(half(x))));
}

// ---- gradients ----

TEST(Rnn, GradcheckOfEveryLayer) {
  manual_seed(4);
  const Tensor x = randn({3, 2, 3}, f64()), x_bf = randn({2, 3, 3}, f64());
  nn::LSTM lstm(nn::LSTMOptions(3, 2).num_layers(2).bidirectional(true));
  lstm->to(kFloat64);
  const Tensor h0 = randn({4, 2, 2}, f64()), c0 = randn({4, 2, 2}, f64());
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        auto [y, state] = lstm(in[0], std::tuple{in[1], in[2]});
        return tensor_list{y, std::get<0>(state), std::get<1>(state)};
      },
      with_parameters({x, h0, c0}, *lstm));
  nn::LSTM proj(nn::LSTMOptions(3, 3).proj_size(2).batch_first(true));
  proj->to(kFloat64);
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        auto [y, state] = proj(in[0]);
        return tensor_list{y, std::get<1>(state)};
      },
      with_parameters({x_bf}, *proj));
  nn::GRU gru(nn::GRUOptions(3, 2).num_layers(2).bidirectional(true).batch_first(true));
  gru->to(kFloat64);
  const Tensor gru_h0 = randn({4, 2, 2}, f64());
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        auto [y, h] = gru(in[0], in[1]);
        return tensor_list{y, h};
      },
      with_parameters({x_bf, gru_h0}, *gru));
  for (bool relu_rnn : {false, true}) {
    auto o = nn::RNNOptions(3, 2).num_layers(2);
    nn::RNN rnn(relu_rnn ? o.nonlinearity(kReLU) : o);
    rnn->to(kFloat64);
    EXPECT_GRADCHECK(
        [&](const tensor_list& in) {
          auto [y, h] = rnn(in[0]);
          return tensor_list{y, h};
        },
        with_parameters({x}, *rnn));
  }
  // Unbatched input.
  nn::GRU small(3, 2);
  small->to(kFloat64);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return std::get<0>(small(in[0], in[1])); },
                   with_parameters({randn({4, 3}, f64()), randn({1, 2}, f64())}, *small));
}

// Second derivatives of whole stacks: w_hh's gradient over every step at once (Note [recurrent weight gradient]
// in autograd/ops/rnn.cpp) stays differentiable in w_hh and in the states.
TEST(Rnn, GradgradcheckOfStacks) {
  manual_seed(10);
  const Tensor x = randn({3, 2, 2}, f64()), h0 = randn({1, 2, 2}, f64()), c0 = randn({1, 2, 3}, f64());
  nn::LSTM lstm(nn::LSTMOptions(2, 3).proj_size(2));
  lstm->to(kFloat64);
  EXPECT_GRADGRADCHECK(
      [&](const tensor_list& in) {
        auto [y, state] = lstm(in[0], std::tuple{in[1], in[2]});
        return tensor_list{y, std::get<1>(state)};
      },
      with_parameters({x, h0, c0}, *lstm));
  nn::RNN rnn(nn::RNNOptions(2, 2).bidirectional(true));
  rnn->to(kFloat64);
  EXPECT_GRADGRADCHECK([&](const tensor_list& in) { return std::get<0>(rnn(in[0])); }, with_parameters({x}, *rnn));
  nn::GRU gru(2, 2);
  gru->to(kFloat64);
  EXPECT_GRADGRADCHECK([&](const tensor_list& in) { return std::get<1>(gru(in[0], in[1])); },
                       with_parameters({x, h0.narrow(2, 0, 2)}, *gru));
}

// The functional stacks take ATen's flat parameter list; a graph kept with retain_graph gives the same
// gradients on a second backward.
TEST(Rnn, FunctionalStacksTakeAtensParameterList) {
  manual_seed(11);
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).proj_size(2).batch_first(true));
  const Tensor x = randn({2, 5, 3}), h0 = randn({2, 2, 2}), c0 = randn({2, 2, 4});
  auto [y, state] = lstm(x, std::tuple{h0, c0});
  auto [y_f, h_f, c_f] = strata::lstm(x, {h0, c0}, lstm->parameters(), true, 2, 0.0, true, false, true);
  EXPECT_TRUE(allclose(y_f, y, 0, 0));
  EXPECT_TRUE(allclose(h_f, std::get<0>(state), 0, 0));
  EXPECT_TRUE(allclose(c_f, std::get<1>(state), 0, 0));

  const Tensor w = lstm->named_parameters()[1].second;  // weight_hh_l0
  const Tensor loss = (y_f * y_f).sum();
  loss.backward({}, /*retain_graph=*/true);
  const Tensor first = w.grad().clone();
  loss.backward();
  EXPECT_TRUE(allclose(w.grad(), first * 2.0, 1e-6, 1e-7));

  EXPECT_THROW_MSG(strata::lstm(x, {h0, c0}, lstm->parameters(), false, 2, 0.0, true, false, true),
                   "lstm: expected 4 parameters (w_ih, w_hh for each of 2 layers and 1 directions; with projections "
                   "w_hr after each), got 10");
  EXPECT_THROW_MSG(strata::lstm(x, {h0, c0.narrow(2, 0, 3)}, lstm->parameters(), true, 2, 0.0, true, false, true),
                   "lstm: expected c_0 of shape [2, 2, 4], got [2, 2, 3]");
  EXPECT_THROW_MSG(gru(x, h0, {}, true, 1, 0.0, true, false, false), "gru: expected 4 parameters");
  EXPECT_THROW_MSG(rnn_tanh(x[0], h0, {}, true, 1, 0.0, true, false, false),
                   "rnn_tanh: expected input of 3 dims [seq_len, batch, input_size], got shape [5, 3]");
}

TEST(RnnCell, GradcheckOfEveryCell) {
  manual_seed(5);
  const Tensor x = randn({2, 3}, f64()), h = randn({2, 4}, f64()), c = randn({2, 4}, f64());
  nn::LSTMCell lstm(3, 4);
  lstm->to(kFloat64);
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        auto [h1, c1] = lstm(in[0], std::tuple{in[1], in[2]});
        return tensor_list{h1, c1};
      },
      with_parameters({x, h, c}, *lstm));
  nn::GRUCell gru(3, 4);
  gru->to(kFloat64);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return gru(in[0], in[1]); }, with_parameters({x, h}, *gru));
  nn::RNNCell rnn(nn::RNNCellOptions(3, 4).nonlinearity(kReLU).bias(false));
  rnn->to(kFloat64);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return rnn(in[0], in[1]); }, with_parameters({x, h}, *rnn));
  nn::RNNCell tanh_cell(3, 4);
  tanh_cell->to(kFloat64);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return tanh_cell(in[0]); },
                   with_parameters({x.select(0, 1)}, *tanh_cell));
}

TEST(RnnCell, MatchTheirEquationsBatchedAndUnbatched) {
  manual_seed(6);
  const Tensor x = randn({3, 4}, kFloat64), h = randn({3, 5}, kFloat64), c = randn({3, 5}, kFloat64);
  nn::LSTMCell lstm(4, 5);
  nn::GRUCell gru(4, 5);
  nn::RNNCell rnn(nn::RNNCellOptions(4, 5).nonlinearity(kReLU));
  lstm->to(kFloat64);
  gru->to(kFloat64);
  rnn->to(kFloat64);
  auto affine = [](const Tensor& in, const Tensor& w, const Tensor& b) { return matmul(in, w.t()) + b; };
  const tensor_list g =
      chunk(affine(x, lstm->weight_ih, lstm->bias_ih) + affine(h, lstm->weight_hh, lstm->bias_hh), 4, 1);
  const Tensor c1 = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]), h1 = sigmoid(g[3]) * tanh(c1);
  auto [lstm_h, lstm_c] = lstm(x, std::tuple{h, c});
  EXPECT_TRUE(allclose(lstm_h, h1, 1e-13, 1e-14));
  EXPECT_TRUE(allclose(lstm_c, c1, 1e-13, 1e-14));
  auto [h_row, c_row] = lstm(x[1], std::tuple{h[1], c[1]});
  EXPECT_TRUE(allclose(h_row, h1[1], 1e-13, 1e-14));
  EXPECT_TRUE(allclose(c_row, c1[1], 1e-13, 1e-14));

  const tensor_list a = chunk(affine(x, gru->weight_ih, gru->bias_ih), 3, 1);
  const tensor_list b = chunk(affine(h, gru->weight_hh, gru->bias_hh), 3, 1);
  const Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]), n = tanh(a[2] + r * b[2]);
  EXPECT_TRUE(allclose(gru(x, h), (1.0 - z) * n + z * h, 1e-13, 1e-14));
  EXPECT_TRUE(allclose(gru(x[0], h[0]), ((1.0 - z) * n + z * h)[0], 1e-13, 1e-14));

  EXPECT_TRUE(allclose(rnn(x, h),
                       relu(affine(x, rnn->weight_ih, rnn->bias_ih) + affine(h, rnn->weight_hh, rnn->bias_hh)), 1e-13,
                       1e-14));
  EXPECT_TRUE(allclose(rnn(x), relu(affine(x, rnn->weight_ih, rnn->bias_ih) + rnn->bias_hh), 1e-13, 1e-14));
}

// The kernels' closed-form backward and the differentiable one that create_graph uses give the same numbers,
// and both fused cells are twice differentiable.
TEST(FusedCells, KernelAndDifferentiableBackwardsAgreeAndGradgradcheckPasses) {
  manual_seed(7);
  const Tensor ig = randn({3, 8}, f64()), hg = randn({3, 8}, f64()), cx = randn({3, 2}, f64());
  const Tensor gru_ig = randn({3, 6}, f64()), gru_hg = randn({3, 6}, f64());
  auto lstm = [](const tensor_list& in) {
    auto [h, c] = fused_lstm_cell(in[0], in[1], in[2]);
    return tensor_list{h, c};
  };
  auto gru = [](const tensor_list& in) { return tensor_list{fused_gru_cell(in[0], in[1], in[2])}; };
  for (const auto& [fn, inputs] : {std::pair{autograd::GradcheckFn(lstm), tensor_list{ig, hg, cx}},
                                   std::pair{autograd::GradcheckFn(gru), tensor_list{gru_ig, gru_hg, cx}}}) {
    EXPECT_GRADCHECK(fn, inputs);
    EXPECT_GRADGRADCHECK(fn, inputs);
    const tensor_list out = fn(inputs);
    tensor_list weights;
    for (const Tensor& o : out) weights.push_back(randn(o.sizes(), kFloat64));
    const tensor_list kernel = autograd::grad(out, inputs, weights, /*retain_graph=*/true);
    const tensor_list graph = autograd::grad(out, inputs, weights, /*retain_graph=*/true, /*create_graph=*/true);
    for (size_t k = 0; k < inputs.size(); ++k) EXPECT_TRUE(allclose(kernel[k], graph[k], 1e-14, 1e-15)) << k;
  }
  // Only h' used: c' receives no gradient and counts as zero.
  auto [h, c] = fused_lstm_cell(ig, hg, cx);
  const tensor_list only_h = autograd::grad({h.sum()}, {cx}, {}, /*retain_graph=*/true);
  const tensor_list both = autograd::grad({h.sum() + c.sum() * 0.0}, {cx});
  EXPECT_TRUE(allclose(only_h[0], both[0], 0, 0));
}

TEST(FusedCells, Float32MatchesFloat64AndNonContiguousOperandsWork) {
  manual_seed(8);
  const Tensor ig = randn({4, 12}, kFloat64), hg = randn({12, 4}, kFloat64).t(), cx = randn({4, 3}, kFloat64);
  auto [h64, c64] = fused_lstm_cell(ig, hg, cx);
  auto [h32, c32] = fused_lstm_cell(ig.to(kFloat), hg.to(kFloat), cx.to(kFloat));
  EXPECT_TRUE(allclose(h32, h64.to(kFloat), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(c32, c64.to(kFloat), 1e-5, 1e-6));
  const Tensor gi = ig.narrow(1, 0, 9), gh = hg.narrow(1, 3, 9);
  EXPECT_TRUE(allclose(fused_gru_cell(gi.to(kFloat), gh.to(kFloat), cx.to(kFloat)),
                       fused_gru_cell(gi, gh, cx).to(kFloat), 1e-5, 1e-6));
}

// ---- errors ----

TEST(Rnn, ErrorsNameWhatIsWrongAndWhere) {
  nn::LSTM lstm(nn::LSTMOptions(4, 5).num_layers(2));
  EXPECT_THROW_MSG(lstm(randn({3, 2, 4, 1})),
                   "LSTM: expected input of shape [seq_len, batch, 4] or unbatched [seq_len, 4], got [3, 2, 4, 1]");
  EXPECT_THROW_MSG(lstm(randn({3, 2, 6})),
                   "LSTM: expected input of shape [seq_len, batch, 4] or unbatched [seq_len, 4], got [3, 2, 6]");
  EXPECT_THROW_MSG(lstm(randn({0, 2, 4})),
                   "LSTM: expected a sequence of at least one step and a batch of at least one");
  EXPECT_THROW_MSG(lstm(randn({3, 2, 4}, kFloat64)),
                   "LSTM: expected input of dtype Float on cpu as the parameters, got Double on cpu");
  EXPECT_THROW_MSG(lstm(randn({3, 2, 4}), std::tuple{zeros({2, 3, 5}), zeros({2, 2, 5})}),
                   "LSTM: expected h_0 of shape [2, 2, 5] (num_layers * num_directions, batch, hidden_size) for input "
                   "of shape [3, 2, 4], got [2, 3, 5]");
  EXPECT_THROW_MSG(lstm(randn({3, 2, 4}), std::tuple{zeros({2, 2, 5}), zeros({1, 2, 5})}),
                   "LSTM: expected c_0 of shape [2, 2, 5]");
  EXPECT_THROW_MSG(lstm(randn({3, 4}), std::tuple{zeros({2, 1, 5}), zeros({2, 1, 5})}),
                   "LSTM: expected h_0 of shape [2, 5] (num_layers * num_directions, hidden_size) for input of shape "
                   "[3, 4], got [2, 1, 5]");
  nn::GRU gru(nn::GRUOptions(4, 5).batch_first(true).bidirectional(true));
  EXPECT_THROW_MSG(gru(randn({4})), "GRU: expected input of shape [batch, seq_len, 4] or unbatched [seq_len, 4]");
  EXPECT_THROW_MSG(gru(randn({2, 3, 4}), zeros({1, 2, 5})), "GRU: expected h_0 of shape [2, 2, 5]");
  nn::LSTM proj(nn::LSTMOptions(4, 5).proj_size(3));
  EXPECT_THROW_MSG(proj(randn({3, 2, 4}), std::tuple{zeros({1, 2, 5}), zeros({1, 2, 5})}),
                   "LSTM: expected h_0 of shape [1, 2, 3] (num_layers * num_directions, batch, proj_size)");

  EXPECT_THROW_MSG(nn::LSTM(nn::LSTMOptions(4, 5).proj_size(5)),
                   "LSTM: proj_size must be 0 (no projection) or positive and smaller than hidden_size, got "
                   "proj_size=5 and hidden_size=5");
  EXPECT_THROW_MSG(nn::GRU(nn::GRUOptions(4, 5).dropout(1.5)), "GRU: dropout should be a number in range [0, 1]");
  EXPECT_THROW_MSG(nn::RNN(nn::RNNOptions(4, 0)), "RNN: expected input_size >= 0 and hidden_size > 0");
  EXPECT_THROW_MSG(nn::RNN(nn::RNNOptions(4, 5).num_layers(0)), "RNN: num_layers must be greater than zero, got 0");

  nn::LSTMCell cell(4, 5);
  EXPECT_THROW_MSG(cell(randn({2, 3})), "LSTMCell: expected input of shape [batch, 4] or unbatched [4], got [2, 3]");
  EXPECT_THROW_MSG(cell(randn({2, 4}), std::tuple{zeros({2, 5}), zeros({3, 5})}),
                   "LSTMCell: expected c_0 of shape [2, 5] for input of shape [2, 4], got [3, 5]");
  EXPECT_THROW_MSG(nn::GRUCell(4, 5)(randn({4}), zeros({1, 5})),
                   "GRUCell: expected hx of shape [5] for input of shape [4], got [1, 5]");
  EXPECT_THROW_MSG(nn::RNNCell(4, 5)(randn({1, 2, 4})), "RNNCell: expected input of shape [batch, 4] or unbatched [4]");

  EXPECT_THROW_MSG(
      fused_lstm_cell(zeros({2, 8}), zeros({2, 6}), zeros({2, 2})),
      "fused_lstm_cell: expected input_gates and hidden_gates of shape [2, 8] for a state of shape [2, 2], "
      "got [2, 8] and [2, 6]");
  EXPECT_THROW_MSG(fused_gru_cell(zeros({2, 6}), zeros({2, 6}), zeros({2, 2}, kFloat64)),
                   "fused_gru_cell: expected floating operands of one dtype, got Float, Float and Double");
  EXPECT_THROW_MSG(fused_gru_cell(zeros({2, 6}), zeros({2, 6}), zeros({2})),
                   "fused_gru_cell: expected a state of shape [batch, hidden_size], got [2]");
  EXPECT_THROW_MSG(lstm_cell(zeros({2, 4}), {zeros({2, 5})}, zeros({20, 4}), zeros({20, 5})),
                   "lstm_cell: expected hx = {h, c}, got 1 tensors");
}

// ---- modules ----

TEST(Rnn, PrintingStateDictsAndDtypes) {
  std::ostringstream os;
  os << *nn::LSTM(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true).proj_size(2).dropout(0.25))
     << "\n"
     << *nn::RNN(nn::RNNOptions(3, 4).nonlinearity(kReLU)) << "\n"
     << *nn::GRU(3, 4) << "\n"
     << *nn::LSTMCell(3, 4) << "\n"
     << *nn::GRUCell(3, 4) << "\n"
     << *nn::RNNCell(nn::RNNCellOptions(3, 4).nonlinearity(kReLU).bias(false));
  // libtorch 1.13's lines for the same modules, without its "torch::nn::" prefix.
  EXPECT_EQ(os.str(),
            "LSTM(input_size=3, hidden_size=4, num_layers=2, bias=true, batch_first=true, dropout=0.25, "
            "bidirectional=true, proj_size=2)\n"
            "RNN(input_size=3, hidden_size=4, num_layers=1, bias=true, batch_first=false, dropout=0, "
            "bidirectional=false)\n"
            "GRU(input_size=3, hidden_size=4, num_layers=1, bias=true, batch_first=false, dropout=0, "
            "bidirectional=false)\n"
            "LSTMCell(3, 4)\nGRUCell(3, 4)\nRNNCell(3, 4, bias=false, nonlinearity=kReLU)");

  manual_seed(9);
  nn::GRU a(nn::GRUOptions(3, 4).num_layers(2)), b(nn::GRUOptions(3, 4).num_layers(2));
  b->load_state_dict(a->state_dict());
  const Tensor x = randn({5, 2, 3});
  EXPECT_TRUE(allclose(std::get<0>(a(x)), std::get<0>(b(x)), 0, 0));
  a->to(kFloat64);
  EXPECT_TRUE(allclose(std::get<0>(a(x.to(kFloat64))).to(kFloat), std::get<0>(b(x)), 1e-5, 1e-6));
  EXPECT_EQ(a->options.num_layers(), 2);
  EXPECT_EQ(a->options_base.mode(), nn::detail::RNNMode::GRU);
}
