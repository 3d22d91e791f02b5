// ModuleList, ModuleDict, Module::apply and as<T>(), and Embedding::from_pretrained, as libtorch has them.

#include <sstream>

#include "../helpers.h"

using namespace strata;
using strata::testing::allclose;

TEST(ModuleList, HoldsModulesByPositionForAHandWrittenForward) {
  manual_seed(1);
  nn::ModuleList blocks(nn::Linear(4, 4), nn::ReLU());
  blocks->push_back(nn::Linear(4, 2));
  EXPECT_EQ(blocks->size(), 3u);
  EXPECT_EQ(blocks->parameters().size(), 4u);  // two Linear layers, weight and bias each
  Tensor x = randn({3, 4}), h = x;
  for (const auto& block : *blocks) {
    if (auto* linear = block->as<nn::LinearImpl>())
      h = linear->forward(h);
    else
      h = block->as<nn::ReLUImpl>()->forward(h);
  }
  EXPECT_EQ(h.sizes(), IntArrayRef({3, 2}));
  EXPECT_EQ(blocks->at<nn::LinearImpl>(2).options.out_features(), 2);
  EXPECT_EQ(blocks->named_parameters().begin()->first, "0.weight");
  EXPECT_THROW_MSG(blocks->at<nn::LinearImpl>(1), "ModuleList::at: module 1 is a ReLU, not the type asked for");
  EXPECT_THROW_MSG((*blocks)[3], "ModuleList: index 3 is out of range for 3 modules");
}

TEST(ModuleDict, HoldsModulesByNameInInsertionOrder) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> named = {{"cls", nn::Linear(8, 10).ptr()},
                                                                            {"box", nn::Linear(8, 4).ptr()}};
  nn::ModuleDict heads(named);
  heads->insert("act", nn::ReLU());
  EXPECT_EQ(heads->size(), 3u);
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "box", "act"}));
  EXPECT_TRUE(heads->contains("box"));
  EXPECT_FALSE(heads->contains("seg"));
  EXPECT_EQ(heads->at<nn::LinearImpl>("box").forward(randn({2, 8})).sizes(), IntArrayRef({2, 4}));
  EXPECT_EQ(heads->values().size(), 3u);
  EXPECT_THROW_MSG((*heads)["seg"], "ModuleDict: no module under \"seg\"");
  EXPECT_THROW_MSG(heads->insert("cls", nn::ReLU()), "cls");
}

TEST(ModuleApply, VisitsEveryModuleDepthFirstWithItsName) {
  nn::Sequential model(nn::Linear(2, 3), nn::Sequential(nn::ReLU(), nn::Linear(3, 1)));
  std::vector<std::string> seen;
  model->apply([&](const std::string& name, nn::Module& m) { seen.push_back(name + ":" + m.name()); });
  EXPECT_EQ(seen, (std::vector<std::string>{":Sequential", "0:Linear", "1:Sequential", "1.0:ReLU", "1.1:Linear"}));
  // The usual use: initialise every Linear layer.
  model->apply([](nn::Module& m) {
    if (auto* linear = m.as<nn::LinearImpl>()) {
      NoGradGuard no_grad;
      linear->weight.fill_(0.5);
    }
  });
  for (const auto& [name, p] : model->named_parameters())
    if (name.ends_with("weight")) {
      EXPECT_TRUE(allclose(p, full_like(p, 0.5), 0, 0)) << name;
    }
}

TEST(Embedding, FromPretrainedUsesTheTableItselfAndFreezesIt) {
  Tensor table = arange(12, kFloat64).reshape({4, 3});
  nn::Embedding frozen = nn::Embedding::from_pretrained(table);
  EXPECT_EQ(frozen->weight.dtype(), kFloat64);
  EXPECT_FALSE(frozen->weight.requires_grad());
  EXPECT_TRUE(allclose(frozen(tensor({2, 0})), table.index_select(0, tensor({2, 0})), 0, 0));
  nn::Embedding trained = nn::Embedding::from_pretrained(table, nn::EmbeddingFromPretrainedOptions().freeze(false));
  EXPECT_TRUE(trained->weight.requires_grad());
  trained(tensor({1})).sum().backward();
  EXPECT_VALUES(trained->weight.grad()[1], {1, 1, 1});
  std::ostringstream printed;
  printed << *frozen;
  EXPECT_EQ(printed.str(), "Embedding(num_embeddings=4, embedding_dim=3)");
  EXPECT_THROW_MSG(nn::Embedding::from_pretrained(arange(3)), "embeddings must be 2-D");
}
