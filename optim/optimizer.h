#pragma once
// Optimizer, the base of SGD, Adam and AdamW (libtorch's torch::optim names): parameters in param
// groups with their own hyperparameters, per-parameter state, and a state dict that resumes bit-exactly.
//
//   nn::Linear model(784, 10);
//   data::DataLoader loader(data::FashionMNIST(), data::DataLoaderOptions(64).shuffle(true));
//   optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
//   for (auto& [x, y] : loader) {
//     opt.zero_grad();
//     cross_entropy(model(x.flatten(1)), y).backward();
//     opt.step();
//   }
//   optim::StateDict saved = opt.state_dict();   // checkpoint it beside the model's state dict
//   opt.load_state_dict(saved);                  // on resume, into an optimizer made the same way
//   optim::StateDict named = opt.state_dict({"weight", "bias"});  // keyed by name: the order may change
//   opt.load_state_dict(named, {"weight", "bias"});
//
//   // No weight decay for biases: a second group with its own options.
//   optim::AdamW opt2({optim::OptimizerParamGroup({model->weight}),
//                      optim::OptimizerParamGroup({model->bias}, optim::AdamWOptions(1e-3).weight_decay(0))},
//                     optim::AdamWOptions(1e-3));

// state_dict() layout; every value is a tensor, parameters are numbered 0, 1, ... across the groups:
//   param_groups.<g>.params          int64 [n]: the numbers of group g's parameters
//   param_groups.<g>.<name>          the group's hyperparameters ("lr", "momentum", "betas", "amsgrad"):
//                                    float64 0-dim (betas: [2]), flags bool 0-dim
//   state.<i>.step                   int64 0-dim on the CPU: steps parameter i has taken (optimizers that count
//                                    them); step() reads it without waiting for a GPU
//   state.<i>.<buffer>               shaped and typed as parameter i, on its device: "momentum_buffer", "exp_avg", ...
// A parameter has no state entries before its first step.
//
// state_dict(names) holds the same keyed by parameter name, for checkpoints that outlive the parameters' order
// (a pipeline saved in one layout and loaded in another); names[i] names parameter i:
//   param_groups.<g>.<name>          as above; there is no "param_groups.<g>.params"
//   state.<names[i]>.<buffer>        as state.<i>.<buffer>

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "strata/tensor/arg.h"
#include "strata/tensor/tensor.h"

/// Optimizers (SGD, Adam, AdamW) with libtorch's parameter groups and state dicts, and learning-rate schedules.
namespace strata::optim {

/// Name to tensor: what state_dict returns (the same type as nn::StateDict).
using StateDict = std::map<std::string, Tensor>;
/// One parameter's state by name ("step", "exp_avg", ...).
using ParamState = std::map<std::string, Tensor>;

/// Hyperparameters of one param group; SGDOptions, AdamOptions and AdamWOptions derive from it.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;  ///< a copy of the derived options
  virtual double get_lr() const = 0;                            ///< the learning rate
  virtual void set_lr(double lr) = 0;  ///< sets the learning rate (unchecked: Optimizer::set_lr checks)
  /// The hyperparameters as named tensors: what state_dict saves under "param_groups.<g>.".
  virtual StateDict to_tensors() const = 0;
  /// Sets every hyperparameter from tensors named, shaped and typed as to_tensors() makes them.
  virtual void from_tensors(const StateDict& values) = 0;
  /// Throws when a value is out of range; the message starts with `where`.
  virtual void check(const std::string& where) const = 0;
};

/// Parameters sharing hyperparameters. Without options the group takes the optimizer's defaults.
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params);  ///< a group with the optimizer's default options
  /// A group with its own options (copied; they must be the optimizer's options type).
  OptimizerParamGroup(std::vector<Tensor> params, const OptimizerOptions& options);
  OptimizerParamGroup(const OptimizerParamGroup& other);  ///< copies the options too
  OptimizerParamGroup(OptimizerParamGroup&&) = default;   ///< takes the parameters and options
  // Not assignable: an optimizer's groups keep their parameters (their state is numbered by them).
  OptimizerParamGroup& operator=(const OptimizerParamGroup&) = delete;
  OptimizerParamGroup& operator=(OptimizerParamGroup&&) = delete;

  const std::vector<Tensor>& params() const { return params_; }  ///< the group's parameters
  bool has_options() const { return options_ != nullptr; }       ///< false until the optimizer fills in its defaults
  OptimizerOptions& options();              ///< the group's hyperparameters, to read or change between steps
  const OptimizerOptions& options() const;  ///< the group's hyperparameters

 private:
  friend class Optimizer;
  friend class ShardedOptimizer;  // gives its inner optimizer's groups the outer groups' options
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

/// Base of every optimizer: owns the param groups and each parameter's state.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter that has a gradient (in place, without recording history).
  virtual void step() = 0;
  /// Clears every parameter's gradient: undefined (the default, as torch) or zero-filled.
  virtual void zero_grad(bool set_to_none = true);

  double lr() const;       ///< the learning rate of param group 0
  void set_lr(double lr);  ///< sets every group's learning rate (what schedulers call)
  std::span<OptimizerParamGroup> param_groups() { return groups_; }              ///< the groups, options changeable
  std::span<const OptimizerParamGroup> param_groups() const { return groups_; }  ///< the groups
  size_t num_params() const { return state_.size(); }                            ///< parameters over all groups

  /// Hyperparameters and state, laid out as the header comment says. State tensors are the optimizer's
  /// own buffers (no copy): save or clone them before the next step().
  StateDict state_dict() const;
  /// Replaces hyperparameters and state with copies of `dict`'s, each buffer copied to its parameter's device
  /// (a checkpoint read from a file is on the CPU). Every name, shape, dtype and value is checked first; on a
  /// bad dict it throws naming the key and leaves the optimizer unchanged.
  void load_state_dict(const StateDict& dict);
  /// state_dict() keyed by name: names[i] (unique) names parameter i over all groups; "" leaves its state out.
  StateDict state_dict(const std::vector<std::string>& names) const;
  /// Loads a state_dict(names) as load_state_dict(dict) does ("" loads no state); strict = false skips entries
  /// it does not read, as nn::Module's, so a whole model's dict loads into an optimizer over part of it.
  void load_state_dict(const StateDict& dict, const std::vector<std::string>& names, bool strict = true);

 protected:
  /// Checks every parameter and group; groups without options get a copy of `defaults`. `name` ("SGD")
  /// starts error messages.
  Optimizer(std::string name, std::vector<OptimizerParamGroup> groups, const OptimizerOptions& defaults);
  /// The state entries a parameter has after a step under `options` ("step", "exp_avg", ...). "step" is
  /// an int64 0-dim count; every other entry is shaped and typed as the parameter.
  virtual std::vector<std::string> state_names(const OptimizerOptions& options) const = 0;
  /// State entries a parameter may or may not have (Adam's "max_exp_avg_sq" exists once a step ran with
  /// amsgrad on); loaded and checked when present.
  virtual std::vector<std::string> optional_state_names() const { return {}; }
  /// Throws when a gradient does not match its parameter's shape, dtype and device; step() calls it first,
  /// so that a bad gradient leaves every parameter as it was.
  void check_grads() const;
  /// A group's parameters that have a gradient, as numbers into group.params(), split for a fused step (Note
  /// [fused steps] in optimizer.cpp): buckets of one dtype and device whose parameter and gradient are
  /// contiguous, one kernel call each, and the rest, which take the per-parameter path (the dispatch log says so).
  struct FusedSplit {
    std::vector<std::vector<size_t>> buckets;  ///< one per (dtype, device), in order of first appearance
    std::vector<size_t> rest;                  ///< parameters the fused kernels cannot take
  };
  /// Splits `group`'s parameters for a fused step; `step` ("Adam.step") names the op in the dispatch log.
  FusedSplit split_for_fused(const OptimizerParamGroup& group, const char* step) const;

  /// Each parameter's state as state_dict() saves it; an optimizer that keeps its state elsewhere (sharded
  /// across ranks) assembles it here.
  virtual std::vector<ParamState> full_state() const { return state_; }
  /// Takes the state load_state_dict read and checked, one entry per parameter.
  virtual void set_full_state(std::vector<ParamState> state) { state_ = std::move(state); }

  std::string name_;                         ///< the optimizer's name as errors start with it, e.g. "SGD"
  std::vector<OptimizerParamGroup> groups_;  ///< the param groups, each with its options
  std::vector<ParamState> state_;            ///< indexed by parameter number, across groups in order

 private:
  friend class ShardedOptimizer;  // runs an inner optimizer's protected steps and state over its shards
  // The two state dicts: keyed by parameter number (names null) or by name.
  StateDict save(const std::vector<std::string>* names) const;
  void load(const StateDict& dict, const std::vector<std::string>* names, bool strict);
};

namespace detail {
/// dict[key], checked to exist, to be defined and to have `sizes` and `dtype`; messages start with `where`.
const Tensor& state_entry(const StateDict& dict, const std::string& key, IntArrayRef sizes, ScalarType dtype,
                          const std::string& where);
}  // namespace detail

}  // namespace strata::optim
