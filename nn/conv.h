#pragma once
// Convolution layers with libtorch's names and options: Conv1d, Conv2d and ConvTranspose2d, their
// Options classes, and the options of the functional forms (nn::functional::conv2d, ...).
//
//   nn::Conv2d conv1(1, 10, 5);                                              // 5x5 kernel, stride 1
//   nn::Conv2d conv2(nn::Conv2dOptions(10, 20, 3).stride(2).padding(1).bias(false));
//   nn::Conv2d same(nn::Conv2dOptions(20, 20, 3).padding(kSame));            // keeps H and W
//   Tensor y = same(conv2(conv1(randn({64, 1, 28, 28}))));                  // [64, 20, 12, 12]
//   nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(20, 10, 2).stride(2)); // [64, 10, 24, 24]
//   Tensor z = up(y);
//   std::cout << *conv2;  // Conv2d(10, 20, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], bias=false)

#include <cstdint>
#include <ostream>
#include <variant>

#include "strata/autograd/ops.h"
#include "strata/nn/module.h"
#include "strata/tensor/arg.h"

namespace strata {

namespace nn {

/// A convolution's padding: sizes per spatial dim, kValid or kSame.
template <size_t D>
using ConvPadding = std::variant<ExpandingArray<D>, enumtype::kValid, enumtype::kSame>;

/// Conv1d's and Conv2d's options: ConvOptions<2>(in_channels, out_channels, kernel_size).stride(2).
template <size_t D>
class ConvOptions {
 public:
  /// The channels and kernel size; stride 1, no padding, no dilation, one group, a bias.
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  STRATA_ARG(int64_t, in_channels);             ///< channels of the input
  STRATA_ARG(int64_t, out_channels);            ///< channels of the output
  STRATA_ARG(ExpandingArray<D>, kernel_size);   ///< the kernel's extent per spatial dim
  STRATA_ARG(ExpandingArray<D>, stride) = 1;    ///< step between windows
  STRATA_ARG(ExpandingArray<D>, dilation) = 1;  ///< spacing between kernel elements
  STRATA_ARG(int64_t, groups) = 1;              ///< channel groups convolved apart
  STRATA_ARG(bool, bias) = true;                ///< whether to add a learned bias

 public:
  /// Zero padding per spatial dim
  ConvOptions& padding(ExpandingArray<D> value) {
    padding_ = value;
    return *this;
  }
  ConvOptions& padding(enumtype::kValid value) {
    padding_ = value;
    return *this;
  }  ///< no padding
  ConvOptions& padding(enumtype::kSame value) {
    padding_ = value;
    return *this;
  }                                                           ///< the output as large as the input (stride 1)
  const ConvPadding<D>& padding() const { return padding_; }  ///< the padding

 private:
  ConvPadding<D> padding_ = ExpandingArray<D>(0);
};
using Conv1dOptions = ConvOptions<1>;  ///< Conv1d's options
using Conv2dOptions = ConvOptions<2>;  ///< Conv2d's options

/// ConvTranspose2d's options: ConvTranspose2dOptions(in_channels, out_channels, kernel_size).stride(2).
class ConvTranspose2dOptions {
 public:
  /// The channels and kernel size; stride 1, no padding, one group, a bias.
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  STRATA_ARG(int64_t, in_channels);                   ///< channels of the input
  STRATA_ARG(int64_t, out_channels);                  ///< channels of the output
  STRATA_ARG(ExpandingArray<2>, kernel_size);         ///< the kernel's extent per spatial dim
  STRATA_ARG(ExpandingArray<2>, stride) = 1;          ///< step between windows
  STRATA_ARG(ExpandingArray<2>, padding) = 0;         ///< removed from each side of the output
  STRATA_ARG(ExpandingArray<2>, output_padding) = 0;  ///< added to one side of the output
  STRATA_ARG(int64_t, groups) = 1;                    ///< channel groups convolved apart
  STRATA_ARG(bool, bias) = true;                      ///< whether to add a learned bias
  STRATA_ARG(ExpandingArray<2>, dilation) = 1;        ///< spacing between kernel elements
};

/// N-D convolution (cross-correlation) over [N, C, ...] or unbatched [C, ...], as torch.nn.Conv1d / Conv2d.
template <size_t D>
class ConvImpl : public Module {
 public:
  /// in_channels -> out_channels with a kernel_size kernel and the other options at their defaults
  ConvImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : ConvImpl(ConvOptions<D>(in_channels, out_channels, kernel_size)) {}
  explicit ConvImpl(const ConvOptions<D>& options);  ///< from options
  /// Draws the parameters again as torch: weight kaiming_uniform_(a = sqrt(5)), bias U(-1/sqrt(fan_in), ...)
  void reset_parameters();
  Tensor forward(const Tensor& input);                 ///< [N, in_channels, ...] -> [N, out_channels, ...]
  void pretty_print(std::ostream& os) const override;  ///< "Conv2d(1, 10, kernel_size=[5, 5], stride=[1, 1])"

  ConvOptions<D> options;  ///< what it was made with
  Tensor weight;           ///< [out_channels, in_channels / groups, kernel...]
  Tensor bias;             ///< [out_channels], undefined without bias
};
/// 1-D convolution over [N, C, L], as torch.nn.Conv1d.
class Conv1dImpl : public ConvImpl<1> {
 public:
  using ConvImpl<1>::ConvImpl;
};
/// 2-D convolution over [N, C, H, W], as torch.nn.Conv2d.
class Conv2dImpl : public ConvImpl<2> {
 public:
  using ConvImpl<2>::ConvImpl;
};
STRATA_MODULE(Conv1d);
STRATA_MODULE(Conv2d);

/// Transposed 2-D convolution (the gradient of Conv2d with respect to its input), as torch.nn.ConvTranspose2d.
class ConvTranspose2dImpl : public Module {
 public:
  /// in_channels -> out_channels with a kernel_size kernel and the other options at their defaults
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : ConvTranspose2dImpl(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)) {}
  explicit ConvTranspose2dImpl(const ConvTranspose2dOptions& options);  ///< from options
  void reset_parameters();              ///< as ConvImpl's, with fan_in from weight [in, out / groups, kH, kW] as torch
  Tensor forward(const Tensor& input);  ///< [N, in_channels, H, W] -> [N, out_channels, H', W']
  void pretty_print(std::ostream& os) const override;  ///< "ConvTranspose2d(20, 10, kernel_size=[2, 2], ...)"

  ConvTranspose2dOptions options;  ///< what it was made with
  Tensor weight;                   ///< [in_channels, out_channels / groups, kH, kW]
  Tensor bias;                     ///< [out_channels], undefined without bias
};
STRATA_MODULE(ConvTranspose2d);

namespace functional {

/// The options of functional conv1d / conv2d: F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).bias(b)).
template <size_t D>
class ConvFuncOptions {
 public:
  STRATA_ARG(Tensor, bias);                     ///< optional bias [out_channels]
  STRATA_ARG(ExpandingArray<D>, stride) = 1;    ///< step between windows
  STRATA_ARG(ExpandingArray<D>, dilation) = 1;  ///< spacing between kernel elements
  STRATA_ARG(int64_t, groups) = 1;              ///< channel groups convolved apart

 public:
  /// Zero padding per spatial dim
  ConvFuncOptions& padding(ExpandingArray<D> value) {
    padding_ = value;
    return *this;
  }
  ConvFuncOptions& padding(enumtype::kValid value) {
    padding_ = value;
    return *this;
  }  ///< no padding
  ConvFuncOptions& padding(enumtype::kSame value) {
    padding_ = value;
    return *this;
  }  ///< the output as large as the input (stride 1)  ///< sizes
  const ConvPadding<D>& padding() const { return padding_; }  ///< the padding

 private:
  ConvPadding<D> padding_ = ExpandingArray<D>(0);
};
using Conv1dFuncOptions = ConvFuncOptions<1>;  ///< F::conv1d's options
using Conv2dFuncOptions = ConvFuncOptions<2>;  ///< F::conv2d's options

/// F::conv_transpose2d's options.
class ConvTranspose2dFuncOptions {
 public:
  STRATA_ARG(Tensor, bias);                           ///< optional bias [out_channels]
  STRATA_ARG(ExpandingArray<2>, stride) = 1;          ///< step between windows
  STRATA_ARG(ExpandingArray<2>, padding) = 0;         ///< removed from each side of the output
  STRATA_ARG(ExpandingArray<2>, output_padding) = 0;  ///< added to one side of the output
  STRATA_ARG(int64_t, groups) = 1;                    ///< channel groups convolved apart
  STRATA_ARG(ExpandingArray<2>, dilation) = 1;        ///< spacing between kernel elements
};

/// 1-D convolution with options, as torch::nn::functional::conv1d
Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& options = {});
/// 2-D convolution with options, as torch::nn::functional::conv2d
Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& options = {});
/// Transposed 2-D convolution with options, as torch::nn::functional::conv_transpose2d
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const ConvTranspose2dFuncOptions& options = {});

}  // namespace functional
}  // namespace nn
}  // namespace strata
