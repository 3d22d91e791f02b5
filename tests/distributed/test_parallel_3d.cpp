// 3D parallelism under mpirun: a small GPT (vocabulary-parallel embedding tied to the head, tensor-parallel
// blocks, vocabulary-parallel cross entropy) pipelined over every pipe x model x data layout of this world, with
// 1F1B and zb-h1, ZeRO 0, 1 (and 2 without a pipeline), sequence parallelism on and off: three AdamW steps equal
// one process to 1e-12 in float64, and a checkpoint saved at one layout resumes at every other.

#include <strata/distributed/tensor_parallel.h>
#include <strata/nn/embedding.h>
#include <strata/nn/normalization.h>
#include <strata/nn/tensor_parallel.h>
#include <strata/nn/transformer.h>
#include <strata/optim/adam.h>
#include <strata/optim/zero_redundancy.h>

#include "pipe_training.h"
#include "shared_dir.h"

namespace dist = strata::distributed;
namespace tp = strata::distributed::tensor_parallel;
using namespace strata;
namespace pt = strata::testing::pipe_training;

namespace {

constexpr int64_t kVocab = 16, kEmbed = 8, kHeads = 4, kBlock = 4;
constexpr int kMicroBatches = 4, kSteps = 3;

struct Layout {
  int pipe, model, data;
};

// Every pipe x model x data layout of this world with at most 4 stages and 4 model-parallel ranks.
std::vector<Layout> layouts() {
  std::vector<Layout> out;
  const int world = dist::get_world_size();
  for (int pipe = 1; pipe <= std::min(world, 4); ++pipe)
    for (int model = 1; model <= 4; ++model)
      if (world % (pipe * model) == 0) out.push_back({pipe, model, world / (pipe * model)});
  return out;
}

// The token embedding tied to the head: the head is x @ weight^T. Over a model-parallel group of more than one
// rank the table is split by vocabulary and so are the logits.
pipe::LayerSpec embedding(const dist::Group& group) {
  if (group->size() == 1) return pipe::LayerSpec::of<nn::Embedding>(kVocab, kEmbed);
  return pipe::LayerSpec::of<nn::VocabParallelEmbedding>(
      nn::VocabParallelEmbeddingOptions(kVocab, kEmbed).group(group));
}

// The GPT's layers: tied embedding, two blocks, the final LayerNorm and the tied head. With a group of one rank
// they are the plain layers of one process. Under sequence parallelism the blocks take [B, T / n, C]: a layer
// before them splits the sequence and one after them gathers it (identities otherwise, so that every layout
// numbers, and so seeds, its layers alike).
std::vector<pipe::Layer> gpt_layers(const dist::Group& group, bool sequence_parallel) {
  const bool split = group->size() > 1, sp = split && sequence_parallel;
  std::vector<pipe::Layer> layers;
  layers.push_back(pipe::TiedLayerSpec("embed", embedding(group)));
  layers.push_back(
      pipe::Layer([group, sp](const Tensor& x) { return sp ? tp::scatter_to_sequence_region(x, group, 1) : x; }));
  for (int i = 0; i < 2; ++i)
    if (split)
      layers.push_back(pipe::LayerSpec::of<nn::ParallelTransformerBlock>(
          nn::ParallelTransformerBlockOptions(kEmbed, kHeads).sequence_parallel(sequence_parallel).group(group)));
    else
      layers.push_back(pipe::LayerSpec::of<nn::TransformerBlock>(kEmbed, kHeads));
  // The final LayerNorm runs replicated, so every rank gets the whole gradient: backward keeps its part.
  layers.push_back(pipe::Layer([group, sp](const Tensor& x) {
    return sp ? tp::gather_from_sequence_region(x, group, 1, /*tensor_parallel_output_grad=*/false) : x;
  }));
  layers.push_back(pipe::LayerSpec::of<nn::LayerNorm>(kEmbed));
  layers.push_back(pipe::TiedLayerSpec("embed", embedding(group), [group, split](nn::Module& m, const tensor_list& x) {
    const Tensor weight = m.named_parameters()[0].second;  // a copy: the dict is a temporary
    return tensor_list{matmul(split ? tp::copy_to_region(x[0], group) : x[0], weight.t())};
  }));
  return layers;
}

pipe::PipelineModuleOptions gpt_options(const dist::Group& group) {
  pipe::PipelineModuleOptions options = pt::module_options();
  options.loss_fn = [group](const tensor_list& outputs, const tensor_list& labels) {
    const Tensor& logits = outputs[0];
    if (group->size() == 1) return cross_entropy(logits.reshape({-1, kVocab}), labels[0].reshape({-1}));
    return nn::vocab_parallel_cross_entropy(logits, labels[0], group).mean();
  };
  return options;
}

// Step `step`'s token windows, the same on every rank and in every layout: micro-batches of one row per rank of
// WORLD, of which each of D replicas takes world / D rows (pt::micro_batches with rows(D)).
std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(900 + step);
  const Tensor ids = randint(kVocab, {kMicroBatches * dist::get_world_size(), kBlock + 1}, kLong, &gen);
  return {ids.narrow(1, 0, kBlock).contiguous(), ids.narrow(1, 1, kBlock).contiguous()};
}
int64_t rows(int replicas) { return dist::get_world_size() / replicas; }

// |a - b| / |b|, the worst over the parameters of `stage` (whole, gathered over its model-parallel group) against
// the same names in `reference`.
double max_relative_error(const pipe::PipelineModule& stage, const pipe::PipelineModule& reference) {
  const nn::StateDict whole = nn::whole_state_dict(stage), ref = reference.state_dict();
  double worst = 0;
  for (const auto& [name, p] : whole) {
    EXPECT_TRUE(ref.contains(name)) << name;
    if (ref.contains(name))
      worst = std::max(worst, (p - ref.at(name)).norm().item<double>() / ref.at(name).norm().item<double>());
  }
  return worst;
}

// AdamW's eps is 1e-6, not 1e-8: attention's key bias has a true gradient of exactly zero (softmax ignores a shift
// shared by every key), so its gradient is rounding noise, which AdamW divides by eps; at 1e-8 two summation orders
// (one process against itself, micro-batched) already move it by 1e-11 relative.
const optim::AdamWOptions kAdamW = optim::AdamWOptions(0.01).weight_decay(0.1).eps(1e-6);

// The GPT trained by the engine in one layout: ZeRO `zero` (0: plain AdamW), sequence parallelism `sp`.
struct Trainer {
  Trainer(Layout l, const char* schedule, int zero, bool sp)
      : layout(l), topology(l.pipe, l.model, l.data), grid(topology) {
    const dist::Group& group = grid.get_model_parallel_group();
    model = std::make_shared<pipe::PipelineModule>(gpt_layers(group, sp), grid, gpt_options(group));
    model->to(kDouble);
    if (zero == 0)
      opt = std::make_shared<optim::AdamW>(model->parameters(), kAdamW);
    else
      opt = std::make_shared<optim::ZeroRedundancyOptimizer<optim::AdamW>>(
          model->parameters(), kAdamW, optim::ZeroOptions{.group = grid.get_data_parallel_group(), .stage = zero});
    engine = std::make_unique<pipe::PipelineEngine>(
        model, grid, opt, pipe::PipelineEngineOptions{.micro_batches = kMicroBatches, .schedule = schedule});
  }
  double step(int i) {
    auto [x, y] = batch(i);
    return engine->train_batch(pt::micro_batches(x, y, grid.get_data_parallel_id(), rows(layout.data)));
  }
  Layout layout;
  pipe::PipeModelDataParallelTopology topology;
  pipe::PipelineParallelGrid grid;
  std::shared_ptr<pipe::PipelineModule> model;
  std::shared_ptr<optim::Optimizer> opt;
  std::unique_ptr<pipe::PipelineEngine> engine;
};

// One process: the model and its losses after `steps` steps.
struct Reference {
  explicit Reference(const dist::Group& alone, int steps) : model(gpt_layers(alone, false), 1, 0, gpt_options(alone)) {
    model.to(kDouble);
    optim::AdamW opt(model.parameters(), kAdamW);
    for (int i = 0; i < steps; ++i) {
      auto [x, y] = batch(i);
      opt.zero_grad();
      Tensor loss = model.compute_loss(model.forward({x}), {y});
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
  }
  pipe::PipelineModule model;
  std::vector<double> losses;
};

// Every rank's group of one, made on every rank in the same order (new_group is collective over WORLD).
std::vector<dist::Group> groups_of_one() {
  std::vector<dist::Group> alone;
  for (int r = 0; r < dist::get_world_size(); ++r) alone.push_back(dist::new_group({r}));
  return alone;
}

}  // namespace

TEST(Parallel3D, EveryLayoutTrainsAsOneProcess) {
  const dist::Group mine = groups_of_one()[dist::get_rank()];
  const Reference reference(mine, kSteps);
  for (const Layout& l : layouts())
    for (const char* schedule : {"train", "zb-h1"})
      for (int zero : {0, 1, 2})
        for (bool sp : {false, true}) {
          if ((zero == 2 && l.pipe > 1) || (sp && l.model == 1)) continue;
          SCOPED_TRACE(::testing::Message() << l.pipe << " stages x " << l.model << " model x " << l.data << " data, "
                                            << schedule << ", zero " << zero << ", sp " << sp);
          Trainer run(l, schedule, zero, sp);
          for (int i = 0; i < kSteps; ++i)
            EXPECT_NEAR(run.step(i), reference.losses[i], 1e-12 * reference.losses[i]) << "step " << i;
          EXPECT_LE(max_relative_error(*run.model, reference.model), 1e-12);
        }
}

// Two steps in a layout with tensor parallelism (and ZeRO-1 where it has replicas), saved; two more in every
// layout, with and without ZeRO, and in one process: each equals four uninterrupted steps of one process.
TEST(Parallel3D, CheckpointsResumeAtAnyTensorParallelSizeAndLayout) {
  if (dist::get_world_size() == 1) GTEST_SKIP() << "needs 2 ranks";
  const strata::testing::SharedTempDir shared("strata_3d_ckpt");
  const std::string& dir = shared.path();
  const std::vector<dist::Group> alone = groups_of_one();
  const dist::Group& mine = alone[dist::get_rank()];
  const Reference reference(mine, 4);
  for (const Layout& saved : layouts()) {
    if (saved.model == 1) continue;
    {
      Trainer run(saved, "train", saved.data > 1 ? 1 : 0, /*sp=*/true);
      for (int i = 0; i < 2; ++i) EXPECT_NEAR(run.step(i), reference.losses[i], 1e-12 * reference.losses[i]);
      run.engine->save_checkpoint(dir);
    }
    for (const Layout& l : layouts())
      for (int zero : {0, 1}) {
        SCOPED_TRACE(::testing::Message()
                     << "saved at " << saved.pipe << " x " << saved.model << " x " << saved.data << ", resumed at "
                     << l.pipe << " x " << l.model << " x " << l.data << ", zero " << zero);
        manual_seed(7);  // other starting values than the saved run's: the load must replace them all
        Trainer run(l, "zb-h1", zero, /*sp=*/false);
        run.engine->load_checkpoint(dir);
        for (int i = 2; i < 4; ++i)
          EXPECT_NEAR(run.step(i), reference.losses[i], 1e-12 * reference.losses[i]) << "step " << i;
        EXPECT_LE(max_relative_error(*run.model, reference.model), 1e-12);
      }
    // One process: the whole model and its optimizer from the same files.
    pipe::PipelineModule whole(gpt_layers(mine, false), 1, 0, gpt_options(mine));
    whole.to(kDouble);
    optim::AdamW whole_opt(whole.parameters(), kAdamW);
    whole.load_state_dir(dir);
    pipe::load_optimizer_states(dir, whole, whole_opt);
    for (int i = 2; i < 4; ++i) {
      auto [x, y] = batch(i);
      whole_opt.zero_grad();
      whole.compute_loss(whole.forward({x}), {y}).backward();
      whole_opt.step();
    }
    EXPECT_LE(max_relative_error(whole, reference.model), 1e-12);
  }
}
