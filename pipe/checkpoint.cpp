// Universal checkpoints of the pipeline engine: the module's layer files and each stage's optimizer state under
// global parameter names, loadable in any layout.
//
// Note [universal checkpoints]: layer files are named by global layer index and parameters by global name,
// so the model's state never depended on the layout. Each stage saves its optimizer's state keyed by its
// parameters' global names (Optimizer::state_dict(names); a tied parameter's only from the lowest stage
// holding it, since its copies share one state) with each group's hyperparameters. A load merges every
// stage's file, stage 0's entries first where files share a key (the hyperparameters, the grad scaler), and
// loads the state of this optimizer's parameters by their names, skipping the other parameters'. Saving first
// removes the optimizer files a save in another layout left, so a folder holds one checkpoint. With a
// grad_scaler, every stage's file also holds its state under "grad_scaler." (the same on every rank). Tensor-
// parallel parameters and their optimizer state are saved whole (gathered over the model-parallel group, whose
// rank 0 writes) and sliced on load, so a checkpoint also resumes at another tensor-parallel size. A
// ZeroRedundancyOptimizer's state dict is the unsharded optimizer's (it gathers its shards; every replica takes
// part), so files with and without ZeRO are the same, and each resumes at any data-parallel size.
#include "strata/pipe/engine.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

#include "strata/distributed/collectives.h"
#include "strata/nn/safetensors.h"
#include "strata/nn/tensor_parallel.h"

namespace strata::pipe {
namespace dist = strata::distributed;

namespace {

constexpr const char* kOptimizerPrefix = "optim_states-";
constexpr const char* kUniversalFormat = "strata-universal-1";
constexpr const char* kScalerPrefix = "grad_scaler.";  // the engine's GradScaler state, the same on every stage
constexpr const char* kTiedPrefix = "tied_modules.";   // PipelineModule's names of tied parameters

std::string optimizer_path(const std::string& dir, const PipelineParallelGrid& grid) {
  std::ostringstream os;
  os << dir << "/" << kOptimizerPrefix << "stage_" << std::setw(2) << std::setfill('0') << grid.get_stage_id() << "_of_"
     << std::setw(2) << grid.get_pipe_parallel_world_size() << ".safetensors";
  return os.str();
}

// The global name of each of the optimizer's parameters, in its own order.
std::vector<std::string> parameter_names(const nn::Module& module, const optim::Optimizer& optimizer,
                                         const char* where) {
  std::map<const TensorImpl*, std::string> by_impl;
  for (const auto& [name, p] : module.named_parameters()) by_impl.emplace(p.impl_ptr().get(), name);
  std::vector<std::string> names;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params()) {
      const auto it = by_impl.find(p.impl_ptr().get());
      STRATA_CHECK(it != by_impl.end(), where, ": the optimizer holds a tensor of shape ", p.sizes(),
                   " that is not a parameter of the module");
      names.push_back(it->second);
    }
  return names;
}

// Replaces each optimizer state entry of a tensor-parallel parameter ("state.<name>.<buffer>", not its step) with
// f(entry, the parameter's split): whole on save, this rank's slice on load.
template <class F>
void for_each_split_state(nn::StateDict& dict, const nn::Module& module, F&& f) {
  for (const auto& [name, split] : nn::parameter_splits(module)) {
    const std::string prefix = "state." + name + ".";
    for (auto it = dict.lower_bound(prefix); it != dict.end() && it->first.starts_with(prefix); ++it)
      if (it->first != prefix + "step") it->second = f(it->second, split);
  }
}

std::vector<std::filesystem::path> optimizer_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().filename().string().starts_with(kOptimizerPrefix)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Every stage's optimizer file of a universal checkpoint in one dict; stage 0's entries win where files share a key.
nn::StateDict read_optimizer_files(const std::string& dir, const char* where) {
  const std::vector<std::filesystem::path> files = optimizer_files(dir);
  STRATA_CHECK(!files.empty(), where, ": '", dir, "' holds no optimizer state (", kOptimizerPrefix, "*.safetensors)");
  nn::StateDict merged;
  bool stage0 = false;
  for (const auto& path : files) {
    std::map<std::string, std::string> meta;
    nn::StateDict dict = nn::load_file(path.string(), &meta);
    STRATA_CHECK(meta["format"] == kUniversalFormat, where, ": '", path.string(), "' is not a ", kUniversalFormat,
                 " optimizer file (format \"", meta["format"], "\")");
    const bool from_stage0 = meta["stage"] == "0";
    stage0 = stage0 || from_stage0;
    for (auto& [key, value] : dict)
      if (from_stage0)
        merged.insert_or_assign(key, value);
      else
        merged.emplace(key, value);
  }
  STRATA_CHECK(stage0, where, ": '", dir, "' has no optimizer file of stage 0");
  return merged;
}

}  // namespace

void PipelineEngine::save_checkpoint(const std::string& dir) {
  if (dist::get_rank() == 0)
    for (const auto& stale : optimizer_files(dir)) std::filesystem::remove(stale);
  dist::barrier();
  std::vector<std::string> names = parameter_names(*module_, *optimizer_, "PipelineEngine::save_checkpoint");
  const size_t tied = std::strlen(kTiedPrefix);
  for (std::string& name : names)  // "" leaves out a tied parameter another stage saves
    if (name.starts_with(kTiedPrefix) &&
        module_->tied_stages(name.substr(tied, name.find('.', tied) - tied)).front() != grid_.get_stage_id())
      name.clear();
  // On every replica: a ZeroRedundancyOptimizer gathers its shards (a collective over the replicas), and the
  // state of tensor-parallel parameters is gathered whole over the model-parallel group.
  nn::StateDict universal = optimizer_->state_dict(names);
  for_each_split_state(universal, *module_, nn::whole_tensor);
  if (grid_.get_data_parallel_id() == 0) module_->save_state_dict(dir);
  if (grid_.get_data_parallel_id() == 0 && dist::get_rank(grid_.get_model_parallel_group()) == 0) {
    if (grad_scaler_)
      for (auto& [key, value] : grad_scaler_->state_dict()) universal.emplace(kScalerPrefix + key, value);
    const StageLayout& layout = module_->layout();
    nn::save_file(universal, optimizer_path(dir, grid_),
                  {{"format", kUniversalFormat},
                   {"schedule", schedule_label()},
                   {"stage", std::to_string(grid_.get_stage_id())},
                   {"stages", std::to_string(layout.stages)},
                   {"chunks", std::to_string(layout.chunks)},
                   {"v_shape", layout.v_shape ? "true" : "false"},
                   {"data_parallel", std::to_string(grid_.get_data_parallel_world_size())},
                   {"tensor_parallel", std::to_string(grid_.get_model_parallel_world_size())}});
  }
  dist::barrier();  // every file is complete before any rank goes on (and perhaps loads it)
}

void PipelineEngine::load_checkpoint(const std::string& dir, bool load_optimizer_states) {
  constexpr const char* kWhere = "PipelineEngine::load_checkpoint";
  if (!load_optimizer_states) return module_->load_state_dir(dir);
  // The files are read, and the scaler's state checked, first, so that a checkpoint without one changes nothing.
  nn::StateDict merged = read_optimizer_files(dir, kWhere);
  for_each_split_state(merged, *module_, nn::slice_tensor);
  nn::StateDict scaler;
  if (grad_scaler_) {
    for (auto& [key, value] : merged)
      if (key.starts_with(kScalerPrefix)) scaler.emplace(key.substr(std::strlen(kScalerPrefix)), value);
    STRATA_CHECK(!scaler.empty(), kWhere, ": '", dir,
                 "' was saved without a grad_scaler; load it with load_optimizer_states = false to start a new scale");
  }
  module_->load_state_dir(dir);
  optimizer_->load_state_dict(merged, parameter_names(*module_, *optimizer_, kWhere), /*strict=*/false);
  if (grad_scaler_) grad_scaler_->load_state_dict(scaler);
}

void load_optimizer_states(const std::string& dir, const nn::Module& module, optim::Optimizer& optimizer) {
  constexpr const char* kWhere = "load_optimizer_states";
  nn::StateDict merged = read_optimizer_files(dir, kWhere);
  for_each_split_state(merged, module, nn::slice_tensor);
  optimizer.load_state_dict(merged, parameter_names(module, optimizer, kWhere), /*strict=*/false);
}

}  // namespace strata::pipe
