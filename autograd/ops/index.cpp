// Indexing ops, each forward beside its backward: index_select, gather, scatter_add, masked_fill
// and embedding. Indices are int64 (index_select and embedding take int32 too, as libtorch). Gathers and scatters go through the kernel table; a 1-D index
// is expanded (stride 0) to the iteration shape instead of being copied, and the backward of every
// gather is a scatter_add into zeros (and the other way round), so double backward works.

#include <optional>

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

Tensor embedding(const Tensor& weight, const Tensor& indices_in) {
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
    node->backward = [rows, width, n, index = autograd::SavedVariable(expanded)](const tensor_list& g) {
      // Repeated indices accumulate: scatter_add sums every row that picked them.
      return tensor_list{zeros_scatter_add({rows, width}, 0, index.unpack(), g[0].reshape({n, width}))};
    };
  return out;
}

// ---- Tensor methods ----

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return strata::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return strata::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return strata::scatter_add(*this, dim, index, src);
}
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const { return strata::masked_fill(*this, mask, value); }

}  // namespace strata
