// A character-level GPT trained on the King James Bible (4.3 MB, from Debian's bible-kjv: `bible` prints it),
// alone, data parallel, pipelined, tensor parallel or all three: token and position embeddings, --layers pre-norm transformer blocks, a
// final LayerNorm and an LM head tied to the token embedding (TiedLayerSpec: the first and the last stage
// hold the same weight). The same model, data and initial weights in every layout, so the losses agree.
// Every --eval-every steps it prints the validation loss and next-character accuracy and writes metrics.csv,
// metrics.svg and a checkpoint (a folder of safetensors files, one per layer); at the end rank 0 loads that
// checkpoint into one process and samples text from it (temperature, top-k). With --autocast the forward passes
// run under autocast (the products and attention in 16 bits, float32 weights); float16 adds dynamic loss scaling.
//
//   char_gpt                              # alone
//   mpirun -np 2 char_gpt                 # 2 replicas (data parallel)
//   mpirun -np 4 char_gpt --stages 2      # 2 stages x 2 replicas
//   mpirun -np 8 char_gpt --tensor-parallel 2 --stages 2 --zero 1   # 2 (tensor) x 2 (pipe) x 2 (data)
//   char_gpt --autocast bfloat16          # mixed precision
//   char_gpt --sample-only char_gpt_out   # sample from a checkpoint
//   char_gpt [--data FILE] [--stages S] [--micro-batches M] [--batch-size B] [--block T] [--embed C]
//            [--heads H] [--layers N] [--steps N] [--eval-every N] [--eval-batches N] [--lr LR]
//            [--seed S] [--threads N] [--dtype float32|float64] [--autocast bfloat16|float16]
//            [--device cpu|cuda] [--out DIR] [--sample N] [--temperature X] [--top-k K] [--prompt TEXT]
//            [--sample-only DIR] [--tensor-parallel N] [--sequence-parallel] [--zero 0|1|2]
//            [--make-vocab-size-divisible-by N]
//
// It ends with the memory per rank (and with STRATA_COMM_LOG=1 rank 0's communication per op and group), then
// `val_loss=<value>` and `tokens_per_s=<value>`.

#include <strata/strata.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model.h"
#include "report.h"
#include "setup.h"

using namespace strata;
namespace tp = strata::distributed::tensor_parallel;

namespace {

// Prints the whole text, 80 columns wide, whatever the terminal's COLUMNS.
const char* kCorpusCommand = "bible -l80 Gen1:1-Rev22:21";

struct Args {
  std::string data;  // empty: the King James Bible through kCorpusCommand
  int stages = 1;
  int micro_batches = 2;
  int64_t batch_size = 32;  // sequences per optimizer step, over every replica
  int64_t block = 64;       // context length T
  int64_t embed = 128;      // C
  int64_t heads = 4;
  int64_t layers = 4;
  int64_t steps = 2000;
  int64_t eval_every = 250;
  int64_t eval_batches = 16;
  double lr = 2e-3;
  uint64_t seed = 0;
  int threads = 0;
  std::string dtype = "float32";
  std::string autocast;  // empty: off; else the dtype the forward's products run in
  std::string device = "cpu";
  std::string out = "char_gpt_out";
  int64_t sample = 300;  // characters sampled at the end
  double temperature = 0.8;
  int64_t top_k = 10;
  std::string prompt = "And God said";
  std::string sample_only;  // a checkpoint folder: sample from it and stop
  int tensor_parallel = 1;  // ranks each stage's layers are split over (Megatron's)
  bool sequence_parallel = false;
  int zero = 0;                // ZeRO stage: 0 (off), 1 (optimizer state) or 2 (also gradients)
  int64_t vocab_multiple = 1;  // the vocabulary is padded to a multiple of this and of tensor_parallel
  int64_t vocab_size = 0;      // the model's (padded) vocabulary, set from the text
  bool help = false;
};

char_gpt::ModelShape shape(const Args& a) { return {a.vocab_size, a.block, a.embed, a.heads, a.layers}; }

const char* kUsage =
    "usage: [mpirun -np N] char_gpt [--data FILE] [--stages S] [--micro-batches M] [--batch-size B] [--block T]\n"
    "         [--embed C] [--heads H] [--layers N] [--steps N] [--eval-every N] [--eval-batches N] [--lr LR]\n"
    "         [--seed S] [--threads N] [--dtype float32|float64] [--autocast bfloat16|float16] [--device cpu|cuda]\n"
    "         [--out DIR] [--sample N] [--temperature X] [--top-k K] [--prompt TEXT] [--sample-only DIR]\n"
    "         [--tensor-parallel N] [--sequence-parallel] [--zero 0|1|2] [--make-vocab-size-divisible-by N]\n";

using setup::number;
using setup::UsageError;

Args parse(int argc, char** argv) {
  Args a;
  std::map<std::string, int64_t*> counts = {{"--batch-size", &a.batch_size},
                                            {"--block", &a.block},
                                            {"--embed", &a.embed},
                                            {"--heads", &a.heads},
                                            {"--layers", &a.layers},
                                            {"--steps", &a.steps},
                                            {"--eval-every", &a.eval_every},
                                            {"--eval-batches", &a.eval_batches},
                                            {"--sample", &a.sample},
                                            {"--top-k", &a.top_k},
                                            {"--make-vocab-size-divisible-by", &a.vocab_multiple}};
  std::map<std::string, std::string*> texts = {
      {"--data", &a.data}, {"--dtype", &a.dtype},   {"--autocast", &a.autocast},      {"--device", &a.device},
      {"--out", &a.out},   {"--prompt", &a.prompt}, {"--sample-only", &a.sample_only}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      a.help = true;
      continue;
    }
    if (flag == "--sequence-parallel") {
      a.sequence_parallel = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    const std::string value = argv[++i];
    if (counts.count(flag))
      *counts[flag] = number<int64_t>(flag, value);
    else if (texts.count(flag))
      *texts[flag] = value;
    else if (flag == "--stages")
      a.stages = number<int>(flag, value);
    else if (flag == "--micro-batches")
      a.micro_batches = number<int>(flag, value);
    else if (flag == "--lr")
      a.lr = number<double>(flag, value);
    else if (flag == "--temperature")
      a.temperature = number<double>(flag, value);
    else if (flag == "--seed")
      a.seed = number<uint64_t>(flag, value);
    else if (flag == "--threads")
      a.threads = number<int>(flag, value);
    else if (flag == "--tensor-parallel")
      a.tensor_parallel = number<int>(flag, value);
    else if (flag == "--zero")
      a.zero = number<int>(flag, value);
    else
      throw UsageError("unknown option " + flag);
  }
  for (const auto& [flag, value] : counts)
    if (*value < (flag == "--sample" ? 0 : 1)) throw UsageError(flag + " must be positive");
  if (a.stages < 1 || a.micro_batches < 1 || a.threads < 0)
    throw UsageError("--stages and --micro-batches must be positive");
  if (!(a.lr > 0 && std::isfinite(a.lr))) throw UsageError("--lr must be finite and above 0");
  if (!(a.temperature > 0 && std::isfinite(a.temperature)))
    throw UsageError("--temperature must be finite and above 0");
  if (a.embed % a.heads != 0) throw UsageError("--heads must divide --embed");
  if (a.tensor_parallel < 1) throw UsageError("--tensor-parallel must be positive");
  if (a.heads % a.tensor_parallel != 0) throw UsageError("--tensor-parallel must divide --heads");
  if (a.sequence_parallel && a.tensor_parallel == 1)
    throw UsageError(
        "--sequence-parallel splits the sequence over the tensor-parallel ranks: it needs "
        "--tensor-parallel 2 or more");
  if (a.sequence_parallel && a.block % a.tensor_parallel != 0)
    throw UsageError("--sequence-parallel needs --block divisible by --tensor-parallel");
  if (a.zero < 0 || a.zero > 2) throw UsageError("--zero must be 0, 1 or 2");
  if (a.zero == 2 && a.stages > 1)
    throw UsageError("--zero 2 needs --stages 1: with a pipeline the engine refuses ZeRO stage 2, as DeepSpeed does");
  if (a.zero == 2 && a.autocast == "float16")
    throw UsageError("--zero 2 keeps no gradients for float16's loss scaler to unscale: use --zero 1");
  if (a.dtype != "float32" && a.dtype != "float64") throw UsageError("unknown dtype " + a.dtype);
  if (!a.autocast.empty() && a.autocast != "bfloat16" && a.autocast != "float16")
    throw UsageError("unknown --autocast dtype " + a.autocast + " (bfloat16 or float16)");
  if (!a.autocast.empty() && a.dtype != "float32")
    throw UsageError("--autocast needs --dtype float32: autocast leaves float64 as it is");
  if (a.device != "cpu" && a.device != "cuda") throw UsageError("unknown device " + a.device);
  return a;
}

// ---- the corpus ----

// The text's distinct bytes, sorted: token i is vocab[i].
struct Corpus {
  std::string vocab;
  Tensor train, val;  // Long token ids: the first 90% of the text, and the rest
};

std::string read_text(const std::string& path) {
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("cannot read --data " + path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::FILE* pipe = popen(kCorpusCommand, "r");
  std::string text;
  if (pipe) {
    char chunk[1 << 16];
    for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0;) text.append(chunk, n);
    if (pclose(pipe) != 0) text.clear();
  }
  if (text.empty())
    throw UsageError(std::string("'") + kCorpusCommand +
                     "' printed nothing: install Debian's bible-kjv (apt-get install bible-kjv), or pass --data FILE");
  return text;
}

Tensor encode(const std::string& text, const std::string& vocab) {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t at = vocab.find(text[i]);
    if (at == std::string::npos)
      throw UsageError("the text has a character outside the vocabulary: byte " +
                       std::to_string(static_cast<unsigned char>(text[i])));
    ids[i] = static_cast<int64_t>(at);
  }
  return tensor(ids);
}

Corpus load_corpus(const std::string& path, int64_t block) {
  const std::string text = read_text(path);
  std::array<bool, 256> present{};
  for (char c : text) present[static_cast<unsigned char>(c)] = true;
  std::string vocab;
  for (int c = 0; c < 256; ++c)
    if (present[c]) vocab += static_cast<char>(c);
  const Tensor ids = encode(text, vocab);
  const int64_t n = ids.numel(), cut = n * 9 / 10;
  if (n - cut <= block + 1) throw UsageError("the text is too short for --block " + std::to_string(block));
  return {vocab, ids.narrow(0, 0, cut), ids.narrow(0, cut, n - cut)};
}

// `count` windows of block + 1 tokens at random places of `ids`, drawn from `gen`: inputs [count, T] and the
// next tokens [count, T].
std::pair<Tensor, Tensor> windows(const Tensor& ids, int64_t count, int64_t block, Generator& gen) {
  const Tensor starts = randint(0, ids.numel() - block - 1, {count}, kLong, &gen);
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < count; ++i) rows.push_back(ids.narrow(0, starts[i].item<int64_t>(), block + 1));
  const Tensor all = stack(rows);
  return {all.narrow(1, 0, block).contiguous(), all.narrow(1, 1, block).contiguous()};
}

// ---- sampling in one process ----

// The whole model in this process, from a checkpoint folder that PipelineModule::save_state_dict wrote with any
// number of stages: each layer built from the same list and loaded from its file.
struct LocalModel {
  std::vector<pipe::LayerForward> forwards;

  LocalModel(const std::vector<pipe::Layer>& layers, const std::string& dir, ScalarType dtype) {
    std::map<std::string, pipe::BuiltLayer> tied;  // a tied module is built at its key's first layer
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string* key = layers[i].tied_key();
      pipe::BuiltLayer built = key && tied.count(*key) ? tied[*key] : layers[i].spec().build();
      if (built.module && !(key && tied.count(*key))) {
        built.module->to(dtype);
        built.module->load_state_dict(nn::load_file(pipe::PipelineModule::ckpt_layer_path(dir, static_cast<int>(i))));
        built.module->eval();
      }
      if (key) tied.emplace(*key, built);
      const auto* spec = std::get_if<pipe::TiedLayerSpec>(&layers[i].get());
      if (spec && spec->forward_fn()) {
        forwards.push_back(
            [module = built.module, fn = spec->forward_fn()](const tensor_list& x) { return fn(*module, x); });
      } else {
        forwards.push_back(built.forward);
      }
    }
  }

  Tensor operator()(const Tensor& ids) const {
    tensor_list x{ids};
    for (const pipe::LayerForward& f : forwards) x = f(x);
    return x[0];
  }
};

// `count` characters after `prompt`: each from the softmax of the last position's logits / temperature,
// restricted to the top_k most likely.
std::string sample(const LocalModel& model, const std::string& vocab, const Args& a, int64_t block) {
  NoGradGuard no_grad;
  Generator gen(a.seed + 1);
  std::string prompt;
  for (char c : a.prompt)
    if (vocab.find(c) != std::string::npos) prompt += c;
  if (prompt.empty()) prompt = vocab.substr(0, 1);
  std::vector<int64_t> ids;
  for (char c : prompt) ids.push_back(static_cast<int64_t>(vocab.find(c)));
  std::string text = prompt;
  const int64_t k = std::min<int64_t>(a.top_k, static_cast<int64_t>(vocab.size()));
  for (int64_t i = 0; i < a.sample; ++i) {
    const int64_t n = std::min<int64_t>(block, static_cast<int64_t>(ids.size()));
    const Tensor context = tensor(std::vector<int64_t>(ids.end() - n, ids.end())).unsqueeze(0);
    // The padding tokens of a padded vocabulary are never sampled.
    const Tensor logits = model(context)[0][-1].narrow(0, 0, static_cast<int64_t>(vocab.size())) / a.temperature;
    auto [top, index] = logits.topk(k);
    const int64_t pick = softmax(top, 0).unsqueeze(0).multinomial(1, false, &gen).item<int64_t>();
    ids.push_back(index[pick].item<int64_t>());
    text += vocab[ids.back()];
  }
  return text;
}

// Beside the layer files: vocab.txt (the vocabulary's bytes in token order) and model.txt (the shape options),
// so that --sample-only needs nothing else.
void write_model_files(const std::string& dir, const std::string& vocab, const Args& a) {
  std::ofstream(dir + "/vocab.txt", std::ios::binary) << vocab;
  std::ofstream(dir + "/model.txt") << "block " << a.block << "\nembed " << a.embed << "\nheads " << a.heads
                                    << "\nlayers " << a.layers << "\nvocab_size " << a.vocab_size << "\n";
}

// The vocabulary, and `a` with the checkpoint's shape options.
std::string read_model_files(const std::string& dir, Args& a) {
  std::ifstream vocab(dir + "/vocab.txt", std::ios::binary), shape(dir + "/model.txt");
  if (!vocab || !shape) throw UsageError(dir + " has no vocab.txt and model.txt: not a char_gpt checkpoint");
  std::map<std::string, int64_t*> fields = {{"block", &a.block},
                                            {"embed", &a.embed},
                                            {"heads", &a.heads},
                                            {"layers", &a.layers},
                                            {"vocab_size", &a.vocab_size}};
  std::string name;
  for (int64_t value; shape >> name >> value;)
    if (fields.count(name)) *fields[name] = value;
  std::string text(std::istreambuf_iterator<char>(vocab), {});
  if (a.vocab_size == 0) a.vocab_size = static_cast<int64_t>(text.size());  // written before padding existed
  return text;
}

void print_sample(Args a, const std::string& dir, ScalarType dtype) {
  const std::string vocab = read_model_files(dir, a);
  const LocalModel model(char_gpt::make_layers(shape(a), {}), dir, dtype);
  std::cout << "sample (" << a.sample << " characters, temperature " << a.temperature << ", top-k " << a.top_k
            << ", from " << dir << " in one process):\n"
            << sample(model, vocab, a, a.block) << "\n";
}

// ---- training ----

struct Evaluation {
  double loss, accuracy;
};

// The micro-batches of one step: rows [k * rows, (k + 1) * rows) of x and y.
pipe::DataIterator micro_batches(Tensor x, Tensor y, int m) {
  const int64_t rows = x.size(0) / m;
  return [x, y, rows, m, k = 0]() mutable -> std::optional<pipe::MicroBatch> {
    if (k == m) return std::nullopt;
    const int64_t start = rows * k++;
    return pipe::MicroBatch{{x.narrow(0, start, rows)}, {y.narrow(0, start, rows)}};
  };
}

// The forward passes' autocast, off without --autocast.
AutocastGuard forward_autocast(const Args& a, Device device) {
  return AutocastGuard(device.type, a.autocast == "float16" ? kHalf : kBFloat16, !a.autocast.empty());
}

// The loss and next-character accuracy over eval_batches fixed batches of the validation text (the same windows
// at every evaluation: the generator restarts at the same seed).
Evaluation evaluate(pipe::PipelineEngine& engine, const Corpus& corpus, const Args& a,
                    const pipe::PipelineParallelGrid& grid, Device device) {
  const int64_t replicas = grid.get_data_parallel_world_size(), replica = grid.get_data_parallel_id();
  Generator gen(a.seed + 2);
  double loss = 0, correct = 0, count = 0;
  for (int64_t b = 0; b < a.eval_batches; ++b) {
    auto [x, y] = windows(corpus.val, a.batch_size, a.block, gen);
    const int64_t share = a.batch_size / replicas;
    x = x.narrow(0, replica * share, share).to(device);
    y = y.narrow(0, replica * share, share).to(device);
    std::vector<tensor_list> outputs;
    {
      AutocastGuard autocast = forward_autocast(a, device);
      loss += engine.eval_batch(micro_batches(x, y, a.micro_batches), &outputs);
    }
    const int64_t rows = share / a.micro_batches;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Tensor labels = y.narrow(0, static_cast<int64_t>(k) * rows, rows);
      // Split by vocabulary over the tensor-parallel ranks (every rank of the last stage gathers with the others).
      const Tensor logits = a.tensor_parallel > 1
                                ? tp::gather_from_region(outputs[k][0], grid.get_model_parallel_group())
                                : outputs[k][0];
      correct += logits.argmax(-1).eq(labels).sum().item<double>();
      count += static_cast<double>(labels.numel());
    }
  }
  Tensor totals = tensor(std::vector<double>{correct, count}, kFloat64);
  distributed::all_reduce(totals);  // only the last stages counted (each tensor-parallel rank alike)
  return {loss / static_cast<double>(a.eval_batches), totals[0].item<double>() / totals[1].item<double>()};
}

// MB of parameters, of gradients and of optimizer state this rank holds during a step, and its peak resident
// memory, each the largest over the ranks. ZeRO holds 1/D of the state (stage 1) and of the gradients (stage 2).
Tensor memory_per_rank(const nn::Module& model, const optim::Optimizer& optimizer) {
  constexpr double kMb = 1024.0 * 1024.0;
  double params = 0, grads = 0, state = 0;
  for (const Tensor& p : model.parameters()) params += static_cast<double>(p.nbytes());
  grads = params;
  if (const auto* zero = dynamic_cast<const optim::ShardedOptimizer*>(&optimizer)) {
    const double bytes = static_cast<double>(model.parameters().front().element_size());
    state = static_cast<double>(zero->state_numel()) * bytes;
    if (zero->stage() == 2) {
      grads = 0;
      for (const optim::ZeroBucket& b : zero->buckets()) grads += static_cast<double>(b.shard_numel) * bytes;
    }
  } else {
    for (const auto& [key, t] : optimizer.state_dict())
      if (key.starts_with("state.") && !key.ends_with(".step")) state += static_cast<double>(t.nbytes());
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  Tensor out = tensor(std::vector<double>{params / kMb, grads / kMb, state / kMb, usage.ru_maxrss / 1024.0}, kFloat64);
  distributed::all_reduce(out, distributed::ReduceOp::MAX);
  return out;
}

void train(const Args& a, const pipe::PipelineParallelGrid& grid, const std::shared_ptr<pipe::PipelineModule>& model,
           const Corpus& corpus, Device device, ScalarType dtype) {
  const int rank = grid.get_global_rank();
  const int64_t replicas = grid.get_data_parallel_world_size(), replica = grid.get_data_parallel_id();
  const auto adamw_options = optim::AdamWOptions(a.lr).weight_decay(0.1);
  std::shared_ptr<optim::Optimizer> adamw;
  if (a.zero == 0)
    adamw = std::make_shared<optim::AdamW>(model->parameters(), adamw_options);
  else
    adamw = std::make_shared<optim::ZeroRedundancyOptimizer<optim::AdamW>>(
        model->parameters(), adamw_options,
        optim::ZeroOptions{.group = grid.get_data_parallel_group(), .stage = a.zero});
  pipe::PipelineEngineOptions engine_options{.micro_batches = a.micro_batches};
  // float16's 5 exponent bits flush small gradients to zero unless the loss is scaled; bfloat16 has float32's 8.
  if (a.autocast == "float16") engine_options.grad_scaler = optim::GradScalerOptions();
  pipe::PipelineEngine engine(model, grid, adamw, engine_options);
  optim::WarmupCosineLR schedule(*adamw, std::min<int64_t>(100, a.steps / 10), a.steps);
  if (rank == 0) {
    std::printf(
        "char_gpt: %lld characters of text, vocabulary %zu%s; %lld blocks of %lld, %lld heads, context %lld; "
        "%d stage(s) x %d tensor-parallel%s x %lld replica(s)%s, batch %lld sequences (%d micro-batches per "
        "replica), %s%s%s on %s\n",
        static_cast<long long>(corpus.train.numel() + corpus.val.numel()), corpus.vocab.size(),
        static_cast<size_t>(a.vocab_size) == corpus.vocab.size()
            ? ""
            : (" (padded to " + std::to_string(a.vocab_size) + ")").c_str(),
        static_cast<long long>(a.layers), static_cast<long long>(a.embed), static_cast<long long>(a.heads),
        static_cast<long long>(a.block), grid.get_pipe_parallel_world_size(), a.tensor_parallel,
        a.sequence_parallel ? " (sequence parallel)" : "", static_cast<long long>(replicas),
        a.zero ? (a.zero == 1 ? ", ZeRO 1" : ", ZeRO 2") : "", static_cast<long long>(a.batch_size), a.micro_batches,
        a.dtype.c_str(), a.autocast.empty() ? "" : ", autocast ", a.autocast.c_str(), device.is_cpu() ? "cpu" : "cuda");
    std::fflush(stdout);
  }
  // Every rank draws every step's windows from the same generator and keeps its replica's share, so that each
  // layout trains on the same sequences.
  Generator gen(a.seed + 3);
  const int64_t share = a.batch_size / replicas;
  std::vector<report::EpochMetrics> rows;
  double train_seconds = 0, val_loss = 0;
  int64_t done = 0;
  const int64_t rounds = (a.steps + a.eval_every - 1) / a.eval_every;
  for (int64_t round = 1; round <= rounds; ++round) {
    const int64_t steps = std::min(a.eval_every, a.steps - done);
    std::optional<report::ProgressBar> bar;
    if (rank == 0) bar.emplace(static_cast<int>(round), static_cast<int>(rounds), steps);
    double loss_sum = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t s = 1; s <= steps; ++s) {
      auto [x, y] = windows(corpus.train, a.batch_size, a.block, gen);
      x = x.narrow(0, replica * share, share).to(device);
      y = y.narrow(0, replica * share, share).to(device);
      {
        AutocastGuard autocast = forward_autocast(a, device);
        loss_sum += engine.train_batch(micro_batches(x, y, a.micro_batches));
      }
      schedule.step();
      if (bar) bar->update(s, loss_sum / static_cast<double>(s), s * a.batch_size);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    train_seconds += seconds;
    done += steps;
    const Evaluation eval = evaluate(engine, corpus, a, grid, device);
    val_loss = eval.loss;
    rows.push_back({static_cast<int>(round), loss_sum / static_cast<double>(steps), eval.loss, eval.accuracy,
                    static_cast<double>(steps * a.batch_size) / seconds, seconds});
    model->save_state_dict(a.out);  // each stage writes its layers
    if (rank == 0) {
      write_model_files(a.out, corpus.vocab, a);
      report::write_csv(a.out + "/metrics.csv", rows);
      report::write_svg(a.out + "/metrics.svg", rows);
      char summary[160];
      std::snprintf(summary, sizeof summary, "step %lld: train loss %.4f, val loss %.4f, val accuracy %.4f",
                    static_cast<long long>(done), rows.back().train_loss, eval.loss, eval.accuracy);
      bar->finish(summary);
    }
  }
  distributed::barrier();  // every stage's files are written
  const Tensor memory = memory_per_rank(*model, *adamw);
  if (rank == 0) {
    std::cout << "metrics: " << a.out << "/metrics.csv, plot: " << a.out << "/metrics.svg, checkpoint: " << a.out
              << "\n";
    print_sample(a, a.out, dtype);
    std::printf(
        "memory per rank (the largest over the ranks): parameters %.2f MB, gradients %.2f MB, optimizer state "
        "%.2f MB, peak resident %.0f MB\n",
        memory[0].item<double>(), memory[1].item<double>(), memory[2].item<double>(), memory[3].item<double>());
    if (distributed::comm_logging()) distributed::print_comm_summary();  // STRATA_COMM_LOG=1: rank 0's calls
    std::cout << "val_loss=" << val_loss << "\n"
              << "tokens_per_s=" << static_cast<double>(a.steps * a.batch_size * a.block) / train_seconds << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  distributed::init();
  const int rank = distributed::get_rank();
  Args args;
  std::optional<pipe::PipelineParallelGrid> grid;
  std::optional<Corpus> corpus;
  std::shared_ptr<pipe::PipelineModule> model;
  Device device;
  ScalarType dtype = kFloat;
  std::string error;  // what went wrong on this rank while setting up
  try {
    args = parse(argc, argv);
    if (args.help) {
      if (rank == 0) std::cout << kUsage;
      return 0;
    }
    if (args.threads > 0) set_num_threads(args.threads);
    dtype = args.dtype == "float64" ? kFloat64 : kFloat;
    if (!args.sample_only.empty()) {
      if (rank == 0) print_sample(args, args.sample_only, dtype);
      return 0;
    }
    device = args.device == "cuda" ? cuda::device() : Device(kCPU);
    const int world = distributed::get_world_size();
    if (world % (args.stages * args.tensor_parallel) != 0)
      throw UsageError(std::to_string(world) + " ranks do not split into --stages " + std::to_string(args.stages) +
                       " x --tensor-parallel " + std::to_string(args.tensor_parallel) + " x replicas");
    grid.emplace(pipe::PipeModelDataParallelTopology(args.stages, args.tensor_parallel,
                                                     world / (args.stages * args.tensor_parallel)));
    const int64_t replicas = grid->get_data_parallel_world_size();
    if (args.batch_size % (replicas * args.micro_batches) != 0)
      throw UsageError("--batch-size " + std::to_string(args.batch_size) + " does not split into " +
                       std::to_string(replicas) + " replicas x " + std::to_string(args.micro_batches) +
                       " micro-batches");
    corpus.emplace(load_corpus(args.data, args.block));
    args.vocab_size =
        char_gpt::padded_vocab(static_cast<int64_t>(corpus->vocab.size()), args.vocab_multiple, args.tensor_parallel);
    const char_gpt::Parallelism parallel{grid->get_model_parallel_group(), args.sequence_parallel};
    pipe::PipelineModuleOptions options;
    options.partition_method = "type:TransformerBlock";
    options.loss_fn = char_gpt::lm_loss(parallel);
    options.seed_layers = true;  // the same initial weights in every layout
    options.base_seed = args.seed;
    model = std::make_shared<pipe::PipelineModule>(char_gpt::make_layers(shape(args), parallel), *grid, options);
    model->to(dtype);
    model->to(device);
    std::filesystem::create_directories(args.out);
  } catch (const UsageError& e) {
    error = std::string(e.what()) + "\n" + kUsage;
  } catch (const Error& e) {
    error = std::string(e.what()) + "\n";
  }
  if (setup::failed_on_some_rank(error, "char_gpt")) return 2;  // Note [setup errors] in examples/common
  train(args, *grid, model, *corpus, device, dtype);
  return 0;
}
