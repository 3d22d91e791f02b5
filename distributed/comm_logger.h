#pragma once
// Per op type and group: calls, bytes, time and achieved bandwidth, like DeepSpeed's comms
// logger. Off by default; on with STRATA_COMM_LOG=1 or set_comm_logging(true).
//
//   strata::distributed::set_comm_logging(true);
//   // ... train ...
//   strata::distributed::print_comm_summary();   // a table on std::cout
//
// Bus bandwidth follows nccl-tests: algbw times 2(n-1)/n for all_reduce, (n-1)/n for
// all_gather, reduce_scatter and all_to_all, 1 for the rest. Async ops count from the call to
// the end of wait().

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace strata::distributed {

/// Totals of one op type on one group.
struct CommStats {
  std::string op;      ///< e.g. "all_reduce"
  std::string group;   ///< ProcessGroup::describe()
  int group_size = 0;  ///< ranks in the group
  int64_t calls = 0;   ///< ops logged
  int64_t bytes = 0;   ///< message bytes over all calls (the larger of input and output)
  double total_s = 0;  ///< time over all calls
  double mean_s() const { return calls ? total_s / calls : 0; }       ///< time per call
  double algbw() const { return total_s > 0 ? bytes / total_s : 0; }  ///< bytes per second
  double busbw() const;                                               ///< algbw scaled by the op's bus factor
};

/// Turns logging on or off on this rank.
void set_comm_logging(bool on);
/// Whether ops are being logged.
bool comm_logging();
/// The totals so far, sorted by op and group.
std::vector<CommStats> comm_summary();
/// Forgets the totals.
void reset_comm_summary();
/// Prints the totals as a table.
void print_comm_summary(std::ostream& os = std::cout);

}  // namespace strata::distributed
