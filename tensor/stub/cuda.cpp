// A build without CUDA: the CUDA table and device API answer that no GPU is usable, and every
// attempt to put a tensor on one says why (compiled in place of tensor/cuda/ when nvcc, cuBLAS
// or NCCL is missing, or with -DSTRATA_WITH_CUDA=OFF).

#include "strata/tensor/cuda.h"
#include "strata/tensor/kernels.h"

namespace strata {

namespace {
[[noreturn]] void not_built(const char* what) {
  STRATA_CHECK(false, what,
               ": this build of strata has no CUDA backend (configure with nvcc, cuBLAS and NCCL "
               "installed, or -DSTRATA_WITH_CUDA=ON to require them)");
}
bool tf32_allowed = false;  // kept so that set/get agree, as torch lets the flag be set without a GPU
}  // namespace

const Kernels& cuda_kernels() { not_built("CUDA tensors"); }

namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
void synchronize(int) { not_built("cuda::synchronize"); }
int current_device() { not_built("cuda::current_device"); }
void set_device(int) { not_built("cuda::set_device"); }
void set_allow_tf32(bool allow) { tf32_allowed = allow; }
bool allow_tf32() { return tf32_allowed; }
int64_t memory_allocated(int) { not_built("cuda::memory_allocated"); }
int64_t memory_reserved(int) { not_built("cuda::memory_reserved"); }
}  // namespace cuda

}  // namespace strata
