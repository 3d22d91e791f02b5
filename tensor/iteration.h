#pragma once
// Internal to the kernel tables (tensor/cpu, tensor/cuda): the iteration geometry of N operands
// over one shape. make_loop drops size-1 dims, orders the rest so the dim with the smallest
// strides is innermost (operand 0 decides first, stride-0 operands abstain), and merges
// neighbours that are contiguous for every operand, so most elementwise work becomes one flat
// run. Loop is plain data: the CPU walks it with for_each (cpu/loops.h), CUDA kernels take it
// by value and turn a linear index into byte offsets (cuda/device.cuh).
//
//   auto loop = make_loop<3>({&out, &a, &b});   // out, a, b share out's sizes

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <utility>

#include "strata/tensor/kernels.h"

namespace strata {

/// Most dims of size > 1 an operand may have.
constexpr int kMaxDims = 25;

/// N operands iterated over one shape: pointers, sizes (outermost first) and byte strides.
template <int N>
struct Loop {
  int ndim = 0;       ///< dims after dropping and merging; at least 1 when numel > 0
  int64_t numel = 0;  ///< elements in the iteration shape
  char* data[N];      ///< first element of each operand
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N];  ///< bytes
};

/// A loop over `sizes` with explicit per-operand element strides and element sizes.
template <int N>
Loop<N> make_loop(IntArrayRef sizes, const std::array<char*, N>& data, const std::array<const int64_t*, N>& strides,
                  const std::array<int64_t, N>& elem_sizes) {
  Loop<N> g;
  g.numel = 1;
  for (int64_t s : sizes) g.numel *= s;
  for (int k = 0; k < N; ++k) g.data[k] = data[k];
  if (g.numel == 0) return g;
  int nd = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    STRATA_CHECK(nd < kMaxDims, "tensor kernels support at most ", kMaxDims, " dims of size > 1, got shape ", sizes);
    g.sizes[nd] = sizes[d];
    for (int k = 0; k < N; ++k) g.strides[nd][k] = strides[k][d] * elem_sizes[k];
    ++nd;
  }
  // Insertion sort (stable, ndim is tiny): move a dim inward while its strides are smaller.
  auto inner_first = [&](int outer, int inner) {
    for (int k = 0; k < N; ++k) {
      int64_t a = std::abs(g.strides[outer][k]), b = std::abs(g.strides[inner][k]);
      if (a == 0 || b == 0 || a == b) continue;
      return a < b;
    }
    return false;
  };
  for (int i = 1; i < nd; ++i) {
    for (int j = i; j > 0 && inner_first(j - 1, j); --j) {
      std::swap(g.sizes[j - 1], g.sizes[j]);
      for (int k = 0; k < N; ++k) std::swap(g.strides[j - 1][k], g.strides[j][k]);
    }
  }
  // Merge neighbours that are contiguous for every operand.
  int m = 0;
  for (int d = 1; d < nd; ++d) {
    bool mergeable = true;
    for (int k = 0; k < N; ++k) mergeable &= g.strides[m][k] == g.strides[d][k] * g.sizes[d];
    if (mergeable) {
      g.sizes[m] *= g.sizes[d];
      for (int k = 0; k < N; ++k) g.strides[m][k] = g.strides[d][k];
    } else {
      ++m;
      g.sizes[m] = g.sizes[d];
      for (int k = 0; k < N; ++k) g.strides[m][k] = g.strides[d][k];
    }
  }
  g.ndim = nd == 0 ? 0 : m + 1;
  if (g.ndim == 0) {  // one element
    g.ndim = 1;
    g.sizes[0] = 1;
    for (int k = 0; k < N; ++k) g.strides[0][k] = elem_sizes[k];
  }
  return g;
}

/// Every operand on the first one's device. The ops check this first; the kernels check again because
/// a CUDA kernel handed a host pointer faults the whole context, and every later call with it.
inline void check_one_device(const char* name, std::initializer_list<const Tensor*> ops) {
  const Device device = (*ops.begin())->device();
  for (const Tensor* t : ops)
    STRATA_CHECK(t->device() == device, name, ": expected every operand on ", device, ", got one on ", t->device());
}

/// A loop over tensors sharing ops[0]'s sizes, each with its own strides and dtype.
template <int N>
Loop<N> make_loop(const std::array<const Tensor*, N>& ops) {
  std::array<char*, N> data;
  std::array<const int64_t*, N> strides;
  std::array<int64_t, N> elem_sizes;
  for (int k = 0; k < N; ++k) {
    STRATA_INTERNAL_ASSERT(ops[k]->sizes() == ops[0]->sizes());
    check_one_device("tensor kernels", {ops[0], ops[k]});
    data[k] = static_cast<char*>(ops[k]->data_ptr());
    strides[k] = ops[k]->strides().data();
    elem_sizes[k] = static_cast<int64_t>(ops[k]->element_size());
  }
  return make_loop<N>(ops[0]->sizes(), data, strides, elem_sizes);
}

/// A 0-dim tensor viewed as 1-D of size 1 (for kernels that need a dim); other tensors as they are.
inline Tensor as_1d(const Tensor& t) {
  if (t.dim() != 0) return t;
  const int64_t one = 1;
  return make_view(t, one, one, t.storage_offset());
}

/// The strides of `t` with dim's stride replaced by 0 (gather, scatter_add: the index supplies that coordinate).
inline DimVector strides_without(const Tensor& t, int64_t dim) {
  DimVector s(t.strides());
  s[dim] = 0;
  return s;
}

/// gather's and scatter_add's checks of shapes and dtypes: `data` is gather's in or scatter_add's out,
/// `other` the tensor of index's shape.
inline void check_index_operands(const Tensor& index, const Tensor& data, const Tensor& other, int64_t dim,
                                 const char* op) {
  check_one_device(op, {&data, &index, &other});
  STRATA_CHECK(index.dim() == data.dim() && other.dim() == data.dim(), op, ": expected tensors with ", data.dim(),
               " dims, got index ", index.sizes(), " and ", other.sizes());
  STRATA_CHECK(other.sizes() == index.sizes(), op, ": expected index and ", other.sizes(), " to have one shape, got ",
               index.sizes());
  for (int64_t d = 0; d < data.dim(); ++d)
    STRATA_CHECK(d == dim || index.size(d) <= data.size(d), op, ": index ", index.sizes(),
                 " is larger than the tensor ", data.sizes(), " in dim ", d);
  STRATA_CHECK(data.dtype() == other.dtype(), op, ": expected one dtype, got ", data.dtype(), " and ", other.dtype());
  STRATA_CHECK(index.dtype() == kLong, op, ": expected a Long index, got ", index.dtype());
}

/// reduce's checks of out's dtype and shape (in's sizes with the reduced dims set to 1). Returns out's
/// strides with 0 on the reduced dims: iterating in's shape with them accumulates into out.
inline DimVector check_reduce_operands(ReduceKind op, const Tensor& in, IntArrayRef dims, const Tensor& out) {
  const char* name = to_string(op);
  check_one_device(name, {&in, &out});
  const bool sum_like = op == ReduceKind::Sum || op == ReduceKind::Prod;
  const ScalarType out_dtype = sum_like && is_integral(in.dtype(), true) ? kLong : in.dtype();
  STRATA_CHECK(out.dtype() == out_dtype, name, ": expected a ", out_dtype, " output, got ", out.dtype());
  STRATA_CHECK(out.dim() == in.dim(), name, ": expected an output with ", in.dim(), " dims, got shape ", out.sizes());
  DimVector out_strides(out.strides());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, in.dim(), name);
    if (w < in.dim()) out_strides[w] = 0;  // a 0-dim tensor accepts dim 0 and has nothing to reduce
  }
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t expected = out_strides[d] == 0 ? 1 : in.size(d);
    STRATA_CHECK(out.size(d) == expected, name, ": expected output shape with dims ", dims, " of ", in.sizes(),
                 " set to 1, got ", out.sizes());
  }
  return out_strides;
}

/// arg_reduce's checks: Max or Min, in's dtype for values and Long for indices, both of in's sizes
/// with dim set to 1. Returns dim wrapped.
inline int64_t check_arg_reduce_operands(ReduceKind op, const Tensor& in, int64_t dim, const Tensor& values,
                                         const Tensor& indices) {
  const char* name = to_string(op);
  STRATA_CHECK(op == ReduceKind::Max || op == ReduceKind::Min, "arg_reduce does not support ", name);
  check_one_device(name, {&in, &values, &indices});
  dim = wrap_dim(dim, in.dim(), name);
  STRATA_CHECK(values.dtype() == in.dtype() && indices.dtype() == kLong, name, ": expected ", in.dtype(),
               " values and Long indices, got ", values.dtype(), " and ", indices.dtype());
  bool shaped = values.sizes() == indices.sizes() && values.dim() == in.dim();
  for (int64_t d = 0; shaped && d < in.dim(); ++d) shaped = values.size(d) == (d == dim ? 1 : in.size(d));
  STRATA_CHECK(shaped, name, ": expected values and indices of ", in.sizes(), " with dim ", dim, " set to 1, got ",
               values.sizes(), " and ", indices.sizes());
  return dim;
}

/// sort's checks: in's dtype for values and Long for indices, both of in's sizes with dim set to k at most in's
/// size there. Returns dim wrapped.
inline int64_t check_sort_operands(const Tensor& in, int64_t dim, const Tensor& values, const Tensor& indices) {
  check_one_device("sort", {&in, &values, &indices});
  dim = wrap_dim(dim, in.dim(), "sort");
  STRATA_CHECK(values.dtype() == in.dtype() && indices.dtype() == kLong, "sort: expected ", in.dtype(),
               " values and Long indices, got ", values.dtype(), " and ", indices.dtype());
  bool shaped = values.sizes() == indices.sizes() && values.dim() == in.dim();
  for (int64_t d = 0; shaped && d < in.dim(); ++d)
    shaped = d == dim ? values.size(d) <= in.size(d) : values.size(d) == in.size(d);
  STRATA_CHECK(shaped, "sort: expected values and indices of ", in.sizes(), " with at most ", in.size(dim),
               " elements along dim ", dim, ", got ", values.sizes(), " and ", indices.sizes());
  return dim;
}

/// multinomial's checks: floating probs [N, C] and Long out [N, S].
inline void check_multinomial_operands(const Tensor& probs, const Tensor& out) {
  check_one_device("multinomial", {&probs, &out});
  STRATA_CHECK(probs.is_floating_point() && out.dtype() == kLong,
               "multinomial: expected floating point weights and a Long output, got ", probs.dtype(), " and ",
               out.dtype());
  STRATA_CHECK(probs.dim() == 2 && out.dim() == 2 && probs.size(0) == out.size(0),
               "multinomial: expected weights [N, C] and an output [N, S], got ", probs.sizes(), " and ", out.sizes());
}

/// matmul's checks: 3-D a [B, M, K] and c [B, K, N] multiply into a contiguous out [B, M, N] of their dtype.
inline void check_matmul_operands(const Tensor& a, const Tensor& c, const Tensor& out) {
  check_one_device("matmul", {&a, &c, &out});
  STRATA_CHECK(a.dim() == 3 && c.dim() == 3 && out.dim() == 3, "matmul: expected 3-D operands, got shapes ", a.sizes(),
               ", ", c.sizes(), " and ", out.sizes());
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2);
  STRATA_CHECK(a.size(0) == B && c.size(0) == B && a.size(1) == M && c.size(1) == a.size(2) && c.size(2) == N,
               "matmul: shapes ", a.sizes(), " and ", c.sizes(), " do not multiply into ", out.sizes());
  STRATA_CHECK(out.is_contiguous(), "matmul: expected a contiguous output");
  STRATA_CHECK(a.dtype() == out.dtype() && c.dtype() == out.dtype(), "matmul: expected operands of dtype ", out.dtype(),
               ", got ", a.dtype(), " and ", c.dtype());
}

/// The rnn cell entries' checks (lstm_cell, gru_cell and their backwards): the `gate_operands` [B, gates * H] and
/// the `state_operands` [B, H] on one device, of one floating dtype, contiguous. Returns H.
inline int64_t check_rnn_cell_operands(const char* op, int64_t gates,
                                       std::initializer_list<const Tensor*> gate_operands,
                                       std::initializer_list<const Tensor*> state_operands) {
  const Tensor& first = **state_operands.begin();
  STRATA_CHECK(first.dim() == 2, op, ": expected a state [batch, hidden_size], got shape ", first.sizes());
  const int64_t batch = first.size(0), hidden = first.size(1);
  auto check = [&](const Tensor& t, int64_t width) {
    check_one_device(op, {&first, &t});
    STRATA_CHECK(t.dim() == 2 && t.size(0) == batch && t.size(1) == width, op, ": expected an operand of shape [",
                 batch, ", ", width, "], got ", t.sizes());
    STRATA_CHECK(t.dtype() == first.dtype() && is_floating_point(t.dtype()), op,
                 ": expected floating operands of one dtype, got ", first.dtype(), " and ", t.dtype());
    STRATA_CHECK(t.is_contiguous(), op, ": expected contiguous operands");
  };
  for (const Tensor* t : gate_operands) check(*t, gates * hidden);
  for (const Tensor* t : state_operands) check(*t, hidden);
  return hidden;
}

/// Checks softmax's operands: on one device, contiguous, of the first's [outer, size, inner] sizes and dtype.
inline void check_softmax_operands(const char* op, std::initializer_list<const Tensor*> operands) {
  const Tensor& in = **operands.begin();
  check_one_device(op, operands);
  STRATA_CHECK(in.dim() == 3, op, ": expected [outer, size, inner] operands, got shape ", in.sizes());
  for (const Tensor* t : operands)
    STRATA_CHECK(t->is_contiguous() && t->sizes() == in.sizes() && t->dtype() == in.dtype(), op,
                 ": expected contiguous operands of shape ", in.sizes(), " and dtype ", in.dtype(), ", got ",
                 t->sizes(), " ", t->dtype(), t->is_contiguous() ? "" : " (not contiguous)");
}

/// Checks layer_norm's operands, each undefined one skipped: in [M, N] and `rows` like it, `params` [N] of its
/// dtype, mean and rstd [M] of float32 (float64 for double), all contiguous and on in's device. Returns N.
inline int64_t check_layer_norm_operands(const char* op, const Tensor& in, std::initializer_list<const Tensor*> rows,
                                         std::initializer_list<const Tensor*> params, const Tensor& mean,
                                         const Tensor& rstd) {
  STRATA_CHECK(in.dim() == 2, op, ": expected an input [M, N], got shape ", in.sizes());
  const int64_t M = in.size(0), N = in.size(1);
  const ScalarType stats = in.dtype() == kFloat64 ? kFloat64 : kFloat;
  for (const Tensor* t : rows) {
    if (!t->defined()) continue;
    check_one_device(op, {&in, t});
    STRATA_CHECK(t->is_contiguous() && t->sizes() == in.sizes() && t->dtype() == in.dtype(), op,
                 ": expected contiguous [M, N] operands of ", in.dtype(), " as the input ", in.sizes(), ", got ",
                 t->sizes(), " ", t->dtype());
  }
  for (const Tensor* t : params) {
    if (!t->defined()) continue;
    check_one_device(op, {&in, t});
    STRATA_CHECK(t->is_contiguous() && t->dim() == 1 && t->size(0) == N && t->dtype() == in.dtype(), op,
                 ": expected contiguous [", N, "] weight, bias and their gradients of ", in.dtype(), ", got ",
                 t->sizes(), " ", t->dtype());
  }
  for (const Tensor* t : {&mean, &rstd}) {
    check_one_device(op, {&in, t});
    STRATA_CHECK(t->is_contiguous() && t->dim() == 1 && t->size(0) == M && t->dtype() == stats, op,
                 ": expected mean and rstd [", M, "] of ", stats, ", got ", t->sizes(), " ", t->dtype());
  }
  return N;
}

/// Checks cross entropy's operands but for the target values: logits [N, C], int64 targets [N], weight [C] (or
/// undefined) of the logits' dtype, `row` [N] of it (nll forward, grad_nll backward), `optional_row` [N] likewise or
/// undefined (smooth, grad_smooth), lse [N] of float32 (float64 for double) and, backward, grad_logits of the logits'
/// sizes and dtype; all contiguous and on the logits' device.
inline void check_cross_entropy_operands(const char* op, const Tensor& logits, const Tensor& target,
                                         const Tensor& weight, const Tensor& lse, const Tensor& row,
                                         const Tensor& optional_row, const Tensor& grad_logits = Tensor()) {
  STRATA_CHECK(logits.dim() == 2 && logits.is_contiguous(), op, ": expected contiguous logits [N, C], got ",
               logits.sizes());
  const int64_t N = logits.size(0), C = logits.size(1);
  check_one_device(op, {&logits, &target, &lse});
  STRATA_CHECK(target.dtype() == kLong && target.is_contiguous() && target.dim() == 1 && target.size(0) == N, op,
               ": expected contiguous int64 targets [", N, "], got ", target.sizes(), " ", target.dtype());
  if (weight.defined()) {
    check_one_device(op, {&logits, &weight});
    STRATA_CHECK(weight.is_contiguous() && weight.dim() == 1 && weight.size(0) == C && weight.dtype() == logits.dtype(),
                 op, ": expected a contiguous weight [", C, "] of ", logits.dtype(), ", got ", weight.sizes(), " ",
                 weight.dtype());
  }
  STRATA_CHECK(row.defined(), op, ": expected a defined per-row operand [", N, "], got an undefined tensor");
  for (const Tensor* t : {&row, &optional_row}) {
    if (!t->defined()) continue;
    check_one_device(op, {&logits, t});
    STRATA_CHECK(t->is_contiguous() && t->dim() == 1 && t->size(0) == N && t->dtype() == logits.dtype(), op,
                 ": expected contiguous per-row operands [", N, "] of ", logits.dtype(), ", got ", t->sizes(), " ",
                 t->dtype());
  }
  const ScalarType stats = logits.dtype() == kFloat64 ? kFloat64 : kFloat;
  STRATA_CHECK(lse.is_contiguous() && lse.dim() == 1 && lse.size(0) == N && lse.dtype() == stats, op,
               ": expected lse [", N, "] of ", stats, ", got ", lse.sizes(), " ", lse.dtype());
  if (!grad_logits.defined()) return;
  check_one_device(op, {&logits, &grad_logits});
  STRATA_CHECK(
      grad_logits.is_contiguous() && grad_logits.sizes() == logits.sizes() && grad_logits.dtype() == logits.dtype(), op,
      ": expected a contiguous grad_logits ", logits.sizes(), " of ", logits.dtype(), ", got ", grad_logits.sizes(),
      " ", grad_logits.dtype());
}

/// im2col's pad value in a T that is not floating: -inf and inf stand for T's lowest and highest values (max
/// pooling pads with -inf), NaN for 0.
template <class T>
T integer_pad(double value) {
  if (std::isinf(value)) return value < 0 ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  return std::isnan(value) ? T(0) : static_cast<T>(value);
}

/// The window entries' checks (im2col, col2im): `image` [N, C, H, W] with H, W = window.in and `cols` [N, C, K, L]
/// with K, L = window.offsets(), window.positions(), on one device, of one dtype, contiguous.
inline void check_window_operands(const char* op, const Tensor& image, const Window2d& window, const Tensor& cols) {
  check_one_device(op, {&image, &cols});
  STRATA_CHECK(image.dim() == 4 && image.size(2) == window.in[0] && image.size(3) == window.in[1], op,
               ": expected an image [N, C, ", window.in[0], ", ", window.in[1], "], got ", image.sizes());
  STRATA_CHECK(cols.dim() == 4 && cols.size(0) == image.size(0) && cols.size(1) == image.size(1) &&
                   cols.size(2) == window.offsets() && cols.size(3) == window.positions(),
               op, ": expected columns [", image.size(0), ", ", image.size(1), ", ", window.offsets(), ", ",
               window.positions(), "], got ", cols.sizes());
  STRATA_CHECK(image.dtype() == cols.dtype(), op, ": expected operands of one dtype, got ", image.dtype(), " and ",
               cols.dtype());
  STRATA_CHECK(image.is_contiguous() && cols.is_contiguous(), op, ": expected contiguous operands");
}

}  // namespace strata
