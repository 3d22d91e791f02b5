// The pipeline engine: runs a schedule's instructions on this rank, one buffer op at a time.
#include "strata/pipe/engine.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <map>
#include <unordered_set>
#include <utility>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/distributed/flight_recorder.h"
#include "strata/distributed/tensor_meta.h"
#include "strata/nn/data_parallel.h"
#include "strata/pipe/planned_schedule.h"
#include "strata/pipe/trace.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/cuda.h"

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

// Note [activation metadata]: each SendActivation first sends a one-element int64 header: 0 when the
// tensors have the same dtypes, shapes and requires_grad flags as the previous transfer in this mode
// (training or evaluation), n > 0 when n words of new metadata follow. The receiver allocates from it,
// and both sides decide from it which tensors get a gradient back (those that required grad when sent,
// in training), never from what kind of tensor it is. Without dynamic_shapes a change after the first
// transfer is an error raised on both sides: the sender still sends the new metadata, and zeros shaped as
// before for the receives the receiver posted (Note [overlapped transfers]), so the receiver is not left
// waiting, and then both throw the same message. Headers, metadata and data travel under their own tags.
//
// Note [overlapped transfers]: no transfer blocks where the schedule names it. A send is posted and its Work
// kept with the buffer, finished before that buffer sends again and at the end of the batch. A receive is
// posted into a fresh tensor, and waited for only where the data is used: a ForwardPass waits for its
// activations, a backward for its output gradients. An activation's receive needs its shapes: once a chunk
// has received in this mode and shapes are static, the data receives are posted with the header, shaped as
// before, and the header is checked at the wait; otherwise the header (and new metadata) is received first.
// Posting in each stage's instruction order keeps every pair of stages matching its transfers in the same
// order as the blocking lockstep the validator proves deadlock-free, and a wait only comes later in the
// stream than the blocking transfer it replaces, so nothing can wait in a cycle. Time spent waiting counts
// toward the transfer's kind in timings(), not the compute that waited.
using distributed::TensorMeta;
using Meta = std::vector<TensorMeta>;
using MetaPtr = std::shared_ptr<const Meta>;  // shared by the buffers that moved tensors of that description

constexpr int kTrain = 0, kEval = 1;                       // the two modes keep their own metadata
constexpr int kDataTag = 0, kHeaderTag = 1, kMetaTag = 2;  // Note [activation metadata]
using Works = std::vector<std::shared_ptr<dist::Work>>;

Meta meta_of(const tensor_list& tensors, bool training) {
  Meta meta;
  for (const Tensor& t : tensors) meta.push_back(distributed::meta_of(t, training && t.requires_grad()));
  return meta;
}

// Whether `tensors` are what `meta` describes (without building a Meta for every transfer).
bool described_by(const Meta& meta, const tensor_list& tensors, bool training) {
  if (meta.size() != tensors.size()) return false;
  for (size_t i = 0; i < meta.size(); ++i)
    if (meta[i].dtype != tensors[i].dtype() || meta[i].requires_grad != (training && tensors[i].requires_grad()) ||
        IntArrayRef(meta[i].sizes) != tensors[i].sizes())
      return false;
  return true;
}

std::string describe(const Meta& meta) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < meta.size(); ++i)
    os << (i ? ", " : "") << meta[i].dtype << " " << IntArrayRef(meta[i].sizes)
       << (meta[i].requires_grad ? " grad" : "");
  os << "]";
  return os.str();
}

Tensor encode(const Meta& meta) {
  std::vector<int64_t> words{static_cast<int64_t>(meta.size())};
  for (const TensorMeta& m : meta) distributed::encode_meta(m, words);
  Tensor t = empty({static_cast<int64_t>(words.size())}, kLong);
  std::memcpy(t.data_ptr(), words.data(), words.size() * sizeof(int64_t));
  return t;
}

// `stage` received `t` from the stage before it.
Meta decode(const Tensor& t, int stage) {
  const IntArrayRef words(t.data_ptr<int64_t>(), static_cast<size_t>(t.numel()));
  const std::string where = "PipelineEngine RecvActivation (stage " + std::to_string(stage) + ")";
  STRATA_CHECK(!words.empty() && words[0] >= 0, where, ": bad tensor count in activation metadata");
  Meta meta;
  size_t pos = 1;
  for (int64_t i = 0; i < words[0]; ++i) meta.push_back(distributed::decode_meta(words, pos, where));
  STRATA_CHECK(pos == words.size(), where, ": ", words.size() - pos, " extra words after the activation metadata");
  return meta;
}

// A parameter's gradient, zero-filled first when backward never reached it (every rank must contribute).
Tensor grad_or_zeros(Tensor param) {
  Tensor& g = param.mutable_grad();
  if (!g.defined()) g = zeros_like(param);
  return g;
}

std::string shape_change_message(int from_stage, int to_stage, const Meta& before, const Meta& after, int micro_batch) {
  std::ostringstream os;
  os << "PipelineEngine: the activations stage " << from_stage << " sends to stage " << to_stage << " changed from "
     << describe(before) << " to " << describe(after) << " at micro-batch " << micro_batch
     << "; set PipelineEngineOptions::dynamic_shapes = true to let them change";
  return os.str();
}

// Note [stage devices]: a stage receives activations (and its last stage the labels) on the device of its
// module's parameters, and gradients on the device of the outputs they belong to. Sender and receiver of one
// transfer must use the same device type, since a CPU tensor and a GPU tensor may travel through different
// backends (MPI and NCCL) that never meet; so every stage with parameters must be on the same type, and so
// must every replica (their gradients are averaged, their parameters broadcast): the type is agreed over
// WORLD. A stage without parameters takes the others' type (a GPU stage then uses the current CUDA device).
Device stage_device(const PipelineModule& module, const PipelineParallelGrid& grid) {
  const std::optional<Device> own = nn::parameters_device(module, "PipelineEngine");
  constexpr int64_t kNone = -1, kCpu = 0, kGpu = 1;
  const int64_t type = !own ? kNone : own->is_cpu() ? kCpu : kGpu;
  // MAX over the ranks of (type, -type): the highest and lowest types among stages with parameters.
  Tensor types = tensor({type, own ? -type : -kGpu});
  dist::all_reduce(types, dist::ReduceOp::MAX);
  const int64_t highest = types[0].item<int64_t>(), lowest = -types[1].item<int64_t>();
  STRATA_CHECK(highest == kNone || highest == lowest,
               "PipelineEngine: some ranks hold their stage's modules on the CPU ",
               "and others on a GPU (this is stage ", grid.get_stage_id(), ", on ",
               own ? (own->is_cpu() ? "the CPU" : "a GPU") : "no device: it has no parameters",
               "); put every stage's module on the same kind of device");
  if (own) return *own;
  return highest == kGpu ? cuda::device() : Device(kCPU);
}

}  // namespace

double PipelineTimings::compute() const {
  double total = 0;
  for (size_t k = 0; k < PipeInstruction::kNumKinds; ++k)
    if (is_compute(static_cast<PipeInstruction::Kind>(k))) total += seconds[k];
  return total;
}

struct PipelineEngine::State {
  State(const PipelineParallelGrid& grid, bool dynamic_shapes, Device device, StageLayout layout, dist::Group p2p_group)
      : grid(grid), dynamic_shapes(dynamic_shapes), device(device), p2p(grid, std::move(p2p_group)), layout(layout) {
    for (int mode : {kTrain, kEval}) {
      sent[mode].resize(layout.chunks);
      received[mode].resize(layout.chunks);
    }
    for (int c = 0; c < layout.chunks; ++c)
      if (virtual_stage(c) == layout.num_virtual_stages() - 1) label_chunk = c;
  }

  struct Buffer;
  // Posts the header (and metadata when it changed) for chunk c's `outputs`, sent to the next piece of the
  // model, into `out`; returns their description.
  MetaPtr send_meta(const tensor_list& outputs, int chunk, int micro_batch, Works& out);
  // Posts the receives of chunk c's next activations into `buf` (Note [overlapped transfers]).
  void post_recv_activation(Buffer& buf, int chunk);
  // Waits for any still in flight and checks a header that was not read yet.
  void finish_recv_activation(Buffer& buf, int chunk);
  // The description of the tensors the previous piece of the model sends to chunk c after a header of n:
  // the last one for 0, else the n words of metadata that follow, received here.
  MetaPtr read_meta(int64_t n, int chunk, int micro_batch);
  // Posts `work` into `works`, first finishing those already complete (which rethrows their errors).
  static void post(Works& works, std::shared_ptr<dist::Work> work);
  // Waits for every one of `works`; the time counts toward `kind` (Note [overlapped transfers]).
  void await(Works& works, PipeInstruction::Kind kind);

  // Where chunk c is in the model (StageLayout), and the stages of its neighbours.
  int virtual_stage(int c) const { return layout.virtual_stage(grid.get_stage_id(), c); }
  bool first(int c) const { return virtual_stage(c) == 0; }
  bool last(int c) const { return virtual_stage(c) == layout.num_virtual_stages() - 1; }
  int prev_stage(int c) const { return layout.stage_of(virtual_stage(c) - 1); }
  int next_stage(int c) const { return layout.stage_of(virtual_stage(c) + 1); }
  // The chunk of this stage holding the neighbouring piece, or -1 when another stage holds it (or none).
  int local_prev(int c) const {
    return !first(c) && prev_stage(c) == grid.get_stage_id() ? layout.chunk_of(virtual_stage(c) - 1) : -1;
  }
  int local_next(int c) const {
    return !last(c) && next_stage(c) == grid.get_stage_id() ? layout.chunk_of(virtual_stage(c) + 1) : -1;
  }

  struct Buffer {
    tensor_list inputs, outputs, labels, output_grads;
    MetaPtr in_meta, out_meta;  // what was received into inputs / sent from outputs
    Works incoming, outgoing;   // receives into inputs or output_grads, and sends, not yet waited for
    Tensor header;              // received with inputs; checked at their wait while header_unread
    bool header_unread = false;
    Tensor loss;                          // last piece, training: this micro-batch's loss until its backward
    autograd::DeferredWeightGrad weight;  // after BackwardInput: the weight gradients, until BackwardWeight
    int micro_batch = -1;
  };
  struct Tie {
    std::vector<Tensor> params;
    dist::Group group;
    int root;  // global rank of the lowest stage holding the key
  };
  Buffer& buffer(const PipeInstruction& ins) { return buffers.at(ins.chunk).at(ins.buffer_id); }

  const PipelineParallelGrid& grid;
  const bool dynamic_shapes;
  Device device;  // see Note [stage devices]
  P2P p2p;
  StageLayout layout;
  int label_chunk = -1;  // the chunk holding the model's last piece, -1 when another stage holds it
  std::vector<Tie> ties;
  std::vector<MetaPtr> sent[2], received[2];  // the last description each way, per mode and chunk
  std::vector<std::vector<Buffer>> buffers;   // [chunk][buffer id]
  // Per batch:
  int mode = kTrain;
  const DataIterator* data_iter = nullptr;
  std::vector<tensor_list>* eval_outputs = nullptr;
  int loaded = 0;
  std::vector<int> received_count;  // per chunk
  double loss_sum = 0;
  std::array<double, PipeInstruction::kNumKinds> waited{};  // seconds spent in await since run() last took them
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
  if (options_.grad_scaler) {
    STRATA_CHECK(!options_.grad_scaler->process_group(),
                 "PipelineEngine: leave grad_scaler's process_group unset; the engine checks for inf and NaN over "
                 "every stage and replica (WORLD)");
    grad_scaler_ = std::make_unique<optim::GradScaler>(
        optim::GradScalerOptions(*options_.grad_scaler).process_group(dist::get_world_group()));
  }
  state_ = std::make_unique<State>(grid_, options_.dynamic_shapes, stage_device(*module_, grid_), module_->layout(),
                                   options_.p2p_group);

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
  STRATA_CHECK(state_->label_chunk < 0 || module_->options().loss_fn,
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
  st.mode = schedule.is_training() ? kTrain : kEval;
  st.data_iter = &data_iter;
  st.eval_outputs = outputs;
  st.loaded = 0;
  st.received_count.assign(st.layout.chunks, 0);
  st.loss_sum = 0;
  st.buffers.clear();
  st.buffers.resize(st.layout.chunks);
  for (auto& chunk : st.buffers) chunk.resize(schedule.num_pipe_buffers());
  timings_ = {};
  using Clock = std::chrono::steady_clock;
  const auto batch_start = Clock::now();
  auto seconds = [](Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); };
  for (int t = 0; t < schedule.num_steps(); ++t) {
    for (const PipeInstruction& ins : schedule.step(t)) {
      // The flight recorder labels the instruction's communication (a receive learns its micro-batch).
      const bool known = ins.has_buffer() && ins.kind != PipeInstruction::LoadMicroBatch &&
                         ins.kind != PipeInstruction::RecvActivation;
      const dist::FlightContext label(str("stage ", grid_.get_stage_id(), ", step ", t, ": ", ins,
                                          known ? str(", micro-batch ", st.buffer(ins).micro_batch) : ""));
      const auto start = Clock::now();
      execute(ins);
      const auto end = Clock::now();
      double waited = 0;  // what the instruction spent waiting for transfers counts toward their kinds
      for (size_t k = 0; k < st.waited.size(); ++k) {
        timings_.seconds[k] += st.waited[k];
        waited += std::exchange(st.waited[k], 0.0);
      }
      timings_.seconds[ins.kind] += std::chrono::duration<double>(end - start).count() - waited;
      ++timings_.instructions;
      if (!options_.record_trace) continue;
      const int micro_batch = ins.kind == PipeInstruction::LoadMicroBatch ? st.loaded - 1
                              : ins.has_buffer()                          ? st.buffer(ins).micro_batch
                                                                          : -1;
      timings_.executed.push_back({ins, t, micro_batch, seconds(start) + waited, seconds(end)});
    }
  }
  for (auto& chunk : st.buffers)
    for (State::Buffer& buf : chunk) {
      STRATA_INTERNAL_ASSERT(buf.incoming.empty());  // every receive was used
      P2P::wait_all(buf.outgoing);
    }
  st.buffers.clear();

  // The mean loss over micro-batches, averaged over replicas on the stage holding the model's last piece (the
  // last stage, or the first in a V), then sent to the other stages.
  const bool has_loss = static_cast<bool>(module_->options().loss_fn), holds_loss = st.label_chunk >= 0;
  Tensor loss = full({1}, holds_loss && has_loss ? st.loss_sum / options_.micro_batches : NAN, kDouble);
  if (holds_loss && grid_.get_data_parallel_world_size() > 1)
    dist::all_reduce(loss, dist::ReduceOp::AVG, grid_.get_data_parallel_group());
  if (grid_.get_pipe_parallel_world_size() > 1)
    dist::broadcast(loss, grid_.stage_to_global(st.layout.stage_of(st.layout.num_virtual_stages() - 1)),
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
  const bool training = st.mode == kTrain;
  const int c = ins.chunk;
  switch (ins.kind) {
    case PipeInstruction::LoadMicroBatch: {
      std::optional<MicroBatch> mb = (*st.data_iter)();
      STRATA_CHECK(mb.has_value(), where(training ? "train_batch" : "eval_batch"), ": the data iterator ran dry after ",
                   st.loaded, " of ", options_.micro_batches, " micro-batches");
      // As DeepSpeed, the engine moves what it keeps to the stage's device (no copy when it is there already).
      auto on_stage = [&](tensor_list tensors) {
        for (Tensor& t : tensors) t = t.to(st.device);
        return tensors;
      };
      if (st.first(c)) {
        State::Buffer& buf = st.buffer(ins);
        STRATA_CHECK(!mb->inputs.empty(), where("LoadMicroBatch"), ": micro-batch ", st.loaded, " has no inputs");
        buf.inputs = on_stage(std::move(mb->inputs));
        buf.micro_batch = st.loaded;
      }
      // The labels wait in the buffer of the chunk holding the model's last piece.
      if (st.label_chunk >= 0) st.buffers.at(st.label_chunk).at(ins.buffer_id).labels = on_stage(std::move(mb->labels));
      ++st.loaded;
      break;
    }
    case PipeInstruction::ForwardPass: {
      State::Buffer& buf = st.buffer(ins);
      st.finish_recv_activation(buf, c);
      if (const int pc = st.local_prev(c); pc >= 0) {
        // The piece before is this stage's chunk pc: its outputs become these inputs, cut from its graph as a
        // transfer would, so each chunk's backward stops at its own inputs.
        State::Buffer& prev = st.buffers.at(pc).at(ins.buffer_id);
        prev.out_meta = std::make_shared<const Meta>(meta_of(prev.outputs, training));
        buf.in_meta = prev.out_meta;
        buf.micro_batch = prev.micro_batch;
        buf.inputs.clear();
        for (const Tensor& t : prev.outputs)
          buf.inputs.push_back(training && t.requires_grad() ? t.detach().requires_grad_(true) : t.detach());
        if (!training) prev.outputs.clear();
      }
      tensor_list outs = module_->forward(buf.inputs, c);
      STRATA_CHECK(!outs.empty(), where("ForwardPass"), ": the stage's layers returned no tensors");
      if (!st.last(c)) {
        buf.outputs = std::move(outs);
      } else {
        if (module_->options().loss_fn) {
          Tensor loss = module_->compute_loss(outs, buf.labels);
          STRATA_CHECK(loss.numel() == 1, where("ForwardPass"), ": the loss must have one element, got shape ",
                       loss.sizes());
          st.loss_sum += loss.item<double>();
          if (training) buf.loss = loss;
        }
        if (st.eval_outputs) {
          for (Tensor& t : outs) t = t.detach();
          st.eval_outputs->push_back(std::move(outs));
        }
        buf.labels.clear();
      }
      if (!training) buf.inputs.clear();
      break;
    }
    case PipeInstruction::BackwardPass:
    case PipeInstruction::BackwardInput: {
      State::Buffer& buf = st.buffer(ins);
      tensor_list outs, grads;
      if (st.last(c)) {
        // The only place the loss is scaled: the batch loss is the mean over micro-batches, times the loss scale.
        const double loss_scale = grad_scaler_ ? grad_scaler_->get_scale() : 1.0;
        outs = {buf.loss};
        grads = {full_like(buf.loss, loss_scale / options_.micro_batches)};
      } else {
        st.await(buf.incoming, PipeInstruction::RecvGrad);
        for (size_t i = 0; i < buf.out_meta->size(); ++i) {
          if (!(*buf.out_meta)[i].requires_grad) continue;
          outs.push_back(buf.outputs[i]);
          grads.push_back(buf.output_grads[i]);
        }
      }
      if (!outs.empty() && ins.kind == PipeInstruction::BackwardPass) autograd::backward(outs, grads);
      if (!outs.empty() && ins.kind == PipeInstruction::BackwardInput) {
        tensor_list inputs;  // what the stage before waits for; the first piece has none
        for (const Tensor& x : buf.inputs)
          if (x.requires_grad()) inputs.push_back(x);
        buf.weight = autograd::backward_input(outs, grads, inputs);
      }
      buf.loss = {};
      buf.outputs.clear();
      buf.output_grads.clear();
      if (const int pc = st.local_prev(c); pc >= 0) {
        // Hand the input gradients to the chunk before on this stage, as SendGrad would.
        State::Buffer& prev = st.buffers.at(pc).at(ins.buffer_id);
        prev.output_grads.assign(buf.inputs.size(), Tensor());
        for (size_t i = 0; i < buf.inputs.size(); ++i) {
          if (!(*buf.in_meta)[i].requires_grad) continue;
          const Tensor& g = buf.inputs[i].grad();
          prev.output_grads[i] = g.defined() ? g : zeros_like(buf.inputs[i]);
        }
        buf.inputs.clear();
      }
      if (st.first(c)) buf.inputs.clear();  // no SendGrad follows
      break;
    }
    case PipeInstruction::BackwardWeight: {
      State::Buffer& buf = st.buffer(ins);
      if (buf.weight.pending()) buf.weight.run();
      buf.weight = {};
      break;
    }
    case PipeInstruction::SendActivation: {
      State::Buffer& buf = st.buffer(ins);
      const int next = st.next_stage(c);
      st.await(buf.outgoing, ins.kind);  // the buffer's sends of its last micro-batch
      buf.out_meta = st.send_meta(buf.outputs, c, buf.micro_batch, buf.outgoing);
      for (const Tensor& t : buf.outputs) State::post(buf.outgoing, st.p2p.isend(t.detach(), next, kDataTag));
      if (!training) buf.outputs.clear();  // the sends keep what they send
      break;
    }
    case PipeInstruction::RecvActivation: {
      State::Buffer& buf = st.buffer(ins);
      buf.micro_batch = st.received_count.at(c)++;
      st.post_recv_activation(buf, c);
      break;
    }
    case PipeInstruction::SendGrad: {
      State::Buffer& buf = st.buffer(ins);
      const int prev = st.prev_stage(c);
      st.await(buf.outgoing, ins.kind);
      for (size_t i = 0; i < buf.in_meta->size(); ++i) {
        if (!(*buf.in_meta)[i].requires_grad) continue;
        // An input the stage did not use has no gradient; its sender still waits for one.
        Tensor g = buf.inputs[i].grad();
        State::post(buf.outgoing, st.p2p.isend(g.defined() ? g : zeros_like(buf.inputs[i]), prev, kDataTag));
      }
      buf.inputs.clear();
      break;
    }
    case PipeInstruction::RecvGrad: {
      State::Buffer& buf = st.buffer(ins);
      const int next = st.next_stage(c);
      const Meta& out_meta = *buf.out_meta;
      STRATA_INTERNAL_ASSERT(buf.incoming.empty());
      buf.output_grads.assign(out_meta.size(), Tensor());
      for (size_t i = 0; i < out_meta.size(); ++i) {
        if (!out_meta[i].requires_grad) continue;
        const TensorOptions options = TensorOptions(out_meta[i].dtype).device(buf.outputs[i].device());
        buf.output_grads[i] = empty(out_meta[i].sizes, options);
        State::post(buf.incoming, st.p2p.irecv(buf.output_grads[i], next, kDataTag));
      }
      break;
    }
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
  // One flattened all-reduce per dtype; every replica lists the same parameters in the same order.
  std::map<ScalarType, tensor_list> by_dtype;
  for (const Tensor& p : module_->parameters())
    if (p.requires_grad()) by_dtype[p.dtype()].push_back(grad_or_zeros(p));
  for (auto& [dtype, grads] : by_dtype)
    dist::all_reduce_coalesced(grads, dist::ReduceOp::AVG, grid_.get_data_parallel_group());
}

MetaPtr PipelineEngine::State::send_meta(const tensor_list& outputs, int chunk, int micro_batch, Works& out) {
  MetaPtr& last = sent[mode].at(chunk);
  const int next = next_stage(chunk);
  const bool training = mode == kTrain;
  const bool changed = !last || !described_by(*last, outputs, training);
  auto meta = changed ? std::make_shared<const Meta>(meta_of(outputs, training)) : last;
  const Tensor words = changed ? encode(*meta) : Tensor();
  post(out, p2p.isend(full({1}, changed ? words.numel() : 0, kLong), next, kHeaderTag));
  if (!changed) return meta;
  post(out, p2p.isend(words, next, kMetaTag));
  const MetaPtr before = std::exchange(last, meta);
  if (before && !dynamic_shapes) {
    // The receiver posted receives shaped as before: fill them, then both sides throw (Note [activation metadata]).
    for (const TensorMeta& m : *before)
      post(out, p2p.isend(zeros(m.sizes, TensorOptions(m.dtype).device(device)), next, kDataTag));
    P2P::wait_all(out);
    STRATA_CHECK(false, shape_change_message(grid.get_stage_id(), next, *before, *meta, micro_batch));
  }
  return meta;
}

void PipelineEngine::State::post_recv_activation(Buffer& buf, int chunk) {
  STRATA_INTERNAL_ASSERT(buf.incoming.empty());
  const int prev = prev_stage(chunk);
  const MetaPtr& last = received[mode].at(chunk);
  buf.header = empty({1}, kLong);
  post(buf.incoming, p2p.irecv(buf.header, prev, kHeaderTag));
  buf.header_unread = last && !dynamic_shapes;
  if (buf.header_unread) {
    buf.in_meta = last;
  } else {
    await(buf.incoming, PipeInstruction::RecvActivation);
    buf.in_meta = read_meta(buf.header.data_ptr<int64_t>()[0], chunk, buf.micro_batch);
  }
  const bool training = mode == kTrain;
  buf.inputs.clear();
  for (const TensorMeta& m : *buf.in_meta) {
    Tensor t = empty(m.sizes, TensorOptions(m.dtype).device(device));
    post(buf.incoming, p2p.irecv(t, prev, kDataTag));
    buf.inputs.push_back(training && m.requires_grad ? t.requires_grad_(true) : t);
  }
}

void PipelineEngine::State::finish_recv_activation(Buffer& buf, int chunk) {
  await(buf.incoming, PipeInstruction::RecvActivation);
  if (!std::exchange(buf.header_unread, false)) return;
  // Without dynamic shapes any change is an error, which read_meta raises after receiving the new metadata.
  if (const int64_t n = buf.header.data_ptr<int64_t>()[0]; n != 0) read_meta(n, chunk, buf.micro_batch);
}

MetaPtr PipelineEngine::State::read_meta(int64_t n, int chunk, int micro_batch) {
  MetaPtr& last = received[mode].at(chunk);
  const int stage = grid.get_stage_id(), prev = prev_stage(chunk);
  if (n == 0) {
    STRATA_CHECK(last != nullptr, "PipelineEngine RecvActivation (stage ", stage, "): stage ", prev,
                 " announced unchanged metadata before sending any");
    return last;
  }
  STRATA_CHECK(n > 0 && n < (1 << 20), "PipelineEngine RecvActivation (stage ", stage, "): bad metadata length ", n,
               " from stage ", prev);
  Tensor words = empty({n}, kLong);
  Works received_words{p2p.irecv(words, prev, kMetaTag)};
  await(received_words, PipeInstruction::RecvActivation);
  auto meta = std::make_shared<const Meta>(decode(words, stage));
  const MetaPtr before = std::exchange(last, meta);
  STRATA_CHECK(!before || dynamic_shapes, shape_change_message(prev, stage, *before, *meta, micro_batch));
  return meta;
}

void PipelineEngine::State::post(Works& works, std::shared_ptr<dist::Work> work) {
  std::erase_if(works, [](const std::shared_ptr<dist::Work>& w) {
    if (!w->is_completed()) return false;
    w->wait();  // returns at once, or throws the op's error
    return true;
  });
  works.push_back(std::move(work));
}

void PipelineEngine::State::await(Works& works, PipeInstruction::Kind kind) {
  if (works.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  P2P::wait_all(works);
  waited[kind] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void PipelineEngine::write_trace(const std::string& path) const {
  // Every rank's instructions as 7 numbers each, padded to the longest list, gathered everywhere; rank 0 writes.
  constexpr int64_t kFields = 7, kHeader = 3;
  const int world = dist::get_world_size();
  Tensor count = tensor({static_cast<int64_t>(timings_.executed.size())});
  Tensor counts = empty({world}, kLong);
  dist::all_gather_into_tensor(counts, count);
  const int64_t longest = counts.max().item<int64_t>();
  Tensor mine = zeros({kHeader + longest * kFields}, kDouble);
  double* m = mine.data_ptr<double>();
  m[0] = static_cast<double>(timings_.executed.size());
  m[1] = grid_.get_stage_id();
  m[2] = grid_.get_data_parallel_id();
  for (size_t i = 0; i < timings_.executed.size(); ++i) {
    const ExecutedInstruction& e = timings_.executed[i];
    double* f = m + kHeader + static_cast<int64_t>(i) * kFields;
    f[0] = e.instruction.kind, f[1] = e.instruction.buffer_id, f[2] = e.instruction.chunk, f[3] = e.step;
    f[4] = e.micro_batch, f[5] = e.start, f[6] = e.end;
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
  std::vector<std::string> rows;
  std::vector<TraceSlice> slices;
  for (int r = 0; r < world; ++r) {
    const double* rank = a + r * mine.numel();
    rows.push_back(str("rank ", r, ": stage ", rank[1], ", replica ", rank[2]));
    for (int64_t i = 0; i < static_cast<int64_t>(rank[0]); ++i) {
      const double* f = rank + kHeader + i * kFields;
      const PipeInstruction ins{static_cast<PipeInstruction::Kind>(f[0]), static_cast<int32_t>(f[1]),
                                static_cast<int16_t>(f[2])};
      slices.push_back(
          {r, (f[5] - t0) * 1e6, (f[6] - f[5]) * 1e6, ins, static_cast<int>(f[4]), static_cast<int>(f[3])});
    }
  }
  std::ofstream file(path);
  STRATA_CHECK(file.is_open(), "PipelineEngine::write_trace: cannot open '", path, "' for writing");
  write_trace_json(file, rows, slices);
  file.close();
  STRATA_CHECK(!file.fail(), "PipelineEngine::write_trace: could not write '", path, "'");
}

}  // namespace strata::pipe
