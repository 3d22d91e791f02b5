// GradScaler across processes under mpirun -np 1, 2 and 4: an overflow on one rank makes every rank of the
// scaler's group skip (DDP), and an inf in one pipeline stage's gradients makes every stage and replica skip the
// same step, so pipelined training with a scaler equals one process with one in every layout; the engine's
// scale survives its checkpoint.

#include <cmath>

#include <strata/nn/data_parallel.h>
#include <strata/optim/grad_scaler.h>

#include "pipe_training.h"
#include "shared_dir.h"

namespace dist = strata::distributed;
using namespace strata;
using namespace strata::testing::pipe_training;

namespace {

// The parameter whose gradient the tests poison: the middle Linear of mlp_layers(), on one stage only.
constexpr const char* kPoisoned = "4.weight";
constexpr int kPoisonedStep = 1;

// Makes the gradient of `module`'s parameter kPoisoned, where it holds it, inf while *step == kPoisonedStep.
void poison(const nn::Module& module, const int* step) {
  for (const auto& [name, p] : module.named_parameters())
    if (name == kPoisoned)
      p.register_hook([step](const Tensor& grad) { return *step == kPoisonedStep ? grad * INFINITY : grad; });
}

}  // namespace

TEST(GradScalerDist, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  const int world = dist::get_world_size(), rank = dist::get_rank();
  auto model = std::make_shared<nn::Module>("Bare");
  model->register_parameter("w", full({4}, 1.0, kDouble));
  Tensor w = model->parameters()[0];
  nn::DistributedDataParallel ddp(model);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.5));
  optim::GradScaler scaler(optim::GradScalerOptions().init_scale(64).process_group(dist::get_world_group()));
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    scaler.scale(w.sum()).backward();      // DDP averages the gradients in backward
    if (step == 1 && rank == world - 1) {  // after DDP's all-reduce: this rank alone overflows
      NoGradGuard no_grad;
      w.mutable_grad()[0].fill_(INFINITY);
    }
    EXPECT_EQ(scaler.step(sgd), step != 1) << "step " << step;
    scaler.update();
  }
  // Two steps of -0.5 on every rank; the scale halved once.
  EXPECT_VALUES(w, {0, 0, 0, 0});
  EXPECT_EQ(scaler.get_scale(), 32);
}

// Pipelined SGD with the engine's scaler against one process with its own, the same gradient poisoned at the
// same step in both: every rank skips it, and the scales and parameters agree in every layout.
TEST(GradScalerDist, AnInfInOneStageSkipsTheStepOnEveryStageAndReplica) {
  const auto scaler_options = optim::GradScalerOptions().init_scale(1024).growth_interval(2);
  for (auto [stages, replicas] : layouts()) {
    SCOPED_TRACE(::testing::Message() << stages << " stages x " << replicas << " replicas");
    int step = 0;
    pipe::PipelineParallelGrid grid(stages);
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    model->to(kDouble);
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = kMicroBatches, .grad_scaler = scaler_options});
    poison(*model, &step);

    pipe::PipelineModule reference(mlp_layers(), 1, 0, module_options());
    reference.to(kDouble);
    poison(reference, &step);
    optim::SGD reference_sgd(reference.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    optim::GradScaler reference_scaler(scaler_options);

    for (; step < 4; ++step) {
      const Tensor before = model->parameters().at(0).clone();
      auto [x, y] = whole_batch(step, replicas, kDouble);
      const double loss = engine.train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
      reference_sgd.zero_grad();
      Tensor reference_loss = reference.compute_loss(reference.forward({x}), {y});
      reference_scaler.scale(reference_loss).backward();
      EXPECT_EQ(reference_scaler.step(reference_sgd), step != kPoisonedStep);
      reference_scaler.update();
      EXPECT_NEAR(loss, reference_loss.item<double>(), 1e-12 * std::abs(reference_loss.item<double>()));
      EXPECT_EQ(engine.grad_scaler()->get_scale(), reference_scaler.get_scale()) << "step " << step;
      // Every stage skipped the poisoned step, not only the one holding the inf.
      EXPECT_EQ(strata::testing::same_tensor(model->parameters().at(0), before), step == kPoisonedStep)
          << "step " << step;
    }
    EXPECT_EQ(reference_scaler.get_scale(), 1024);  // halved once, doubled after steps 2 and 3
    EXPECT_LE(max_relative_error(*model, reference), 1e-12);
  }
}

TEST(GradScalerDist, TheEnginesScaleSurvivesItsCheckpoint) {
  const strata::testing::SharedTempDir shared("strata_scaler_ckpt");
  const std::string& dir = shared.path();
  const int stages = std::min(dist::get_world_size(), 2), replicas = dist::get_world_size() / stages;
  pipe::PipelineParallelGrid grid(stages);
  auto make_engine = [&](std::optional<optim::GradScalerOptions> scaler) {
    auto model = std::make_shared<pipe::PipelineModule>(mlp_layers(), grid, module_options());
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
    return std::make_unique<pipe::PipelineEngine>(
        model, grid, sgd, pipe::PipelineEngineOptions{.micro_batches = kMicroBatches, .grad_scaler = scaler});
  };
  auto engine = make_engine(optim::GradScalerOptions().init_scale(8).growth_interval(3));
  for (int step = 0; step < 2; ++step) {
    auto [x, y] = whole_batch(step, replicas, kFloat);
    engine->train_batch(micro_batches(x, y, grid.get_data_parallel_id()));
  }
  ASSERT_EQ(engine->grad_scaler()->growth_tracker(), 2);
  engine->save_checkpoint(dir);

  auto resumed = make_engine(optim::GradScalerOptions());
  resumed->load_checkpoint(dir);
  EXPECT_TRUE(strata::testing::same_state(resumed->grad_scaler()->state_dict(), engine->grad_scaler()->state_dict()));
  auto [x, y] = whole_batch(2, replicas, kFloat);
  EXPECT_EQ(engine->train_batch(micro_batches(x, y, grid.get_data_parallel_id())),
            resumed->train_batch(micro_batches(x, y, grid.get_data_parallel_id())));
  EXPECT_EQ(resumed->grad_scaler()->get_scale(), 16);  // the third clean step since the scale was 8

  // A checkpoint without a scaler does not silently start a fresh scale.
  make_engine(std::nullopt)->save_checkpoint(dir);
  EXPECT_THROW_MSG(resumed->load_checkpoint(dir), "was saved without a grad_scaler");
  EXPECT_THROW_MSG(make_engine(optim::GradScalerOptions().process_group(dist::get_world_group())),
                   "leave grad_scaler's process_group unset");
}
