#pragma once
// CUDA devices, as torch::cuda: what is visible, and waiting for queued work. Tensors move with
// tensor.to(Device(kCUDA, i)) or TensorOptions().device(...); every op then runs on the device's
// current stream. A build without CUDA answers is_available() false and device_count() 0.
//
//   if (strata::cuda::is_available()) {
//     auto x = strata::randn({1024, 1024}, strata::TensorOptions().device(strata::Device(strata::kCUDA, 0)));
//     auto y = x.matmul(x);
//     strata::cuda::synchronize();          // y's kernels have finished
//     float first = y[0][0].item<float>();  // item() copies to the host (and waits) by itself
//   }

#include <cstdint>

#include "strata/tensor/dtype.h"

/// The CUDA device API, as torch.cuda: availability, devices, synchronisation, TF32 and memory figures.
namespace strata::cuda {

/// True when strata was built with CUDA and at least one GPU is visible.
bool is_available();
/// Number of visible GPUs; 0 without CUDA or without a driver.
int device_count();
/// Blocks until all work queued on `device` (the current device when -1) has finished.
void synchronize(int device = -1);
/// The device CUDA work of this thread goes to when a tensor does not say (torch.cuda.current_device()).
int current_device();
/// The current device as a Device, Device(kCUDA, current_device()): where this rank's CUDA tensors go.
inline Device device() { return Device(kCUDA, static_cast<int8_t>(current_device())); }
/// Makes `device` current for this thread (torch.cuda.set_device).
void set_device(int device);
/// Lets float32 matmuls use TensorFloat-32 (torch.backends.cuda.matmul.allow_tf32); off by default.
void set_allow_tf32(bool allow);
/// Whether float32 matmuls may use TensorFloat-32.
bool allow_tf32();
/// Bytes of `device`'s memory held by live tensors (torch.cuda.memory_allocated).
int64_t memory_allocated(int device = -1);
/// Bytes the caching allocator holds from the driver on `device`, in use or cached (torch.cuda.memory_reserved).
int64_t memory_reserved(int device = -1);

}  // namespace strata::cuda
