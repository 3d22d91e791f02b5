#include <cmath>

#include "strata/nn/init.h"
#include "strata/nn/linear.h"
#include "strata/nn/transformer.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::values;
using namespace init;

double mean_of(const Tensor& t) { return t.mean().item<double>(); }
double std_of(const Tensor& t) { return t.std().item<double>(); }
double min_of(const Tensor& t) { return t.min().item<double>(); }
double max_of(const Tensor& t) { return t.max().item<double>(); }

TEST(NnInit, CalculateGain) {
  EXPECT_EQ(calculate_gain(Nonlinearity::Linear), 1.0);
  EXPECT_EQ(calculate_gain(Nonlinearity::Sigmoid), 1.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::LeakyReLU), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::LeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
}

TEST(NnInit, FanInAndFanOut) {
  using Fans = std::pair<int64_t, int64_t>;
  EXPECT_EQ(calculate_fan_in_and_fan_out(empty({3, 4})), Fans(4, 3));
  // A conv-shaped weight [out, in, kh, kw]: the receptive field multiplies both fans.
  EXPECT_EQ(calculate_fan_in_and_fan_out(empty({8, 3, 5, 5})), Fans(75, 200));
  EXPECT_THROW_MSG(calculate_fan_in_and_fan_out(empty({5})),
                   "nn::init: fan in and fan out can not be computed for a tensor with fewer than 2 dimensions, got "
                   "shape [5]");
  EXPECT_THROW_MSG(kaiming_uniform_(empty({5})), "fewer than 2 dimensions");
  EXPECT_THROW_MSG(xavier_normal_(empty({})), "fewer than 2 dimensions, got shape []");
}

TEST(NnInit, UniformAndNormalStatistics) {
  manual_seed(0);
  Tensor u = uniform_(empty({500, 400}), -2, 3);
  EXPECT_GE(min_of(u), -2.0);
  EXPECT_LT(max_of(u), 3.0);
  EXPECT_NEAR(mean_of(u), 0.5, 0.01);
  EXPECT_NEAR(std_of(u), 5 / std::sqrt(12.0), 0.01);
  Tensor n = normal_(empty({500, 400}, kFloat64), 1.5, 0.5);
  EXPECT_NEAR(mean_of(n), 1.5, 0.005);
  EXPECT_NEAR(std_of(n), 0.5, 0.005);
}

TEST(NnInit, XavierMatchesTorchFormulas) {
  manual_seed(1);
  const double gain = calculate_gain(Nonlinearity::Tanh);
  Tensor w = xavier_uniform_(empty({300, 500}), gain);
  const double bound = gain * std::sqrt(6.0 / 800);
  EXPECT_LE(max_of(w.abs()), bound);
  EXPECT_GT(max_of(w.abs()), 0.99 * bound);  // the range is really used
  EXPECT_NEAR(std_of(w), bound / std::sqrt(3.0), 0.01 * bound);
  Tensor v = xavier_normal_(empty({300, 500}));
  EXPECT_NEAR(std_of(v), std::sqrt(2.0 / 800), 0.01 * std::sqrt(2.0 / 800));
  EXPECT_NEAR(mean_of(v), 0, 0.002);
}

TEST(NnInit, KaimingMatchesTorchFormulas) {
  manual_seed(2);
  // torch.nn.Linear's weight init: a = sqrt(5) makes the bound 1 / sqrt(fan_in).
  Tensor w = kaiming_uniform_(empty({200, 400}), std::sqrt(5.0));
  EXPECT_LE(max_of(w.abs()), 1 / std::sqrt(400.0));
  EXPECT_GT(max_of(w.abs()), 0.99 / std::sqrt(400.0));
  // The default (a = 0, leaky_relu) has the ReLU gain: bound sqrt(6 / fan_in).
  Tensor r = kaiming_uniform_(empty({200, 400}));
  EXPECT_LE(max_of(r.abs()), std::sqrt(6.0 / 400));
  EXPECT_GT(max_of(r.abs()), 0.99 * std::sqrt(6.0 / 400));
  Tensor n = kaiming_normal_(empty({200, 400}), 0, FanMode::FanOut, Nonlinearity::ReLU);
  EXPECT_NEAR(std_of(n), std::sqrt(2.0 / 200), 0.01 * std::sqrt(2.0 / 200));
  Tensor t = kaiming_normal_(empty({400, 200}), 0, FanMode::FanIn, Nonlinearity::Tanh);
  EXPECT_NEAR(std_of(t), 5.0 / 3.0 / std::sqrt(200.0), 0.01 * 5.0 / 3.0 / std::sqrt(200.0));
  Tensor none = empty({0, 4});
  EXPECT_TRUE(kaiming_uniform_(none).is_same(none));  // nothing to fill, as torch
}

TEST(NnInit, ConstantsWriteInPlaceWithoutHistory) {
  Tensor p = empty({2, 3}, requires_grad());  // a parameter: a leaf that requires grad
  const uint32_t version = p._version();
  Tensor out = ones_(p);
  EXPECT_TRUE(out.is_same(p));
  EXPECT_GT(p._version(), version);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  EXPECT_VALUES(p, {1, 1, 1, 1, 1, 1});
  zeros_(p);
  EXPECT_VALUES(p, {0, 0, 0, 0, 0, 0});
  constant_(p, 2.5);
  EXPECT_VALUES(p, {2.5, 2.5, 2.5, 2.5, 2.5, 2.5});
  Tensor counts = zeros({2}, kLong);
  constant_(counts, 7);
  EXPECT_VALUES(counts, {7, 7});

  const uint32_t before = p._version();
  uniform_(p, -1, 1);
  EXPECT_GT(p._version(), before);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_LT(max_of(p.abs()), 1.0);
}

TEST(NnInit, WritesThroughStrides) {
  manual_seed(3);
  Tensor base = zeros({4, 6});
  Tensor view = base.t();  // [6, 4], column-major
  normal_(view);
  for (double v : values(base)) EXPECT_NE(v, 0.0);
  // The same draw as into a contiguous tensor: element i of the view gets value i of the stream.
  manual_seed(3);
  Tensor dense = normal_(empty({6, 4}));
  EXPECT_EQ(values(view), values(dense));
}

TEST(NnInit, GeneratorsAndSeeds) {
  Generator g1(7), g2(7), g3(8);
  Tensor a = uniform_(empty({100}), 0, 1, &g1);
  Tensor b = uniform_(empty({100}), 0, 1, &g2);
  Tensor c = uniform_(empty({100}), 0, 1, &g3);
  EXPECT_EQ(values(a), values(b));
  EXPECT_NE(values(a), values(c));
  // A private generator leaves the default stream alone.
  manual_seed(5);
  Tensor d = normal_(empty({10}));
  manual_seed(5);
  Generator g4(99);
  kaiming_normal_(empty({10, 10}), 0, FanMode::FanIn, Nonlinearity::ReLU, &g4);
  EXPECT_EQ(values(normal_(empty({10}))), values(d));
}

TEST(NnInit, SeededModelsAreBitIdentical) {
  auto build = [](uint64_t seed) {
    manual_seed(seed);
    Module m("Model");
    m.register_module("fc", Linear(16, 32));
    m.register_module("block", TransformerBlock(8, 2));
    return m.state_dict();
  };
  const StateDict a = build(42), b = build(42), c = build(43);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    EXPECT_EQ(values(t), values(b.at(name))) << name;
    if (name.ends_with("weight") && name.find("ln_") == std::string::npos) {
      EXPECT_NE(values(t), values(c.at(name))) << name;
    }
  }
}

TEST(NnInit, BadArguments) {
  EXPECT_THROW_MSG(uniform_(empty({3}), 1, 0), "nn::init::uniform_: expected a <= b, got a=1 b=0");
  EXPECT_THROW_MSG(normal_(empty({3}), 0, -1), "nn::init::normal_: expected std >= 0, got -1");
  EXPECT_THROW_MSG(uniform_(empty({3}, kLong)), "nn::init::uniform_: expected a floating point tensor, got Long");
  EXPECT_THROW_MSG(normal_(Tensor()), "nn::init::normal_: the tensor is undefined");
  EXPECT_THROW_MSG(zeros_(Tensor()), "nn::init::constant_: the tensor is undefined");
}

}  // namespace
}  // namespace strata::nn
