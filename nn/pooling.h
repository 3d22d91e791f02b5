#pragma once
// Pooling layers with libtorch's names and options: MaxPool1d, MaxPool2d, AvgPool2d and
// AdaptiveAvgPool2d, and the options of their functional forms (F::max_pool2d, ...).
//
//   nn::MaxPool2d pool(2);                                                   // 2x2 windows, stride 2
//   nn::AvgPool2d avg(nn::AvgPool2dOptions(3).stride(1).padding(1));
//   nn::AdaptiveAvgPool2d gap(1);                                            // global average
//   Tensor x = randn({8, 16, 32, 32});
//   Tensor y = gap(avg(pool(x)));                                           // [8, 16, 1, 1]
//   auto [values, indices] = pool->forward_with_indices(x);                  // indices into 32 * 32
//   std::cout << *pool;  // MaxPool2d(kernel_size=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil_mode=false)

#include <cstdint>
#include <optional>
#include <ostream>
#include <tuple>

#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata::nn {

/// MaxPool1d's and MaxPool2d's options: MaxPoolOptions<2>(kernel_size).stride(1); stride defaults to the kernel.
template <size_t D>
class MaxPoolOptions {
 public:
  MaxPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  ///< the window
  STRATA_ARG(ExpandingArray<D>, kernel_size);   ///< the window's extent per spatial dim
  STRATA_ARG(ExpandingArray<D>, stride);        ///< step between windows (the kernel size unless set)
  STRATA_ARG(ExpandingArray<D>, padding) = 0;   ///< implicit -inf padding on both sides, at most half the window
  STRATA_ARG(ExpandingArray<D>, dilation) = 1;  ///< spacing between window elements
  STRATA_ARG(bool, ceil_mode) = false;          ///< round the output size up instead of down
};
using MaxPool1dOptions = MaxPoolOptions<1>;  ///< MaxPool1d's options
using MaxPool2dOptions = MaxPoolOptions<2>;  ///< MaxPool2d's options

/// AvgPool2d's options: AvgPool2dOptions(kernel_size).stride(1).padding(1); stride defaults to the kernel.
class AvgPool2dOptions {
 public:
  AvgPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  ///< the window
  STRATA_ARG(ExpandingArray<2>, kernel_size);  ///< the window's extent per spatial dim
  STRATA_ARG(ExpandingArray<2>, stride);       ///< step between windows (the kernel size unless set)
  STRATA_ARG(ExpandingArray<2>, padding) = 0;  ///< implicit zero padding on both sides, at most half the window
  STRATA_ARG(bool, ceil_mode) = false;         ///< round the output size up instead of down
  STRATA_ARG(bool, count_include_pad) = true;  ///< whether the divisor counts padded positions
  STRATA_ARG(std::optional<int64_t>, divisor_override) = std::nullopt;  ///< a fixed divisor instead
};

/// AdaptiveAvgPool2d's options: the output's spatial size.
class AdaptiveAvgPool2dOptions {
 public:
  AdaptiveAvgPool2dOptions(ExpandingArray<2> output_size) : output_size_(output_size) {}  ///< the output size
  STRATA_ARG(ExpandingArray<2>, output_size);                                             ///< the output's [H, W]
};

/// Max over sliding windows, as torch.nn.MaxPool1d / MaxPool2d.
template <size_t D>
class MaxPoolImpl : public Module {
 public:
  MaxPoolImpl(ExpandingArray<D> kernel_size) : MaxPoolImpl(MaxPoolOptions<D>(kernel_size)) {}  ///< a window size
  explicit MaxPoolImpl(const MaxPoolOptions<D>& options);                                      ///< from options
  Tensor forward(const Tensor& input);  ///< [N, C, ...] or [C, ...] -> the windows' maxima
  /// The maxima and the flat index of each within the input's spatial dims
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  void pretty_print(std::ostream& os) const override;  ///< "MaxPool2d(kernel_size=[2, 2], stride=[2, 2], ...)"

  MaxPoolOptions<D> options;  ///< what it was made with
};
/// Max over windows of [N, C, L], as torch.nn.MaxPool1d.
class MaxPool1dImpl : public MaxPoolImpl<1> {
 public:
  using MaxPoolImpl<1>::MaxPoolImpl;
};
/// Max over windows of [N, C, H, W], as torch.nn.MaxPool2d.
class MaxPool2dImpl : public MaxPoolImpl<2> {
 public:
  using MaxPoolImpl<2>::MaxPoolImpl;
};
STRATA_MODULE(MaxPool1d);
STRATA_MODULE(MaxPool2d);

/// Mean over sliding windows of [N, C, H, W], as torch.nn.AvgPool2d.
class AvgPool2dImpl : public Module {
 public:
  AvgPool2dImpl(ExpandingArray<2> kernel_size) : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}  ///< a window size
  explicit AvgPool2dImpl(const AvgPool2dOptions& options);                                        ///< from options
  Tensor forward(const Tensor& input);  ///< the windows' means
  void pretty_print(
      std::ostream& os) const override;  ///< "AvgPool2d(kernel_size=[3, 3], stride=[1, 1], padding=[1, 1])"

  AvgPool2dOptions options;  ///< what it was made with
};
STRATA_MODULE(AvgPool2d);

/// Mean over windows that tile [H, W] into output_size, as torch.nn.AdaptiveAvgPool2d.
class AdaptiveAvgPool2dImpl : public Module {
 public:
  AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size)
      : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}     ///< the output size
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options);  ///< from options
  Tensor forward(const Tensor& input);                                      ///< [N, C, H, W] -> [N, C, output_size]
  void pretty_print(std::ostream& os) const override;                       ///< "AdaptiveAvgPool2d(output_size=[1, 1])"

  AdaptiveAvgPool2dOptions options;  ///< what it was made with
};
STRATA_MODULE(AdaptiveAvgPool2d);

namespace functional {

using MaxPool1dFuncOptions = MaxPool1dOptions;                  ///< F::max_pool1d's options, as libtorch
using MaxPool2dFuncOptions = MaxPool2dOptions;                  ///< F::max_pool2d's options, as libtorch
using AvgPool2dFuncOptions = AvgPool2dOptions;                  ///< F::avg_pool2d's options, as libtorch
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;  ///< F::adaptive_avg_pool2d's options

Tensor max_pool1d(const Tensor& input, const MaxPool1dFuncOptions& options);  ///< torch::nn::functional::max_pool1d
Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& options);  ///< torch::nn::functional::max_pool2d
/// The maxima and their flat spatial indices, as torch::nn::functional::max_pool2d_with_indices
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& options);
Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& options);  ///< torch::nn::functional::avg_pool2d
/// Torch::nn::functional::adaptive_avg_pool2d
Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& options);

}  // namespace functional
}  // namespace strata::nn
