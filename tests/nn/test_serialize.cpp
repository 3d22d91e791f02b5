#include "strata/nn/linear.h"
#include "strata/nn/safetensors.h"
#include "strata/nn/serialize.h"
#include "strata/optim/adam.h"
#include "strata/optim/sgd.h"
#include "../helpers.h"

namespace strata::nn {
namespace {

using strata::testing::same_state;

class Serialize : public strata::testing::TempFolderTest {};

// One optimizer step of `model` on a fixed batch.
void train_step(Linear& model, optim::Optimizer& opt) {
  opt.zero_grad();
  mse_loss(model(full({4, 3}, 0.5)), zeros({4, 2})).backward();
  opt.step();
}

TEST_F(Serialize, ModuleRoundTrips) {
  manual_seed(1);
  Linear saved(3, 2);
  manual_seed(2);
  Linear loaded(3, 2);
  const std::string path = file("model.safetensors");
  save(*saved, path);
  EXPECT_FALSE(same_state(saved->state_dict(), loaded->state_dict()));
  load(*loaded, path);
  EXPECT_TRUE(same_state(saved->state_dict(), loaded->state_dict()));
  EXPECT_TRUE(same_state(load_file(path), saved->state_dict()));  // a plain safetensors file
}

TEST_F(Serialize, LoadNamesTheFileAndTheKey) {
  const std::string path = file("model.safetensors");
  Linear with_bias(3, 2), without_bias(LinearOptions(3, 2).bias(false)), wider(3, 5);
  const StateDict before = with_bias->state_dict();
  const StateDict kept = {{"weight", before.at("weight").clone()}, {"bias", before.at("bias").clone()}};

  save(*without_bias, path);
  EXPECT_THROW_MSG(load(*with_bias, path), "load: '" + path + "': Linear::load_state_dict: missing keys: \"bias\"");
  save(*wider, path);
  EXPECT_THROW_MSG(load(*with_bias, path),
                   "load: '" + path +
                       "': Linear::load_state_dict: size mismatch for \"weight\": the state dict has "
                       "[5, 3], the module has [2, 3]");
  EXPECT_TRUE(same_state(with_bias->state_dict(), kept));  // nothing written on error

  save(*with_bias, path);
  EXPECT_THROW_MSG(load(*without_bias, path),
                   "load: '" + path + "': Linear::load_state_dict: unexpected keys: \"bias\"");
  EXPECT_THROW_MSG(load(*with_bias, file("missing.safetensors")), "load_file: '" + file("missing.safetensors"));
}

// A run that saves a checkpoint, is restored into fresh objects and goes on ends exactly where an uninterrupted
// run ends.
TEST_F(Serialize, CheckpointResumesBitExactly) {
  manual_seed(3);
  Linear model(3, 2);
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.1));
  for (int i = 0; i < 3; ++i) train_step(model, opt);
  const std::string path = file("ckpt.safetensors");
  save_checkpoint(path, *model, &opt, {{"epoch", "3"}});

  manual_seed(4);
  Linear resumed(3, 2);
  optim::Adam resumed_opt(resumed->parameters(), optim::AdamOptions(0.5));
  const auto metadata = load_checkpoint(path, *resumed, &resumed_opt);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"epoch", "3"}}));
  EXPECT_TRUE(same_state(resumed->state_dict(), model->state_dict()));
  EXPECT_TRUE(same_state(resumed_opt.state_dict(), opt.state_dict()));
  EXPECT_DOUBLE_EQ(resumed_opt.lr(), 0.1);

  train_step(model, opt);
  train_step(resumed, resumed_opt);
  EXPECT_TRUE(same_state(resumed->state_dict(), model->state_dict()));

  // The file is plain safetensors: the two parts under their prefixes.
  const StateDict raw = load_file(path);
  EXPECT_TRUE(raw.count("model.weight") && raw.count("optimizer.state.0.exp_avg") &&
              raw.count("optimizer.param_groups.0.lr"));
}

TEST_F(Serialize, CheckpointWithoutOptimizer) {
  manual_seed(5);
  Linear model(3, 2), other(3, 2);
  optim::SGD opt(other->parameters(), optim::SGDOptions(0.1));
  const std::string path = file("ckpt.safetensors");
  save_checkpoint(path, *model, nullptr, {{"epoch", "0"}});
  EXPECT_THROW_MSG(load_checkpoint(path, *other, &opt),
                   "load_checkpoint: '" + path + "': the file holds no optimizer state");
  EXPECT_EQ(load_checkpoint(path, *other).at("epoch"), "0");
  EXPECT_TRUE(same_state(other->state_dict(), model->state_dict()));

  save_checkpoint(path, *model, &opt);  // optimizer state in the file is ignored without an optimizer
  EXPECT_TRUE(load_checkpoint(path, *other).empty());
}

TEST_F(Serialize, BadCheckpointsNameTheFileAndChangeNothing) {
  manual_seed(6);
  Linear model(3, 2), target(3, 2);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  train_step(model, sgd);
  const std::string path = file("ckpt.safetensors");
  save_checkpoint(path, *model, &sgd);
  const StateDict before = {{"weight", target->weight.clone()}, {"bias", target->bias.clone()}};

  // A model part that does not fit.
  Linear wider(3, 5);
  optim::SGD wider_sgd(wider->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_THROW_MSG(load_checkpoint(path, *wider, &wider_sgd),
                   "load_checkpoint: '" + path + "': model.*: Linear::load_state_dict: size mismatch for \"weight\"");

  // An optimizer part that does not fit (Adam's state is not SGD's): the model part was fine, yet the module is
  // left as it was.
  optim::Adam adam(target->parameters(), optim::AdamOptions(0.1));
  EXPECT_THROW_MSG(load_checkpoint(path, *target, &adam), "load_checkpoint: '" + path + "': optimizer.*: Adam::");
  EXPECT_TRUE(same_state(target->state_dict(), before));

  save_file({{"model.weight", ones({2, 3})}, {"stray", ones({1})}}, path);
  EXPECT_THROW_MSG(load_checkpoint(path, *target),
                   "load_checkpoint: '" + path + "': tensor 'stray' is under neither model. nor optimizer.");
}

}  // namespace
}  // namespace strata::nn
