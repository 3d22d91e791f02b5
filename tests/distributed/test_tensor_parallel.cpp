// Megatron's tensor-parallel layers (nn/tensor_parallel.h) under mpirun -np 1, 2 and 4: each rank's weights are
// its slice of the unsplit layer's; a small tensor-parallel language model equals the same model in one process
// (losses, gradients and three AdamW steps, in float64); the vocab-parallel cross entropy equals cross_entropy on
// the gathered logits; bad input names the layer and the sizes.

#include <strata/distributed/collectives.h>
#include <strata/distributed/comm_logger.h>
#include <strata/distributed/tensor_parallel.h>
#include <strata/nn/embedding.h>
#include <strata/nn/linear.h>
#include <strata/nn/tensor_parallel.h>
#include <strata/nn/transformer.h>
#include <strata/optim/adam.h>

#include "../helpers.h"

namespace dist = strata::distributed;
namespace tp = strata::distributed::tensor_parallel;
using namespace strata;

namespace {

dist::Group world() { return dist::get_world_group(); }
int ranks() { return dist::get_world_size(); }
int rank() { return dist::get_rank(); }

/// This rank's part of `whole` along dim, as the layers split their parameters.
Tensor part(const Tensor& whole, int64_t dim) {
  const int64_t n = whole.size(dim) / ranks();
  return whole.narrow(dim, rank() * n, n);
}

/// Equal bit for bit.
::testing::AssertionResult exact(const Tensor& a, const Tensor& b) { return strata::testing::allclose(a, b, 0, 0); }

/// Equal to 1e-12 relative.
::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  return strata::testing::allclose(a, b, 1e-12, 1e-14);
}

constexpr int64_t kVocab = 16, kWidth = 8, kHidden = 24;  // divisible by 1, 2, 4 and 8 ranks

/// embedding -> linear -> tanh -> linear -> vocabulary head, the language model both tests train.
struct Serial {
  nn::Embedding wte{kVocab, kWidth};
  nn::Linear up{kWidth, kHidden}, down{kHidden, kWidth};
  nn::Linear head{nn::LinearOptions(kWidth, kVocab).bias(false)};
  std::vector<nn::Module*> modules() { return {wte.get(), up.get(), down.get(), head.get()}; }
  Tensor loss(const Tensor& ids, const Tensor& targets) {
    return cross_entropy(head(down(up(wte(ids)).tanh())).reshape({-1, kVocab}), targets.reshape({-1}));
  }
};

/// The same model split over WORLD, drawn in the same order.
struct Split {
  nn::VocabParallelEmbedding wte{nn::VocabParallelEmbeddingOptions(kVocab, kWidth).group(world())};
  nn::ColumnParallelLinear up{nn::ColumnParallelLinearOptions(kWidth, kHidden).group(world())};
  nn::RowParallelLinear down{nn::RowParallelLinearOptions(kHidden, kWidth).group(world())};
  nn::ColumnParallelLinear head{nn::ColumnParallelLinearOptions(kWidth, kVocab).bias(false).group(world())};
  std::vector<nn::Module*> modules() { return {wte.get(), up.get(), down.get(), head.get()}; }
  Tensor loss(const Tensor& ids, const Tensor& targets) {
    return nn::vocab_parallel_cross_entropy(head(down(up(wte(ids)).tanh())), targets, world()).mean();
  }
};

template <class Model>
std::vector<Tensor> parameters_of(Model& m) {
  std::vector<Tensor> all;
  for (nn::Module* module : m.modules()) {
    module->to(kDouble);
    for (const Tensor& p : module->parameters()) all.push_back(p);
  }
  return all;
}

}  // namespace

TEST(TensorParallel, WeightsAreSlicesOfTheUnsplitLayers) {
  manual_seed(3);
  Serial serial;
  manual_seed(3);
  Split split;
  EXPECT_TRUE(exact(split.wte->weight, part(serial.wte->weight, 0)));
  EXPECT_TRUE(exact(split.up->weight, part(serial.up->weight, 0)));
  EXPECT_TRUE(exact(split.up->bias, part(serial.up->bias, 0)));
  EXPECT_TRUE(exact(split.down->weight, part(serial.down->weight, 1)));
  EXPECT_TRUE(exact(split.down->bias, serial.down->bias));
  EXPECT_TRUE(exact(split.head->weight, part(serial.head->weight, 0)));
  EXPECT_FALSE(split.head->bias.defined());
  std::ostringstream os;
  os << *split.up << " " << *split.down << " " << *split.wte;
  const std::string n = std::to_string(ranks());
  EXPECT_EQ(os.str(),
            "ColumnParallelLinear(in_features=8, out_features=24, bias=true, gather_output=false, "
            "tensor_parallel=" +
                n +
                ") RowParallelLinear(in_features=24, out_features=8, bias=true, "
                "input_is_parallel=true, tensor_parallel=" +
                n +
                ") VocabParallelEmbedding(num_embeddings=16, "
                "embedding_dim=8, tensor_parallel=" +
                n + ")");
}

// Parallel equals serial: the same losses, each rank's gradients the slices of the serial ones, and after three
// AdamW steps the same parameters.
TEST(TensorParallel, LanguageModelTrainsAsOneProcess) {
  manual_seed(5);
  Serial serial;
  manual_seed(5);
  Split split;
  const std::vector<Tensor> sp = parameters_of(serial), tpp = parameters_of(split);
  // Which dim each split parameter is cut along (-1: replicated), in parameters() order.
  const std::vector<int64_t> cut{0, 0, 0, 1, -1, 0};
  ASSERT_EQ(sp.size(), cut.size());
  ASSERT_EQ(tpp.size(), cut.size());
  optim::AdamW serial_opt(sp, optim::AdamWOptions(0.05)), split_opt(tpp, optim::AdamWOptions(0.05));
  Generator gen(11);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    const Tensor ids = randint(0, kVocab, {3, 5}, kLong, &gen), targets = randint(0, kVocab, {3, 5}, kLong, &gen);
    serial_opt.zero_grad();
    split_opt.zero_grad();
    const Tensor a = serial.loss(ids, targets), b = split.loss(ids, targets);
    EXPECT_TRUE(same(b, a));
    a.backward();
    b.backward();
    for (size_t i = 0; i < cut.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_TRUE(same(tpp[i].grad(), cut[i] < 0 ? sp[i].grad() : part(sp[i].grad(), cut[i])));
    }
    serial_opt.step();
    split_opt.step();
  }
  for (size_t i = 0; i < cut.size(); ++i) EXPECT_TRUE(same(tpp[i], cut[i] < 0 ? sp[i] : part(sp[i], cut[i])));
}

// gather_output and input_is_parallel(false): whole activations between the layers, each split inside them.
TEST(TensorParallel, GatheredOutputsAndSplitInputs) {
  manual_seed(9);
  nn::Linear up(kWidth, kHidden), down(kHidden, kWidth);
  manual_seed(9);
  nn::ColumnParallelLinear split_up(
      nn::ColumnParallelLinearOptions(kWidth, kHidden).gather_output(true).group(world()));
  nn::RowParallelLinear split_down(
      nn::RowParallelLinearOptions(kHidden, kWidth).input_is_parallel(false).group(world()));
  for (nn::Module* m : std::vector<nn::Module*>{up.get(), down.get(), split_up.get(), split_down.get()}) m->to(kDouble);
  Generator gen(13);
  const Tensor x = randn({4, kWidth}, kDouble, &gen), w = randn({4, kWidth}, kDouble, &gen);
  const Tensor hidden = split_up(x);
  EXPECT_EQ(hidden.size(1), kHidden);
  const Tensor a = down(up(x).tanh()), b = split_down(hidden.tanh());
  EXPECT_TRUE(same(b, a));
  (a * w).sum().backward();
  (b * w).sum().backward();
  EXPECT_TRUE(same(split_up->weight.grad(), part(up->weight.grad(), 0)));
  EXPECT_TRUE(same(split_down->weight.grad(), part(down->weight.grad(), 1)));
  EXPECT_TRUE(same(split_down->bias.grad(), down->bias.grad()));
}

// The block split over the group equals nn::TransformerBlock, replicated and under sequence parallelism, with and
// without dropout: its output, the input's gradient, every parameter and its gradient (this rank's slice of the
// unsplit block's), and the generator's state afterwards.
TEST(TensorParallel, TransformerBlockEqualsTheUnsplitBlock) {
  const int64_t C = 8, heads = 8, T = 8;
  const int64_t n = ranks(), r = rank();
  // This rank's part of the unsplit block's parameter `name` of value t, as the split block keeps it.
  auto expected = [&](const std::string& name, const Tensor& t, IntArrayRef sizes) {
    if (name.rfind("attn.c_attn.", 0) == 0) return t.reshape({3, C, -1}).narrow(1, r * C / n, C / n).reshape(sizes);
    if (name == "attn.c_proj.weight" || name == "mlp.c_proj.weight") return part(t, 1);
    if (name.rfind("mlp.c_fc.", 0) == 0) return part(t, 0);
    return t;  // LayerNorm's and the row-parallel biases: the same on every rank
  };
  for (const auto& [sequence_parallel, dropout] : {std::pair{false, 0.0}, {true, 0.0}, {false, 0.25}, {true, 0.25}}) {
    SCOPED_TRACE(str("sequence_parallel ", sequence_parallel, ", dropout ", dropout));
    manual_seed(17);
    nn::TransformerBlock serial(C, heads, 4, dropout);
    manual_seed(17);
    nn::ParallelTransformerBlock split(nn::ParallelTransformerBlockOptions(C, heads)
                                           .sequence_parallel(sequence_parallel)
                                           .dropout(dropout)
                                           .group(world()));
    serial->to(kDouble);
    split->to(kDouble);
    Generator gen(19);
    const Tensor x = randn({2, T, C}, kDouble, &gen).requires_grad_(true), w = randn({2, T, C}, kDouble, &gen);
    const Tensor mine = (sequence_parallel ? part(x.detach(), 1) : x.detach()).clone().requires_grad_(true);
    manual_seed(23);
    const Tensor y = serial(x);
    const Tensor serial_next = rand({1}, kDouble);
    manual_seed(23);
    Tensor out = split(mine);
    EXPECT_TRUE(exact(rand({1}, kDouble), serial_next));
    manual_seed(23);
    EXPECT_EQ(exact(rand({1}, kDouble), serial_next), dropout == 0) << "the serial block drew dropout's bits";
    if (sequence_parallel) {
      EXPECT_TRUE(same(out, part(y.detach(), 1)));
      out = tp::gather_from_sequence_region(out, world(), 1, /*tensor_parallel_output_grad=*/false);
    }
    EXPECT_TRUE(same(out, y));
    (y * w).sum().backward();
    (out * w).sum().backward();
    EXPECT_TRUE(same(mine.grad(), sequence_parallel ? part(x.grad(), 1) : x.grad()));
    const nn::NamedTensors theirs = serial->named_parameters();
    const nn::NamedTensors ours = split->named_parameters();
    EXPECT_EQ(ours.size(), theirs.size());
    for (const auto& [name, p] : ours) {
      SCOPED_TRACE(name);
      const Tensor* whole = theirs.find(name);
      ASSERT_NE(whole, nullptr);
      EXPECT_TRUE(same(p, expected(name, *whole, p.sizes())));
      EXPECT_TRUE(same(p.grad(), expected(name, whole->grad(), p.sizes())));
    }
  }
}

// whole_state_dict gathers the slices into the unsplit block's state dict, bit for bit, and slice_state_dict cuts
// that back into this rank's; c_attn is cut as three blocks (q, k, v), the other split weights along one dim.
TEST(TensorParallel, WholeStateDictIsTheUnsplitBlocksAndSlicesBack) {
  const int64_t C = 8, heads = 8;
  manual_seed(23);
  nn::TransformerBlock serial(C, heads);
  manual_seed(23);
  nn::ParallelTransformerBlock split(nn::ParallelTransformerBlockOptions(C, heads).group(world()));
  const auto splits = nn::parameter_splits(*split);
  EXPECT_EQ(splits.size(), 6u);  // c_attn's weight and bias, c_proj's weight, c_fc's weight and bias, c_proj's weight
  EXPECT_EQ(splits.at("attn.c_attn.weight").stride, 3);
  EXPECT_EQ(splits.at("attn.c_proj.weight").dim, 1);
  EXPECT_FALSE(splits.contains("attn.c_proj.bias"));

  const nn::StateDict whole = nn::whole_state_dict(*split), theirs = serial->state_dict();
  ASSERT_EQ(whole.size(), theirs.size());
  for (const auto& [name, t] : theirs) EXPECT_TRUE(same(whole.at(name), t)) << name;
  const nn::StateDict mine = split->state_dict(), sliced = nn::slice_state_dict(*split, theirs);
  for (const auto& [name, t] : mine) EXPECT_TRUE(same(sliced.at(name), t)) << name;
  if (ranks() > 1)  // a slice is not a whole tensor
    EXPECT_THROW_MSG(nn::slice_state_dict(*split, mine), "(the whole tensor, not a slice of another group size");
}

// Megatron's count, per block and micro-batch: two all-reduces of B T C forward and two backward. Under sequence
// parallelism all-gathers and reduce-scatters of the same volume instead, plus small all-reduces of the gradients of
// the parameters used on a split sequence: LayerNorm's weight and bias twice, the two row-parallel biases, C each.
TEST(TensorParallel, TransformerBlockCommunicatesMegatronsVolume) {
  const int64_t B = 2, T = 8, C = 8, activation = B * T * C * 8;  // bytes of a float64 [B, T, C]
  auto logged = [](const std::string& op) {
    std::pair<int64_t, int64_t> calls_and_bytes{0, 0};
    for (const dist::CommStats& s : dist::comm_summary())
      if (s.op == op) calls_and_bytes = {calls_and_bytes.first + s.calls, calls_and_bytes.second + s.bytes};
    return calls_and_bytes;
  };
  using Count = std::pair<int64_t, int64_t>;
  for (bool sequence_parallel : {false, true}) {
    SCOPED_TRACE(sequence_parallel);
    nn::ParallelTransformerBlock block(
        nn::ParallelTransformerBlockOptions(C, 8).sequence_parallel(sequence_parallel).group(world()));
    block->to(kDouble);
    const Tensor x = randn({B, sequence_parallel ? T / ranks() : T, C}, kDouble).requires_grad_(true);
    dist::reset_comm_summary();
    dist::set_comm_logging(true);
    block(x).sum().backward();
    dist::set_comm_logging(false);
    if (!sequence_parallel) {
      EXPECT_EQ(logged("all_reduce"), Count(4, 4 * activation));
      EXPECT_EQ(logged("all_gather_into_tensor"), Count(0, 0));
      EXPECT_EQ(logged("reduce_scatter_tensor"), Count(0, 0));
    } else {
      EXPECT_EQ(logged("all_gather_into_tensor"), Count(4, 4 * activation));
      EXPECT_EQ(logged("reduce_scatter_tensor"), Count(4, 4 * activation));
      EXPECT_EQ(logged("all_reduce"), Count(6, 6 * C * 8));
    }
  }
  dist::reset_comm_summary();
}

// On the permuted subgroup {2, 0, 3} of 4 ranks, a rank's slice is the one of its group rank, not its global rank.
TEST(TensorParallel, LayersOnAPermutedSubgroup) {
  if (ranks() < 4) GTEST_SKIP() << "needs 4 ranks";
  const dist::Group group = dist::new_group({2, 0, 3});
  if (!group->is_member()) return;
  manual_seed(23);
  nn::Linear up(6, 12), down(12, 6);
  manual_seed(23);
  nn::ColumnParallelLinear split_up(nn::ColumnParallelLinearOptions(6, 12).group(group));
  nn::RowParallelLinear split_down(nn::RowParallelLinearOptions(12, 6).group(group));
  for (nn::Module* m : std::vector<nn::Module*>{up.get(), down.get(), split_up.get(), split_down.get()}) m->to(kDouble);
  const int64_t r = group->rank();
  EXPECT_TRUE(exact(split_up->weight, up->weight.narrow(0, 4 * r, 4)));
  EXPECT_TRUE(exact(split_down->weight, down->weight.narrow(1, 4 * r, 4)));
  Generator gen(29);
  const Tensor x = randn({3, 6}, kDouble, &gen);
  const Tensor a = down(up(x).tanh()), b = split_down(split_up(x).tanh());
  EXPECT_TRUE(same(b, a));
  a.sum().backward();
  b.sum().backward();
  EXPECT_TRUE(same(split_up->weight.grad(), up->weight.grad().narrow(0, 4 * r, 4)));
  EXPECT_TRUE(same(split_down->weight.grad(), down->weight.grad().narrow(1, 4 * r, 4)));
}

TEST(TensorParallel, VocabParallelCrossEntropyIsCrossEntropyOfTheGatheredLogits) {
  Generator gen(21);  // the same on every rank: replicated logits and targets
  Tensor whole = (randn({2, 3, 4 * ranks()}, kDouble, &gen) * 30.0).requires_grad_(true);  // large: needs the max
  const Tensor targets = randint(0, 4 * ranks(), {2, 3}, kLong, &gen);
  const Tensor mine = part(whole.detach(), 2).clone().requires_grad_(true);
  const Tensor loss = nn::vocab_parallel_cross_entropy(mine, targets, world());
  const Tensor expected = cross_entropy(whole.reshape({6, -1}), targets.reshape({6}), {.reduction = kNone});
  EXPECT_TRUE(same(loss.reshape({6}), expected));
  Generator weights(22);
  const Tensor w = randn({2, 3}, kDouble, &weights);
  (loss * w).sum().backward();
  (expected * w.reshape({6})).sum().backward();
  EXPECT_TRUE(same(mine.grad(), part(whole.grad(), 2)));
}

TEST(TensorParallel, LayersNameWhatIsWrong) {
  EXPECT_THROW_MSG(nn::ColumnParallelLinear(nn::ColumnParallelLinearOptions(4, 8)),
                   "ColumnParallelLinear: no tensor-parallel group: set .group(...) in its options");
  EXPECT_THROW_MSG(nn::vocab_parallel_cross_entropy(ones({2, 4}), zeros({2}, kLong), nullptr),
                   "vocab_parallel_cross_entropy: no tensor-parallel group");
  nn::VocabParallelEmbedding wte(nn::VocabParallelEmbeddingOptions(4 * ranks(), 2).group(world()));
  EXPECT_THROW_MSG(wte(tensor({int64_t{0}, 4 * ranks()})),
                   "VocabParallelEmbedding: index out of range [0, " + std::to_string(4 * ranks()) +
                       "): got indices from 0 to " + std::to_string(4 * ranks()));
  if (ranks() == 1) return;  // one rank holds whole layers
  nn::RowParallelLinear down(nn::RowParallelLinearOptions(4 * ranks(), 3).group(world()));
  EXPECT_THROW_MSG(down(ones({2, 4 * ranks()})),
                   "RowParallelLinear: expected input with last dim 4 (its part of "
                   "in_features, input_is_parallel), got shape [2, " +
                       std::to_string(4 * ranks()) + "]");
  EXPECT_THROW_MSG(nn::ColumnParallelLinear(
                       nn::ColumnParallelLinearOptions(4, 6 * ranks()).stride(3).gather_output(true).group(world())),
                   "ColumnParallelLinear: gather_output with stride 3 would put each rank's blocks side by side");
  EXPECT_THROW_MSG(nn::ColumnParallelLinear(nn::ColumnParallelLinearOptions(4, ranks() + 1).group(world())),
                   "ColumnParallelLinear: out_features " + std::to_string(ranks() + 1) +
                       " is not divisible by the tensor-parallel size " + std::to_string(ranks()));
  EXPECT_THROW_MSG(nn::RowParallelLinear(nn::RowParallelLinearOptions(ranks() + 1, 4).group(world())),
                   "RowParallelLinear: in_features");
  EXPECT_THROW_MSG(nn::VocabParallelEmbedding(nn::VocabParallelEmbeddingOptions(ranks() + 1, 4).group(world())),
                   "VocabParallelEmbedding: num_embeddings");
  EXPECT_THROW_MSG(
      nn::ParallelTransformerBlock(nn::ParallelTransformerBlockOptions(4 * (ranks() + 1), ranks() + 1).group(world())),
      "ParallelTransformerBlock: num_heads " + std::to_string(ranks() + 1) +
          " is not divisible by the tensor-parallel size " + std::to_string(ranks()));
}
