#pragma once
// Megatron's tensor-parallel region mappings: collectives whose backward is their conjugate, the pieces layers split
// across the ranks of a tensor-parallel (model-parallel) group are made of.
//
//   namespace tp = strata::distributed::tensor_parallel;
//   strata::distributed::Group group = strata::distributed::get_world_group();   // the tensor-parallel group
//   const int n = group->size();
//   auto x = strata::ones({4, 8}, strata::requires_grad());              // replicated: the same on every rank
//   auto w1 = strata::randn({16 / n, 8}, strata::requires_grad());       // this rank's rows of a 16 x 8 weight
//   auto w2 = strata::randn({8, 16 / n}, strata::requires_grad());       // and its columns of an 8 x 16 one
//   auto h = tp::copy_to_region(x, group).matmul(w1.t()).relu();         // [4, 16 / n], this rank's features
//   auto y = tp::reduce_from_region(h.matmul(w2.t()), group);            // [4, 8], replicated again
//   y.pow(2).mean().backward();   // every rank computes the same loss; x.grad() is its whole gradient everywhere
//
// Note [two conventions]
// These mappings follow Megatron's *replicated loss* convention: every rank of the group runs the same program,
// holds the same replicated tensors, computes the same loss and calls backward(); each rank then gets the gradient
// of that one loss. A mapping's backward collective runs where autograd reaches it, which is every rank, since
// every rank's loss is the same function of the same mappings. Use them to split one model's layers across ranks.
// functional.h's MegEngine collectives follow the *sum of per-rank losses* convention instead: each rank has a
// loss of its own (or none), backward gives the gradient of their sum, and each collective agrees with the other
// ranks in its forward so that ranks may differ. Use those where ranks compute different things, e.g. a pipeline
// of stages or a loss summed over data-parallel shards. In the first convention all_reduce's backward is the
// identity; in the second it is another all_reduce. Each is right for its objective, and mixing them on one tensor
// gets a gradient scaled by the group size.
//
// | mapping                           | forward                           | backward                           |
// | copy_to_region                    | identity                          | all-reduce (sum)                   |
// | reduce_from_region                | all-reduce (sum)                  | identity                           |
// | scatter_to_region                 | this rank's part of the last dim  | all-gather along the last dim      |
// | gather_from_region                | all-gather along the last dim     | this rank's part                   |
// | scatter_to_sequence_region        | this rank's part of dim `axis`    | all-gather along `axis`            |
// | gather_from_sequence_region       | all-gather along `axis`           | reduce-scatter along `axis` (*)    |
// | reduce_scatter_to_sequence_region | reduce-scatter (sum) along `axis` | all-gather along `axis`            |
// (*) this rank's part instead when tensor_parallel_output_grad is false: the gathered tensor feeds replicated
// computation rather than this rank's shard of a tensor-parallel layer.
// Parts are in group-rank order. The backward of each mapping is the mapping of the row with forward and backward
// swapped, so double backward works. The sequence dimension `axis` defaults to 0, Megatron's [s, b, h] layout; a
// [B, T, C] model passes 1.

#include "strata/distributed/process_group.h"

/// Megatron's region mappings for tensor (model) parallelism, under the replicated-loss convention.
namespace strata::distributed::tensor_parallel {

/// Identity forward; backward all-reduces (sums) the gradient over the group: enters a tensor-parallel region.
Tensor copy_to_region(const Tensor& x, const Group& group = {});
/// All-reduce (sum) over the group forward; identity backward: leaves a region whose ranks hold partial sums.
Tensor reduce_from_region(const Tensor& x, const Group& group = {});
/// This rank's part of x's last dimension (divisible by the group size); backward all-gathers it.
Tensor scatter_to_region(const Tensor& x, const Group& group = {});
/// Every rank's x concatenated along the last dimension; backward keeps this rank's part.
Tensor gather_from_region(const Tensor& x, const Group& group = {});
/// This rank's part of dimension `axis` (divisible by the group size); backward all-gathers it.
Tensor scatter_to_sequence_region(const Tensor& x, const Group& group = {}, int64_t axis = 0);
/// Every rank's x concatenated along `axis`; backward reduce-scatters the gradient, or keeps this rank's part of it
/// when tensor_parallel_output_grad is false.
Tensor gather_from_sequence_region(const Tensor& x, const Group& group = {}, int64_t axis = 0,
                                   bool tensor_parallel_output_grad = true);
/// The sum over the group of x, split along `axis` (divisible by the group size); this rank keeps its part; backward
/// all-gathers the gradient.
Tensor reduce_scatter_to_sequence_region(const Tensor& x, const Group& group = {}, int64_t axis = 0);

}  // namespace strata::distributed::tensor_parallel
