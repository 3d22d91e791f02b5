#pragma once
// What the pipeline engine tests share (test_pipe_engine.cpp on the CPU, test_cuda_training.cpp on a GPU): the
// layouts of this world, the layer lists, the batches every rank can rebuild, and the comparison of pipelined
// training with single-process training.

#include <strata/distributed/collectives.h>
#include <strata/nn/activation.h>
#include <strata/nn/linear.h>
#include <strata/optim/sgd.h>
#include <strata/pipe/engine.h>

#include "../helpers.h"

namespace strata::testing::pipe_training {

constexpr int kMicroBatches = 4;
constexpr int64_t kRows = 3;  // rows per micro-batch
constexpr int kSteps = 3;

// Every (stages, replicas) layout of this world with at most 4 stages (the layer lists have 8 or 9 pieces).
inline std::vector<std::pair<int, int>> layouts() {
  std::vector<std::pair<int, int>> out;
  const int world = distributed::get_world_size();
  for (int stages = 1; stages <= std::min(world, 4); ++stages)
    if (world % stages == 0) out.push_back({stages, world / stages});
  return out;
}

// 6 -> 12 -> 12 -> 12 -> 12 -> 3 with tanh between: nine layers.
inline std::vector<pipe::Layer> mlp_layers() {
  return {pipe::LayerSpec::of<nn::Linear>(6, 12),  pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 12), [](const Tensor& x) { return tanh(x); },
          pipe::LayerSpec::of<nn::Linear>(12, 12), pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 12), [](const Tensor& x) { return tanh(x); },
          pipe::LayerSpec::of<nn::Linear>(12, 3)};
}

// The first layer's weight W (6 x 6) is reused by layer 8 as x -> x W: ten layers, the tie spans the pipeline.
inline std::vector<pipe::Layer> tied_layers() {
  auto proj = pipe::LayerSpec::of<nn::Linear>(6, 6, false);
  auto transposed = [](nn::Module& m, const tensor_list& x) {
    return tensor_list{matmul(x.at(0), dynamic_cast<nn::LinearImpl&>(m).weight)};
  };
  return {pipe::TiedLayerSpec("proj", proj),
          pipe::LayerSpec::of<nn::Linear>(6, 12),
          pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 12),
          pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 6),
          pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(6, 6),
          pipe::TiedLayerSpec("proj", proj, transposed),
          pipe::LayerSpec::of<nn::Linear>(6, 3)};
}

// For models cut into stages x chunks pieces: `pairs` of (Linear, Tanh), so that a uniform partition into up
// to 8 pieces gives each piece a Linear; with `tied`, the first layer's weight W (6 x 6) comes back as x -> x W
// before the last Linear.
inline std::vector<pipe::Layer> deep_layers(bool tied, int pairs = 8) {
  auto proj = pipe::LayerSpec::of<nn::Linear>(6, 6, false);
  auto transposed = [](nn::Module& m, const tensor_list& x) {
    return tensor_list{matmul(x.at(0), dynamic_cast<nn::LinearImpl&>(m).weight)};
  };
  std::vector<pipe::Layer> layers;
  if (tied) layers.push_back(pipe::TiedLayerSpec("proj", proj));
  for (int i = 0; i < pairs; ++i) {
    layers.push_back(pipe::LayerSpec::of<nn::Linear>(6, 6));
    layers.push_back(pipe::LayerSpec::of<nn::Tanh>());
  }
  if (tied) layers.push_back(pipe::TiedLayerSpec("proj", proj, transposed));
  layers.push_back(pipe::LayerSpec::of<nn::Linear>(6, 3));
  return layers;
}

// A linear layer that passes the rest of a tuple through.
inline pipe::LayerSpec tuple_linear(int64_t in, int64_t out) {
  return pipe::LayerSpec("TupleLinear", [in, out] {
    nn::Linear fc(in, out);
    return pipe::BuiltLayer{fc.ptr(), [fc](const tensor_list& x) {
                              tensor_list y = x;
                              y.at(0) = tanh(fc(x.at(0)));
                              return y;
                            }};
  });
}

// Activations become (h, mask: bool, scale: float without grad) after layer 1 and are merged again at layer 6.
inline std::vector<pipe::Layer> tuple_layers() {
  pipe::LayerSpec split("Split", [] {
    return pipe::BuiltLayer{nullptr, [](const tensor_list& x) {
                              Tensor h = x.at(0);
                              return tensor_list{h, gt(h.detach(), 0), full({h.size(0), 1}, 0.5, h.options())};
                            }};
  });
  pipe::LayerSpec merge("Merge", [] {
    return pipe::BuiltLayer{nullptr, [](const tensor_list& x) {
                              EXPECT_EQ(x.size(), 3u);
                              EXPECT_EQ(x.at(1).dtype(), kBool);
                              EXPECT_FALSE(x.at(2).requires_grad());
                              return tensor_list{x.at(0) * x.at(1).to(x.at(0).dtype()) * x.at(2)};
                            }};
  });
  return {pipe::LayerSpec::of<nn::Linear>(6, 12),
          split,
          tuple_linear(12, 12),
          tuple_linear(12, 12),
          tuple_linear(12, 12),
          tuple_linear(12, 12),
          merge,
          pipe::LayerSpec::of<nn::Linear>(12, 3)};
}

inline pipe::PipelineModuleOptions module_options(int checkpoint_interval = 0, int chunks = 1, bool v_shape = false) {
  return {.partition_method = "uniform",
          .loss_fn = pipe::cross_entropy_loss,
          .seed_layers = true,
          .base_seed = 42,
          .activation_checkpoint_interval = checkpoint_interval,
          .chunks = chunks,
          .v_shape = v_shape};
}

// The whole batch of a step, the same on every rank: replica d owns rows [d M R, (d + 1) M R).
inline std::pair<Tensor, Tensor> whole_batch(int step, int replicas, ScalarType dtype, int64_t rows = kRows,
                                             int count = kMicroBatches) {
  Generator gen(500 + step);
  const int64_t n = replicas * count * rows;
  return {randn({n, 6}, dtype, &gen), randint(3, {n}, kLong, &gen)};
}

// Yields this replica's `count` micro-batches of a whole batch.
inline pipe::DataIterator micro_batches(const Tensor& x, const Tensor& y, int replica, int64_t rows = kRows,
                                        int count = kMicroBatches) {
  auto next = std::make_shared<int>(0);
  return [=]() -> std::optional<pipe::MicroBatch> {
    if (*next == count) return std::nullopt;
    const int64_t start = (replica * count + (*next)++) * rows;
    return pipe::MicroBatch{{x.narrow(0, start, rows)}, {y.narrow(0, start, rows)}};
  };
}

// |a - b| / |b| (2-norms), the worst over this stage's parameters against the same names in the reference,
// on the host (the stage may be on a GPU).
inline double max_relative_error(const nn::Module& stage, const nn::Module& reference) {
  NoGradGuard no_grad;
  const nn::StateDict ref = reference.state_dict();
  double worst = 0;
  for (const auto& [name, p] : stage.named_parameters()) {
    EXPECT_TRUE(ref.count(name)) << name;
    if (!ref.count(name)) continue;
    const Tensor r = ref.at(name).cpu();
    worst = std::max(worst, (p.cpu() - r).norm().item<double>() / r.norm().item<double>());
  }
  return worst;
}

struct Run {
  std::vector<pipe::Layer> layers;
  ScalarType dtype = kDouble;
  double tolerance = 1e-12;
  std::string schedule = "train";
  int checkpoint_interval = 0;
  Device device = Device(kCPU);  // of the pipelined model; the reference trains on the CPU
  int chunks = 1;                // model chunks per stage (interleaved, zb-interleaved, zb-v, dualpipe-v)
  bool v_shape = false;          // zb-v, dualpipe-v
  int micro_batches = kMicroBatches;
  // A schedule file to run instead of `schedule`, given the number of stages; none where empty.
  std::function<std::string(int stages)> schedule_file = {};
};

// kSteps of SGD with momentum, pipelined in every layout of this world (on run.device; the engine moves the
// CPU batches there) and in one process on the whole batch on the CPU.
inline void expect_matches_single_process(const Run& run) {
  for (auto [stages, replicas] : layouts()) {
    SCOPED_TRACE(::testing::Message() << stages << " stages x " << replicas << " replicas, " << run.schedule);
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(
        run.layers, grid, module_options(run.checkpoint_interval, run.chunks, run.v_shape));
    model->to(run.device, run.dtype);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine(model, grid, sgd,
                                {.micro_batches = run.micro_batches,
                                 .schedule = run.schedule,
                                 .schedule_file = run.schedule_file ? run.schedule_file(stages) : std::string()});

    pipe::PipelineModule reference(run.layers, 1, 0, module_options());
    reference.to(run.dtype);
    optim::SGD reference_sgd(reference.parameters(), optim::SGDOptions(0.1).momentum(0.9));

    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = whole_batch(step, replicas, run.dtype, kRows, run.micro_batches);
      const double loss =
          engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id(), kRows, run.micro_batches));
      reference_sgd.zero_grad();
      Tensor reference_loss = reference.compute_loss(reference.forward({x}), {y});
      reference_loss.backward();
      reference_sgd.step();
      EXPECT_NEAR(loss, reference_loss.item<double>(), run.tolerance * std::abs(reference_loss.item<double>()))
          << "step " << step;
    }
    EXPECT_LE(max_relative_error(*model, reference), run.tolerance);
    EXPECT_GT(engine.timings().instructions, 0);
    EXPECT_GT(engine.timings().compute(), 0);
  }
}

}  // namespace strata::testing::pipe_training
