#include "strata/nn/pooling.h"

#include "strata/autograd/ops.h"

namespace strata::nn {
namespace {

template <size_t D>
std::tuple<Tensor, Tensor> max_pool_with_indices(const Tensor& input, const MaxPoolOptions<D>& o) {
  if constexpr (D == 1)
    return strata::max_pool1d_with_indices(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(),
                                           o.ceil_mode());
  else
    return strata::max_pool2d_with_indices(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(),
                                           o.ceil_mode());
}

Tensor avg_pool(const Tensor& input, const AvgPool2dOptions& o) {
  return strata::avg_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad(),
                            o.divisor_override());
}

}  // namespace

template <size_t D>
MaxPoolImpl<D>::MaxPoolImpl(const MaxPoolOptions<D>& opts)
    : Module(D == 1 ? "MaxPool1d" : "MaxPool2d"), options(opts) {}

template <size_t D>
Tensor MaxPoolImpl<D>::forward(const Tensor& input) {
  return std::get<0>(max_pool_with_indices<D>(input, options));
}

template <size_t D>
std::tuple<Tensor, Tensor> MaxPoolImpl<D>::forward_with_indices(const Tensor& input) {
  return max_pool_with_indices<D>(input, options);
}

template <size_t D>
void MaxPoolImpl<D>::pretty_print(std::ostream& os) const {
  os << (D == 1 ? "MaxPool1d" : "MaxPool2d") << "(kernel_size=" << IntArrayRef(options.kernel_size())
     << ", stride=" << IntArrayRef(options.stride()) << ", padding=" << IntArrayRef(options.padding())
     << ", dilation=" << IntArrayRef(options.dilation()) << ", ceil_mode=" << (options.ceil_mode() ? "true" : "false")
     << ")";
}

template class MaxPoolImpl<1>;
template class MaxPoolImpl<2>;

AvgPool2dImpl::AvgPool2dImpl(const AvgPool2dOptions& opts) : Module("AvgPool2d"), options(opts) {}

Tensor AvgPool2dImpl::forward(const Tensor& input) { return avg_pool(input, options); }

void AvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AvgPool2d(kernel_size=" << IntArrayRef(options.kernel_size()) << ", stride=" << IntArrayRef(options.stride())
     << ", padding=" << IntArrayRef(options.padding()) << ")";
}

AdaptiveAvgPool2dImpl::AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& opts)
    : Module("AdaptiveAvgPool2d"), options(opts) {}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& input) {
  return strata::adaptive_avg_pool2d(input, options.output_size());
}

void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=" << IntArrayRef(options.output_size()) << ")";
}

namespace functional {

Tensor max_pool1d(const Tensor& input, const MaxPool1dFuncOptions& options) {
  return std::get<0>(max_pool_with_indices<1>(input, options));
}
Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& options) {
  return std::get<0>(max_pool_with_indices<2>(input, options));
}
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& options) {
  return max_pool_with_indices<2>(input, options);
}
Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& options) { return avg_pool(input, options); }
Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& options) {
  return strata::adaptive_avg_pool2d(input, options.output_size());
}

}  // namespace functional
}  // namespace strata::nn
