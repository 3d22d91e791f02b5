#pragma once
// Saving and loading modules (torch::save / torch::load names) and training checkpoints, as safetensors files.
//
//   nn::Linear model(784, 10);
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
//   nn::save(*model, "model.safetensors");
//   nn::load(*model, "model.safetensors");          // names and shapes must match the module's
//
//   int epoch = 3;                                   // the last epoch trained
//   nn::save_checkpoint("ckpt.safetensors", *model, &opt, {{"epoch", std::to_string(epoch)}});
//   auto metadata = nn::load_checkpoint("ckpt.safetensors", *model, &opt);
//   int start_epoch = std::stoi(metadata.at("epoch")) + 1;
//
// A checkpoint holds the module's state dict under "model.", the optimizer's under "optimizer." and the
// caller's metadata in the file's __metadata__, so Python reads it with safetensors.torch.load_file.

#include <map>
#include <string>

#include "strata/nn/module.h"
#include "strata/optim/optimizer.h"

namespace strata::nn {

/// Writes module.state_dict() (parameters and buffers) to `path`, atomically (see save_file).
void save(const Module& module, const std::string& path);
/// Copies the tensors of `path` into the module's parameters and buffers; a missing or unexpected name or a
/// shape mismatch throws, naming the file and the key, before anything is written.
void load(Module& module, const std::string& path);

/// Writes a training checkpoint: `module` under "model.", `optimizer`'s state (when given) under "optimizer."
/// and `metadata` (e.g. the epoch) as the file's metadata.
void save_checkpoint(const std::string& path, const Module& module, const optim::Optimizer* optimizer = nullptr,
                     const std::map<std::string, std::string>& metadata = {});
/// Restores a checkpoint written by save_checkpoint into `module` and (when given) `optimizer`, and returns
/// its metadata. Without an optimizer, optimizer state in the file is ignored.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& module,
                                                   optim::Optimizer* optimizer = nullptr);

}  // namespace strata::nn
