#include "strata/distributed/comm_logger.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#include "strata/distributed/detail/runtime.h"

namespace strata::distributed {
namespace {

bool env_turns_logging_on() {
  const char* value = std::getenv("STRATA_COMM_LOG");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// Namespace scope rather than a function-local static so that logging_enabled() is the bare load,
// with no guard check; the environment is read once, before main.
std::atomic<bool> logging_on{env_turns_logging_on()};

struct Totals {
  std::mutex mutex;
  // Keyed by group id, which is never reused, so that describe() runs once per group, not per op.
  // Op names are string literals (OpRecord::op), so the key holds a view and logging allocates only once per row.
  std::map<std::pair<std::string_view, int64_t>, CommStats> by_op_and_group;  // sorted as comm_summary returns
};

// Never destroyed: ops that run from atexit handlers or static destructors may still log.
Totals& totals() {
  static Totals* const t = new Totals;
  return *t;
}

// nccl-tests' bus factors: what each rank's link carries relative to the message.
double bus_factor(const std::string& op, int n) {
  static constexpr std::array kOneSliceEach = {"all_gather",       "all_gather_into_tensor", "all_gather_coalesced",
                                               "reduce_scatter",   "reduce_scatter_tensor",  "all_to_all",
                                               "all_to_all_single"};
  if (n <= 0) return 0;
  if (op == "all_reduce" || op == "all_reduce_coalesced") return 2.0 * (n - 1) / n;
  if (std::find(kOneSliceEach.begin(), kOneSliceEach.end(), op) != kOneSliceEach.end()) return double(n - 1) / n;
  return 1;
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

// "512 B", "2.00 KiB", "64.0 MiB", "256 MiB": three significant digits past bytes.
std::string human_bytes(int64_t bytes) {
  static constexpr std::array kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  return fixed(value, value < 10 ? 2 : value < 100 ? 1 : 0) + " " + kUnits[unit];
}

}  // namespace

double CommStats::busbw() const { return algbw() * bus_factor(op, group_size); }

void set_comm_logging(bool on) { logging_on.store(on, std::memory_order_relaxed); }

bool comm_logging() { return detail::logging_enabled(); }

std::vector<CommStats> comm_summary() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  std::vector<CommStats> out;
  out.reserve(t.by_op_and_group.size());
  for (const auto& [key, stats] : t.by_op_and_group) out.push_back(stats);
  return out;
}

void reset_comm_summary() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  t.by_op_and_group.clear();
}

void print_comm_summary(std::ostream& os) {
  const std::vector<CommStats> stats = comm_summary();
  os << "comm summary";
  if (is_initialized()) os << " (rank " << get_rank() << " of " << get_world_size() << ")";
  if (stats.empty()) {
    os << ": nothing logged" << (comm_logging() ? "" : " (logging is off: STRATA_COMM_LOG=1 or set_comm_logging(true))")
       << "\n";
    return;
  }
  os << "\n";

  constexpr size_t kColumns = 8;
  using Row = std::array<std::string, kColumns>;
  std::vector<Row> rows = {{"op", "group", "calls", "bytes", "total ms", "mean us", "algbw GB/s", "busbw GB/s"}};
  for (const CommStats& s : stats)
    rows.push_back({s.op, s.group, std::to_string(s.calls), human_bytes(s.bytes), fixed(s.total_s * 1e3, 3),
                    fixed(s.mean_s() * 1e6, 2), fixed(s.algbw() / 1e9, 3), fixed(s.busbw() / 1e9, 3)});
  std::array<size_t, kColumns> width{};
  for (const Row& row : rows)
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], row[c].size());

  // op and group read left to right; the numbers line up on their last digit.
  auto print_row = [&](const Row& row) {
    for (size_t c = 0; c < kColumns; ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c > 0) os << "  ";
      if (c < 2)
        os << row[c] << pad;
      else
        os << pad << row[c];
    }
    os << "\n";
  };
  print_row(rows[0]);
  size_t total_width = 2 * (kColumns - 1);
  for (size_t w : width) total_width += w;
  os << std::string(total_width, '-') << "\n";
  for (size_t r = 1; r < rows.size(); ++r) print_row(rows[r]);
}

namespace detail {

bool logging_enabled() { return logging_on.load(std::memory_order_relaxed); }

void log_op(const OpRecord& record, double seconds) {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  auto [it, inserted] = t.by_op_and_group.try_emplace({record.op, record.group->id()});
  CommStats& s = it->second;
  if (inserted) {
    s.op = record.op;
    s.group = record.group->describe();
    s.group_size = record.group->size();
  }
  ++s.calls;
  s.bytes += record.bytes;
  s.total_s += seconds;
}

}  // namespace detail
}  // namespace strata::distributed
