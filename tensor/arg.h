#pragma once
// STRATA_ARG declares an option with a fluent setter, as libtorch's TORCH_ARG, for the options
// classes of layers and optimizers:
//
//   class LinearOptions {
//    public:
//     LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
//     STRATA_ARG(int64_t, in_features);
//     STRATA_ARG(int64_t, out_features);
//     STRATA_ARG(bool, bias) = true;
//   };
//   auto o = LinearOptions(784, 256).bias(false);   // o.bias() == false

/// Declares member `name_` of type T with a reader name() and a chaining writer name(value). Reads
/// are name(), writes name(value); the macro leaves the class in `private:`.
#define STRATA_ARG(T, name)                          \
 public:                                             \
  auto name(const T& value)->decltype(*this) {       \
    name##_ = value;                                 \
    return *this;                                    \
  }                                                  \
  const T& name() const noexcept { return name##_; } \
                                                     \
 private:                                            \
  T name##_
