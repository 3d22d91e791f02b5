// Indexing ops, each forward beside its backward: index_select, gather, scatter_add, masked_fill
// and embedding (with embedding_renorm_). Indices are int64 (index_select and embedding take int32 too, as
// libtorch). Gathers and scatters go through the kernel table; a 1-D index
// is expanded (stride 0) to the iteration shape instead of being copied, and the backward of every
// gather is a scatter_add into zeros (and the other way round), so double backward works.

#include <algorithm>
#include <optional>
#include <vector>

#include "strata/autograd/ops/common.h"

namespace strata {
namespace {

void check_index_dtype(const Tensor& index, const char* op, const char* what = "index") {
  STRATA_CHECK(index.dtype() == kLong, op, ": Expected dtype int64 for ", what, ", got ", index.dtype());
}

/// index as int64 for the ops that take int32 indices too (index_select, embedding), as libtorch.
Tensor long_index(const Tensor& index, const char* op, const char* what = "index") {
  STRATA_CHECK(index.dtype() == kLong || index.dtype() == kInt, op, ": Expected dtype int32 or int64 for ", what,
               ", got ", index.dtype());
  return index.to(kLong);
}

/// The first value of the 0-D or 1-D int64 `index` outside [0, size), if any. Read on the host only;
/// other devices' kernels do their own check.
std::optional<int64_t> first_out_of_range(const Tensor& index, int64_t size) {
  if (!index.is_cpu()) return std::nullopt;
  const int64_t* p = index.data_ptr<int64_t>();
  const int64_t n = index.numel(), step = index.dim() == 0 ? 0 : index.stride(0);
  for (int64_t i = 0; i < n; ++i)
    if (p[i * step] < 0 || p[i * step] >= size) return p[i * step];
  return std::nullopt;
}

/// zeros(sizes) with src added at index along dim (index has src's sizes). Differentiable in src:
/// the backward of gather, index_select and embedding.
Tensor zeros_scatter_add(IntArrayRef sizes, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = zeros(sizes, src.options());
  ops::kernels(out).scatter_add(out, dim, index, src);
  if (auto node = autograd::record("ScatterAddBackward", src, out))
    node->backward = [dim, index = autograd::SavedVariable(index)](const tensor_list& g) {
      return tensor_list{gather(g[0], dim, index.unpack())};
    };
  return out;
}

/// g padded with zeros at the end of each dim up to `sizes`.
Tensor pad_to(Tensor g, IntArrayRef sizes) {
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (g.size(d) == sizes[d]) continue;
    DimVector rest(g.sizes());
    rest[d] = sizes[d] - g.size(d);
    g = cat({g, zeros(rest, g.options())}, d);
  }
  return g;
}

}  // namespace

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index_in) {
  const Tensor index = long_index(index_in, "index_select()");
  STRATA_CHECK(index.dim() <= 1, "index_select(): index must be 0-D or 1-D, got shape ", index.sizes());
  STRATA_CHECK(a.dim() > 0, "index_select(): cannot index a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "index_select()");
  const std::optional<int64_t> bad = first_out_of_range(index, a.size(dim));
  STRATA_CHECK(!bad, "index_select(): index ", *bad, " is out of range for dimension ", dim, " with size ", a.size(dim),
               " (tensor of shape ", a.sizes(), ")");
  DimVector sizes(a.sizes()), index_strides(a.dim(), 0);
  sizes[dim] = index.numel();
  index_strides[dim] = index.dim() == 0 ? 0 : index.stride(0);
  Tensor expanded = make_view(index, sizes, index_strides, index.storage_offset());
  Tensor out = empty(sizes, a.options());
  ops::kernels(a).gather(a, dim, expanded, out);
  if (auto node = autograd::record("IndexSelectBackward", a, out))
    node->backward = [in_sizes = DimVector(a.sizes()), dim,
                      index = autograd::SavedVariable(expanded)](const tensor_list& g) {
      return tensor_list{zeros_scatter_add(in_sizes, dim, index.unpack(), g[0])};
    };
  return out;
}

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_index_dtype(index, "gather()");
  STRATA_CHECK(index.dim() == a.dim(), "gather(): index of shape ", index.sizes(),
               " must have as many dimensions as the input of shape ", a.sizes());
  dim = wrap_dim(dim, a.dim(), "gather()");
  for (int64_t d = 0; d < a.dim(); ++d)
    STRATA_CHECK(d == dim || index.size(d) <= a.size(d), "gather(): index of shape ", index.sizes(),
                 " is larger than the input of shape ", a.sizes(), " at dimension ", d, " (only dimension ", dim,
                 " may be larger)");
  Tensor out = empty(index.sizes(), a.options());
  ops::kernels(a).gather(a, dim, index, out);
  if (auto node = autograd::record("GatherBackward", a, out))
    node->backward = [in_sizes = DimVector(a.sizes()), dim,
                      index = autograd::SavedVariable(index)](const tensor_list& g) {
      return tensor_list{zeros_scatter_add(in_sizes, dim, index.unpack(), g[0])};
    };
  return out;
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_dtype(index, "scatter_add()");
  STRATA_CHECK(src.dtype() == a.dtype(), "scatter_add(): expected src of dtype ", a.dtype(), " like self, got ",
               src.dtype());
  STRATA_CHECK(index.dim() == a.dim() && src.dim() == a.dim(), "scatter_add(): self of shape ", a.sizes(),
               ", index of shape ", index.sizes(), " and src of shape ", src.sizes(),
               " must have the same number of dimensions");
  dim = wrap_dim(dim, a.dim(), "scatter_add()");
  for (int64_t d = 0; d < a.dim(); ++d)
    STRATA_CHECK(index.size(d) <= src.size(d) && (d == dim || index.size(d) <= a.size(d)),
                 "scatter_add(): index of shape ", index.sizes(), " is larger than src of shape ", src.sizes(),
                 " or self of shape ", a.sizes(), " at dimension ", d, " (only self's dimension ", dim,
                 " may be smaller)");
  Tensor out = empty(a.sizes(), a.options());
  ops::kernels(a).copy(a, out);
  // Only the corner of src that index covers is added, as in torch.
  const bool whole_src = src.sizes() == index.sizes();
  Tensor used = whole_src ? src : make_view(src, index.sizes(), src.strides(), src.storage_offset());
  ops::kernels(a).scatter_add(out, dim, index, used);
  if (auto node = autograd::record("ScatterAddBackward", a, src, out))
    node->backward = [dim, index = autograd::SavedVariable(index), src_sizes = DimVector(src.sizes()),
                      a_grad = a.requires_grad(), src_grad = src.requires_grad()](const tensor_list& g) {
      Tensor ga = a_grad ? g[0] : Tensor(), gs;
      if (src_grad) gs = pad_to(gather(g[0], dim, index.unpack()), src_sizes);
      return tensor_list{ga, gs};
    };
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value) {
  STRATA_CHECK(mask.dtype() == kBool, "masked_fill: expected a mask of dtype Bool, got ", mask.dtype());
  STRATA_CHECK(IntArrayRef(broadcast_shapes(mask.sizes(), a.sizes(), "masked_fill")) == a.sizes(),
               "masked_fill: mask of shape ", mask.sizes(), " does not broadcast to the tensor's shape ", a.sizes());
  return where(mask, ops::scalar_like(value, a), a);
}

// ATen's embedding: padding_idx (negative: none) gets no gradient; with scale_grad_by_freq each lookup's
// gradient is divided by the number of lookups of its row in this call.
Tensor embedding(const Tensor& weight, const Tensor& indices_in, int64_t padding_idx, bool scale_grad_by_freq,
                 bool sparse) {
  STRATA_CHECK(!sparse,
               "embedding: sparse gradients are not supported (strata has no sparse tensors); use "
               "sparse=false");
  STRATA_CHECK(weight.dim() == 2, "embedding: expected weight of shape [num_embeddings, embedding_dim], got shape ",
               weight.sizes());
  const Tensor indices = long_index(indices_in, "embedding()", "indices");
  const int64_t rows = weight.size(0), width = weight.size(1);
  Tensor flat = indices.reshape({-1});
  const std::optional<int64_t> bad = first_out_of_range(flat, rows);
  STRATA_CHECK(!bad, "embedding: index ", *bad, " is out of range for num_embeddings V = ", rows, " (weight shape ",
               weight.sizes(), ")");
  // [N] indices read as [N, D] with stride 0 along D; out[n, d] = weight[index[n], d].
  const int64_t n = flat.numel();
  Tensor expanded = make_view(flat, {n, width}, {flat.stride(0), 0}, flat.storage_offset());
  Tensor rows_out = empty({n, width}, weight.options());
  ops::kernels(weight).gather(weight, 0, expanded, rows_out);
  DimVector out_sizes(indices.sizes());
  out_sizes.push_back(width);
  Tensor out = make_view(rows_out, out_sizes, contiguous_strides(out_sizes), rows_out.storage_offset());
  if (auto node = autograd::record("EmbeddingBackward", weight, out))
    node->backward = [rows, width, n, padding_idx, scale_grad_by_freq,
                      index = autograd::SavedVariable(expanded)](const tensor_list& g) {
      const Tensor idx = index.unpack();
      Tensor grad = g[0].reshape({n, width});
      if (padding_idx >= 0) grad = masked_fill(grad, idx.eq(padding_idx), 0);
      if (scale_grad_by_freq) {
        const Tensor column = make_view(idx, {n}, {idx.stride(0)}, idx.storage_offset());
        const Tensor counts = zeros_scatter_add({rows}, 0, column, ones({n}, grad.options()));
        grad = grad / index_select(counts, 0, column).unsqueeze(1);
      }
      // Repeated indices accumulate: scatter_add sums every row that picked them.
      return tensor_list{zeros_scatter_add({rows, width}, 0, idx, grad)};
    };
  return out;
}

// As torch's CPU kernel: the rows that indices pick, each once, found on the host; a row whose norm_type-norm
// exceeds max_norm is scaled in place by max_norm / (norm + 1e-7).
Tensor& embedding_renorm_(Tensor& self, const Tensor& indices, double max_norm, double norm_type) {
  const char* op = "embedding_renorm_";
  STRATA_CHECK(self.dim() == 2, op, ": expected a weight of shape [num_embeddings, embedding_dim], got shape ",
               self.sizes());
  STRATA_CHECK(max_norm >= 0, op, ": max_norm must be non-negative, got ", max_norm);
  const Tensor flat = long_index(indices, op, "indices").reshape({-1}).to(Device(kCPU)).contiguous();
  const std::optional<int64_t> bad = first_out_of_range(flat, self.size(0));
  STRATA_CHECK(!bad, op, ": index ", *bad, " is out of range for num_embeddings V = ", self.size(0));
  const int64_t* p = flat.data_ptr<int64_t>();
  std::vector<int64_t> picked(p, p + flat.numel());
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  if (picked.empty()) return self;
  const Tensor rows = tensor(picked, TensorOptions(kLong).device(self.device()));
  const Tensor norms = self.index_select(0, rows).norm(norm_type, {1}).to(Device(kCPU)).to(kFloat64).contiguous();
  const double* norm = norms.data_ptr<double>();
  for (size_t k = 0; k < picked.size(); ++k)
    if (norm[k] > max_norm) self[picked[k]].mul_(max_norm / (norm[k] + 1e-7));
  return self;
}

// ---- Tensor methods ----

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return strata::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return strata::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return strata::scatter_add(*this, dim, index, src);
}
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const { return strata::masked_fill(*this, mask, value); }

}  // namespace strata
