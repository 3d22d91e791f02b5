// Shape, view and conversion ops, each forward beside its backward.
//
// Note [views]: a view op builds a TensorImpl on its input's storage (make_view) and records a
// node whose backward maps the view's gradient back to the input's geometry: permute back,
// reshape back, sum_to for expand, and for narrow/slice/select write the gradient into zeros
// through the same view (view_scatter). Those maps are strata ops themselves, so double backward
// works. After recording, mark_view links the output to its base (Note [view history] in
// autograd/variable.cpp), so that an in-place op on it rebases the base (Note [CopySlices]).

#include <algorithm>
#include <optional>

#include "strata/autograd/ops/common.h"
#include "strata/tensor/cuda.h"

namespace strata {
namespace {

/// Records the view op `name` producing `view` from `a`, and marks `view` as a view of `a`.
template <class Backward>
Tensor record_view(const char* name, const Tensor& a, const Tensor& view, Backward&& backward) {
  if (auto node = autograd::record(name, a, view)) node->backward = std::forward<Backward>(backward);
  autograd::mark_view(view, a);
  return view;
}

/// zeros(sizes) with `grad` written into view_of(zeros): the backward of narrow, slice and select.
/// Differentiable in grad; its own backward takes the same view of the incoming gradient.
template <class ViewOf>
Tensor view_scatter(const char* name, const Tensor& grad, IntArrayRef sizes, ViewOf view_of) {
  Tensor out = zeros(sizes, grad.options());
  ops::kernels(out).copy(grad, view_of(out));
  if (auto node = autograd::record(name, grad, out))
    node->backward = [view_of](const tensor_list& g) -> tensor_list { return {view_of(g[0])}; };
  return out;
}

/// The view of `a` with sizes `shape` (already inferred) and strides from view_strides.
Tensor view_as_shape(const Tensor& a, IntArrayRef shape, IntArrayRef strides) {
  Tensor out = make_view(a, shape, strides, a.storage_offset());
  return record_view("ViewBackward", a, out, [in_sizes = DimVector(a.sizes())](const tensor_list& g) {
    return tensor_list{g[0].reshape(in_sizes)};
  });
}

/// `sizes` with one -1 inferred so that its product is a.numel(); throws naming op and both shapes.
DimVector infer_size(IntArrayRef sizes, const Tensor& a, const char* op) {
  DimVector shape(sizes);
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      STRATA_CHECK(inferred < 0, op, ": only one dimension can be inferred, got shape ", sizes);
      inferred = static_cast<int64_t>(i);
    } else {
      STRATA_CHECK(shape[i] >= 0, op, ": invalid shape dimension ", shape[i], " in shape ", sizes);
      STRATA_CHECK(!__builtin_mul_overflow(known, shape[i], &known), op, ": shape ", sizes, " has too many elements");
    }
  }
  const int64_t numel = a.numel();
  if (inferred >= 0) {
    STRATA_CHECK(known != 0 || numel != 0, op, ": cannot reshape a tensor of shape ", a.sizes(),
                 " (0 elements) into shape ", sizes, " because the unspecified dimension size -1 can be any value");
    STRATA_CHECK(known != 0 && numel % known == 0, op, ": shape ", sizes, " is invalid for input of shape ", a.sizes(),
                 " (", numel, " elements)");
    shape[inferred] = numel / known;
  } else {
    STRATA_CHECK(known == numel, op, ": shape ", sizes, " (", known, " elements) is invalid for input of shape ",
                 a.sizes(), " (", numel, " elements)");
  }
  return shape;
}

/// Strides that let a tensor of old sizes/strides be viewed with new_sizes, or nullopt when some new
/// dim would span two non-mergeable chunks of the old layout (the algorithm of torch's computeStride).
std::optional<DimVector> view_strides(const Tensor& a, IntArrayRef new_sizes) {
  if (a.is_contiguous()) return contiguous_strides(new_sizes);
  IntArrayRef old_sizes = a.sizes(), old_strides = a.strides();
  DimVector strides(new_sizes.size());
  if (a.numel() == 0) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    // A chunk ends where the next outer dim does not continue it contiguously.
    if (d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

/// Strides of `a` expanded to `sizes` (-1 keeps a dim, new leading dims allowed); throws naming op and both shapes.
DimVector expand_strides(const Tensor& a, DimVector& sizes, const char* op) {
  const int64_t n = static_cast<int64_t>(sizes.size()), lead = n - a.dim();
  STRATA_CHECK(lead >= 0, op, ": cannot expand shape ", a.sizes(), " to shape ", IntArrayRef(sizes),
               ": the target has fewer dimensions");
  DimVector strides(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i < lead) {
      STRATA_CHECK(sizes[i] >= 0, op, ": cannot expand shape ", a.sizes(), " to shape ", IntArrayRef(sizes), ": size ",
                   sizes[i], " is not allowed in a new leading dimension");
      strides[i] = 0;
      continue;
    }
    const int64_t have = a.size(i - lead);
    if (sizes[i] == -1) sizes[i] = have;
    STRATA_CHECK(sizes[i] >= 0, op, ": cannot expand shape ", a.sizes(), " to shape ", IntArrayRef(sizes),
                 ": negative size ", sizes[i], " at dimension ", i);
    STRATA_CHECK(have == sizes[i] || have == 1, op, ": cannot expand shape ", a.sizes(), " to shape ",
                 IntArrayRef(sizes), ": size ", have, " at dimension ", i - lead, " is not 1 and does not match ",
                 sizes[i]);
    strides[i] = have == sizes[i] ? a.stride(i - lead) : 0;
  }
  return strides;
}

/// Where a tensor's elements lie in its storage: sizes, strides, offset (in elements).
struct Geometry {
  DimVector sizes, strides;
  int64_t offset;
  /// One past the last storage element it touches (0 when empty).
  int64_t extent() const {
    int64_t last = offset, step = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 0) return 0;
      STRATA_CHECK(
          !__builtin_mul_overflow(sizes[i] - 1, strides[i], &step) && !__builtin_add_overflow(last, step, &last),
          "as_strided: sizes ", sizes, " and strides ", strides, " reach beyond any storage");
    }
    return last + 1;
  }
  /// The storage positions of its elements in row-major order, as a 1-D int64 tensor.
  Tensor positions(int64_t storage_size, Device device) const {
    Tensor all = arange(storage_size, TensorOptions(kLong).device(device));
    return make_view(all, sizes, strides, offset).reshape({-1});
  }
  /// t's geometry.
  static Geometry of(const Tensor& t) { return {t.sizes(), t.strides(), t.storage_offset()}; }
};

// Note [as_strided backward]: the input and the output are two windows on one storage. A storage
// element's gradient is the sum of the output gradients that read it (scatter_add into a flat
// buffer); each input element takes the gradient of the element it sits on (gather). Inputs whose
// own elements overlap (stride 0) are not handled: each alias would receive the full sum.
auto as_strided_backward(Geometry in_geo, Geometry out_geo) {
  return [in_geo = std::move(in_geo), out_geo = std::move(out_geo)](const tensor_list& g) -> tensor_list {
    const int64_t n = std::max(in_geo.extent(), out_geo.extent());
    Tensor flat = zeros({n}, g[0].options());
    flat = strata::scatter_add(flat, 0, out_geo.positions(n, g[0].device()), g[0].reshape({-1}));
    return {strata::gather(flat, 0, in_geo.positions(n, g[0].device())).reshape(in_geo.sizes)};
  };
}

}  // namespace

// ---- views ----

Tensor Tensor::as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset) const {
  STRATA_CHECK(sizes.size() == strides.size(), "as_strided: got ", sizes.size(), " sizes ", sizes, " but ",
               strides.size(), " strides ", strides);
  for (size_t i = 0; i < sizes.size(); ++i)
    STRATA_CHECK(sizes[i] >= 0 && strides[i] >= 0, "as_strided: sizes and strides must be non-negative, got sizes ",
                 sizes, " and strides ", strides);
  Geometry out_geo{sizes, strides, offset.value_or(storage_offset())};
  STRATA_CHECK(out_geo.offset >= 0, "as_strided: negative storage offset ", out_geo.offset);
  const int64_t storage_size = static_cast<int64_t>(impl().storage->nbytes / element_size());
  STRATA_CHECK(out_geo.extent() <= storage_size, "as_strided: sizes ", sizes, ", strides ", strides,
               " and storage offset ", out_geo.offset, " need a storage of ", out_geo.extent(),
               " elements, but the storage holds ", storage_size);
  Tensor out = make_view(*this, sizes, strides, out_geo.offset);
  return record_view("AsStridedBackward", *this, out, as_strided_backward(Geometry::of(*this), out_geo));
}

// ---- in place through views ----

namespace ops {

void set_view_history(const Tensor& view) {
  const Tensor base(view.impl().view_base);
  auto node = std::make_shared<autograd::LambdaNode>("AsStridedBackward", 1);
  node->next_edges.push_back(autograd::gradient_edge(base));
  node->backward = as_strided_backward(Geometry::of(base), Geometry::of(view));
  autograd::set_history(view, node);
  autograd::ensure_meta(view).base_grad_fn = base.grad_fn().get();
}

namespace {
// Note [CopySlices]: an in-place op on a view writes into its base. The op's node `fn` maps the gradient of
// the view's new values to those of the view's old values and of the op's other operands. The base's new
// history is CopySlices over its old history: the base's gradient with the view's region replaced by what
// fn makes of that region's gradient, and fn's other gradients passed on; the view becomes an as_strided
// view of the base's new history. Written in differentiable ops, so double backward works. As libtorch's.
struct CopySlices final : autograd::Node {
  CopySlices(Geometry base, Geometry view, std::shared_ptr<autograd::Node> fn)
      : base_(std::move(base)), view_(std::move(view)), fn_(std::move(fn)) {}

  tensor_list apply(tensor_list&& grads) override {
    const Tensor& g = grads[0];
    const int64_t n = std::max(base_.extent(), view_.extent());  // storage elements either touches
    const Tensor base_at = base_.positions(n, g.device()), view_at = view_.positions(n, g.device());
    Tensor flat = scatter_add(zeros({n}, g.options()), 0, base_at, g.reshape({-1}));
    tensor_list from_fn = fn_->apply({gather(flat, 0, view_at).reshape(view_.sizes)});
    // The view's region of the base's gradient is what fn gives its old values (zero when nothing).
    const Tensor in_view = scatter_add(zeros({n}, g.options()), 0, view_at, ones({view_at.numel()}, g.options()));
    flat = flat * (1.0 - in_view);
    if (from_fn[0].defined()) flat = scatter_add(flat, 0, view_at, from_fn[0].reshape({-1}));
    tensor_list out{gather(flat, 0, base_at).reshape(base_.sizes)};
    for (size_t i = 1; i < next_edges.size(); ++i) out.push_back(std::move(from_fn[i]));
    return out;
  }
  const char* name() const override { return "CopySlices"; }
  void release_variables() override { fn_->release_variables(); }

 private:
  Geometry base_, view_;
  std::shared_ptr<autograd::Node> fn_;
};
}  // namespace

void rebase_view_history(const Tensor& view, const std::shared_ptr<autograd::Node>& fn) {
  const Tensor base(view.impl().view_base);
  auto copy_slices = std::make_shared<CopySlices>(Geometry::of(base), Geometry::of(view), fn);
  copy_slices->next_edges.push_back(autograd::gradient_edge(base));  // the base's old history
  copy_slices->next_edges.insert(copy_slices->next_edges.end(), fn->next_edges.begin() + 1, fn->next_edges.end());
  autograd::set_history(base, copy_slices);
  set_view_history(view);
}

}  // namespace ops

Tensor Tensor::view(IntArrayRef sizes) const {
  DimVector shape = infer_size(sizes, *this, "view");
  std::optional<DimVector> strides = view_strides(*this, shape);
  STRATA_CHECK(strides,
               "view: view size is not compatible with input tensor's size and stride (at least one "
               "dimension spans across two contiguous subspaces). Use .reshape(...) instead. (input shape ",
               this->sizes(), ", strides ", this->strides(), ", requested shape ", sizes, ")");
  return view_as_shape(*this, shape, *strides);
}

Tensor reshape(const Tensor& a, IntArrayRef sizes) {
  DimVector shape = infer_size(sizes, a, "reshape");
  if (std::optional<DimVector> strides = view_strides(a, shape)) return view_as_shape(a, shape, *strides);
  // A copy, not a view: written contiguously through a view of the output with the input's sizes.
  Tensor out = empty(shape, a.options());
  ops::kernels(a).copy(a, make_view(out, a.sizes(), contiguous_strides(a.sizes()), out.storage_offset()));
  if (auto node = autograd::record("ReshapeBackward", a, out))
    node->backward = [in_sizes = DimVector(a.sizes())](const tensor_list& g) {
      return tensor_list{g[0].reshape(in_sizes)};
    };
  return out;
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  if (a.dim() == 0) return a.reshape({1});
  start_dim = wrap_dim(start_dim, a.dim(), "flatten");
  end_dim = wrap_dim(end_dim, a.dim(), "flatten");
  STRATA_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " cannot come after end_dim ", end_dim);
  if (start_dim == end_dim) return a;
  DimVector shape;
  for (int64_t d = 0; d < start_dim; ++d) shape.push_back(a.size(d));
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= a.size(d);
  shape.push_back(merged);
  for (int64_t d = end_dim + 1; d < a.dim(); ++d) shape.push_back(a.size(d));
  return a.reshape(shape);
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  dim = wrap_dim(dim, a.dim() + 1, "unsqueeze");
  DimVector sizes(a.sizes()), strides(a.strides());
  sizes.insert(dim, 1);
  strides.insert(dim, dim < a.dim() ? a.size(dim) * a.stride(dim) : 1);
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  return record_view("UnsqueezeBackward", a, out,
                     [dim](const tensor_list& g) { return tensor_list{g[0].squeeze(dim)}; });
}

Tensor squeeze(const Tensor& a, std::optional<int64_t> dim) {
  DimVector sizes, strides;
  if (dim) {
    const int64_t d = wrap_dim(*dim, a.dim(), "squeeze");
    sizes = a.sizes();
    strides = a.strides();
    if (a.dim() > 0 && a.size(d) == 1) {
      sizes.erase(d);
      strides.erase(d);
    }
  } else {
    for (int64_t d = 0; d < a.dim(); ++d) {
      if (a.size(d) == 1) continue;
      sizes.push_back(a.size(d));
      strides.push_back(a.stride(d));
    }
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  return record_view("SqueezeBackward", a, out, [in_sizes = DimVector(a.sizes())](const tensor_list& g) {
    return tensor_list{g[0].reshape(in_sizes)};
  });
}

Tensor Tensor::expand(IntArrayRef sizes) const {
  DimVector shape(sizes);
  DimVector strides = expand_strides(*this, shape, "expand");
  Tensor out = make_view(*this, shape, strides, storage_offset());
  return record_view("ExpandBackward", *this, out, [in_sizes = DimVector(this->sizes())](const tensor_list& g) {
    return tensor_list{ops::sum_to(g[0], in_sizes)};
  });
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, a.dim(), "transpose");
  d1 = wrap_dim(d1, a.dim(), "transpose");
  DimVector sizes(a.sizes()), strides(a.strides());
  if (a.dim() > 0) {
    std::swap(sizes[d0], sizes[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  return record_view("TransposeBackward", a, out,
                     [d0, d1](const tensor_list& g) { return tensor_list{g[0].transpose(d0, d1)}; });
}

Tensor t(const Tensor& a) {
  STRATA_CHECK(a.dim() <= 2, "t: expects a tensor with <= 2 dimensions, but got shape ", a.sizes(),
               "; use transpose(d0, d1) or permute(dims)");
  return transpose(a, 0, a.dim() == 2 ? 1 : 0);
}

Tensor permute(const Tensor& a, IntArrayRef dims) {
  STRATA_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), "permute: dims ", dims, " do not have one entry per ",
               "dimension of the tensor of shape ", a.sizes());
  DimVector sizes(dims.size()), strides(dims.size()), inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], a.dim(), "permute");
    STRATA_CHECK(inverse[d] == -1, "permute: dims ", dims, " are not a permutation (dimension ", d, " repeats)");
    inverse[d] = static_cast<int64_t>(i);
    sizes[i] = a.size(d);
    strides[i] = a.stride(d);
  }
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  return record_view("PermuteBackward", a, out, [inverse = std::move(inverse)](const tensor_list& g) {
    return tensor_list{g[0].permute(inverse)};
  });
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  STRATA_CHECK(this->dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  STRATA_CHECK(step > 0, "slice: step must be positive, got ", step);
  dim = wrap_dim(dim, this->dim(), "slice");
  const int64_t n = size(dim);
  // Python's rules: negative counts from the end, then clamp into [0, n] with end >= start.
  int64_t lo = start.value_or(0), hi = end.value_or(n);
  if (lo < 0) lo += n;
  if (hi < 0) hi += n;
  lo = std::clamp<int64_t>(lo, 0, n);
  hi = std::clamp<int64_t>(hi, lo, n);
  DimVector sizes(this->sizes()), strides(this->strides());
  sizes[dim] = (hi - lo + step - 1) / step;
  strides[dim] *= step;
  Tensor out = make_view(*this, sizes, strides, storage_offset() + lo * stride(dim));
  return record_view("SliceBackward", *this, out,
                     [in_sizes = DimVector(this->sizes()), dim, lo, hi, step](const tensor_list& g) {
                       return tensor_list{view_scatter("SliceBackwardBackward", g[0], in_sizes,
                                                       [=](const Tensor& t) { return t.slice(dim, lo, hi, step); })};
                     });
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  STRATA_CHECK(a.dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "narrow");
  const int64_t n = a.size(dim);
  STRATA_CHECK(length >= 0, "narrow: length must be non-negative, got ", length);
  STRATA_CHECK(start >= -n && start <= n, "narrow: start ", start, " out of range for dimension ", dim, " of size ", n,
               " (expected in [", -n, ", ", n, "])");
  if (start < 0) start += n;
  STRATA_CHECK(start + length <= n, "narrow: start (", start, ") + length (", length,
               ") exceeds the size of dimension ", dim, " (", n, ") of the tensor of shape ", a.sizes());
  return a.slice(dim, start, start + length);
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  STRATA_CHECK(a.dim() > 0, "select: cannot be applied to a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "select");
  const int64_t n = a.size(dim);
  STRATA_CHECK(index >= -n && index < n, "select(): index ", index, " out of range for tensor of size ", a.sizes(),
               " at dimension ", dim);
  if (index < 0) index += n;
  DimVector sizes(a.sizes()), strides(a.strides());
  sizes.erase(dim);
  strides.erase(dim);
  Tensor out = make_view(a, sizes, strides, a.storage_offset() + index * a.stride(dim));
  return record_view("SelectBackward", a, out, [in_sizes = DimVector(a.sizes()), dim, index](const tensor_list& g) {
    return tensor_list{
        view_scatter("SelectBackwardBackward", g[0], in_sizes, [=](const Tensor& t) { return t.select(dim, index); })};
  });
}

// ---- several tensors in or out ----

namespace {

/// Views of `a` of the given sizes along dim, all outputs of one node.
tensor_list split_with_sizes(const Tensor& a, IntArrayRef split_sizes, int64_t dim) {
  STRATA_CHECK(a.dim() > 0, "split: cannot split a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    STRATA_CHECK(s >= 0, "split: split sizes must be non-negative, got ", split_sizes);
    total += s;
  }
  STRATA_CHECK(total == a.size(dim), "split: split sizes ", split_sizes, " must sum to ", a.size(dim),
               ", the size of dimension ", dim, " of the tensor of shape ", a.sizes());
  tensor_list outs;
  outs.reserve(split_sizes.size());
  DimVector sizes(a.sizes());
  int64_t offset = a.storage_offset();
  for (int64_t s : split_sizes) {
    sizes[dim] = s;
    outs.push_back(make_view(a, sizes, a.strides(), offset));
    offset += s * a.stride(dim);
  }
  if (auto node = autograd::record("SplitBackward", tensor_list{a}, outs)) {
    // Outputs that received no gradient arrive undefined: they contribute zeros.
    node->backward = [in_sizes = DimVector(a.sizes()), split = split_sizes.vec(), dim,
                      options = a.options()](const tensor_list& g) -> tensor_list {
      if (g.size() == 1) return {g[0]};
      tensor_list parts(g.size());
      DimVector sizes = in_sizes;
      for (size_t i = 0; i < g.size(); ++i) {
        sizes[dim] = split[i];
        parts[i] = g[i].defined() ? g[i] : zeros(sizes, options);
      }
      return {cat(parts, dim)};
    };
  }
  for (const Tensor& o : outs) autograd::mark_view(o, a);
  return outs;
}

}  // namespace

tensor_list split(const Tensor& a, int64_t split_size, int64_t dim) {
  STRATA_CHECK(a.dim() > 0, "split: cannot split a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "split");
  const int64_t n = a.size(dim);
  STRATA_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size,
               " for a dimension of size ", n);
  const int64_t pieces = split_size == 0 ? 1 : std::max<int64_t>(1, (n + split_size - 1) / split_size);
  DimVector sizes(pieces, split_size);
  sizes.back() = n - split_size * (pieces - 1);
  return split_with_sizes(a, sizes, dim);
}

tensor_list chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  STRATA_CHECK(chunks > 0, "chunk: expects `chunks` to be greater than 0, got ", chunks);
  STRATA_CHECK(a.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  dim = wrap_dim(dim, a.dim(), "chunk");
  const int64_t n = a.size(dim);
  if (n == 0) return split_with_sizes(a, DimVector(chunks, 0), dim);
  return split(a, (n + chunks - 1) / chunks, dim);
}

Tensor cat(const tensor_list& tensors, int64_t dim) {
  STRATA_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  // As torch (legacy behaviour): 1-D empty tensors are skipped whatever the others' shapes.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  size_t ref = 0;
  while (ref + 1 < tensors.size() && skipped(tensors[ref])) ++ref;
  const Tensor& first = tensors[ref];
  for (size_t i = 0; i < tensors.size(); ++i)
    STRATA_CHECK(tensors[i].dim() > 0, "cat: zero-dimensional tensor ", i, " cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "cat");
  DimVector sizes(first.sizes());
  sizes[dim] = 0;
  ScalarType type = first.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped(t)) continue;
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < t.dim(); ++d) match = d == dim || t.size(d) == first.size(d);
    STRATA_CHECK(match, "cat: tensor ", i, " has shape ", t.sizes(), " but tensor ", ref, " has shape ", first.sizes(),
                 "; shapes must match except in dimension ", dim);
    STRATA_CHECK(t.device() == first.device(), "cat: tensor ", i, " is on ", t.device(), " but tensor ", ref, " is on ",
                 first.device());
    // Bool < Long < Float < Double: promotion of tensors with dims is the larger type.
    type = promote_types(type, t.dtype());
    sizes[dim] += t.size(dim);
  }
  Tensor out = empty(sizes, first.options().dtype(type));
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    if (skipped(t) || t.size(dim) == 0) continue;
    ops::kernels(out).copy(t, make_view(out, t.sizes(), out.strides(), out.storage_offset() + start * out.stride(dim)));
    start += t.size(dim);
  }
  if (auto node = autograd::record("CatBackward", tensors, tensor_list{out})) {
    struct Piece {
      int64_t start, length;
      ScalarType dtype;
      bool differentiable, skipped;
    };
    std::vector<Piece> pieces;
    pieces.reserve(tensors.size());
    start = 0;
    for (const Tensor& t : tensors) {
      const bool used = !skipped(t);
      pieces.push_back({start, used ? t.size(dim) : 0, t.dtype(), t.is_floating_point(), !used});
      if (used) start += t.size(dim);
    }
    node->backward = [pieces = std::move(pieces), dim](const tensor_list& g) {
      tensor_list grads(pieces.size());
      for (size_t i = 0; i < pieces.size(); ++i) {
        const Piece& p = pieces[i];
        if (!p.differentiable) continue;
        // A skipped empty input still gets its (empty) gradient, as in libtorch.
        grads[i] =
            p.skipped ? empty({0}, g[0].options().dtype(p.dtype)) : g[0].narrow(dim, p.start, p.length).to(p.dtype);
      }
      return grads;
    };
  }
  return out;
}

Tensor stack(const tensor_list& tensors, int64_t dim) {
  STRATA_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 1; i < tensors.size(); ++i)
    STRATA_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: tensor ", i, " has shape ", tensors[i].sizes(),
                 " but tensor 0 has shape ", tensors[0].sizes(), "; all tensors must have the same shape");
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  tensor_list parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

Tensor Tensor::repeat(IntArrayRef repeats) const {
  const int64_t n = static_cast<int64_t>(repeats.size()), lead = n - dim();
  STRATA_CHECK(lead >= 0, "repeat: got ", n, " repeats ", repeats, " for a tensor of shape ", sizes(),
               "; need at least one per dimension");
  // Read through a view [r0, s0, r1, s1, ...] with stride 0 on each r, written contiguously.
  DimVector tiled_sizes(2 * n), tiled_strides(2 * n), out_sizes(n);
  for (int64_t i = 0; i < n; ++i) {
    STRATA_CHECK(repeats[i] >= 0, "repeat: repeats must be non-negative, got ", repeats);
    tiled_sizes[2 * i] = repeats[i];
    tiled_sizes[2 * i + 1] = i < lead ? 1 : size(i - lead);
    tiled_strides[2 * i] = 0;
    tiled_strides[2 * i + 1] = i < lead ? 0 : stride(i - lead);
    out_sizes[i] = tiled_sizes[2 * i] * tiled_sizes[2 * i + 1];
  }
  Tensor out = empty(out_sizes, options());
  ops::kernels(out).copy(make_view(*this, tiled_sizes, tiled_strides, storage_offset()),
                         make_view(out, tiled_sizes, contiguous_strides(tiled_sizes), out.storage_offset()));
  if (auto node = autograd::record("RepeatBackward", *this, out))
    node->backward = [tiled_sizes = std::move(tiled_sizes), in_sizes = DimVector(sizes())](const tensor_list& g) {
      DimVector repeat_dims;
      for (size_t d = 0; d < tiled_sizes.size(); d += 2) repeat_dims.push_back(static_cast<int64_t>(d));
      return tensor_list{g[0].reshape(tiled_sizes).sum(repeat_dims).reshape(in_sizes)};
    };
  return out;
}

// ---- conversion and copies ----

Tensor Tensor::to(Device target, ScalarType type, bool /*non_blocking*/, bool copy) const {
  if (type == dtype() && target == device() && !copy) return *this;
  Tensor out = empty(sizes(), TensorOptions(type).device(target));
  copy_kernels_for(device(), target).copy(*this, out);
  if (is_floating_point() && strata::is_floating_point(type))
    if (auto node = autograd::record("ToCopyBackward", *this, out))
      node->backward = [from_device = device(), from_type = dtype()](const tensor_list& g) {
        return tensor_list{g[0].to(from_device, from_type)};
      };
  return out;
}

Tensor Tensor::to(ScalarType type, bool non_blocking, bool copy) const {
  return to(device(), type, non_blocking, copy);
}
Tensor Tensor::to(Device target, bool non_blocking, bool copy) const { return to(target, dtype(), non_blocking, copy); }
Tensor Tensor::to(const TensorOptions& options, bool non_blocking, bool copy) const {
  STRATA_CHECK(!options.requires_grad(),
               "to(options): options must not set requires_grad (got true); call "
               "requires_grad_() on the result instead");
  return to(options.has_device() ? options.device() : device(), options.has_dtype() ? options.dtype() : dtype(),
            non_blocking, copy);
}
Tensor Tensor::to(const Tensor& other, bool non_blocking, bool copy) const {
  return to(other.device(), other.dtype(), non_blocking, copy);
}
Tensor Tensor::cpu() const { return to(Device(kCPU)); }
Tensor Tensor::cuda(int index) const {
  STRATA_CHECK(index >= -1 && index < 128, "cuda: device index must be in [0, 128) or -1 (current), got ", index);
  return to(index < 0 ? cuda::device() : Device(kCUDA, static_cast<int8_t>(index)));
}

Tensor Tensor::clone() const {
  Tensor out = empty(sizes(), options());
  ops::kernels(*this).copy(*this, out);
  if (auto node = autograd::record("CloneBackward", *this, out))
    node->backward = [](const tensor_list& g) { return tensor_list{g[0]}; };
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor& Tensor::copy_(const Tensor& src) {
  Tensor from = src;
  if (src.sizes() != sizes()) {
    DimVector shape(sizes());
    DimVector strides = expand_strides(src, shape, "copy_");
    from = make_view(src, shape, strides, src.storage_offset());
  }
  // Only a floating-point target can carry the history of what was copied into it.
  const bool records = is_floating_point() && autograd::any_requires_grad({*this, src});
  autograd::check_inplace(*this, "copy_");
  copy_kernels_for(src.device(), device()).copy(ops::unaliased(from, *this), *this);
  if (!records) return *this;
  if (auto node = autograd::record("CopyBackward", tensor_list{*this, src}, {})) {
    // self's old values are overwritten: their gradient is zero (as in libtorch, not absent).
    node->backward = [src_sizes = DimVector(src.sizes()), src_type = src.dtype(), src_device = src.device(),
                      src_float = src.is_floating_point()](const tensor_list& g) {
      if (!src_float) return tensor_list{zeros_like(g[0]), Tensor()};
      return tensor_list{zeros_like(g[0]), ops::sum_to(g[0], src_sizes).to(src_device, src_type)};
    };
    autograd::rebase_history(*this, node);
  }
  return *this;
}

// ---- Tensor methods that forward to the free functions above ----

Tensor Tensor::reshape(IntArrayRef sizes) const { return strata::reshape(*this, sizes); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return strata::flatten(*this, start_dim, end_dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return strata::unsqueeze(*this, dim); }
Tensor Tensor::squeeze() const { return strata::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return strata::squeeze(*this, dim); }
Tensor Tensor::expand_as(const Tensor& o) const { return expand(o.sizes()); }
Tensor Tensor::t() const { return strata::t(*this); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return strata::transpose(*this, d0, d1); }
Tensor Tensor::permute(IntArrayRef dims) const { return strata::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return strata::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return strata::select(*this, dim, index); }
tensor_list Tensor::split(int64_t split_size, int64_t dim) const { return strata::split(*this, split_size, dim); }
tensor_list Tensor::split(IntArrayRef split_sizes, int64_t dim) const {
  return split_with_sizes(*this, split_sizes, dim);
}
tensor_list Tensor::chunk(int64_t chunks, int64_t dim) const { return strata::chunk(*this, chunks, dim); }

namespace {
// Keeps a where column - row compares with diagonal as `keep` says, else zero: a where over a [rows, cols]
// mask broadcast across the batch dims, so the gradient is masked the same way.
Tensor triangle(const Tensor& a, int64_t diagonal, bool upper, const char* name) {
  STRATA_CHECK(a.dim() >= 2, name, ": input tensor must have at least 2 dimensions, got shape ", a.sizes());
  const TensorOptions index = TensorOptions(kLong).device(a.device());
  Tensor offset = arange(a.size(-1), index).unsqueeze(0) - arange(a.size(-2), index).unsqueeze(1);  // col - row
  Tensor keep = upper ? offset.ge(diagonal) : offset.le(diagonal);
  return where(keep, a, zeros({}, a.options()));
}
}  // namespace

Tensor triu(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, true, "triu"); }
Tensor tril(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, false, "tril"); }

}  // namespace strata
