// CPU kernels: direct convolution and its two gradients through oneDNN, for float32. Other dtypes
// answer false and the ops compose im2col and Eigen's GEMM (autograd/ops/conv.cpp).
//
// Note [oneDNN convolution]: oneDNN's fastest kernels read and write blocked layouts (nChw16c), so
// a call reorders its plain NCHW operands in and its result out, as libtorch does for dense tensors;
// even so it runs at about twice the FLOP rate of im2col on Eigen (benchmarks: conv2d_3x3_64_56).
// Building a primitive costs far more than a small convolution, so plans are cached by pass, sizes,
// window and thread count (oneDNN splits the work for the threads it sees when the plan is built).
// The scratchpad and the blocked copies come from strata's allocator on every call, so concurrent
// calls of one plan share nothing they write.

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "strata/tensor/cpu/cpu_kernels.h"
#include "strata/tensor/creation.h"

namespace strata::cpu {

namespace {

using dnnl::memory;

enum class Pass : int64_t { Forward, BackwardInput, BackwardWeight };

/// One pass ready to run: the primitive, its two operands' and its result's oneDNN arguments (roles_of), their
/// plain layouts and the layouts the primitive wants, with a reorder where the two differ, and the scratchpad's
/// size.
struct Plan {
  dnnl::primitive primitive;
  std::array<int, 3> args;
  std::array<memory::desc, 3> plain, wanted;
  std::array<std::optional<dnnl::reorder>, 3> reorders;  // plain to wanted for operands, wanted to plain for the result
  size_t scratchpad = 0;
};

/// What each pass reads as its two operands and writes as its result: which of the forward convolution's tensors
/// (0 src, 1 weights, 2 dst) and as which oneDNN argument.
struct Roles {
  std::array<int, 3> tensor;
  std::array<int, 3> arg;
};

Roles roles_of(Pass pass) {
  switch (pass) {
    case Pass::Forward:
      return {{0, 1, 2}, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}};
    case Pass::BackwardInput:
      return {{2, 1, 0}, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}};
    case Pass::BackwardWeight:
      return {{0, 2, 1}, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
  }
  return {};
}

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

/// Builds the plan of `pass` for src [N, C, H, W], weights [O, C / groups, kH, kW] and dst [N, O, oH, oW].
Plan make_plan(Pass pass, const Tensor& src, const Tensor& weights, const Tensor& dst, const Window2d& g,
               int64_t groups) {
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  const memory::dims src_dims(src.sizes().begin(), src.sizes().end()), dst_dims(dst.sizes().begin(), dst.sizes().end());
  memory::dims weight_dims(weights.sizes().begin(), weights.sizes().end());
  if (groups > 1) {
    weight_dims[0] /= groups;
    weight_dims.insert(weight_dims.begin(), groups);
  }
  const memory::desc src_plain(src_dims, f32, tag::nchw), dst_plain(dst_dims, f32, tag::nchw),
      weight_plain(weight_dims, f32, groups > 1 ? tag::goihw : tag::oihw);
  const memory::desc src_any(src_dims, f32, tag::any), dst_any(dst_dims, f32, tag::any),
      weight_any(weight_dims, f32, tag::any);
  // oneDNN counts dilation from 0 and wants the padding after each dim; where the last window stops short
  // of the input's end that padding would be negative, and 0 gives the same output size.
  memory::dims strides(2), dilates(2), pad_before(2), pad_after(2);
  for (int d = 0; d < 2; ++d) {
    strides[d] = g.stride[d];
    dilates[d] = g.dilation[d] - 1;
    pad_before[d] = g.pad[d];
    pad_after[d] =
        std::max<int64_t>((g.out[d] - 1) * g.stride[d] + g.dilation[d] * (g.kernel[d] - 1) + 1 - g.in[d] - g.pad[d], 0);
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto algorithm = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_any, weight_any, dst_any,
                                      strides, dilates, pad_before, pad_after),
      attr, engine());
  Plan plan;
  dnnl::primitive_desc pd;
  if (pass == Pass::Forward) {
    pd = forward;
    plan.primitive = dnnl::convolution_forward(forward);
  } else if (pass == Pass::BackwardInput) {
    const dnnl::convolution_backward_data::primitive_desc data(
        dnnl::convolution_backward_data::desc(algorithm, src_any, weight_any, dst_any, strides, dilates, pad_before,
                                              pad_after),
        attr, engine(), forward);
    pd = data;
    plan.primitive = dnnl::convolution_backward_data(data);
  } else {
    const dnnl::convolution_backward_weights::primitive_desc weight(
        dnnl::convolution_backward_weights::desc(algorithm, src_any, weight_any, dst_any, strides, dilates, pad_before,
                                                 pad_after),
        attr, engine(), forward);
    pd = weight;
    plan.primitive = dnnl::convolution_backward_weights(weight);
  }
  const Roles roles = roles_of(pass);
  const std::array<memory::desc, 3> plain{src_plain, weight_plain, dst_plain};
  plan.args = roles.arg;
  plan.scratchpad = pd.scratchpad_desc().get_size();
  for (size_t i = 0; i < 3; ++i) {
    plan.plain[i] = plain[static_cast<size_t>(roles.tensor[i])];
    plan.wanted[i] = pd.query_md(dnnl::query::exec_arg_md, roles.arg[i]);
    if (plan.plain[i] == plan.wanted[i]) continue;
    const bool operand = i < 2;
    const dnnl::reorder::primitive_desc reorder(engine(), operand ? plan.plain[i] : plan.wanted[i], engine(),
                                                operand ? plan.wanted[i] : plan.plain[i], attr);
    plan.reorders[i].emplace(reorder);
    plan.scratchpad = std::max(plan.scratchpad, reorder.scratchpad_desc().get_size());
  }
  return plan;
}

/// The cached plan for these operands, built on first use.
std::shared_ptr<const Plan> plan_for(Pass pass, const Tensor& src, const Tensor& weights, const Tensor& dst,
                                     const Window2d& g, int64_t groups) {
  using Key = std::array<int64_t, 18>;
  const Key key{static_cast<int64_t>(pass),
                src.size(0),
                src.size(1),
                dst.size(1),
                groups,
                g.in[0],
                g.in[1],
                g.out[0],
                g.out[1],
                g.kernel[0],
                g.kernel[1],
                g.stride[0],
                g.stride[1],
                g.dilation[0],
                g.dilation[1],
                g.pad[0],
                g.pad[1],
                omp_get_max_threads()};
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Plan>> plans;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
  }
  auto plan = std::make_shared<const Plan>(make_plan(pass, src, weights, dst, g, groups));
  std::lock_guard<std::mutex> lock(mutex);
  if (plans.size() >= 512) plans.clear();  // a sweep over many shapes; a model uses a handful
  return plans.emplace(key, std::move(plan)).first->second;
}

/// Runs the plan on the operands' and the result's data, in the plan's argument order.
void run(const Plan& plan, const std::array<const Tensor*, 3>& tensors) {
  const dnnl::engine& e = engine();
  dnnl::stream stream(e);
  auto bytes = [](size_t n) { return empty({static_cast<int64_t>(n)}, TensorOptions(kByte)); };
  const Tensor scratch_buffer = bytes(plan.scratchpad);
  const memory scratchpad(
      memory::desc({static_cast<memory::dim>(plan.scratchpad)}, memory::data_type::u8, memory::format_tag::x), e,
      scratch_buffer.data_ptr());
  std::array<Tensor, 3> blocked;
  std::array<memory, 3> plain, wanted;
  for (size_t i = 0; i < 3; ++i) {
    plain[i] = memory(plan.plain[i], e, tensors[i]->data_ptr());
    if (!plan.reorders[i]) {
      wanted[i] = plain[i];
      continue;
    }
    blocked[i] = bytes(plan.wanted[i].get_size());
    wanted[i] = memory(plan.wanted[i], e, blocked[i].data_ptr());
    if (i < 2)
      plan.reorders[i]->execute(
          stream, {{DNNL_ARG_FROM, plain[i]}, {DNNL_ARG_TO, wanted[i]}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
  }
  plan.primitive.execute(stream, {{plan.args[0], wanted[0]},
                                  {plan.args[1], wanted[1]},
                                  {plan.args[2], wanted[2]},
                                  {DNNL_ARG_SCRATCHPAD, scratchpad}});
  if (plan.reorders[2])
    plan.reorders[2]->execute(stream,
                              {{DNNL_ARG_FROM, wanted[2]}, {DNNL_ARG_TO, plain[2]}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
  stream.wait();
}

/// One pass over src [N, C, H, W], weights [O, C / groups, kH, kW] and dst [N, O, oH, oW] (the roles of the
/// forward convolution), after checking them against the window; false, touching nothing, where oneDNN has no
/// kernel (a dtype other than float32, an empty operand, a geometry it does not implement).
bool convolve(Pass pass, const char* op, const Tensor& src, const Tensor& weights, const Tensor& dst, const Window2d& g,
              int64_t groups) {
  const bool shapes_fit = src.dim() == 4 && weights.dim() == 4 && dst.dim() == 4 && groups > 0 &&
                          src.size(0) == dst.size(0) && src.size(1) == weights.size(1) * groups &&
                          dst.size(1) == weights.size(0) && weights.size(0) % groups == 0 && src.size(2) == g.in[0] &&
                          src.size(3) == g.in[1] && dst.size(2) == g.out[0] && dst.size(3) == g.out[1] &&
                          weights.size(2) == g.kernel[0] && weights.size(3) == g.kernel[1];
  STRATA_CHECK(shapes_fit, op, ": input ", src.sizes(), ", weight ", weights.sizes(), " and output ", dst.sizes(),
               " do not fit a convolution with ", groups, " groups, kernel (", g.kernel[0], ", ", g.kernel[1],
               ") and output size (", g.out[0], ", ", g.out[1], ")");
  STRATA_CHECK(src.dtype() == weights.dtype() && src.dtype() == dst.dtype(), op,
               ": operands of one dtype expected, got ", src.dtype(), ", ", weights.dtype(), " and ", dst.dtype());
  STRATA_CHECK(src.is_contiguous() && weights.is_contiguous() && dst.is_contiguous(), op,
               ": contiguous operands expected");
  if (src.dtype() != kFloat || src.numel() == 0 || weights.numel() == 0 || dst.numel() == 0) return false;
  std::shared_ptr<const Plan> plan;
  try {
    plan = plan_for(pass, src, weights, dst, g, groups);
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return false;
    STRATA_CHECK(false, op, ": oneDNN could not plan the convolution of input ", src.sizes(), " with weight ",
                 weights.sizes(), ": ", e.what());
  }
  const std::array<const Tensor*, 3> by_role{&src, &weights, &dst};
  const Roles roles = roles_of(pass);
  std::array<const Tensor*, 3> order{};
  for (size_t i = 0; i < 3; ++i) order[i] = by_role[static_cast<size_t>(roles.tensor[i])];
  try {
    run(*plan, order);
  } catch (const dnnl::error& e) {
    STRATA_CHECK(false, op, ": oneDNN failed on the convolution of input ", src.sizes(), " with weight ",
                 weights.sizes(), ": ", e.what());
  }
  return true;
}

}  // namespace

bool CpuKernels::conv2d(const Tensor& in, const Tensor& weight, const Window2d& window, int64_t groups,
                        const Tensor& out) const {
  return convolve(Pass::Forward, "conv2d", in, weight, out, window, groups);
}

bool CpuKernels::conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Window2d& window,
                                       int64_t groups, const Tensor& grad_in) const {
  return convolve(Pass::BackwardInput, "conv2d_backward_input", grad_in, weight, grad_out, window, groups);
}

bool CpuKernels::conv2d_backward_weight(const Tensor& in, const Tensor& grad_out, const Window2d& window,
                                        int64_t groups, const Tensor& grad_weight) const {
  return convolve(Pass::BackwardWeight, "conv2d_backward_weight", in, grad_weight, grad_out, window, groups);
}

}  // namespace strata::cpu
