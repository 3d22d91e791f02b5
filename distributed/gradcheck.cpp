// gradcheck across ranks: the checked scalar is global (the sum over ranks of each rank's
// weighted outputs), the analytical gradient is one functional::backward on every rank, and the
// numerical one perturbs one element of one rank at a time while every rank evaluates fn.
//
// Every step that can fail on one rank only (bad inputs, a mismatch) ends in an agreement, so
// all ranks throw the same message (or all return false) and nobody is left in a collective.
// gradcheck's own communication skips the profiling switches (detail::all_reduce_unswitched): a
// skipped agreement or element count would leave ranks reading garbage, out of step.

#include "strata/distributed/gradcheck.h"

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

}  // namespace

bool gradcheck(const autograd::GradcheckFn& fn, const tensor_list& inputs, const autograd::GradcheckOptions& o,
               const Group& group) {
  const ProcessGroup& pg = detail::resolve(group, "distributed::gradcheck");
  const int rank = pg.rank(), size = pg.size();

  std::vector<size_t> checked;  // this rank's inputs that require grad
  on_every_rank(
      [&] {
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
          autograd::detail::check_input(inputs[i], i);
          checked.push_back(i);
        }
      },
      group);
  std::vector<std::pair<size_t, int64_t>> elements;  // the (input, element) pairs this rank perturbs, in order
  for (size_t i : checked)
    for (int64_t e = 0; e < inputs[i].numel(); ++e) elements.emplace_back(i, e);
  // Every rank's element count: each rank writes its own into zeros, and the sum gathers them.
  Tensor counts = zeros({size}, kLong);
  counts.data_ptr<int64_t>()[rank] = static_cast<int64_t>(elements.size());
  detail::all_reduce_unswitched(counts, ReduceOp::SUM, group, false);
  const int64_t* count = counts.data_ptr<int64_t>();
  int64_t total = 0;
  for (int r = 0; r < size; ++r) total += count[r];
  STRATA_CHECK(total > 0, "distributed::gradcheck: no input requires grad on any rank of ", pg.describe());

  // Analytical: backward from the weighted sum into fresh leaves that share the inputs' memory, so the inputs'
  // own grad() is left alone.
  tensor_list leaves = inputs, weights;
  {
    AutoGradMode enable_grad(true);
    for (size_t i : checked) leaves[i] = inputs[i].detach().requires_grad_(true);
    const tensor_list outputs = fn(leaves);
    // A private generator per rank, so that the caller's random stream is untouched and ranks weigh differently.
    Generator gen(1 + rank);
    for (const Tensor& out : outputs)
      weights.push_back(out.defined() && out.is_floating_point() ? randn(out.sizes(), kDouble, &gen).to(out.device())
                                                                 : Tensor());
    const Tensor sum = weighted_sum(outputs, weights);
    functional::backward(sum.requires_grad() ? tensor_list{sum} : tensor_list{});
  }

  // Numerical: rank by rank, each element of that rank's inputs moved by +-eps while every rank runs fn.
  std::vector<double> numerical;
  {
    NoGradGuard no_grad;
    auto global_sum = [&] {
      Tensor sum = weighted_sum(fn(inputs), weights).reshape({1});
      detail::all_reduce_unswitched(sum, ReduceOp::SUM, group, false);
      return sum.item<double>();
    };
    for (int r = 0; r < size; ++r) {
      for (int64_t j = 0; j < count[r]; ++j) {
        const bool mine = r == rank;
        const Tensor& input = mine ? inputs[elements[j].first] : Tensor();
        const int64_t e = mine ? elements[j].second : 0;
        const double orig = mine ? autograd::detail::read(input, e) : 0.0;
        if (mine) autograd::detail::write(input, e, orig + o.eps);
        const double plus = global_sum();
        if (mine) autograd::detail::write(input, e, orig - o.eps);
        const double minus = global_sum();
        if (mine) {
          autograd::detail::write(input, e, orig);
          numerical.push_back((plus - minus) / (2 * o.eps));
        }
      }
    }
  }

  return on_every_rank(
      [&] {
        for (size_t j = 0; j < elements.size(); ++j) {
          const auto [i, e] = elements[j];
          const Tensor& grad = leaves[i].grad();
          const double an = grad.defined() ? autograd::detail::read(grad, e) : 0.0;
          const double nu = numerical[j];
          STRATA_CHECK(std::abs(an - nu) <= o.atol + o.rtol * std::abs(nu), "gradient mismatch for input ", i,
                       " at element ", autograd::detail::index_string(inputs[i], e), ": analytical ", an,
                       " vs numerical ", nu, " (eps ", o.eps, ", atol ", o.atol, ", rtol ", o.rtol, ")");
        }
      },
      group, o.raise_exception);
}

}  // namespace strata::distributed
