// Differentiable collectives: each op runs a collective and records a node whose backward is the
// dual collective (the table in functional.h), forward beside backward.
//
// Note [recording across ranks]
// A backward collective needs every rank of the group, also ranks whose own input needs no
// gradient and ranks that got no output. So the ranks agree in the forward whether to record (one
// all_reduce of flags, or the flag in the root's or sender's header), and when they do every rank
// records a node: its edge leads to this rank's input only where this rank wants a gradient for it
// (grad mode on, input requires grad), and the output carries it as grad_fn only where grad mode is
// on. The node is registered with autograd::run_in_next_backward, so it runs in the next backward()
// whether or not the rank's loss reaches it. backward() runs nodes latest-created first, so every
// rank runs its collectives in the reverse of their common forward order.
//
// Note [agreeing on gradients]
// In backward a rank may have no gradient for an op's output (its loss does not use it, or it has
// no output). Before communicating, the ranks agree whether any of them has one; when none has,
// the node returns no gradient and nothing is sent. Otherwise ranks without one contribute zeros.
// The same agreement says whether the backward collective records in turn (create_graph), so the
// backward of each op is the differentiable dual op and double backward works.
//
// Collectives along an axis other than 0 are the axis-0 collective wrapped in reshape and permute,
// as in MegEngine; those are differentiable, so their backward follows.

#include "strata/distributed/functional.h"

#include <algorithm>

#include "strata/autograd/engine.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/node.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/detail/runtime.h"
#include "strata/tensor/creation.h"

namespace strata::distributed::functional {

namespace {

using autograd::LambdaNode;

/// Whether this rank wants a gradient for t: grad mode is on and t requires grad.
bool wants_grad(const Tensor& t) { return GradMode::is_enabled() && t.defined() && t.requires_grad(); }

/// What the ranks of a group agreed on: whether any has a tensor (a gradient, in backward), and whether any wants
/// the op recorded.
struct Agreement {
  bool any_defined;
  bool record;
};

/// One all_reduce (MAX) of this rank's two flags for t.
Agreement agree(const Tensor& t, const Group& group) {
  Tensor flags = tensor({int64_t{t.defined()}, int64_t{wants_grad(t)}});
  distributed::all_reduce(flags, ReduceOp::MAX, group);
  const int64_t* f = flags.data_ptr<int64_t>();
  return {f[0] != 0, f[1] != 0};
}

/// What ranks without a tensor learn from the rank that has it (a root or a sender) before its data.
struct Header {
  bool defined = false;  ///< the source has a tensor; when not, nothing follows
  bool record = false;   ///< the source wants the op recorded
  ScalarType dtype = kFloat;
  DimVector sizes;
};

Header header_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {true, wants_grad(t), t.dtype(), DimVector(t.sizes())};
}

/// Moves the source's header to the other side: `mine` on the source, nullopt elsewhere. Two messages, the fixed
/// part first so receivers learn how many sizes follow; move(t) sends t from the source and fills it elsewhere.
template <class Move>
Header share_header(const std::optional<Header>& mine, Move&& move) {
  if (mine) {
    move(tensor({int64_t{mine->defined}, int64_t{mine->record}, static_cast<int64_t>(mine->dtype),
                 static_cast<int64_t>(mine->sizes.size())}));
    if (!mine->sizes.empty()) move(tensor(mine->sizes.vec()));
    return *mine;
  }
  Tensor fixed = zeros({4}, kLong);
  move(fixed);
  const int64_t* f = fixed.data_ptr<int64_t>();
  Header h{f[0] != 0, f[1] != 0, static_cast<ScalarType>(f[2]), DimVector(static_cast<size_t>(f[3]))};
  if (h.sizes.empty()) return h;
  Tensor sizes = zeros({f[3]}, kLong);
  move(sizes);
  std::copy_n(sizes.data_ptr<int64_t>(), f[3], h.sizes.begin());
  return h;
}

/// The root's header for its `x` (read on the root only), on every rank of the group.
Header root_header(const Tensor& x, const Group& group, int root) {
  const int src = get_global_rank(group, root);
  auto move = [&](const Tensor& t) { distributed::broadcast(t, src, group); };
  return get_rank(group) == root ? share_header(header_of(x), move) : share_header(std::nullopt, move);
}

/// Records `name` on this rank when the group agreed to (Note [recording across ranks]); null otherwise.
/// `input` is this rank's input (undefined where it has none), `output` its output (undefined where none).
std::shared_ptr<LambdaNode> record_collective(const char* name, bool record, const Tensor& input,
                                              const Tensor& output) {
  if (!record) return nullptr;
  auto node = std::make_shared<LambdaNode>(name, 1);
  node->next_edges.push_back(wants_grad(input) ? autograd::gradient_edge(input) : autograd::Edge{});
  if (output.defined() && GradMode::is_enabled()) autograd::set_history(output, node);
  autograd::run_in_next_backward(node);
  return node;
}

/// The backward of an op whose gradient every rank may hold: the ranks agree (Note [agreeing on gradients]),
/// then run dual(gradient or zeros shaped like `out`, record) together.
template <class Dual>
auto all_ranks_backward(const Group& group, const Tensor& out, Dual dual) {
  return [group, sizes = DimVector(out.sizes()), dtype = out.dtype(), dual](const tensor_list& g) -> tensor_list {
    const Agreement a = agree(g[0], group);
    if (!a.any_defined) return {};
    return {dual(g[0].defined() ? g[0] : zeros(sizes, dtype), a.record)};
  };
}

/// The backward of an op whose output, hence gradient, lives on the root only: the root's header says whether it
/// has one, then every rank runs dual(the root's gradient, header).
template <class Dual>
auto root_backward(const Group& group, int root, Dual dual) {
  return [group, root, dual](const tensor_list& g) -> tensor_list {
    const Header h = root_header(g[0], group, root);
    if (!h.defined) return {};
    return {dual(g[0], h)};
  };
}

// ---- the axis-0 collectives, each recording its dual as backward ----

Tensor all_reduce_sum_impl(const Tensor& x, const Group& group, bool record) {
  Tensor out = x.detach().clone();
  distributed::all_reduce(out, ReduceOp::SUM, group);
  if (auto node = record_collective("AllReduceSumBackward", record, x, out))
    node->backward = all_ranks_backward(group, out, [group](const Tensor& g, bool rec) {
      return all_reduce_sum_impl(g, group, rec);
    });
  return out;
}

/// all_reduce_max and all_reduce_min: the gradient sum reaches the ranks whose value was the result.
Tensor all_reduce_extremum(const char* name, ReduceOp op, const Tensor& x, const Group& group, bool record) {
  Tensor out = x.detach().clone();
  distributed::all_reduce(out, op, group);
  if (auto node = record_collective(name, record, x, out)) {
    Tensor lost = x.detach().ne(out);
    node->backward = all_ranks_backward(group, out, [group, lost](const Tensor& g, bool rec) {
      return all_reduce_sum_impl(g, group, rec).masked_fill(lost, 0);
    });
  }
  return out;
}

Tensor reduce_scatter0(const Tensor& x, const Group& group, bool record);

Tensor all_gather0(const Tensor& x, const Group& group, bool record) {
  DimVector sizes(x.sizes());
  sizes[0] *= get_world_size(group);
  Tensor out = empty(sizes, x.dtype());
  distributed::all_gather_into_tensor(out, x.detach(), group);
  if (auto node = record_collective("AllGatherBackward", record, x, out))
    node->backward = all_ranks_backward(group, out, [group](const Tensor& g, bool rec) {
      return reduce_scatter0(g, group, rec);
    });
  return out;
}

Tensor reduce_scatter0(const Tensor& x, const Group& group, bool record) {
  DimVector sizes(x.sizes());
  sizes[0] /= get_world_size(group);
  Tensor out = empty(sizes, x.dtype());
  distributed::reduce_scatter_tensor(out, x.detach(), ReduceOp::SUM, group);
  if (auto node = record_collective("ReduceScatterSumBackward", record, x, out))
    node->backward = all_ranks_backward(group, out, [group](const Tensor& g, bool rec) {
      return all_gather0(g, group, rec);
    });
  return out;
}

Tensor all_to_all0(const Tensor& x, const Group& group, bool record) {
  Tensor out = empty(x.sizes(), x.dtype());
  distributed::all_to_all_single(out, x.detach(), {}, {}, group);
  if (auto node = record_collective("AllToAllBackward", record, x, out))
    node->backward = all_ranks_backward(group, out, [group](const Tensor& g, bool rec) {
      return all_to_all0(g, group, rec);
    });
  return out;
}

Tensor broadcast0(const Tensor& x, const Group& group, int root, const Header& h);

Tensor reduce_sum0(const Tensor& x, const Group& group, int root, bool record) {
  const bool is_root = get_rank(group) == root;
  // Other ranks' tensors are only read.
  Tensor buffer = is_root ? x.detach().clone() : x.detach();
  distributed::reduce(buffer, get_global_rank(group, root), ReduceOp::SUM, group);
  Tensor out = is_root ? buffer : Tensor();
  if (auto node = record_collective("ReduceSumBackward", record, x, out))
    node->backward = root_backward(group, root, [group, root](const Tensor& g, const Header& h) {
      return broadcast0(g, group, root, h);
    });
  return out;
}

/// `h` is the root's header for `x`.
Tensor broadcast0(const Tensor& x, const Group& group, int root, const Header& h) {
  const bool is_root = get_rank(group) == root;
  Tensor out = is_root ? x.detach().clone() : empty(h.sizes, h.dtype);
  distributed::broadcast(out, get_global_rank(group, root), group);
  if (auto node = record_collective("BroadcastBackward", h.record, is_root ? x : Tensor(), out))
    node->backward = all_ranks_backward(group, out, [group, root](const Tensor& g, bool rec) {
      return reduce_sum0(g, group, root, rec);
    });
  return out;
}

Tensor scatter0(const Tensor& x, const Group& group, int root, const Header& h);

Tensor gather0(const Tensor& x, const Group& group, int root, bool record) {
  const int n = get_world_size(group);
  Tensor out;
  tensor_list parts;
  if (get_rank(group) == root) {
    DimVector sizes(x.sizes());
    sizes[0] *= n;
    out = empty(sizes, x.dtype());
    parts = out.chunk(n, 0);
  }
  distributed::gather(x.detach(), parts, get_global_rank(group, root), group);
  if (auto node = record_collective("GatherBackward", record, x, out))
    node->backward = root_backward(group, root, [group, root](const Tensor& g, const Header& h) {
      return scatter0(g, group, root, h);
    });
  return out;
}

/// `h` is the root's header for `x`, whose dim 0 is divisible by the group size.
Tensor scatter0(const Tensor& x, const Group& group, int root, const Header& h) {
  const int n = get_world_size(group);
  const bool is_root = get_rank(group) == root;
  DimVector sizes(h.sizes);
  sizes[0] /= n;
  Tensor out = empty(sizes, h.dtype);
  distributed::scatter(out, is_root ? x.detach().chunk(n, 0) : tensor_list{}, get_global_rank(group, root), group);
  if (auto node = record_collective("ScatterBackward", h.record, is_root ? x : Tensor(), out))
    node->backward = all_ranks_backward(group, out, [group, root](const Tensor& g, bool rec) {
      return gather0(g, group, root, rec);
    });
  return out;
}

// ---- point to point (global ranks, on WORLD) ----

Tensor remote_recv_impl(int src);

/// Sends the header and, when x is defined, x to dst.
void remote_send_impl(const Tensor& x, int dst) {
  auto send = [dst](const Tensor& t) { detail::send_internal(t, dst, {}, detail::kTagRemote); };
  const Header h = share_header(header_of(x), send);
  if (!h.defined) return;
  send(x.detach());
  if (auto node = record_collective("RemoteSendBackward", h.record, x, Tensor()))
    node->backward = [dst](const tensor_list&) -> tensor_list { return {remote_recv_impl(dst)}; };
}

/// What src sent with remote_send_impl; undefined when it sent no tensor.
Tensor remote_recv_impl(int src) {
  auto recv = [src](const Tensor& t) { detail::recv_internal(t, src, {}, detail::kTagRemote); };
  const Header h = share_header(std::nullopt, recv);
  if (!h.defined) return Tensor();
  Tensor out = empty(h.sizes, h.dtype);
  recv(out);
  // The receiver's header tells the sender whether a gradient follows (Note [agreeing on gradients]).
  if (auto node = record_collective("RemoteRecvBackward", h.record, Tensor(), out))
    node->backward = [src](const tensor_list& g) -> tensor_list {
      remote_send_impl(g[0], src);
      return {};
    };
  return out;
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

}  // namespace

Tensor reduce_sum(const Tensor& x, const Group& group, int root) {
  check_root(detail::resolve(group, "functional::reduce_sum"), root, "functional::reduce_sum");
  check_defined(x, "functional::reduce_sum");
  return reduce_sum0(x, group, root, agree(x, group).record);
}

Tensor broadcast(const Tensor& x, const Group& group, int root) {
  const ProcessGroup& pg = detail::resolve(group, "functional::broadcast");
  check_root(pg, root, "functional::broadcast");
  const Header h = root_header(x, group, root);
  STRATA_CHECK(h.defined, "functional::broadcast: the root (group rank ", root, ", global rank ", pg.global_rank(root),
               ") passed an undefined tensor");
  return broadcast0(x, group, root, h);
}

Tensor all_gather(const Tensor& x, const Group& group, int64_t axis) {
  const int n = detail::resolve(group, "functional::all_gather").size();
  check_defined(x, "functional::all_gather");
  const int64_t a = check_axis(axis, x.sizes(), "functional::all_gather");
  return parts_from_front(all_gather0(x, group, agree(x, group).record), x.sizes(), a, n);
}

Tensor reduce_scatter_sum(const Tensor& x, const Group& group, int64_t axis) {
  const int n = detail::resolve(group, "functional::reduce_scatter_sum").size();
  check_defined(x, "functional::reduce_scatter_sum");
  const int64_t a = check_axis(axis, x.sizes(), "functional::reduce_scatter_sum", n);
  return reduce_scatter0(parts_to_front(x, a, n), group, agree(x, group).record);
}

Tensor all_reduce_sum(const Tensor& x, const Group& group) {
  detail::resolve(group, "functional::all_reduce_sum");
  check_defined(x, "functional::all_reduce_sum");
  return all_reduce_sum_impl(x, group, agree(x, group).record);
}

Tensor all_reduce_max(const Tensor& x, const Group& group) {
  detail::resolve(group, "functional::all_reduce_max");
  check_defined(x, "functional::all_reduce_max");
  return all_reduce_extremum("AllReduceMaxBackward", ReduceOp::MAX, x, group, agree(x, group).record);
}

Tensor all_reduce_min(const Tensor& x, const Group& group) {
  detail::resolve(group, "functional::all_reduce_min");
  check_defined(x, "functional::all_reduce_min");
  return all_reduce_extremum("AllReduceMinBackward", ReduceOp::MIN, x, group, agree(x, group).record);
}

Tensor gather(const Tensor& x, const Group& group, int64_t axis, int root) {
  const ProcessGroup& pg = detail::resolve(group, "functional::gather");
  check_root(pg, root, "functional::gather");
  check_defined(x, "functional::gather");
  const int64_t a = check_axis(axis, x.sizes(), "functional::gather");
  Tensor out = gather0(x, group, root, agree(x, group).record);
  return out.defined() ? parts_from_front(out, x.sizes(), a, pg.size()) : out;
}

Tensor scatter(const Tensor& x, const Group& group, int64_t axis, int root) {
  const ProcessGroup& pg = detail::resolve(group, "functional::scatter");
  check_root(pg, root, "functional::scatter");
  // Every rank checks the root's shape, so a bad axis throws everywhere instead of leaving ranks waiting.
  Header h = root_header(x, group, root);
  STRATA_CHECK(h.defined, "functional::scatter: the root (group rank ", root, ", global rank ", pg.global_rank(root),
               ") passed an undefined tensor");
  const int n = pg.size();
  const int64_t a = check_axis(axis, h.sizes, "functional::scatter", n);
  if (a == 0) return scatter0(x, group, root, h);
  h.sizes[a] /= n;
  h.sizes[0] *= n;
  return scatter0(pg.rank() == root ? parts_to_front(x, a, n) : Tensor(), group, root, h);
}

Tensor all_to_all(const Tensor& x, const Group& group, int64_t split_axis, int64_t concat_axis) {
  const int n = detail::resolve(group, "functional::all_to_all").size();
  check_defined(x, "functional::all_to_all");
  const int64_t s = check_axis(split_axis, x.sizes(), "functional::all_to_all", n);
  const int64_t c = check_axis(concat_axis, x.sizes(), "functional::all_to_all");
  DimVector part(x.sizes());
  part[s] /= n;
  return parts_from_front(all_to_all0(parts_to_front(x, s, n), group, agree(x, group).record), part, c, n);
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
