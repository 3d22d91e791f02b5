#pragma once
// Finite-difference checks of gradients, as torch.autograd.gradcheck / gradgradcheck.
//
//   auto x = strata::randn({3, 4}, strata::dtype(strata::kFloat64).requires_grad(true));
//   strata::autograd::gradcheck([](const strata::tensor_list& in) { return in[0].tanh().sum(0); }, {x});
//   // throws strata::Error naming the input, the element and both values on a mismatch

#include <functional>
#include <string>

#include "strata/tensor/tensor.h"

namespace strata::autograd {

/// Tolerances of gradcheck: an entry passes when |analytical - numerical| <= atol + rtol * |numerical|.
struct GradcheckOptions {
  double eps = 1e-6;            ///< central-difference step
  double atol = 1e-5;           ///< absolute tolerance
  double rtol = 1e-3;           ///< relative tolerance
  bool raise_exception = true;  ///< throw strata::Error on a mismatch (else return false)
};

/// A function of several tensors to several tensors.
using GradcheckFn = std::function<tensor_list(const tensor_list&)>;

/// Compares the Jacobian from backward with central differences for every float64 input that requires grad
/// (inputs on any device: a GPU's are perturbed in place on the GPU, and the results compared on the host).
/// A function that runs ops spanning processes (differentiable collectives) is an error: use distributed::gradcheck.
bool gradcheck(const GradcheckFn& fn, const tensor_list& inputs, const GradcheckOptions& options = {});
/// Same for a function with one output.
bool gradcheck(const std::function<Tensor(const tensor_list&)>& fn, const tensor_list& inputs,
               const GradcheckOptions& options = {});
/// Checks second derivatives: gradcheck of the function (inputs, grad_outputs) -> vector-Jacobian product.
bool gradgradcheck(const GradcheckFn& fn, const tensor_list& inputs, const GradcheckOptions& options = {});
/// Same for a function with one output.
bool gradgradcheck(const std::function<Tensor(const tensor_list&)>& fn, const tensor_list& inputs,
                   const GradcheckOptions& options = {});

// Shared with distributed::gradcheck.
namespace detail {
/// Throws unless input i (one that requires grad) is float64 and has no overlapping memory.
void check_input(const Tensor& x, size_t i);
/// The flat element i of t as a double, through its strides (copied from a GPU).
double read(const Tensor& t, int64_t i);
/// Sets the flat element i of t (any device) to value without bumping its version: what gradcheck perturbs.
void write(const Tensor& t, int64_t i, double value);
/// "[1, 2]": the index of flat element i of t.
std::string index_string(const Tensor& t, int64_t i);
}  // namespace detail

}  // namespace strata::autograd
