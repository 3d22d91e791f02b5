// The schedule validator (a lockstep simulation of every stage), its report and the lower bound beside it.

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "strata/pipe/schedule_validator.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

namespace {

// SendActivation and RecvGrad talk to the chunk after this one in the model, RecvActivation and SendGrad to
// the one before.
bool to_next(Instr::Kind kind) { return kind == Instr::SendActivation || kind == Instr::RecvGrad; }
Instr::Kind partner_of(Instr::Kind kind) {
  switch (kind) {
    case Instr::SendActivation:
      return Instr::RecvActivation;
    case Instr::RecvActivation:
      return Instr::SendActivation;
    case Instr::SendGrad:
      return Instr::RecvGrad;
    default:
      return Instr::SendGrad;
  }
}

// What one pipe buffer of one chunk holds during the simulation.
struct BufferState {
  int micro_batch = -1;  // whose inputs (loaded, received or handed over) it holds; -1 before the first
  int labels = -1;       // whose labels wait for the forward pass (the last virtual stage); -1 when none
  bool forwarded = false, output_sent = false, grad_received = false, backwarded = false, grad_sent = false;
  bool weighted = false;             // its parameter gradients are done (BackwardPass or BackwardWeight)
  double ready = 0, grad_ready = 0;  // when its received inputs, and its received output grads, arrive
};

// One chunk of a stage: where it is in the model and who its neighbours are.
struct ChunkState {
  int prev = -1, next = -1;  // the stages holding the virtual stages before and after, -1 at the ends
  int prev_chunk = 0, next_chunk = 0;
  bool prev_local = false, next_local = false;  // the neighbour is a chunk of this stage: no p2p between them
  bool first = false, last = false;             // loads the inputs / the labels
  std::vector<BufferState> buffers;
};

struct StageState {
  std::unique_ptr<PipeSchedule> schedule;
  std::vector<ChunkState> chunks;
  int label_chunk = -1;  // the chunk whose buffers receive this stage's labels, -1 when it loads none
  PipeStep step;         // the current step's instructions
  int position = 0;      // the next one to run
  bool waiting = false;  // blocked on the p2p instruction at `position` until the peer reaches its partner
  int next_load = 0;     // the micro-batch the next LoadMicroBatch takes
  int forwards = 0, backwards = 0, weights = 0, live_buffers = 0, activations = 0;
  bool grads_reduced = false, optimizer_stepped = false;
  double clock = 0;                  // the simulated time
  double sent = 0;                   // when the last of its sends arrives: the batch ends no sooner
  ReceiveGates<double> gates{0, 0};  // Note [early receives] in stage.cpp; sized with the schedule
  double posted = 0;                 // when the p2p instruction at `position` was posted
  double received = 0;               // when its last receive was posted
  StageReport report;
};

// Where a violation happened, formatted only when a check fails.
struct At {
  std::string_view schedule;
  int stage, step;
  Instr instruction;
  int micro_batch;
};
std::ostream& operator<<(std::ostream& os, const At& at) {
  os << "validate_schedule: " << at.schedule << " schedule, stage " << at.stage << ", step " << at.step << ", "
     << at.instruction;
  if (at.micro_batch >= 0) os << " (micro-batch " << at.micro_batch << ")";
  return os;
}

// Note [lockstep simulation]: every stage runs its step's instructions in order until it reaches a p2p
// instruction. If the peer is already waiting on the partner instruction, both complete (the micro-batch id
// travels with the message) and the peer resumes; otherwise this stage waits. Each instruction is looked at
// once, so a step costs O(stages), and a step after which a stage still waits is a deadlock. Only the
// current step of each stage exists at any time. The simulated clock rides along and models the engine's
// overlapped transfers (Note [overlapped transfers] in stage.cpp): a stage's clock advances by each compute
// instruction's cost; a transfer occupies its link (one direction between two stages), not the stages: it starts
// once both sides have posted it (a send at its instruction, a receive as early as ReceiveGates allows, Note
// [early receives] in stage.cpp, unless options.early_receives is off) and the link is free, holds the link
// while its bytes go out
// (costs.link_time()) and arrives costs.p2p after that. The latency does not hold the link: a link sends one
// message's bytes at a time, but the next may follow before the last arrives, as MPI and NCCL pipeline messages.
// The compute that uses what a transfer carries waits for it, and a stage's batch ends once its sends have
// arrived. None of this depends on the order in which the lockstep loop visits the stages.
class Simulator {
 public:
  Simulator(const std::function<std::unique_ptr<PipeSchedule>(int)>& make_stage, int stages,
            const ValidateOptions& options);
  ScheduleReport run();

 private:
  void advance(int s);
  std::string waiting_stages() const;
  int peer_of(int s, const Instr& in) const {
    const ChunkState& c = stages_[s].chunks[in.chunk];
    return to_next(in.kind) ? c.next : c.prev;
  }
  int peer_chunk(int s, const Instr& in) const {
    const ChunkState& c = stages_[s].chunks[in.chunk];
    return to_next(in.kind) ? c.next_chunk : c.prev_chunk;
  }
  void start_p2p(int s, const Instr& in);
  void meet(int sender, int receiver);
  void run_local(int s, const Instr& in);
  void forward(int s, const Instr& in);
  void backward(int s, const Instr& in);
  void check_end_of_batch(int s, const Instr& in);
  void load(int s, const Instr& in);
  double cost(int stage, const Instr& in) const;
  void computed(int s, const Instr& in, int micro_batch);
  const char* why_needed(const ChunkState& c, const BufferState& b) const;
  void set_live(StageState& st, bool was_live, const ChunkState& c, const BufferState& b);
  bool is_live(const ChunkState& c, const BufferState& b) const { return why_needed(c, b) || b.labels >= 0; }
  void emit(int s, const Instr& in, int micro_batch, double start, double end);
  At at(int s, const Instr& in, int micro_batch) const { return {name_, s, step_id_, in, micro_batch}; }
  BufferState& holding(int s, const Instr& in);

  std::vector<StageState> stages_;
  const ValidateOptions& options_;
  std::string name_;
  int micro_batches_ = 0, num_steps_ = 0, step_id_ = 0;
  StageLayout layout_;  // stage 0's, which every stage's must match
  bool training_ = true, pipelined_ = true;
  std::vector<int> ready_;         // stages that can run on
  std::vector<double> link_free_;  // [from * stages + to]: when the link can send the next transfer's bytes
};

Simulator::Simulator(const std::function<std::unique_ptr<PipeSchedule>(int)>& make_stage, int stages,
                     const ValidateOptions& options)
    : options_(options) {
  // Stage 0's schedule tells the size of the run, checked before the other stages cost anything.
  std::unique_ptr<PipeSchedule> first = make_stage(0);
  STRATA_CHECK(first, "validate_schedule: the factory gave no schedule for stage 0");
  const int64_t stage_steps = int64_t{stages} * first->num_steps();
  STRATA_CHECK(stage_steps <= options.max_stage_steps, "validate_schedule: ", first->name(), " schedule of ", stages,
               " stages x ", first->num_steps(), " steps is ", stage_steps, " stage-steps, more than the ",
               options.max_stage_steps, " it simulates");
  stages_.resize(stages);
  link_free_.assign(static_cast<size_t>(stages) * stages, 0.0);
  for (int s = 0; s < stages; ++s) {
    StageState& st = stages_[s];
    st.schedule = s == 0 ? std::move(first) : make_stage(s);
    STRATA_CHECK(st.schedule, "validate_schedule: the factory gave no schedule for stage ", s);
    const PipeSchedule& sched = *st.schedule;
    STRATA_CHECK(sched.stage_id() == s && sched.stages() == stages, "validate_schedule: the factory's schedule for ",
                 "stage ", s, " of ", stages, " is for stage ", sched.stage_id(), " of ", sched.stages());
    const StageLayout layout = sched.layout();
    if (s == 0) {
      name_ = sched.name();
      micro_batches_ = sched.micro_batches();
      num_steps_ = sched.num_steps();
      training_ = sched.is_training();
      pipelined_ = sched.is_pipelined();
      layout_ = layout;
    }
    const PipeSchedule& first = *stages_[0].schedule;
    if (sched.name() != first.name() || sched.micro_batches() != first.micro_batches() ||
        sched.num_steps() != first.num_steps() || sched.is_training() != first.is_training() ||
        sched.is_pipelined() != first.is_pipelined() || layout != first.layout()) {
      auto describe = [](const PipeSchedule& x) {
        std::ostringstream os;
        os << x.name() << ", " << x.micro_batches() << " micro-batches, " << x.num_steps() << " steps";
        if (x.layout().chunks > 1) os << ", " << x.layout().chunks << " chunks";
        return os.str();
      };
      STRATA_CHECK(false, "validate_schedule: stage ", s, "'s schedule (", describe(sched),
                   ") does not match stage 0's (", describe(first), ")");
    }
    STRATA_CHECK(layout.stages == stages && layout.chunks >= 1 && (!layout.v_shape || layout.chunks == 2),
                 "validate_schedule: stage ", s, "'s layout has ", layout.stages, " stages of ", layout.chunks,
                 " chunks", layout.v_shape ? " in a V" : "", " for a pipeline of ", stages, " stages");
    STRATA_CHECK(sched.num_pipe_buffers() >= 1, "validate_schedule: stage ", s, " declares ", sched.num_pipe_buffers(),
                 " pipe buffers");
    st.report.num_pipe_buffers = sched.num_pipe_buffers();
    st.gates = ReceiveGates<double>(layout.chunks, sched.num_pipe_buffers());
    st.chunks.resize(layout.chunks);
    const int last = layout.num_virtual_stages() - 1;
    for (int c = 0; c < layout.chunks; ++c) {
      ChunkState& ch = st.chunks[c];
      ch.buffers.resize(sched.num_pipe_buffers());
      // A stage of a data-parallel schedule holds the whole model: it loads its own inputs and labels.
      const int vs = pipelined_ ? layout.virtual_stage(s, c) : 0;
      const int end = pipelined_ ? last : 0;
      ch.first = vs == 0;
      ch.last = vs == end;
      if (ch.last) st.label_chunk = c;
      if (vs > 0) {
        ch.prev = layout.stage_of(vs - 1);
        ch.prev_chunk = layout.chunk_of(vs - 1);
        ch.prev_local = ch.prev == s;
      }
      if (vs < end) {
        ch.next = layout.stage_of(vs + 1);
        ch.next_chunk = layout.chunk_of(vs + 1);
        ch.next_local = ch.next == s;
      }
    }
  }
}

// "stage 0 waits in SendActivation(1) for stage 1; ..." for the first few waiting stages.
std::string Simulator::waiting_stages() const {
  std::ostringstream os;
  int waiting = 0;
  for (int s = 0; s < static_cast<int>(stages_.size()); ++s) {
    const StageState& st = stages_[s];
    if (!st.waiting) continue;
    if (waiting++ == 8) return os.str() + "; and more";
    os << (waiting > 1 ? "; " : "") << "stage " << s << " waits in " << st.step[st.position] << " for stage "
       << peer_of(s, st.step[st.position]);
  }
  return os.str();
}

ScheduleReport Simulator::run() {
  const int stages = static_cast<int>(stages_.size());
  int64_t compute = 0;
  for (step_id_ = 0; step_id_ < num_steps_; ++step_id_) {
    for (StageState& st : stages_) {
      st.step = st.schedule->step(step_id_);
      st.position = 0;
      const bool computes =
          std::any_of(st.step.begin(), st.step.end(), [](const Instr& in) { return is_compute(in.kind); });
      st.report.compute_steps += computes;
      compute += computes;
    }
    for (int s = 0; s < stages; ++s) {
      ready_.push_back(s);
      while (!ready_.empty()) {
        const int r = ready_.back();
        ready_.pop_back();
        advance(r);
      }
    }
    const bool stuck = std::any_of(stages_.begin(), stages_.end(), [](const StageState& st) { return st.waiting; });
    STRATA_CHECK(!stuck, "validate_schedule: ", name_, " schedule deadlocks at step ", step_id_, ": ",
                 waiting_stages());
  }
  ScheduleReport report;
  report.schedule = name_;
  report.micro_batches = micro_batches_;
  report.stages = stages;
  report.steps = num_steps_;
  report.chunks = layout_.chunks;
  report.costs = options_.costs;
  const int expected = micro_batches_ * layout_.chunks;
  double busy = 0;
  for (int s = 0; s < stages; ++s) {
    const StageState& st = stages_[s];
    const char* of = layout_.chunks > 1 ? " (micro-batches x chunks)" : " micro-batches";
    STRATA_CHECK(st.forwards == expected, "validate_schedule: ", name_, " schedule, stage ", s, " forwarded ",
                 st.forwards, " of ", expected, of);
    if (training_) {
      STRATA_CHECK(st.backwards == expected, "validate_schedule: ", name_, " schedule, stage ", s, " backwarded ",
                   st.backwards, " of ", expected, of);
      STRATA_CHECK(st.weights == expected, "validate_schedule: ", name_, " schedule, stage ", s,
                   " computed the weight gradients of ", st.weights, " of ", expected, of);
      STRATA_CHECK(st.optimizer_stepped, "validate_schedule: ", name_, " schedule, stage ", s,
                   " never runs OptimizerStep");
    }
    report.per_stage.push_back(st.report);
    report.time = std::max({report.time, st.clock, st.sent});
    busy += st.report.busy;
  }
  report.bubble_fraction = 1 - static_cast<double>(compute) / (static_cast<double>(stages) * num_steps_);
  report.idle_fraction = report.time > 0 ? 1 - busy / (stages * report.time) : 0;
  if (training_ && pipelined_ && !options_.compute_cost)
    report.lower_bound = lower_bound(layout_, micro_batches_, options_.costs);
  return report;
}

void Simulator::advance(int s) {
  StageState& st = stages_[s];
  while (st.position < st.step.size()) {
    const Instr& in = st.step[st.position];
    STRATA_CHECK(!in.has_buffer() || (0 <= in.buffer_id && in.buffer_id < st.report.num_pipe_buffers), at(s, in, -1),
                 ": buffer ", in.buffer_id, " is out of range for ", st.report.num_pipe_buffers, " pipe buffers");
    STRATA_CHECK(0 <= in.chunk && in.chunk < layout_.chunks && (in.has_buffer() || in.chunk == 0), at(s, in, -1),
                 ": chunk ", in.chunk, " is out of range for ", layout_.chunks, " chunks",
                 in.has_buffer() ? "" : " (or not 0)");
    const std::optional<double> gate = st.gates.next(in, st.clock);  // nothing that passes on moves the clock
    if (!is_p2p(in.kind)) {
      run_local(s, in);
      ++st.position;
      continue;
    }
    // Receives are posted in the stream's order, each as early as its gate allows (ValidateOptions::early_receives).
    st.posted = st.clock;
    if (is_receive(in.kind))
      st.posted = st.received = std::max(st.received, gate && options_.early_receives ? *gate : st.clock);
    start_p2p(s, in);
    const int p = peer_of(s, in);
    StageState& peer = stages_[p];
    if (!peer.waiting || peer.step[peer.position].kind != partner_of(in.kind) ||
        peer_of(p, peer.step[peer.position]) != s) {
      st.waiting = true;
      return;
    }
    const Instr& other = peer.step[peer.position];
    STRATA_CHECK(other.chunk == peer_chunk(s, in) && peer_chunk(p, other) == in.chunk, at(s, in, -1), ": meets stage ",
                 p, "'s ", other, ", but chunk ", in.chunk, " talks to chunk ", peer_chunk(s, in));
    is_send(in.kind) ? meet(s, p) : meet(p, s);
    peer.waiting = false;
    ++peer.position;
    ++st.position;
    ready_.push_back(p);
  }
}

// Checks what a p2p instruction can check before its peer arrives: that the peer exists and what is sent.
void Simulator::start_p2p(int s, const Instr& in) {
  StageState& st = stages_[s];
  STRATA_CHECK(pipelined_, at(s, in, -1), ": the stages of a ", name_, " schedule are replicas and exchange nothing");
  const ChunkState& c = st.chunks[in.chunk];
  const bool next = to_next(in.kind);
  const int peer = next ? c.next : c.prev;
  if (layout_.chunks == 1) {
    STRATA_CHECK(peer >= 0, at(s, in, -1), ": stage ", s, " has no ", next ? "next" : "previous", " stage");
  } else {
    STRATA_CHECK(peer >= 0, at(s, in, -1), ": chunk ", in.chunk, " of stage ", s, " is the ", next ? "last" : "first",
                 " piece of the model");
    STRATA_CHECK(peer != s, at(s, in, -1), ": chunk ", in.chunk, "'s ", next ? "next" : "previous",
                 " piece is on the same stage, which hands it over without p2p");
  }
  STRATA_CHECK(training_ || in.kind == Instr::SendActivation || in.kind == Instr::RecvActivation, at(s, in, -1),
               ": gradients in a schedule that does not train");
  if (in.kind == Instr::SendActivation) {
    const BufferState& b = holding(s, in);
    STRATA_CHECK(b.forwarded, at(s, in, b.micro_batch), ": micro-batch ", b.micro_batch, " is not forwarded yet");
    STRATA_CHECK(!b.output_sent, at(s, in, b.micro_batch), ": the output of micro-batch ", b.micro_batch,
                 " was already sent");
  } else if (in.kind == Instr::SendGrad) {
    const BufferState& b = holding(s, in);
    STRATA_CHECK(b.backwarded, at(s, in, b.micro_batch), ": micro-batch ", b.micro_batch, " is not backwarded yet");
    STRATA_CHECK(!b.grad_sent, at(s, in, b.micro_batch), ": the grad of micro-batch ", b.micro_batch,
                 " was already sent");
  }
}

void Simulator::meet(int sender, int receiver) {
  StageState &from = stages_[sender], &to = stages_[receiver];
  const Instr &send = from.step[from.position], &recv = to.step[to.position];
  ChunkState &out_chunk = from.chunks[send.chunk], &in_chunk = to.chunks[recv.chunk];
  BufferState &out = out_chunk.buffers[send.buffer_id], &in = in_chunk.buffers[recv.buffer_id];
  const int m = out.micro_batch;
  double& link = link_free_[static_cast<size_t>(sender) * stages_.size() + receiver];
  const double start = std::max({from.posted, to.posted, link});
  link = start + options_.costs.link_time();  // Note [lockstep simulation]
  const double arrival = link + options_.costs.p2p;
  from.sent = std::max(from.sent, arrival);
  bool was_live = is_live(out_chunk, out);
  (send.kind == Instr::SendActivation ? out.output_sent : out.grad_sent) = true;
  set_live(from, was_live, out_chunk, out);
  emit(sender, send, m, start, arrival);

  was_live = is_live(in_chunk, in);
  if (recv.kind == Instr::RecvActivation) {
    const char* needed = why_needed(in_chunk, in);
    STRATA_CHECK(!needed, at(receiver, recv, m), ": overwrites micro-batch ", in.micro_batch, ", which is ", needed);
    in = BufferState{m, in.labels};
    in.ready = arrival;
  } else {
    STRATA_CHECK(in.micro_batch == m, at(receiver, recv, m), ": buffer ", recv.buffer_id, " holds micro-batch ",
                 in.micro_batch);
    in.grad_received = true;
    in.grad_ready = arrival;
  }
  set_live(to, was_live, in_chunk, in);
  emit(receiver, recv, m, start, arrival);
}

double Simulator::cost(int stage, const Instr& in) const {
  if (!options_.compute_cost) return options_.costs.of(in.kind) / layout_.chunks;
  const double c = options_.compute_cost(stage, in);
  STRATA_CHECK(c >= 0 && std::isfinite(c), "validate_schedule: compute_cost of stage ", stage, "'s ", in,
               " must be finite and non-negative, got ", c);
  return c;
}

void Simulator::run_local(int s, const Instr& in) {
  StageState& st = stages_[s];
  switch (in.kind) {
    case Instr::LoadMicroBatch:
      load(s, in);
      return;
    case Instr::ForwardPass:
      forward(s, in);
      return;
    case Instr::BackwardPass:
    case Instr::BackwardInput:
    case Instr::BackwardWeight:
      STRATA_CHECK(training_, at(s, in, holding(s, in).micro_batch),
                   ": a backward pass in a schedule that does not train");
      backward(s, in);
      return;
    default:
      check_end_of_batch(s, in);
      emit(s, in, -1, st.clock, st.clock);
  }
}

void Simulator::forward(int s, const Instr& in) {
  StageState& st = stages_[s];
  ChunkState& c = st.chunks[in.chunk];
  BufferState& b = c.buffers[in.buffer_id];
  if (c.prev_local) {
    // The chunk before, on this stage, hands over its output of the same buffer id.
    ChunkState& pc = st.chunks[c.prev_chunk];
    BufferState& pb = pc.buffers[in.buffer_id];
    const At where = at(s, in, pb.micro_batch);
    STRATA_CHECK(pb.micro_batch >= 0 && pb.forwarded && !pb.output_sent, where, ": chunk ", c.prev_chunk, "'s buffer ",
                 in.buffer_id, " holds no output to hand over");
    const char* needed = why_needed(c, b);
    STRATA_CHECK(!needed, where, ": overwrites micro-batch ", b.micro_batch, ", which is ", needed);
    bool was_live = is_live(pc, pb);
    pb.output_sent = true;
    set_live(st, was_live, pc, pb);
    was_live = is_live(c, b);
    b = BufferState{pb.micro_batch, b.labels};
    set_live(st, was_live, c, b);
  }
  BufferState& held = holding(s, in);
  const At where = at(s, in, held.micro_batch);
  STRATA_CHECK(!held.forwarded, where, ": micro-batch ", held.micro_batch, " was already forwarded");
  if (c.last) {
    STRATA_CHECK(held.labels >= 0, where, ": no labels loaded for the loss");
    STRATA_CHECK(held.labels == held.micro_batch, where, ": the buffer holds the labels of micro-batch ", held.labels);
  }
  const bool was_live = is_live(c, held);
  held.forwarded = true;
  held.labels = -1;
  set_live(st, was_live, c, held);
  ++st.forwards;
  if (training_) st.report.peak_activations = std::max(st.report.peak_activations, ++st.activations);
  st.clock = std::max(st.clock, held.ready);  // received inputs arrive
  computed(s, in, held.micro_batch);
}

void Simulator::backward(int s, const Instr& in) {
  StageState& st = stages_[s];
  ChunkState& c = st.chunks[in.chunk];
  BufferState& b = holding(s, in);
  const At where = at(s, in, b.micro_batch);
  STRATA_CHECK(b.forwarded, where, ": micro-batch ", b.micro_batch, " is not forwarded yet");
  const bool was_live = is_live(c, b);
  if (in.kind == Instr::BackwardWeight) {
    STRATA_CHECK(b.backwarded, where, ": comes before the BackwardInput of micro-batch ", b.micro_batch);
    STRATA_CHECK(!b.weighted, where, ": the weight gradients of micro-batch ", b.micro_batch, " were already computed");
    b.weighted = true;
    ++st.weights;
  } else {
    STRATA_CHECK(!b.backwarded, where, ": micro-batch ", b.micro_batch, " was already backwarded");
    if (c.next_local) {
      const BufferState& nb = st.chunks[c.next_chunk].buffers[in.buffer_id];
      STRATA_CHECK(nb.micro_batch == b.micro_batch && nb.backwarded, where, ": chunk ", c.next_chunk,
                   " has not backwarded micro-batch ", b.micro_batch, " in buffer ", in.buffer_id, " yet");
    } else {
      STRATA_CHECK(c.next < 0 || b.grad_received, where, ": the grad of micro-batch ", b.micro_batch,
                   " was not received");
    }
    b.backwarded = true;
    ++st.backwards;
    if (c.prev_local) b.grad_sent = true;  // handed to the chunk before, on this stage
    if (in.kind == Instr::BackwardPass) {
      b.weighted = true;
      ++st.weights;
    }
  }
  if (b.weighted) --st.activations;
  set_live(st, was_live, c, b);
  if (in.kind != Instr::BackwardWeight) st.clock = std::max(st.clock, b.grad_ready);  // received grads arrive
  computed(s, in, b.micro_batch);
}

// A compute instruction takes its cost on the stage's clock.
void Simulator::computed(int s, const Instr& in, int micro_batch) {
  StageState& st = stages_[s];
  const double start = st.clock;
  const double c = cost(s, in);
  st.clock += c;
  st.report.busy += c;
  emit(s, in, micro_batch, start, st.clock);
}

void Simulator::check_end_of_batch(int s, const Instr& in) {
  StageState& st = stages_[s];
  STRATA_CHECK(training_, at(s, in, -1), ": end-of-batch instruction in a schedule that does not train");
  const int expected = micro_batches_ * layout_.chunks;
  STRATA_CHECK(st.backwards == expected, at(s, in, -1), ": comes before every micro-batch is backwarded (",
               st.backwards, " of ", expected, ")");
  STRATA_CHECK(st.weights == expected, at(s, in, -1), ": comes before every weight gradient is computed (", st.weights,
               " of ", expected, ")");
  STRATA_CHECK(!st.optimizer_stepped, at(s, in, -1), ": comes after the optimizer step");
  if (in.kind == Instr::ReduceGrads) st.grads_reduced = true;
  if (in.kind == Instr::OptimizerStep) {
    STRATA_CHECK(st.grads_reduced, at(s, in, -1), ": comes before ReduceGrads");
    st.optimizer_stepped = true;
  }
}

// A stage takes each micro-batch once: the inputs go to the first virtual stage's chunk (when it holds it),
// the labels to the last's, in the buffer the instruction names.
void Simulator::load(int s, const Instr& in) {
  StageState& st = stages_[s];
  ChunkState& c = st.chunks[in.chunk];
  STRATA_CHECK(c.first || c.last, at(s, in, -1),
               layout_.chunks == 1
                   ? ": only the first and the last stage load micro-batches"
                   : ": only the chunks holding the first and the last piece of the model load micro-batches");
  STRATA_CHECK(c.first || !st.chunks[0].first || layout_.chunks == 1, at(s, in, -1),
               ": this stage loads each micro-batch with its first chunk");
  const int m = st.next_load;
  const At where = at(s, in, m);
  STRATA_CHECK(m < micro_batches_, where, ": the batch has only ", micro_batches_, " micro-batches");
  if (c.first) {
    BufferState& b = c.buffers[in.buffer_id];
    const char* needed = why_needed(c, b);
    STRATA_CHECK(!needed, where, ": overwrites micro-batch ", b.micro_batch, ", which is ", needed);
    const bool was_live = is_live(c, b);
    b = BufferState{m, b.labels};
    set_live(st, was_live, c, b);
  }
  if (st.label_chunk >= 0) {
    ChunkState& lc = st.chunks[st.label_chunk];
    BufferState& b = lc.buffers[in.buffer_id];
    STRATA_CHECK(b.labels < 0, where, ": overwrites the labels of micro-batch ", b.labels,
                 ", not yet used by a forward pass");
    const bool was_live = is_live(lc, b);
    b.labels = m;
    set_live(st, was_live, lc, b);
  }
  ++st.next_load;
  emit(s, in, m, st.clock, st.clock);
}

// Why the buffer's micro-batch is still needed, or nullptr when it may be overwritten: a training stage keeps
// it for the backward pass, its weight gradients, and until its grad is sent; an inference stage until its
// output is sent.
const char* Simulator::why_needed(const ChunkState& c, const BufferState& b) const {
  if (b.micro_batch < 0) return nullptr;
  if (training_) {
    if (!b.backwarded) return "not yet backwarded";
    if (!b.weighted) return "backwarded but its weight gradients are not yet computed";
    if (c.prev >= 0 && !b.grad_sent) return "backwarded but its grad is not yet sent";
    return nullptr;
  }
  if (!b.forwarded) return "not yet forwarded";
  if (c.next >= 0 && !b.output_sent) return "forwarded but its output is not yet sent";
  return nullptr;
}

void Simulator::set_live(StageState& st, bool was_live, const ChunkState& c, const BufferState& b) {
  st.live_buffers += static_cast<int>(is_live(c, b)) - static_cast<int>(was_live);
  st.report.peak_live_buffers = std::max(st.report.peak_live_buffers, st.live_buffers);
}

BufferState& Simulator::holding(int s, const Instr& in) {
  BufferState& b = stages_[s].chunks[in.chunk].buffers[in.buffer_id];
  STRATA_CHECK(b.micro_batch >= 0, at(s, in, -1), ": buffer ", in.buffer_id, " holds no micro-batch");
  return b;
}

void Simulator::emit(int s, const Instr& in, int micro_batch, double start, double end) {
  if (options_.on_event) options_.on_event(TraceEvent{s, step_id_, stages_[s].position, in, micro_batch, start, end});
}

}  // namespace

ScheduleReport validate_schedule(const std::function<std::unique_ptr<PipeSchedule>(int stage_id)>& make_stage,
                                 int stages, const ValidateOptions& options) {
  STRATA_CHECK(stages >= 1, "validate_schedule: stages must be at least 1, got ", stages);
  STRATA_CHECK(make_stage, "validate_schedule: no schedule factory given");
  const ScheduleCosts& c = options.costs;
  STRATA_CHECK(c.forward >= 0 && c.backward_input >= 0 && c.backward_weight >= 0 && c.p2p >= 0 && c.p2p_bytes >= 0 &&
                   c.bandwidth >= 0,
               "validate_schedule: costs must be non-negative, got forward ", c.forward, ", backward_input ",
               c.backward_input, ", backward_weight ", c.backward_weight, ", p2p ", c.p2p, ", p2p_bytes ", c.p2p_bytes,
               ", bandwidth ", c.bandwidth);
  return Simulator(make_stage, stages, options).run();
}

ScheduleReport validate_schedule(std::string_view name, int micro_batches, int stages, const ValidateOptions& options) {
  return validate_schedule([&](int s) { return make_schedule(name, micro_batches, stages, s, options.chunks); }, stages,
                           options);
}

double ScheduleReport::peak_activations() const {
  int peak = 0;
  for (const StageReport& s : per_stage) peak = std::max(peak, s.peak_activations);
  return static_cast<double>(peak) / chunks;
}

std::ostream& operator<<(std::ostream& os, const ScheduleReport& report) {
  std::ostringstream line;
  line << std::fixed << std::setprecision(4);
  line << "schedule " << report.schedule << "  stages " << report.stages << "  micro-batches " << report.micro_batches;
  if (report.chunks > 1) line << "  chunks " << report.chunks;
  line << "  steps " << report.steps << "  bubble " << report.bubble_fraction << '\n';
  line << std::defaultfloat << "time " << report.time << " (forward " << report.costs.forward << ", backward input "
       << report.costs.backward_input << ", backward weight " << report.costs.backward_weight << ", p2p "
       << report.costs.p2p;
  if (report.costs.p2p_bytes > 0 || report.costs.bandwidth > 0) {
    line << ", bytes " << report.costs.p2p_bytes << ", bandwidth ";
    if (report.costs.bandwidth > 0)
      line << report.costs.bandwidth;
    else
      line << "unlimited";
  }
  line << ")";
  if (report.lower_bound > 0) line << "  lower bound " << report.lower_bound;
  line << "  idle " << std::fixed << report.idle_fraction << std::defaultfloat << "  peak activations "
       << report.peak_activations() << " stages\n";
  os << line.str();
  for (size_t s = 0; s < report.per_stage.size(); ++s) {
    const StageReport& stage = report.per_stage[s];
    os << "stage " << s << ": compute " << stage.compute_steps << " steps, peak live buffers "
       << stage.peak_live_buffers << " of " << stage.num_pipe_buffers * report.chunks << ", busy " << stage.busy
       << '\n';
  }
  return os;
}

double lower_bound(StageLayout layout, int micro_batches, const ScheduleCosts& costs) {
  const double f = costs.forward / layout.chunks, b = costs.backward_input / layout.chunks;
  const double w = costs.backward_weight / layout.chunks, M = micro_batches;
  const double forward_backward = M * (costs.forward + costs.backward_input);
  const double transfer = costs.transfer_time();  // no less, from when both sides post it to its arrival
  double bound = 0;
  for (int s = 0; s < layout.stages; ++s) {
    const double head = s * (f + transfer);
    bound = std::max(
        {bound, head + forward_backward + M * costs.backward_weight, head + forward_backward + s * (b + transfer) + w});
  }
  return bound;
}

double ScheduleCosts::of(Instr::Kind kind) const {
  switch (kind) {
    case Instr::ForwardPass:
      return forward;
    case Instr::BackwardPass:
      return backward_input + backward_weight;
    case Instr::BackwardInput:
      return backward_input;
    case Instr::BackwardWeight:
      return backward_weight;
    default:
      return 0;
  }
}

double ScheduleCosts::link_time() const { return bandwidth > 0 ? p2p_bytes / bandwidth : 0; }

double ScheduleCosts::transfer_time() const { return link_time() + p2p; }

}  // namespace strata::pipe
