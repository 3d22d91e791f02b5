// PipelineModule without processes: partitioning, building only a stage's layers, seeded layers that match
// a single-process model bit for bit, tied layers, activation checkpointing, per-layer checkpoints that move
// between stage counts, and the errors.

#include <strata/nn/dropout.h>
#include <strata/nn/embedding.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>
#include <strata/nn/safetensors.h>
#include <strata/pipe/module.h>

#include <climits>
#include <map>
#include <string>
#include <vector>

#include "../helpers.h"

using namespace strata;
using pipe::BuiltLayer;
using pipe::Layer;
using pipe::LayerSpec;
using pipe::PipelineModule;
using pipe::PipelineModuleOptions;
using pipe::StageLayout;
using pipe::TiedLayerSpec;
using strata::testing::same_state;
using strata::testing::same_tensor;

namespace {

Tensor relu_fn(const Tensor& x) { return relu(x); }

// Linear(4, 8), ReLU, Linear(8, 8), ReLU, ... with `linears` Linear layers, each followed by a ReLU function.
std::vector<Layer> mlp(int linears) {
  std::vector<Layer> layers;
  for (int i = 0; i < linears; ++i) {
    layers.push_back(LayerSpec::of<nn::Linear>(i == 0 ? 4 : 8, 8));
    layers.push_back(Layer(relu_fn, "ReLU"));
  }
  return layers;
}

// A Linear whose builds are counted; it reports its parameter count only when asked to.
LayerSpec counted_linear(std::vector<int>& builds, int index, bool report) {
  return LayerSpec(
      "Linear",
      [&builds, index] {
        ++builds[index];
        nn::Linear fc(4, 4);
        return BuiltLayer{fc.ptr(), [fc](const tensor_list& x) { return tensor_list{fc(x.at(0))}; }};
      },
      report ? std::optional<int64_t>(20) : std::nullopt);
}

// The output projection of a tied embedding: x @ weight^T.
tensor_list project(nn::Module& embedding, const tensor_list& x) {
  return {matmul(x[0], embedding.named_parameters()[0].second.t())};
}

// Embedding(10, 6) [tied "embed"], Linear, ReLU, LayerNorm, Linear, Dropout(p), projection [tied "embed"].
std::vector<Layer> tied_model(double p = 0.0) {
  return {TiedLayerSpec("embed", LayerSpec::of<nn::Embedding>(10, 6)),
          LayerSpec::of<nn::Linear>(6, 6),
          Layer(relu_fn, "ReLU"),
          LayerSpec::of<nn::LayerNorm>(6),
          LayerSpec::of<nn::Linear>(6, 6),
          LayerSpec::of<nn::Dropout>(p),
          TiedLayerSpec("embed", LayerSpec::of<nn::Embedding>(10, 6), project)};
}

nn::StateDict parameters_of(const nn::Module& module) {
  nn::StateDict out;
  for (auto& [name, p] : module.named_parameters()) out.emplace(name, p);
  return out;
}

// One stage of `layers` per entry, as the ranks of a pipeline would build them.
std::vector<std::shared_ptr<PipelineModule>> stages(const std::vector<Layer>& layers, int num_stages,
                                                    const PipelineModuleOptions& options) {
  std::vector<std::shared_ptr<PipelineModule>> out;
  for (int s = 0; s < num_stages; ++s) out.push_back(std::make_shared<PipelineModule>(layers, num_stages, s, options));
  return out;
}

// What the engine does at start: every stage holding a tie takes the lowest such stage's tied weights.
void broadcast_tied(const std::vector<std::shared_ptr<PipelineModule>>& modules) {
  NoGradGuard no_grad;
  for (const std::string& key : modules[0]->tied_keys()) {
    const std::vector<int> holders = modules[0]->tied_stages(key);
    for (size_t k = 1; k < holders.size(); ++k) {
      const std::vector<Tensor> from = modules[holders[0]]->tied_parameters(key);
      const std::vector<Tensor> to = modules[holders[k]]->tied_parameters(key);
      for (size_t j = 0; j < from.size(); ++j) Tensor(to[j]).copy_(from[j]);
    }
  }
}

}  // namespace

TEST(PipeModuleSpec, TypeNamesAndParameterCounts) {
  EXPECT_EQ(LayerSpec::of<nn::Linear>(4, 3).type_name(), "Linear");
  EXPECT_EQ(LayerSpec::of<nn::Linear>(4, 3).num_parameters(), 15);
  EXPECT_EQ(LayerSpec::of<nn::Linear>(4, 3, false).num_parameters(), 12);
  EXPECT_EQ(LayerSpec::of<nn::Embedding>(10, 3).num_parameters(), 30);
  EXPECT_EQ(LayerSpec::of<nn::LayerNorm>(5).type_name(), "LayerNorm");
  EXPECT_EQ(LayerSpec::of<nn::LayerNorm>(5).num_parameters(), 10);
  EXPECT_EQ(LayerSpec::of<nn::LayerNorm>(5, 1e-5, false).num_parameters(), 0);
  EXPECT_EQ(LayerSpec::of<nn::ReLU>().type_name(), "ReLU");
  EXPECT_EQ(LayerSpec::of<nn::Dropout>(0.5).num_parameters(), 0);
  EXPECT_EQ(Layer(relu_fn).spec().type_name(), "Function");
  EXPECT_EQ(Layer(relu_fn, "ReLU").spec().num_parameters(), 0);

  // Counting a layer that does not report builds it once, and leaves the generator where it was.
  std::vector<int> builds(1, 0);
  manual_seed(9);
  randn({3});
  const uint64_t offset = default_generator().get_offset();
  EXPECT_EQ(counted_linear(builds, 0, false).num_parameters(), 20);
  EXPECT_EQ(builds[0], 1);
  EXPECT_EQ(default_generator().get_offset(), offset);
  EXPECT_EQ(default_generator().seed(), 9u);
  EXPECT_EQ(counted_linear(builds, 0, true).num_parameters(), 20);
  EXPECT_EQ(builds[0], 1);
}

TEST(PipeModulePartition, ByMethod) {
  EXPECT_EQ(PipelineModule(mlp(3), 2, 0, {.partition_method = "uniform"}).parts(), (std::vector<int>{0, 3, 6}));

  // Parameters 40, 72, 72, 18: {40, 72} and {72, 18} is the only split into two whose heavier half is 112.
  const std::vector<Layer> linears = {LayerSpec::of<nn::Linear>(4, 8), LayerSpec::of<nn::Linear>(8, 8),
                                      LayerSpec::of<nn::Linear>(8, 8), LayerSpec::of<nn::Linear>(8, 2)};
  EXPECT_EQ(PipelineModule(linears, 2, 0).parts(), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(PipelineModule(linears, 3, 1).parts(), (std::vector<int>{0, 1, 2, 4}));

  // The example of pipe/module.h: the big Linear alone cannot be split, and the tie goes to the even layer count.
  const std::vector<Layer> example = {[](const Tensor& x) { return x.flatten(1); }, LayerSpec::of<nn::Linear>(784, 256),
                                      LayerSpec::of<nn::ReLU>(), LayerSpec::of<nn::Linear>(256, 10)};
  EXPECT_EQ(PipelineModule(example, 2, 1).parts(), (std::vector<int>{0, 2, 4}));

  // type:REGEX balances the layers whose type name matches: one Linear per stage.
  for (const std::string method : {"type:Linear", "type:^lin"}) {
    const PipelineModule model(mlp(3), 3, 0, {.partition_method = method});
    for (int s = 0; s < 3; ++s) {
      int linear_layers = 0;
      for (int i = model.parts()[s]; i < model.parts()[s + 1]; ++i) linear_layers += i % 2 == 0;
      EXPECT_EQ(linear_layers, 1) << method << " stage " << s;
    }
  }

  const PipelineModule explicit_parts(mlp(3), 3, 2, {.partition = {0, 1, 4, 6}});
  EXPECT_EQ(explicit_parts.parts(), (std::vector<int>{0, 1, 4, 6}));
  EXPECT_EQ(explicit_parts.local_start(), 4);
  EXPECT_EQ(explicit_parts.local_stop(), 6);
}

TEST(PipeModule, BuildsOnlyItsOwnLayers) {
  for (const char* method : {"uniform", "parameters"}) {
    for (bool report : {true, false}) {
      for (int s = 0; s < 3; ++s) {
        std::vector<int> builds(6, 0);
        std::vector<Layer> layers;
        for (int i = 0; i < 6; ++i) layers.push_back(counted_linear(builds, i, report));
        const PipelineModule model(layers, 3, s, {.partition_method = method});
        ASSERT_EQ(model.parts(), (std::vector<int>{0, 2, 4, 6}));
        // Counting for "parameters" builds a layer that does not report; nothing else builds a foreign layer.
        const int counted = std::string(method) == "parameters" && !report;
        for (int i = 0; i < 6; ++i)
          EXPECT_EQ(builds[i], counted + (i / 2 == s)) << method << " report " << report << " layer " << i;
        EXPECT_EQ(model.named_children().size(), 2u);
        EXPECT_EQ(model.named_children()[0].first, std::to_string(2 * s));
      }
    }
  }
}

TEST(PipeModule, SeededStagesMatchTheSingleProcessModel) {
  const PipelineModuleOptions options{.seed_layers = true};
  const std::vector<Layer> layers = tied_model();
  PipelineModule whole(layers, 1, 0, options);
  const nn::StateDict reference = parameters_of(whole);
  const Tensor x = randint(0, 10, {5});
  const Tensor expected = whole.forward({x})[0];
  for (int num_stages = 1; num_stages <= 4; ++num_stages) {
    SCOPED_TRACE("stages " + std::to_string(num_stages));
    const auto modules = stages(layers, num_stages, options);
    nn::StateDict layer_params;  // every numbered layer's parameters, from the stage that holds it
    for (const auto& m : modules)
      for (auto& [name, p] : parameters_of(*m)) {
        if (!name.starts_with("tied_modules.")) {
          EXPECT_TRUE(layer_params.emplace(name, p).second) << name << " on two stages";
        } else if (m->local_start() == 0) {  // the stage holding the tie's first layer builds it as one process does
          EXPECT_TRUE(same_tensor(p, reference.at(name))) << name;
        }
      }
    nn::StateDict reference_layers = reference;
    reference_layers.erase("tied_modules.embed.weight");
    EXPECT_TRUE(same_state(layer_params, reference_layers));

    broadcast_tied(modules);
    tensor_list h = {x};
    for (const auto& m : modules) h = m->forward(h);
    EXPECT_TRUE(same_tensor(h[0], expected));
  }
}

TEST(PipeModuleTied, OneModulePerStage) {
  const PipelineModuleOptions options{.partition = {0, 2, 4, 7}, .seed_layers = true};
  const std::vector<Layer> layers = tied_model();
  const auto modules = stages(layers, 3, options);
  for (const auto& m : modules) {
    EXPECT_EQ(m->tied_keys(), (std::vector<std::string>{"embed"}));
    EXPECT_EQ(m->tied_stages("embed"), (std::vector<int>{0, 2}));
  }
  ASSERT_EQ(modules[0]->tied_parameters("embed").size(), 1u);
  const Tensor stage0_weight = parameters_of(*modules[0]).at("tied_modules.embed.weight");
  EXPECT_TRUE(modules[0]->tied_parameters("embed")[0].is_same(stage0_weight));
  EXPECT_TRUE(modules[1]->tied_parameters("embed").empty());
  EXPECT_EQ(modules[2]->tied_parameters("embed").size(), 1u);

  // On one stage both occurrences use the same weight: its gradient sums the lookup and the projection.
  PipelineModule whole(layers, 1, 0, {.seed_layers = true});
  const nn::StateDict params = parameters_of(whole);
  EXPECT_EQ(params.count("0.weight") + params.count("6.weight"), 0u);
  EXPECT_EQ(whole.num_parameters(), 60 + 42 + 12 + 42);
  const Tensor x = randint(0, 10, {5});
  const Tensor w = params.at("tied_modules.embed.weight");
  auto h = [&](const Tensor& e) {
    const Tensor a = relu(matmul(e, params.at("1.weight").t()) + params.at("1.bias"));
    const Tensor b = layer_norm(a, {6}, params.at("3.weight"), params.at("3.bias"));
    return matmul(b, params.at("4.weight").t()) + params.at("4.bias");
  };
  const Tensor expected = autograd::grad({matmul(h(embedding(w, x)), w.t()).sum()}, {w})[0];
  whole.forward({x})[0].sum().backward();
  EXPECT_ALLCLOSE(w.grad(), expected, 1e-5, 1e-5);

  // Two keys come back sorted.
  const std::vector<Layer> two = {TiedLayerSpec("b", LayerSpec::of<nn::Embedding>(10, 6)),
                                  TiedLayerSpec("a", LayerSpec::of<nn::Linear>(6, 6))};
  EXPECT_EQ(PipelineModule(two, 1, 0).tied_keys(), (std::vector<std::string>{"a", "b"}));
}

TEST(PipeModule, ActivationCheckpointingGivesTheSameGradients) {
  const std::vector<Layer> layers = tied_model(/*p=*/0.3);
  const Tensor x = randint(0, 10, {6}), labels = randint(0, 10, {6});
  auto grads = [&](int interval) {
    PipelineModule model(
        layers, 1, 0,
        {.loss_fn = pipe::cross_entropy_loss, .seed_layers = true, .activation_checkpoint_interval = interval});
    model.to(kFloat64);
    manual_seed(21);
    const tensor_list out = model.forward({x});
    EXPECT_EQ(out[0].grad_fn()->name() == std::string("CheckpointBackward"), interval > 0);
    model.compute_loss(out, {labels}).backward();
    nn::StateDict g;
    for (auto& [name, p] : model.named_parameters()) g.emplace(name, p.grad());
    return g;
  };
  const nn::StateDict expected = grads(0);
  for (int interval : {1, 2, 3}) EXPECT_TRUE(same_state(grads(interval), expected)) << "interval " << interval;

  // Evaluation, or no grad mode, runs the layers directly.
  PipelineModule model(layers, 1, 0, {.activation_checkpoint_interval = 2});
  model.eval();
  EXPECT_NE(model.forward({x})[0].grad_fn()->name(), std::string("CheckpointBackward"));
  NoGradGuard no_grad;
  model.train();
  EXPECT_FALSE(model.forward({x})[0].requires_grad());
}

// Stages cut into chunks: chunk c of stage s holds the layers of virtual stage layout.virtual_stage(s, c), runs
// them alone, and chains with the other chunks in model order to the single-process model's output.
TEST(PipeModuleChunks, LoopAndVPlaceTheLayersAndChainToTheWholeModel) {
  const PipelineModuleOptions seeded{.partition_method = "uniform", .seed_layers = true};
  const std::vector<Layer> layers = mlp(8);  // 16 layers
  PipelineModule whole(layers, 1, 0, seeded);
  const Tensor x = randn({3, 4});
  const Tensor expected = whole.forward({x})[0];
  for (const bool v : {false, true}) {
    PipelineModuleOptions options = seeded;
    options.chunks = 2;
    options.v_shape = v;
    const auto modules = stages(layers, 4, options);
    const StageLayout& layout = modules[0]->layout();
    EXPECT_EQ(layout, (StageLayout{4, 2, v}));
    EXPECT_EQ(modules[0]->parts(), (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14, 16}));
    // Stage 1 holds virtual stages 1 and 5 (loop) or 1 and 6 (V).
    EXPECT_EQ(modules[1]->chunk_start(1), v ? 12 : 10);
    EXPECT_EQ(modules[1]->chunk_stop(1), v ? 14 : 12);
    EXPECT_EQ(modules[1]->named_children().size(), 2u);  // the Linears of layers 2 and 10 (or 12)
    tensor_list h = {x};
    for (int vs = 0; vs < layout.num_virtual_stages(); ++vs)
      h = modules[layout.stage_of(vs)]->forward(h, layout.chunk_of(vs));
    EXPECT_TRUE(same_tensor(h[0], expected)) << (v ? "V" : "loop");
  }
  const PipelineModule two(layers, 4, 0, PipelineModuleOptions{.chunks = 2});
  EXPECT_THROW_MSG(two.chunk_start(2), "PipelineModule: chunk 2 is out of range for 2 chunks");
  EXPECT_THROW_MSG(PipelineModule(layers, 4, 0, PipelineModuleOptions{.chunks = 3, .v_shape = true}),
                   "PipelineModule: chunks must be 2 with v_shape, got 3");
  EXPECT_THROW_MSG(PipelineModule(mlp(3), 4, 0, PipelineModuleOptions{.chunks = 2}),
                   "PipelineModule: 6 layers cannot fill 4 stages of 2 chunks");
  // A chunk count whose product with the stages would wrap to a small number.
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 4, 0, PipelineModuleOptions{.chunks = (1 << 30) + 1}),
                   "PipelineModule: 4 layers cannot fill 4 stages of 1073741825 chunks");
  // One checkpointed run per chunk, however large the interval.
  PipelineModule run_per_chunk(
      layers, 4, 1, PipelineModuleOptions{.seed_layers = true, .activation_checkpoint_interval = INT_MAX, .chunks = 2});
  PipelineModule plain(layers, 4, 1, PipelineModuleOptions{.seed_layers = true, .chunks = 2});
  run_per_chunk.train();
  const Tensor h = randn({3, 8});
  EXPECT_TRUE(same_tensor(run_per_chunk.forward({h}, 1)[0], plain.forward({h}, 1)[0]));
}

TEST(PipeModuleChunks, TiesSpanChunks) {
  // tied_model's 7 layers over 2 stages x 2 chunks in a V: the tie's first layer (0) and its last (6) are both
  // on stage 0, which holds the first and the last piece; one module serves both.
  const PipelineModuleOptions options{.partition = {0, 2, 4, 5, 7}, .seed_layers = true, .chunks = 2, .v_shape = true};
  const auto v = stages(tied_model(), 2, options);
  EXPECT_EQ(v[0]->tied_stages("embed"), std::vector<int>{0});
  EXPECT_EQ(v[0]->tied_parameters("embed").size(), 1u);
  EXPECT_TRUE(v[1]->tied_parameters("embed").empty());
  const auto loop = stages(tied_model(), 2, PipelineModuleOptions{.partition = {0, 2, 4, 5, 7}, .chunks = 2});
  EXPECT_EQ(loop[0]->tied_stages("embed"), (std::vector<int>{0, 1}));  // layer 6 is virtual stage 3, on stage 1
}

class PipeModuleCheckpoint : public strata::testing::TempFolderTest {};

// Layer files are named by global layer index, so a model saved in chunks loads into any layout.
TEST_F(PipeModuleCheckpoint, ChunkedStagesLoadIntoOtherLayouts) {
  const std::vector<Layer> layers = mlp(8);
  const auto v =
      stages(layers, 4,
             PipelineModuleOptions{.partition_method = "uniform", .seed_layers = true, .chunks = 2, .v_shape = true});
  const std::string dir = (dir_ / "ckpt").string();
  nn::StateDict saved;
  for (const auto& m : v) {
    m->save_state_dict(dir);
    for (auto& [name, p] : parameters_of(*m)) saved.emplace(name, p);
  }
  EXPECT_EQ(saved.size(), 16u);  // 8 Linears' weights and biases
  for (const PipelineModuleOptions& into :
       {PipelineModuleOptions{}, PipelineModuleOptions{.partition_method = "uniform", .chunks = 2}}) {
    for (int num_stages : {1, 2}) {
      for (const auto& m : stages(layers, num_stages, into)) {
        m->load_state_dir(dir);
        for (auto& [name, p] : parameters_of(*m)) EXPECT_TRUE(same_tensor(p, saved.at(name))) << name;
      }
    }
  }
}

TEST_F(PipeModuleCheckpoint, SavedWithFourStagesLoadsIntoTwoAndOne) {
  const std::vector<Layer> layers = tied_model();
  const auto four = stages(layers, 4, {.seed_layers = true});
  const std::string dir = (dir_ / "ckpt").string();  // made by save_state_dict
  for (const auto& m : four) m->save_state_dict(dir);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().filename());
  std::sort(files.begin(), files.end());
  // Layers 2 (a function) and 5 (dropout) have no state; layer 6 is the tie written with layer 0.
  const std::vector<std::string> expected = {"layer_00-model_states.safetensors", "layer_01-model_states.safetensors",
                                             "layer_03-model_states.safetensors", "layer_04-model_states.safetensors"};
  EXPECT_EQ(files, expected);
  nn::StateDict saved;
  for (const auto& m : four)
    for (auto& [name, p] : parameters_of(*m))
      if (!name.starts_with("tied_modules.") || m->local_start() == 0) saved.emplace(name, p);

  for (int num_stages : {2, 1}) {
    manual_seed(100 + num_stages);
    int differed = 0;  // parameters the load had to change
    for (const auto& m : stages(layers, num_stages, {})) {
      for (auto& [name, p] : parameters_of(*m)) differed += !same_tensor(p, saved.at(name));
      m->load_state_dir(dir);
      for (auto& [name, p] : parameters_of(*m))
        EXPECT_TRUE(same_tensor(p, saved.at(name))) << num_stages << " stages: " << name;
    }
    EXPECT_GE(differed, 5);  // both Linears' weights and biases and the embedding
  }
}

TEST(PipeModule, CheckpointPaths) {
  EXPECT_EQ(PipelineModule::ckpt_layer_path("d", 7), "d/layer_07-model_states.safetensors");
  EXPECT_EQ(PipelineModule::ckpt_layer_path("d", 123), "d/layer_123-model_states.safetensors");
  EXPECT_THROW_MSG(PipelineModule::ckpt_layer_path("d", -1), "the layer index must be non-negative, got -1");
}

TEST_F(PipeModuleCheckpoint, Errors) {
  EXPECT_THROW_MSG(PipelineModule(mlp(1), 1, 0).load_state_dir(dir_.string()),
                   "PipelineModule::load_state_dir: layer 0 has no checkpoint: '" + dir_.string() +
                       "/layer_00-model_states.safetensors' does not exist");
  PipelineModule(mlp(1), 1, 0).save_state_dict(dir_.string());
  EXPECT_THROW_MSG(PipelineModule({LayerSpec::of<nn::Linear>(4, 9)}, 1, 0).load_state_dir(dir_.string()),
                   "layer_00-model_states.safetensors");
}

// Every layer file is checked before any is loaded: a bad second file leaves the first layer as it was.
TEST_F(PipeModuleCheckpoint, ABadLayerFileChangesNothingAndNonStrictSkipsUnexpectedKeys) {
  const std::string dir = dir_.string();
  PipelineModule(mlp(2), 1, 0, {.seed_layers = true}).save_state_dict(dir);
  const std::string second = PipelineModule::ckpt_layer_path(dir, 2);  // the Linear(8, 8)
  nn::save_file({{"weight", zeros({3, 3})}, {"bias", zeros({8})}}, second);
  PipelineModule model(mlp(2), 1, 0);
  nn::StateDict before;
  for (auto& [name, t] : model.state_dict()) before.emplace(name, t.clone());
  EXPECT_THROW_MSG(model.load_state_dir(dir), "PipelineModule::load_state_dir: '" + second + "': ");
  EXPECT_TRUE(same_state(model.state_dict(), before));

  nn::save_file({{"weight", zeros({8, 8})}, {"bias", zeros({8})}, {"extra", zeros({1})}}, second);
  EXPECT_THROW_MSG(model.load_state_dir(dir), "unexpected keys: \"extra\"");
  EXPECT_TRUE(same_state(model.state_dict(), before));
  model.load_state_dir(dir, /*strict=*/false);
  EXPECT_TRUE(same_tensor(model.state_dict().at("2.weight"), zeros({8, 8})));
  EXPECT_FALSE(same_tensor(model.state_dict().at("0.weight"), before.at("0.weight")));
}

TEST(PipeModule, Errors) {
  const std::vector<Layer> three = {LayerSpec::of<nn::Linear>(4, 8), Layer(relu_fn), Layer(relu_fn)};
  EXPECT_THROW_MSG(PipelineModule(three, 4, 0), "PipelineModule: 3 layers cannot fill 4 stages");
  EXPECT_THROW_MSG(PipelineModule({}, 1, 0), "PipelineModule: the layer list is empty");
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 2, 2), "PipelineModule: stage_id 2 with num_stages 2");
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 0, 0), "PipelineModule: stage_id 0 with num_stages 0");
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 2, 0, {.partition_method = "bogus"}), "unknown partition method 'bogus'");
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 2, 0, {.partition = {0, 3, 2, 4}}),
                   "PipelineModule: partition: expected 3 boundaries for 2 stages, got 4");
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 2, 0, {.partition = {0, 0, 4}}),
                   "PipelineModule: partition: stage 0 is empty");
  EXPECT_THROW_MSG(PipelineModule(mlp(2), 1, 0, {.activation_checkpoint_interval = -1}),
                   "activation_checkpoint_interval must be non-negative, got -1");

  PipelineModule model(tied_model(), 1, 0);
  EXPECT_THROW_MSG(model.compute_loss({}, {}), "PipelineModule::compute_loss: no loss function");
  EXPECT_THROW_MSG(model.tied_stages("nope"), "PipelineModule::tied_stages: no layer is tied by key 'nope'");
  EXPECT_THROW_MSG(model.tied_parameters("nope"), "PipelineModule::tied_parameters: no layer is tied by key 'nope'");
  EXPECT_THROW_MSG(model.forward({}), "PipelineModule::forward: stage 0 got no input tensors");

  EXPECT_THROW_MSG(PipelineModule({TiedLayerSpec("embed", LayerSpec::of<nn::Embedding>(10, 6), {}, {"bias"})}, 1, 0),
                   "PipelineModule: tied layer 'embed' has no parameter 'bias'");
  EXPECT_THROW_MSG(PipelineModule({TiedLayerSpec("embed", LayerSpec::of<nn::Embedding>(10, 6)),
                                   TiedLayerSpec("embed", LayerSpec::of<nn::Embedding>(10, 6), project, {"other"})},
                                  2, 1),
                   "PipelineModule: layer 1 ties 'embed' by other parameter names than layer 0 does");
  EXPECT_THROW_MSG(PipelineModule({TiedLayerSpec("fn", Layer(relu_fn).spec())}, 1, 0),
                   "PipelineModule: tied layer 'fn' (layer 0) built no module to share");
  EXPECT_THROW_MSG(TiedLayerSpec("a.b", LayerSpec::of<nn::Linear>(2, 2)),
                   "TiedLayerSpec: the key must be non-empty and contain no dot");
  EXPECT_THROW_MSG(TiedLayerSpec("a", LayerSpec::of<nn::Linear>(2, 2), {}, {}),
                   "TiedLayerSpec: 'a' names no parameters");
  EXPECT_THROW_MSG(LayerSpec("Linear", nullptr), "LayerSpec: 'Linear' has no build function");
  EXPECT_THROW_MSG(LayerSpec("Linear", [] { return BuiltLayer{}; }).build(),
                   "LayerSpec: building 'Linear' gave no forward function");

  EXPECT_THROW_MSG(pipe::cross_entropy_loss({}, {tensor({1})}), "cross_entropy_loss: expected one output tensor");
  EXPECT_THROW_MSG(pipe::cross_entropy_loss({zeros({1, 2})}, {}), "cross_entropy_loss: expected one label tensor");
}
