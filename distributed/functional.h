#pragma once
// Differentiable collectives with MegEngine's names and semantics: each forward is a collective
// and its backward is the matching collective on the gradients.
//
//   namespace F = strata::distributed::functional;
//   auto x = strata::randn({2, 3}, strata::requires_grad());
//   auto y = F::all_gather(x, {}, /*axis=*/1);        // backward: reduce_scatter_sum along axis 1
//   auto s = F::reduce_sum(y.sum());                 // defined on the root (group rank 0) only
//   F::backward(s.defined() ? strata::tensor_list{s} : strata::tensor_list{});   // every rank
//
//   int rank = strata::distributed::get_rank();               // two stages, on ranks 0 and 1
//   if (rank == 0) { F::remote_send(x, 1); F::backward(); }   // x's grad comes back from rank 1
//   else F::backward({F::remote_recv(0).tanh().sum()});       // shape and dtype come from the sender
//
// | forward                           | backward                                     |
// | reduce_sum (result on root)       | broadcast of the root's grad                 |
// | broadcast (from root)             | reduce_sum of the grads to the root          |
// | gather (result on root)           | scatter of the root's grad                   |
// | scatter (from root)               | gather of the grads to the root              |
// | all_gather                        | reduce_scatter_sum                           |
// | reduce_scatter_sum                | all_gather                                   |
// | all_reduce_sum                    | all_reduce_sum                               |
// | all_reduce_max / all_reduce_min   | all_reduce_sum of the grad, kept where input == output |
// | all_to_all                        | all_to_all back (split and concat axes swapped) |
// | remote_send (to rank r)           | receives the grad from r                     |
// | remote_recv (from rank r)         | sends the grad back to r                     |
//
// Note [the backward contract]
// - Every rank of a group calls the same differentiable collectives in the same order.
// - A collective is recorded on every rank of the group when any rank that contributes data has
//   grad mode on and an input that requires grad (the ranks agree on it in the forward). Once
//   recorded, it runs its backward collective in the next backward() on every rank, whether or
//   not that rank's loss depends on it. A rank that got no output (reduce_sum and gather off the
//   root, remote_send) or has no loss at all calls backward() with no outputs.
// - Before each backward collective the ranks agree whether any of them has a gradient; when
//   none has, nothing is sent and the inputs get no gradient, so nobody waits forever.
// - Recorded collectives (and the graphs behind them) stay pending until this thread's next
//   backward: run forward passes that will have no backward (evaluation) under NoGradGuard.
// - backward with retain_graph keeps the collectives pending for the next backward; autograd::grad
//   runs only what its outputs reach, so use backward() for graphs that cross ranks.
// - Destroying a group (destroy_process_group) before the backward of its collectives makes that
//   backward throw.
// Roots are group ranks (0 by default, as in MegEngine); remote ranks are global ranks.

#include <optional>

#include "strata/distributed/process_group.h"

/// Differentiable collectives with MegEngine's names, whose backward is the dual collective.
namespace strata::distributed::functional {

/// Sum of `x` over the group, returned on group rank `root` (undefined elsewhere).
Tensor reduce_sum(const Tensor& x, const Group& group = {}, int root = 0);
/// Group rank root's `x` on every rank; elsewhere `x` may be undefined, shape and dtype come from the root.
Tensor broadcast(const Tensor& x, const Group& group = {}, int root = 0);
/// Every rank's `x` concatenated along `axis` in group-rank order.
Tensor all_gather(const Tensor& x, const Group& group = {}, int64_t axis = 0);
/// Sum over the group of `x`, split along `axis` (divisible by the group size); rank r keeps part r.
Tensor reduce_scatter_sum(const Tensor& x, const Group& group = {}, int64_t axis = 0);
/// Elementwise sum over the group.
Tensor all_reduce_sum(const Tensor& x, const Group& group = {});
/// Elementwise maximum over the group.
Tensor all_reduce_max(const Tensor& x, const Group& group = {});
/// Elementwise minimum over the group.
Tensor all_reduce_min(const Tensor& x, const Group& group = {});
/// Every rank's `x` concatenated along `axis` on group rank `root` (undefined elsewhere).
Tensor gather(const Tensor& x, const Group& group = {}, int64_t axis = 0, int root = 0);
/// Part r of root's `x` split along `axis` for group rank r; elsewhere `x` may be undefined.
Tensor scatter(const Tensor& x, const Group& group = {}, int64_t axis = 0, int root = 0);
/// Splits `x` along split_axis into size() parts, sends part p to rank p, concatenates what arrives along concat_axis.
Tensor all_to_all(const Tensor& x, const Group& group = {}, int64_t split_axis = 0, int64_t concat_axis = 0);
/// Sends `x` to global rank dest_rank, which calls remote_recv.
void remote_send(const Tensor& x, int dest_rank);
/// Receives what global rank src_rank sent with remote_send, with its shape, dtype and requires_grad.
Tensor remote_recv(int src_rank);

/// autograd::backward that may be given no outputs: runs this rank's part of every pending
/// collective (see Note [the backward contract]) and whatever `outputs` reach.
void backward(const tensor_list& outputs = {}, const tensor_list& grad_outputs = {},
              std::optional<bool> retain_graph = std::nullopt);

}  // namespace strata::distributed::functional
