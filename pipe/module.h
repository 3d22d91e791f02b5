#pragma once
// A model described as a list of layers, split into pipeline stages (DeepSpeed's PipelineModule).
// Each rank builds only the layers of its own stage.
//
//   std::vector<pipe::Layer> layers = {
//       [](const Tensor& x) { return x.flatten(1); },               // a parameterless function
//       pipe::LayerSpec::of<nn::Linear>(784, 256), pipe::LayerSpec::of<nn::ReLU>(),
//       pipe::LayerSpec::of<nn::Linear>(256, 10)};
//   pipe::PipelineParallelGrid grid(/*num_stages=*/2);
//   auto model = std::make_shared<pipe::PipelineModule>(layers, grid, pipe::PipelineModuleOptions{
//       .partition_method = "parameters", .loss_fn = pipe::cross_entropy_loss, .seed_layers = true});
//   model->parts();                          // {0, 2, 4}: layer boundaries of the stages
//   tensor_list y = model->forward({randn({64, 28, 28})});     // this stage's layers only
//
// Tied layers share one module per stage, e.g. an embedding reused as the output projection:
//   const int64_t vocab = 50257, dim = 768;
//   std::vector<pipe::Layer> gpt = {
//       pipe::TiedLayerSpec("embed", pipe::LayerSpec::of<nn::Embedding>(vocab, dim)),
//       pipe::LayerSpec::of<nn::TransformerBlock>(dim, 12),
//       pipe::TiedLayerSpec("embed", pipe::LayerSpec::of<nn::Embedding>(vocab, dim),
//           [](nn::Module& m, const tensor_list& x) {
//             return tensor_list{matmul(x[0], m.named_parameters()[0].second.t())}; })};

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "strata/nn/module.h"
#include "strata/pipe/layout.h"
#include "strata/pipe/topology.h"

namespace strata::pipe {

/// A layer's forward: the tensors it receives to the tensors it passes on (one, or a tuple).
using LayerForward = std::function<tensor_list(const tensor_list&)>;

/// What a LayerSpec builds: the module (null for a plain function) and the function that runs it.
struct BuiltLayer {
  std::shared_ptr<nn::Module> module;  ///< holds the parameters; null when there are none
  LayerForward forward;                ///< runs the layer
};

namespace detail {
/// x[0], after checking that x holds exactly one tensor (the input of a one-tensor layer of `type_name`).
const Tensor& single_input(const tensor_list& x, const std::string& type_name);
}  // namespace detail

/// A layer described without building it (DeepSpeed's LayerSpec): only the stage that owns it builds it.
class LayerSpec {
 public:
  /// A layer of type `type_name` (what "type:REGEX" partitioning matches) made by `build`; num_parameters,
  /// when given, is its trainable parameter count, so "parameters" partitioning need not build it.
  LayerSpec(std::string type_name, std::function<BuiltLayer()> build, std::optional<int64_t> num_parameters = {});

  /// A module holder built from args, e.g. LayerSpec::of<nn::Linear>(784, 256); its forward maps one tensor to one.
  /// A layer class with a static count_parameters(args...) (Linear, Embedding, LayerNorm) is counted without
  /// being built; others are built once when counted.
  template <class Holder, class... Args>
  static LayerSpec of(Args... args) {
    std::string name = holder_type_name(typeid(Holder).name());
    return LayerSpec(
        name,
        [name, args...] {
          Holder holder(args...);
          return BuiltLayer{holder.ptr(), [holder, name](const tensor_list& x) {
                              return tensor_list{holder(detail::single_input(x, name))};
                            }};
        },
        count_parameters<typename Holder::ContainedType>(args...));
  }

  BuiltLayer build() const;                                    ///< makes the layer
  const std::string& type_name() const { return type_name_; }  ///< e.g. "Linear"
  /// The trainable parameter count: the reported one, else counted by building the layer once (with the
  /// default generator's position restored afterwards, so counting does not change later initialisation).
  int64_t num_parameters() const;

 private:
  static std::string holder_type_name(const char* mangled);  // "strata::nn::Linear" -> "Linear"
  // Impl::count_parameters(args...) where the layer class has one, else nothing (num_parameters() builds it).
  template <class Impl, class... Args>
  static std::optional<int64_t> count_parameters(const Args&... args) {
    if constexpr (requires { Impl::count_parameters(args...); }) return Impl::count_parameters(args...);
    return std::nullopt;
  }
  std::string type_name_;
  std::function<BuiltLayer()> build_;
  std::optional<int64_t> num_parameters_;
};

/// Layers with the same key share one module on each stage; the stages holding the key keep its
/// tied_weight_attrs equal (broadcast from the lowest stage at start, grads summed across them each step).
class TiedLayerSpec {
 public:
  /// `spec` builds the shared module (on the first occurrence on a stage); `forward_fn` runs it at this
  /// occurrence (default: the spec's own forward); tied_weight_attrs are parameter names of the module.
  TiedLayerSpec(std::string key, LayerSpec spec,
                std::function<tensor_list(nn::Module&, const tensor_list&)> forward_fn = {},
                std::vector<std::string> tied_weight_attrs = {"weight"});
  const std::string& key() const { return key_; }  ///< the sharing key
  const LayerSpec& spec() const { return spec_; }  ///< builds the shared module
  /// May be empty
  const std::function<tensor_list(nn::Module&, const tensor_list&)>& forward_fn() const { return forward_fn_; }
  /// The shared parameter names
  const std::vector<std::string>& tied_weight_attrs() const { return tied_weight_attrs_; }

 private:
  std::string key_;
  LayerSpec spec_;
  std::function<tensor_list(nn::Module&, const tensor_list&)> forward_fn_;
  std::vector<std::string> tied_weight_attrs_;
};

/// One entry of the layer list: a LayerSpec, a TiedLayerSpec, or a parameterless one-tensor function.
class Layer {
 public:
  Layer(LayerSpec spec) : v_(std::move(spec)) {}      ///< a layer built on its stage
  Layer(TiedLayerSpec spec) : v_(std::move(spec)) {}  ///< a shared layer
  /// A function such as a reshape or an activation; `type_name` is what "type:REGEX" matches.
  template <class F>
  requires std::is_invocable_r_v<Tensor, F, const Tensor&> Layer(F f, std::string type_name = "Function")
      : v_(LayerSpec(
            type_name,
            [f, type_name] {
              return BuiltLayer{nullptr, [f, type_name](const tensor_list& x) {
                                  return tensor_list{f(detail::single_input(x, type_name))};
                                }};
            },
            0)) {}
  const std::variant<LayerSpec, TiedLayerSpec>& get() const { return v_; }  ///< the spec
  const LayerSpec& spec() const;        ///< the LayerSpec, or the TiedLayerSpec's spec
  const std::string* tied_key() const;  ///< the tie key, null for untied layers

 private:
  std::variant<LayerSpec, TiedLayerSpec> v_;
};

/// The loss on the last stage: outputs of the last layer and the micro-batch's labels to a scalar.
using LossFn = std::function<Tensor(const tensor_list& outputs, const tensor_list& labels)>;
/// cross_entropy(outputs[0], labels[0]): mean over the micro-batch.
Tensor cross_entropy_loss(const tensor_list& outputs, const tensor_list& labels);

/// How a PipelineModule is split and run.
struct PipelineModuleOptions {
  std::string partition_method = "parameters";  ///< "uniform", "parameters" or "type:REGEX" (pipe/partition.h)
  std::vector<int> partition = {};  ///< explicit boundaries (num_stages + 1), used instead of the method when set
  LossFn loss_fn = {};              ///< the last stage's loss; required for training
  bool seed_layers = false;         ///< seed the default generator with base_seed + layer index before each build
  uint64_t base_seed = 1234;        ///< see seed_layers
  int activation_checkpoint_interval = 0;  ///< > 0: recompute every run of this many layers during backward
  /// Model chunks per stage, for the interleaved (2 or more) and V (2) schedules: the layers are cut into
  /// stages x chunks pieces (the partition has that many), placed on the stages by the schedule's StageLayout.
  int chunks = 1;
  bool v_shape = false;  ///< place the chunks in a V (zb-v) instead of Megatron's loop (interleaved)
};

/// This stage's part of a layer list. The parameters are registered as "<layer index>.<name>" (global layer
/// indices) and tied modules as "tied_modules.<key>.<name>".
class PipelineModule : public nn::Module {
 public:
  /// This rank's stage of `grid` (grid.get_stage_id() of grid.get_pipe_parallel_world_size() stages).
  PipelineModule(std::vector<Layer> layers, const PipelineParallelGrid& grid, PipelineModuleOptions options = {});
  /// Stage stage_id of num_stages, with no processes involved (a single process uses 1 and 0).
  PipelineModule(std::vector<Layer> layers, int num_stages, int stage_id, PipelineModuleOptions options = {});

  /// Runs this stage's layers of model chunk `chunk` (runs of activation_checkpoint_interval layers under
  /// autograd::checkpoint when that is on, in training mode with grad enabled).
  tensor_list forward(const tensor_list& inputs, int chunk = 0);
  /// options().loss_fn on outputs and labels; throws when there is none.
  Tensor compute_loss(const tensor_list& outputs, const tensor_list& labels) const;

  int num_stages() const { return num_stages_; }                       ///< stages in the pipeline
  int stage_id() const { return stage_id_; }                           ///< this module's stage
  int num_layers() const { return static_cast<int>(layers_.size()); }  ///< layers of the whole model
  int num_chunks() const { return layout_.chunks; }                    ///< model chunks per stage
  const StageLayout& layout() const { return layout_; }                ///< where the chunks are
  /// S x chunks + 1 boundaries: virtual stage v (StageLayout) has layers [parts[v], parts[v+1])
  const std::vector<int>& parts() const { return parts_; }
  int chunk_start(int chunk) const;                   ///< first layer of this stage's chunk
  int chunk_stop(int chunk) const;                    ///< one past its last layer
  int local_start() const { return chunk_start(0); }  ///< first layer of this stage's chunk 0 (of the stage, unchunked)
  int local_stop() const { return chunk_stop(0); }    ///< one past chunk 0's last layer
  const PipelineModuleOptions& options() const { return options_; }  ///< as given

  /// Every tie key of the whole model, sorted (the order groups are made in on every rank).
  std::vector<std::string> tied_keys() const;
  /// The stages holding an occurrence of `key`, ascending.
  std::vector<int> tied_stages(const std::string& key) const;
  /// This stage's tied parameters of `key` (its tied_weight_attrs, in order); empty when the stage has none.
  std::vector<Tensor> tied_parameters(const std::string& key) const;

  /// Writes one safetensors file per layer of this stage that has parameters, named by the global layer
  /// index (ckpt_layer_path); a tied module goes in the file of its key's first layer. Tensor-parallel layers
  /// are saved whole (nn::whole_state_dict): every rank of the model-parallel group calls it, its rank 0 writes.
  void save_state_dict(const std::string& dir) const;
  /// Loads this stage's layers from files save_state_dict wrote with any number of stages (and any tensor-parallel
  /// size: each rank keeps its slice).
  void load_state_dir(const std::string& dir, bool strict = true);
  /// dir + "/layer_07-model_states.safetensors" for layer 7.
  static std::string ckpt_layer_path(const std::string& dir, int layer_idx);

 private:
  int run_end(int begin, int stop) const;  // the end of the checkpointed run starting at local layer begin
  std::vector<Layer> layers_;
  PipelineModuleOptions options_;
  int num_stages_ = 1, stage_id_ = 0;
  int model_parallel_rank_ = 0;  // in the model-parallel group (the grid's, else the split layers'): 0 writes files
  StageLayout layout_;
  std::vector<int> parts_;
  std::map<std::string, int> first_tied_;  // each tie key's first layer in the whole model
  std::vector<BuiltLayer> local_;          // this stage's layers, chunk by chunk
  std::vector<int> local_index_;           // local_[j] is layer local_index_[j] of the model
  std::vector<int> chunk_begin_;           // chunk c is local_[chunk_begin_[c] .. chunk_begin_[c + 1])
  // With activation checkpointing: per chunk, each checkpointed run's parameters, once.
  std::vector<std::vector<tensor_list>> checkpoint_parameters_;
};

}  // namespace strata::pipe
