#pragma once
// The one codec for tensor metadata sent as int64 words: what a receiver needs to allocate a tensor
// it has not seen (dtype, shape, whether it requires grad). The pipeline engine's activation headers,
// the headers of the differentiable collectives and the DETAIL fingerprints all use it.
//
//   strata::Tensor t = strata::zeros({2, 3});
//   std::vector<int64_t> words;
//   strata::distributed::encode_meta(strata::distributed::meta_of(t, /*requires_grad=*/false), words);
//   size_t pos = 0;
//   auto m = strata::distributed::decode_meta(words, pos, "RecvActivation");  // throws on bad words

#include <cstdint>
#include <string_view>
#include <vector>

#include "strata/tensor/tensor.h"

namespace strata::distributed {

/// What a receiver allocates a tensor from.
struct TensorMeta {
  ScalarType dtype = kFloat;                           ///< element type
  bool requires_grad = false;                          ///< whether the receiver's tensor requires grad
  DimVector sizes;                                     ///< shape
  bool operator==(const TensorMeta&) const = default;  ///< same dtype, requires_grad and shape
};

/// Most dims decode_meta accepts.
constexpr int64_t kMaxMetaDims = 64;

/// t's dtype and shape, with requires_grad as given.
TensorMeta meta_of(const Tensor& t, bool requires_grad);
/// The word that stands for `dtype`.
int64_t dtype_code(ScalarType dtype);
/// The dtype a word stands for; throws naming `what` and the code when none does.
ScalarType dtype_from_code(int64_t code, std::string_view what);
/// The word that stands for `type`.
int64_t device_type_code(DeviceType type);
/// The device type a word stands for; throws naming `what` and the code when none does.
DeviceType device_type_from_code(int64_t code, std::string_view what);
/// Appends m as words: dtype code, requires_grad, number of dims, then the sizes.
void encode_meta(const TensorMeta& m, std::vector<int64_t>& words);
/// Reads what encode_meta wrote at words[pos] and moves pos past it; throws naming `what` on too few
/// words, a bad dtype code or flag, a number of dims outside [0, kMaxMetaDims] or a negative size.
TensorMeta decode_meta(IntArrayRef words, size_t& pos, std::string_view what);

}  // namespace strata::distributed
