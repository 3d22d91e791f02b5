// Megatron's region mappings. Each is one autograd::Function over a pair of steps, (forward, backward), from five:
// identity, all-reduce, split, all-gather and reduce-scatter. Its backward applies the pair swapped, so the
// gradient is itself a recorded mapping under create_graph and double backward follows.
//
// Unlike functional.cpp's collectives, nothing is agreed in the forward (Note [two conventions] in the header):
// under the replicated-loss convention every rank records the same mappings and reaches them all in backward, so a
// mapping costs exactly its collective, as in Megatron. A rank that breaks the convention (skips a mapping, or runs
// backward alone) is a collective mismatch like any other: the others wait, and the watchdog (STRATA_COMM_TIMEOUT_S)
// names it; but where its next collective has the same shape, MPI matches the two and the values are wrong, which
// only the consistency checks catch (STRATA_DISTRIBUTED_DEBUG: within 64 calls by default, at once under DETAIL).

#include "strata/distributed/tensor_parallel.h"

#include "strata/autograd/function.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/detail/runtime.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/shape.h"

namespace strata::distributed::tensor_parallel {

namespace {

using autograd::AutogradContext;

enum class Step : int64_t { kIdentity, kAllReduce, kSplit, kAllGather, kReduceScatter };

/// A mapping: what forward does, what backward does, along which dimension, over which group.
struct Pair {
  Step forward;
  Step backward;
  int64_t axis = 0;  ///< wrapped: split, all-gather and reduce-scatter work along it
  Group group;
};

/// Runs one step on x over `group`.
Tensor run_step(Step step, const Tensor& x, int64_t axis, const Group& group) {
  const int n = get_world_size(group);
  switch (step) {
    case Step::kIdentity:
      return x;
    case Step::kAllReduce: {
      Tensor out = x.clone();
      all_reduce(out, ReduceOp::SUM, group);
      return out;
    }
    case Step::kSplit:
      // A copy even where the part is contiguous: a view of x would take x's history over this node's.
      return x.chunk(n, axis)[get_rank(group)].clone();
    case Step::kAllGather: {
      // all_gather_into_tensor stacks along dim 0; the parts then move to `axis`.
      const Tensor in = x.contiguous();
      DimVector sizes(in.sizes());
      sizes[0] *= n;
      Tensor out = empty(sizes, in.options());
      all_gather_into_tensor(out, in, group);
      return axis == 0 ? out : cat(out.chunk(n, 0), axis);
    }
    case Step::kReduceScatter: {
      const Tensor in = axis == 0 ? x.contiguous() : cat(x.chunk(n, axis), 0);
      DimVector sizes(in.sizes());
      sizes[0] /= n;
      Tensor out = empty(sizes, in.options());
      reduce_scatter_tensor(out, in, ReduceOp::SUM, group);
      return out;
    }
  }
  STRATA_CHECK(false, "tensor_parallel: unknown step ", static_cast<int64_t>(step));
}

struct Mapping : autograd::Function<Mapping> {
  static constexpr bool spans_processes = true;  // autograd::gradcheck refuses it
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Pair& pair) {
    ctx->saved_data["forward"] = static_cast<int64_t>(pair.forward);
    ctx->saved_data["backward"] = static_cast<int64_t>(pair.backward);
    ctx->saved_data["axis"] = pair.axis;
    ctx->saved_data["group"] = (pair.group ? pair.group : get_world_group())->id();  // saved_data holds no handles
    return run_step(pair.forward, x, pair.axis, pair.group);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const int64_t id = ctx->saved_data["group"].toInt();
    Group group = detail::find_group(id);
    STRATA_CHECK(group, "tensor_parallel: a mapping recorded on group ", id,
                 " runs backward after destroy_process_group destroyed the group");
    const Pair swapped{static_cast<Step>(ctx->saved_data["backward"].toInt()),
                       static_cast<Step>(ctx->saved_data["forward"].toInt()), ctx->saved_data["axis"].toInt(), group};
    return {Mapping::apply(g[0], swapped), Tensor()};
  }
};

/// The mapping `pair` of x, checked: x is defined and, for the steps along an axis, has dimension pair.axis
/// (wrapped here), which the split and reduce-scatter steps need divisible by the group size.
Tensor map(const Tensor& x, Pair pair, const char* op) {
  const int n = detail::resolve(pair.group, op).size();
  STRATA_CHECK(x.defined(), op, ": got an undefined tensor");
  if (pair.forward == Step::kIdentity || pair.forward == Step::kAllReduce) return Mapping::apply(x, pair);
  STRATA_CHECK(x.dim() > 0, op, ": needs a tensor with at least one dimension, got a 0-dim tensor");
  pair.axis = wrap_dim(pair.axis, x.dim(), op);
  if (pair.forward == Step::kSplit || pair.forward == Step::kReduceScatter)
    STRATA_CHECK(x.size(pair.axis) % n == 0, op, ": size ", x.size(pair.axis), " of dimension ", pair.axis,
                 " of a tensor of shape ", x.sizes(), " is not divisible by the tensor-parallel size ", n);
  return Mapping::apply(x, pair);
}

}  // namespace

Tensor copy_to_region(const Tensor& x, const Group& group) {
  return map(x, {Step::kIdentity, Step::kAllReduce, 0, group}, "tensor_parallel::copy_to_region");
}

Tensor reduce_from_region(const Tensor& x, const Group& group) {
  return map(x, {Step::kAllReduce, Step::kIdentity, 0, group}, "tensor_parallel::reduce_from_region");
}

Tensor scatter_to_region(const Tensor& x, const Group& group) {
  return map(x, {Step::kSplit, Step::kAllGather, -1, group}, "tensor_parallel::scatter_to_region");
}

Tensor gather_from_region(const Tensor& x, const Group& group) {
  return map(x, {Step::kAllGather, Step::kSplit, -1, group}, "tensor_parallel::gather_from_region");
}

Tensor scatter_to_sequence_region(const Tensor& x, const Group& group, int64_t axis) {
  return map(x, {Step::kSplit, Step::kAllGather, axis, group}, "tensor_parallel::scatter_to_sequence_region");
}

Tensor gather_from_sequence_region(const Tensor& x, const Group& group, int64_t axis,
                                   bool tensor_parallel_output_grad) {
  const Step backward = tensor_parallel_output_grad ? Step::kReduceScatter : Step::kSplit;
  return map(x, {Step::kAllGather, backward, axis, group}, "tensor_parallel::gather_from_sequence_region");
}

Tensor reduce_scatter_to_sequence_region(const Tensor& x, const Group& group, int64_t axis) {
  return map(x, {Step::kReduceScatter, Step::kAllGather, axis, group},
             "tensor_parallel::reduce_scatter_to_sequence_region");
}

}  // namespace strata::distributed::tensor_parallel
