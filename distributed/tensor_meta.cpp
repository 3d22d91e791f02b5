#include "strata/distributed/tensor_meta.h"

namespace strata::distributed {

TensorMeta meta_of(const Tensor& t, bool requires_grad) { return {t.dtype(), requires_grad, DimVector(t.sizes())}; }

int64_t dtype_code(ScalarType dtype) { return static_cast<int64_t>(dtype); }

ScalarType dtype_from_code(int64_t code, std::string_view what) {
  STRATA_CHECK(code >= 0 && code < kNumScalarTypes, what, ": bad dtype code ", code, " (codes are 0 to ",
               kNumScalarTypes - 1, ")");
  return static_cast<ScalarType>(code);
}

int64_t device_type_code(DeviceType type) { return static_cast<int64_t>(type); }

DeviceType device_type_from_code(int64_t code, std::string_view what) {
  STRATA_CHECK(code >= 0 && code < kNumDeviceTypes, what, ": bad device type code ", code, " (codes are 0 to ",
               kNumDeviceTypes - 1, ")");
  return static_cast<DeviceType>(code);
}

void encode_meta(const TensorMeta& m, std::vector<int64_t>& words) {
  words.insert(words.end(), {dtype_code(m.dtype), int64_t{m.requires_grad}, static_cast<int64_t>(m.sizes.size())});
  words.insert(words.end(), m.sizes.begin(), m.sizes.end());
}

TensorMeta decode_meta(IntArrayRef words, size_t& pos, std::string_view what) {
  auto next = [&](const char* field) {
    STRATA_CHECK(pos < words.size(), what, ": tensor metadata ends before its ", field, " (", words.size(), " words)");
    return words[pos++];
  };
  TensorMeta m;
  m.dtype = dtype_from_code(next("dtype"), what);
  const int64_t flag = next("requires_grad flag");
  STRATA_CHECK(flag == 0 || flag == 1, what, ": bad requires_grad flag ", flag, " in tensor metadata");
  m.requires_grad = flag != 0;
  const int64_t dims = next("number of dims");
  STRATA_CHECK(dims >= 0 && dims <= kMaxMetaDims, what, ": bad number of dims ", dims, " in tensor metadata (0 to ",
               kMaxMetaDims, ")");
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t size = next("sizes");
    STRATA_CHECK(size >= 0, what, ": negative size ", size, " at dim ", d, " in tensor metadata");
    m.sizes.push_back(size);
  }
  return m;
}

}  // namespace strata::distributed
