// The schedules planned for all stages at once: Megatron's interleaved 1F1B, the zero-bubble ZB-H1, looped ZB and
// ZB-V, DualPipeV, and compute orders given per stage (plan_compute_orders, which schedule files run).
//
// Note [planned schedules]: planning has two parts. First, time: in each step every stage runs the next group of
// compute instructions it picks among those whose inputs were computed in an earlier step. How it picks (Pick):
// - an order, followed as it is: a given one, DualPipeV's, or Megatron's interleaved order, with a forward and a
//   backward pass together in each steady-state step as Megatron runs them between two exchanges;
// - an order of F and B (ZB-H1's is 1F1B's), with the oldest W whenever the next of them waits or a forward would
//   pass the cap of micro-batches between F and W;
// - greedily: B, else F under the cap, else the oldest W.
// The zero-bubble schedules run one instruction per step. The looped and V ones plan greedily, with the ZB paper's
// fixed order, and with that order's F and B filled with W, and keep the plan of fewest steps: each wins at some
// shapes, and all keep within the cap (1F1B's peak). Then transport: a result needed on another stage goes out in
// the next step, where the receiver takes it, before either computes. The validator checks the outcome like any
// other schedule.

#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <limits>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "strata/pipe/planned_schedule.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

namespace {

using Algorithm = PlanAlgorithm;

struct Compute {
  Instr::Kind kind;  // ForwardPass, BackwardPass, BackwardInput or BackwardWeight
  int chunk, micro_batch;
};

using Group = std::vector<Compute>;  // what a stage computes in one step
using Order = std::vector<Group>;    // a stage's compute in the order it runs, a group per step

// How a stage picks its next compute (Note [planned schedules]).
enum class Pick {
  kOrder,        // the next group of its order, once every compute in it is ready
  kFillWeights,  // the next of its order of F and B, else the oldest W (also before a forward past the cap)
  kGreedy,       // the earliest ready B, else an F under the cap, else the oldest W
  kForward,      // forwards only, the earliest micro-batch ready
};

// One compute per group, in the order given.
Order singles(const std::vector<Instr>& computes) {
  Order order;
  for (const Instr& c : computes) order.push_back({{c.kind, c.chunk, c.buffer_id}});
  return order;
}

// Megatron's interleaved order for one stage: forward k works on chunk (k / S) % v of micro-batch
// (k / Sv) S + k % S, backward k on chunk v - 1 - (k / S) % v of the same; warm-up forwards first, then a
// forward and a backward together, then the remaining backwards.
Order interleaved_order(int M, int S, int v, int s) {
  const int total = M * v;
  const int warmup = M == S ? total : std::min(2 * (S - s - 1) + (v - 1) * S, total);
  auto micro_batch = [&](int k) { return k / (S * v) * S + k % S; };
  auto forward = [&](int k) { return Compute{Instr::ForwardPass, k / S % v, micro_batch(k)}; };
  auto backward = [&](int k) { return Compute{Instr::BackwardPass, v - 1 - k / S % v, micro_batch(k)}; };
  Order order;
  for (int k = 0; k < warmup; ++k) order.push_back({forward(k)});
  for (int k = 0; k < total - warmup; ++k) order.push_back({forward(warmup + k), backward(k)});
  for (int k = total - warmup; k < total; ++k) order.push_back({backward(k)});
  return order;
}

// The ZB paper's order on the loop layout for stage s over v chunks (ZB-1P; with v = 1, ZB-H1's 1F1B order):
// Megatron's interleaving with B as BackwardInput. The micro-batches go through the chunks in rounds of S (the last
// one shorter), forwards down the chunks and backwards up. A warm-up of (v - 1) S + S - 1 - s forwards, then a
// forward and a B in turn, each pair after the first s followed by the oldest W due, then the remaining B, each
// followed by a W, then the remaining W. A stage holds at most vS chunks' activations, 1F1B's peak.
std::vector<Instr> loop_pattern_order(int M, int S, int v, int s) {
  const int total = M * v, round = std::min(S, M);
  std::vector<Instr> forwards, backwards;
  for (int first = 0; first < M; first += round)
    for (int c = 0; c < v; ++c)
      for (int m = first; m < std::min(first + round, M); ++m) {
        forwards.push_back({Instr::ForwardPass, m, static_cast<int16_t>(c)});
        backwards.push_back({Instr::BackwardInput, m, static_cast<int16_t>(v - 1 - c)});
      }
  const int warmup = std::min((v - 1) * round + S - 1 - s, total);
  std::deque<Instr> due;  // the W of each B run, oldest first
  std::vector<Instr> order;
  auto weight = [&] {
    order.push_back(due.front());
    due.pop_front();
  };
  for (int k = 0; k < total + warmup; ++k) {
    if (k < total) order.push_back(forwards[k]);
    const int b = k - warmup;  // the B paired with forward k
    if (b < 0) continue;
    order.push_back(backwards[b]);
    due.push_back({Instr::BackwardWeight, backwards[b].buffer_id, backwards[b].chunk});
    if (b >= s) weight();
  }
  while (!due.empty()) weight();
  return order;
}

// The ZB-V paper's hand-made order for stage s (Qi et al., 2024), chunk 0 being virtual stage s and chunk 1
// virtual stage 2S - 1 - s, over n = max(M, 2S - 1) micro-batches of which those past M are left out: 2(S - s) - 1
// forwards of chunk 0; s pairs (F1, F0); S - s triples (F1, B1, W1); then (F0 while any remain, B0, W0, F1, B1,
// W1) until chunk 1 has caught up; then s pairs (B0, B1), S - s pairs (B0, W0), and the W still due, chunk 1's
// first. B here is BackwardInput.
std::vector<Instr> v_pattern_order(int M, int S, int s) {
  const int n = std::max(M, 2 * S - 1);
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<Instr> order;
  auto add = [&](Instr::Kind kind, int chunk, int m) {
    if (m < M) order.push_back({kind, m, static_cast<int16_t>(chunk)});
  };
  auto backward = [&](int chunk, int& b) {
    add(Instr::BackwardInput, chunk, b);
    add(Instr::BackwardWeight, chunk, b++);
  };
  for (int i = 0; i < 2 * (S - s) - 1; ++i) add(Instr::ForwardPass, 0, f0++);
  for (int i = 0; i < s; ++i) {
    add(Instr::ForwardPass, 1, f1++);
    add(Instr::ForwardPass, 0, f0++);
  }
  for (int i = 0; i < S - s; ++i) {
    add(Instr::ForwardPass, 1, f1++);
    backward(1, b1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(Instr::ForwardPass, 0, f0++);
    backward(0, b0);
    add(Instr::ForwardPass, 1, f1++);
    backward(1, b1);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < s; ++i) {
    add(Instr::BackwardInput, 0, b0++);
    add(Instr::BackwardInput, 1, b1++);
  }
  for (int i = 0; i < S - s; ++i) {
    add(Instr::BackwardInput, 0, b0++);
    add(Instr::BackwardWeight, 0, w0++);
  }
  while (w1 < b1) add(Instr::BackwardWeight, 1, w1++);
  while (w0 < b0) add(Instr::BackwardWeight, 0, w0++);
  return order;
}

// DeepSeek's DualPipe folded into the V (DualPipeV) for stage s, chunk 0 being virtual stage s and chunk 1 virtual
// stage 2S - 1 - s, for M >= 2S micro-batches. Its steady state pairs one chunk's forward with the other chunk's
// whole backward. In turn: 2(S - s - 1) forwards of chunk 0; s + 1 of each chunk; S - s - 1 of (B, W, F) on chunk
// 1; M - 2S + s + 1 of the pairs (F0 with chunk 1's backward, F1 with chunk 0's); S - s - 1 of (chunk 1's
// backward, F1 paired with chunk 0's); s + 1 backwards of each chunk, split into B and W from the middle (chunk 0
// first on odd stages); S - s - 1 of (a W due, chunk 0's B); the W still due.
Order dualpipe_v_order(int M, int S, int s) {
  std::array<int, 2> forwards{}, backwards{};
  std::deque<Compute> due;  // the W of each B, oldest first
  bool split = false;       // whether backwards are split into B and W yet
  Order order;
  auto forward = [&](int c) { return Compute{Instr::ForwardPass, c, forwards[c]++}; };
  auto backward = [&](int c) {
    const int m = backwards[c]++;
    if (split) due.push_back({Instr::BackwardWeight, c, m});
    return Compute{split ? Instr::BackwardInput : Instr::BackwardPass, c, m};
  };
  // DualPipe overlaps a pair on two streams; here it runs in turn, the forward first, as PyTorch runs it.
  auto pair = [&](Compute f, Compute b) {
    order.push_back({f});
    order.push_back({b});
  };
  auto weight = [&] {
    if (due.empty()) return;
    order.push_back({due.front()});
    due.pop_front();
  };
  for (int i = 0; i < 2 * (S - s - 1); ++i) order.push_back({forward(0)});
  for (int i = 0; i < s + 1; ++i) {
    order.push_back({forward(0)});
    order.push_back({forward(1)});
  }
  for (int i = 0; i < S - s - 1; ++i) {
    split = true;
    order.push_back({backward(1)});
    split = false;
    weight();
    order.push_back({forward(1)});
  }
  for (int i = 0; i < M - 2 * S + s + 1; ++i) {
    pair(forward(0), backward(1));
    pair(forward(1), backward(0));
  }
  for (int i = 0; i < S - s - 1; ++i) {
    order.push_back({backward(1)});
    pair(forward(1), backward(0));
  }
  for (int i = 0; i < s + 1; ++i) {
    if (i == (s + 1) / 2 && s % 2 == 1) split = true;
    order.push_back({backward(1)});
    if (i == (s + 1) / 2) split = true;
    order.push_back({backward(0)});
  }
  for (int i = 0; i < S - s - 1; ++i) {
    weight();
    order.push_back({backward(0)});
  }
  while (!due.empty()) weight();
  return order;
}

// The order without its W, for Pick::kFillWeights.
Order without_weights(const std::vector<Instr>& computes) {
  std::vector<Instr> kept;
  std::copy_if(computes.begin(), computes.end(), std::back_inserter(kept),
               [](const Instr& c) { return c.kind != Instr::BackwardWeight; });
  return singles(kept);
}

class Planner {
 public:
  /// orders: each stage's, for Pick::kOrder and kFillWeights.
  Planner(Pick pick, int micro_batches, StageLayout layout, std::vector<Order> orders = {})
      : pick_(pick),
        M_(micro_batches),
        S_(layout.stages),
        V_(layout.num_virtual_stages()),
        layout_(layout),
        forward_at_(static_cast<size_t>(V_) * M_, INT_MAX),
        backward_at_(static_cast<size_t>(V_) * M_, INT_MAX),
        stages_(S_) {
    STRATA_INTERNAL_ASSERT(orders.empty() == (pick == Pick::kGreedy || pick == Pick::kForward));
    for (int s = 0; s < S_; ++s) {
      StageState& st = stages_[s];
      st.next_forward.assign(layout.chunks, 0);
      st.next_backward.assign(layout.chunks, 0);
      if (!orders.empty()) st.order = std::move(orders[s]);
      // 1F1B's peak activation memory is stage 0's S micro-batches (or all M): every stage may hold as much,
      // which lets the later stages leave W for the tail. A chunk holds 1/chunks of a stage's activations.
      st.cap = std::min(S_, M_) * layout.chunks;
    }
  }

  /// Every stage's steps. Where every stage waits, throws naming each stage's waiting compute through
  /// position(stage, index in its order) when given (an order from a user), and as a planner bug otherwise.
  SchedulePlan plan(const std::function<std::string(int, size_t)>& position = {});

 private:
  struct StageState {
    Order order;                                   // kOrder and kFillWeights: what it follows
    size_t next = 0;                               // the next of `order`
    std::vector<int> next_forward, next_backward;  // kGreedy and kForward: per chunk, the next micro-batch
    std::deque<Compute> weights;                   // W waiting, oldest first
    int live = 0, cap = 0;                         // micro-batches between F and W, and the limit
    std::vector<Group> timeline;                   // per step
  };

  int& forward_at(int vs, int m) { return forward_at_[static_cast<size_t>(vs) * M_ + m]; }
  int& backward_at(int vs, int m) { return backward_at_[static_cast<size_t>(vs) * M_ + m]; }
  bool can_forward(int vs, int m, int t) { return vs == 0 || forward_at(vs - 1, m) < t; }
  bool can_backward(int vs, int m, int t) {
    // Its own forward is on this stage, earlier in the same step at the latest.
    return forward_at(vs, m) <= t && (vs == V_ - 1 || backward_at(vs + 1, m) < t);
  }
  bool ready(int s, const Compute& c, int t);
  Group next_of_order(int s, int t);
  Group choose(int s, int t);
  void run(int s, const Compute& c, int t);
  SchedulePlan transport(int compute_steps) const;

  Pick pick_;
  int M_, S_, V_;
  StageLayout layout_;
  std::vector<int> forward_at_, backward_at_;  // the step of F and B per (virtual stage, micro-batch)
  std::vector<StageState> stages_;
};

bool Planner::ready(int s, const Compute& c, int t) {
  const int vs = layout_.virtual_stage(s, c.chunk);
  if (c.kind == Instr::ForwardPass) return can_forward(vs, c.micro_batch, t);
  if (c.kind == Instr::BackwardWeight) return backward_at(vs, c.micro_batch) < t;  // after its own B
  return can_backward(vs, c.micro_batch, t);
}

Group Planner::next_of_order(int s, int t) {
  StageState& st = stages_[s];
  if (st.next == st.order.size()) return {};
  // A group's backward may need the group's own forward (the last virtual stage's loss): the forward is marked
  // done for the check and unmarked when the group has to wait.
  const Group& next = st.order[st.next];
  for (size_t i = 0; i < next.size(); ++i) {
    if (ready(s, next[i], t)) {
      if (next[i].kind == Instr::ForwardPass)
        forward_at(layout_.virtual_stage(s, next[i].chunk), next[i].micro_batch) = t;
      continue;
    }
    for (size_t j = 0; j < i; ++j)
      if (next[j].kind == Instr::ForwardPass)
        forward_at(layout_.virtual_stage(s, next[j].chunk), next[j].micro_batch) = INT_MAX;
    return {};
  }
  return st.order[st.next++];
}

Group Planner::choose(int s, int t) {
  StageState& st = stages_[s];
  switch (pick_) {
    case Pick::kOrder:
      return next_of_order(s, t);
    case Pick::kFillWeights:
      if (st.next < st.order.size() && (st.order[st.next].front().kind != Instr::ForwardPass || st.live < st.cap))
        if (Group group = next_of_order(s, t); !group.empty()) return group;
      if (!st.weights.empty()) return {st.weights.front()};
      return {};
    case Pick::kForward:
      // The earliest micro-batch, then the later virtual stage, so outputs leave soonest.
      for (int m = 0; m < M_; ++m)
        for (int c = layout_.chunks - 1; c >= 0; --c)
          if (st.next_forward[c] == m && ready(s, {Instr::ForwardPass, c, m}, t)) return {{Instr::ForwardPass, c, m}};
      return {};
    case Pick::kGreedy:
      break;
  }
  // B first: the earliest micro-batch, then the later virtual stage, since it unblocks the stage before.
  std::optional<Compute> best;
  std::pair<int, int> best_key;
  for (int c = 0; c < layout_.chunks; ++c) {
    const Compute b{Instr::BackwardInput, c, st.next_backward[c]};
    if (b.micro_batch == M_ || !ready(s, b, t)) continue;
    const std::pair<int, int> key{b.micro_batch, -layout_.virtual_stage(s, c)};
    if (!best || key < best_key) std::tie(best, best_key) = std::make_pair(b, key);
  }
  if (best) return {*best};
  // Then F while under the cap, the later virtual stage first: its backward can start soonest.
  if (st.live < st.cap)
    for (int c = layout_.chunks - 1; c >= 0; --c) {
      const Compute f{Instr::ForwardPass, c, st.next_forward[c]};
      if (f.micro_batch < M_ && ready(s, f, t)) return {f};
    }
  // W fills what would be idle time.
  if (!st.weights.empty()) return {st.weights.front()};
  return {};
}

void Planner::run(int s, const Compute& c, int t) {
  StageState& st = stages_[s];
  const int vs = layout_.virtual_stage(s, c.chunk);
  switch (c.kind) {
    case Instr::ForwardPass:
      forward_at(vs, c.micro_batch) = t;
      ++st.next_forward[c.chunk];
      ++st.live;
      break;
    case Instr::BackwardPass:
      backward_at(vs, c.micro_batch) = t;
      --st.live;
      break;
    case Instr::BackwardInput:
      backward_at(vs, c.micro_batch) = t;
      ++st.next_backward[c.chunk];
      st.weights.push_back({Instr::BackwardWeight, c.chunk, c.micro_batch});
      break;
    default:  // BackwardWeight: picked as the oldest, or in a given order any
      st.weights.erase(std::find_if(st.weights.begin(), st.weights.end(), [&](const Compute& w) {
        return w.chunk == c.chunk && w.micro_batch == c.micro_batch;
      }));
      --st.live;
  }
}

SchedulePlan Planner::plan(const std::function<std::string(int, size_t)>& position) {
  // Each micro-batch is forwarded, and unless forward-only, backwarded once per chunk: F, B and W, or F and a whole
  // backward (interleaved).
  int64_t remaining = 0;
  for (const StageState& st : stages_)
    for (const Group& group : st.order) remaining += static_cast<int64_t>(group.size());
  if (pick_ != Pick::kOrder)
    remaining = static_cast<int64_t>(pick_ == Pick::kForward ? 1 : 3) * M_ * layout_.chunks * S_;
  int t = 0;
  for (; remaining > 0; ++t) {
    bool progress = false;
    for (int s = 0; s < S_; ++s) {
      const Group group = choose(s, t);
      for (const Compute& c : group) run(s, c, t);
      progress |= !group.empty();
      remaining -= static_cast<int64_t>(group.size());
      stages_[s].timeline.push_back(group);
    }
    if (!progress && position) {
      std::string waiting;
      for (int s = 0; s < S_; ++s)
        if (stages_[s].next < stages_[s].order.size())
          waiting += (waiting.empty() ? "" : ", ") + position(s, stages_[s].next);
      STRATA_CHECK(false, "deadlock: every stage waits for another: ", waiting);
    }
    // The orders strata makes never deadlock; an idle step everywhere is a planner bug.
    STRATA_INTERNAL_ASSERT(progress);
  }
  return transport(t);
}

SchedulePlan Planner::transport(int compute_steps) const {
  // Messages per step: (lower stage, higher stage, direction, kind) orders them the same way on both sides.
  struct Message {
    int from, to;
    Instr send, recv;
    std::tuple<int, int, bool, bool> key() const {
      return {std::min(from, to), std::max(from, to), from > to, send.kind == Instr::SendGrad};
    }
  };
  std::vector<std::vector<Message>> messages(compute_steps + 1);
  int num_steps = compute_steps;
  for (int s = 0; s < S_; ++s)
    for (int t = 0; t < compute_steps; ++t)
      for (const Compute& computed : stages_[s].timeline[t]) {
        const Compute* c = &computed;
        if (c->kind == Instr::BackwardWeight) continue;
        const int vs = layout_.virtual_stage(s, c->chunk);
        const bool forward = c->kind == Instr::ForwardPass;
        const int to_vs = forward ? vs + 1 : vs - 1;
        if (to_vs < 0 || to_vs == V_ || layout_.stage_of(to_vs) == s) continue;
        const int m = c->micro_batch;
        const auto to_chunk = static_cast<int16_t>(layout_.chunk_of(to_vs));
        const auto chunk = static_cast<int16_t>(c->chunk);
        messages[t + 1].push_back({s,
                                   layout_.stage_of(to_vs),
                                   {forward ? Instr::SendActivation : Instr::SendGrad, m, chunk},
                                   {forward ? Instr::RecvActivation : Instr::RecvGrad, m, to_chunk}});
        num_steps = std::max(num_steps, t + 2);
      }
  const int first_stage = layout_.stage_of(0);
  SchedulePlan plan;
  plan.steps.assign(S_, std::vector<PipeStep>(num_steps));
  for (int t = 0; t < num_steps; ++t) {
    if (t < static_cast<int>(messages.size())) {
      std::vector<Message>& step = messages[t];
      std::sort(step.begin(), step.end(), [](const Message& a, const Message& b) { return a.key() < b.key(); });
      for (const Message& msg : step) {
        plan.steps[msg.from][t].push_back(msg.send);
        plan.steps[msg.to][t].push_back(msg.recv);
      }
    }
    for (int s = 0; s < S_; ++s) {
      PipeStep& out = plan.steps[s][t];
      if (t < compute_steps)
        for (const Compute& computed : stages_[s].timeline[t]) {
          const Compute* c = &computed;
          const Instr in{c->kind, c->micro_batch, static_cast<int16_t>(c->chunk)};
          const int vs = layout_.virtual_stage(s, c->chunk);
          // A stage loads each micro-batch once, at the first forward that needs it: the first virtual stage's
          // inputs, and the labels of the last (kept until its forward when the same stage holds both).
          if (c->kind == Instr::ForwardPass && (vs == 0 || (vs == V_ - 1 && first_stage != s)))
            out.push_back({Instr::LoadMicroBatch, c->micro_batch, in.chunk});
          out.push_back(in);
        }
      if (t == num_steps - 1 && (pick_ != Pick::kForward)) {
        out.push_back({Instr::ReduceTiedGrads});
        out.push_back({Instr::ReduceGrads});
        out.push_back({Instr::OptimizerStep});
      }
    }
  }
  return plan;
}

// Each stage's order, from order(s).
template <typename F>
std::vector<Order> orders_of(int stages, F order) {
  std::vector<Order> orders;
  for (int s = 0; s < stages; ++s) orders.push_back(order(s));
  return orders;
}

SchedulePlan make_plan(Algorithm algorithm, int M, StageLayout layout) {
  const int S = layout.stages, v = layout.chunks;
  switch (algorithm) {
    case Algorithm::kInterleaved:
      return Planner(Pick::kOrder, M, layout, orders_of(S, [&](int s) { return interleaved_order(M, S, v, s); }))
          .plan();
    case Algorithm::kZeroBubbleH1:
      return Planner(Pick::kFillWeights, M, layout,
                     orders_of(S, [&](int s) { return without_weights(loop_pattern_order(M, S, 1, s)); }))
          .plan();
    case Algorithm::kDualPipeV:
      return Planner(Pick::kOrder, M, layout, orders_of(S, [&](int s) { return dualpipe_v_order(M, S, s); })).plan();
    case Algorithm::kForward:
      return Planner(Pick::kForward, M, layout).plan();
    case Algorithm::kZeroBubble:
      break;
  }
  // The greedy plan wins while micro-batches are few (M = S in the V: 1.5(S - 1) units fewer at S = 16), the
  // paper's order mostly once they outnumber the stages by half, and its F and B filled with W where M is not a
  // multiple of S on the loop. Keep the fewest steps, the first on a tie.
  std::vector<std::vector<Instr>> patterns;
  for (int s = 0; s < S; ++s)
    patterns.push_back(layout.v_shape ? v_pattern_order(M, S, s) : loop_pattern_order(M, S, v, s));
  SchedulePlan best = Planner(Pick::kGreedy, M, layout).plan();
  auto keep_shorter = [&](SchedulePlan other) {
    if (other.steps[0].size() < best.steps[0].size()) best = std::move(other);
  };
  keep_shorter(Planner(Pick::kOrder, M, layout, orders_of(S, [&](int s) { return singles(patterns[s]); })).plan());
  keep_shorter(
      Planner(Pick::kFillWeights, M, layout, orders_of(S, [&](int s) { return without_weights(patterns[s]); })).plan());
  return best;
}

std::shared_ptr<const SchedulePlan> plan_for(Algorithm algorithm, int micro_batches, StageLayout layout) {
  // The stages of one run (and the validator, which makes every stage's schedule) share the plans of the
  // last few shapes: an engine alternating training and evaluation keeps both.
  constexpr size_t kCached = 4;
  using Key = std::tuple<Algorithm, int, StageLayout>;
  static std::mutex mutex;
  static std::vector<std::pair<Key, std::shared_ptr<const SchedulePlan>>> cache;  // most recent last
  Key key{algorithm, micro_batches, layout};
  {
    std::lock_guard lock(mutex);
    for (size_t i = 0; i < cache.size(); ++i)
      if (cache[i].first == key) {
        std::rotate(cache.begin() + static_cast<std::ptrdiff_t>(i), cache.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                    cache.end());
        return cache.back().second;
      }
  }
  auto plan = std::make_shared<const SchedulePlan>(make_plan(algorithm, micro_batches, layout));
  std::lock_guard lock(mutex);
  if (cache.size() == kCached) cache.erase(cache.begin());
  cache.emplace_back(std::move(key), plan);
  return plan;
}

}  // namespace

SchedulePlan plan_compute_orders(const std::vector<std::vector<PipeInstruction>>& orders, int micro_batches,
                                 StageLayout layout, const std::function<std::string(int, size_t)>& position) {
  STRATA_CHECK(static_cast<int>(orders.size()) == layout.stages, "plan_compute_orders: got orders for ", orders.size(),
               " stages, the layout has ", layout.stages);
  for (const auto& order : orders)
    for (const Instr& c : order)
      STRATA_CHECK(is_compute(c.kind) && 0 <= c.buffer_id && c.buffer_id < micro_batches && 0 <= c.chunk &&
                       c.chunk < layout.chunks,
                   "plan_compute_orders: ", c, " is not a compute instruction of a micro-batch below ", micro_batches,
                   " and a chunk below ", layout.chunks);
  std::vector<Order> given;
  for (const auto& order : orders) given.push_back(singles(order));
  return Planner(Pick::kOrder, micro_batches, layout, std::move(given)).plan(position);
}

PlannedSchedule::PlannedSchedule(int micro_batches, int stage_id, StageLayout layout,
                                 std::shared_ptr<const SchedulePlan> plan)
    : PipeSchedule(micro_batches, layout.stages, stage_id), layout_(layout), plan_(std::move(plan)) {
  STRATA_CHECK(plan_ && static_cast<int>(plan_->steps.size()) == layout.stages, "PlannedSchedule: a plan for ",
               plan_ ? plan_->steps.size() : 0, " stages does not fit a layout of ", layout.stages);
}

PlannedSchedule::PlannedSchedule(int micro_batches, int stages, int stage_id, StageLayout layout,
                                 PlanAlgorithm algorithm, std::string_view name)
    : PipeSchedule(micro_batches, stages, stage_id), layout_(layout) {
  STRATA_CHECK(layout.stages == stages && layout.chunks >= 1 && (!layout.v_shape || layout.chunks == 2), name,
               " schedule: a layout of ", layout.stages, " stages x ", layout.chunks, " chunks",
               layout.v_shape ? " in a V" : "", " does not fit ", stages, " stages");
  // Steps grow as (3 M chunks + 2 S chunks) per stage, kept for every stage while planning; each factor is
  // bounded first, so the product cannot wrap.
  constexpr int64_t kMaxStageSteps = int64_t{1} << 22;
  const int64_t S = stages, M = micro_batches, v = layout.chunks;
  const bool fits =
      S <= kMaxStageSteps && M <= kMaxStageSteps && v <= kMaxStageSteps && S * (3 * M + 2 * S) * v <= kMaxStageSteps;
  STRATA_CHECK(fits, name, " schedule: planning ", stages, " stages x ", micro_batches, " micro-batches x ",
               layout.chunks, " chunks needs more than the ", kMaxStageSteps, " stage-steps it plans");
  plan_ = plan_for(algorithm, micro_batches, layout);
}

int PlannedSchedule::num_steps() const { return static_cast<int>(plan_->steps[stage_id()].size()); }

PipeStep PlannedSchedule::step(int step_id) const {
  STRATA_CHECK(0 <= step_id && step_id < num_steps(), name(), " schedule: step ", step_id, " is out of range [0, ",
               num_steps(), ")");
  return plan_->steps[stage_id()][step_id];
}

namespace {
StageLayout interleaved_layout(int micro_batches, int stages, int chunks) {
  STRATA_CHECK(chunks >= 2 && chunks <= std::numeric_limits<int16_t>::max(),
               "Interleaved1F1BSchedule: chunks must be at least 2 (one chunk per stage is TrainSchedule, \"train\") "
               "and at most 32767, got ",
               chunks);
  // Bad counts are left to PipeSchedule's checks.
  STRATA_CHECK(stages < 1 || micro_batches < 1 || Interleaved1F1BSchedule::defined_for(micro_batches, stages),
               "Interleaved1F1BSchedule: micro_batches (", micro_batches, ") must be a multiple of stages (", stages,
               "): Megatron's interleaving takes micro-batches through the chunks in groups of one per stage");
  return {stages, chunks, false};
}

StageLayout dualpipe_v_layout(int micro_batches, int stages) {
  // Bad counts are left to PipeSchedule's checks.
  STRATA_CHECK(stages < 1 || micro_batches < 1 || DualPipeVSchedule::defined_for(micro_batches, stages),
               "DualPipeVSchedule: micro_batches (", micro_batches, ") must be at least twice the stages (", stages,
               "): DualPipe's steady state pairs a forward of each chunk with a backward of the other");
  return {stages, 2, true};
}

StageLayout zero_bubble_interleaved_layout(int stages, int chunks) {
  STRATA_CHECK(chunks >= 2 && chunks <= std::numeric_limits<int16_t>::max(),
               "ZeroBubbleInterleavedSchedule: chunks must be at least 2 (one chunk per stage is ZB-H1, \"zb-h1\") "
               "and at most 32767, got ",
               chunks);
  return {stages, chunks, false};
}
}  // namespace

Interleaved1F1BSchedule::Interleaved1F1BSchedule(int micro_batches, int stages, int stage_id, int chunks)
    : PlannedSchedule(micro_batches, stages, stage_id, interleaved_layout(micro_batches, stages, chunks),
                      PlanAlgorithm::kInterleaved, kName) {}

ZeroBubbleH1Schedule::ZeroBubbleH1Schedule(int micro_batches, int stages, int stage_id)
    : PlannedSchedule(micro_batches, stages, stage_id, {stages, 1, false}, PlanAlgorithm::kZeroBubbleH1, kName) {}

ZeroBubbleInterleavedSchedule::ZeroBubbleInterleavedSchedule(int micro_batches, int stages, int stage_id, int chunks)
    : PlannedSchedule(micro_batches, stages, stage_id, zero_bubble_interleaved_layout(stages, chunks),
                      PlanAlgorithm::kZeroBubble, kName) {}

DualPipeVSchedule::DualPipeVSchedule(int micro_batches, int stages, int stage_id)
    : PlannedSchedule(micro_batches, stages, stage_id, dualpipe_v_layout(micro_batches, stages),
                      PlanAlgorithm::kDualPipeV, kName) {}

ZeroBubbleVSchedule::ZeroBubbleVSchedule(int micro_batches, int stages, int stage_id)
    : PlannedSchedule(micro_batches, stages, stage_id, {stages, 2, true}, PlanAlgorithm::kZeroBubble, kName) {}

ForwardSchedule::ForwardSchedule(int micro_batches, int stages, int stage_id, StageLayout layout)
    : PlannedSchedule(micro_batches, stages, stage_id, layout, PlanAlgorithm::kForward, kName) {}

}  // namespace strata::pipe
