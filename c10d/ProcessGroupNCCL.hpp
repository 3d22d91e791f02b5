#pragma once
// c10d's NCCL process group (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp): every process mpirun started, one
// GPU each, moving CUDA tensors over NCCL. strata's NCCL communicators are set up over MPI, so it takes no Store:
// libtorch's ProcessGroupNCCL(store, rank, size) is ProcessGroupNCCL(rank, size) here, the one line a port changes.
//
//   namespace dist = strata::distributed;
//   dist::init();
//   strata::c10d::ProcessGroupNCCL pg(dist::get_rank(), dist::get_world_size());
//   std::vector<strata::Tensor> grad = {strata::ones({3}, strata::TensorOptions().device(strata::kCUDA))};
//   pg.allreduce(grad)->wait();                        // the current stream waits, as in libtorch

#include <memory>
#include <string>
#include <vector>

#include "strata/c10d/ProcessGroup.hpp"

namespace strata::c10d {

/// libtorch's c10d::ProcessGroupNCCL over strata's NCCL backend: CUDA tensors only.
class ProcessGroupNCCL : public ProcessGroup {
 public:
  /// WORLD, where this process is `rank` of `size` (both as mpirun numbered them); an error, naming why, where
  /// strata does not move WORLD's CUDA tensors over NCCL (a rank without a GPU of its own, a build without CUDA).
  ProcessGroupNCCL(int rank, int size);
  /// Ends every process of the job at once (MPI_Abort), naming this rank: for a rank that cannot go on.
  [[noreturn]] void abort();
};

}  // namespace strata::c10d
