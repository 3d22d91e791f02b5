#pragma once
// The IDX file format of MNIST and Fashion-MNIST, gzip-compressed or plain.
//
//   using namespace strata;
//   Tensor labels = data::read_idx("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz");
//   // int64 [60000]
//   Tensor images = data::read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", kFloat32);
//   // float32 [60000, 28, 28] holding 0..255
//
// An IDX file is a 4-byte magic number (two zero bytes, the element type code, the number of
// dims), one big-endian uint32 per dim, then the elements in row-major order, big-endian.

#include <optional>
#include <string>

#include "strata/tensor/tensor.h"

namespace strata::data {

/// Reads an IDX file (gzip-compressed or plain) into a contiguous CPU tensor of its shape.
/// Element types 0x08 (ubyte), 0x09 (byte), 0x0B (short) and 0x0C (int) become int64, 0x0D (float)
/// float32 and 0x0E (double) float64, unless `dtype` names another type to convert to (kUInt8 keeps ubyte
/// images at one byte per element, as torchvision's MNIST holds them). Throws
/// strata::Error naming the file for a missing file, a bad magic number or type code, sizes that
/// overflow, data shorter or longer than the header declares, and a float element that an integer `dtype`
/// cannot hold (NaN, infinite or past int64's range).
Tensor read_idx(const std::string& path, std::optional<ScalarType> dtype = std::nullopt);

}  // namespace strata::data
