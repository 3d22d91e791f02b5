// CUDA runtime side of strata: the device API of tensor/cuda.h, the status checkers, the stream and
// cuBLAS handle of each device, the allocator and the kernel table.
//
// Note [CUDA allocator]: tensors live in each device's default memory pool, allocated with
// cudaMallocAsync and freed with cudaFreeAsync on current_stream(d), so a freed block is
// reusable by the next op on that stream without a synchronisation. The pool's release
// threshold is raised to UINT64_MAX the first time a device is used, so freed memory stays
// reserved in the pool instead of going back to the driver at each synchronisation: after the
// first step a training loop allocates no new device memory (no cudaMalloc). When an allocation
// does not fit, the pool is trimmed once (after the device's queued frees have run) and the
// allocation retried, as torch's caching allocator frees its cache before reporting OOM.
// A 0-byte request gets a 1-byte block, so every allocation is a distinct non-null pointer.
//
// Streams, cuBLAS handles and their workspaces are created on first use and never destroyed:
// tensors with static lifetime may be freed after the CUDA runtime began unloading, and
// deallocate then only drops the request (the driver reclaims everything at exit).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "strata/tensor/cuda.h"
#include "strata/tensor/cuda/cuda_kernels.h"

namespace strata {

namespace cuda {

namespace {

constexpr int kMaxDevices = 128;  // Device::index is an int8_t
// cuBLAS's recommended workspace on Hopper (CUBLAS_WORKSPACE_CONFIG=:4096:8); torch uses the same.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

std::atomic<bool> tf32_allowed{false};

/// What cudaGetDeviceCount said; the set of visible devices is fixed for the life of a process.
struct Visible {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

const Visible& visible() {
  static const Visible v = [] {
    Visible r;
    r.status = cudaGetDeviceCount(&r.count);
    if (r.status != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: not an error of the next CUDA call
      r.count = 0;
    }
    return r;
  }();
  return v;
}

/// The lazily created objects of one device.
struct DeviceState {
  std::once_flag stream_once, cublas_once;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};

DeviceState& state(int device) {
  static DeviceState states[kMaxDevices];  // trivially destructible: nothing runs at exit
  STRATA_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices);
  return states[device];
}

cudaMemPool_t default_pool(int device) {
  cudaMemPool_t pool = nullptr;
  STRATA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

/// `device`, or the current device when it is negative, checked to be visible.
int resolve_device(int device, const char* op) {
  check_device(device < 0 ? 0 : device, op);
  if (device >= 0) return device;
  int current = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&current));
  return current;
}

int64_t pool_attribute(int device, cudaMemPoolAttr attr, const char* op) {
  const int d = resolve_device(device, op);
  uint64_t value = 0;
  STRATA_CUDA_CHECK(cudaMemPoolGetAttribute(default_pool(d), attr, &value));
  return static_cast<int64_t>(value);
}

}  // namespace

[[noreturn]] void throw_cuda_error(const char* file, int line, const char* call, cudaError_t code) {
  (void)cudaGetLastError();  // the failure is reported here, not again by the next launch check
  ::strata::detail::throw_error(file, line, call, ": CUDA error ", cudaGetErrorName(code), ": ",
                                cudaGetErrorString(code));
}

[[noreturn]] void throw_cublas_error(const char* file, int line, const char* call, cublasStatus_t code) {
  ::strata::detail::throw_error(file, line, call, ": cuBLAS error ", cublasGetStatusName(code), ": ",
                                cublasGetStatusString(code));
}

void check_device(int device, const char* op) {
  const Visible& v = visible();
  if (v.count == 0) [[unlikely]] {
    STRATA_CHECK(v.status == cudaSuccess, op,
                 ": no CUDA device is visible (cudaGetDeviceCount: ", cudaGetErrorName(v.status), ": ",
                 cudaGetErrorString(v.status), ")");
    STRATA_CHECK(false, op, ": no CUDA device is visible (cudaGetDeviceCount found none)");
  }
  STRATA_CHECK(device >= 0 && device < v.count, op, ": cuda:", device, " does not exist, ", v.count,
               v.count == 1 ? " device" : " devices", " visible");
}

DeviceGuard::DeviceGuard(int device) : previous_(-1) {
  int current = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    STRATA_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;  // -1 means nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

cudaStream_t current_stream(int device) {
  DeviceState& s = state(device);
  std::call_once(s.stream_once, [&] {
    DeviceGuard guard(device);
    uint64_t keep_everything = UINT64_MAX;  // Note [CUDA allocator]
    STRATA_CUDA_CHECK(cudaMemPoolSetAttribute(default_pool(device), cudaMemPoolAttrReleaseThreshold, &keep_everything));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  });
  return s.stream;
}

cublasHandle_t cublas_handle(int device) {
  DeviceState& s = state(device);
  std::call_once(s.cublas_once, [&] {
    const cudaStream_t stream = current_stream(device);
    DeviceGuard guard(device);
    cublasHandle_t handle = nullptr;
    STRATA_CUBLAS_CHECK(cublasCreate(&handle));
    // Setting the stream resets the workspace, so the workspace comes second. The workspace is
    // ordered on the same stream as every GEMM that uses it.
    STRATA_CUBLAS_CHECK(cublasSetStream(handle, stream));
    void* workspace = cuda_kernels().allocate(Device(kCUDA, static_cast<int8_t>(device)), kCublasWorkspaceBytes);
    STRATA_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, kCublasWorkspaceBytes));
    // 16-bit GEMMs accumulate and reduce in float32, split-K reductions included.
    STRATA_CUBLAS_CHECK(cublasSetMathMode(
        handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    s.cublas = handle;
  });
  return s.cublas;
}

bool is_available() { return visible().count > 0; }

int device_count() { return visible().count; }

void synchronize(int device) {
  DeviceGuard guard(resolve_device(device, "cuda::synchronize"));
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
}

int current_device() { return resolve_device(-1, "cuda::current_device"); }

void set_device(int device) {
  check_device(device, "cuda::set_device");
  STRATA_CUDA_CHECK(cudaSetDevice(device));
}

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }

bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

int64_t memory_allocated(int device) {
  return pool_attribute(device, cudaMemPoolAttrUsedMemCurrent, "cuda::memory_allocated");
}

int64_t memory_reserved(int device) {
  return pool_attribute(device, cudaMemPoolAttrReservedMemCurrent, "cuda::memory_reserved");
}

void* CudaKernels::allocate(Device device, size_t nbytes) const {
  const int d = device.index;
  check_device(d, "allocate");
  const cudaStream_t stream = current_stream(d);
  DeviceGuard guard(d);
  const size_t bytes = std::max<size_t>(nbytes, 1);
  void* p = nullptr;
  cudaError_t status = cudaMallocAsync(&p, bytes, stream);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());  // lets queued frees return their blocks
    STRATA_CUDA_CHECK(cudaMemPoolTrimTo(default_pool(d), 0));
    status = cudaMallocAsync(&p, bytes, stream);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    STRATA_CHECK(false, "CUDA out of memory: tried to allocate ", nbytes, " bytes on cuda:", d, " (",
                 memory_allocated(d), " bytes in use by strata, ", memory_reserved(d), " reserved)");
  }
  if (status != cudaSuccess) throw_cuda_error(__FILE__, __LINE__, "cudaMallocAsync(&p, bytes, stream)", status);
  return p;
}

void CudaKernels::deallocate(Device device, void* p, size_t) const {
  // Runs inside Storage's destructor, so it must not throw. Nothing here needs a current device
  // (cudaFreeAsync takes the pool from the pointer and orders on the stream), and at process
  // exit the runtime may already be unloading: the failure is then expected and dropped.
  const cudaError_t status = cudaFreeAsync(p, current_stream(device.index));
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  if (status != cudaErrorCudartUnloading && status != cudaErrorContextIsDestroyed)
    std::fprintf(stderr, "strata: cudaFreeAsync on cuda:%d failed: %s: %s\n", device.index, cudaGetErrorName(status),
                 cudaGetErrorString(status));
}

}  // namespace cuda

const Kernels& cuda_kernels() {
  static const cuda::CudaKernels kernels;
  return kernels;
}

}  // namespace strata
