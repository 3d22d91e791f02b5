// optim::ZeroRedundancyOptimizer under mpirun -np 1, 2 and 4: stages 1 (with DDP) and 2 (alone) train as one
// process does (SGD, Adam with amsgrad, AdamW with two param groups and a schedule, global-norm clipping),
// gradient accumulation at stage 2, the state per rank, state dicts that are the unsharded optimizer's, the
// pipeline engine over the grid's data-parallel group (every layout, 1F1B and zb-h1; stage 2 on one stage) with
// checkpoints that resume in another layout with or without ZeRO, and the errors.

#include <strata/nn/clip_grad.h>
#include <strata/optim/adam.h>
#include <strata/optim/grad_scaler.h>
#include <strata/optim/lr_scheduler.h>
#include <strata/optim/zero_redundancy.h>

#include "ddp_training.h"
#include "pipe_training.h"
#include "shared_dir.h"

namespace dist = strata::distributed;
using namespace strata;
namespace ddp = strata::testing::ddp_training;
namespace pt = strata::testing::pipe_training;

namespace {

constexpr int kSteps = 3;

// Weights and biases in two param groups: the biases without weight decay.
std::vector<optim::OptimizerParamGroup> two_groups(const ddp::Mlp& model, const optim::OptimizerOptions& biases) {
  std::vector<Tensor> weights, others;
  for (const auto& [name, p] : model->named_parameters()) (name.ends_with("weight") ? weights : others).push_back(p);
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(weights);
  groups.emplace_back(others, biases);
  return groups;
}

// Trains `model` kSteps on the whole batch (reference) or on this rank's rows, clipping to norm 0.5 and stepping
// a StepLR schedule; returns the clipped norms. `clip` clips and returns the norm.
template <class Opt>
std::vector<double> train(ddp::Mlp& model, Opt& opt, bool my_rows, const std::function<double()>& clip) {
  optim::StepLR schedule(opt, /*step_size=*/2, /*gamma=*/0.5);
  std::vector<double> norms;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = ddp::full_batch(step, kDouble);
    if (my_rows) {
      x = ddp::my_rows(x);
      y = ddp::my_rows(y);
    }
    opt.zero_grad();
    mse_loss(model(x), y).backward();
    norms.push_back(clip());
    opt.step();
    schedule.step();
  }
  return norms;
}

// ZeRO at `stage` over optimizer T against T in one process: the same norms, parameters and state dict.
template <class T>
void expect_matches_single_process(int stage, const typename T::Options& options,
                                   const typename T::Options& bias_options) {
  SCOPED_TRACE(::testing::Message() << "stage " << stage);
  ddp::Mlp reference = ddp::make_mlp(7, kDouble);
  T reference_opt(two_groups(reference, bias_options), options);
  const std::vector<double> reference_norms =
      train(reference, reference_opt, false, [&] { return nn::utils::clip_grad_norm_(reference->parameters(), 0.5); });

  ddp::Mlp model = ddp::make_mlp(7 + ddp::rank(), kDouble);  // ZeRO copies rank 0's values
  std::optional<nn::DistributedDataParallel> ddp_model;
  optim::ZeroRedundancyOptimizer<T> opt(two_groups(model, bias_options), options,
                                        {.stage = stage, .bucket_cap_mb = ddp::kSmallCapMb});
  if (stage == 1) ddp_model.emplace(model, nn::DDPOptions{.bucket_cap_mb = ddp::kSmallCapMb});
  EXPECT_GE(opt.buckets().size(), 4u);
  const std::vector<double> norms = train(model, opt, true, [&] { return opt.clip_grad_norm_(0.5); });

  for (int step = 0; step < kSteps; ++step) EXPECT_NEAR(norms[step], reference_norms[step], 1e-12 * norms[step]);
  EXPECT_LE(ddp::max_relative_error(model->parameters(), reference->parameters()), 1e-12);
  // The state dict is the unsharded optimizer's.
  const optim::StateDict mine = opt.state_dict(), theirs = reference_opt.state_dict();
  ASSERT_EQ(mine.size(), theirs.size());
  for (const auto& [key, value] : theirs) {
    ASSERT_TRUE(mine.contains(key)) << key;
    EXPECT_TRUE(strata::testing::allclose(mine.at(key), value, 1e-12, 1e-15)) << key;
  }
}

// Says it updates elementwise but keeps the norm of each whole parameter: ZeRO must refuse its state.
class NormKeeper : public optim::Optimizer {
 public:
  using Options = optim::SGDOptions;
  static constexpr bool elementwise_update = true;
  NormKeeper(std::vector<optim::OptimizerParamGroup> groups, const Options& defaults)
      : Optimizer("NormKeeper", std::move(groups), defaults) {}
  void step() override {
    size_t i = 0;
    for (const optim::OptimizerParamGroup& group : param_groups())
      for (const Tensor& p : group.params()) state_[i++]["norm"] = p.grad().norm();
  }

 protected:
  std::vector<std::string> state_names(const optim::OptimizerOptions&) const override { return {"norm"}; }
};

// Updates each parameter by its norm and does not say it is elementwise.
class Unmarked : public NormKeeper {
 public:
  using NormKeeper::NormKeeper;
  static constexpr bool elementwise_update = false;
};

static_assert(optim::ElementwiseOptimizer<optim::SGD> && optim::ElementwiseOptimizer<optim::AdamW>);
static_assert(!optim::ElementwiseOptimizer<Unmarked>);  // ZeroRedundancyOptimizer<Unmarked> does not compile

}  // namespace

TEST(Zero, Stage1WithDDPAndStage2MatchSingleProcessSGD) {
  const auto sgd = optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01);
  for (int stage : {1, 2})
    expect_matches_single_process<optim::SGD>(stage, sgd, optim::SGDOptions(sgd).weight_decay(0));
}

TEST(Zero, Stage1WithDDPAndStage2MatchSingleProcessAdam) {
  const auto adam = optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.01);
  for (int stage : {1, 2}) expect_matches_single_process<optim::Adam>(stage, adam, optim::AdamOptions(adam).lr(0.02));
}

TEST(Zero, Stage1WithDDPAndStage2MatchSingleProcessAdamW) {
  const auto adamw = optim::AdamWOptions(0.01).weight_decay(0.1);
  for (int stage : {1, 2})
    expect_matches_single_process<optim::AdamW>(stage, adamw, optim::AdamWOptions(adamw).weight_decay(0).fused(true));
}

// Per rank the state is 1/D of the unsharded optimizer's, plus at most D - 1 padding elements per bucket.
TEST(Zero, OptimizerStatePerRankIsOneOverDOfTheWhole) {
  ddp::Mlp model = ddp::make_mlp(7, kDouble);
  optim::ZeroRedundancyOptimizer<optim::AdamW> opt(model->parameters(), optim::AdamWOptions(0.01),
                                                   {.bucket_cap_mb = ddp::kSmallCapMb});
  ddp::Mlp reference = ddp::make_mlp(7, kDouble);
  optim::AdamW whole(reference->parameters(), optim::AdamWOptions(0.01));
  auto [x, y] = ddp::full_batch(0, kDouble);
  mse_loss(model(x), y).backward();
  mse_loss(reference(x), y).backward();
  opt.step();
  whole.step();

  int64_t whole_numel = 0;
  for (const auto& [key, value] : whole.state_dict())
    if (key.ends_with("exp_avg") || key.ends_with("exp_avg_sq")) whole_numel += value.numel();
  const int64_t d = ddp::world(), buckets = static_cast<int64_t>(opt.buckets().size());
  EXPECT_GE(opt.state_numel() * d, whole_numel);
  EXPECT_LE(opt.state_numel() * d, whole_numel + 2 * (d - 1) * buckets);
  int64_t shard = 0;
  for (const optim::ZeroBucket& b : opt.buckets()) shard += b.shard_numel;
  EXPECT_EQ(opt.state_numel(), 2 * shard);
}

// Stage 2: two backwards accumulate into the shards (each parameter's grad() is freed as its bucket leaves);
// one step equals one process stepping on the sum.
TEST(Zero, Stage2AccumulatesAcrossBackwardsAndKeepsNoParameterGradients) {
  ddp::Mlp reference = ddp::make_mlp(7, kDouble);
  optim::AdamW reference_opt(reference->parameters(), optim::AdamWOptions(0.01));
  ddp::Mlp model = ddp::make_mlp(7, kDouble);
  optim::ZeroRedundancyOptimizer<optim::AdamW> opt(model->parameters(), optim::AdamWOptions(0.01),
                                                   {.stage = 2, .bucket_cap_mb = ddp::kSmallCapMb});
  for (int step = 0; step < 2; ++step) {
    auto [x0, y0] = ddp::full_batch(2 * step, kDouble);
    auto [x1, y1] = ddp::full_batch(2 * step + 1, kDouble);
    reference_opt.zero_grad();
    (mse_loss(reference(x0), y0) + mse_loss(reference(x1), y1)).backward();
    reference_opt.step();
    opt.zero_grad();
    mse_loss(model(ddp::my_rows(x0)), ddp::my_rows(y0)).backward();
    for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
    mse_loss(model(ddp::my_rows(x1)), ddp::my_rows(y1)).backward();
    opt.step();
  }
  EXPECT_LE(ddp::max_relative_error(model->parameters(), reference->parameters()), 1e-12);
}

// A state dict moves between ZeRO and the unsharded optimizer both ways, and training goes on identically.
TEST(Zero, StateDictsMoveBetweenZeroAndTheUnshardedOptimizer) {
  const auto adamw = optim::AdamWOptions(0.01).amsgrad(true);
  ddp::Mlp model = ddp::make_mlp(7, kDouble);
  optim::ZeroRedundancyOptimizer<optim::AdamW> opt(model->parameters(), adamw, {.stage = 2, .bucket_cap_mb = 1e-4});
  auto step = [](ddp::Mlp& m, optim::Optimizer& o, int i, bool mine) {
    auto [x, y] = ddp::full_batch(i, kDouble);
    o.zero_grad();
    mse_loss(m(mine ? ddp::my_rows(x) : x), mine ? ddp::my_rows(y) : y).backward();
    o.step();
  };
  step(model, opt, 0, true);
  const optim::StateDict saved = opt.state_dict();
  const nn::StateDict weights = model->state_dict();

  ddp::Mlp plain = ddp::make_mlp(8, kDouble);  // other values: the loads must replace them
  plain->load_state_dict(weights);
  optim::AdamW plain_opt(plain->parameters(), adamw);
  plain_opt.load_state_dict(saved);

  ddp::Mlp resumed = ddp::make_mlp(9, kDouble);
  resumed->load_state_dict(weights);
  optim::ZeroRedundancyOptimizer<optim::AdamW> resumed_opt(resumed->parameters(), adamw, {.stage = 1});
  resumed_opt.load_state_dict(plain_opt.state_dict());
  nn::DistributedDataParallel resumed_ddp(resumed);

  for (int i = 1; i < 3; ++i) {
    step(model, opt, i, true);
    step(plain, plain_opt, i, false);
    step(resumed, resumed_opt, i, true);
  }
  EXPECT_LE(ddp::max_relative_error(model->parameters(), plain->parameters()), 1e-12);
  EXPECT_LE(ddp::max_relative_error(resumed->parameters(), plain->parameters()), 1e-12);
}

// The pipeline engine with ZeRO-1 over the grid's data-parallel group (and ZeRO-2 without a pipeline): every
// layout of this world, 1F1B and zb-h1, AdamW in float64, against one process.
TEST(Zero, PipelineEngineMatchesSingleProcess) {
  const auto adamw = optim::AdamWOptions(0.01).weight_decay(0.1);
  for (int stage : {1, 2})
    for (const char* schedule : {"train", "zb-h1"})
      for (auto [stages, replicas] : pt::layouts()) {
        if (stage == 2 && stages > 1) continue;
        SCOPED_TRACE(::testing::Message()
                     << stages << " stages x " << replicas << " replicas, " << schedule << ", stage " << stage);
        pipe::PipelineParallelGrid grid(stages);
        auto model = std::make_shared<pipe::PipelineModule>(pt::tied_layers(), grid, pt::module_options());
        model->to(kDouble);
        auto opt = std::make_shared<optim::ZeroRedundancyOptimizer<optim::AdamW>>(
            model->parameters(), adamw, optim::ZeroOptions{.group = grid.get_data_parallel_group(), .stage = stage});
        pipe::PipelineEngine engine(model, grid, opt, {.micro_batches = pt::kMicroBatches, .schedule = schedule});
        pipe::PipelineModule reference(pt::tied_layers(), 1, 0, pt::module_options());
        reference.to(kDouble);
        optim::AdamW reference_opt(reference.parameters(), adamw);
        for (int step = 0; step < kSteps; ++step) {
          auto [x, y] = pt::whole_batch(step, replicas, kDouble);
          const double loss = engine.train_batch(pt::micro_batches(x, y, grid.get_data_parallel_id()));
          reference_opt.zero_grad();
          Tensor reference_loss = reference.compute_loss(reference.forward({x}), {y});
          reference_loss.backward();
          reference_opt.step();
          EXPECT_NEAR(loss, reference_loss.item<double>(), 1e-12 * reference_loss.item<double>()) << "step " << step;
        }
        EXPECT_LE(pt::max_relative_error(*model, reference), 1e-12);
      }
}

// Saved by a pipeline with ZeRO over every replica (one stage), resumed in every layout with and without ZeRO:
// each equals uninterrupted training in one process.
TEST(Zero, PipelineCheckpointsResumeInAnyLayoutWithOrWithoutZero) {
  const strata::testing::SharedTempDir shared("strata_zero_ckpt");
  const std::string& dir = shared.path();
  const auto adamw = optim::AdamWOptions(0.01).weight_decay(0.1);
  const int world = dist::get_world_size();
  auto batch = [&](int step) { return pt::whole_batch(step, world, kDouble); };  // kMicroBatches x world x kRows

  pipe::PipelineModule reference(pt::tied_layers(), 1, 0, pt::module_options());
  reference.to(kDouble);
  optim::AdamW reference_opt(reference.parameters(), adamw);
  std::vector<double> reference_losses;
  for (int step = 0; step < 4; ++step) {
    auto [x, y] = batch(step);
    reference_opt.zero_grad();
    Tensor loss = reference.compute_loss(reference.forward({x}), {y});
    loss.backward();
    reference_opt.step();
    reference_losses.push_back(loss.item<double>());
  }
  // Replica d of D takes rows [d M R W / D, ...) in micro-batches of R W / D rows: the same global batch.
  auto rows = [&](int replicas) { return pt::kRows * world / replicas; };
  {
    pipe::PipelineParallelGrid grid(1);
    auto model = std::make_shared<pipe::PipelineModule>(pt::tied_layers(), grid, pt::module_options());
    model->to(kDouble);
    auto opt = std::make_shared<optim::ZeroRedundancyOptimizer<optim::AdamW>>(
        model->parameters(), adamw, optim::ZeroOptions{.group = grid.get_data_parallel_group()});
    pipe::PipelineEngine engine(model, grid, opt, {.micro_batches = pt::kMicroBatches});
    for (int step = 0; step < 2; ++step) {
      auto [x, y] = batch(step);
      EXPECT_NEAR(engine.train_batch(pt::micro_batches(x, y, grid.get_data_parallel_id(), rows(world))),
                  reference_losses[step], 1e-12 * reference_losses[step]);
    }
    engine.save_checkpoint(dir);
  }
  for (bool zero : {true, false})
    for (auto [stages, replicas] : pt::layouts()) {
      SCOPED_TRACE(::testing::Message() << stages << " stages x " << replicas << " replicas, zero " << zero);
      pipe::PipelineParallelGrid grid(stages);
      manual_seed(11);
      auto model = std::make_shared<pipe::PipelineModule>(pt::tied_layers(), grid, pt::module_options());
      model->to(kDouble);
      std::shared_ptr<optim::Optimizer> opt;
      if (zero)
        opt = std::make_shared<optim::ZeroRedundancyOptimizer<optim::AdamW>>(
            model->parameters(), adamw, optim::ZeroOptions{.group = grid.get_data_parallel_group()});
      else
        opt = std::make_shared<optim::AdamW>(model->parameters(), adamw);
      pipe::PipelineEngine engine(model, grid, opt, {.micro_batches = pt::kMicroBatches});
      engine.load_checkpoint(dir);
      for (int step = 2; step < 4; ++step) {
        auto [x, y] = batch(step);
        EXPECT_NEAR(engine.train_batch(pt::micro_batches(x, y, grid.get_data_parallel_id(), rows(replicas))),
                    reference_losses[step], 1e-12 * reference_losses[step])
            << "step " << step;
      }
      EXPECT_LE(pt::max_relative_error(*model, reference), 1e-12);
    }
}

TEST(Zero, Errors) {
  ddp::Mlp model = ddp::make_mlp(7, kDouble);
  using Zero = optim::ZeroRedundancyOptimizer<optim::SGD>;
  EXPECT_THROW_MSG(Zero(model->parameters(), 0.1, {.stage = 3}), "stage must be 1");
  EXPECT_THROW_MSG(Zero(model->parameters(), 0.1, {.bucket_cap_mb = 0}), "bucket_cap_mb must be positive");

  {  // State that is not elementwise cannot be partitioned.
    optim::ZeroRedundancyOptimizer<NormKeeper> opt(model->parameters(), 0.1);
    for (Tensor p : model->parameters()) p.mutable_grad() = ones_like(p);
    EXPECT_THROW_MSG(opt.step(), "keeps \"norm\" of shape []");
    opt.zero_grad();
  }
  {  // A state dict whose parameters of one bucket do not share a state: it cannot become one shard's.
    optim::AdamW plain(model->parameters(), optim::AdamWOptions(0.01));
    for (Tensor p : model->parameters()) p.mutable_grad() = ones_like(p);
    plain.step();
    optim::StateDict dict = plain.state_dict();
    optim::ZeroRedundancyOptimizer<optim::AdamW> opt(model->parameters(), optim::AdamWOptions(0.01));
    dict.at("state.0.step").fill_(5);
    EXPECT_THROW_MSG(opt.load_state_dict(dict), "lie in one bucket but took");
    dict.at("state.0.step").fill_(1);
    dict.erase("state.0.exp_avg");
    dict.erase("state.0.exp_avg_sq");
    dict.erase("state.0.step");
    EXPECT_THROW_MSG(opt.load_state_dict(dict), "lie in one bucket but the state dict gives them different entries");
    model->zero_grad();
  }
  {  // A bucket whose parameters step only in part.
    Zero opt(model->parameters(), 0.1, {.bucket_cap_mb = 1});
    model->fc1->weight.mutable_grad() = zeros_like(model->fc1->weight);
    EXPECT_THROW_MSG(opt.step(), "in the same bucket, has none");
    opt.zero_grad();
  }
  {  // Stage 2 beside DDP made first: DDP hands the averaged gradients back after the reduce-scatters took them.
    nn::DistributedDataParallel wrapped(model);
    Zero opt(model->parameters(), 0.1, {.stage = 2});
    auto [x, y] = ddp::full_batch(0, kDouble);
    mse_loss(model(x), y).backward();
    EXPECT_THROW_MSG(opt.step(), "do not also wrap the model in DistributedDataParallel");
    opt.zero_grad();
  }
  {  // Stage 2 keeps no parameter gradients for a GradScaler to unscale.
    Zero opt(model->parameters(), 0.1, {.stage = 2});
    optim::GradScaler scaler;
    EXPECT_THROW_MSG(scaler.unscale_(opt), "stage 2 keeps no parameter gradients");
  }
  {  // Nor with a loss scaler: stage 2 keeps no parameter gradients to unscale.
    pipe::PipelineParallelGrid grid(1);
    auto pipe_model = std::make_shared<pipe::PipelineModule>(pt::mlp_layers(), grid, pt::module_options());
    auto stage2 = std::make_shared<Zero>(pipe_model->parameters(), 0.1,
                                         optim::ZeroOptions{.group = grid.get_data_parallel_group(), .stage = 2});
    EXPECT_THROW_MSG(pipe::PipelineEngine(pipe_model, grid, stage2, {.grad_scaler = optim::GradScalerOptions()}),
                     "does not support ZeRO stage 2 with a grad_scaler");
  }
  if (ddp::world() >= 2) {  // The engine refuses stage 2 over a pipeline, and a group other than its replicas'.
    pipe::PipelineParallelGrid grid(2);
    auto pipe_model = std::make_shared<pipe::PipelineModule>(pt::mlp_layers(), grid, pt::module_options());
    auto stage2 = std::make_shared<Zero>(pipe_model->parameters(), 0.1,
                                         optim::ZeroOptions{.group = grid.get_data_parallel_group(), .stage = 2});
    EXPECT_THROW_MSG(pipe::PipelineEngine(pipe_model, grid, stage2),
                     "does not support ZeRO stage 2 with more than one stage");
  }
  if (ddp::world() >= 2) {  // Over this rank alone, where the grid's replicas are every rank.
    std::vector<dist::Group> alone;
    for (int r = 0; r < ddp::world(); ++r) alone.push_back(dist::new_group({r}));
    pipe::PipelineParallelGrid grid(1);
    auto pipe_model = std::make_shared<pipe::PipelineModule>(pt::mlp_layers(), grid, pt::module_options());
    auto mine = std::make_shared<Zero>(pipe_model->parameters(), 0.1, optim::ZeroOptions{.group = alone[ddp::rank()]});
    EXPECT_THROW_MSG(pipe::PipelineEngine(pipe_model, grid, mine), "pass ZeroOptions{.group = grid.");
  }
  if (ddp::world() >= 2) {  // The ranks pass different parameters: every rank throws.
    Tensor p = zeros({ddp::rank() == 1 ? 3 : 4}, kDouble).requires_grad_(true);
    EXPECT_THROW_MSG(Zero({p}, 0.1), "pass different parameters");
  }
}
