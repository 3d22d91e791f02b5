#pragma once
// libtorch's c10d option structs and ReduceOp (torch/csrc/distributed/c10d/Types.hpp of libtorch 1.13), which the
// ProcessGroup calls take:
//
//   strata::c10d::AllreduceOptions opts;
//   opts.reduceOp = strata::c10d::ReduceOp::MAX;
//   strata::c10d::BroadcastOptions from_one;
//   from_one.rootRank = 1;

#include <chrono>
#include <cstdint>
#include <vector>

#include "strata/distributed/process_group.h"

/// libtorch's C++ distributed API (c10d) over strata::distributed: process groups, options and Work handles.
namespace strata::c10d {

/// A timeout left to the group's default (strata's STRATA_COMM_TIMEOUT_S watchdog).
constexpr auto kUnsetTimeout = std::chrono::milliseconds(-1);
/// Work::wait without a limit.
constexpr auto kNoTimeout = std::chrono::milliseconds(0);

/// The reduction of allreduce, reduce and reduce_scatter, as c10d::ReduceOp: c10d::ReduceOp::SUM and the rest.
struct ReduceOp {
  /// libtorch's reductions, with its numbering; strata runs SUM, AVG, PRODUCT, MIN and MAX.
  enum RedOpType : uint8_t { SUM = 0, AVG = 1, PRODUCT = 2, MIN = 3, MAX = 4, BAND = 5, BOR = 6, BXOR = 7 };
  ReduceOp() = default;                       ///< SUM
  ReduceOp(RedOpType op) : op_(op) {}         ///< implicit, as libtorch's: opts.reduceOp = ReduceOp::MAX
  operator RedOpType() const { return op_; }  ///< the enumerator, so op == ReduceOp::SUM compares
  RedOpType op_ = SUM;                        ///< libtorch's field name
};

/// broadcast's root, as c10d::BroadcastOptions.
struct BroadcastOptions {
  int64_t rootRank = 0;                               ///< the group rank whose tensor every rank gets
  int64_t rootTensor = 0;                             ///< which of its tensors (one per call: 0)
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// allreduce's reduction, as c10d::AllreduceOptions.
struct AllreduceOptions {
  ReduceOp reduceOp = ReduceOp::SUM;                  ///< the reduction
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// allreduce_coalesced's reduction, as c10d::AllreduceCoalescedOptions.
struct AllreduceCoalescedOptions : AllreduceOptions {};
/// reduce's reduction and root, as c10d::ReduceOptions.
struct ReduceOptions {
  ReduceOp reduceOp = ReduceOp::SUM;                  ///< the reduction
  int64_t rootRank = 0;                               ///< the group rank that gets the result
  int64_t rootTensor = 0;                             ///< which of its tensors (one per call: 0)
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// allgather's options, as c10d::AllgatherOptions.
struct AllgatherOptions {
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// gather's root, as c10d::GatherOptions.
struct GatherOptions {
  int64_t rootRank = 0;                               ///< the group rank that gathers
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// scatter's root, as c10d::ScatterOptions.
struct ScatterOptions {
  int64_t rootRank = 0;                               ///< the group rank that scatters
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// reduce_scatter's reduction, as c10d::ReduceScatterOptions.
struct ReduceScatterOptions {
  ReduceOp reduceOp = ReduceOp::SUM;                  ///< the reduction
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// alltoall's options, as c10d::AllToAllOptions.
struct AllToAllOptions {
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< accepted; the watchdog's limit applies
};
/// barrier's options, as c10d::BarrierOptions.
struct BarrierOptions {
  std::vector<int64_t> device_ids;                    ///< accepted and unused, as by libtorch's MPI group
  std::chrono::milliseconds timeout = kUnsetTimeout;  ///< monitoredBarrier's limit; barrier's is the watchdog's
};

}  // namespace strata::c10d
