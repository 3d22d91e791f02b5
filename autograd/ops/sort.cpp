// Sorting and sampling: sort, argsort, msort, topk, kthvalue and multinomial.
//
// Every sort runs the kernel table's one sort entry (whole slices, or their first k for topk and
// kthvalue) in one order on every device: NaN is the largest value and equal elements keep their
// input order (Note [sort order] in tensor/cpu/sort.cpp), so `stable` changes nothing and ties
// have one answer. The values are differentiable: the backward scatters the gradient to the
// indices they came from with scatter_add, itself differentiable, so second derivatives work.

#include <cmath>
#include <limits>
#include <string>

#include "strata/autograd/ops/common.h"

namespace strata {
namespace {

/// The first k elements of each slice of a along dim in ascending (or descending) order, and their indices.
std::tuple<Tensor, Tensor> sorted_slices(const Tensor& a, int64_t dim, int64_t k, bool descending,
                                         const char* backward_name) {
  DimVector sizes(a.sizes());
  if (a.dim() > 0) sizes[dim] = k;
  Tensor values = empty(sizes, a.options());
  Tensor indices = empty(sizes, a.options().dtype(kLong));
  ops::kernels(a).sort(a, dim, descending, values, indices);
  if (auto node = autograd::record(backward_name, a, values))
    // Saved through SavedVariable: the caller gets `indices`, and writing into it must not reroute gradients.
    node->backward = [in_sizes = DimVector(a.sizes()), dim,
                      saved = autograd::SavedVariable(indices)](const tensor_list& g) -> tensor_list {
      return {scatter_add(zeros(in_sizes, g[0].options()), dim, saved.unpack(), g[0])};
    };
  return {values, indices};
}

/// The length of a's slices along dim (wrapped already): 1 for a 0-dim tensor.
int64_t slice_length(const Tensor& a, int64_t dim) { return a.dim() == 0 ? 1 : a.size(dim); }

/// Throws unless every weight of probs [N, C] is finite and non-negative and every row sums to more than 0,
/// naming the first row (and category) that is not. One host read when all is well.
void check_distribution(const Tensor& probs, bool one_row) {
  const Tensor summary = stack({amin(probs), amax(probs), amin(sum(probs, {1}))}).to(kDouble).cpu();
  const double* s = summary.data_ptr<double>();
  if (s[0] >= 0 && s[1] < std::numeric_limits<double>::infinity() && s[2] > 0) return;
  const Tensor host = probs.to(kDouble).cpu().contiguous();
  const double* w = host.data_ptr<double>();
  const int64_t rows = host.size(0), categories = host.size(1);
  auto row_of = [&](int64_t n) { return one_row ? std::string() : " of row " + std::to_string(n); };
  for (int64_t n = 0; n < rows; ++n) {
    double row_sum = 0;
    for (int64_t c = 0; c < categories; ++c) {
      const double v = w[n * categories + c];
      STRATA_CHECK(v >= 0 && std::isfinite(v),
                   "multinomial: probability tensor contains either inf, nan or element < 0: category ", c, row_of(n),
                   " is ", v);
      row_sum += v;
    }
    STRATA_CHECK(row_sum > 0, "multinomial: invalid multinomial distribution (sum of probabilities <= 0)",
                 one_row ? std::string() : " in row " + std::to_string(n));
  }
  STRATA_INTERNAL_ASSERT(false);  // the summary found a bad weight or row that the scan did not
}

}  // namespace

// ---- sorting ----

std::tuple<Tensor, Tensor> sort(const Tensor& a, int64_t dim, bool descending) {
  dim = wrap_dim(dim, a.dim(), "sort");
  return sorted_slices(a, dim, slice_length(a, dim), descending, "SortBackward0");
}

std::tuple<Tensor, Tensor> sort(const Tensor& a, std::optional<bool> stable, int64_t dim, bool descending) {
  return sort(a, dim, descending);  // every sort is stable (see the top of this file)
}

Tensor argsort(const Tensor& a, int64_t dim, bool descending) {
  NoGradGuard no_grad;  // indices have no gradient; nothing here should be recorded
  return std::get<1>(sort(a, dim, descending));
}

Tensor msort(const Tensor& a) { return std::get<0>(sort(a, 0)); }

std::tuple<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest, bool sorted) {
  dim = wrap_dim(dim, a.dim(), "topk");
  const int64_t size = slice_length(a, dim);
  STRATA_CHECK(k >= 0 && k <= size, "topk: k (", k, ") is out of range for dimension ", dim, " of size ", size,
               " (input of shape ", a.sizes(), ")");
  // sorted=false leaves the order unspecified in libtorch; here the k come sorted either way.
  return sorted_slices(a, dim, k, largest, "TopkBackward0");
}

std::tuple<Tensor, Tensor> kthvalue(const Tensor& a, int64_t k, int64_t dim, bool keepdim) {
  dim = wrap_dim(dim, a.dim(), "kthvalue");
  const int64_t size = slice_length(a, dim);
  STRATA_CHECK(k >= 1 && k <= size, "kthvalue: k (", k, ") is out of range for dimension ", dim, " of size ", size,
               " (input of shape ", a.sizes(), ")");
  auto [values, indices] = sorted_slices(a, dim, k, false, "KthvalueBackward0");
  if (a.dim() == 0) return {values, indices};
  if (keepdim) return {values.narrow(dim, k - 1, 1), indices.narrow(dim, k - 1, 1)};
  return {values.select(dim, k - 1), indices.select(dim, k - 1)};
}

// ---- sampling ----

Tensor multinomial(const Tensor& a, int64_t num_samples, bool replacement, Generator* gen) {
  STRATA_CHECK(a.dim() == 1 || a.dim() == 2, "multinomial: prob_dist must be 1 or 2 dim, got shape ", a.sizes());
  STRATA_CHECK(a.is_floating_point(), "multinomial: expected a floating point probability tensor, got ", a.dtype());
  STRATA_CHECK(num_samples > 0, "multinomial: cannot sample n_sample <= 0 samples, got ", num_samples);
  const int64_t categories = a.size(-1);
  STRATA_CHECK(replacement || num_samples <= categories, "multinomial: cannot sample n_sample (", num_samples,
               ") > prob_dist.size(-1) (", categories, ") samples without replacement");
  NoGradGuard no_grad;  // samples have no gradient
  const Tensor probs = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor samples;
  if (probs.size(0) == 0) {
    samples = empty({0, num_samples}, a.options().dtype(kLong));
  } else {
    check_distribution(probs, a.dim() == 1);
    Generator& g = gen ? *gen : default_generator();
    if (replacement) {
      samples = empty({probs.size(0), num_samples}, a.options().dtype(kLong));
      ops::kernels(a).multinomial(probs, samples, g.seed(), g.advance(samples.numel()));
    } else {
      // As PyTorch: the num_samples largest p / q with q ~ Exp(1) drawn per category are a draw without
      // replacement (the Gumbel-max trick, exponentiated). q = -log(1 - u) with u uniform in [0, 1); a q of
      // 0 is raised to the smallest normal number so that p = 0 gives 0, never NaN (which sorts first).
      const Tensor p = is_reduced_floating_point(a.dtype()) ? probs.to(kFloat) : probs;
      Tensor q = neg(log(1.0 - rand(p.sizes(), p.options(), &g)));
      q = clamp_min(q, std::numeric_limits<float>::min());
      samples = std::get<1>(topk(p / q, num_samples, 1));
    }
  }
  return a.dim() == 1 ? samples.squeeze(0) : samples;
}

// ---- Tensor methods ----

std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return strata::sort(*this, dim, descending);
}
std::tuple<Tensor, Tensor> Tensor::sort(std::optional<bool> stable, int64_t dim, bool descending) const {
  return strata::sort(*this, stable, dim, descending);
}
Tensor Tensor::argsort(int64_t dim, bool descending) const { return strata::argsort(*this, dim, descending); }
Tensor Tensor::msort() const { return strata::msort(*this); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return strata::topk(*this, k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t dim, bool keepdim) const {
  return strata::kthvalue(*this, k, dim, keepdim);
}
Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Generator* gen) const {
  return strata::multinomial(*this, num_samples, replacement, gen);
}

}  // namespace strata
