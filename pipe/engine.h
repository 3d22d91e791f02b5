#pragma once
// Runs a PipelineModule's schedule on every rank (DeepSpeed's PipelineEngine).
//
//   std::vector<pipe::Layer> layers = {[](const Tensor& x) { return x.flatten(1); },
//       pipe::LayerSpec::of<nn::Linear>(784, 256), pipe::LayerSpec::of<nn::ReLU>(),
//       pipe::LayerSpec::of<nn::Linear>(256, 10)};
//   pipe::PipelineParallelGrid grid(/*num_stages=*/2);              // mpirun -np 4: 2 stages x 2 replicas
//   auto model = std::make_shared<pipe::PipelineModule>(layers, grid, pipe::PipelineModuleOptions{
//       .loss_fn = pipe::cross_entropy_loss, .seed_layers = true});
//   auto sgd = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions(0.1));
//   pipe::PipelineEngine engine(model, grid, sgd, {.micro_batches = 4});
//   data::DataLoader loader(data::FashionMNIST(), data::DataLoaderOptions(32).shuffle(true).drop_last(true)
//       .num_replicas(grid.get_data_parallel_world_size()).rank(grid.get_data_parallel_id()));
//   int64_t next = 0;                                     // the loader's next batch
//   double loss = engine.train_batch([&]() -> std::optional<pipe::MicroBatch> {
//     if (next == loader.size()) return std::nullopt;
//     data::Example<> b = loader.batch(next++);
//     return pipe::MicroBatch{{b.data}, {b.target}};     // inputs for stage 0, labels for the last stage
//   });                                                   // the same loss on every rank
//
// One train_batch is one optimizer step over micro_batches micro-batches on each data-parallel replica.
// The stages holding the model's first and last piece (the first and the last stage; stage 0 alone in a V)
// each draw micro_batches items from their iterator; the others never call it.

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/optim/grad_scaler.h"
#include "strata/optim/optimizer.h"
#include "strata/pipe/module.h"
#include "strata/pipe/p2p.h"
#include "strata/pipe/schedule.h"
#include "strata/pipe/schedule_file.h"
#include "strata/pipe/trace.h"

/// DeepSpeed-style pipeline parallelism: topologies, partitioning, schedules as data, PipelineModule, stage p2p
/// and the PipelineEngine.
namespace strata::pipe {

/// One micro-batch: the first stage's inputs and the last stage's labels (one tensor or several).
struct MicroBatch {
  tensor_list inputs;  ///< fed to the first layer
  tensor_list labels;  ///< given to the loss function with the last layer's outputs
};
/// Yields the next micro-batch, or std::nullopt when there is none left.
using DataIterator = std::function<std::optional<MicroBatch>()>;

/// How the engine runs.
struct PipelineEngineOptions {
  int micro_batches = 1;  ///< micro-batches per train_batch (DeepSpeed's gradient_accumulation_steps)
  /// A pipelined training schedule of schedule_registry() (pipe/schedule.h): "train" (1F1B), "gpipe", "zb-h1",
  /// "interleaved" or "zb-interleaved" (a module of 2 or more chunks), "zb-v" or "dualpipe-v" (2 chunks in a V)
  std::string schedule = "train";
  /// A schedule file in PyTorch's action notation (pipe/schedule_file.h) to run instead of `schedule`: every rank
  /// reads and validates it at construction, and its stages, micro-batches and layout must be the engine's.
  std::string schedule_file = {};
  /// With schedule_file: refuse a file whose stages hold more than this many stages' worth of activations at
  /// once (1F1B holds `stages`); 0 for no limit.
  double max_activations = 0;
  /// Let activation shapes and dtypes change between micro-batches (variable sequence lengths): the metadata
  /// then travels again whenever it changes. Off, it travels once, and a change is an error.
  bool dynamic_shapes = false;
  /// The group stage-to-stage transfers travel in: every rank of WORLD in WORLD's order, WORLD when unset. A group
  /// of its own gives them a communicator (with NCCL, a stream) apart from WORLD's collectives.
  distributed::Group p2p_group = {};
  /// Keep when each instruction and transfer of the last batch ran on this rank (timings().executed and
  /// .transfers), for write_trace.
  bool record_trace = false;
  /// Dynamic loss scaling (DeepSpeed's fp16 "loss_scale": 0): the loss's gradient is multiplied by the scale,
  /// every stage unscales its gradients, and a step with an inf or NaN on any stage or replica is skipped on all
  /// of them (the engine's scaler checks over WORLD: leave process_group unset). The scale is in checkpoints.
  std::optional<optim::GradScalerOptions> grad_scaler = std::nullopt;
};

/// Seconds this rank spent in each instruction kind during the last train_batch or eval_batch.
struct PipelineTimings {
  std::array<double, PipeInstruction::kNumKinds> seconds{};  ///< indexed by PipeInstruction::Kind
  double total = 0;                                          ///< the whole batch on this rank
  int64_t instructions = 0;                                  ///< instructions executed
  double compute() const;                     ///< ForwardPass + BackwardPass + BackwardInput + BackwardWeight seconds
  std::vector<ExecutedInstruction> executed;  ///< with record_trace: every instruction of the batch, in order
  /// With record_trace: each Send and Recv instruction's transfers, from posted until this rank first saw them
  /// complete (it looks after every instruction and wait), in the order posted.
  std::vector<ExecutedInstruction> transfers;
};

/// Loads the optimizer state of a universal checkpoint (PipelineEngine::save_checkpoint, any layout) into
/// `optimizer`, whose parameters are found in `module` by name: what load_checkpoint does, also for a single
/// process over PipelineModule(layers, 1, 0) or any module naming its parameters the same way.
void load_optimizer_states(const std::string& dir, const nn::Module& module, optim::Optimizer& optimizer);

/// Executes pipeline schedules for a module over its grid.
class PipelineEngine {
 public:
  /// Every rank of the grid constructs it together: it checks that the module matches the grid, makes one
  /// group per tie key and replica (sorted keys), broadcasts tied weights from their lowest stage, and
  /// broadcasts every parameter from data-parallel rank 0. The optimizer holds the module's parameters.
  /// The grid must outlive the engine.
  PipelineEngine(std::shared_ptr<PipelineModule> module, const PipelineParallelGrid& grid,
                 std::shared_ptr<optim::Optimizer> optimizer, PipelineEngineOptions options = {});
  /// A temporary grid would dangle.
  PipelineEngine(std::shared_ptr<PipelineModule>, PipelineParallelGrid&&, std::shared_ptr<optim::Optimizer>,
                 PipelineEngineOptions = {}) = delete;
  ~PipelineEngine();

  /// One training step: forward and backward of micro_batches micro-batches, grads reduced across tied
  /// stages and averaged across replicas, one optimizer step. Returns the loss averaged over micro-batches
  /// and replicas, on every rank.
  double train_batch(const DataIterator& data_iter);
  /// Forward only (InferenceSchedule; ForwardSchedule for a chunked module) in eval mode without grad; returns
  /// the mean loss as train_batch does.
  /// With `outputs`, the stage holding the model's last piece (the last stage; stage 0 in a V) appends each
  /// micro-batch's outputs to it (other stages leave it empty).
  double eval_batch(const DataIterator& data_iter, std::vector<tensor_list>* outputs = nullptr);

  /// Writes a universal checkpoint: the module's layer files and each stage's optimizer state, both under
  /// global parameter names ("3.weight", "tied_modules.embed.weight"; Note [universal checkpoints]), with
  /// the schedule and the layout as metadata; data-parallel rank 0 of each stage writes, every rank waits.
  void save_checkpoint(const std::string& dir);
  /// Loads what save_checkpoint wrote in any layout: other stage and replica counts, with or without chunks.
  void load_checkpoint(const std::string& dir, bool load_optimizer_states = true);

  const PipelineTimings& timings() const { return timings_; }  ///< of the last batch on this rank
  /// Writes what every rank executed in its last batch (record_trace) as one Chrome trace: per rank a row of
  /// instructions, labelled as write_chrome_trace labels them, and rows of its transfers in flight (as many as
  /// were in flight at once); times from the earliest instruction or transfer, so it lies beside strata-pipe's
  /// simulated trace. Every rank calls it; rank 0 writes `path`.
  void write_trace(const std::string& path) const;
  PipelineModule& module() const { return *module_; }          ///< the model
  const PipelineParallelGrid& grid() const { return grid_; }   ///< the grid
  optim::Optimizer& optimizer() const { return *optimizer_; }  ///< the optimizer
  /// The loss scaler PipelineEngineOptions::grad_scaler made, nullptr without one.
  optim::GradScaler* grad_scaler() const { return grad_scaler_.get(); }
  const PipelineEngineOptions& options() const { return options_; }  ///< as given

 private:
  struct State;
  double run(const PipeSchedule& schedule, const DataIterator& data_iter, std::vector<tensor_list>* outputs);
  void execute(const PipeInstruction& instruction);
  void reduce_grads();
  std::string where(const char* op) const;
  std::unique_ptr<PipeSchedule> make_schedule_for_stage() const;  ///< this stage's training schedule
  std::string schedule_label() const;                             ///< the schedule's name, or its file

  std::shared_ptr<PipelineModule> module_;
  const PipelineParallelGrid& grid_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  PipelineEngineOptions options_;
  PipelineTimings timings_;
  std::unique_ptr<optim::GradScaler> grad_scaler_;
  std::unique_ptr<State> state_;
  std::shared_ptr<const ScheduleTable> file_;  ///< options_.schedule_file as read, or null
};

}  // namespace strata::pipe
