// The tensor metadata codec (distributed/tensor_meta.h): a round trip of every dtype and shape kind, and an
// error naming the caller for each kind of bad word list.

#include <strata/distributed/tensor_meta.h>

#include "../helpers.h"

namespace dist = strata::distributed;
using namespace strata;

TEST(TensorMeta, RoundTrip) {
  std::vector<dist::TensorMeta> metas;
  for (int code = 0; code < kNumScalarTypes; ++code)
    metas.push_back({static_cast<ScalarType>(code), code % 2 == 1, DimVector{code, 0, 7}});
  metas.push_back({kDouble, true, DimVector()});                       // a 0-dim tensor
  metas.push_back({kFloat, false, DimVector(dist::kMaxMetaDims, 1)});  // the most dims, beyond DimVector's inline ones
  std::vector<int64_t> words;
  for (const auto& m : metas) dist::encode_meta(m, words);
  size_t pos = 0;
  for (const auto& m : metas) EXPECT_EQ(dist::decode_meta(words, pos, "test"), m);
  EXPECT_EQ(pos, words.size());
  EXPECT_EQ(dist::meta_of(zeros({2, 3}, kLong), true), (dist::TensorMeta{kLong, true, DimVector{2, 3}}));
  for (int code = 0; code < kNumDeviceTypes; ++code)
    EXPECT_EQ(dist::device_type_code(dist::device_type_from_code(code, "test")), code);
}

TEST(TensorMeta, BadWordsNameTheCaller) {
  auto decode = [](std::vector<int64_t> words) {
    size_t pos = 0;
    return dist::decode_meta(words, pos, "RecvActivation (stage 1)");
  };
  EXPECT_THROW_MSG(decode({kNumScalarTypes, 0, 0}), "RecvActivation (stage 1): bad dtype code " +
                                                        std::to_string(kNumScalarTypes) + " (codes are 0 to " +
                                                        std::to_string(kNumScalarTypes - 1) + ")");
  EXPECT_THROW_MSG(decode({-1, 0, 0}), "RecvActivation (stage 1): bad dtype code -1");
  EXPECT_THROW_MSG(decode({2, 2, 0}), "RecvActivation (stage 1): bad requires_grad flag 2");
  EXPECT_THROW_MSG(decode({2, 0, -1}), "bad number of dims -1 in tensor metadata");
  EXPECT_THROW_MSG(decode({2, 0, dist::kMaxMetaDims + 1}), "bad number of dims 65");
  EXPECT_THROW_MSG(decode({2, 0, 2, 3, -4}), "RecvActivation (stage 1): negative size -4 at dim 1");
  EXPECT_THROW_MSG(decode({2, 0, 2, 3}), "RecvActivation (stage 1): tensor metadata ends before its sizes (4 words)");
  EXPECT_THROW_MSG(decode({}), "tensor metadata ends before its dtype (0 words)");
  EXPECT_THROW_MSG(dist::device_type_from_code(kNumDeviceTypes, "header"),
                   "header: bad device type code " + std::to_string(kNumDeviceTypes));
}
