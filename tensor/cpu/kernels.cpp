// The CPU kernel table: memory, the table itself and the thread count. The kernels live in the
// family files beside this one (see cpu_kernels.h).

#include <omp.h>

#include "strata/tensor/cpu/eigen.h"
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/creation.h"

namespace strata {

namespace cpu {

constexpr size_t kAlignment = 64;

// Note [CPU block cache]: a training step frees and reallocates the same buffer sizes every
// iteration, and a 1-element op is dominated by aligned_alloc/free. Blocks up to kMaxCached
// bytes are rounded to a power of two and kept on per-thread free lists, capped at
// kCacheBytes per thread. Larger blocks are rounded to kLargeGrain and reused only at exactly
// that size, up to kLargeCacheBytes per thread: glibc maps and unmaps each of them, and every step
// then pays a page fault per 4 KiB of a convolution's tens of megabytes of columns (a fifth of a
// conv2d step's time before this). Sanitizer builds skip the cache so use-after-free stays visible.
constexpr size_t kMaxCached = size_t{4} << 20;
constexpr size_t kCacheBytes = size_t{64} << 20;
constexpr int kClasses = 17;  // 64 B ... 4 MiB
constexpr size_t kLargeGrain = size_t{64} << 10;
constexpr size_t kLargeCacheBytes = size_t{256} << 20;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUseCache = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUseCache = false;
#else
constexpr bool kUseCache = true;
#endif
#else
constexpr bool kUseCache = true;
#endif

int size_class(size_t nbytes) {
  int c = 0;
  while ((kAlignment << c) < nbytes) ++c;
  return c;
}

struct BlockCache;
// Reached through a plain pointer: tensors freed after this thread's thread_locals are destroyed
// (static tensors at exit) must find no cache rather than a destroyed one.
thread_local BlockCache* current_cache = nullptr;

struct BlockCache {
  std::vector<void*> free[kClasses];
  size_t bytes = 0;
  std::vector<std::pair<size_t, void*>> large;  // (rounded size, block), most recently freed last
  size_t large_bytes = 0;
  BlockCache() { current_cache = this; }
  ~BlockCache() {
    current_cache = nullptr;
    for (auto& list : free)
      for (void* p : list) std::free(p);
    for (auto& [size, p] : large) std::free(p);
  }
};

BlockCache* cache() {
  thread_local BlockCache c;  // constructed on first use, sets current_cache
  return current_cache;
}

void* CpuKernels::allocate(Device, size_t nbytes) const {
  size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (kUseCache && rounded <= kMaxCached) {
    const int c = size_class(rounded);
    if (BlockCache* bc = cache(); bc && !bc->free[c].empty()) {
      void* p = bc->free[c].back();
      bc->free[c].pop_back();
      bc->bytes -= kAlignment << c;
      return p;
    }
    rounded = kAlignment << c;
  } else if (kUseCache) {
    rounded = (rounded + kLargeGrain - 1) / kLargeGrain * kLargeGrain;
    if (BlockCache* bc = cache()) {
      for (size_t i = bc->large.size(); i-- > 0;) {
        if (bc->large[i].first != rounded) continue;
        void* p = bc->large[i].second;
        bc->large.erase(bc->large.begin() + static_cast<std::ptrdiff_t>(i));
        bc->large_bytes -= rounded;
        return p;
      }
    }
  }
  void* p = std::aligned_alloc(kAlignment, rounded);  // wants a multiple of the alignment
  STRATA_CHECK(p, "allocate: out of memory allocating ", nbytes, " bytes");
  return p;
}

void CpuKernels::deallocate(Device, void* p, size_t nbytes) const {
  const size_t rounded = nbytes == 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (kUseCache && rounded <= kMaxCached) {
    const int c = size_class(rounded);
    BlockCache* bc = current_cache;  // never creates a cache on a thread that is exiting
    if (bc && bc->bytes + (kAlignment << c) <= kCacheBytes) {
      bc->free[c].push_back(p);
      bc->bytes += kAlignment << c;
      return;
    }
  } else if (kUseCache) {
    const size_t large = (rounded + kLargeGrain - 1) / kLargeGrain * kLargeGrain;
    BlockCache* bc = current_cache;
    if (bc && large <= kLargeCacheBytes) {
      // The least recently freed blocks make room: sizes a model stopped using do not pin the cache.
      size_t evicted = 0;
      while (bc->large_bytes + large > kLargeCacheBytes) {
        std::free(bc->large[evicted].second);
        bc->large_bytes -= bc->large[evicted++].first;
      }
      bc->large.erase(bc->large.begin(), bc->large.begin() + static_cast<std::ptrdiff_t>(evicted));
      bc->large.emplace_back(large, p);
      bc->large_bytes += large;
      return;
    }
  }
  std::free(p);
}

namespace {

/// A float32 copy of t (a 16-bit float); dims t broadcasts (stride 0) stay stride 0, so an expanded scalar is
/// one element, not a full tensor.
Tensor widened(const Kernels& kernels, const Tensor& t) {
  std::vector<int64_t> compact(t.sizes().begin(), t.sizes().end());
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0) compact[d] = 1;
  const Tensor dense = empty(compact, t.options().dtype(kFloat));
  kernels.copy(make_view(t, compact, t.strides(), t.storage_offset()), dense);
  std::vector<int64_t> strides(dense.strides().begin(), dense.strides().end());
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0) strides[d] = 0;
  return make_view(dense, t.sizes(), strides, 0);
}

}  // namespace

void run_in_float32(const Kernels& kernels, std::initializer_list<const Tensor*> inputs,
                    std::initializer_list<const Tensor*> outputs, OutputUse use,
                    const std::function<void(const tensor_list&)>& f) {
  tensor_list operands;
  for (const Tensor* t : inputs) operands.push_back(any_16_bit_float({t}) ? widened(kernels, *t) : *t);
  for (const Tensor* t : outputs) {
    if (!any_16_bit_float({t}))
      operands.push_back(*t);
    else
      operands.push_back(use == OutputUse::kReadWrite ? widened(kernels, *t)
                                                      : empty(t->sizes(), t->options().dtype(kFloat)));
  }
  f(operands);
  size_t i = inputs.size();
  for (const Tensor* out : outputs) {
    if (any_16_bit_float({out})) kernels.copy(operands[i], *out);
    ++i;
  }
}

}  // namespace cpu

const Kernels& cpu_kernels() {
  static const cpu::CpuKernels kernels;
  return kernels;
}

int max_num_threads() {
  // Past the machine's process limits OpenMP dies creating its threads (100000 does on a 2-core machine), so the
  // bound is fixed well below them yet far above what a kernel can use: 4 per logical CPU, and at least 1024.
  const int64_t cpus = std::thread::hardware_concurrency();
  return static_cast<int>(std::min<int64_t>(omp_get_thread_limit(), std::max<int64_t>(1024, 4 * cpus)));
}

void set_num_threads(int n) {
  STRATA_CHECK(n > 0, "set_num_threads: expected a positive thread count, got ", n);
  STRATA_CHECK(n <= max_num_threads(), "set_num_threads: ", n,
               " threads is more than max_num_threads() = ", max_num_threads(),
               " (4 per logical CPU, at least 1024, within OMP_THREAD_LIMIT)");
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace strata
