// c10d::ProcessGroup, ProcessGroupMPI and ProcessGroupNCCL: libtorch's calls translated to strata::distributed's.
// c10d names ranks within the group and takes a list of one tensor per call; distributed:: names global ranks and
// takes the tensor.
#include <utility>

#include "strata/c10d/ProcessGroupMPI.hpp"
#include "strata/c10d/ProcessGroupNCCL.hpp"
#include "strata/distributed/collectives.h"

namespace strata::c10d {

namespace dist = strata::distributed;

namespace {

/// An error naming `call` unless this rank passed `count` lists of `what` as its role in a rooted call needs (one
/// on the root, none elsewhere). `refuse` first makes the distributed:: call with an argument it refuses on this
/// rank only, so that under STRATA_DISTRIBUTED_DEBUG=DETAIL the other ranks learn of it as they compare their calls
/// and throw too, instead of waiting in the collective for this rank.
template <class Refuse>
void check_root_lists(size_t count, bool at_root, int rank, const std::string& call, const char* what,
                      const Refuse& refuse) {
  if (count == (at_root ? 1u : 0u)) return;
  try {
    refuse();
  } catch (const Error&) {
  }
  STRATA_CHECK(false, call, ": rank ", rank, at_root ? " is the root and takes one " : " is not the root and takes no ",
               what, " list, got ", count);
}

}  // namespace

ProcessGroup::ProcessGroup(distributed::Group group, std::string type, std::string backend,
                           std::optional<DeviceType> device)
    : group_(std::move(group)), type_(std::move(type)), backend_(std::move(backend)), device_(device) {
  STRATA_CHECK(group_ && group_->is_member(), "c10d::", type_, ": this process is not a member of ",
               group_ ? group_->describe() : std::string("a null group"));
}

std::string ProcessGroup::name(const char* op) const { return "c10d::" + type_ + "::" + op; }

const Tensor& ProcessGroup::one(const std::vector<Tensor>& tensors, const char* op) const {
  STRATA_CHECK(tensors.size() == 1, name(op), ": expected one tensor per call (one per process, as libtorch's MPI ",
               "group takes), got ", tensors.size());
  check_device(tensors, op);
  return tensors[0];
}

void ProcessGroup::check_device(const std::vector<Tensor>& tensors, const char* op) const {
  if (!device_) return;
  for (const Tensor& t : tensors)
    STRATA_CHECK(!t.defined() || t.device().type == *device_, name(op), ": expected ",
                 *device_ == kCUDA ? "CUDA" : "CPU", " tensors, got one on ", t.device());
}

int ProcessGroup::global(int64_t rank, const char* op, const char* what) const {
  STRATA_CHECK(rank >= 0 && rank < getSize(), name(op), ": ", what, " ", rank, " is not a rank of the group of ",
               getSize());
  return group_->global_rank(static_cast<int>(rank));
}

dist::ReduceOp ProcessGroup::reduction(ReduceOp op, const char* call) const {
  switch (op) {
    case ReduceOp::SUM:
      return dist::ReduceOp::SUM;
    case ReduceOp::AVG:
      return dist::ReduceOp::AVG;
    case ReduceOp::PRODUCT:
      return dist::ReduceOp::PRODUCT;
    case ReduceOp::MIN:
      return dist::ReduceOp::MIN;
    case ReduceOp::MAX:
      return dist::ReduceOp::MAX;
    default:
      STRATA_CHECK(false, name(call), ": ReduceOp ", static_cast<int>(op.op_),
                   " (a bitwise reduction) is not supported; strata reduces with SUM, AVG, PRODUCT, MIN and MAX");
  }
  return dist::ReduceOp::SUM;
}

std::shared_ptr<Work> ProcessGroup::broadcast(std::vector<Tensor>& tensors, const BroadcastOptions& opts) {
  STRATA_CHECK(opts.rootTensor == 0, name("broadcast"), ": rootTensor must be 0 (one tensor per call), got ",
               opts.rootTensor);
  const int root = global(opts.rootRank, "broadcast", "rootRank");
  return std::make_shared<Work>(dist::broadcast(one(tensors, "broadcast"), root, group_, true), tensors);
}

std::shared_ptr<Work> ProcessGroup::allreduce(std::vector<Tensor>& tensors, const AllreduceOptions& opts) {
  const dist::ReduceOp op = reduction(opts.reduceOp, "allreduce");
  return std::make_shared<Work>(dist::all_reduce(one(tensors, "allreduce"), op, group_, true), tensors);
}

std::shared_ptr<Work> ProcessGroup::allreduce_coalesced(std::vector<Tensor>& tensors,
                                                        const AllreduceCoalescedOptions& opts) {
  const dist::ReduceOp op = reduction(opts.reduceOp, "allreduce_coalesced");
  check_device(tensors, "allreduce_coalesced");
  return std::make_shared<Work>(dist::all_reduce_coalesced(tensors, op, group_, true), tensors);
}

std::shared_ptr<Work> ProcessGroup::reduce(std::vector<Tensor>& tensors, const ReduceOptions& opts) {
  STRATA_CHECK(opts.rootTensor == 0, name("reduce"), ": rootTensor must be 0 (one tensor per call), got ",
               opts.rootTensor);
  const int root = global(opts.rootRank, "reduce", "rootRank");
  const dist::ReduceOp op = reduction(opts.reduceOp, "reduce");
  return std::make_shared<Work>(dist::reduce(one(tensors, "reduce"), root, op, group_, true), tensors);
}

std::shared_ptr<Work> ProcessGroup::allgather(std::vector<std::vector<Tensor>>& outputTensors,
                                              std::vector<Tensor>& inputTensors, const AllgatherOptions&) {
  STRATA_CHECK(outputTensors.size() == 1, name("allgather"), ": expected one output list, got ", outputTensors.size());
  const Tensor& input = one(inputTensors, "allgather");
  return std::make_shared<Work>(dist::all_gather(outputTensors[0], input, group_, true), outputTensors[0]);
}

std::shared_ptr<Work> ProcessGroup::_allgather_base(Tensor& outputBuffer, Tensor& inputBuffer,
                                                    const AllgatherOptions&) {
  check_device({inputBuffer, outputBuffer}, "_allgather_base");
  return std::make_shared<Work>(dist::all_gather_into_tensor(outputBuffer, inputBuffer, group_, true),
                                std::vector<Tensor>{outputBuffer});
}

std::shared_ptr<Work> ProcessGroup::allgather_coalesced(std::vector<std::vector<Tensor>>& outputTensorLists,
                                                        std::vector<Tensor>& inputTensors, const AllgatherOptions&) {
  std::vector<Tensor> outputs;
  for (const std::vector<Tensor>& list : outputTensorLists) outputs.insert(outputs.end(), list.begin(), list.end());
  check_device(inputTensors, "allgather_coalesced");
  return std::make_shared<Work>(dist::all_gather_coalesced(outputTensorLists, inputTensors, group_, true),
                                std::move(outputs));
}

std::shared_ptr<Work> ProcessGroup::gather(std::vector<std::vector<Tensor>>& outputTensors,
                                           std::vector<Tensor>& inputTensors, const GatherOptions& opts) {
  const int root = global(opts.rootRank, "gather", "rootRank");
  const bool at_root = opts.rootRank == getRank();
  const Tensor& input = one(inputTensors, "gather");
  check_root_lists(outputTensors.size(), at_root, getRank(), name("gather"), "output",
                   [&] { dist::gather(input, at_root ? tensor_list{} : tensor_list{input}, root, group_); });
  const std::vector<Tensor> outputs = at_root ? outputTensors[0] : std::vector<Tensor>{};
  return std::make_shared<Work>(dist::gather(input, outputs, root, group_, true), outputs);
}

std::shared_ptr<Work> ProcessGroup::scatter(std::vector<Tensor>& outputTensors,
                                            std::vector<std::vector<Tensor>>& inputTensors,
                                            const ScatterOptions& opts) {
  const int root = global(opts.rootRank, "scatter", "rootRank");
  const bool at_root = opts.rootRank == getRank();
  const Tensor& output = one(outputTensors, "scatter");
  check_root_lists(inputTensors.size(), at_root, getRank(), name("scatter"), "input",
                   [&] { dist::scatter(output, at_root ? tensor_list{} : tensor_list{output}, root, group_); });
  return std::make_shared<Work>(
      dist::scatter(output, at_root ? inputTensors[0] : std::vector<Tensor>{}, root, group_, true), outputTensors);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(std::vector<Tensor>& outputTensors,
                                                   std::vector<std::vector<Tensor>>& inputTensors,
                                                   const ReduceScatterOptions& opts) {
  STRATA_CHECK(inputTensors.size() == 1, name("reduce_scatter"), ": expected one input list, got ",
               inputTensors.size());
  const dist::ReduceOp op = reduction(opts.reduceOp, "reduce_scatter");
  return std::make_shared<Work>(
      dist::reduce_scatter(one(outputTensors, "reduce_scatter"), inputTensors[0], op, group_, true), outputTensors);
}

std::shared_ptr<Work> ProcessGroup::_reduce_scatter_base(Tensor& outputBuffer, Tensor& inputBuffer,
                                                         const ReduceScatterOptions& opts) {
  const dist::ReduceOp op = reduction(opts.reduceOp, "_reduce_scatter_base");
  check_device({inputBuffer, outputBuffer}, "_reduce_scatter_base");
  return std::make_shared<Work>(dist::reduce_scatter_tensor(outputBuffer, inputBuffer, op, group_, true),
                                std::vector<Tensor>{outputBuffer});
}

std::shared_ptr<Work> ProcessGroup::alltoall_base(Tensor& outputBuffer, Tensor& inputBuffer,
                                                  std::vector<int64_t>& outputSplitSizes,
                                                  std::vector<int64_t>& inputSplitSizes, const AllToAllOptions&) {
  check_device({inputBuffer, outputBuffer}, "alltoall_base");
  return std::make_shared<Work>(
      dist::all_to_all_single(outputBuffer, inputBuffer, outputSplitSizes, inputSplitSizes, group_, true),
      std::vector<Tensor>{outputBuffer});
}

std::shared_ptr<Work> ProcessGroup::alltoall(std::vector<Tensor>& outputTensors, std::vector<Tensor>& inputTensors,
                                             const AllToAllOptions&) {
  check_device(inputTensors, "alltoall");
  return std::make_shared<Work>(dist::all_to_all(outputTensors, inputTensors, group_, true), outputTensors);
}

std::shared_ptr<Work> ProcessGroup::send(std::vector<Tensor>& tensors, int dstRank, int tag) {
  const int dst = global(dstRank, "send", "dstRank");
  return std::make_shared<Work>(dist::isend(one(tensors, "send"), dst, group_, tag), std::vector<Tensor>{});
}

std::shared_ptr<Work> ProcessGroup::recv(std::vector<Tensor>& tensors, int srcRank, int tag) {
  const int src = global(srcRank, "recv", "srcRank");
  return std::make_shared<Work>(dist::irecv(one(tensors, "recv"), src, group_, tag), tensors, srcRank);
}

std::shared_ptr<Work> ProcessGroup::barrier(const BarrierOptions&) {
  return std::make_shared<Work>(dist::barrier(group_, true), std::vector<Tensor>{});
}

void ProcessGroup::monitoredBarrier(const BarrierOptions& opts, bool waitAllRanks) {
  dist::monitored_barrier(group_, opts.timeout == kUnsetTimeout ? std::chrono::milliseconds{} : opts.timeout,
                          waitAllRanks);
}

ProcessGroupMPI::ProcessGroupMPI(distributed::Group group) : ProcessGroup(std::move(group), "ProcessGroupMPI", "mpi") {}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::createProcessGroupMPI(std::vector<int> ranks) {
  dist::init();
  dist::Group group = ranks.empty() ? dist::get_world_group() : dist::new_group(ranks);
  return group->is_member() ? std::make_shared<ProcessGroupMPI>(std::move(group)) : nullptr;
}

void ProcessGroupMPI::abort() { dist::abort_job("c10d::ProcessGroupMPI::abort() called"); }

namespace {

/// WORLD, after checking that rank and size are mpirun's and that WORLD's CUDA tensors move over NCCL.
dist::Group nccl_world(int rank, int size) {
  dist::init();
  STRATA_CHECK(rank == dist::get_rank() && size == dist::get_world_size(), "c10d::ProcessGroupNCCL: rank ", rank,
               " of ", size, " is not this process's place in the job, rank ", dist::get_rank(), " of ",
               dist::get_world_size(), " (strata's groups are the processes mpirun started)");
  const dist::Group& world = dist::get_world_group();
  const bool cuda = world->has_backend(kCUDA);
  const std::string via = cuda ? world->backend(kCUDA, "ProcessGroupNCCL").name() : "";
  STRATA_CHECK(via == "nccl", "c10d::ProcessGroupNCCL: strata moves WORLD's CUDA tensors ",
               cuda ? "through " + via : std::string("nowhere (a build without CUDA, or a rank without a GPU)"),
               ", not NCCL, which needs a GPU for each rank and STRATA_CUDA_BACKEND auto or nccl "
               "(distributed/README.md)");
  return world;
}

}  // namespace

ProcessGroupNCCL::ProcessGroupNCCL(int rank, int size)
    : ProcessGroup(nccl_world(rank, size), "ProcessGroupNCCL", "nccl", kCUDA) {}

void ProcessGroupNCCL::abort() { dist::abort_job("c10d::ProcessGroupNCCL::abort() called"); }

}  // namespace strata::c10d
