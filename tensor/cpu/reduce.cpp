// CPU kernels: reductions over dims (reduce) and along one dim with indices (arg_reduce).

#include "strata/tensor/cpu/eigen.h"

#include <limits>
#include <memory>
#include <type_traits>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/cpu/loops.h"

namespace strata::cpu {

namespace {

// Note: deterministic reductions. Every output is combined, in a fixed order, from pieces of
// at most kBlock contiguous elements (row path), from whole reduced columns (column path) or
// element by element (generic path). Threads only decide who computes which piece, so float
// sums are bit-identical for any thread count.
constexpr int64_t kBlock = 4096;
constexpr int64_t kColumns = 1024;

/// Accumulator: int64 for integer sums and products, double for float ones, T for max and min.
template <ReduceKind kOp, class T>
using acc_t = std::conditional_t<kOp == ReduceKind::Sum || kOp == ReduceKind::Prod,
                                 std::conditional_t<std::is_floating_point_v<T>, double, int64_t>, T>;

template <ReduceKind kOp, class A>
constexpr A identity() {
  using L = std::numeric_limits<A>;
  if constexpr (kOp == ReduceKind::Sum)
    return A(0);
  else if constexpr (kOp == ReduceKind::Prod)
    return A(1);
  else if constexpr (kOp == ReduceKind::Max)
    return L::has_infinity ? -L::infinity() : L::lowest();
  else
    return L::has_infinity ? L::infinity() : L::max();
}

/// Combines two partial results; max and min propagate NaN.
template <ReduceKind kOp, class A>
inline A combine(A a, A b) {
  if constexpr (kOp == ReduceKind::Sum)
    return a + b;
  else if constexpr (kOp == ReduceKind::Prod)
    return a * b;
  else if constexpr (kOp == ReduceKind::Max)
    return (a > b || is_nan(a)) ? a : b;
  else
    return (a < b || is_nan(a)) ? a : b;
}

/// Reduces n >= 1 contiguous elements, vectorised by Eigen.
template <ReduceKind kOp, class T, class A>
A reduce_run(const T* p, int64_t n) {
  // bool, and the narrower integers summed into int64: Eigen would accumulate in T.
  if constexpr (std::is_same_v<T, bool> || (std::is_integral_v<T> && !std::is_same_v<T, A>)) {
    A acc = identity<kOp, A>();
    for (int64_t i = 0; i < n; ++i) acc = combine<kOp, A>(acc, static_cast<A>(p[i]));
    return acc;
  } else {
    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> m(p, n);
    if constexpr (kOp == ReduceKind::Sum)
      return static_cast<A>(m.sum());
    else if constexpr (kOp == ReduceKind::Prod)
      return static_cast<A>(m.prod());
    else if constexpr (std::is_floating_point_v<T>) {
      if constexpr (kOp == ReduceKind::Max)
        return m.template maxCoeff<Eigen::PropagateNaN>();
      else
        return m.template minCoeff<Eigen::PropagateNaN>();
    } else {
      if constexpr (kOp == ReduceKind::Max)
        return m.maxCoeff();
      else
        return m.minCoeff();
    }
  }
}

/// Reduces g.data[0] (T) into g.data[1] (OutT); dims where operand 1 has stride 0 are reduced.
template <ReduceKind kOp, class T, class OutT>
void reduce_loop(const Loop<2>& g) {
  using A = acc_t<kOp, T>;
  int nk = 0, nr = 0;  // kept and reduced dims, outermost first
  int64_t ksize[kMaxDims], kin[kMaxDims], kout[kMaxDims], rsize[kMaxDims], rin[kMaxDims];
  int64_t outputs = 1, per_output = 1;
  for (int d = 0; d < g.ndim; ++d) {
    if (g.strides[d][1] == 0 && g.sizes[d] > 1) {
      rsize[nr] = g.sizes[d];
      rin[nr++] = g.strides[d][0];
      per_output *= g.sizes[d];
    } else {
      ksize[nk] = g.sizes[d];
      kin[nk] = g.strides[d][0];
      kout[nk++] = g.strides[d][1];
      outputs *= g.sizes[d];
    }
  }
  const char* in = g.data[0];
  char* out = g.data[1];
  const int inner = g.ndim - 1;
  const bool parallel = use_threads(g.numel);

  if (nr > 0 && g.strides[inner][1] == 0 && g.strides[inner][0] == sizeof(T)) {
    // Row path: the innermost reduced dim is contiguous.
    const int64_t n = rsize[nr - 1];
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const int64_t pieces = per_output / n * blocks;
    auto piece = [&](const char* base, int64_t p) {
      const int64_t row = p / blocks, b = p % blocks;
      const T* ptr = reinterpret_cast<const T*>(base + offset_of(row, nr - 1, rsize, rin)) + b * kBlock;
      return reduce_run<kOp, T, A>(ptr, std::min(kBlock, n - b * kBlock));
    };
    auto write = [&](int64_t o, A acc) {
      *reinterpret_cast<OutT*>(out + offset_of(o, nk, ksize, kout)) = static_cast<OutT>(acc);
    };
    if (!parallel || outputs >= 4 * omp_get_max_threads()) {
      parallel_for(outputs, parallel, [&](int64_t o) {
        const char* base = in + offset_of(o, nk, ksize, kin);
        A acc = identity<kOp, A>();
        for (int64_t p = 0; p < pieces; ++p) acc = combine<kOp, A>(acc, piece(base, p));
        write(o, acc);
      });
    } else {  // few outputs, long reductions: split each output's pieces across threads
      std::unique_ptr<A[]> partial(new A[pieces]);
      for (int64_t o = 0; o < outputs; ++o) {
        const char* base = in + offset_of(o, nk, ksize, kin);
        parallel_for(pieces, true, [&](int64_t p) { partial[p] = piece(base, p); });
        A acc = identity<kOp, A>();
        for (int64_t p = 0; p < pieces; ++p) acc = combine<kOp, A>(acc, partial[p]);
        write(o, acc);
      }
    }
    return;
  }

  if (g.strides[inner][1] != 0 && g.strides[inner][0] == sizeof(T) && g.strides[inner][1] == sizeof(OutT)) {
    // Column path: the innermost dim is kept and contiguous; kColumns outputs accumulate together.
    const int64_t len_all = ksize[nk - 1];
    const int64_t chunks = (len_all + kColumns - 1) / kColumns;
    parallel_for(outputs / len_all * chunks, parallel, [&](int64_t item) {
      const int64_t q = item / chunks, c = item % chunks;
      const int64_t len = std::min(kColumns, len_all - c * kColumns);
      const char* base = in + offset_of(q, nk - 1, ksize, kin) + c * kColumns * sizeof(T);
      A acc[kColumns];
      for (int64_t j = 0; j < len; ++j) acc[j] = identity<kOp, A>();
      for_each_offset(nr, rsize, rin, [&](int64_t off) {
        const T* p = reinterpret_cast<const T*>(base + off);
        for (int64_t j = 0; j < len; ++j) acc[j] = combine<kOp, A>(acc[j], static_cast<A>(p[j]));
      });
      OutT* o = reinterpret_cast<OutT*>(out + offset_of(q, nk - 1, ksize, kout)) + c * kColumns;
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<OutT>(acc[j]);
    });
    return;
  }

  // Generic path: one output at a time, walking the reduced dims through their strides.
  parallel_for(outputs, parallel, [&](int64_t o) {
    const char* base = in + offset_of(o, nk, ksize, kin);
    A acc = identity<kOp, A>();
    for_each_offset(nr, rsize, rin, [&](int64_t off) {
      acc = combine<kOp, A>(acc, static_cast<A>(*reinterpret_cast<const T*>(base + off)));
    });
    *reinterpret_cast<OutT*>(out + offset_of(o, nk, ksize, kout)) = static_cast<OutT>(acc);
  });
}

template <ReduceKind kOp, class T>
void arg_loop(const Tensor& in, int64_t dim, const Tensor& values, const Tensor& indices) {
  const int64_t len = in.size(dim);
  const int64_t step = in.stride(dim) * static_cast<int64_t>(sizeof(T));
  // Iterate over values' shape (dim has size 1 there, so it drops out) and scan dim per element.
  auto loop = make_loop<3>(values.sizes(),
                           {static_cast<char*>(values.data_ptr()), static_cast<char*>(indices.data_ptr()),
                            static_cast<char*>(in.data_ptr())},
                           {values.strides().data(), indices.strides().data(), in.strides().data()},
                           {sizeof(T), sizeof(int64_t), sizeof(T)});
  for_each(
      loop,
      [&](char* const* d, const int64_t* s, int64_t n) {
        if (s[0] == sizeof(T) && s[1] == sizeof(int64_t) && s[2] == sizeof(T)) {
          // A contiguous run of outputs whose inputs are contiguous too (a reduction over an outer dim,
          // e.g. the window offsets of max pooling): scan dim for the whole run at once, which
          // vectorises, keeping the first extreme value and the first NaN as the loop below does.
          T* best = reinterpret_cast<T*>(d[0]);
          int64_t* at = reinterpret_cast<int64_t*>(d[1]);
          const T* first = reinterpret_cast<const T*>(d[2]);
          const int64_t jump = step / static_cast<int64_t>(sizeof(T));
          for (int64_t i = 0; i < n; ++i) {
            best[i] = first[i];
            at[i] = 0;
          }
          for (int64_t j = 1; j < len; ++j) {
            const T* row = first + j * jump;
            for (int64_t i = 0; i < n; ++i) {
              const T b = best[i], v = row[i];
              const bool take = !is_nan(b) && (kOp == ReduceKind::Max ? (v > b || is_nan(v)) : (v < b || is_nan(v)));
              best[i] = take ? v : b;
              at[i] = take ? j : at[i];
            }
          }
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          const char* p = d[2] + i * s[2];
          T best = *reinterpret_cast<const T*>(p);
          int64_t best_j = 0;
          for (int64_t j = 1; j < len && !is_nan(best); ++j) {
            const T v = *reinterpret_cast<const T*>(p + j * step);
            if (kOp == ReduceKind::Max ? (v > best || is_nan(v)) : (v < best || is_nan(v))) {
              best = v;
              best_j = j;
            }
          }
          *reinterpret_cast<T*>(d[0] + i * s[0]) = best;
          *reinterpret_cast<int64_t*>(d[1] + i * s[1]) = best_j;
        }
      },
      len);
}

}  // namespace

void CpuKernels::reduce(ReduceKind op, const Tensor& in, IntArrayRef dims, const Tensor& out) const {
  const char* name = to_string(op);
  const bool sum_like = op == ReduceKind::Sum || op == ReduceKind::Prod;
  const DimVector out_strides = check_reduce_operands(op, in, dims, out);
  if (out.numel() == 0) return;
  if (in_float32(*this, {&in}, {&out}, [&](const tensor_list& t) { reduce(op, t[0], dims, t[1]); })) return;
  if (in.numel() == 0) {
    STRATA_CHECK(sum_like, name, "(): cannot reduce over a zero-size dimension");
    return fill(out, op == ReduceKind::Sum ? 0 : 1);
  }
  auto loop = make_loop<2>(in.sizes(), {static_cast<char*>(in.data_ptr()), static_cast<char*>(out.data_ptr())},
                           {in.strides().data(), out_strides.data()},
                           {static_cast<int64_t>(in.element_size()), static_cast<int64_t>(out.element_size())});
  visit_dtype(in.dtype(), [&]<class T>() {
    using SumT = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;  // integer and bool sums are Long
    switch (op) {
      case ReduceKind::Sum:
        return reduce_loop<ReduceKind::Sum, T, SumT>(loop);
      case ReduceKind::Prod:
        return reduce_loop<ReduceKind::Prod, T, SumT>(loop);
      case ReduceKind::Max:
        return reduce_loop<ReduceKind::Max, T, T>(loop);
      case ReduceKind::Min:
        return reduce_loop<ReduceKind::Min, T, T>(loop);
    }
  });
}

void CpuKernels::arg_reduce(ReduceKind op, const Tensor& in, int64_t dim, const Tensor& values,
                            const Tensor& indices) const {
  const char* name = to_string(op);
  if (in.dim() == 0 && (op == ReduceKind::Max || op == ReduceKind::Min))
    return arg_reduce(op, as_1d(in), 0, as_1d(values), as_1d(indices));
  dim = check_arg_reduce_operands(op, in, dim, values, indices);
  if (values.numel() == 0) return;
  if (in_float32(*this, {&in}, {&values, &indices},
                 [&](const tensor_list& t) { arg_reduce(op, t[0], dim, t[1], t[2]); }))
    return;
  STRATA_CHECK(in.size(dim) > 0, name, "(): cannot reduce over a zero-size dimension");
  visit_dtype(in.dtype(), [&]<class T>() {
    if (op == ReduceKind::Max)
      arg_loop<ReduceKind::Max, T>(in, dim, values, indices);
    else
      arg_loop<ReduceKind::Min, T>(in, dim, values, indices);
  });
}

}  // namespace strata::cpu
