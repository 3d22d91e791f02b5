#pragma once
// gradcheck for functions whose inputs live on several ranks.
//
//   namespace dist = strata::distributed;
//   auto x = strata::randn({2, 3}, strata::dtype(strata::kFloat64).requires_grad(true));  // this rank's input
//   dist::gradcheck([](const strata::tensor_list& in) {
//     return strata::tensor_list{dist::functional::all_gather(in[0], {}, 1)};
//   }, {x});   // every rank calls it; throws on every rank when any gradient is wrong
//
// The scalar checked is global: the sum over ranks of each rank's outputs weighted by fixed
// random tensors. Each rank perturbs its own float64 inputs in turn while the others run the
// function with theirs; the analytical side is one backward (functional::backward) on every rank.
// Outputs may be undefined on ranks that get none (reduce_sum off the root).
//
// Under Megatron's replicated-loss convention (tensor_parallel.h) some inputs and outputs are one tensor that every
// rank holds a copy of; name them in `replicated`:
//
//   namespace tp = strata::distributed::tensor_parallel;
//   strata::manual_seed(7);                                     // the same seed on every rank: the same tensor
//   auto shared = strata::randn({2, 3}, strata::dtype(strata::kFloat64).requires_grad(true));
//   dist::gradcheck([](const strata::tensor_list& in) {
//     return strata::tensor_list{tp::reduce_from_region(tp::copy_to_region(in[0]).sigmoid())};
//   }, {shared}, {}, {}, {.inputs = {0}, .outputs = {0}});
//
// A replicated input is one variable: its elements are perturbed on every rank at once, and every rank's gradient
// must be the whole one. A replicated output counts once in the scalar, with the same weights on every rank. Both
// must be equal on every rank of the group, or gradcheck throws naming them.

#include <vector>

#include "strata/autograd/gradcheck.h"
#include "strata/distributed/process_group.h"

namespace strata::distributed {

/// The inputs and outputs of a checked function that are one tensor held by every rank of the group.
struct Replicated {
  std::vector<size_t> inputs = {};   ///< indices of inputs every rank holds the same copy of
  std::vector<size_t> outputs = {};  ///< indices of outputs every rank computes the same of (a replicated loss)
};

/// Compares gradients from backward with central differences of the global scalar, for this rank's
/// float64 inputs that require grad; every rank of `group` calls it with its own inputs.
bool gradcheck(const autograd::GradcheckFn& fn, const tensor_list& inputs,
               const autograd::GradcheckOptions& options = {}, const Group& group = {},
               const Replicated& replicated = {});

}  // namespace strata::distributed
