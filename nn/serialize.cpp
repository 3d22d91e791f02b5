#include "strata/nn/serialize.h"

#include <string_view>

#include "strata/nn/safetensors.h"

namespace strata::nn {
namespace {

constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kOptimizerPrefix = "optimizer.";
constexpr std::string_view kTensorKey = "tensor";

// Runs a load_state_dict call and puts the entry point, the file and the part of the checkpoint in front of
// its error, so that the message names the file as well as the key.
template <class F>
void naming_the_file(const char* op, const std::string& path, std::string_view part, F&& load) {
  try {
    load();
  } catch (const Error& e) {
    detail::throw_error(__FILE__, __LINE__, op, ": '", path, "': ", part, e.what());
  }
}

}  // namespace

void save(const Module& module, const std::string& path) { save_file(module.state_dict(), path); }

void load(Module& module, const std::string& path) {
  const StateDict dict = load_file(path);
  naming_the_file("load", path, "", [&] { module.load_state_dict(dict); });
}

void save(const optim::Optimizer& optimizer, const std::string& path) { save_file(optimizer.state_dict(), path); }

void load(optim::Optimizer& optimizer, const std::string& path) {
  const StateDict dict = load_file(path);
  naming_the_file("load", path, "", [&] { optimizer.load_state_dict(dict); });
}

void save(const Tensor& tensor, const std::string& path) { save_file({{std::string(kTensorKey), tensor}}, path); }

void load(Tensor& tensor, const std::string& path) {
  StateDict dict = load_file(path);
  STRATA_CHECK(dict.size() == 1 && dict.begin()->first == kTensorKey, "load: '", path, "' holds ", dict.size(),
               " tensors", dict.empty() ? "" : " (the first named '" + dict.begin()->first + "')",
               ", not the one tensor named '", kTensorKey, "' that save(tensor, path) writes");
  tensor = dict.begin()->second;
}

void save_checkpoint(const std::string& path, const Module& module, const optim::Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata) {
  StateDict dict;
  for (auto& [name, t] : module.state_dict()) dict.emplace(std::string(kModelPrefix) + name, t);
  if (optimizer)
    for (auto& [name, t] : optimizer->state_dict()) dict.emplace(std::string(kOptimizerPrefix) + name, t);
  save_file(dict, path, metadata);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& module,
                                                   optim::Optimizer* optimizer) {
  std::map<std::string, std::string> metadata;
  StateDict model_part, optimizer_part;
  for (const auto& [key, t] : load_file(path, &metadata)) {
    if (key.starts_with(kModelPrefix)) {
      model_part.emplace(key.substr(kModelPrefix.size()), t);
    } else if (key.starts_with(kOptimizerPrefix)) {
      optimizer_part.emplace(key.substr(kOptimizerPrefix.size()), t);
    } else {
      detail::throw_error(__FILE__, __LINE__, "load_checkpoint: '", path, "': tensor '", key, "' is under neither ",
                          kModelPrefix, " nor ", kOptimizerPrefix, " (not a file written by save_checkpoint)");
    }
  }
  STRATA_CHECK(!optimizer || !optimizer_part.empty(), "load_checkpoint: '", path,
               "': the file holds no optimizer state (it was saved without an optimizer)");

  // Each load_state_dict checks everything before writing; keeping the module's old values lets a bad optimizer
  // part leave the module unchanged too.
  StateDict previous;
  if (optimizer)
    for (auto& [name, t] : module.state_dict()) previous.emplace(name, t.clone());
  naming_the_file("load_checkpoint", path, "model.*: ", [&] { module.load_state_dict(model_part); });
  if (optimizer) {
    naming_the_file("load_checkpoint", path, "optimizer.*: ", [&] {
      try {
        optimizer->load_state_dict(optimizer_part);
      } catch (const Error&) {
        module.load_state_dict(previous);
        throw;
      }
    });
  }
  return metadata;
}

}  // namespace strata::nn
