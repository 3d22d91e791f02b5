// The pipeline engine under mpirun -np 1, 2 and 4: for every stages x replicas layout that fills the world
// (2x1, 4x1, 2x2, and the pure data-parallel and single-stage ones), several steps of pipelined training
// give the same losses and parameters as single-process training on the whole batch, which every rank
// computes itself. The same with tied layers, activation checkpointing, the GPipe schedule and tuple
// activations holding integer and no-grad tensors; then evaluation, checkpoints across stage counts,
// variable shapes and the errors.

#include <filesystem>

#include <strata/distributed/collectives.h>
#include <strata/nn/activation.h>
#include <strata/nn/linear.h>
#include <strata/optim/sgd.h>
#include <strata/pipe/engine.h>

#include "../helpers.h"

namespace dist = strata::distributed;
using namespace strata;

namespace {

constexpr int kMicroBatches = 4;
constexpr int64_t kRows = 3;  // rows per micro-batch
constexpr int kSteps = 3;

// Every (stages, replicas) layout of this world.
std::vector<std::pair<int, int>> layouts() {
  std::vector<std::pair<int, int>> out;
  const int world = dist::get_world_size();
  for (int stages = 1; stages <= world; ++stages)
    if (world % stages == 0) out.push_back({stages, world / stages});
  return out;
}

// 6 -> 12 -> 12 -> 12 -> 12 -> 3 with tanh between: nine layers.
std::vector<pipe::Layer> mlp_layers() {
  return {pipe::LayerSpec::of<nn::Linear>(6, 12), pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 12), [](const Tensor& x) { return tanh(x); },
          pipe::LayerSpec::of<nn::Linear>(12, 12), pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 12), [](const Tensor& x) { return tanh(x); },
          pipe::LayerSpec::of<nn::Linear>(12, 3)};
}

// The first layer's weight W (6 x 6) is reused by layer 8 as x -> x W: ten layers, the tie spans the pipeline.
std::vector<pipe::Layer> tied_layers() {
  auto proj = pipe::LayerSpec::of<nn::Linear>(6, 6, false);
  auto transposed = [](nn::Module& m, const tensor_list& x) {
    return tensor_list{matmul(x.at(0), dynamic_cast<nn::LinearImpl&>(m).weight)};
  };
  return {pipe::TiedLayerSpec("proj", proj), pipe::LayerSpec::of<nn::Linear>(6, 12), pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 12), pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(12, 6), pipe::LayerSpec::of<nn::Tanh>(),
          pipe::LayerSpec::of<nn::Linear>(6, 6), pipe::TiedLayerSpec("proj", proj, transposed),
          pipe::LayerSpec::of<nn::Linear>(6, 3)};
}

// A linear layer that passes the rest of a tuple through.
pipe::LayerSpec tuple_linear(int64_t in, int64_t out) {
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
std::vector<pipe::Layer> tuple_layers() {
  pipe::LayerSpec split("Split", [] {
    return pipe::BuiltLayer{nullptr, [](const tensor_list& x) {
                              Tensor h = x.at(0);
                              return tensor_list{h, gt(h.detach(), 0), full({h.size(0), 1}, 0.5, h.dtype())};
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
  return {pipe::LayerSpec::of<nn::Linear>(6, 12), split, tuple_linear(12, 12), tuple_linear(12, 12),
          tuple_linear(12, 12), tuple_linear(12, 12), merge, pipe::LayerSpec::of<nn::Linear>(12, 3)};
}

pipe::PipelineModuleOptions module_options(int checkpoint_interval = 0) {
  return {.partition_method = "uniform", .loss_fn = pipe::cross_entropy_loss, .seed_layers = true,
          .base_seed = 42, .activation_checkpoint_interval = checkpoint_interval};
}

// The whole batch of a step, the same on every rank: replica d owns rows [d M R, (d + 1) M R).
std::pair<Tensor, Tensor> whole_batch(int step, int replicas, ScalarType dtype, int64_t rows = kRows) {
  Generator gen(500 + step);
  const int64_t n = replicas * kMicroBatches * rows;
  return {randn({n, 6}, dtype, &gen), randint(3, {n}, kLong, &gen)};
}

// Yields this replica's micro-batches of a whole batch.
pipe::DataIterator micro_batches(const Tensor& x, const Tensor& y, int replica, int64_t rows = kRows) {
  auto next = std::make_shared<int>(0);
  return [=]() -> std::optional<pipe::MicroBatch> {
    if (*next == kMicroBatches) return std::nullopt;
    const int64_t start = (replica * kMicroBatches + (*next)++) * rows;
    return pipe::MicroBatch{{x.narrow(0, start, rows)}, {y.narrow(0, start, rows)}};
  };
}

// |a - b| / |b| (2-norms), the worst over this stage's parameters against the same names in the reference.
double max_relative_error(const nn::Module& stage, const nn::Module& reference) {
  NoGradGuard no_grad;
  const nn::StateDict ref = reference.state_dict();
  double worst = 0;
  for (const auto& [name, p] : stage.named_parameters()) {
    EXPECT_TRUE(ref.count(name)) << name;
    if (!ref.count(name)) continue;
    worst = std::max(worst, (p - ref.at(name)).norm().item<double>() / ref.at(name).norm().item<double>());
  }
  return worst;
}

struct Run {
  std::vector<pipe::Layer> layers;
  ScalarType dtype = kDouble;
  double tolerance = 1e-12;
  std::string schedule = "train";
  int checkpoint_interval = 0;
};

// kSteps of SGD with momentum, pipelined in every layout of this world and in one process on the whole batch.
void expect_matches_single_process(const Run& run) {
  for (auto [stages, replicas] : layouts()) {
    SCOPED_TRACE(::testing::Message() << stages << " stages x " << replicas << " replicas, " << run.schedule);
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(run.layers, grid, module_options(run.checkpoint_interval));
    model->to(run.dtype);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches, .schedule = run.schedule});

    pipe::PipelineModule reference(run.layers, 1, 0, module_options());
    reference.to(run.dtype);
    optim::SGD reference_sgd(reference.parameters(), optim::SGDOptions(0.1).momentum(0.9));

    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = whole_batch(step, replicas, run.dtype);
      const double loss = engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
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

}  // namespace

TEST(PipeEngine, MatchesSingleProcessTrainingFloat64) { expect_matches_single_process({mlp_layers()}); }

TEST(PipeEngine, MatchesSingleProcessTrainingFloat32) {
  expect_matches_single_process({mlp_layers(), kFloat, 1e-5});
}

TEST(PipeEngine, MatchesWithTiedLayers) {
  expect_matches_single_process({tied_layers()});
  expect_matches_single_process({tied_layers(), kFloat, 1e-5});
}

TEST(PipeEngine, MatchesWithActivationCheckpointing) {
  expect_matches_single_process({.layers = mlp_layers(), .checkpoint_interval = 2});
  expect_matches_single_process({.layers = tied_layers(), .checkpoint_interval = 3});
}

TEST(PipeEngine, MatchesWithTheGPipeSchedule) {
  expect_matches_single_process({.layers = mlp_layers(), .schedule = "gpipe"});
  expect_matches_single_process({.layers = tied_layers(), .dtype = kFloat, .tolerance = 1e-5, .schedule = "gpipe"});
}

TEST(PipeEngine, MatchesWithTupleActivationsOfIntegerAndNoGradTensors) {
  expect_matches_single_process({tuple_layers()});
}

TEST(PipeEngine, EvalBatchMatchesSingleProcessAndReturnsOutputsOnTheLastStage) {
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    model->to(kDouble);
    pipe::PipelineEngine engine(model, grid, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)),
                                {.micro_batches = kMicroBatches});
    pipe::PipelineModule reference(mlp_layers(), 1, 0, module_options());
    reference.to(kDouble);

    auto [x, y] = whole_batch(0, replicas, kDouble);
    std::vector<tensor_list> outputs;
    const double loss = engine.eval_batch(micro_batches(x, y, grid.get_data_parallel_id()), &outputs);
    Tensor logits = reference.forward({x})[0];
    EXPECT_NEAR(loss, reference.compute_loss({logits}, {y}).item<double>(), 1e-12);
    EXPECT_FALSE(model->is_training());
    if (!grid.is_last_stage()) {
      EXPECT_TRUE(outputs.empty());
      continue;
    }
    ASSERT_EQ(outputs.size(), size_t{kMicroBatches});
    for (int k = 0; k < kMicroBatches; ++k) {
      const int64_t start = (grid.get_data_parallel_id() * kMicroBatches + k) * kRows;
      EXPECT_ALLCLOSE(outputs[k].at(0), logits.narrow(0, start, kRows), 1e-12, 1e-12);
      EXPECT_FALSE(outputs[k].at(0).requires_grad());
    }
  }
}

// Without seed_layers every rank initialises differently; the engine starts each replica from replica 0's values.
TEST(PipeEngine, ReplicasStartFromReplicaZero) {
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    pipe::PipelineModuleOptions options = module_options();
    options.seed_layers = false;
    manual_seed(1000 + dist::get_rank());
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, options);
    pipe::PipelineEngine engine(model, grid, std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1)));
    for (const Tensor& p : model->parameters()) {
      Tensor low = p.detach().clone(), high = p.detach().clone();
      dist::all_reduce(low, dist::ReduceOp::MIN, grid.get_data_parallel_group());
      dist::all_reduce(high, dist::ReduceOp::MAX, grid.get_data_parallel_group());
      EXPECT_TRUE(strata::testing::same_tensor(low, high)) << stages << " stages x " << replicas << " replicas";
    }
  }
}

// Trained in every layout, saved, then loaded into one process: the same parameters as training there.
TEST(PipeEngine, CheckpointsLoadIntoAnyNumberOfStages) {
  std::string dir = (std::filesystem::temp_directory_path() / "strata_pipe_ckpt_XXXXXX").string();
  if (dist::get_rank() == 0) {
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
  }
  dist::broadcast_object(dir, 0);
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(tied_layers(), grid, module_options());
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches});
    auto [x, y] = whole_batch(0, replicas, kFloat);
    engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
    engine.save_checkpoint(dir);

    pipe::PipelineModule whole(tied_layers(), 1, 0, module_options());
    whole.load_state_dir(dir);
    EXPECT_EQ(max_relative_error(*model, whole), 0);

    // The same layout resumes with its optimizer state: one more step on both gives the same values.
    auto model2 = std::make_shared<pipe::PipelineModule>(tied_layers(), grid, module_options());
    auto sgd2 = std::make_shared<optim::SGD>(model2->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine2(model2, grid, sgd2, {.micro_batches = kMicroBatches});
    engine2.load_checkpoint(dir);
    auto [x1, y1] = whole_batch(1, replicas, kFloat);
    EXPECT_EQ(engine.train_batch(micro_batches(x1, y1, grid.get_data_parallel_id())),
              engine2.train_batch(micro_batches(x1, y1, grid.get_data_parallel_id())));
    EXPECT_EQ(max_relative_error(*model2, *model), 0);
  }
  dist::barrier();
  if (dist::get_rank() == 0) std::filesystem::remove_all(dir);
}

// Micro-batches of 3 rows, then of 2: the shapes travel again when they change.
TEST(PipeEngine, DynamicShapesLetActivationsChangeBetweenBatches) {
  for (auto [stages, replicas] : layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    model->to(kDouble);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches, .dynamic_shapes = true});
    pipe::PipelineModule reference(mlp_layers(), 1, 0, module_options());
    reference.to(kDouble);
    optim::SGD reference_sgd(reference.parameters(), optim::SGDOptions(0.1));
    for (int64_t rows : {3, 2, 2, 4}) {
      auto [x, y] = whole_batch(static_cast<int>(rows), replicas, kDouble, rows);
      const double loss = engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id(), rows));
      reference_sgd.zero_grad();
      Tensor reference_loss = reference.compute_loss(reference.forward({x}), {y});
      reference_loss.backward();
      reference_sgd.step();
      EXPECT_NEAR(loss, reference_loss.item<double>(), 1e-12);
    }
    EXPECT_LE(max_relative_error(*model, reference), 1e-12);
  }
}

// Without dynamic_shapes, a change is an error on both sides of the transfer (layouts of two stages, where
// every rank is on one side).
TEST(PipeEngine, ShapeChangeWithoutDynamicShapesIsAnErrorOnBothSides) {
  if (dist::get_world_size() % 2 != 0) GTEST_SKIP() << "needs an even world size for two stages";
  pipe::PipelineParallelGrid grid(2);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches});
  const int replicas = grid.get_data_parallel_world_size();
  auto [x, y] = whole_batch(0, replicas, kFloat);
  engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
  auto [x2, y2] = whole_batch(1, replicas, kFloat, 2);
  EXPECT_THROW_MSG(engine.train_batch(micro_batches(x2, y2, grid.get_data_parallel_id(), 2)),
                   "the activations stage 0 sends to stage 1 changed from [Float [3, 12] grad] to "
                   "[Float [2, 12] grad] at micro-batch 0; set PipelineEngineOptions::dynamic_shapes = true");
  dist::barrier();
}

// Layouts of one stage only: there every rank draws from its iterator, so every rank sees the error.
TEST(PipeEngine, DataIteratorThatRunsDryIsAnError) {
  pipe::PipelineParallelGrid grid(1);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches});
  auto [x, y] = whole_batch(0, 1, kFloat);
  auto three = [it = micro_batches(x, y, 0), n = 0]() mutable -> std::optional<pipe::MicroBatch> {
    return n++ < 3 ? it() : std::nullopt;
  };
  EXPECT_THROW_MSG(engine.train_batch(three), "the data iterator ran dry after 3 of 4 micro-batches");
}

TEST(PipeEngine, ChecksItsArguments) {
  pipe::PipelineParallelGrid grid(1);
  auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.micro_batches = 0}), "micro_batches must be at least 1");
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, sgd, {.schedule = "zigzag"}),
                   "schedule must be \"train\" or \"gpipe\", got \"zigzag\"");
  pipe::PipelineModule other(mlp_layers(), 1, 0, module_options());
  auto foreign = std::make_shared<optim::SGD>(other.parameters(), optim::SGDOptions(0.1));
  EXPECT_THROW_MSG(pipe::PipelineEngine(model, grid, foreign), "that is not a parameter of stage 0's module");
  auto stage1 = std::make_shared<pipe::PipelineModule>(mlp_layers(), 2, 1, module_options());
  EXPECT_THROW_MSG(pipe::PipelineEngine(stage1, grid, sgd), "the module was built as stage 1 of 2 stages");
  auto no_loss = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, pipe::PipelineModuleOptions{});
  pipe::PipelineEngine engine(no_loss, grid, std::make_shared<optim::SGD>(no_loss->parameters(), optim::SGDOptions(0.1)));
  EXPECT_THROW_MSG(engine.train_batch([] { return std::optional<pipe::MicroBatch>(); }), "has no loss_fn");
}
