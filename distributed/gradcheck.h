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

#include "strata/autograd/gradcheck.h"
#include "strata/distributed/process_group.h"

namespace strata::distributed {

/// Compares gradients from backward with central differences of the global scalar, for this rank's
/// float64 inputs that require grad; every rank of `group` calls it with its own inputs.
bool gradcheck(const autograd::GradcheckFn& fn, const tensor_list& inputs,
               const autograd::GradcheckOptions& options = {}, const Group& group = {});

}  // namespace strata::distributed
