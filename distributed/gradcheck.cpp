// gradcheck across ranks: the checked scalar is global (the sum over ranks of each rank's
// weighted outputs, replicated outputs counted once), the analytical gradient is one
// functional::backward on every rank, and the numerical one perturbs one element of a replicated
// input on every rank at once, or of one rank's own input, while every rank evaluates fn.
//
// Every step that can fail on one rank only (bad inputs, a mismatch) ends in an agreement, so
// all ranks throw the same message (or all return false) and nobody is left in a collective.
// gradcheck's own communication skips the profiling switches (detail::all_reduce_unswitched): a
// skipped agreement or element count would leave ranks reading garbage, out of step.

#include "strata/distributed/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "strata/autograd/grad_mode.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/detail/runtime.h"
#include "strata/distributed/functional.h"
#include "strata/tensor/creation.h"

namespace strata::distributed {

namespace {

/// The message of the lowest group rank whose `mine` is not empty, on every rank; empty when no rank has one.
std::string first_message(const std::string& mine, const Group& group) {
  const int size = get_world_size(group);
  Tensor who = tensor({int64_t{mine.empty() ? size : get_rank(group)}});
  detail::all_reduce_unswitched(who, ReduceOp::MIN, group, false);
  const int rank = static_cast<int>(who.item<int64_t>());
  if (rank == size) return {};
  std::string message = mine;
  broadcast_object(message, get_global_rank(group, rank), group);
  return message;
}

/// Runs `local`, which may throw only on this rank, and rethrows its error (the lowest failing rank's) on every
/// rank; returns false on every rank instead when raise is false.
template <class Local>
bool on_every_rank(Local&& local, const Group& group, bool raise = true) {
  std::string mine;
  try {
    local();
  } catch (const Error& e) {
    mine = "distributed::gradcheck: on rank " + std::to_string(get_rank()) + ", " + e.what();
  }
  const std::string message = first_message(mine, group);
  if (message.empty()) return true;
  if (raise) throw Error(message);
  return false;
}

/// This rank's share of the checked scalar: each floating output times its fixed random weight, summed on
/// the host (where the sum is all-reduced) whatever device the outputs are on.
Tensor weighted_sum(const tensor_list& outputs, const tensor_list& weights) {
  Tensor sum = zeros({}, kDouble);
  for (size_t k = 0; k < outputs.size() && k < weights.size(); ++k)
    if (outputs[k].defined() && weights[k].defined()) sum = sum + (outputs[k] * weights[k]).sum().cpu();
  return sum;
}

bool contains(const std::vector<size_t>& list, size_t i) {
  return std::find(list.begin(), list.end(), i) != list.end();
}

/// Whether t has the same size and values on every rank of the group (the same answer on every rank).
bool same_on_every_rank(const Tensor& t, const Group& group) {
  Tensor numel = tensor({t.defined() ? t.numel() : int64_t{-1}});
  Tensor low = numel.clone();
  detail::all_reduce_unswitched(numel, ReduceOp::MAX, group, false);
  detail::all_reduce_unswitched(low, ReduceOp::MIN, group, false);
  const int64_t most = numel.item<int64_t>(), least = low.item<int64_t>();
  if (most != least || least <= 0) return most == least && least == 0;  // -1: undefined
  Tensor high = t.detach().to(kDouble).cpu().contiguous().reshape({-1}).clone();
  low = high.clone();
  detail::all_reduce_unswitched(high, ReduceOp::MAX, group, false);
  detail::all_reduce_unswitched(low, ReduceOp::MIN, group, false);
  return high.eq(low).all().item<bool>();
}

}  // namespace

bool gradcheck(const autograd::GradcheckFn& fn, const tensor_list& inputs, const autograd::GradcheckOptions& o,
               const Group& group, const Replicated& replicated) {
  const ProcessGroup& pg = detail::resolve(group, "distributed::gradcheck");
  const int rank = pg.rank(), size = pg.size();

  std::vector<size_t> checked;  // this rank's inputs that require grad
  on_every_rank(
      [&] {
        for (size_t i : replicated.inputs)
          STRATA_CHECK(i < inputs.size(), "replicated input ", i, " is not an input (", inputs.size(), " given)");
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
          autograd::detail::check_input(inputs[i], i);
          checked.push_back(i);
        }
      },
      group);
  // Every rank must name the same replicated inputs and outputs, or the checks below would be out of step.
  std::vector<int64_t> named{static_cast<int64_t>(replicated.inputs.size())};
  named.insert(named.end(), replicated.inputs.begin(), replicated.inputs.end());
  named.insert(named.end(), replicated.outputs.begin(), replicated.outputs.end());
  STRATA_CHECK(same_on_every_rank(tensor(named), group), "distributed::gradcheck: the ranks of ", pg.describe(),
               " name different replicated inputs or outputs");
  for (size_t i : replicated.inputs)
    STRATA_CHECK(same_on_every_rank(inputs[i], group), "distributed::gradcheck: replicated input ", i,
                 " is undefined or differs between the ranks of ", pg.describe());
  // The (input, element) pairs perturbed, in order: `shared` by every rank at once (replicated inputs), then
  // `elements` by this rank alone.
  std::vector<std::pair<size_t, int64_t>> shared, elements;
  for (size_t i : checked)
    for (int64_t e = 0; e < inputs[i].numel(); ++e)
      (contains(replicated.inputs, i) ? shared : elements).emplace_back(i, e);
  // Every rank's element count: each rank writes its own into zeros, and the sum gathers them.
  Tensor counts = zeros({size}, kLong);
  counts.data_ptr<int64_t>()[rank] = static_cast<int64_t>(elements.size());
  detail::all_reduce_unswitched(counts, ReduceOp::SUM, group, false);
  const int64_t* count = counts.data_ptr<int64_t>();
  int64_t total = static_cast<int64_t>(shared.size());
  for (int r = 0; r < size; ++r) total += count[r];
  STRATA_CHECK(same_on_every_rank(tensor({total}), group),
               "distributed::gradcheck: the replicated inputs require grad on some ranks of ", pg.describe(), " only");
  STRATA_CHECK(total > 0, "distributed::gradcheck: no input requires grad on any rank of ", pg.describe());

  // Analytical: backward from the weighted sum into fresh leaves that share the inputs' memory, so the inputs'
  // own grad() is left alone. Replicated outputs get the same weights on every rank and count on group rank 0 only.
  tensor_list leaves = inputs, weights, counted;
  tensor_list outputs;
  {
    AutoGradMode enable_grad(true);
    for (size_t i : checked) leaves[i] = inputs[i].detach().requires_grad_(true);
    outputs = fn(leaves);
    // Private generators, so that the caller's random stream is untouched; ranks weigh their own outputs differently.
    Generator gen(1 + rank), common(0);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Tensor& out = outputs[k];
      const bool rep = contains(replicated.outputs, k);
      weights.push_back(out.defined() && out.is_floating_point()
                            ? randn(out.sizes(), kDouble, rep ? &common : &gen).to(out.device())
                            : Tensor());
      counted.push_back(rep && rank != 0 ? Tensor() : weights.back());
    }
    const Tensor sum = weighted_sum(outputs, weights);
    functional::backward(sum.requires_grad() ? tensor_list{sum} : tensor_list{});
  }
  on_every_rank(
      [&] {
        for (size_t k : replicated.outputs)
          STRATA_CHECK(k < outputs.size(), "replicated output ", k, " is not an output (", outputs.size(),
                       " returned)");
      },
      group);
  for (size_t k : replicated.outputs)
    STRATA_CHECK(same_on_every_rank(outputs[k], group), "distributed::gradcheck: replicated output ", k,
                 " is undefined or differs between the ranks of ", pg.describe());

  // Numerical: each replicated element moved by +-eps on every rank at once, then rank by rank each element of that
  // rank's own inputs, while every rank runs fn.
  std::vector<double> numerical;
  {
    NoGradGuard no_grad;
    auto global_sum = [&] {
      Tensor sum = weighted_sum(fn(inputs), counted).reshape({1});
      detail::all_reduce_unswitched(sum, ReduceOp::SUM, group, false);
      return sum.item<double>();
    };
    auto difference = [&](const Tensor& input, int64_t e) {
      const double orig = input.defined() ? autograd::detail::read(input, e) : 0.0;
      if (input.defined()) autograd::detail::write(input, e, orig + o.eps);
      const double plus = global_sum();
      if (input.defined()) autograd::detail::write(input, e, orig - o.eps);
      const double minus = global_sum();
      if (input.defined()) autograd::detail::write(input, e, orig);
      return (plus - minus) / (2 * o.eps);
    };
    for (const auto& [i, e] : shared) numerical.push_back(difference(inputs[i], e));
    for (int r = 0; r < size; ++r) {
      for (int64_t j = 0; j < count[r]; ++j) {
        const bool mine = r == rank;
        const double d = difference(mine ? inputs[elements[j].first] : Tensor(), mine ? elements[j].second : 0);
        if (mine) numerical.push_back(d);
      }
    }
  }

  return on_every_rank(
      [&] {
        shared.insert(shared.end(), elements.begin(), elements.end());
        for (size_t j = 0; j < shared.size(); ++j) {
          const auto [i, e] = shared[j];
          const Tensor& grad = leaves[i].grad();
          const double an = grad.defined() ? autograd::detail::read(grad, e) : 0.0;
          const double nu = numerical[j];
          STRATA_CHECK(std::abs(an - nu) <= o.atol + o.rtol * std::abs(nu), "gradient mismatch for ",
                       contains(replicated.inputs, i) ? "replicated input " : "input ", i, " at element ",
                       autograd::detail::index_string(inputs[i], e), ": analytical ", an, " vs numerical ", nu,
                       " (eps ", o.eps, ", atol ", o.atol, ", rtol ", o.rtol, ")");
        }
      },
      group, o.raise_exception);
}

}  // namespace strata::distributed
