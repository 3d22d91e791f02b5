#pragma once
// Saving and loading modules (torch::save / torch::load names) and training checkpoints, as safetensors files.
//
//   nn::Linear model(784, 10);
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
//   nn::save(*model, "model.safetensors");
//   nn::load(*model, "model.safetensors");          // names and shapes must match the module's
//   strata::save(model, "model.safetensors");       // torch::save's forms: a module holder,
//   strata::save(opt, "optimizer.safetensors");     // an optimizer's state
//   Tensor t = randn({2, 3}), u;
//   strata::save(t, "t.safetensors");               // and a tensor (the file's one tensor, "tensor")
//   strata::load(u, "t.safetensors");               // u is now a tensor equal to t
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
/// save of the module a holder holds, as torch::save(model, path).
template <class Impl>
void save(const ModuleHolder<Impl>& module, const std::string& path) {
  save(*module, path);
}
/// load into the module a holder holds, as torch::load(model, path).
template <class Impl>
void load(ModuleHolder<Impl>& module, const std::string& path) {
  load(*module, path);
}
/// Writes optimizer.state_dict() to `path`.
void save(const optim::Optimizer& optimizer, const std::string& path);
/// Restores an optimizer's state saved by save(optimizer, path) into an optimizer made the same way.
void load(optim::Optimizer& optimizer, const std::string& path);
/// Writes one tensor to `path`, as the file's only tensor, named "tensor".
void save(const Tensor& tensor, const std::string& path);
/// Sets `tensor` to the one tensor a file holds (on the CPU); a file with other or more tensors throws.
void load(Tensor& tensor, const std::string& path);

/// Writes a training checkpoint: `module` under "model.", `optimizer`'s state (when given) under "optimizer."
/// and `metadata` (e.g. the epoch) as the file's metadata.
void save_checkpoint(const std::string& path, const Module& module, const optim::Optimizer* optimizer = nullptr,
                     const std::map<std::string, std::string>& metadata = {});
/// Restores a checkpoint written by save_checkpoint into `module` and (when given) `optimizer`, and returns
/// its metadata. Without an optimizer, optimizer state in the file is ignored.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& module,
                                                   optim::Optimizer* optimizer = nullptr);

}  // namespace strata::nn

namespace strata {
using nn::load;  ///< torch::load's name: strata::load(model, path)
using nn::save;  ///< torch::save's name: strata::save(model, path)
}  // namespace strata
