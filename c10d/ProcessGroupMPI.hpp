#pragma once
// c10d's MPI process group (torch/csrc/distributed/c10d/ProcessGroupMPI.hpp): the group of every process mpirun
// started, or of some of them. CPU tensors move over MPI; CUDA tensors take the group's CUDA backend (NCCL, or MPI
// staged through host memory with STRATA_CUDA_BACKEND=mpi: distributed/README.md).
//
//   auto pg = strata::c10d::ProcessGroupMPI::createProcessGroupMPI();   // joins MPI if needed
//   std::vector<strata::Tensor> grad = {strata::ones({3})};
//   auto work = pg->allreduce(grad);
//   try {
//     work->wait();
//   } catch (const std::exception& e) {
//     pg->abort();                                     // ends every process of the job
//   }

#include <memory>
#include <string>
#include <vector>

#include "strata/c10d/ProcessGroup.hpp"

namespace strata::c10d {

/// libtorch's c10d::ProcessGroupMPI over strata's MPI runtime.
class ProcessGroupMPI : public ProcessGroup {
 public:
  /// The c10d group over `group` (a strata group this process belongs to).
  explicit ProcessGroupMPI(distributed::Group group);
  /// Joins MPI (strata::distributed::init) if needed and returns the group of global `ranks` (every process when
  /// empty), group rank i being ranks[i]. Every process calls it with the same ranks; those outside get null.
  static std::shared_ptr<ProcessGroupMPI> createProcessGroupMPI(std::vector<int> ranks = {});
  /// Ends every process of the job at once (MPI_Abort), naming this rank: for a rank that cannot go on.
  [[noreturn]] void abort();
};

}  // namespace strata::c10d
