// The pipeline engine: runs a schedule's instructions on this rank over its stage (pipe/stage.cpp).
#include "strata/pipe/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/distributed/flight_recorder.h"
#include "strata/nn/data_parallel.h"
#include "strata/nn/tensor_parallel.h"
#include "strata/optim/zero_redundancy.h"
#include "strata/pipe/planned_schedule.h"
#include "strata/pipe/stage.h"
#include "strata/pipe/trace.h"
#include "strata/tensor/creation.h"

namespace strata::pipe {
namespace dist = strata::distributed;

namespace {

/// The names PipelineEngineOptions::schedule takes, for its error.
std::string training_schedules() {
  std::string names;
  for (const ScheduleEntry& entry : schedule_registry())
    if (entry.training && entry.pipelined) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  return names;
}

// A parameter's gradient, zero-filled first when backward never reached it (every rank must contribute).
Tensor grad_or_zeros(Tensor param) {
  Tensor& g = param.mutable_grad();
  if (!g.defined()) g = zeros_like(param);
  return g;
}

// The global ranks of `group` (WORLD when empty) in group-rank order: two groups of the same ranks are one.
const std::vector<int>& global_ranks(const dist::Group& group) {
  return (group ? group : dist::get_world_group())->ranks();
}

}  // namespace

double PipelineTimings::compute() const {
  double total = 0;
  for (size_t k = 0; k < PipeInstruction::kNumKinds; ++k)
    if (is_compute(static_cast<PipeInstruction::Kind>(k))) total += seconds[k];
  return total;
}

struct PipelineEngine::State {
  State(const PipelineParallelGrid& grid, StageLayout layout, Device device, bool dynamic_shapes, dist::Group p2p)
      : stage(grid, layout, device, dynamic_shapes, std::move(p2p)) {}
  struct Tie {
    std::vector<Tensor> params;
    dist::Group group;
    int root;  // global rank of the lowest stage holding the key
  };
  PipelineStage stage;
  std::vector<Tie> ties;
  // Per batch:
  bool training = true;
  const DataIterator* data_iter = nullptr;
  std::vector<tensor_list>* eval_outputs = nullptr;
  double loss_sum = 0;
};

PipelineEngine::PipelineEngine(std::shared_ptr<PipelineModule> module, const PipelineParallelGrid& grid,
                               std::shared_ptr<optim::Optimizer> optimizer, PipelineEngineOptions options)
    : module_(std::move(module)), grid_(grid), optimizer_(std::move(optimizer)), options_(std::move(options)) {
  STRATA_CHECK(module_ != nullptr, "PipelineEngine: got no module");
  STRATA_CHECK(optimizer_ != nullptr, "PipelineEngine: got no optimizer");
  STRATA_CHECK(
      module_->num_stages() == grid_.get_pipe_parallel_world_size() && module_->stage_id() == grid_.get_stage_id(),
      "PipelineEngine: the module was built as stage ", module_->stage_id(), " of ", module_->num_stages(),
      " stages, but this rank is stage ", grid_.get_stage_id(), " of ", grid_.get_pipe_parallel_world_size());
  STRATA_CHECK(options_.micro_batches >= 1, "PipelineEngine: micro_batches must be at least 1, got ",
               options_.micro_batches);
  {
    const StageLayout module_layout = module_->layout();
    StageLayout want;
    if (options_.schedule_file.empty()) {
      const ScheduleEntry& entry = schedule_entry(options_.schedule);
      STRATA_CHECK(entry.training && entry.pipelined,
                   "PipelineEngine: schedule must be a pipelined training schedule (", training_schedules(),
                   "), got \"", options_.schedule, "\"");
      // The schedule's layout must be the module's: a schedule of several chunk counts takes the module's.
      STRATA_CHECK(!entry.more_chunks || (module_layout.chunks >= entry.chunks && !module_layout.v_shape),
                   "PipelineEngine: the ", entry.name, " schedule needs a PipelineModule of ", entry.chunks,
                   " or more chunks per stage on the loop; set PipelineModuleOptions::chunks >= ", entry.chunks,
                   " and v_shape = false (the module has chunks = ", module_layout.chunks,
                   module_layout.v_shape ? ", v_shape = true" : "", ")");
      want = make_schedule_for_stage()->layout();
    } else {
      // Validated as it is read, so a bad file fails here on every rank, before any transfer.
      file_ = std::make_shared<const ScheduleTable>(
          ScheduleTable::load(options_.schedule_file, {.max_activations = options_.max_activations}));
      STRATA_CHECK(
          file_->stages() == grid_.get_pipe_parallel_world_size() && file_->micro_batches() == options_.micro_batches,
          "PipelineEngine: ", options_.schedule_file, " schedules ", file_->stages(), " stages x ",
          file_->micro_batches(), " micro-batches, but the engine runs ", grid_.get_pipe_parallel_world_size(),
          " stages x ", options_.micro_batches, " (PipelineEngineOptions::micro_batches)");
      want = file_->layout();
    }
    // One stage places its chunks alike in the loop and the V, and a file of one line reads as the loop.
    const bool fits = want == module_layout || (want.stages == 1 && want.chunks == module_layout.chunks);
    STRATA_CHECK(fits, "PipelineEngine: the ", schedule_label(), " schedule runs ", want.chunks, " model chunk",
                 want.chunks == 1 ? "" : "s", " per stage", want.v_shape ? " in a V" : "",
                 ", but the PipelineModule was built with chunks = ", module_layout.chunks,
                 module_layout.v_shape ? " in a V" : "", "; set PipelineModuleOptions::chunks = ", want.chunks,
                 " and v_shape = ", want.v_shape ? "true" : "false");
  }
  std::unordered_set<const TensorImpl*> own;
  for (const Tensor& p : module_->parameters()) own.insert(p.impl_ptr().get());
  for (const auto& group : optimizer_->param_groups())
    for (const Tensor& p : group.params())
      STRATA_CHECK(own.count(p.impl_ptr().get()), "PipelineEngine: the optimizer holds a tensor of shape ", p.sizes(),
                   " that is not a parameter of stage ", grid_.get_stage_id(), "'s module");
  for (const auto& [name, split] : nn::parameter_splits(*module_))
    STRATA_CHECK(global_ranks(split.group) == global_ranks(grid_.get_model_parallel_group()),
                 "PipelineEngine: ", "parameter ", name, " is split over ", split.group->describe(),
                 " but this rank's model-parallel ", "group is ", grid_.get_model_parallel_group()->describe(),
                 "; build tensor-parallel layers with .group(grid.get_model_parallel_group())");
  if (const auto* sharded = dynamic_cast<const optim::ShardedOptimizer*>(optimizer_.get())) {
    STRATA_CHECK(sharded->stage() == 1 || grid_.get_pipe_parallel_world_size() == 1,
                 "PipelineEngine does not support ZeRO stage 2 with more than one stage, as DeepSpeed does not: ",
                 "stage 2 reduce-scatters and frees the gradients in every micro-batch's backward, before a pipeline ",
                 "sums tied gradients across stages, and pays that traffic ", options_.micro_batches,
                 " times a step; use stage 1");
    STRATA_CHECK(sharded->stage() == 1 || !options_.grad_scaler,
                 "PipelineEngine does not support ZeRO stage 2 with a grad_scaler: stage 2 keeps no parameter ",
                 "gradients to unscale; use stage 1");
    STRATA_CHECK(global_ranks(sharded->group()) == global_ranks(grid_.get_data_parallel_group()),
                 "PipelineEngine: the ZeroRedundancyOptimizer partitions over ",
                 sharded->group() ? sharded->group()->describe() : "WORLD",
                 " but this stage's replicas are the grid's data-parallel group ",
                 grid_.get_data_parallel_group()->describe(),
                 "; pass ZeroOptions{.group = grid.get_data_parallel_group()}");
  }
  if (options_.grad_scaler) {
    STRATA_CHECK(!options_.grad_scaler->process_group(),
                 "PipelineEngine: leave grad_scaler's process_group unset; the engine checks for inf and NaN over "
                 "every stage and replica (WORLD)");
    grad_scaler_ = std::make_unique<optim::GradScaler>(
        optim::GradScalerOptions(*options_.grad_scaler).process_group(dist::get_world_group()));
  }
  state_ = std::make_unique<State>(grid_, module_->layout(), agree_stage_device(*module_, grid_),
                                   options_.dynamic_shapes, options_.p2p_group);

  // Replicas start from data-parallel rank 0's values; then each tie group from its lowest stage.
  if (grid_.get_data_parallel_world_size() > 1) nn::broadcast_state(*module_, grid_.get_data_parallel_group());
  // Every rank makes every tie group (new_group is collective over WORLD), keys sorted, replicas in rank order.
  const ProcessTopology& topo = grid_.topology();
  for (const std::string& key : module_->tied_keys()) {
    const std::vector<int> stages = module_->tied_stages(key);
    if (stages.size() < 2) continue;
    for (int first : topo.filter_match({{"pipe", stages[0]}})) {
      ProcessCoord coord = topo.get_coord(first);
      std::vector<int> ranks;
      for (int s : stages) {
        coord["pipe"] = s;
        ranks.push_back(topo.get_rank(coord));
      }
      dist::Group group = dist::new_group(ranks);
      if (group->is_member()) state_->ties.push_back({module_->tied_parameters(key), group, ranks[0]});
    }
  }
  for (const State::Tie& tie : state_->ties)
    for (const Tensor& p : tie.params) dist::broadcast(p, tie.root, tie.group);
}

PipelineEngine::~PipelineEngine() = default;

std::unique_ptr<PipeSchedule> PipelineEngine::make_schedule_for_stage() const {
  if (file_) return file_->schedule(grid_.get_stage_id());
  const ScheduleEntry& entry = schedule_entry(options_.schedule);
  return entry.make(options_.micro_batches, grid_.get_pipe_parallel_world_size(), grid_.get_stage_id(),
                    entry.more_chunks ? module_->num_chunks() : entry.chunks);
}

std::string PipelineEngine::schedule_label() const { return file_ ? options_.schedule_file : options_.schedule; }

double PipelineEngine::train_batch(const DataIterator& data_iter) {
  STRATA_CHECK(static_cast<bool>(data_iter), "train_batch: got an empty data iterator");
  STRATA_CHECK(state_->stage.label_chunk() < 0 || module_->options().loss_fn,
               "train_batch: the PipelineModule has no loss_fn; set PipelineModuleOptions::loss_fn");
  module_->train();
  module_->zero_grad();  // a batch that threw half-way leaves partial gradients behind
  return run(*make_schedule_for_stage(), data_iter, nullptr);
}

double PipelineEngine::eval_batch(const DataIterator& data_iter, std::vector<tensor_list>* outputs) {
  STRATA_CHECK(static_cast<bool>(data_iter), "eval_batch: got an empty data iterator");
  module_->eval();
  NoGradGuard no_grad;
  const int stages = grid_.get_pipe_parallel_world_size(), stage = grid_.get_stage_id();
  if (module_->num_chunks() == 1)
    return run(InferenceSchedule(options_.micro_batches, stages, stage), data_iter, outputs);
  return run(ForwardSchedule(options_.micro_batches, stages, stage, module_->layout()), data_iter, outputs);
}

double PipelineEngine::run(const PipeSchedule& schedule, const DataIterator& data_iter,
                           std::vector<tensor_list>* outputs) {
  State& st = *state_;
  PipelineStage& stage = st.stage;
  st.training = schedule.is_training();
  st.data_iter = &data_iter;
  st.eval_outputs = outputs;
  st.loss_sum = 0;
  timings_ = {};
  stage.begin_batch(schedule, options_.record_trace ? &timings_.transfers : nullptr);
  using Clock = std::chrono::steady_clock;
  const auto batch_start = Clock::now();
  auto seconds = [](Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); };
  for (size_t i = 0; i < stage.stream().size(); ++i) {
    stage.start(i);
    const auto& [t, ins] = stage.stream()[i];
    // The flight recorder labels the instruction's communication (a receive learns its micro-batch).
    const bool known =
        ins.has_buffer() && ins.kind != PipeInstruction::LoadMicroBatch && ins.kind != PipeInstruction::RecvActivation;
    const dist::FlightContext label(str("stage ", grid_.get_stage_id(), ", step ", t, ": ", ins,
                                        known ? str(", micro-batch ", stage.buffer(ins).micro_batch) : ""));
    const auto start = Clock::now();
    execute(ins);
    const auto end = Clock::now();
    double waited = 0;  // what the instruction spent waiting for transfers counts toward their kinds
    const auto by_kind = stage.take_waited();
    for (size_t k = 0; k < by_kind.size(); ++k) {
      timings_.seconds[k] += by_kind[k];
      waited += by_kind[k];
    }
    timings_.seconds[ins.kind] += std::chrono::duration<double>(end - start).count() - waited;
    ++timings_.instructions;
    if (!options_.record_trace) continue;
    stage.poll_transfers();
    const int micro_batch = ins.kind == PipeInstruction::LoadMicroBatch ? stage.loaded() - 1
                            : ins.has_buffer()                          ? stage.buffer(ins).micro_batch
                                                                        : -1;
    timings_.executed.push_back({ins, t, micro_batch, seconds(start) + waited, seconds(end)});
  }
  stage.end_batch();

  // The mean loss over micro-batches, averaged over replicas on the stage holding the model's last piece (the
  // last stage, or the first in a V), then sent to the other stages.
  const bool has_loss = static_cast<bool>(module_->options().loss_fn), holds_loss = stage.label_chunk() >= 0;
  Tensor loss = full({1}, holds_loss && has_loss ? st.loss_sum / options_.micro_batches : NAN, kDouble);
  if (holds_loss && grid_.get_data_parallel_world_size() > 1)
    dist::all_reduce(loss, dist::ReduceOp::AVG, grid_.get_data_parallel_group());
  const StageLayout& layout = stage.layout();
  if (grid_.get_pipe_parallel_world_size() > 1)
    dist::broadcast(loss, grid_.stage_to_global(layout.stage_of(layout.num_virtual_stages() - 1)),
                    grid_.get_pipe_parallel_group());
  timings_.total = std::chrono::duration<double>(Clock::now() - batch_start).count();
  return loss.item<double>();
}

std::string PipelineEngine::where(const char* op) const {
  std::ostringstream os;
  os << "PipelineEngine " << op << " (stage " << grid_.get_stage_id() << " of " << grid_.get_pipe_parallel_world_size()
     << ")";
  return os.str();
}

void PipelineEngine::execute(const PipeInstruction& ins) {
  State& st = *state_;
  PipelineStage& stage = st.stage;
  const int c = ins.chunk;
  switch (ins.kind) {
    case PipeInstruction::LoadMicroBatch: {
      std::optional<MicroBatch> mb = (*st.data_iter)();
      STRATA_CHECK(mb.has_value(), where(st.training ? "train_batch" : "eval_batch"),
                   ": the data iterator ran dry after ", stage.loaded(), " of ", options_.micro_batches,
                   " micro-batches");
      STRATA_CHECK(!stage.first(c) || !mb->inputs.empty(), where("LoadMicroBatch"), ": micro-batch ", stage.loaded(),
                   " has no inputs");
      stage.load(ins, std::move(mb->inputs), std::move(mb->labels));
      break;
    }
    case PipeInstruction::ForwardPass: {
      PipelineStage::Buffer& buf = stage.buffer(ins);
      tensor_list outs = module_->forward(stage.forward_inputs(ins), c);
      STRATA_CHECK(!outs.empty(), where("ForwardPass"), ": the stage's layers returned no tensors");
      if (!stage.last(c)) {
        buf.outputs = std::move(outs);
      } else {
        if (module_->options().loss_fn) {
          Tensor loss = module_->compute_loss(outs, buf.labels);
          STRATA_CHECK(loss.numel() == 1, where("ForwardPass"), ": the loss must have one element, got shape ",
                       loss.sizes());
          st.loss_sum += loss.item<double>();
          if (st.training) buf.loss = loss;
        }
        if (st.eval_outputs) {
          for (Tensor& t : outs) t = t.detach();
          st.eval_outputs->push_back(std::move(outs));
        }
        buf.labels.clear();
      }
      if (!st.training) buf.inputs.clear();
      break;
    }
    case PipeInstruction::BackwardPass:
    case PipeInstruction::BackwardInput: {
      PipelineStage::Buffer& buf = stage.buffer(ins);
      tensor_list outs, grads;
      if (stage.last(c)) {
        // The only place the loss is scaled: the batch loss is the mean over micro-batches, times the loss scale.
        const double loss_scale = grad_scaler_ ? grad_scaler_->get_scale() : 1.0;
        outs = {buf.loss};
        grads = {full_like(buf.loss, loss_scale / options_.micro_batches)};
      } else {
        std::tie(outs, grads) = stage.backward_roots(ins);
      }
      if (!outs.empty() && ins.kind == PipeInstruction::BackwardPass) autograd::backward(outs, grads);
      if (!outs.empty() && ins.kind == PipeInstruction::BackwardInput) {
        tensor_list inputs;  // what the stage before waits for; the first piece has none
        for (const Tensor& x : buf.inputs)
          if (x.requires_grad()) inputs.push_back(x);
        buf.weight = autograd::backward_input(outs, grads, inputs);
      }
      stage.after_backward(ins);
      break;
    }
    case PipeInstruction::BackwardWeight: {
      PipelineStage::Buffer& buf = stage.buffer(ins);
      if (buf.weight.pending()) buf.weight.run();
      buf.weight = {};
      break;
    }
    case PipeInstruction::SendActivation:
      stage.send_activation(ins);
      break;
    case PipeInstruction::RecvActivation:
      stage.recv_activation(ins);
      break;
    case PipeInstruction::SendGrad:
      stage.send_grad(ins);
      break;
    case PipeInstruction::RecvGrad:
      stage.recv_grad(ins);
      break;
    case PipeInstruction::ReduceTiedGrads:
      for (const State::Tie& tie : st.ties)
        for (const Tensor& p : tie.params) dist::all_reduce(grad_or_zeros(p), dist::ReduceOp::SUM, tie.group);
      break;
    case PipeInstruction::ReduceGrads:
      reduce_grads();
      break;
    case PipeInstruction::OptimizerStep:
      if (grad_scaler_) {
        grad_scaler_->step(*optimizer_);
        grad_scaler_->update();
      } else {
        optimizer_->step();
      }
      module_->zero_grad();
      break;
  }
}

void PipelineEngine::reduce_grads() {
  if (grid_.get_data_parallel_world_size() == 1) return;
  // ZeRO stage 2 reduce-scattered every micro-batch's gradients during its backward.
  if (const auto* sharded = dynamic_cast<const optim::ShardedOptimizer*>(optimizer_.get());
      sharded && sharded->stage() == 2)
    return;
  // One flattened all-reduce per dtype; every replica lists the same parameters in the same order.
  std::map<ScalarType, tensor_list> by_dtype;
  for (const Tensor& p : module_->parameters())
    if (p.requires_grad()) by_dtype[p.dtype()].push_back(grad_or_zeros(p));
  for (auto& [dtype, grads] : by_dtype)
    dist::all_reduce_coalesced(grads, dist::ReduceOp::AVG, grid_.get_data_parallel_group());
}

void PipelineEngine::write_trace(const std::string& path) const {
  // Every rank's instructions and transfers as 8 numbers each, padded to the longest list, gathered everywhere;
  // rank 0 writes a row of instructions and rows of transfers per rank.
  constexpr int64_t kFields = 8, kHeader = 3;
  const int world = dist::get_world_size();
  const int64_t n = static_cast<int64_t>(timings_.executed.size() + timings_.transfers.size());
  Tensor count = tensor({n});
  Tensor counts = empty({world}, kLong);
  dist::all_gather_into_tensor(counts, count);
  const int64_t longest = counts.max().item<int64_t>();
  Tensor mine = zeros({kHeader + longest * kFields}, kDouble);
  double* m = mine.data_ptr<double>();
  m[0] = static_cast<double>(n);
  m[1] = grid_.get_stage_id();
  m[2] = grid_.get_data_parallel_id();
  double* f = m + kHeader;
  for (const auto* list : {&timings_.executed, &timings_.transfers})
    for (const ExecutedInstruction& e : *list) {
      f[0] = e.instruction.kind, f[1] = e.instruction.buffer_id, f[2] = e.instruction.chunk, f[3] = e.step;
      f[4] = e.micro_batch, f[5] = e.start, f[6] = e.end, f[7] = list == &timings_.transfers;
      f += kFields;
    }
  Tensor all = empty({world * mine.numel()}, kDouble);
  dist::all_gather_into_tensor(all, mine);
  if (dist::get_rank() != 0) return;
  const double* a = all.data_ptr<double>();
  double t0 = std::numeric_limits<double>::infinity();
  for (int r = 0; r < world; ++r) {
    const double* rank = a + r * mine.numel();
    for (int64_t i = 0; i < static_cast<int64_t>(rank[0]); ++i) t0 = std::min(t0, rank[kHeader + i * kFields + 5]);
  }
  // A row's slices must nest, and transfers in flight together do not: each goes to the first of the rank's
  // transfer rows whose last transfer has ended (they come in the order posted), a new row when none has.
  std::vector<std::string> rows;
  std::vector<TraceSlice> slices;
  for (int r = 0; r < world; ++r) {
    const double* rank = a + r * mine.numel();
    const int instructions = static_cast<int>(rows.size());
    rows.push_back(str("rank ", r, ": stage ", rank[1], ", replica ", rank[2]));
    std::vector<double> lane_end;  // of the rank's transfer rows, rows instructions + 1, + 2, ...
    for (int64_t i = 0; i < static_cast<int64_t>(rank[0]); ++i) {
      const double* e = rank + kHeader + i * kFields;
      int row = instructions;
      if (e[7] != 0) {
        const auto free = std::find_if(lane_end.begin(), lane_end.end(), [&](double end) { return end <= e[5]; });
        const auto lane = free - lane_end.begin();
        if (free == lane_end.end()) {
          lane_end.push_back(e[6]);
          rows.push_back(str("rank ", r, ": transfers in flight", lane ? str(" (", lane + 1, ")") : ""));
        } else {
          *free = e[6];
        }
        row = instructions + 1 + static_cast<int>(lane);
      }
      const PipeInstruction ins{static_cast<PipeInstruction::Kind>(e[0]), static_cast<int32_t>(e[1]),
                                static_cast<int16_t>(e[2])};
      slices.push_back(
          {row, (e[5] - t0) * 1e6, (e[6] - e[5]) * 1e6, ins, static_cast<int>(e[4]), static_cast<int>(e[3])});
    }
  }
  std::ofstream file(path);
  STRATA_CHECK(file.is_open(), "PipelineEngine::write_trace: cannot open '", path, "' for writing");
  write_trace_json(file, rows, slices);
  file.close();
  STRATA_CHECK(!file.fail(), "PipelineEngine::write_trace: could not write '", path, "'");
}

}  // namespace strata::pipe
