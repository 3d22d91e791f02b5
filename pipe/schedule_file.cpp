// Schedule files: PyTorch's action notation read, checked line by line, planned, and written back.

#include "strata/pipe/schedule_file.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "strata/pipe/schedule_validator.h"
#include "strata/tensor/error.h"

namespace strata::pipe {

using Instr = PipeInstruction;

namespace {

/// PyTorch's name of each kind an action can have, in the order parse tries them (longest first where one name
/// starts another).
struct Notation {
  std::string_view name;
  std::optional<Instr::Kind> kind;  // none for the kinds read and skipped
  bool micro_batch;                 // whether a micro-batch follows
};
constexpr std::array<Notation, 14> kNotation = {{
    {"WAIT_REDUCE_GRAD", std::nullopt, false},
    {"WAIT_SEND_F", std::nullopt, true},
    {"WAIT_SEND_B", std::nullopt, true},
    {"REDUCE_GRAD", std::nullopt, false},
    {"UNSHARD", std::nullopt, false},
    {"RESHARD", std::nullopt, false},
    {"SEND_F", Instr::SendActivation, true},
    {"RECV_F", Instr::RecvActivation, true},
    {"SEND_B", Instr::SendGrad, true},
    {"RECV_B", Instr::RecvGrad, true},
    {"F", Instr::ForwardPass, true},
    {"B", Instr::BackwardPass, true},
    {"I", Instr::BackwardInput, true},
    {"W", Instr::BackwardWeight, true},
}};

std::string_view notation(Instr::Kind kind) {
  for (const Notation& n : kNotation)
    if (n.kind == kind) return n.name;
  STRATA_CHECK(false, "ScheduleAction: ", name(kind), " has no action in PyTorch's notation");
}

/// Where an action is in the text, for errors: "mine.csv: line 2, action 5 (1F0)".
struct Place {
  int line = 0, cell = 0;
  std::string text;
};
std::ostream& operator<<(std::ostream& os, const Place& p) {
  return os << "line " << p.line << ", action " << p.cell << " (" << p.text << ")";
}

/// A line of the file: its number and its actions with their places.
struct Line {
  int number = 0;
  bool blank = false;  // nothing on it, not even empty cells
  std::vector<ScheduleAction> actions;
  std::vector<Place> places;
};

/// A non-negative decimal number below 2^30, or nullopt.
std::optional<int> parse_count(std::string_view digits) {
  int value = 0;
  if (digits.empty() || digits.size() > 10) return std::nullopt;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || value >= (1 << 30)) return std::nullopt;
  return value;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// Appends the actions of one cell (several for OVERLAP_F_B) to `line`; skipped kinds append nothing.
void parse_cell(std::string_view cell, const Place& place, const std::string& source, Line& line) {
  if (cell.starts_with('(')) {
    const size_t close = cell.find(')');
    STRATA_CHECK(close != std::string_view::npos && cell.substr(close + 1) == "OVERLAP_F_B", source, ": ", place,
                 ": expected (action;action)OVERLAP_F_B");
    std::string_view inner = cell.substr(1, close - 1);
    while (!inner.empty()) {
      const size_t semi = inner.find(';');
      const std::string_view part = trim(inner.substr(0, semi));
      STRATA_CHECK(!part.empty() && !part.starts_with('('), source, ": ", place,
                   ": an OVERLAP_F_B holds plain actions, separated by ';'");
      const size_t before = line.actions.size();
      parse_cell(part, place, source, line);
      STRATA_CHECK(line.actions.size() == before + 1 && is_compute(line.actions.back().kind), source, ": ", place,
                   ": an OVERLAP_F_B holds compute actions (F, B, I, W), got ", part);
      inner = semi == std::string_view::npos ? std::string_view() : inner.substr(semi + 1);
    }
    return;
  }
  const size_t digits = cell.find_first_not_of("0123456789");
  const std::optional<int> stage = parse_count(cell.substr(0, digits));
  STRATA_CHECK(stage && digits != std::string_view::npos, source, ": ", place,
               ": expected [virtual stage][kind][micro-batch], e.g. 1F0 or 0SEND_B3");
  const std::string_view rest = cell.substr(digits);
  for (const Notation& n : kNotation) {
    if (!rest.starts_with(n.name)) continue;
    const std::string_view tail = rest.substr(n.name.size());
    if (!n.micro_batch) {
      STRATA_CHECK(tail.empty(), source, ": ", place, ": ", n.name, " takes no micro-batch");
      return;
    }
    const std::optional<int> micro_batch = parse_count(tail);
    STRATA_CHECK(micro_batch, source, ": ", place, ": expected a micro-batch number below 2^30 after ", n.name);
    if (n.kind) {
      line.actions.push_back({*stage, *n.kind, *micro_batch});
      line.places.push_back(place);
    }
    return;
  }
  STRATA_CHECK(false, source, ": ", place,
               ": unknown kind; expected F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B (or PyTorch's UNSHARD, RESHARD, "
               "REDUCE_GRAD, WAIT_REDUCE_GRAD, WAIT_SEND_F, WAIT_SEND_B, skipped)");
}

std::vector<Line> parse_lines(std::string_view text, const std::string& source) {
  std::vector<Line> lines;
  int number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view row = trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++number;
    if (row.starts_with('#')) continue;
    Line line{number, row.empty(), {}, {}};
    int cell_number = 0;
    for (std::string_view rest = row;;) {
      const size_t comma = rest.find(',');
      const std::string_view cell = trim(rest.substr(0, comma));
      ++cell_number;
      if (!cell.empty()) parse_cell(cell, {number, cell_number, std::string(cell)}, source, line);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    lines.push_back(std::move(line));
  }
  while (!lines.empty() && lines.back().blank) lines.pop_back();  // blank lines at the end are not stages
  return lines;
}

/// The layout that places every action of line s on stage s: the loop, else (2 chunks) the V.
StageLayout infer_layout(const std::vector<Line>& lines, const std::string& source) {
  const int S = static_cast<int>(lines.size());
  int top = -1;
  for (const Line& line : lines)
    for (const ScheduleAction& a : line.actions) top = std::max(top, a.stage);
  STRATA_CHECK(top >= 0, source, ": no actions; expected one line per stage of F, B (or I and W) actions");
  const int V = top + 1;
  STRATA_CHECK(V % S == 0 && V / S <= std::numeric_limits<int16_t>::max(), source, ": ", V, " virtual stages (0 to ",
               top, ") do not split into chunks of the ", S, " stages (lines)");
  const StageLayout loop{S, V / S, false}, v{S, 2, true};
  auto first_misplaced = [&](const StageLayout& layout) -> const Place* {
    for (int s = 0; s < S; ++s)
      for (size_t i = 0; i < lines[s].actions.size(); ++i)
        if (layout.stage_of(lines[s].actions[i].stage) != s) return &lines[s].places[i];
    return nullptr;
  };
  const Place* in_loop = first_misplaced(loop);
  if (!in_loop) return loop;
  if (V == 2 * S && !first_misplaced(v)) return v;
  STRATA_CHECK(false, source, ": ", *in_loop, ": its virtual stage is on another line's stage in the loop layout (",
               V / S, " chunks: virtual stage c * ", S, " + s on stage s)",
               V == 2 * S ? ", and some action is in the V (chunk 1 of stage s is virtual stage 2S - 1 - s)" : "");
}

/// Checks one stage's line: every micro-batch of each of its virtual stages forward once and backward once (B,
/// or I then W), in order, each transfer after what it sends and before what uses it, and the memory cap.
void check_line(const Line& line, int s, const StageLayout& layout, int M, bool with_transfers,
                const ScheduleTableOptions& options, const std::string& source) {
  const int V = layout.num_virtual_stages();
  // The action index of each (kind, virtual stage, micro-batch) on this line.
  std::map<std::tuple<Instr::Kind, int, int>, size_t> seen;
  auto find = [&](Instr::Kind kind, int vs, int m) -> std::optional<size_t> {
    const auto it = seen.find({kind, vs, m});
    return it == seen.end() ? std::nullopt : std::optional<size_t>(it->second);
  };
  auto text = [](Instr::Kind kind, int vs, int m) { return str(ScheduleAction{vs, kind, m}); };
  auto remote = [&](int vs) { return 0 <= vs && vs < V && layout.stage_of(vs) != s; };
  double live = 0;
  for (size_t i = 0; i < line.actions.size(); ++i) {
    const ScheduleAction& a = line.actions[i];
    const Place& at = line.places[i];
    const int vs = a.stage, m = a.micro_batch;
    if (const auto first = find(a.kind, vs, m))
      STRATA_CHECK(false, source, ": ", at, ": a second ", a, " (the first is action ", line.places[*first].cell, ")");
    const bool forward = find(Instr::ForwardPass, vs, m).has_value();
    switch (a.kind) {
      case Instr::ForwardPass:
        STRATA_CHECK(!with_transfers || !remote(vs - 1) || find(Instr::RecvActivation, vs, m), source, ": ", at,
                     ": its input has not arrived; ", text(Instr::RecvActivation, vs, m), " comes first");
        live += 1.0 / layout.chunks;
        STRATA_CHECK(options.max_activations <= 0 || live <= options.max_activations + 1e-9, source, ": ", at,
                     ": stage ", s, " then holds ", live, " stages' worth of activations, more than max_activations (",
                     options.max_activations, ")");
        break;
      case Instr::BackwardPass:
      case Instr::BackwardInput: {
        STRATA_CHECK(forward, source, ": ", at, ": comes before its forward ", text(Instr::ForwardPass, vs, m));
        const Instr::Kind other = a.kind == Instr::BackwardPass ? Instr::BackwardInput : Instr::BackwardPass;
        if (const auto j = find(other, vs, m))
          STRATA_CHECK(false, source, ": ", at, ": micro-batch ", m, " of virtual stage ", vs, " already ran ",
                       text(other, vs, m), " (action ", line.places[*j].cell, "); a backward is B, or I then W");
        STRATA_CHECK(!with_transfers || !remote(vs + 1) || find(Instr::RecvGrad, vs, m), source, ": ", at,
                     ": its output's gradient has not arrived; ", text(Instr::RecvGrad, vs, m), " comes first");
        if (a.kind == Instr::BackwardPass) live -= 1.0 / layout.chunks;
        break;
      }
      case Instr::BackwardWeight:
        STRATA_CHECK(find(Instr::BackwardInput, vs, m), source, ": ", at, ": comes before ",
                     text(Instr::BackwardInput, vs, m), ", the input half it follows");
        live -= 1.0 / layout.chunks;
        break;
      case Instr::SendActivation:
        STRATA_CHECK(remote(vs + 1), source, ": ", at, ": virtual stage ", vs + 1,
                     vs + 1 == V ? " does not exist" : " is on this stage; nothing to send");
        STRATA_CHECK(forward, source, ": ", at, ": comes before ", text(Instr::ForwardPass, vs, m),
                     ", which computes what it sends");
        break;
      case Instr::SendGrad:
        STRATA_CHECK(remote(vs - 1), source, ": ", at, ": virtual stage ", vs - 1,
                     vs == 0 ? " does not exist" : " is on this stage; nothing to send");
        STRATA_CHECK(find(Instr::BackwardPass, vs, m) || find(Instr::BackwardInput, vs, m), source, ": ", at,
                     ": comes before the backward (", text(Instr::BackwardPass, vs, m), " or ",
                     text(Instr::BackwardInput, vs, m), ") that computes what it sends");
        break;
      case Instr::RecvActivation:
        STRATA_CHECK(remote(vs - 1), source, ": ", at, ": virtual stage ", vs - 1,
                     vs == 0 ? " does not exist" : " is on this stage; nothing to receive");
        break;
      default:  // RecvGrad
        STRATA_CHECK(remote(vs + 1), source, ": ", at, ": virtual stage ", vs + 1,
                     vs + 1 == V ? " does not exist" : " is on this stage; nothing to receive");
    }
    seen.emplace(std::make_tuple(a.kind, vs, m), i);
  }
  // Everything there: each virtual stage of this line, each micro-batch.
  const auto where = [&] { return str(source, ": line ", line.number, " (stage ", s, "): "); };
  for (int c = 0; c < layout.chunks; ++c) {
    const int vs = layout.virtual_stage(s, c);
    // The first micro-batch without a forward, counted along the forwards there, so that a file naming a huge
    // micro-batch fails here rather than in a loop of M; past this check M is at most the line's length.
    int forwarded = 0;
    for (auto it = seen.lower_bound({Instr::ForwardPass, vs, 0});
         it != seen.end() && it->first == std::make_tuple(Instr::ForwardPass, vs, forwarded); ++it)
      ++forwarded;
    STRATA_CHECK(forwarded >= M, where(), "no ", text(Instr::ForwardPass, vs, forwarded),
                 "; each virtual stage of the line runs every micro-batch 0 to ", M - 1);
    for (int m = 0; m < M; ++m) {
      const bool whole = find(Instr::BackwardPass, vs, m).has_value();
      const bool input = find(Instr::BackwardInput, vs, m).has_value();
      STRATA_CHECK(whole || input, where(), "no backward of ", text(Instr::ForwardPass, vs, m), " (",
                   text(Instr::BackwardPass, vs, m), ", or ", text(Instr::BackwardInput, vs, m), " and ",
                   text(Instr::BackwardWeight, vs, m), ")");
      STRATA_CHECK(!input || find(Instr::BackwardWeight, vs, m), where(), "no ", text(Instr::BackwardWeight, vs, m),
                   " after ", text(Instr::BackwardInput, vs, m));
      if (!with_transfers) continue;
      // Each transfer and its partner on the neighbouring virtual stage's line: (kind, partner kind, neighbour).
      const std::tuple<Instr::Kind, Instr::Kind, int> needed[] = {
          {Instr::RecvActivation, Instr::SendActivation, vs - 1},
          {Instr::SendActivation, Instr::RecvActivation, vs + 1},
          {Instr::RecvGrad, Instr::SendGrad, vs + 1},
          {Instr::SendGrad, Instr::RecvGrad, vs - 1}};
      for (const auto& [kind, partner, other] : needed)
        STRATA_CHECK(!remote(other) || find(kind, vs, m), where(), "no ", text(kind, vs, m), ", the partner of ",
                     text(partner, other, m), " on stage ", layout.stage_of(other),
                     "; a file that lists transfers lists every one");
    }
  }
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const ScheduleAction& action) {
  return os << action.stage << notation(action.kind) << action.micro_batch;
}

namespace {

/// Stage `stage_id`'s steps of a table's plan.
class FileSchedule : public PlannedSchedule {
 public:
  FileSchedule(int micro_batches, int stage_id, StageLayout layout, std::shared_ptr<const SchedulePlan> plan)
      : PlannedSchedule(micro_batches, stage_id, layout, std::move(plan)) {}
  std::string_view name() const override { return "file"; }
};

/// One line per row, its actions separated by commas.
void write_rows(std::ostream& os, const std::vector<std::vector<ScheduleAction>>& rows) {
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) os << (i ? "," : "") << row[i];
    os << '\n';
  }
}

}  // namespace

ScheduleTable ScheduleTable::parse(std::string_view text, std::string_view source,
                                   const ScheduleTableOptions& options) {
  const std::string src(source);
  std::vector<Line> lines = parse_lines(text, src);
  STRATA_CHECK(!lines.empty(), src, ": no lines; expected one line of actions per stage");
  const StageLayout layout = infer_layout(lines, src);
  int top = -1;
  bool with_transfers = false;
  for (const Line& line : lines)
    for (const ScheduleAction& a : line.actions) {
      if (is_compute(a.kind)) top = std::max(top, a.micro_batch);
      with_transfers |= is_p2p(a.kind);
    }
  const int M = top + 1;
  STRATA_CHECK(M >= 1, src, ": no compute actions (F, B, I, W)");
  for (int s = 0; s < layout.stages; ++s) check_line(lines[s], s, layout, M, with_transfers, options, src);

  std::vector<std::vector<Instr>> orders(layout.stages);
  for (int s = 0; s < layout.stages; ++s)
    for (const ScheduleAction& a : lines[s].actions)
      if (is_compute(a.kind))
        orders[s].push_back({a.kind, a.micro_batch, static_cast<int16_t>(layout.chunk_of(a.stage))});
  auto position = [&](int s, size_t index) {
    size_t k = 0;
    for (size_t i = 0; i < lines[s].actions.size(); ++i)
      if (is_compute(lines[s].actions[i].kind) && k++ == index) return str(lines[s].places[i]);
    return str("stage ", s, " compute ", index);
  };
  ScheduleTable table;
  try {
    table.plan_ = std::make_shared<const SchedulePlan>(plan_compute_orders(orders, M, layout, position));
  } catch (const Error& e) {
    STRATA_CHECK(false, src, ": ", e.what());
  }
  table.source_ = src;
  table.layout_ = layout;
  table.micro_batches_ = M;
  for (Line& line : lines) table.actions_.push_back(std::move(line.actions));
  return table;
}

ScheduleTable ScheduleTable::load(const std::string& path, const ScheduleTableOptions& options) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.good(), "ScheduleTable::load: cannot open '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  STRATA_CHECK(!in.bad(), "ScheduleTable::load: cannot read '", path, "'");
  return parse(text.str(), path, options);
}

ScheduleTable ScheduleTable::from_schedule(std::string_view name, int micro_batches, int stages, int chunks) {
  const ScheduleEntry& entry = schedule_entry(name);
  STRATA_CHECK(entry.training && entry.pipelined, "ScheduleTable::from_schedule: ", name,
               " is not a pipelined training schedule");
  std::vector<std::vector<ScheduleAction>> rows(stages);
  ValidateOptions options;
  options.chunks = chunks;
  StageLayout layout;
  options.on_event = [&](const TraceEvent& e) {
    const Instr& in = e.instruction;
    if (!is_compute(in.kind) && !is_p2p(in.kind)) return;
    rows[e.stage].push_back({layout.virtual_stage(e.stage, in.chunk), in.kind, e.micro_batch});
  };
  layout = make_schedule(name, micro_batches, stages, 0, chunks)->layout();
  validate_schedule(name, micro_batches, stages, options);
  std::ostringstream text;
  write_rows(text, rows);
  return parse(text.str(), name);
}

std::unique_ptr<PipeSchedule> ScheduleTable::schedule(int stage_id) const {
  STRATA_CHECK(0 <= stage_id && stage_id < stages(), source_, ": stage ", stage_id, " is out of range for ", stages(),
               " stages");
  return std::make_unique<FileSchedule>(micro_batches_, stage_id, layout_, plan_);
}

std::ostream& operator<<(std::ostream& os, const ScheduleTable& table) {
  write_rows(os, table.actions());
  return os;
}

}  // namespace strata::pipe
