// CPU kernels: gather and scatter_add along one dim.

#include <algorithm>
#include <limits>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

/// Throws "<op>: index I is out of bounds for dim D with size S" unless every index is in [0, size).
/// Dims where index has stride 0 repeat values and are scanned once (expanded indices stay cheap).
void check_indices(const Tensor& index, int64_t dim, int64_t size, const char* op) {
  STRATA_CHECK(index.dtype() == kLong, op, ": expected a Long index, got ", index.dtype());
  DimVector sizes, strides;
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (index.stride(d) == 0) continue;
    sizes.push_back(index.size(d));
    strides.push_back(index.stride(d));
  }
  if (index.numel() == 0) return;
  auto loop = make_loop<1>(sizes, {static_cast<char*>(index.data_ptr())}, {strides.data()}, {sizeof(int64_t)});
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  run_range(loop, 0, loop.numel, [&](char* const* d, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = *reinterpret_cast<const int64_t*>(d[0] + i * s[0]);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  });
  const int64_t bad = lo < 0 ? lo : hi;
  STRATA_CHECK(lo >= 0 && hi < size, op, ": index ", bad, " is out of bounds for dim ", dim, " with size ", size);
}

}  // namespace

void CpuKernels::gather(const Tensor& in, int64_t dim, const Tensor& index, const Tensor& out) const {
  if (in.dim() == 0) return gather(as_1d(in), dim, as_1d(index), as_1d(out));
  dim = wrap_dim(dim, in.dim(), "gather");
  check_index_operands(index, in, out, dim, "gather");
  check_indices(index, dim, in.size(dim), "gather");
  if (in_float32(*this, {&in, &index}, {&out}, [&](const tensor_list& t) { gather(t[0], dim, t[1], t[2]); })) return;
  DimVector in_strides = strides_without(in, dim);
  visit_dtype(in.dtype(), [&]<class T>() {
    const int64_t step = in.stride(dim) * static_cast<int64_t>(sizeof(T));
    auto loop = make_loop<3>(
        index.sizes(),
        {static_cast<char*>(out.data_ptr()), static_cast<char*>(index.data_ptr()), static_cast<char*>(in.data_ptr())},
        {out.strides().data(), index.strides().data(), in_strides.data()}, {sizeof(T), sizeof(int64_t), sizeof(T)});
    for_each(loop, [step](char* const* d, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T) && s[1] == sizeof(int64_t) && s[2] == 0) {
        // One source row read through a run of indices (index_select along the last dim, 1-D gathers):
        // typed pointers let the compiler vectorise the reads.
        T* out = reinterpret_cast<T*>(d[0]);
        const int64_t* index = reinterpret_cast<const int64_t*>(d[1]);
        const T* row = reinterpret_cast<const T*>(d[2]);
        const int64_t stride = step / static_cast<int64_t>(sizeof(T));
        for (int64_t i = 0; i < n; ++i) out[i] = row[index[i] * stride];
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = *reinterpret_cast<const int64_t*>(d[1] + i * s[1]);
        *reinterpret_cast<T*>(d[0] + i * s[0]) = *reinterpret_cast<const T*>(d[2] + i * s[2] + j * step);
      }
    });
  });
}

void CpuKernels::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) const {
  if (out.dim() == 0) return scatter_add(as_1d(out), dim, as_1d(index), as_1d(src));
  dim = wrap_dim(dim, out.dim(), "scatter_add");
  check_index_operands(index, out, src, dim, "scatter_add");
  check_indices(index, dim, out.size(dim), "scatter_add");
  if (in_float32(
          *this, {&index, &src}, {&out}, [&](const tensor_list& t) { scatter_add(t[2], dim, t[0], t[1]); },
          OutputUse::kReadWrite))
    return;
  STRATA_CHECK(out.dtype() != kBool, "scatter_add does not support ", out.dtype());
  if (index.numel() == 0) return;
  DimVector out_strides = strides_without(out, dim);
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      const int64_t step = out.stride(dim) * static_cast<int64_t>(sizeof(T));
      auto loop = make_loop<3>(index.sizes(),
                               {static_cast<char*>(out.data_ptr()), static_cast<char*>(index.data_ptr()),
                                static_cast<char*>(src.data_ptr())},
                               {out_strides.data(), index.strides().data(), src.strides().data()},
                               {sizeof(T), sizeof(int64_t), sizeof(T)});
      auto add = [step](char* const* d, const int64_t* s, int64_t n) {
        if (s[0] == 0 && s[1] == sizeof(int64_t) && s[2] == sizeof(T)) {
          // A run of values added into one row (index_add along the last dim, the 1-D scatters behind the
          // backward of views).
          T* row = reinterpret_cast<T*>(d[0]);
          const int64_t* index = reinterpret_cast<const int64_t*>(d[1]);
          const T* src = reinterpret_cast<const T*>(d[2]);
          const int64_t stride = step / static_cast<int64_t>(sizeof(T));
          for (int64_t i = 0; i < n; ++i) row[index[i] * stride] += src[i];
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          const int64_t j = *reinterpret_cast<const int64_t*>(d[1] + i * s[1]);
          *reinterpret_cast<T*>(d[0] + i * s[0] + j * step) += *reinterpret_cast<const T*>(d[2] + i * s[2]);
        }
      };
      // Several positions may add into one element, so threads split the work only by whole inner runs
      // and only when every outer dim moves the destination: then no two runs touch the same element.
      const int inner = loop.ndim - 1;
      bool disjoint_runs = inner > 0;
      for (int d = 0; d < inner; ++d) disjoint_runs = disjoint_runs && loop.strides[d][0] != 0;
      const int64_t runs = loop.numel / loop.sizes[inner], len = loop.sizes[inner];
      if (disjoint_runs && use_threads(loop.numel)) {
        parallel_for(runs, true, [&](int64_t r) { run_range(loop, r * len, (r + 1) * len, add); });
      } else {
        run_range(loop, 0, loop.numel, add);
      }
    }
  });
}

}  // namespace strata::cpu
