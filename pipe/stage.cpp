// A pipeline stage's buffers, activation metadata and transfers.
#include "strata/pipe/stage.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <utility>

#include "strata/nn/data_parallel.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/cuda.h"

namespace strata::pipe {
namespace dist = strata::distributed;

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
//
// Note [early receives]: where the backend lets a receive wait for its message without holding up other ops
// (Backend::receives_post_ahead: MPI, not NCCL's one stream per peer), a receive is posted as early as the
// schedule allows, so that its message moves (Note [progress thread]) while the stage computes: a RecvGrad
// once its micro-batch's outputs were sent (the gradients take their shapes), a RecvActivation once its
// chunk's previous RecvActivation was reached and its shapes are static and known, one micro-batch ahead (the
// memory of one more input per chunk). An early RecvActivation waits in ahead_ for its instruction, since its
// buffer may still hold an earlier micro-batch. Receives are still posted in the stream's order, and MPI
// matches a source's messages of one tag in posting order, so each receive gets the message it got before;
// posting never blocks, and the waits stay where they were, so early receives can add no wait to a cycle.

namespace {

using distributed::TensorMeta;
using Meta = PipelineStage::Meta;
using MetaPtr = PipelineStage::MetaPtr;

constexpr int kTrain = 0, kEval = 1;                       // the two modes keep their own metadata
constexpr int kDataTag = 0, kHeaderTag = 1, kMetaTag = 2;  // Note [activation metadata]

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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

std::string shape_change_message(int from_stage, int to_stage, const Meta& before, const Meta& after, int micro_batch) {
  std::ostringstream os;
  os << "PipelineEngine: the activations stage " << from_stage << " sends to stage " << to_stage << " changed from "
     << describe(before) << " to " << describe(after) << " at micro-batch " << micro_batch
     << "; set PipelineEngineOptions::dynamic_shapes = true to let them change";
  return os.str();
}

}  // namespace

// Note [stage devices]: a stage receives activations (and its last stage the labels) on the device of its
// module's parameters, and gradients on the device of the outputs they belong to. Sender and receiver of one
// transfer must use the same device type, since a CPU tensor and a GPU tensor may travel through different
// backends (MPI and NCCL) that never meet; so every stage with parameters must be on the same type, and so
// must every replica (their gradients are averaged, their parameters broadcast): the type is agreed over
// WORLD. A stage without parameters takes the others' type (a GPU stage then uses the current CUDA device).
Device agree_stage_device(const PipelineModule& module, const PipelineParallelGrid& grid) {
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

PipelineStage::PipelineStage(const PipelineParallelGrid& grid, StageLayout layout, Device device, bool dynamic_shapes,
                             dist::Group p2p_group)
    : grid_(grid),
      dynamic_shapes_(dynamic_shapes),
      device_(device),
      p2p_(grid, std::move(p2p_group)),
      layout_(layout),
      receives_ahead_(p2p_.receives_post_ahead(device)) {
  for (int mode : {kTrain, kEval}) {
    sent_[mode].resize(layout.chunks);
    received_[mode].resize(layout.chunks);
  }
  for (int c = 0; c < layout.chunks; ++c)
    if (last(c)) label_chunk_ = c;
}

int PipelineStage::local_prev(int c) const {
  return !first(c) && prev_stage(c) == grid_.get_stage_id() ? layout_.chunk_of(virtual_stage(c) - 1) : -1;
}

void PipelineStage::begin_batch(const PipeSchedule& schedule, std::vector<ExecutedInstruction>* transfers) {
  mode_ = schedule.is_training() ? kTrain : kEval;
  loaded_ = 0;
  received_count_.assign(layout_.chunks, 0);
  buffers_.clear();
  buffers_.resize(layout_.chunks);
  for (auto& chunk : buffers_) chunk.resize(schedule.num_pipe_buffers());
  ahead_.clear();
  ahead_.resize(layout_.chunks);
  waited_ = {};
  transfers_ = transfers;
  in_flight_.clear();
  stream_.clear();
  for (int t = 0; t < schedule.num_steps(); ++t)
    for (const PipeInstruction& ins : schedule.step(t)) stream_.push_back({t, ins});
  // Note [early receives]: the instruction before which each may be posted, most often itself.
  earliest_.resize(stream_.size());
  ReceiveGates<size_t> gates(layout_.chunks, schedule.num_pipe_buffers(), !dynamic_shapes_);
  next_recv_ = std::find_if(stream_.begin(), stream_.end(), [](const Streamed& s) { return is_receive(s.ins.kind); }) -
               stream_.begin();
  for (size_t j = 0; j < stream_.size(); ++j) {
    const std::optional<size_t> gate = gates.next(stream_[j].ins, j + 1);
    earliest_[j] = receives_ahead_ && gate ? *gate : j;
  }
}

void PipelineStage::start(size_t i) {
  at_ = i;
  while (next_recv_ > i && next_recv_ < stream_.size() && earliest_[next_recv_] <= i) {
    const PipeInstruction& ins = stream_[next_recv_].ins;
    // Its chunk's RecvActivation before it learnt the shapes.
    STRATA_INTERNAL_ASSERT(ins.kind != PipeInstruction::RecvActivation || received_[mode_].at(ins.chunk));
    post_receive(next_recv_);
  }
}

void PipelineStage::post_receive(size_t j) {
  const Streamed& s = stream_[j];
  if (s.ins.kind == PipeInstruction::RecvActivation) {
    std::optional<Buffer>& early = ahead_.at(s.ins.chunk);
    STRATA_INTERNAL_ASSERT(!early);
    post_recv_activation(j == at_ ? buffer(s.ins) : early.emplace(), s);
  } else {
    post_recv_grad(s);
  }
  do ++next_recv_;
  while (next_recv_ < stream_.size() && !is_receive(stream_[next_recv_].ins.kind));
}

void PipelineStage::end_batch() {
  for (auto& chunk : buffers_)
    for (Buffer& buf : chunk) {
      STRATA_INTERNAL_ASSERT(buf.incoming.empty());  // every receive was used
      P2P::wait_all(buf.outgoing);
    }
  for (const std::optional<Buffer>& early : ahead_) STRATA_INTERNAL_ASSERT(!early);
  buffers_.clear();
  if (transfers_) poll_transfers();
  transfers_ = nullptr;
  in_flight_.clear();
}

void PipelineStage::load(const PipeInstruction& ins, tensor_list inputs, tensor_list labels) {
  // As DeepSpeed, the engine moves what it keeps to the stage's device (no copy when it is there already).
  auto on_stage = [&](tensor_list tensors) {
    for (Tensor& t : tensors) t = t.to(device_);
    return tensors;
  };
  if (first(ins.chunk)) {
    Buffer& buf = buffer(ins);
    buf.inputs = on_stage(std::move(inputs));
    buf.micro_batch = loaded_;
  }
  // The labels wait in the buffer of the chunk holding the model's last piece.
  if (label_chunk_ >= 0) buffers_.at(label_chunk_).at(ins.buffer_id).labels = on_stage(std::move(labels));
  ++loaded_;
}

const tensor_list& PipelineStage::forward_inputs(const PipeInstruction& ins) {
  const int c = ins.chunk;
  Buffer& buf = buffer(ins);
  finish_recv_activation(buf, c);
  if (const int pc = local_prev(c); pc >= 0) {
    // The piece before is this stage's chunk pc: its outputs become these inputs, cut from its graph as a
    // transfer would, so each chunk's backward stops at its own inputs.
    const bool training = mode_ == kTrain;
    Buffer& prev = buffers_.at(pc).at(ins.buffer_id);
    prev.out_meta = std::make_shared<const Meta>(meta_of(prev.outputs, training));
    buf.in_meta = prev.out_meta;
    buf.micro_batch = prev.micro_batch;
    buf.inputs.clear();
    for (const Tensor& t : prev.outputs)
      buf.inputs.push_back(training && t.requires_grad() ? t.detach().requires_grad_(true) : t.detach());
    if (!training) prev.outputs.clear();
  }
  return buf.inputs;
}

std::pair<tensor_list, tensor_list> PipelineStage::backward_roots(const PipeInstruction& ins) {
  Buffer& buf = buffer(ins);
  await(buf.incoming, PipeInstruction::RecvGrad);
  tensor_list outs, grads;
  for (size_t i = 0; i < buf.out_meta->size(); ++i) {
    if (!(*buf.out_meta)[i].requires_grad) continue;
    outs.push_back(buf.outputs[i]);
    grads.push_back(buf.output_grads[i]);
  }
  return {std::move(outs), std::move(grads)};
}

void PipelineStage::after_backward(const PipeInstruction& ins) {
  const int c = ins.chunk;
  Buffer& buf = buffer(ins);
  buf.loss = {};
  buf.outputs.clear();
  buf.output_grads.clear();
  if (const int pc = local_prev(c); pc >= 0) {
    // Hand the input gradients to the chunk before on this stage, as SendGrad would.
    Buffer& prev = buffers_.at(pc).at(ins.buffer_id);
    prev.output_grads.assign(buf.inputs.size(), Tensor());
    for (size_t i = 0; i < buf.inputs.size(); ++i) {
      if (!(*buf.in_meta)[i].requires_grad) continue;
      const Tensor& g = buf.inputs[i].grad();
      prev.output_grads[i] = g.defined() ? g : zeros_like(buf.inputs[i]);
    }
    buf.inputs.clear();
  }
  if (first(c)) buf.inputs.clear();  // no SendGrad follows
}

void PipelineStage::send_activation(const PipeInstruction& ins) {
  Buffer& buf = buffer(ins);
  const int next = next_stage(ins.chunk);
  await(buf.outgoing, ins.kind);  // the buffer's sends of its last micro-batch
  const double posted = now();
  buf.out_meta = send_meta(buf.outputs, ins.chunk, buf.micro_batch, buf.outgoing);
  for (const Tensor& t : buf.outputs) post(buf.outgoing, p2p_.isend(t.detach(), next, kDataTag));
  record(ins, stream_[at_].step, buf.micro_batch, posted, buf.outgoing);
  if (mode_ == kEval) buf.outputs.clear();  // the sends keep what they send
}

void PipelineStage::recv_activation(const PipeInstruction& ins) {
  Buffer& buf = buffer(ins);
  STRATA_INTERNAL_ASSERT(buf.incoming.empty());
  if (next_recv_ == at_) return post_receive(at_);
  Buffer& early = *ahead_.at(ins.chunk);  // Note [early receives]
  buf.inputs = std::move(early.inputs);
  buf.in_meta = std::move(early.in_meta);
  buf.incoming = std::move(early.incoming);
  buf.header = std::move(early.header);
  buf.header_unread = early.header_unread;
  buf.micro_batch = early.micro_batch;
  ahead_[ins.chunk].reset();
}

void PipelineStage::post_recv_activation(Buffer& buf, const Streamed& s) {
  const double posted = now();
  const int c = s.ins.chunk, prev = prev_stage(c);
  buf.micro_batch = received_count_.at(c)++;
  const MetaPtr& last = received_[mode_].at(c);
  buf.header = empty({1}, kLong);
  post(buf.incoming, p2p_.irecv(buf.header, prev, kHeaderTag));
  buf.header_unread = last && !dynamic_shapes_;
  if (buf.header_unread) {
    buf.in_meta = last;
  } else {
    await(buf.incoming, PipeInstruction::RecvActivation);
    buf.in_meta = read_meta(buf.header.data_ptr<int64_t>()[0], c, buf.micro_batch);
  }
  const bool training = mode_ == kTrain;
  buf.inputs.clear();
  for (const TensorMeta& m : *buf.in_meta) {
    Tensor t = empty(m.sizes, TensorOptions(m.dtype).device(device_));
    post(buf.incoming, p2p_.irecv(t, prev, kDataTag));
    buf.inputs.push_back(training && m.requires_grad ? t.requires_grad_(true) : t);
  }
  record(s.ins, s.step, buf.micro_batch, posted, buf.incoming);
}

void PipelineStage::send_grad(const PipeInstruction& ins) {
  Buffer& buf = buffer(ins);
  const int prev = prev_stage(ins.chunk);
  await(buf.outgoing, ins.kind);
  const double posted = now();
  for (size_t i = 0; i < buf.in_meta->size(); ++i) {
    if (!(*buf.in_meta)[i].requires_grad) continue;
    // An input the stage did not use has no gradient; its sender still waits for one.
    Tensor g = buf.inputs[i].grad();
    post(buf.outgoing, p2p_.isend(g.defined() ? g : zeros_like(buf.inputs[i]), prev, kDataTag));
  }
  record(ins, stream_[at_].step, buf.micro_batch, posted, buf.outgoing);
  buf.inputs.clear();
}

void PipelineStage::recv_grad(const PipeInstruction& ins) {
  if (next_recv_ == at_) post_receive(at_);  // else posted early (Note [early receives])
}

void PipelineStage::post_recv_grad(const Streamed& s) {
  const double posted = now();
  Buffer& buf = buffer(s.ins);
  const int next = next_stage(s.ins.chunk);
  const Meta& out_meta = *buf.out_meta;
  STRATA_INTERNAL_ASSERT(buf.incoming.empty());
  buf.output_grads.assign(out_meta.size(), Tensor());
  for (size_t i = 0; i < out_meta.size(); ++i) {
    if (!out_meta[i].requires_grad) continue;
    const TensorOptions options = TensorOptions(out_meta[i].dtype).device(buf.outputs[i].device());
    buf.output_grads[i] = empty(out_meta[i].sizes, options);
    post(buf.incoming, p2p_.irecv(buf.output_grads[i], next, kDataTag));
  }
  record(s.ins, s.step, buf.micro_batch, posted, buf.incoming);
}

MetaPtr PipelineStage::send_meta(const tensor_list& outputs, int chunk, int micro_batch, Works& out) {
  MetaPtr& last = sent_[mode_].at(chunk);
  const int next = next_stage(chunk);
  const bool training = mode_ == kTrain;
  const bool changed = !last || !described_by(*last, outputs, training);
  auto meta = changed ? std::make_shared<const Meta>(meta_of(outputs, training)) : last;
  const Tensor words = changed ? encode(*meta) : Tensor();
  post(out, p2p_.isend(full({1}, changed ? words.numel() : 0, kLong), next, kHeaderTag));
  if (!changed) return meta;
  post(out, p2p_.isend(words, next, kMetaTag));
  const MetaPtr before = std::exchange(last, meta);
  if (before && !dynamic_shapes_) {
    // The receiver posted receives shaped as before: fill them, then both sides throw (Note [activation metadata]).
    for (const TensorMeta& m : *before)
      post(out, p2p_.isend(zeros(m.sizes, TensorOptions(m.dtype).device(device_)), next, kDataTag));
    P2P::wait_all(out);
    STRATA_CHECK(false, shape_change_message(grid_.get_stage_id(), next, *before, *meta, micro_batch));
  }
  return meta;
}

void PipelineStage::finish_recv_activation(Buffer& buf, int chunk) {
  await(buf.incoming, PipeInstruction::RecvActivation);
  if (!std::exchange(buf.header_unread, false)) return;
  // Without dynamic shapes any change is an error, which read_meta raises after receiving the new metadata.
  if (const int64_t n = buf.header.data_ptr<int64_t>()[0]; n != 0) read_meta(n, chunk, buf.micro_batch);
}

MetaPtr PipelineStage::read_meta(int64_t n, int chunk, int micro_batch) {
  MetaPtr& last = received_[mode_].at(chunk);
  const int stage = grid_.get_stage_id(), prev = prev_stage(chunk);
  if (n == 0) {
    STRATA_CHECK(last != nullptr, "PipelineEngine RecvActivation (stage ", stage, "): stage ", prev,
                 " announced unchanged metadata before sending any");
    return last;
  }
  STRATA_CHECK(n > 0 && n < (1 << 20), "PipelineEngine RecvActivation (stage ", stage, "): bad metadata length ", n,
               " from stage ", prev);
  Tensor words = empty({n}, kLong);
  Works received_words{p2p_.irecv(words, prev, kMetaTag)};
  await(received_words, PipeInstruction::RecvActivation);
  auto meta = std::make_shared<const Meta>(decode(words, stage));
  const MetaPtr before = std::exchange(last, meta);
  STRATA_CHECK(!before || dynamic_shapes_, shape_change_message(prev, stage, *before, *meta, micro_batch));
  return meta;
}

void PipelineStage::post(Works& works, std::shared_ptr<dist::Work> work) {
  std::erase_if(works, [](const std::shared_ptr<dist::Work>& w) {
    if (!w->is_completed()) return false;
    w->wait();  // returns at once, or throws the op's error
    return true;
  });
  works.push_back(std::move(work));
}

void PipelineStage::await(Works& works, PipeInstruction::Kind kind) {
  if (works.empty()) return;
  const double start = now();
  P2P::wait_all(works);
  waited_[kind] += now() - start;
  if (transfers_) poll_transfers();
}

void PipelineStage::record(const PipeInstruction& ins, int step, int micro_batch, double posted, const Works& works) {
  if (!transfers_) return;
  transfers_->push_back({ins, step, micro_batch, posted, posted});
  in_flight_.emplace_back(transfers_->size() - 1, works);
  poll_transfers();  // nothing posted (no gradient to send) is complete at once
}

void PipelineStage::poll_transfers() {
  const double t = now();
  std::erase_if(in_flight_, [&](std::pair<size_t, Works>& f) {
    for (const auto& w : f.second)
      if (!w->is_completed()) return false;
    (*transfers_)[f.first].end = t;
    return true;
  });
}

std::array<double, PipeInstruction::kNumKinds> PipelineStage::take_waited() { return std::exchange(waited_, {}); }

}  // namespace strata::pipe
