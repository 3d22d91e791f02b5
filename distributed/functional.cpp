// Differentiable collectives: each op is an autograd::Function whose forward runs a collective and
// whose backward runs the dual collective (the table in functional.h), forward beside backward.
//
// Note [recording across ranks]
// A backward collective needs every rank of the group, also ranks whose own input needs no
// gradient and ranks that got no output. So the ranks agree in the forward whether to record (one
// all_reduce of flags, or the flag in the root's or sender's header), and when they do every rank
// records a node. Function::apply records only where an input requires grad, so each op also takes
// a zero-element dummy leaf that requires grad when the group agreed (MegEngine's _dummy_input;
// undefined otherwise), and apply runs with grad mode on. The real input keeps its edge only where this
// rank wants a gradient for it (grad mode on, input requires grad); the output carries the node as
// grad_fn only where grad mode is on. A rank without an output returns a zero-element token to
// record on instead. The node is registered with autograd::run_in_next_backward, so it runs in the
// next backward() whether or not the rank's loss reaches it. backward() runs nodes latest-created
// first, so every rank runs its collectives in the reverse of their common forward order.
//
// Note [agreeing on gradients]
// In backward a rank may have no gradient for an op's output (its loss does not use it, or it has
// no output). Before communicating, the ranks agree whether any of them has one; when none has,
// the node returns no gradient and nothing is sent. Otherwise ranks without one contribute zeros.
// The same agreement says whether the backward collective records in turn (create_graph), so the
// backward of each op is the differentiable dual op and double backward works.
//
// Note [bad input on one rank]
// An op whose input fails its checks on one rank only must not leave the other ranks waiting in
// the collective. Rootless ops (and reduce_sum, gather) check locally without throwing, tell the
// others in their forward agreement, and then throw on every rank: the failing rank its own
// error, the others an error naming it. broadcast and scatter agree on the root that way first;
// remote_* and the root's own input carry the news in the source's header.
//
// The agreements and headers skip the profiling switches (detail::all_reduce_unswitched,
// broadcast_unswitched): were they switched off, ranks would disagree on what to record and hang.
//
// Collectives along an axis other than 0 are the axis-0 collective wrapped in reshape and permute,
// as in MegEngine; those are differentiable, so their backward follows.

#include "strata/distributed/functional.h"

#include <algorithm>
#include <exception>
#include <functional>

#include "strata/autograd/engine.h"
#include "strata/autograd/function.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/detail/runtime.h"
#include "strata/distributed/tensor_meta.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/cuda.h"

namespace strata::distributed::functional {

namespace {

using autograd::AutogradContext;
using autograd::Function;

/// Whether this rank wants a gradient for t: grad mode is on and t requires grad.
bool wants_grad(const Tensor& t) { return GradMode::is_enabled() && t.defined() && t.requires_grad(); }

/// What the ranks of a group agreed on: whether any has a tensor (a gradient, in backward), and whether any wants
/// the op recorded.
struct Agreement {
  bool any_defined;
  bool record;
};

/// One all_reduce (MAX) of this rank's two flags for t and of whether `check`, op's local input checks (which throw),
/// failed here; when they failed on any rank, throws on every rank (Note [bad input on one rank]).
Agreement agree(const Tensor& t, const Group& group, const char* op = "", const std::function<void()>& check = {}) {
  std::exception_ptr error;
  if (check) {
    try {
      check();
    } catch (const Error&) {
      error = std::current_exception();
    }
  }
  // [defined, wants grad, then whether the checks failed on group rank 0, 1, ...]
  const int n = get_world_size(group);
  Tensor flags = zeros({2 + n}, kLong);
  int64_t* mine = flags.data_ptr<int64_t>();
  mine[0] = t.defined();
  mine[1] = wants_grad(t);
  mine[2 + get_rank(group)] = error != nullptr;
  detail::all_reduce_unswitched(flags, ReduceOp::MAX, group, false);
  if (error) std::rethrow_exception(error);
  const int64_t* f = flags.data_ptr<int64_t>();
  std::string failed;
  int failures = 0;
  for (int r = 0; r < n; ++r)
    if (f[2 + r]) failed += (failures++ ? ", " : "") + std::to_string(get_global_rank(group, r));
  STRATA_CHECK(failures == 0, op, ": global rank", failures > 1 ? "s " : " ", failed, " passed bad input (see ",
               failures > 1 ? "their errors)" : "its error)");
  return {f[0] != 0, f[1] != 0};
}

/// What ranks without a tensor learn from the rank that has it (a root or a sender) before its data.
struct Header {
  bool defined = false;  ///< the source has a tensor; when not, nothing follows
  bool record = false;   ///< the source wants the op recorded
  ScalarType dtype = kFloat;
  DeviceType device_type = kCPU;  ///< each rank receives on its own device of this type
  DimVector sizes = {};
};

Header header_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {true, wants_grad(t), t.dtype(), t.device().type, DimVector(t.sizes())};
}

/// This rank's device of type `type`: the CPU, or the GPU it uses (cuda::current_device()).
Device device_of(DeviceType type) { return type == kCUDA ? cuda::device() : Device(kCPU); }

/// What a rank receiving the source's tensor allocates it with.
TensorOptions options_of(const Header& h) { return TensorOptions(h.dtype).device(device_of(h.device_type)); }

/// Moves the source's header to the other side: `mine` on the source, nullopt elsewhere. Two messages, the number
/// of words first; move(t) sends t from the source and fills it elsewhere. The words are [defined, device type]
/// then, when defined, the tensor's metadata (tensor_meta.h) with `record` as its requires_grad flag.
template <class Move>
Header share_header(const std::optional<Header>& mine, Move&& move) {
  const char* what = "functional: the source's header";
  if (mine) {
    std::vector<int64_t> words{int64_t{mine->defined}, device_type_code(mine->device_type)};
    if (mine->defined) encode_meta({mine->dtype, mine->record, mine->sizes}, words);
    move(tensor({static_cast<int64_t>(words.size())}));
    move(tensor(words));
    return *mine;
  }
  Tensor count = zeros({1}, kLong);
  move(count);
  const int64_t n = count.item<int64_t>();
  STRATA_CHECK(n >= 2 && n <= 5 + kMaxMetaDims, what, ": bad length ", n);
  Tensor received = zeros({n}, kLong);
  move(received);
  const IntArrayRef words(received.data_ptr<int64_t>(), static_cast<size_t>(n));
  if (words[0] == 0) return {};
  Header h{.defined = true, .device_type = device_type_from_code(words[1], what)};
  size_t pos = 2;
  const TensorMeta meta = decode_meta(words, pos, what);
  STRATA_CHECK(pos == words.size(), what, ": ", words.size() - pos, " extra words");
  h.record = meta.requires_grad;
  h.dtype = meta.dtype;
  h.sizes = meta.sizes;
  return h;
}

/// The root's header for its `x` (read on the root only), on every rank of the group.
Header root_header(const Tensor& x, const Group& group, int root) {
  const int src = get_global_rank(group, root);
  auto move = [&](const Tensor& t) { detail::broadcast_unswitched(t, src, group, false); };
  return get_rank(group) == root ? share_header(header_of(x), move) : share_header(std::nullopt, move);
}

/// The non-tensor arguments of a collective's forward.
struct Call {
  Group group = nullptr;        ///< null for WORLD
  int rank = 0;                 ///< the root (a group rank) of rooted ops, the peer (a global rank) of remote ones
  Header header = {};           ///< broadcast, scatter, remote_recv: the source's header
  ReduceOp op = ReduceOp::SUM;  ///< all_reduce_max / all_reduce_min
};

/// Keeps what backward needs of `call` (the group by id: saved_data holds no handles) and of the output `out`
/// (its shape, dtype and device type, for the zeros of ranks without a gradient); returns out.
Tensor save(AutogradContext* ctx, const Call& call, Tensor out) {
  ctx->set_materialize_grads(false);
  ctx->saved_data["group"] = (call.group ? call.group : get_world_group())->id();
  ctx->saved_data["rank"] = call.rank;
  ctx->saved_data["sizes"] = out.sizes().vec();
  ctx->saved_data["dtype"] = dtype_code(out.dtype());
  ctx->saved_data["device_type"] = device_type_code(out.device().type);
  return out;
}

Call saved_call(AutogradContext* ctx) {
  const int64_t id = ctx->saved_data["group"].toInt();
  Group group = detail::find_group(id);
  STRATA_CHECK(group, "functional: a collective recorded on group ", id,
               " runs backward after destroy_process_group destroyed the group");
  return {.group = group, .rank = static_cast<int>(ctx->saved_data["rank"].toInt())};
}

/// What a rank without an output returns from forward, so that apply has an output to record on.
Tensor token() { return empty({0}); }

/// backward's gradients for forward's (x, dummy, call).
tensor_list gradient_of_x(Tensor gx) { return {std::move(gx), Tensor(), Tensor()}; }

/// Fn::apply(x, dummy, call), recorded exactly when the group agreed to (Note [recording across ranks]).
template <class Fn>
Tensor run(bool record, const Tensor& x, const Call& call) {
  const bool grad_mode = GradMode::is_enabled();
  const Tensor input = !x.defined() || wants_grad(x) ? x : x.detach();
  const Tensor dummy = record ? empty({0}).requires_grad_(true) : Tensor();
  Tensor out;
  {
    AutoGradMode mode(record);
    out = Fn::apply(input, dummy, call);
  }
  if (!record) return out;
  autograd::run_in_next_backward(out.grad_fn());
  return grad_mode ? out : out.detach();
}

/// The backward of an op whose gradient every rank may hold: the ranks agree (Note [agreeing on gradients]), then
/// run dual(gradient or zeros shaped like the output, call, record) together.
template <class Dual>
tensor_list all_ranks_backward(AutogradContext* ctx, const Tensor& g, Dual dual) {
  const Call call = saved_call(ctx);
  const Agreement a = agree(g, call.group);
  if (!a.any_defined) return gradient_of_x(Tensor());
  const char* what = "functional: a recorded collective's saved output";
  const DeviceType device_type = device_type_from_code(ctx->saved_data["device_type"].toInt(), what);
  const Tensor mine =
      g.defined()
          ? g
          : zeros(
                ctx->saved_data["sizes"].toIntVector(),
                TensorOptions(dtype_from_code(ctx->saved_data["dtype"].toInt(), what)).device(device_of(device_type)));
  return gradient_of_x(dual(mine, call, a.record));
}

/// The backward of an op whose output, hence gradient, lives on the root only: the root's header says whether it
/// has one, then every rank runs dual(the root's gradient, call with that header).
template <class Dual>
tensor_list root_backward(AutogradContext* ctx, const Tensor& g, Dual dual) {
  Call call = saved_call(ctx);
  call.header = root_header(g, call.group, call.rank);
  if (!call.header.defined) return gradient_of_x(Tensor());
  return gradient_of_x(dual(g, call));
}

// ---- the axis-0 collectives; every forward is (ctx, x, dummy, call) ----

struct AllReduceSum : Function<AllReduceSum> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    Tensor out = x.clone();
    distributed::all_reduce(out, ReduceOp::SUM, call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return all_ranks_backward(
        ctx, g[0], [](const Tensor& g, const Call& call, bool rec) { return run<AllReduceSum>(rec, g, call); });
  }
};

/// all_reduce_max and all_reduce_min: the gradient sum reaches the ranks whose value was the result.
struct AllReduceExtremum : Function<AllReduceExtremum> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    Tensor out = x.clone();
    distributed::all_reduce(out, call.op, call.group);
    ctx->save_for_backward({x.ne(out)});
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const Tensor lost = ctx->get_saved_variables()[0];
    return all_ranks_backward(ctx, g[0], [&lost](const Tensor& g, const Call& call, bool rec) {
      return run<AllReduceSum>(rec, g, call).masked_fill(lost, 0);
    });
  }
};

struct ReduceScatterSum;

struct AllGather : Function<AllGather> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    DimVector sizes(x.sizes());
    sizes[0] *= get_world_size(call.group);
    Tensor out = empty(sizes, x.options());
    distributed::all_gather_into_tensor(out, x, call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return all_ranks_backward(
        ctx, g[0], [](const Tensor& g, const Call& call, bool rec) { return run<ReduceScatterSum>(rec, g, call); });
  }
};

struct ReduceScatterSum : Function<ReduceScatterSum> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    DimVector sizes(x.sizes());
    sizes[0] /= get_world_size(call.group);
    Tensor out = empty(sizes, x.options());
    distributed::reduce_scatter_tensor(out, x, ReduceOp::SUM, call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return all_ranks_backward(ctx, g[0],
                              [](const Tensor& g, const Call& call, bool rec) { return run<AllGather>(rec, g, call); });
  }
};

struct AllToAll : Function<AllToAll> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    Tensor out = empty(x.sizes(), x.options());
    distributed::all_to_all_single(out, x, {}, {}, call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return all_ranks_backward(ctx, g[0],
                              [](const Tensor& g, const Call& call, bool rec) { return run<AllToAll>(rec, g, call); });
  }
};

bool is_root(const Call& call) { return get_rank(call.group) == call.rank; }

struct Broadcast;
struct Scatter;

/// x reduced to the root: undefined elsewhere, where the op's output is a token.
Tensor reduce_sum0(const Tensor& x, const Call& call, bool record);
/// x gathered on the root: undefined elsewhere, where the op's output is a token.
Tensor gather0(const Tensor& x, const Call& call, bool record);

struct ReduceSum : Function<ReduceSum> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    // Other ranks' tensors are only read.
    Tensor buffer = is_root(call) ? x.clone() : x;
    distributed::reduce(buffer, get_global_rank(call.group, call.rank), ReduceOp::SUM, call.group);
    return save(ctx, call, is_root(call) ? buffer : token());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return root_backward(ctx, g[0],
                         [](const Tensor& g, const Call& call) { return run<Broadcast>(call.header.record, g, call); });
  }
};

/// x is defined on the root only; call.header is the root's header for it.
struct Broadcast : Function<Broadcast> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    Tensor out = is_root(call) ? x.clone() : empty(call.header.sizes, options_of(call.header));
    distributed::broadcast(out, get_global_rank(call.group, call.rank), call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return all_ranks_backward(ctx, g[0],
                              [](const Tensor& g, const Call& call, bool rec) { return reduce_sum0(g, call, rec); });
  }
};

struct Gather : Function<Gather> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    const int n = get_world_size(call.group);
    Tensor out = token();
    tensor_list parts;
    if (is_root(call)) {
      DimVector sizes(x.sizes());
      sizes[0] *= n;
      out = empty(sizes, x.options());
      parts = out.chunk(n, 0);
    }
    distributed::gather(x, parts, get_global_rank(call.group, call.rank), call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return root_backward(ctx, g[0],
                         [](const Tensor& g, const Call& call) { return run<Scatter>(call.header.record, g, call); });
  }
};

/// x is defined on the root only; call.header is the root's header for it, whose dim 0 is divisible by the group
/// size.
struct Scatter : Function<Scatter> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    const int n = get_world_size(call.group);
    DimVector sizes(call.header.sizes);
    sizes[0] /= n;
    Tensor out = empty(sizes, options_of(call.header));
    distributed::scatter(out, is_root(call) ? x.chunk(n, 0) : tensor_list{}, get_global_rank(call.group, call.rank),
                         call.group);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    return all_ranks_backward(ctx, g[0],
                              [](const Tensor& g, const Call& call, bool rec) { return gather0(g, call, rec); });
  }
};

Tensor reduce_sum0(const Tensor& x, const Call& call, bool record) {
  Tensor out = run<ReduceSum>(record, x, call);
  return is_root(call) ? out : Tensor();
}

Tensor gather0(const Tensor& x, const Call& call, bool record) {
  Tensor out = run<Gather>(record, x, call);
  return is_root(call) ? out : Tensor();
}

// ---- point to point (global ranks, on WORLD) ----

/// What src sent with remote_send_impl; undefined when it sent no tensor.
Tensor remote_recv_impl(int src);

/// Sends the header and, when x is defined, x to dst.
void remote_send_impl(const Tensor& x, int dst);

/// x goes to call.rank, whose gradient comes back in backward.
struct RemoteSend : Function<RemoteSend> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor&, const Call& call) {
    detail::send_internal(x, call.rank, {}, detail::kTagRemote);
    return save(ctx, call, token());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list) {
    return gradient_of_x(remote_recv_impl(saved_call(ctx).rank));
  }
};

/// Receives from call.rank a tensor described by call.header (x is undefined); the gradient goes back in backward.
struct RemoteRecv : Function<RemoteRecv> {
  static Tensor forward(AutogradContext* ctx, const Tensor&, const Tensor&, const Call& call) {
    Tensor out = empty(call.header.sizes, options_of(call.header));
    detail::recv_internal(out, call.rank, {}, detail::kTagRemote);
    return save(ctx, call, out);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    // The receiver's header tells the sender whether a gradient follows (Note [agreeing on gradients]).
    remote_send_impl(g[0], saved_call(ctx).rank);
    return gradient_of_x(Tensor());
  }
};

void remote_send_impl(const Tensor& x, int dst) {
  auto send = [dst](const Tensor& t) { detail::send_internal(t, dst, {}, detail::kTagRemote); };
  const Header h = share_header(header_of(x), send);
  if (h.defined) run<RemoteSend>(h.record, x, {.rank = dst});
}

Tensor remote_recv_impl(int src) {
  auto recv = [src](const Tensor& t) { detail::recv_internal(t, src, {}, detail::kTagRemote); };
  const Header h = share_header(std::nullopt, recv);
  if (!h.defined) return Tensor();
  return run<RemoteRecv>(h.record, Tensor(), {.rank = src, .header = h});
}

// ---- checks and axis layouts ----

void check_defined(const Tensor& x, const char* op) { STRATA_CHECK(x.defined(), op, ": got an undefined tensor"); }

void check_root(const ProcessGroup& pg, int root, const char* op) {
  STRATA_CHECK(root >= 0 && root < pg.size(), op, ": root ", root, " is not a group rank of ", pg.describe(), " (",
               pg.size(), " ranks)");
}

/// A global rank to exchange with in remote_send / remote_recv.
void check_peer(int peer, const char* op, const char* what) {
  const int me = get_rank(), size = get_world_size();
  STRATA_CHECK(peer >= 0 && peer < size, op, ": ", what, " ", peer, " is not a rank of WORLD (", size, " ranks)");
  STRATA_CHECK(peer != me, op, ": rank ", me, " cannot exchange with itself");
}

/// `axis` of a tensor of `sizes` wrapped into [0, dim); with `divisor`, its extent must be divisible by it.
int64_t check_axis(int64_t axis, IntArrayRef sizes, const char* op, int divisor = 1) {
  STRATA_CHECK(!sizes.empty(), op, ": needs a tensor with at least one dimension, got a 0-dim tensor");
  const int64_t a = wrap_dim(axis, static_cast<int64_t>(sizes.size()), op);
  STRATA_CHECK(sizes[a] % divisor == 0, op, ": size ", sizes[a], " of axis ", a, " of a tensor of shape ", sizes,
               " is not divisible by the group size ", divisor);
  return a;
}

/// Splits `axis` of x into n parts and stacks them along dim 0; each part keeps x's layout with axis / n. This is
/// what a dim-0 scatter, reduce_scatter or all_to_all hands out part by part.
Tensor parts_to_front(const Tensor& x, int64_t axis, int n) {
  if (axis == 0) return x;
  DimVector split(x.sizes()), order{axis}, front(x.sizes());
  split[axis] /= n;
  split.insert(axis, n);
  for (int64_t d = 0; d <= x.dim(); ++d)
    if (d != axis) order.push_back(d);
  front[axis] /= n;
  front[0] *= n;
  return x.reshape(split).permute(order).reshape(front);
}

/// The inverse layout: dim 0 of x holds n parts of shape `part`, returned concatenated along `axis` in order.
Tensor parts_from_front(const Tensor& x, IntArrayRef part, int64_t axis, int n) {
  if (axis == 0) return x;
  DimVector stacked(part), order, out(part);
  stacked.insert(0, n);
  for (int64_t d = 1; d <= axis; ++d) order.push_back(d);
  order.push_back(0);
  for (int64_t d = axis + 1; d <= static_cast<int64_t>(part.size()); ++d) order.push_back(d);
  out[axis] *= n;
  return x.reshape(stacked).permute(order).reshape(out);
}

/// all_reduce_sum, all_reduce_max and all_reduce_min.
template <class Fn>
Tensor all_reduce_op(const Tensor& x, const Group& group, ReduceOp reduce, const char* op) {
  detail::resolve(group, op);
  const Agreement agreed = agree(x, group, op, [&] { check_defined(x, op); });
  return run<Fn>(agreed.record, x, {.group = group, .op = reduce});
}

}  // namespace

Tensor reduce_sum(const Tensor& x, const Group& group, int root) {
  const char* op = "functional::reduce_sum";
  const ProcessGroup& pg = detail::resolve(group, op);
  const Agreement agreed = agree(x, group, op, [&] {
    check_root(pg, root, op);
    check_defined(x, op);
  });
  return reduce_sum0(x, {.group = group, .rank = root}, agreed.record);
}

Tensor broadcast(const Tensor& x, const Group& group, int root) {
  const ProcessGroup& pg = detail::resolve(group, "functional::broadcast");
  // The root must be valid everywhere before the header comes from it (Note [bad input on one rank]).
  agree(Tensor(), group, "functional::broadcast", [&] { check_root(pg, root, "functional::broadcast"); });
  const Header h = root_header(x, group, root);
  STRATA_CHECK(h.defined, "functional::broadcast: the root (group rank ", root, ", global rank ", pg.global_rank(root),
               ") passed an undefined tensor");
  return run<Broadcast>(h.record, pg.rank() == root ? x : Tensor(), {.group = group, .rank = root, .header = h});
}

Tensor all_gather(const Tensor& x, const Group& group, int64_t axis) {
  const char* op = "functional::all_gather";
  const int n = detail::resolve(group, op).size();
  int64_t a = 0;
  const Agreement agreed = agree(x, group, op, [&] {
    check_defined(x, op);
    a = check_axis(axis, x.sizes(), op);
  });
  return parts_from_front(run<AllGather>(agreed.record, x, {.group = group}), x.sizes(), a, n);
}

Tensor reduce_scatter_sum(const Tensor& x, const Group& group, int64_t axis) {
  const char* op = "functional::reduce_scatter_sum";
  const int n = detail::resolve(group, op).size();
  int64_t a = 0;
  const Agreement agreed = agree(x, group, op, [&] {
    check_defined(x, op);
    a = check_axis(axis, x.sizes(), op, n);
  });
  return run<ReduceScatterSum>(agreed.record, parts_to_front(x, a, n), {.group = group});
}

Tensor all_reduce_sum(const Tensor& x, const Group& group) {
  return all_reduce_op<AllReduceSum>(x, group, ReduceOp::SUM, "functional::all_reduce_sum");
}

Tensor all_reduce_max(const Tensor& x, const Group& group) {
  return all_reduce_op<AllReduceExtremum>(x, group, ReduceOp::MAX, "functional::all_reduce_max");
}

Tensor all_reduce_min(const Tensor& x, const Group& group) {
  return all_reduce_op<AllReduceExtremum>(x, group, ReduceOp::MIN, "functional::all_reduce_min");
}

Tensor gather(const Tensor& x, const Group& group, int64_t axis, int root) {
  const char* op = "functional::gather";
  const ProcessGroup& pg = detail::resolve(group, op);
  int64_t a = 0;
  const Agreement agreed = agree(x, group, op, [&] {
    check_root(pg, root, op);
    check_defined(x, op);
    a = check_axis(axis, x.sizes(), op);
  });
  Tensor out = gather0(x, {.group = group, .rank = root}, agreed.record);
  return out.defined() ? parts_from_front(out, x.sizes(), a, pg.size()) : out;
}

Tensor scatter(const Tensor& x, const Group& group, int64_t axis, int root) {
  const ProcessGroup& pg = detail::resolve(group, "functional::scatter");
  agree(Tensor(), group, "functional::scatter", [&] { check_root(pg, root, "functional::scatter"); });
  // Every rank checks the root's shape, so a bad axis throws everywhere instead of leaving ranks waiting.
  Header h = root_header(x, group, root);
  STRATA_CHECK(h.defined, "functional::scatter: the root (group rank ", root, ", global rank ", pg.global_rank(root),
               ") passed an undefined tensor");
  const int n = pg.size();
  const int64_t a = check_axis(axis, h.sizes, "functional::scatter", n);
  h.sizes[a] /= n;
  h.sizes[0] *= n;
  return run<Scatter>(h.record, pg.rank() == root ? parts_to_front(x, a, n) : Tensor(),
                      {.group = group, .rank = root, .header = h});
}

Tensor all_to_all(const Tensor& x, const Group& group, int64_t split_axis, int64_t concat_axis) {
  const char* op = "functional::all_to_all";
  const int n = detail::resolve(group, op).size();
  int64_t s = 0, c = 0;
  const Agreement agreed = agree(x, group, op, [&] {
    check_defined(x, op);
    s = check_axis(split_axis, x.sizes(), op, n);
    c = check_axis(concat_axis, x.sizes(), op);
  });
  DimVector part(x.sizes());
  part[s] /= n;
  return parts_from_front(run<AllToAll>(agreed.record, parts_to_front(x, s, n), {.group = group}), part, c, n);
}

void remote_send(const Tensor& x, int dest_rank) {
  detail::resolve({}, "functional::remote_send");
  check_peer(dest_rank, "functional::remote_send", "dest_rank");
  // An undefined x still sends its header, so the receiver throws too instead of waiting.
  remote_send_impl(x, dest_rank);
  check_defined(x, "functional::remote_send");
}

Tensor remote_recv(int src_rank) {
  detail::resolve({}, "functional::remote_recv");
  check_peer(src_rank, "functional::remote_recv", "src_rank");
  Tensor out = remote_recv_impl(src_rank);
  STRATA_CHECK(out.defined(), "functional::remote_recv: rank ", src_rank, " sent an undefined tensor");
  return out;
}

void backward(const tensor_list& outputs, const tensor_list& grad_outputs, std::optional<bool> retain_graph) {
  autograd::backward(outputs, grad_outputs, retain_graph);
}

}  // namespace strata::distributed::functional
