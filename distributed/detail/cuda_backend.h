#pragma once
// Internal: how WORLD gets its backend for CUDA tensors (init()), and the staged backend that moves
// device tensors through a host backend. distributed/README.md says which path is taken and why.

#include <memory>

#include "strata/distributed/process_group.h"

namespace strata::distributed::detail {

/// WORLD's backend for CUDA tensors, made in init() by every rank (a collective over `cpu`, WORLD's CPU
/// backend; rank is WORLD's): NCCL when every rank has a GPU of its own (its communicators are made on first
/// use), else MPI with host staging, as STRATA_CUDA_BACKEND (auto, nccl or mpi) allows. Makes cuda:(local rank % device count) this
/// process's current device. Null in a build without CUDA and when some rank sees no GPU.
std::unique_ptr<Backend> make_cuda_backend(Backend& cpu, int rank);

/// A backend for tensors of `device_type` that copies them to host memory, runs each op on `host` (a CPU
/// backend it owns, where this process is group rank `rank`) and copies the results back. Reductions of
/// Half and BFloat16 run in float32. Its name is host's name + "+staging".
std::unique_ptr<Backend> make_staged_backend(std::unique_ptr<Backend> host, DeviceType device_type, int rank);

}  // namespace strata::distributed::detail
