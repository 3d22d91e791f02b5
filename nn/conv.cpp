#include "strata/nn/conv.h"

#include <cmath>

#include "strata/autograd/ops.h"
#include "strata/nn/init.h"

namespace strata::nn {
namespace {

/// The explicit padding of a ConvPadding, or "valid" / "same".
template <size_t D>
void print_padding(std::ostream& os, const ConvPadding<D>& padding) {
  if (std::holds_alternative<enumtype::kValid>(padding))
    os << ", padding=kValid";
  else if (std::holds_alternative<enumtype::kSame>(padding))
    os << ", padding=kSame";
  else if (*std::get<ExpandingArray<D>>(padding) != *ExpandingArray<D>(0))
    os << ", padding=" << IntArrayRef(std::get<ExpandingArray<D>>(padding));
}

/// Weight kaiming_uniform_(a = sqrt(5)) and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch's _ConvNd.
void reset_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (!bias.defined()) return;
  const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  init::uniform_(bias, -bound, bound);
}

void check_channels(int64_t in, int64_t out, int64_t groups, const char* name) {
  STRATA_CHECK(groups > 0, name, ": groups must be positive, got ", groups);
  STRATA_CHECK(in > 0 && out > 0, name, ": in_channels and out_channels must be positive, got ", in, " and ", out);
  STRATA_CHECK(in % groups == 0, name, ": in_channels must be divisible by groups, got ", in, " and ", groups);
  STRATA_CHECK(out % groups == 0, name, ": out_channels must be divisible by groups, got ", out, " and ", groups);
}

/// conv1d or conv2d with a ConvPadding: explicit sizes, kValid or kSame.
template <size_t D>
Tensor convolve(const Tensor& input, const Tensor& weight, const Tensor& bias, const ExpandingArray<D>& stride,
                const ConvPadding<D>& padding, const ExpandingArray<D>& dilation, int64_t groups) {
  auto op = [&](auto pad) {
    if constexpr (D == 1)
      return conv1d(input, weight, bias, stride, pad, dilation, groups);
    else
      return conv2d(input, weight, bias, stride, pad, dilation, groups);
  };
  if (std::holds_alternative<enumtype::kValid>(padding)) return op(PaddingMode(kValid));
  if (std::holds_alternative<enumtype::kSame>(padding)) return op(PaddingMode(kSame));
  return op(IntArrayRef(std::get<ExpandingArray<D>>(padding)));
}

}  // namespace

template <size_t D>
ConvImpl<D>::ConvImpl(const ConvOptions<D>& opts) : Module(D == 1 ? "Conv1d" : "Conv2d"), options(opts) {
  const char* name = D == 1 ? "Conv1d" : "Conv2d";
  check_channels(options.in_channels(), options.out_channels(), options.groups(), name);
  DimVector sizes{options.out_channels(), options.in_channels() / options.groups()};
  for (int64_t k : *options.kernel_size()) {
    STRATA_CHECK(k > 0, name, ": kernel_size must be positive, got ", IntArrayRef(options.kernel_size()));
    sizes.push_back(k);
  }
  weight = register_parameter("weight", empty(sizes));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_channels()}));
  reset_parameters();
}

template <size_t D>
void ConvImpl<D>::reset_parameters() {
  reset_conv(weight, bias);
}

template <size_t D>
Tensor ConvImpl<D>::forward(const Tensor& input) {
  return convolve<D>(input, weight, bias, options.stride(), options.padding(), options.dilation(), options.groups());
}

template <size_t D>
void ConvImpl<D>::pretty_print(std::ostream& os) const {
  os << (D == 1 ? "Conv1d(" : "Conv2d(") << options.in_channels() << ", " << options.out_channels()
     << ", kernel_size=" << IntArrayRef(options.kernel_size()) << ", stride=" << IntArrayRef(options.stride());
  print_padding<D>(os, options.padding());
  if (*options.dilation() != *ExpandingArray<D>(1)) os << ", dilation=" << IntArrayRef(options.dilation());
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  os << ")";
}

template class ConvImpl<1>;
template class ConvImpl<2>;

ConvTranspose2dImpl::ConvTranspose2dImpl(const ConvTranspose2dOptions& opts)
    : Module("ConvTranspose2d"), options(opts) {
  check_channels(options.in_channels(), options.out_channels(), options.groups(), "ConvTranspose2d");
  STRATA_CHECK(options.kernel_size()[0] > 0 && options.kernel_size()[1] > 0,
               "ConvTranspose2d: kernel_size must be positive, got ", IntArrayRef(options.kernel_size()));
  weight = register_parameter("weight", empty({options.in_channels(), options.out_channels() / options.groups(),
                                               options.kernel_size()[0], options.kernel_size()[1]}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_channels()}));
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor ConvTranspose2dImpl::forward(const Tensor& input) {
  return conv_transpose2d(input, weight, bias, options.stride(), options.padding(), options.output_padding(),
                          options.groups(), options.dilation());
}

void ConvTranspose2dImpl::pretty_print(std::ostream& os) const {
  os << "ConvTranspose2d(" << options.in_channels() << ", " << options.out_channels()
     << ", kernel_size=" << IntArrayRef(options.kernel_size()) << ", stride=" << IntArrayRef(options.stride());
  if (*options.padding() != *ExpandingArray<2>(0)) os << ", padding=" << IntArrayRef(options.padding());
  if (*options.output_padding() != *ExpandingArray<2>(0))
    os << ", output_padding=" << IntArrayRef(options.output_padding());
  if (*options.dilation() != *ExpandingArray<2>(1)) os << ", dilation=" << IntArrayRef(options.dilation());
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  os << ")";
}

namespace functional {

Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& o) {
  return convolve<1>(input, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& o) {
  return convolve<2>(input, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const ConvTranspose2dFuncOptions& o) {
  return strata::conv_transpose2d(input, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                                  o.dilation());
}

}  // namespace functional
}  // namespace strata::nn
