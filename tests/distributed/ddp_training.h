#pragma once
// What the data-parallel tests share (test_ddp.cpp on the CPU, test_cuda_training.cpp on a GPU): a small MLP,
// the batches every rank can rebuild, training on the whole batch or on this rank's share, and the comparison
// of data-parallel training with single-process training.

#include <strata/distributed/collectives.h>
#include <strata/nn/data_parallel.h>
#include <strata/nn/linear.h>
#include <strata/optim/sgd.h>

#include "../helpers.h"

namespace strata::testing::ddp_training {

inline int rank() { return distributed::get_rank(); }
inline int world() { return distributed::get_world_size(); }

constexpr int64_t kRowsPerRank = 4;
constexpr int kSteps = 5;
// 128 bytes: the float32 Mlp's gradients land in five buckets, the float64 one's in six.
constexpr double kSmallCapMb = 128.0 / (1024 * 1024);

// 6 -> 8 -> 8 -> 3 with tanh between; the layers are reachable so tests can hook their outputs.
struct MlpImpl : nn::Module {
  MlpImpl() : Module("Mlp") {
    fc1 = register_module("fc1", nn::Linear(6, 8));
    fc2 = register_module("fc2", nn::Linear(8, 8));
    fc3 = register_module("fc3", nn::Linear(8, 3));
  }
  Tensor forward(const Tensor& x) { return fc3(tanh(fc2(tanh(fc1(x))))); }
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
STRATA_MODULE(Mlp);

// Initialised from `seed` on the CPU, then moved: the same values on every device.
inline Mlp make_mlp(uint64_t seed, ScalarType dtype, Device device = Device(kCPU)) {
  manual_seed(seed);
  Mlp model;
  model->to(device, dtype);
  return model;
}

// The concatenated batch of step `step`, the same on every rank: x [world * rows, 6], y [world * rows, 3],
// drawn on the CPU and copied to `device`.
inline std::pair<Tensor, Tensor> full_batch(int step, ScalarType dtype, int64_t rows = kRowsPerRank,
                                            Device device = Device(kCPU)) {
  Generator gen(1000 + step);
  Tensor x = randn({world() * rows, 6}, dtype, &gen);
  Tensor y = randn({world() * rows, 3}, dtype, &gen);
  return {x.to(device), y.to(device)};
}

// This rank's share of a concatenated batch.
inline Tensor my_rows(const Tensor& t) {
  const int64_t rows = t.size(0) / world();
  return t.narrow(0, rank() * rows, rows);
}

// kSteps of SGD with momentum on the concatenated batches, or on this rank's share of them, on the model's device.
inline void train(Mlp& model, bool my_share_only) {
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  const Tensor& w = model->fc1->weight;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = full_batch(step, w.dtype(), kRowsPerRank, w.device());
    if (my_share_only) {
      x = my_rows(x);
      y = my_rows(y);
    }
    opt.zero_grad();
    mse_loss(model(x), y).backward();
    opt.step();
  }
}

// max over tensors of |a - b| / |b| (2-norms), on the host: a and b may be on different devices.
inline double max_relative_error(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  NoGradGuard no_grad;
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, (a[i].cpu() - b[i].cpu()).norm().item<double>() / b[i].cpu().norm().item<double>());
  return worst;
}

// Data-parallel training on `device` against single-process training on the CPU: each rank starts from its own
// seed, DDP copies rank 0's parameters, which the reference starts from.
inline void expect_matches_single_process(ScalarType dtype, double tolerance, Device device = Device(kCPU)) {
  Mlp reference = make_mlp(7, dtype);
  Mlp model = make_mlp(7 + rank(), dtype, device);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = kSmallCapMb});
  EXPECT_GE(ddp.buckets().size(), 5u);
  train(model, /*my_share_only=*/true);
  train(reference, /*my_share_only=*/false);
  EXPECT_LE(max_relative_error(model->parameters(), reference->parameters()), tolerance);
}

}  // namespace strata::testing::ddp_training
