// Matrix products: matmul (numpy semantics), mm, bmm.
//
// The forward hands the kernel [B, M, K] and [B, K, N] views of the operands as they are
// (transposed, sliced, or with a stride-0 broadcast batch dim); it copies an operand only when
// its broadcast batch dims cannot be described by one stride. The backward is two more matmuls,
// g @ b^T and a^T @ g, on transposed views, so it copies nothing either.

#include <optional>
#include <utility>

#include "strata/autograd/ops/common.h"

namespace strata {
namespace {

/// Size and stride of dims [begin, end) merged into one dim, or nullopt when their strides do not allow it.
std::optional<std::pair<int64_t, int64_t>> merge_dims(IntArrayRef sizes, IntArrayRef strides, size_t begin,
                                                      size_t end) {
  int64_t size = 1, stride = 0;
  bool seen = false;
  for (size_t i = end; i-- > begin;) {
    if (sizes[i] == 1) continue;
    if (seen && strides[i] != stride * size) return std::nullopt;
    if (!seen) stride = strides[i];
    size *= sizes[i];
    seen = true;
  }
  return std::make_pair(size, stride);
}

/// Operand x as a [B, rows, cols] kernel view over the broadcast batch dims `batch` (x's own batch dims are
/// its leading x_batch_dims). Copies x only when the expanded batch dims cannot be merged into one stride.
Tensor batched_view(const Tensor& x, IntArrayRef batch, int64_t x_batch_dims, int64_t rows, int64_t cols,
                    int64_t row_stride, int64_t col_stride) {
  DimVector sizes(batch), strides(batch.size(), 0);
  const int64_t skip = static_cast<int64_t>(batch.size()) - x_batch_dims;
  for (int64_t i = 0; i < x_batch_dims; ++i)
    if (x.size(i) != 1) strides[skip + i] = x.stride(i);
  if (auto merged = merge_dims(sizes, strides, 0, sizes.size()))
    return make_view(x, {merged->first, rows, cols}, {merged->second, row_stride, col_stride}, x.storage_offset());
  sizes.push_back(rows);
  sizes.push_back(cols);
  strides.push_back(row_stride);
  strides.push_back(col_stride);
  Tensor dense = empty(sizes, x.options());
  ops::kernels(x).copy(make_view(x, sizes, strides, x.storage_offset()), dense);
  return make_view(dense, {multiply(batch), rows, cols}, {rows * cols, cols, 1}, 0);
}

/// Checks what every product requires of its operands.
void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  STRATA_CHECK(a.defined() && b.defined(), op, ": expected defined tensors");
  STRATA_CHECK(a.device() == b.device(), op, ": expected both operands on the same device, got ", a.device(), " and ",
               b.device());
  STRATA_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", a.dtype(), " and ",
               b.dtype());
  STRATA_CHECK(a.dtype() != kBool, op, " does not support Bool tensors");
}

/// The value of a @ b for operands of at least one dim (numpy semantics), without autograd.
Tensor matmul_values(const Tensor& a, const Tensor& b, const char* op) {
  const int64_t da = a.dim(), db = b.dim();
  // A 1-D a is a row [1, K]; a 1-D b is a column [K, 1]; the dim they add is dropped from the result.
  const int64_t m = da == 1 ? 1 : a.size(-2), k = a.size(-1);
  const int64_t kb = db == 1 ? b.size(0) : b.size(-2), n = db == 1 ? 1 : b.size(-1);
  STRATA_CHECK(k == kb, op, ": shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied (", k, " != ", kb, ")");
  const int64_t a_rs = da == 1 ? k * a.stride(-1) : a.stride(-2), a_cs = a.stride(-1);
  const int64_t b_rs = db == 1 ? b.stride(0) : b.stride(-2), b_cs = db == 1 ? 1 : b.stride(-1);

  DimVector out_sizes;
  Tensor a3, b3;
  std::optional<std::pair<int64_t, int64_t>> folded;
  // [..., M, K] @ [K, N]: fold a's batch dims into M, one matrix product instead of a batch of them.
  if (da >= 3 && db <= 2) folded = merge_dims(a.sizes(), a.strides(), 0, da - 1);
  if (folded) {
    out_sizes = DimVector(IntArrayRef(a.sizes().data(), da - 1));
    a3 = make_view(a, {1, folded->first, k}, {0, folded->second, a_cs}, a.storage_offset());
    b3 = make_view(b, {1, k, n}, {0, b_rs, b_cs}, b.storage_offset());
  } else {
    const int64_t a_batch_dims = std::max<int64_t>(da - 2, 0), b_batch_dims = std::max<int64_t>(db - 2, 0);
    out_sizes =
        broadcast_shapes(IntArrayRef(a.sizes().data(), a_batch_dims), IntArrayRef(b.sizes().data(), b_batch_dims), op);
    a3 = batched_view(a, out_sizes, a_batch_dims, m, k, a_rs, a_cs);
    b3 = batched_view(b, out_sizes, b_batch_dims, k, n, b_rs, b_cs);
    if (da > 1) out_sizes.push_back(m);
  }
  if (db > 1) out_sizes.push_back(n);

  Tensor out = empty(out_sizes, a.options());
  if (out.numel() == 0) return out;
  if (k == 0) {
    ops::kernels(a).fill(out, 0);
    return out;
  }
  const int64_t batch = out.numel() / (a3.size(1) * n);
  ops::kernels(a).matmul(a3, b3, make_view(out, {batch, a3.size(1), n}, {a3.size(1) * n, n, 1}, 0));
  return out;
}

/// True when the matrix dims of t are column-major, as for w.t() of a contiguous weight w.
bool column_major(const Tensor& t) { return t.dim() >= 2 && t.stride(-2) == 1 && t.stride(-1) != 1; }

/// Records the backward of out = a @ b: grad_a = g @ b^T and grad_b = a^T @ g, each summed over the batch
/// dims its operand was broadcast along. Written with matmul itself, so second derivatives work.
// Note: gradient layout. For a column-major 2-D operand (linear layers compute x @ w.t()) the gradient
// is computed transposed, grad_b = (g^T @ a)^T, so it has the operand's own layout; the transpose view's
// backward then hands w a contiguous gradient and accumulating it needs no copy (as libtorch's mm).
void record_matmul(const char* name, const Tensor& a, const Tensor& b, const Tensor& out) {
  auto node = autograd::record(name, a, b, out);
  if (!node) return;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const bool a_column_major = a.dim() == 2 && column_major(a), b_column_major = b.dim() == 2 && column_major(b);
  // Either gradient alone is one product: a split backward computes grad_b (the weight's) later.
  auto gradients = [saved_a = need_b ? autograd::SavedVariable(a) : autograd::SavedVariable(),
                    saved_b = need_a ? autograd::SavedVariable(b) : autograd::SavedVariable(),
                    a_sizes = DimVector(a.sizes()), b_sizes = DimVector(b.sizes()), need_a, need_b, a_column_major,
                    b_column_major](const tensor_list& grads, bool want_a, bool want_b) -> tensor_list {
    const size_t da = a_sizes.size(), db = b_sizes.size();
    // Put back the dims that 1-D operands dropped, so that g is [..., M, N].
    Tensor g = grads[0];
    if (db == 1) g = g.unsqueeze(-1);
    if (da == 1) g = g.unsqueeze(-2);
    Tensor grad_a, grad_b;
    if (need_a && want_a) {
      Tensor b = saved_b.unpack();
      if (a_column_major && db == 2) {
        grad_a = matmul(b, g.t()).t();
      } else {
        grad_a = matmul(g, db == 1 ? b.unsqueeze(0) : b.transpose(-1, -2));  // [..., M, K]
        grad_a = da == 1 ? ops::sum_to(grad_a, {1, a_sizes[0]}).reshape(a_sizes) : ops::sum_to(grad_a, a_sizes);
      }
    }
    if (need_b && want_b) {
      Tensor a = saved_a.unpack();
      if (da >= 2 && db <= 2) {
        // One [K, rows] @ [rows, N] product; a's batch dims, if any, fold into the rows and are summed by it.
        Tensor a2 = da == 2 ? a : a.reshape({-1, a_sizes[da - 1]});
        Tensor g2 = da == 2 ? g : g.reshape({-1, g.size(-1)});
        grad_b = b_column_major ? matmul(g2.t(), a2).t() : matmul(a2.t(), g2);
      } else {
        grad_b = matmul(da == 1 ? a.unsqueeze(-1) : a.transpose(-1, -2), g);  // [..., K, N]
        if (db != 1) grad_b = ops::sum_to(grad_b, b_sizes);
      }
      if (db == 1) grad_b = ops::sum_to(grad_b, {b_sizes[0], 1}).reshape(b_sizes);
    }
    return {grad_a, grad_b};
  };
  node->backward = [gradients](const tensor_list& grads) { return gradients(grads, true, true); };
  node->backward_some = [gradients](const tensor_list& grads, const std::vector<bool>& wanted) {
    return gradients(grads, wanted[0], wanted[1]);
  };
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (ops::AutocastArgs cast{"matmul", {a, b}}) return matmul(cast[0], cast[1]);
  check_operands(a, b, "matmul");
  STRATA_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need to be at least 1-D, got shapes ", a.sizes(),
               " and ", b.sizes());
  Tensor out = matmul_values(a, b, "matmul");
  record_matmul("MatmulBackward", a, b, out);
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  if (ops::AutocastArgs cast{"mm", {a, b}}) return mm(cast[0], cast[1]);
  check_operands(a, b, "mm");
  STRATA_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  Tensor out = matmul_values(a, b, "mm");
  record_matmul("MmBackward", a, b, out);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (ops::AutocastArgs cast{"bmm", {a, b}}) return bmm(cast[0], cast[1]);
  check_operands(a, b, "bmm");
  STRATA_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes ", a.sizes(), " and ", b.sizes());
  STRATA_CHECK(a.size(0) == b.size(0), "bmm: expected equal batch sizes, got shapes ", a.sizes(), " and ", b.sizes());
  Tensor out = matmul_values(a, b, "bmm");
  record_matmul("BmmBackward", a, b, out);
  return out;
}

// matmul with weight.t() hands the kernel a column-major view of weight; matmul folds input's batch dims.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (ops::AutocastArgs cast{"linear", {input, weight, bias}}) return linear(cast[0], cast[1], cast[2]);
  STRATA_CHECK(weight.dim() == 2, "linear: expected a 2-D weight [out_features, in_features], got ", weight.sizes());
  STRATA_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), "linear: input of shape ", input.sizes(),
               " does not match weight of shape ", weight.sizes());
  STRATA_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "linear: expected a bias of ",
               "shape [", weight.size(0), "], got ", bias.sizes());
  Tensor y = matmul(input, weight.t());
  return bias.defined() ? y + bias : y;
}

Tensor Tensor::matmul(const Tensor& o) const { return strata::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return strata::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return strata::bmm(*this, o); }

}  // namespace strata
