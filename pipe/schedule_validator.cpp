// The schedule validator (a lockstep simulation of every stage), its report and the Chrome trace built on it.

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "strata/pipe/schedule.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

namespace {

bool is_p2p(Instr::Kind kind) {
  return kind == Instr::SendActivation || kind == Instr::RecvActivation || kind == Instr::SendGrad ||
         kind == Instr::RecvGrad;
}
bool is_send(Instr::Kind kind) { return kind == Instr::SendActivation || kind == Instr::SendGrad; }
// SendActivation and RecvGrad talk to the next stage, RecvActivation and SendGrad to the previous one.
int peer_of(int stage, Instr::Kind kind) {
  return kind == Instr::SendActivation || kind == Instr::RecvGrad ? stage + 1 : stage - 1;
}
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

// What one pipe buffer of one stage holds during the simulation.
struct BufferState {
  int micro_batch = -1;  // whose inputs (loaded or received) it holds; -1 before the first
  int labels = -1;       // whose labels wait for the forward pass (label-loading stages); -1 when none
  bool forwarded = false, output_sent = false, grad_received = false, backwarded = false, grad_sent = false;
};

struct StageState {
  std::unique_ptr<PipeSchedule> schedule;
  std::vector<BufferState> buffers;
  bool loads_inputs = false, loads_labels = false, has_prev = false, has_next = false;
  PipeStep step;         // the current step's instructions
  int position = 0;      // the next one to run
  bool waiting = false;  // blocked on the p2p instruction at `position` until the peer reaches its partner
  int next_inputs = 0, next_labels = 0;  // the micro-batch the next LoadMicroBatch takes
  int forwards = 0, backwards = 0, live_buffers = 0;
  bool grads_reduced = false, optimizer_stepped = false;
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
// current step of each stage exists at any time.
class Simulator {
 public:
  Simulator(const std::function<std::unique_ptr<PipeSchedule>(int)>& make_stage, int stages,
            const std::function<void(const TraceEvent&)>& on_event);
  ScheduleReport run();

 private:
  void advance(int s);
  std::string waiting_stages() const;
  void start_p2p(int s, const Instr& in);
  void meet(int sender, int receiver);
  void run_local(int s, const Instr& in);
  void check_end_of_batch(int s, const Instr& in);
  void load(int s, const Instr& in);
  const char* why_needed(const StageState& st, const BufferState& b) const;
  void set_live(StageState& st, bool was_live, const BufferState& b);
  bool is_live(const StageState& st, const BufferState& b) const { return why_needed(st, b) || b.labels >= 0; }
  void emit(int s, const Instr& in, int micro_batch);
  At at(int s, const Instr& in, int micro_batch) const { return {name_, s, step_id_, in, micro_batch}; }
  BufferState& holding(int s, const Instr& in);

  std::vector<StageState> stages_;
  const std::function<void(const TraceEvent&)>& on_event_;
  std::string name_;
  int micro_batches_ = 0, num_steps_ = 0, step_id_ = 0;
  bool training_ = true, pipelined_ = true;
  std::vector<int> ready_;  // stages that can run on
};

Simulator::Simulator(const std::function<std::unique_ptr<PipeSchedule>(int)>& make_stage, int stages,
                     const std::function<void(const TraceEvent&)>& on_event)
    : stages_(stages), on_event_(on_event) {
  for (int s = 0; s < stages; ++s) {
    StageState& st = stages_[s];
    st.schedule = make_stage(s);
    STRATA_CHECK(st.schedule, "validate_schedule: the factory gave no schedule for stage ", s);
    const PipeSchedule& sched = *st.schedule;
    STRATA_CHECK(sched.stage_id() == s && sched.stages() == stages, "validate_schedule: the factory's schedule for ",
                 "stage ", s, " of ", stages, " is for stage ", sched.stage_id(), " of ", sched.stages());
    if (s == 0) {
      name_ = sched.name();
      micro_batches_ = sched.micro_batches();
      num_steps_ = sched.num_steps();
      training_ = sched.is_training();
      pipelined_ = sched.is_pipelined();
    }
    const PipeSchedule& first = *stages_[0].schedule;
    STRATA_CHECK(sched.name() == first.name() && sched.micro_batches() == first.micro_batches() &&
                     sched.num_steps() == first.num_steps() && sched.is_training() == first.is_training() &&
                     sched.is_pipelined() == first.is_pipelined(),
                 "validate_schedule: stage ", s, "'s schedule (", sched.name(), ", ", sched.micro_batches(),
                 " micro-batches, ", sched.num_steps(), " steps) does not match stage 0's (", first.name(), ", ",
                 first.micro_batches(), " micro-batches, ", first.num_steps(), " steps)");
    STRATA_CHECK(sched.num_pipe_buffers() >= 1, "validate_schedule: stage ", s, " declares ", sched.num_pipe_buffers(),
                 " pipe buffers");
    st.buffers.resize(sched.num_pipe_buffers());
    st.report.num_pipe_buffers = sched.num_pipe_buffers();
    // A stage of a data-parallel schedule holds the whole model: it loads its own inputs and labels.
    st.loads_inputs = !pipelined_ || sched.is_first_stage();
    st.loads_labels = !pipelined_ || sched.is_last_stage();
    st.has_prev = pipelined_ && !sched.is_first_stage();
    st.has_next = pipelined_ && !sched.is_last_stage();
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
       << peer_of(s, st.step[st.position].kind);
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
      const bool computes = std::any_of(st.step.begin(), st.step.end(), [](const Instr& in) {
        return in.kind == Instr::ForwardPass || in.kind == Instr::BackwardPass;
      });
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
  ScheduleReport report{name_, micro_batches_, stages, num_steps_, 0, {}};
  for (int s = 0; s < stages; ++s) {
    const StageState& st = stages_[s];
    STRATA_CHECK(st.forwards == micro_batches_, "validate_schedule: ", name_, " schedule, stage ", s, " forwarded ",
                 st.forwards, " of ", micro_batches_, " micro-batches");
    if (training_) {
      STRATA_CHECK(st.backwards == micro_batches_, "validate_schedule: ", name_, " schedule, stage ", s, " backwarded ",
                   st.backwards, " of ", micro_batches_, " micro-batches");
      STRATA_CHECK(st.optimizer_stepped, "validate_schedule: ", name_, " schedule, stage ", s,
                   " never runs OptimizerStep");
    }
    report.per_stage.push_back(st.report);
  }
  report.bubble_fraction = 1 - static_cast<double>(compute) / (static_cast<double>(stages) * num_steps_);
  return report;
}

void Simulator::advance(int s) {
  StageState& st = stages_[s];
  while (st.position < st.step.size()) {
    const Instr& in = st.step[st.position];
    STRATA_CHECK(!in.has_buffer() || (0 <= in.buffer_id && in.buffer_id < st.report.num_pipe_buffers), at(s, in, -1),
                 ": buffer ", in.buffer_id, " is out of range for ", st.report.num_pipe_buffers, " pipe buffers");
    if (!is_p2p(in.kind)) {
      run_local(s, in);
      ++st.position;
      continue;
    }
    start_p2p(s, in);
    StageState& peer = stages_[peer_of(s, in.kind)];
    if (!peer.waiting || peer.step[peer.position].kind != partner_of(in.kind)) {
      st.waiting = true;
      return;
    }
    const int p = peer_of(s, in.kind);
    is_send(in.kind) ? meet(s, p) : meet(p, s);
    peer.waiting = false;
    ++peer.position;
    ++st.position;
    ready_.push_back(p);
  }
}

// Checks what a p2p instruction can check before its peer arrives: that the peer exists and what is sent.
void Simulator::start_p2p(int s, const Instr& in) {
  const StageState& st = stages_[s];
  STRATA_CHECK(pipelined_, at(s, in, -1), ": the stages of a ", name_, " schedule are replicas and exchange nothing");
  const bool to_next = peer_of(s, in.kind) > s;
  STRATA_CHECK(to_next ? st.has_next : st.has_prev, at(s, in, -1), ": stage ", s, " has no ",
               to_next ? "next" : "previous", " stage");
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
  BufferState &out = from.buffers[send.buffer_id], &in = to.buffers[recv.buffer_id];
  const int m = out.micro_batch;
  bool was_live = is_live(from, out);
  (send.kind == Instr::SendActivation ? out.output_sent : out.grad_sent) = true;
  set_live(from, was_live, out);
  emit(sender, send, m);

  was_live = is_live(to, in);
  if (recv.kind == Instr::RecvActivation) {
    const char* needed = why_needed(to, in);
    STRATA_CHECK(!needed, at(receiver, recv, m), ": overwrites micro-batch ", in.micro_batch, ", which is ", needed);
    in = BufferState{m, in.labels};
  } else {
    STRATA_CHECK(in.micro_batch == m, at(receiver, recv, m), ": buffer ", recv.buffer_id, " holds micro-batch ",
                 in.micro_batch);
    in.grad_received = true;
  }
  set_live(to, was_live, in);
  emit(receiver, recv, m);
}

void Simulator::run_local(int s, const Instr& in) {
  StageState& st = stages_[s];
  switch (in.kind) {
    case Instr::LoadMicroBatch:
      load(s, in);
      return;
    case Instr::ForwardPass: {
      BufferState& b = holding(s, in);
      const At where = at(s, in, b.micro_batch);
      STRATA_CHECK(!b.forwarded, where, ": micro-batch ", b.micro_batch, " was already forwarded");
      if (st.loads_labels) {
        STRATA_CHECK(b.labels >= 0, where, ": no labels loaded for the loss");
        STRATA_CHECK(b.labels == b.micro_batch, where, ": the buffer holds the labels of micro-batch ", b.labels);
      }
      const bool was_live = is_live(st, b);
      b.forwarded = true;
      b.labels = -1;
      set_live(st, was_live, b);
      ++st.forwards;
      emit(s, in, b.micro_batch);
      return;
    }
    case Instr::BackwardPass: {
      BufferState& b = holding(s, in);
      const At where = at(s, in, b.micro_batch);
      STRATA_CHECK(training_, where, ": a backward pass in a schedule that does not train");
      STRATA_CHECK(b.forwarded, where, ": micro-batch ", b.micro_batch, " is not forwarded yet");
      STRATA_CHECK(!b.backwarded, where, ": micro-batch ", b.micro_batch, " was already backwarded");
      STRATA_CHECK(!st.has_next || b.grad_received, where, ": the grad of micro-batch ", b.micro_batch,
                   " was not received");
      const bool was_live = is_live(st, b);
      b.backwarded = true;
      set_live(st, was_live, b);
      ++st.backwards;
      emit(s, in, b.micro_batch);
      return;
    }
    default:
      check_end_of_batch(s, in);
      emit(s, in, -1);
  }
}

void Simulator::check_end_of_batch(int s, const Instr& in) {
  StageState& st = stages_[s];
  STRATA_CHECK(training_, at(s, in, -1), ": end-of-batch instruction in a schedule that does not train");
  STRATA_CHECK(st.backwards == micro_batches_, at(s, in, -1), ": comes before every micro-batch is backwarded (",
               st.backwards, " of ", micro_batches_, ")");
  STRATA_CHECK(!st.optimizer_stepped, at(s, in, -1), ": comes after the optimizer step");
  if (in.kind == Instr::ReduceGrads) st.grads_reduced = true;
  if (in.kind == Instr::OptimizerStep) {
    STRATA_CHECK(st.grads_reduced, at(s, in, -1), ": comes before ReduceGrads");
    st.optimizer_stepped = true;
  }
}

// The first stage (and a replica) loads the next micro-batch's inputs, the last stage its labels.
void Simulator::load(int s, const Instr& in) {
  StageState& st = stages_[s];
  BufferState& b = st.buffers[in.buffer_id];
  STRATA_CHECK(st.loads_inputs || st.loads_labels, at(s, in, -1),
               ": only the first and the last stage load micro-batches");
  const int m = st.loads_inputs ? st.next_inputs : st.next_labels;
  const At where = at(s, in, m);
  STRATA_CHECK(m < micro_batches_, where, ": the batch has only ", micro_batches_, " micro-batches");
  const bool was_live = is_live(st, b);
  if (st.loads_inputs) {
    const char* needed = why_needed(st, b);
    STRATA_CHECK(!needed, where, ": overwrites micro-batch ", b.micro_batch, ", which is ", needed);
    b = BufferState{st.next_inputs++, b.labels};
  }
  if (st.loads_labels) {
    STRATA_CHECK(b.labels < 0, where, ": overwrites the labels of micro-batch ", b.labels,
                 ", not yet used by a forward pass");
    b.labels = st.next_labels++;
  }
  set_live(st, was_live, b);
  emit(s, in, m);
}

// Why the buffer's micro-batch is still needed, or nullptr when it may be overwritten: a training stage keeps
// it for the backward pass and then until its grad is sent; an inference stage until its output is sent.
const char* Simulator::why_needed(const StageState& st, const BufferState& b) const {
  if (b.micro_batch < 0) return nullptr;
  if (training_) {
    if (!b.backwarded) return "not yet backwarded";
    if (st.has_prev && !b.grad_sent) return "backwarded but its grad is not yet sent";
    return nullptr;
  }
  if (!b.forwarded) return "not yet forwarded";
  if (st.has_next && !b.output_sent) return "forwarded but its output is not yet sent";
  return nullptr;
}

void Simulator::set_live(StageState& st, bool was_live, const BufferState& b) {
  st.live_buffers += static_cast<int>(is_live(st, b)) - static_cast<int>(was_live);
  st.report.peak_live_buffers = std::max(st.report.peak_live_buffers, st.live_buffers);
}

BufferState& Simulator::holding(int s, const Instr& in) {
  BufferState& b = stages_[s].buffers[in.buffer_id];
  STRATA_CHECK(b.micro_batch >= 0, at(s, in, -1), ": buffer ", in.buffer_id, " holds no micro-batch");
  return b;
}

void Simulator::emit(int s, const Instr& in, int micro_batch) {
  if (on_event_) on_event_(TraceEvent{s, step_id_, stages_[s].position, in, micro_batch});
}

}  // namespace

ScheduleReport validate_schedule(const std::function<std::unique_ptr<PipeSchedule>(int stage_id)>& make_stage,
                                 int stages, const std::function<void(const TraceEvent&)>& on_event) {
  STRATA_CHECK(stages >= 1, "validate_schedule: stages must be at least 1, got ", stages);
  STRATA_CHECK(make_stage, "validate_schedule: no schedule factory given");
  return Simulator(make_stage, stages, on_event).run();
}

ScheduleReport validate_schedule(std::string_view name, int micro_batches, int stages,
                                 const std::function<void(const TraceEvent&)>& on_event) {
  return validate_schedule([&](int s) { return make_schedule(name, micro_batches, stages, s); }, stages, on_event);
}

std::ostream& operator<<(std::ostream& os, const ScheduleReport& report) {
  std::ostringstream bubble;
  bubble << std::fixed << std::setprecision(4) << report.bubble_fraction;
  os << "schedule " << report.schedule << "  stages " << report.stages << "  micro-batches " << report.micro_batches
     << "  steps " << report.steps << "  bubble " << bubble.str() << '\n';
  for (size_t s = 0; s < report.per_stage.size(); ++s) {
    const StageReport& stage = report.per_stage[s];
    os << "stage " << s << ": compute " << stage.compute_steps << " steps, peak live buffers "
       << stage.peak_live_buffers << " of " << stage.num_pipe_buffers << '\n';
  }
  return os;
}

void write_chrome_trace(std::ostream& os, std::string_view name, int micro_batches, int stages) {
  // The events go to a buffer first, so a schedule that fails validation throws before anything is written.
  constexpr int kStepMicros = 1000;
  std::ostringstream body;
  for (int s = 0; s < stages; ++s)
    body << (s ? "," : "") << "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" << s
         << ",\"args\":{\"name\":\"stage " << s << "\"}}";
  // The events of one step arrive together (all stages finish step t before step t + 1 starts); they are
  // held until the step ends, when each stage's count of instructions is known.
  std::vector<TraceEvent> pending;
  std::vector<int> count(stages);
  auto flush = [&] {
    std::fill(count.begin(), count.end(), 0);
    for (const TraceEvent& e : pending) ++count[e.stage];
    for (const TraceEvent& e : pending) {
      const int dur = kStepMicros / count[e.stage];
      body << ",\n{\"name\":\"";
      if (e.instruction.kind == Instr::ForwardPass || e.instruction.kind == Instr::BackwardPass)
        body << (e.instruction.kind == Instr::ForwardPass ? 'F' : 'B') << e.micro_batch;
      else
        body << e.instruction;
      body << "\",\"ph\":\"X\",\"pid\":0,\"tid\":" << e.stage
           << ",\"ts\":" << static_cast<int64_t>(e.step) * kStepMicros + e.position * dur << ",\"dur\":" << dur
           << ",\"args\":{";
      if (e.instruction.has_buffer())
        body << "\"micro_batch\":" << e.micro_batch << ",\"buffer\":" << e.instruction.buffer_id << ",";
      body << "\"step\":" << e.step << "}}";
    }
    pending.clear();
  };
  validate_schedule(name, micro_batches, stages, [&](const TraceEvent& e) {
    if (!pending.empty() && e.step != pending.front().step) flush();
    pending.push_back(e);
  });
  flush();
  os << "{\"traceEvents\":[" << body.str() << "\n]}\n";
}

}  // namespace strata::pipe
