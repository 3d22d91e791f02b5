// Classifies a 2-D three-arm spiral with a 2-64-64-3 MLP, using only tensors, autograd
// and a hand-written SGD step. Exits non-zero when the final training accuracy is below
// kAccuracyFloor, so it doubles as an end-to-end test.
//
//   spiral [steps]

#include <strata/strata.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace strata;

namespace {

constexpr int64_t kPointsPerClass = 100;
constexpr int64_t kClasses = 3;
constexpr int64_t kHidden = 64;
constexpr double kLearningRate = 0.5;
constexpr double kAccuracyFloor = 0.9;

struct Dataset {
  Tensor x;  // [N, 2] float32 points
  Tensor y;  // [N] int64 class of each point
};

// Arm c of the spiral: radius r in [0, 1] turning through 4 radians, with noisy angles.
Dataset make_spiral() {
  const int64_t n = kPointsPerClass * kClasses;
  Tensor noise = randn({n}) * 0.2;
  const float* eps = noise.data_ptr<float>();
  std::vector<double> points;
  std::vector<int64_t> labels;
  points.reserve(2 * n);
  labels.reserve(n);
  for (int64_t c = 0; c < kClasses; ++c) {
    for (int64_t i = 0; i < kPointsPerClass; ++i) {
      double r = static_cast<double>(i) / (kPointsPerClass - 1);
      double angle = 4.0 * (c + r) + eps[c * kPointsPerClass + i];
      points.push_back(r * std::sin(angle));
      points.push_back(r * std::cos(angle));
      labels.push_back(c);
    }
  }
  return {tensor(points).reshape({n, 2}), tensor(labels)};
}

// He-initialised weight [in, out] that requires grad.
Tensor weight(int64_t in, int64_t out) { return (randn({in, out}) * std::sqrt(2.0 / in)).requires_grad_(); }

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1000;
  manual_seed(0);
  Dataset data = make_spiral();

  Tensor w1 = weight(2, kHidden), b1 = zeros({kHidden}, requires_grad());
  Tensor w2 = weight(kHidden, kHidden), b2 = zeros({kHidden}, requires_grad());
  Tensor w3 = weight(kHidden, kClasses), b3 = zeros({kClasses}, requires_grad());
  tensor_list params = {w1, b1, w2, b2, w3, b3};
  auto model = [&](const Tensor& x) {
    Tensor h = relu(x.matmul(w1) + b1);
    h = relu(h.matmul(w2) + b2);
    return h.matmul(w3) + b3;
  };

  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor loss = cross_entropy(model(data.x), data.y);
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) {
        p.sub_(p.grad() * kLearningRate);
        p.mutable_grad().zero_();
      }
    }
    last_loss = loss.item<double>();
    if (step == 0) first_loss = last_loss;
    if (step % 100 == 0 || step == steps - 1) std::printf("step %4d  loss %.4f\n", step, last_loss);
  }

  NoGradGuard no_grad;
  Tensor correct = model(data.x).argmax(1).eq(data.y);
  double accuracy = correct.to(kFloat).mean().item<double>();
  std::printf("train accuracy %.1f%% (%lld/%lld points)\n", 100 * accuracy,
              static_cast<long long>(correct.to(kLong).sum().item<int64_t>()), static_cast<long long>(correct.numel()));
  if (!(last_loss < first_loss) || accuracy < kAccuracyFloor) {
    std::printf("FAILED: expected a falling loss and accuracy >= %.0f%%\n", 100 * kAccuracyFloor);
    return 1;
  }
  return 0;
}
