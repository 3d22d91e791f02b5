// Attention: scaled_dot_product_attention, the fused kernel's forward beside its backward, and the
// composite of ops that the fused path falls back to and that its double backward is written in.
//
// Note [attention paths]: the fused kernel (Kernels::attention) keeps memory linear in the sequence
// length and runs wherever the device has one for the dtype. The composite runs where it has none
// (the CPU's 16-bit types, CUDA's float64) and where a float attn_mask requires grad (the kernels
// give no mask gradient). Both draw dropout's bits from one stream by each weight's (n, i, j), so
// the two paths give the same result for the same seed; n counts the whole attention's slices when
// a call holds some of its heads (HeadStream), so a tensor-parallel rank drops what one process
// does. Every call records its path in the dispatch log (tensor/dispatch_log.h).

#include <cmath>
#include <limits>

#include "strata/autograd/ops/common.h"
#include "strata/tensor/dispatch_log.h"

namespace strata {

using autograd::SavedVariable;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The shapes of one call: query [batch..., L, E], key [batch..., S, E], value [batch..., S, Ev].
struct Shapes {
  DimVector batch;
  int64_t N = 1, L = 0, S = 0, E = 0, Ev = 0;
};

Shapes check_operands(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                      bool is_causal) {
  STRATA_CHECK(q.defined() && k.defined() && v.defined(), kOp, ": expected defined query, key and value");
  STRATA_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kOp,
               ": expected query, key and value of at least 2 dims ([..., L, E], [..., S, E], [..., S, Ev]), got ",
               q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  STRATA_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), kOp,
               ": expected floating query, key and value of one dtype, got ", q.dtype(), ", ", k.dtype(), " and ",
               v.dtype());
  STRATA_CHECK(k.device() == q.device() && v.device() == q.device(), kOp,
               ": expected query, key and value on one device, got ", q.device(), ", ", k.device(), " and ",
               v.device());
  STRATA_CHECK(q.size(-1) == k.size(-1), kOp, ": query's head dim ", q.size(-1), " differs from key's ", k.size(-1),
               " (query ", q.sizes(), ", key ", k.sizes(), ")");
  STRATA_CHECK(k.size(-2) == v.size(-2), kOp, ": key has ", k.size(-2), " positions but value has ", v.size(-2),
               " (key ", k.sizes(), ", value ", v.sizes(), ")");
  STRATA_CHECK(dropout_p >= 0 && dropout_p <= 1, kOp, ": dropout_p must be in [0, 1], got ", dropout_p);
  Shapes s;
  s.L = q.size(-2), s.S = k.size(-2), s.E = q.size(-1), s.Ev = v.size(-1);
  const auto batch_of = [](const Tensor& t) { return IntArrayRef(t.sizes().data(), t.dim() - 2); };
  try {
    s.batch = broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), kOp), batch_of(v), kOp);
  } catch (const Error&) {
    STRATA_CHECK(false, kOp, ": the batch dims of query ", q.sizes(), ", key ", k.sizes(), " and value ", v.sizes(),
                 " do not broadcast (heads of key and value may be fewer than query's only with enable_gqa)");
  }
  for (int64_t d : s.batch) s.N *= d;
  if (mask.defined()) {
    STRATA_CHECK(!is_causal, kOp, ": attn_mask and is_causal were both given; pass one (is_causal is a mask)");
    STRATA_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(), kOp,
                 ": attn_mask must be bool or of query's dtype ", q.dtype(), ", got ", mask.dtype());
    STRATA_CHECK(mask.device() == q.device(), kOp, ": attn_mask is on ", mask.device(), " but query on ", q.device());
    DimVector scores = s.batch;
    scores.push_back(s.L);
    scores.push_back(s.S);
    bool broadcasts = mask.dim() <= static_cast<int64_t>(scores.size());
    for (int64_t d = 1; broadcasts && d <= mask.dim(); ++d)
      broadcasts = mask.size(-d) == 1 || mask.size(-d) == scores[scores.size() - d];
    STRATA_CHECK(broadcasts, kOp, ": attn_mask of shape ", mask.sizes(), " does not broadcast to the scores' shape ",
                 IntArrayRef(scores), " ([batch..., L, S])");
  }
  return s;
}

/// key or value [..., Hkv, S, D] with each head repeated for its group of query heads: [..., Hq, S, D] (enable_gqa).
Tensor repeat_heads(const Tensor& t, const Tensor& q, const char* name) {
  STRATA_CHECK(q.dim() >= 3 && t.dim() >= 3, kOp, ": enable_gqa needs a heads dim (-3) in query and ", name,
               ", got query ", q.sizes(), " and ", name, " ", t.sizes());
  const int64_t hq = q.size(-3), hkv = t.size(-3);
  STRATA_CHECK(hkv > 0 && hq % hkv == 0, kOp, ": with enable_gqa query's ", hq, " heads must be a multiple of ", name,
               "'s ", hkv, " (query ", q.sizes(), ", ", name, " ", t.sizes(), ")");
  if (hq == hkv) return t;
  DimVector grouped = t.sizes();
  grouped.insert(grouped.size() - 2, hq / hkv);  // [..., Hkv, groups, S, D]
  DimVector heads = t.sizes();
  heads[heads.size() - 3] = hq;
  return t.unsqueeze(-3).expand(grouped).reshape(heads);
}

/// The mask as something added to the scores: a float mask itself, a bool one as 0 where true and -inf where false.
Tensor additive(const Tensor& mask, const Tensor& q) {
  if (!mask.defined() || mask.dtype() != kBool) return mask;
  NoGradGuard no_grad;
  return zeros(mask.sizes(), q.options()).masked_fill(logical_not(mask), -kInf);
}

/// Where the slices' dropout bits lie in the stream (seed, offset): slice n of a call (its batch dims flattened,
/// heads last, `local` of them) is slice (n / local) * total + first + n % local of the whole attention, whose
/// weight (i, j) draws counter offset + (slice * L + i) * S + j as AttentionParams says.
struct HeadStream {
  int64_t local = 1, total = 1, first = 0;

  /// The whole attention's slice count, by which the generator advances, for a call of N slices.
  int64_t whole(int64_t N) const { return local == 0 ? 0 : N / local * total; }

  /// Calls fn(n, count, offset) over runs [n, n + count) that tile [begin, end) and whose bits are one stretch of the
  /// stream from counter `offset`: one run for a whole attention, else at most one batch element's heads per run.
  template <class F>
  void for_each_run(const AttentionParams& params, int64_t L, int64_t S, int64_t begin, int64_t end,
                    const F& fn) const {
    const auto counter = [&](int64_t slice) { return params.offset + static_cast<uint64_t>(slice * L * S); };
    if (total == local || params.dropout_p == 0) return fn(begin, end - begin, counter(begin));
    for (int64_t n = begin; n < end;) {
      const int64_t count = std::min(end, (n / local + 1) * local) - n;
      fn(n, count, counter(n / local * total + first + n % local));
      n += count;
    }
  }
};

/// Each weight's dropout factor over the scores' shape: 1 / (1 - p) where kept, 0 where dropped, drawn as the
/// kernels draw them (AttentionParams): u from uniform() in float32 (float64 for double), kept when u >= p.
Tensor dropout_factors(IntArrayRef shape, const Tensor& q, const AttentionParams& params, const HeadStream& stream) {
  NoGradGuard no_grad;
  Tensor u = empty(shape, TensorOptions(q.dtype() == kDouble ? kDouble : kFloat).device(q.device()));
  const int64_t L = shape[shape.size() - 2], S = shape.back();
  if (u.numel() > 0) {
    const Tensor slices = u.view({-1, L, S});
    stream.for_each_run(params, L, S, 0, slices.size(0), [&](int64_t n, int64_t count, uint64_t offset) {
      ops::kernels(q).uniform(slices.narrow(0, n, count), 0, 1, params.seed, offset);
    });
  }
  const double keep = params.dropout_p < 1 ? 1.0 / (1.0 - params.dropout_p) : 0.0;
  return u.ge(params.dropout_p).to(q.dtype()).mul_(keep);
}

/// softmax over the last dim in which a row of only -inf (a query that sees no key) gives 0s, not NaN, with a
/// gradient of 0 (its scores are replaced before softmax, so no NaN reaches backward either).
Tensor safe_softmax(const Tensor& scores) {
  const Tensor none = all(eq(scores, -kInf), -1, true);
  const Tensor zero = ops::scalar_like(0, scores);
  return where(none, zero, softmax(where(none, zero, scores), -1));
}

/// The attention weights softmax(q k^T scale + mask) [..., L, S], causal or not, as differentiable ops.
Tensor weights(const Tensor& q, const Tensor& k, const Tensor& mask, bool causal, double scale) {
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
  if (mask.defined()) scores = scores + mask;
  if (causal) {
    const TensorOptions opts = TensorOptions(kLong).device(q.device());
    const Tensor rows = arange(q.size(-2), opts).unsqueeze(1), cols = arange(k.size(-2), opts).unsqueeze(0);
    scores = masked_fill(scores, cols.gt(rows), -kInf);
  }
  return safe_softmax(scores);
}

/// The composite: weights, dropout, then the product with v. q, k, v carry the batch dims.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& params,
                 const HeadStream& stream) {
  Tensor p = weights(q, k, mask, params.causal, params.scale);
  if (params.dropout_p > 0) p = p * dropout_factors(p.sizes(), q, params, stream);
  return matmul(p, v);
}

/// The composite's gradients (Note [attention backward] in tensor/cpu/attention.cpp) as differentiable ops, for a
/// backward that builds a graph: the fused kernels have no double backward.
tensor_list composite_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                               const AttentionParams& params, const HeadStream& stream, const Tensor& grad_out) {
  const Tensor p = weights(q, k, mask, params.causal, params.scale);
  Tensor pz = p, dp = matmul(grad_out, v.transpose(-2, -1));
  if (params.dropout_p > 0) {
    const Tensor z = dropout_factors(p.sizes(), q, params, stream);
    pz = p * z;
    dp = dp * z;
  }
  const Tensor ds = p * (dp - sum(dp * p, {-1}, true)) * params.scale;
  return {matmul(ds, k), matmul(ds.transpose(-2, -1), q), matmul(pz.transpose(-2, -1), grad_out)};
}

/// t broadcast to batch + its last two dims and flattened to [N, rows, cols], contiguous (differentiable).
Tensor flatten_batch(const Tensor& t, const Shapes& s) {
  DimVector full = s.batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  return t.expand(full).reshape({s.N, t.size(-2), t.size(-1)}).contiguous();
}

/// Calls fn(first, count, mask_view) over runs of the N slices in which the additive mask, broadcast to
/// [batch..., L, S], is one [count, L, S] view (the kernels' form): one run when its batch dims collapse into one
/// stride (an [L, S] mask, a full [B, H, L, S] one), else one run per index of the dims that do not ([B, 1, L, S]
/// over [B, H]: one per b). No mask: one run.
template <class F>
void for_each_mask_run(const Tensor& mask, const Shapes& s, const F& fn) {
  if (!mask.defined()) return fn(int64_t{0}, s.N, Tensor());
  DimVector full = s.batch;
  full.push_back(s.L);
  full.push_back(s.S);
  const Tensor m = mask.expand(full);
  const int64_t nb = static_cast<int64_t>(s.batch.size());
  // The innermost batch dims [first_inner, nb) that collapse into one stride.
  int64_t first_inner = nb, inner_count = 1, inner_stride = 0;
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (m.size(d) != 1 && inner_count != 1 && m.stride(d) != inner_stride * inner_count) break;
    if (m.size(d) != 1) {
      if (inner_count == 1) inner_stride = m.stride(d);
      inner_count *= m.size(d);
    }
    first_inner = d;
  }
  const int64_t runs = s.N / std::max<int64_t>(inner_count, 1);
  for (int64_t run = 0; run < runs; ++run) {
    int64_t offset = m.storage_offset(), rest = run;
    for (int64_t d = first_inner - 1; d >= 0; --d) {
      offset += (rest % m.size(d)) * m.stride(d);
      rest /= m.size(d);
    }
    fn(run * inner_count, inner_count,
       make_view(m, {inner_count, s.L, s.S}, {inner_stride, m.stride(-2), m.stride(-1)}, offset));
  }
}

/// Calls fn(n, count, mask_view, run_params) over the kernel calls of one attention: the mask's runs, cut where the
/// dropout stream jumps (HeadStream), each with its own first counter.
template <class F>
void for_each_kernel_call(const Tensor& mask, const Shapes& s, const AttentionParams& params, const HeadStream& stream,
                          const F& fn) {
  for_each_mask_run(mask, s, [&](int64_t first, int64_t count, const Tensor& mask_run) {
    stream.for_each_run(params, s.L, s.S, first, first + count, [&](int64_t n, int64_t c, uint64_t offset) {
      AttentionParams run = params;
      run.offset = offset;
      fn(n, c, mask_run.defined() ? mask_run.narrow(0, n - first, c) : Tensor(), run);
    });
  });
}

/// "cpu" or "cuda", as the dispatch log names a device type.
const char* device_type(const Tensor& t) { return t.device().is_cpu() ? "cpu" : "cuda"; }

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa, const AttentionHeads& heads) {
  const Tensor mask = attn_mask.has_value() ? *attn_mask : Tensor();
  if (ops::AutocastArgs cast{kOp, {query, key, value, mask}})
    return scaled_dot_product_attention(cast[0], cast[1], cast[2],
                                        mask.defined() ? std::optional<Tensor>(cast[3]) : std::nullopt, dropout_p,
                                        is_causal, scale, enable_gqa, heads);
  const Tensor k = enable_gqa ? repeat_heads(key, query, "key") : key;
  const Tensor v = enable_gqa ? repeat_heads(value, query, "value") : value;
  const Shapes s = check_operands(query, k, v, mask, dropout_p, is_causal);
  AttentionParams params;
  params.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(s.E)));
  params.causal = is_causal;
  params.dropout_p = dropout_p;
  HeadStream stream;
  if (heads.total != 0) {
    STRATA_CHECK(!s.batch.empty(), kOp, ": heads needs a heads dim (-3) in query, got query ", query.sizes());
    stream = {s.batch[s.batch.size() - 1], heads.total, heads.first};
    STRATA_CHECK(heads.first >= 0 && heads.first + stream.local <= heads.total, kOp, ": query's ", stream.local,
                 " heads from head ", heads.first, " do not fit in the whole attention's ", heads.total,
                 " heads (query ", query.sizes(), ")");
  }
  if (dropout_p > 0) {
    Generator& gen = default_generator();
    params.seed = gen.seed();
    params.offset = gen.advance(static_cast<uint64_t>(stream.whole(s.N) * s.L * s.S));
  }
  const Tensor add_mask = additive(mask, query);
  DimVector out_shape = s.batch;
  out_shape.push_back(s.L);
  out_shape.push_back(s.Ev);

  if (add_mask.defined() && add_mask.requires_grad() && GradMode::is_enabled()) {
    log_dispatch(kOp, "composite: attn_mask requires grad, and the fused kernels give it none");
    return composite(query, k, v, add_mask, params, stream);
  }
  const Tensor q3 = flatten_batch(query, s), k3 = flatten_batch(k, s), v3 = flatten_batch(v, s);
  const Kernels& kernels = ops::kernels(query);
  Tensor out = empty({s.N, s.L, s.Ev}, query.options());
  Tensor lse = empty({s.N, s.L}, query.options().dtype(query.dtype() == kDouble ? kDouble : kFloat));
  bool fused = true;
  {
    NoGradGuard no_grad;
    const Tensor mask_data = add_mask.defined() ? add_mask.detach() : Tensor();
    for_each_kernel_call(mask_data, s, params, stream,
                         [&](int64_t n, int64_t count, const Tensor& mask_run, const AttentionParams& run) {
                           fused = fused && kernels.attention(q3.narrow(0, n, count), k3.narrow(0, n, count),
                                                              v3.narrow(0, n, count), mask_run, run,
                                                              out.narrow(0, n, count), lse.narrow(0, n, count));
                         });
  }
  if (!fused) {
    log_dispatch(kOp, str("composite: no fused ", device_type(query), " kernel for ", query.dtype(), " with head dims ",
                          s.E, " and ", s.Ev));
    return composite(query, k, v, add_mask, params, stream);
  }
  log_dispatch(kOp, str("fused ", device_type(query), " kernel (", query.dtype(), ")"));
  if (auto node = autograd::record("ScaledDotProductAttentionBackward", {q3, k3, v3}, {out}))
    node->backward = [sq = SavedVariable(q3), sk = SavedVariable(k3), sv = SavedVariable(v3),
                      so = SavedVariable(out, true), lse, mask = add_mask.defined() ? add_mask.detach() : Tensor(), s,
                      params, stream](const tensor_list& grads) -> tensor_list {
      const Tensor q = sq.unpack(), k = sk.unpack(), v = sv.unpack(), o = so.unpack();
      const Tensor grad_out = grads[0].defined() ? grads[0] : zeros_like(o);
      if (GradMode::is_enabled()) {  // a graph of the backward: the composite's closed form
        const auto unflatten = [&](const Tensor& t) {
          DimVector shape = s.batch;
          shape.push_back(t.size(1));
          shape.push_back(t.size(2));
          return t.view(shape);
        };
        tensor_list g =
            composite_backward(unflatten(q), unflatten(k), unflatten(v), mask, params, stream, unflatten(grad_out));
        for (Tensor& t : g) t = t.reshape({s.N, t.size(-2), t.size(-1)});
        return g;
      }
      Tensor gq = empty_like(q), gk = empty_like(k), gv = empty_like(v);
      const Tensor go = grad_out.contiguous();
      const Kernels& kernels = ops::kernels(q);
      for_each_kernel_call(
          mask, s, params, stream, [&](int64_t n, int64_t count, const Tensor& mask_run, const AttentionParams& run) {
            const bool done = kernels.attention_backward(
                q.narrow(0, n, count), k.narrow(0, n, count), v.narrow(0, n, count), mask_run, o.narrow(0, n, count),
                lse.narrow(0, n, count), go.narrow(0, n, count), run, gq.narrow(0, n, count), gk.narrow(0, n, count),
                gv.narrow(0, n, count));
            STRATA_CHECK(done, kOp, ": the ", q.device(), " kernel ran attention forward but refused its backward");
          });
      return {gq, gk, gv};
    };
  return out.view(out_shape);
}

}  // namespace strata
