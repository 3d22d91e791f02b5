// CPU kernels: sort along one dim, whole slices (sort) or their first k (topk).
//
// Note [sort order]: every sort orders a slice by one strict total order: by value, NaN above
// everything (the largest value: last ascending, first descending, as in PyTorch), and equal values
// (two NaNs too) by index, the smaller first in either direction. That is the order a stable sort
// gives, so std::sort and std::partial_sort with it need no std::stable_sort for stable=true, and
// a tie has one answer: the same for sort and topk (of equal values, the earliest are kept), with or
// without `stable`, on the CPU and on CUDA (whose radix sorts are stable; tensor/cuda/sort.cu).
// +0.0 and -0.0 are equal values, so they keep their input order too.

#include <algorithm>
#include <bit>
#include <vector>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

template <class T>
struct Entry {
  T value;
  int64_t index;
};

/// a before b in Note [sort order], ascending or descending.
template <bool kDescending, class T>
struct Before {
  bool operator()(const Entry<T>& a, const Entry<T>& b) const {
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return kDescending ? a_nan : b_nan;
    if (!a_nan && a.value != b.value) return kDescending ? a.value > b.value : a.value < b.value;
    return a.index < b.index;
  }
};

/// Sorts every slice of `in` along dim into its first k = values.size(dim) elements (partial_sort when k is
/// smaller than the slice). Rows are independent: threads take whole rows.
template <bool kDescending, class T>
void sort_rows(const Tensor& in, int64_t dim, const Tensor& values, const Tensor& indices) {
  const int64_t len = in.size(dim), k = values.size(dim);
  const int64_t in_step = in.stride(dim), value_step = values.stride(dim), index_step = indices.stride(dim);
  // One row per element of values' shape with dim set to 1 (dim drops out of the loop).
  DimVector rows(values.sizes());
  rows[dim] = 1;
  auto loop = make_loop<3>(rows,
                           {static_cast<char*>(values.data_ptr()), static_cast<char*>(indices.data_ptr()),
                            static_cast<char*>(in.data_ptr())},
                           {values.strides().data(), indices.strides().data(), in.strides().data()},
                           {sizeof(T), sizeof(int64_t), sizeof(T)});
  const int64_t cost = len * std::bit_width(static_cast<uint64_t>(len));  // about len log len per row
  for_each(
      loop,
      [&](char* const* d, const int64_t* s, int64_t n) {
        std::vector<Entry<T>> row(len);
        for (int64_t i = 0; i < n; ++i) {
          const T* src = reinterpret_cast<const T*>(d[2] + i * s[2]);
          for (int64_t j = 0; j < len; ++j) row[j] = {src[j * in_step], j};
          if (k < len)
            std::partial_sort(row.begin(), row.begin() + k, row.end(), Before<kDescending, T>{});
          else
            std::sort(row.begin(), row.end(), Before<kDescending, T>{});
          T* value_out = reinterpret_cast<T*>(d[0] + i * s[0]);
          int64_t* index_out = reinterpret_cast<int64_t*>(d[1] + i * s[1]);
          for (int64_t j = 0; j < k; ++j) {
            value_out[j * value_step] = row[j].value;
            index_out[j * index_step] = row[j].index;
          }
        }
      },
      cost);
}

}  // namespace

void CpuKernels::sort(const Tensor& in, int64_t dim, bool descending, const Tensor& values,
                      const Tensor& indices) const {
  if (in.dim() == 0) return sort(as_1d(in), dim, descending, as_1d(values), as_1d(indices));
  dim = check_sort_operands(in, dim, values, indices);
  if (values.numel() == 0) return;
  if (in_float32(*this, {&in}, {&values, &indices},
                 [&](const tensor_list& t) { sort(t[0], dim, descending, t[1], t[2]); }))
    return;
  visit_dtype(in.dtype(), [&]<class T>() {
    if (descending)
      sort_rows<true, T>(in, dim, values, indices);
    else
      sort_rows<false, T>(in, dim, values, indices);
  });
}

}  // namespace strata::cpu
