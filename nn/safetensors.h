#pragma once
// State dicts in the safetensors format (https://huggingface.co/docs/safetensors), with the names of
// Python's safetensors.torch, so checkpoints move between strata and the Python ecosystem.
//
//   nn::StateDict tensors = {{"weight", randn({4, 3})}, {"steps", tensor({7})}};
//   nn::save_file(tensors, "model.safetensors", {{"epoch", "3"}});
//
//   std::map<std::string, std::string> metadata;
//   nn::StateDict loaded = nn::load_file("model.safetensors", &metadata);   // metadata["epoch"] == "3"
//
// File layout: an 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__": {...}, "name": {"dtype": "F32", "shape": [4, 3], "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the raw little-endian data (offsets count from there).
// strata holds BOOL, U8, I8, I16, I32, I64, F16, BF16, F32 and F64; files with other dtypes are rejected by name. load_file returns
// CPU tensors; Module::load_state_dict copies them onto each parameter's device.

#include <map>
#include <string>

#include "strata/nn/module.h"

namespace strata::nn {

/// Writes `tensors` (GPU ones are copied to the host; non-contiguous ones are written contiguously) and string
/// `metadata` to `path`.
/// Atomic: the bytes go to a temporary file beside `path` that is synced and renamed over it, so `path` holds
/// either the old file or the complete new one. A writer killed mid-save leaves "<path>.tmp.<host>.<pid>.<n>"
/// behind; load_file never reads those, and the next save of `path` on that host removes those of dead pids.
void save_file(const StateDict& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata = {});

/// Reads every tensor of the safetensors file at `path` (and its __metadata__ into `metadata` when given).
/// The whole header is validated before any data is read; any problem throws strata::Error naming the file
/// and, where there is one, the tensor.
StateDict load_file(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace strata::nn
