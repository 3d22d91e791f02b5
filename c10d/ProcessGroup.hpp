#pragma once
// c10d's ProcessGroup: libtorch's C++ collectives (torch/csrc/distributed/c10d/ProcessGroup.hpp of libtorch 1.13)
// over a strata::distributed group, so they run on its backends with its watchdog, DETAIL checks, comm log and
// flight recorder. Ranks in arguments and options are the group's own, as in c10d. Each call takes one tensor per
// process, as libtorch's MPI group does, starts the op and returns its Work at once.
//
//   auto pg = strata::c10d::ProcessGroupMPI::createProcessGroupMPI();
//   std::vector<strata::Tensor> mine = {strata::full({2}, static_cast<double>(pg->getRank()))};
//   strata::c10d::BroadcastOptions from_last;
//   from_last.rootRank = pg->getSize() - 1;
//   pg->broadcast(mine, from_last)->wait();
//   std::vector<std::vector<strata::Tensor>> all(1);
//   for (int r = 0; r < pg->getSize(); ++r) all[0].push_back(strata::empty({2}));
//   pg->allgather(all, mine)->wait();                 // all[0][r] is rank r's tensor

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/c10d/Types.hpp"
#include "strata/c10d/Work.hpp"

namespace strata::c10d {

/// A group of processes and libtorch's collectives over it, as c10d::ProcessGroup; made by ProcessGroupMPI or
/// ProcessGroupNCCL.
class ProcessGroup {
 public:
  using Work = c10d::Work;  ///< c10d::ProcessGroup::Work, libtorch's name up to 1.6
  virtual ~ProcessGroup() = default;

  int getRank() const { return group_->rank(); }  ///< this process's rank in the group
  int getSize() const { return group_->size(); }  ///< the group's number of processes
  /// "mpi" or "nccl", as libtorch names its backends.
  const std::string getBackendName() const { return backend_; }
  /// strata's group under this one, for strata::distributed calls on the same processes.
  const distributed::Group& group() const { return group_; }

  /// Copies rootRank's tensor into every rank's.
  std::shared_ptr<Work> broadcast(std::vector<Tensor>& tensors, const BroadcastOptions& opts = BroadcastOptions());
  /// Reduces the tensor in place across the group.
  std::shared_ptr<Work> allreduce(std::vector<Tensor>& tensors, const AllreduceOptions& opts = AllreduceOptions());
  /// allreduce of several tensors of one dtype and device through one flattened buffer.
  std::shared_ptr<Work> allreduce_coalesced(std::vector<Tensor>& tensors,
                                            const AllreduceCoalescedOptions& opts = AllreduceCoalescedOptions());
  /// Reduces into rootRank's tensor; the others are left as they were.
  std::shared_ptr<Work> reduce(std::vector<Tensor>& tensors, const ReduceOptions& opts = ReduceOptions());
  /// outputTensors[0][r] gets rank r's inputTensors[0].
  std::shared_ptr<Work> allgather(std::vector<std::vector<Tensor>>& outputTensors, std::vector<Tensor>& inputTensors,
                                  const AllgatherOptions& opts = AllgatherOptions());
  /// Every rank's inputBuffer, concatenated along dim 0 in rank order, into outputBuffer.
  std::shared_ptr<Work> _allgather_base(Tensor& outputBuffer, Tensor& inputBuffer,
                                        const AllgatherOptions& opts = AllgatherOptions());
  /// outputTensorLists[r][i] gets rank r's inputTensors[i], through one flattened buffer.
  std::shared_ptr<Work> allgather_coalesced(std::vector<std::vector<Tensor>>& outputTensorLists,
                                            std::vector<Tensor>& inputTensors,
                                            const AllgatherOptions& opts = AllgatherOptions());
  /// On rootRank, outputTensors[0][r] gets rank r's inputTensors[0]; elsewhere outputTensors is empty.
  std::shared_ptr<Work> gather(std::vector<std::vector<Tensor>>& outputTensors, std::vector<Tensor>& inputTensors,
                               const GatherOptions& opts = GatherOptions());
  /// Rank r's outputTensors[0] gets rootRank's inputTensors[0][r]; inputTensors is empty off the root.
  std::shared_ptr<Work> scatter(std::vector<Tensor>& outputTensors, std::vector<std::vector<Tensor>>& inputTensors,
                                const ScatterOptions& opts = ScatterOptions());
  /// Rank r's outputTensors[0] gets the reduction over ranks of their inputTensors[0][r].
  std::shared_ptr<Work> reduce_scatter(std::vector<Tensor>& outputTensors,
                                       std::vector<std::vector<Tensor>>& inputTensors,
                                       const ReduceScatterOptions& opts = ReduceScatterOptions());
  /// Reduces inputBuffer across ranks; rank r gets slice r of dim 0 in outputBuffer.
  std::shared_ptr<Work> _reduce_scatter_base(Tensor& outputBuffer, Tensor& inputBuffer,
                                             const ReduceScatterOptions& opts = ReduceScatterOptions());
  /// inputSplitSizes[p] rows of inputBuffer go to rank p, outputSplitSizes[p] rows come from it (empty: equal).
  std::shared_ptr<Work> alltoall_base(Tensor& outputBuffer, Tensor& inputBuffer, std::vector<int64_t>& outputSplitSizes,
                                      std::vector<int64_t>& inputSplitSizes,
                                      const AllToAllOptions& opts = AllToAllOptions());
  /// inputTensors[p] goes to rank p; outputTensors[p] comes from it.
  std::shared_ptr<Work> alltoall(std::vector<Tensor>& outputTensors, std::vector<Tensor>& inputTensors,
                                 const AllToAllOptions& opts = AllToAllOptions());
  /// Sends the tensor to group rank dstRank, matched by its recv with the same tag.
  std::shared_ptr<Work> send(std::vector<Tensor>& tensors, int dstRank, int tag);
  /// Receives into the tensor from group rank srcRank (the Work's sourceRank()).
  std::shared_ptr<Work> recv(std::vector<Tensor>& tensors, int srcRank, int tag);
  /// Finishes when every rank has entered it.
  std::shared_ptr<Work> barrier(const BarrierOptions& opts = BarrierOptions());
  /// A barrier that throws after opts.timeout naming the ranks that did not arrive (all of them with
  /// waitAllRanks); libtorch has it on Gloo only.
  void monitoredBarrier(const BarrierOptions& opts = BarrierOptions(), bool waitAllRanks = false);

 protected:
  /// Over `group`, of which this process is a member; `type` ("ProcessGroupMPI") names the class in errors. With
  /// `device`, every call takes tensors of that device type only.
  ProcessGroup(distributed::Group group, std::string type, std::string backend,
               std::optional<DeviceType> device = std::nullopt);

 private:
  /// The one tensor of a call, or an error naming `op` and the count (or the tensor's device).
  const Tensor& one(const std::vector<Tensor>& tensors, const char* op) const;
  /// An error naming `op` when one of `tensors` is on a device type this group does not move.
  void check_device(const std::vector<Tensor>& tensors, const char* op) const;
  /// The global rank of group rank `rank` given as `what` to `op`, or an error naming them.
  int global(int64_t rank, const char* op, const char* what) const;
  /// strata's reduction for `op`, or an error naming the call.
  distributed::ReduceOp reduction(ReduceOp op, const char* call) const;
  /// "ProcessGroupMPI::allreduce": how errors name a call.
  std::string name(const char* op) const;

  distributed::Group group_;
  std::string type_, backend_;
  std::optional<DeviceType> device_;
};

}  // namespace strata::c10d
