// A build without CUDA (compiled in place of distributed/nccl/): WORLD has no backend for CUDA
// tensors, so a collective on one says so (and Tensor::to already refuses to make one).

#include "strata/distributed/detail/cuda_backend.h"

namespace strata::distributed::detail {

std::unique_ptr<Backend> make_cuda_backend(Backend&, int) { return nullptr; }

}  // namespace strata::distributed::detail
