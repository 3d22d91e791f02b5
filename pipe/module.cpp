// PipelineModule and the layer specs it is built from (pipe/module.h).

#include "strata/pipe/module.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <unordered_set>

#include "strata/autograd/checkpoint.h"
#include "strata/autograd/function.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/nn/safetensors.h"
#include "strata/nn/tensor_parallel.h"
#include "strata/pipe/partition.h"
#include "strata/tensor/creation.h"

namespace strata::pipe {

namespace {

const TiedLayerSpec* tie_of(const Layer& layer) { return std::get_if<TiedLayerSpec>(&layer.get()); }

// The parameter `name` of module (a dotted name for a submodule's), or an undefined tensor.
Tensor find_parameter(const nn::Module& module, const std::string& name) {
  for (auto& [n, p] : module.named_parameters())
    if (n == name) return p;
  return {};
}

std::vector<int> partition_layers(const std::vector<Layer>& layers, const PipelineModuleOptions& options,
                                  int num_stages) {
  const int n = static_cast<int>(layers.size());
  if (!options.partition.empty()) {
    check_partition(options.partition, n, num_stages, "PipelineModule: partition");
    return options.partition;
  }
  std::vector<std::string> type_names;
  for (const Layer& layer : layers) type_names.push_back(layer.spec().type_name());
  // Counting may build a layer, so only "parameters" counts; the other methods read just the length.
  std::vector<int64_t> counts(n, 0);
  if (options.partition_method == "parameters")
    for (int i = 0; i < n; ++i) counts[i] = layers[i].spec().num_parameters();
  return partition_by_method(options.partition_method, counts, type_names, num_stages);
}

}  // namespace

const Tensor& detail::single_input(const tensor_list& x, const std::string& type_name) {
  STRATA_CHECK(x.size() == 1, type_name, ": this layer takes one tensor, got ", x.size(),
               " (write a LayerSpec whose forward takes the whole tuple)");
  return x[0];
}

// ---- layer specs ----

LayerSpec::LayerSpec(std::string type_name, std::function<BuiltLayer()> build, std::optional<int64_t> num_parameters)
    : type_name_(std::move(type_name)), build_(std::move(build)), num_parameters_(num_parameters) {
  STRATA_CHECK(!type_name_.empty(), "LayerSpec: the type name is empty");
  STRATA_CHECK(build_, "LayerSpec: '", type_name_, "' has no build function");
  STRATA_CHECK(!num_parameters_ || *num_parameters_ >= 0, "LayerSpec: '", type_name_, "' reports ", *num_parameters_,
               " parameters");
}

BuiltLayer LayerSpec::build() const {
  BuiltLayer layer = build_();
  STRATA_CHECK(layer.forward, "LayerSpec: building '", type_name_, "' gave no forward function");
  return layer;
}

int64_t LayerSpec::num_parameters() const {
  if (num_parameters_) return *num_parameters_;
  GeneratorStateGuard restore(default_generator());
  NoGradGuard no_grad;
  const BuiltLayer layer = build();
  return layer.module ? layer.module->num_parameters(/*trainable_only=*/true) : 0;
}

std::string LayerSpec::holder_type_name(const char* mangled) {
  const std::string name = autograd::detail::demangle(mangled);
  const size_t colon = name.rfind("::", name.find('<'));  // the last scope outside template arguments
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

TiedLayerSpec::TiedLayerSpec(std::string key, LayerSpec spec,
                             std::function<tensor_list(nn::Module&, const tensor_list&)> forward_fn,
                             std::vector<std::string> tied_weight_attrs)
    : key_(std::move(key)),
      spec_(std::move(spec)),
      forward_fn_(std::move(forward_fn)),
      tied_weight_attrs_(std::move(tied_weight_attrs)) {
  STRATA_CHECK(!key_.empty() && key_.find('.') == std::string::npos,
               "TiedLayerSpec: the key must be non-empty and contain no dot (the module is registered as "
               "tied_modules.<key>), got '",
               key_, "'");
  STRATA_CHECK(!tied_weight_attrs_.empty(), "TiedLayerSpec: '", key_, "' names no parameters to tie");
}

const LayerSpec& Layer::spec() const {
  const TiedLayerSpec* tie = std::get_if<TiedLayerSpec>(&v_);
  return tie ? tie->spec() : std::get<LayerSpec>(v_);
}

const std::string* Layer::tied_key() const {
  const TiedLayerSpec* tie = std::get_if<TiedLayerSpec>(&v_);
  return tie ? &tie->key() : nullptr;
}

Tensor cross_entropy_loss(const tensor_list& outputs, const tensor_list& labels) {
  STRATA_CHECK(outputs.size() == 1, "cross_entropy_loss: expected one output tensor (the logits), got ",
               outputs.size());
  STRATA_CHECK(labels.size() == 1, "cross_entropy_loss: expected one label tensor (the class indices), got ",
               labels.size());
  return cross_entropy(outputs[0], labels[0]);
}

// ---- PipelineModule ----

PipelineModule::PipelineModule(std::vector<Layer> layers, const PipelineParallelGrid& grid,
                               PipelineModuleOptions options)
    : PipelineModule(std::move(layers), grid.get_pipe_parallel_world_size(), grid.get_stage_id(), std::move(options)) {
  model_parallel_rank_ = distributed::get_rank(grid.get_model_parallel_group());
}

PipelineModule::PipelineModule(std::vector<Layer> layers, int num_stages, int stage_id, PipelineModuleOptions options)
    : nn::Module("PipelineModule"),
      layers_(std::move(layers)),
      options_(std::move(options)),
      num_stages_(num_stages),
      stage_id_(stage_id) {
  STRATA_CHECK(!layers_.empty(), "PipelineModule: the layer list is empty");
  STRATA_CHECK(num_stages_ >= 1 && stage_id_ >= 0 && stage_id_ < num_stages_, "PipelineModule: stage_id ", stage_id_,
               " with num_stages ", num_stages_, "; expected num_stages >= 1 and 0 <= stage_id < num_stages");
  STRATA_CHECK(options_.chunks >= 1 && (!options_.v_shape || options_.chunks == 2), "PipelineModule: chunks must be ",
               options_.v_shape ? "2 with v_shape" : "at least 1", ", got ", options_.chunks);
  // In 64 bits: a huge chunk count must not wrap into a small number of pieces.
  STRATA_CHECK(num_layers() >= static_cast<int64_t>(num_stages_) * options_.chunks, "PipelineModule: ", num_layers(),
               " layers cannot fill ", num_stages_, " stages",
               options_.chunks > 1 ? str(" of ", options_.chunks, " chunks") : "");
  layout_ = {num_stages_, options_.chunks, options_.v_shape};
  const int pieces = layout_.num_virtual_stages();
  STRATA_CHECK(options_.activation_checkpoint_interval >= 0,
               "PipelineModule: activation_checkpoint_interval must be non-negative, got ",
               options_.activation_checkpoint_interval);
  for (int i = 0; i < num_layers(); ++i)
    if (const std::string* key = layers_[i].tied_key()) first_tied_.emplace(*key, i);
  for (int i = 0; i < num_layers(); ++i) {
    const TiedLayerSpec* tie = tie_of(layers_[i]);
    if (!tie) continue;
    const int f = first_tied_.at(tie->key());
    STRATA_CHECK(tie_of(layers_[f])->tied_weight_attrs() == tie->tied_weight_attrs(), "PipelineModule: layer ", i,
                 " ties '", tie->key(), "' by other parameter names than layer ", f, " does");
  }
  parts_ = partition_layers(layers_, options_, pieces);
  for (int c = 0; c < num_chunks(); ++c)
    for (int i = chunk_start(c); i < chunk_stop(c); ++i) local_index_.push_back(i);

  // Only this stage's layers are built; a tied module once per stage, at its key's first layer here.
  std::shared_ptr<nn::Module> tied_modules;
  std::map<std::string, BuiltLayer> tied;
  for (int c = 0; c < num_chunks(); ++c) {
    chunk_begin_.push_back(static_cast<int>(local_.size()));
    for (int i = chunk_start(c); i < chunk_stop(c); ++i) {
      if (options_.seed_layers) manual_seed(options_.base_seed + static_cast<uint64_t>(i));
      const TiedLayerSpec* tie = tie_of(layers_[i]);
      if (!tie) {
        BuiltLayer layer = layers_[i].spec().build();
        if (layer.module) register_module(std::to_string(i), layer.module);
        local_.push_back(std::move(layer));
        continue;
      }
      auto [it, is_first] = tied.try_emplace(tie->key());
      BuiltLayer& shared = it->second;
      if (is_first) {
        shared = tie->spec().build();
        STRATA_CHECK(shared.module, "PipelineModule: tied layer '", tie->key(), "' (layer ", i,
                     ") built no module to share");
        for (const std::string& attr : tie->tied_weight_attrs())
          STRATA_CHECK(find_parameter(*shared.module, attr).defined(), "PipelineModule: tied layer '", tie->key(),
                       "' has no parameter '", attr, "' (tied_weight_attrs must name parameters of its module)");
        if (!tied_modules) tied_modules = register_module("tied_modules", std::make_shared<nn::Module>("TiedModules"));
        tied_modules->register_module(tie->key(), shared.module);
      }
      LayerForward forward = shared.forward;
      if (const auto& f = tie->forward_fn())
        forward = [f, module = shared.module](const tensor_list& x) { return f(*module, x); };
      local_.push_back(BuiltLayer{shared.module, std::move(forward)});
    }
  }
  chunk_begin_.push_back(static_cast<int>(local_.size()));

  // Each checkpointed run's parameters, each once: a tied module may run twice in a run.
  const int k = options_.activation_checkpoint_interval;
  checkpoint_parameters_.resize(num_chunks());
  for (int c = 0; c < num_chunks() && k > 0; ++c)
    for (int begin = chunk_begin_[c], stop = chunk_begin_[c + 1]; begin < stop; begin = run_end(begin, stop)) {
      tensor_list& parameters = checkpoint_parameters_[c].emplace_back();
      std::unordered_set<const TensorImpl*> seen;
      for (int j = begin; j < run_end(begin, stop); ++j)
        if (local_[j].module)
          for (const Tensor& p : local_[j].module->parameters())
            if (seen.insert(p.impl_ptr().get()).second) parameters.push_back(p);
    }
  // Built without a grid, tensor-parallel layers still name their group: its rank 0 writes the layer files.
  for (const auto& [name, split] : nn::parameter_splits(*this)) {
    model_parallel_rank_ = split.group->rank();
    break;
  }
}

int PipelineModule::run_end(int begin, int stop) const {
  // begin + k may pass INT_MAX (k = INT_MAX means one run per chunk): step by what is left at most.
  return begin + std::min(options_.activation_checkpoint_interval, stop - begin);
}

int PipelineModule::chunk_start(int chunk) const {
  STRATA_CHECK(0 <= chunk && chunk < num_chunks(), "PipelineModule: chunk ", chunk, " is out of range for ",
               num_chunks(), " chunks");
  return parts_[layout_.virtual_stage(stage_id_, chunk)];
}

int PipelineModule::chunk_stop(int chunk) const {
  STRATA_CHECK(0 <= chunk && chunk < num_chunks(), "PipelineModule: chunk ", chunk, " is out of range for ",
               num_chunks(), " chunks");
  return parts_[layout_.virtual_stage(stage_id_, chunk) + 1];
}

tensor_list PipelineModule::forward(const tensor_list& inputs, int chunk) {
  STRATA_CHECK(!inputs.empty(), "PipelineModule::forward: stage ", stage_id_, " got no input tensors");
  STRATA_CHECK(0 <= chunk && chunk < num_chunks(), "PipelineModule::forward: chunk ", chunk, " is out of range for ",
               num_chunks(), " chunks");
  auto run = [this](int begin, int end) {
    return [this, begin, end](const tensor_list& x) {
      tensor_list y = x;
      for (int j = begin; j < end; ++j) y = local_[j].forward(y);
      return y;
    };
  };
  const int first = chunk_begin_[chunk], end = chunk_begin_[chunk + 1], k = options_.activation_checkpoint_interval;
  if (k == 0 || !is_training() || !GradMode::is_enabled()) return run(first, end)(inputs);
  tensor_list x = inputs;
  for (int r = 0, begin = first; begin < end; ++r, begin = run_end(begin, end)) {
    tensor_list trainable;  // parameters frozen after construction take no gradient
    for (const Tensor& p : checkpoint_parameters_[chunk][r])
      if (p.requires_grad()) trainable.push_back(p);
    x = autograd::checkpoint(run(begin, run_end(begin, end)), x, trainable);
  }
  return x;
}

Tensor PipelineModule::compute_loss(const tensor_list& outputs, const tensor_list& labels) const {
  STRATA_CHECK(options_.loss_fn, "PipelineModule::compute_loss: no loss function (PipelineModuleOptions::loss_fn)");
  return options_.loss_fn(outputs, labels);
}

std::vector<std::string> PipelineModule::tied_keys() const {
  std::vector<std::string> keys;
  for (const auto& [key, index] : first_tied_) keys.push_back(key);
  return keys;
}

std::vector<int> PipelineModule::tied_stages(const std::string& key) const {
  STRATA_CHECK(first_tied_.count(key), "PipelineModule::tied_stages: no layer is tied by key '", key, "'");
  std::set<int> stages;
  for (int v = 0; v < layout_.num_virtual_stages(); ++v)
    for (int i = parts_[v]; i < parts_[v + 1]; ++i)
      if (const std::string* k = layers_[i].tied_key(); k && *k == key) stages.insert(layout_.stage_of(v));
  return {stages.begin(), stages.end()};
}

std::vector<Tensor> PipelineModule::tied_parameters(const std::string& key) const {
  STRATA_CHECK(first_tied_.count(key), "PipelineModule::tied_parameters: no layer is tied by key '", key, "'");
  for (size_t j = 0; j < local_.size(); ++j) {
    const TiedLayerSpec* tie = tie_of(layers_[local_index_[j]]);
    if (!tie || tie->key() != key) continue;
    std::vector<Tensor> params;
    for (const std::string& attr : tie->tied_weight_attrs()) params.push_back(find_parameter(*local_[j].module, attr));
    return params;
  }
  return {};
}

void PipelineModule::save_state_dict(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  STRATA_CHECK(!ec, "PipelineModule::save_state_dict: cannot create the folder '", dir, "': ", ec.message());
  for (size_t j = 0; j < local_.size(); ++j) {
    const int i = local_index_[j];
    const std::string* key = layers_[i].tied_key();
    if (key && first_tied_.at(*key) != i) continue;  // the stage holding the key's first layer writes the module
    const std::shared_ptr<nn::Module>& module = local_[j].module;
    if (!module) continue;
    // Tensor-parallel layers' slices are gathered whole (every rank of the group takes part); one rank writes.
    const nn::StateDict state = nn::whole_state_dict(*module);
    if (!state.empty() && model_parallel_rank_ == 0) nn::save_file(state, ckpt_layer_path(dir, i));
  }
}

void PipelineModule::load_state_dir(const std::string& dir, bool strict) {
  // Every file is read and checked before any module is written, so a bad folder changes nothing.
  std::vector<std::pair<nn::Module*, nn::StateDict>> loads;
  std::set<std::string> tied_seen;  // a tied module loads once per stage
  for (size_t j = 0; j < local_.size(); ++j) {
    const int i = local_index_[j];
    const std::string* key = layers_[i].tied_key();
    nn::Module* module = local_[j].module.get();
    if (!module || module->state_dict().empty() || (key && !tied_seen.insert(*key).second)) continue;
    const std::string path = ckpt_layer_path(dir, key ? first_tied_.at(*key) : i);
    STRATA_CHECK(std::filesystem::exists(path), "PipelineModule::load_state_dir: layer ", i, " has no checkpoint: '",
                 path, "' does not exist");
    nn::StateDict dict;
    try {
      dict = nn::slice_state_dict(*module, nn::load_file(path));
      module->check_state_dict(dict, strict);
    } catch (const Error& e) {
      STRATA_CHECK(false, "PipelineModule::load_state_dir: '", path, "': ", e.what());
    }
    loads.emplace_back(module, std::move(dict));
  }
  for (auto& [module, dict] : loads) module->load_state_dict(dict, strict);
}

std::string PipelineModule::ckpt_layer_path(const std::string& dir, int layer_idx) {
  STRATA_CHECK(layer_idx >= 0, "PipelineModule::ckpt_layer_path: the layer index must be non-negative, got ",
               layer_idx);
  char index[16];
  std::snprintf(index, sizeof index, "%02d", layer_idx);
  return dir + "/layer_" + index + "-model_states.safetensors";
}

}  // namespace strata::pipe
