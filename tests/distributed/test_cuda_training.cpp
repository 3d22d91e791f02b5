// Data parallel and the pipeline engine with CUDA tensors, under mpirun like the rest of the distributed tests:
// the same comparisons with single-process training on the CPU as test_ddp.cpp and test_pipe_engine.cpp (their
// helpers, with the model on this rank's GPU, which init() made current: local rank % device_count()). With
// fewer GPUs than ranks the group's CUDA backend stages through the host. Every rank skips alike without a GPU.

#include <strata/tensor/cuda.h>

#include "ddp_training.h"
#include "pipe_training.h"
#include "shared_dir.h"

namespace dist = strata::distributed;
using namespace strata;
namespace dp = strata::testing::ddp_training;
namespace pp = strata::testing::pipe_training;

TEST(CudaDDP, MatchesSingleProcessTrainingFloat64) {
  STRATA_REQUIRE_CUDA();
  dp::expect_matches_single_process(kDouble, 1e-12, strata::testing::gpu());
}

TEST(CudaDDP, MatchesSingleProcessTrainingFloat32) {
  STRATA_REQUIRE_CUDA();
  dp::expect_matches_single_process(kFloat, 1e-5, strata::testing::gpu());
}

// The flags that say which parameters got a gradient travel with the bucket and are read on the host.
TEST(CudaDDP, UnusedParametersCountAsZerosAndGradientsStayOnTheGpu) {
  STRATA_REQUIRE_CUDA();
  const Device gpu = strata::testing::gpu();
  for (double cap : {25.0, 1e-6}) {
    auto m = std::make_shared<nn::Module>("Bare");
    const Tensor used = m->register_parameter("used", ones({2}, kDouble));
    const Tensor rank0_only = m->register_parameter("rank0_only", ones({2}, kDouble));
    const Tensor never = m->register_parameter("never", ones({2}, kDouble));
    m->to(gpu);
    nn::DistributedDataParallel ddp(m, {.bucket_cap_mb = cap});
    Tensor loss = (used * (dp::rank() + 1)).sum();
    if (dp::rank() == 0) loss = loss + (rank0_only * 3).sum();
    loss.backward();
    const double mean = (dp::world() + 1) / 2.0, rank0_share = 3.0 / dp::world();
    EXPECT_EQ(used.grad().device(), gpu);
    EXPECT_VALUES(used.grad(), {mean, mean});
    EXPECT_VALUES(rank0_only.grad(), {rank0_share, rank0_share});
    EXPECT_FALSE(never.grad().defined());
  }
}

TEST(CudaDDP, AModuleOnTwoDevicesIsAnError) {
  STRATA_REQUIRE_CUDA();
  dp::Mlp model = dp::make_mlp(7, kFloat);
  model->fc3->to(strata::testing::gpu());
  EXPECT_THROW_MSG(nn::DistributedDataParallel{model},
                   "DistributedDataParallel: the module's parameters are on more than one device (fc1.weight on cpu, "
                   "fc3.weight on cuda:");
}

TEST(CudaPipeEngine, MatchesSingleProcessTraining) {
  STRATA_REQUIRE_CUDA();
  const Device gpu = strata::testing::gpu();
  pp::expect_matches_single_process({.layers = pp::mlp_layers(), .device = gpu});
  pp::expect_matches_single_process({.layers = pp::mlp_layers(), .dtype = kFloat, .tolerance = 1e-5, .device = gpu});
  pp::expect_matches_single_process({.layers = pp::tied_layers(), .device = gpu});
  pp::expect_matches_single_process({.layers = pp::tuple_layers(), .device = gpu});
  pp::expect_matches_single_process({.layers = pp::mlp_layers(), .checkpoint_interval = 2, .device = gpu});
  pp::expect_matches_single_process({.layers = pp::tied_layers(), .schedule = "gpipe", .device = gpu});
}

// Saved from the GPU stages, loaded by a second engine on the GPU (files are read to the CPU): the same values
// and optimizer state, and the next step agrees.
TEST(CudaPipeEngine, CheckpointsLoadOntoTheStageDevice) {
  STRATA_REQUIRE_CUDA();
  const Device gpu = strata::testing::gpu();
  const strata::testing::SharedTempDir shared("strata_cuda_pipe_ckpt");
  const std::string& dir = shared.path();
  for (auto [stages, replicas] : pp::layouts()) {
    pipe::PipelineParallelGrid grid(stages);
    auto make = [&] {
      auto model = std::make_shared<pipe::PipelineModule>(pp::tied_layers(), grid, pp::module_options());
      model->to(gpu, kDouble);
      return model;
    };
    auto model = make(), model2 = make();
    auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    auto sgd2 = std::make_shared<optim::SGD>(model2->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = pp::kMicroBatches});
    pipe::PipelineEngine engine2(model2, grid, sgd2, {.micro_batches = pp::kMicroBatches});
    auto [x, y] = pp::whole_batch(0, replicas, kDouble);
    engine.train_batch(pp::micro_batches(x, y, grid.get_data_parallel_id()));
    engine.save_checkpoint(dir);
    engine2.load_checkpoint(dir);
    EXPECT_EQ(pp::max_relative_error(*model2, *model), 0);
    for (const Tensor& p : model2->parameters()) EXPECT_EQ(p.device(), gpu);
    for (const auto& [key, t] : sgd2->state_dict()) {
      if (key.starts_with("state.")) {
        EXPECT_EQ(t.device(), gpu) << key;
      }
    }
    auto [x1, y1] = pp::whole_batch(1, replicas, kDouble);
    const double loss = engine.train_batch(pp::micro_batches(x1, y1, grid.get_data_parallel_id()));
    EXPECT_NEAR(engine2.train_batch(pp::micro_batches(x1, y1, grid.get_data_parallel_id())), loss,
                1e-12 * std::abs(loss));
    EXPECT_LE(pp::max_relative_error(*model2, *model), 1e-12);
  }
}

// A CPU stage next to GPU stages would send through one backend and receive through another: every rank throws.
TEST(CudaPipeEngine, StagesOnDifferentKindsOfDeviceAreAnError) {
  STRATA_REQUIRE_CUDA();
  if (dist::get_world_size() % 2 != 0) GTEST_SKIP() << "needs an even world size for two stages";
  pipe::PipelineParallelGrid grid(2);
  auto model = std::make_shared<pipe::PipelineModule>(pp::mlp_layers(), grid, pp::module_options());
  if (grid.get_stage_id() == 1) model->to(strata::testing::gpu());
  auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
  EXPECT_THROW_MSG(
      pipe::PipelineEngine(model, grid, sgd),
      "PipelineEngine: some ranks hold their stage's modules on the CPU and others on a GPU (this is stage " +
          std::to_string(grid.get_stage_id()));
}
