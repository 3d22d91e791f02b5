// Trains a deeper MLP (784-256-256-256-256-10) on the real Fashion-MNIST data (Debian's
// dataset-fashion-mnist) with pipeline and data parallelism: the layers are split into --stages
// stages by parameter count, and the ranks form stages x replicas (replicas = world / stages).
// Each optimizer step takes one global batch: every replica's share of it is cut into
// --micro-batches micro-batches that flow through the stages on the 1F1B schedule. Each epoch it
// evaluates test accuracy; at the end it prints every rank's time in compute and communication,
// and the measured pipeline bubble next to the one the schedule predicts.
//
//   mpirun -np 4 pipeline                # 2 stages x 2 replicas, 4 micro-batches each
//   mpirun -np 4 pipeline --stages 4     # 4 stages x 1 replica
//   pipeline [--stages S] [--micro-batches M] [--batch-size B] [--epochs N] [--lr LR] [--data DIR]
//            [--limit N] [--seed S] [--threads N] [--device cpu|cuda]
//
// With --device cuda each stage runs on its rank's GPU (distributed::init makes it current).
// The last line is `test_accuracy=<value>`.

#include <strata/strata.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "report.h"
#include "setup.h"

using namespace strata;

namespace {

struct Args {
  int stages = 2;
  int micro_batches = 4;
  int64_t batch_size = 256;  // global, per optimizer step: replicas x micro-batches x micro-batch size
  int epochs = 3;
  double lr = 4e-3;
  std::string data = data::FashionMNIST::kDefaultRoot;
  int64_t limit = 0;  // train on the first `limit` examples only (0: all); for quick runs
  uint64_t seed = 0;
  int threads = 0;  // 0: strata's default
  std::string device = "cpu";
  bool help = false;
};

const char* kUsage =
    "usage: mpirun -np N pipeline [--stages S] [--micro-batches M] [--batch-size B] [--epochs N] [--lr LR]\n"
    "                             [--data DIR] [--limit N] [--seed S] [--threads N] [--device cpu|cuda]\n";

using setup::number;
using setup::UsageError;

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      a.help = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--stages")
      a.stages = number<int>(flag, value);
    else if (flag == "--micro-batches")
      a.micro_batches = number<int>(flag, value);
    else if (flag == "--batch-size")
      a.batch_size = number<int64_t>(flag, value);
    else if (flag == "--epochs")
      a.epochs = number<int>(flag, value);
    else if (flag == "--lr")
      a.lr = number<double>(flag, value);
    else if (flag == "--data")
      a.data = value;
    else if (flag == "--limit")
      a.limit = number<int64_t>(flag, value);
    else if (flag == "--seed")
      a.seed = number<uint64_t>(flag, value);
    else if (flag == "--threads")
      a.threads = number<int>(flag, value);
    else if (flag == "--device")
      a.device = value;
    else
      throw UsageError("unknown option " + flag);
  }
  if (a.stages < 1 || a.micro_batches < 1 || a.batch_size < 1 || a.epochs < 1 || !(a.lr > 0 && std::isfinite(a.lr)) ||
      a.limit < 0 || a.threads < 0)
    throw UsageError(
        "stages, micro-batches, batch size and epochs must be positive, lr finite and above 0, limit "
        "and threads not negative");
  if (a.device != "cpu" && a.device != "cuda")
    throw UsageError("unknown device " + a.device + " (expected cpu or cuda)");
  return a;
}

// Normalize, then Linear + ReLU per hidden layer and a last Linear: 10 layers. By parameter count the first
// Linear (784 x 256) weighs as much as the other four together, so two stages come out balanced.
constexpr std::array<int64_t, 6> kWidths{28 * 28, 256, 256, 256, 256, 10};

std::vector<pipe::Layer> make_layers() {
  std::vector<pipe::Layer> layers;
  // Flattened and standardised with the training set's pixel mean and deviation: a deeper MLP learns faster so.
  layers.emplace_back([](const Tensor& x) { return (x.flatten(1) - 0.2860) / 0.3530; }, "Normalize");
  for (size_t i = 1; i < kWidths.size(); ++i) {
    layers.push_back(pipe::LayerSpec::of<nn::Linear>(kWidths[i - 1], kWidths[i]));
    if (i + 1 < kWidths.size()) layers.emplace_back([](const Tensor& x) { return relu(x); }, "ReLU");
  }
  return layers;
}

// parts + 1 offsets that cut n rows into `parts` runs whose sizes differ by at most one.
std::vector<int64_t> even_offsets(int64_t n, int64_t parts) {
  std::vector<int64_t> offsets(parts + 1);
  for (int64_t i = 0; i <= parts; ++i) offsets[i] = i * n / parts;
  return offsets;
}

// The micro-batches of one train_batch or eval_batch: rows offsets[k] to offsets[k + 1] of `batch` are
// micro-batch k. The first stage feeds their images to the model, the last stage their labels to the loss.
pipe::DataIterator micro_batches(const data::Example<>& batch, std::vector<int64_t> offsets) {
  return [batch, offsets = std::move(offsets), k = size_t{0}]() mutable -> std::optional<pipe::MicroBatch> {
    if (k + 1 >= offsets.size()) return std::nullopt;
    const int64_t start = offsets[k], length = offsets[k + 1] - start;
    ++k;
    return pipe::MicroBatch{{batch.data.narrow(0, start, length)}, {batch.target.narrow(0, start, length)}};
  };
}

// This replica's data. Both ends of a replica's pipeline load the same shard in the same order (the same
// num_replicas, rank, seed and epoch), so the labels the last stage reads belong to the images the first
// stage fed in.
struct Data {
  data::DataLoader train;  // full batches only (drop_last), so every micro-batch of training has one shape
  data::Example<> test;    // the replica's shard of the test set, whole
};

Data load_data(const Args& args, const pipe::PipelineParallelGrid& grid) {
  const int64_t replicas = grid.get_data_parallel_world_size(), replica = grid.get_data_parallel_id();
  const data::FashionMNIST full_train(args.data, data::FashionMNIST::Mode::kTrain);
  const data::FashionMNIST test_set(args.data, data::FashionMNIST::Mode::kTest);
  const int64_t n = args.limit > 0 ? std::min(args.limit, full_train.size()) : full_train.size();
  const data::TensorDataset train_set(full_train.data().narrow(0, 0, n), full_train.targets().narrow(0, 0, n));
  data::DataLoader train(train_set, data::DataLoaderOptions(args.batch_size / replicas)
                                        .shuffle(true)
                                        .drop_last(true)
                                        .seed(args.seed)
                                        .num_replicas(replicas)
                                        .rank(replica));
  if (train.size() == 0)
    throw UsageError(std::to_string(n) + " training examples make no full batch of " + std::to_string(args.batch_size));
  const auto test_indices =
      data::sample_indices(test_set.size(), data::DataLoaderOptions().num_replicas(replicas).rank(replica), 0);
  if (static_cast<int64_t>(test_indices.size()) < args.micro_batches)
    throw UsageError("the test set's shard of " + std::to_string(test_indices.size()) + " images cannot fill " +
                     std::to_string(args.micro_batches) + " micro-batches");
  return {std::move(train), test_set.get_batch(test_indices)};
}

struct Evaluation {
  double loss, accuracy;
};

// Note [sharded evaluation]: each replica evaluates its shard of the test set (5000 of the 10000 images with
// two replicas) in eval_batch calls of M micro-batches each, about as many rows per call as a replica trains
// on. A shard rarely divides into micro-batches of one size, so it is cut into calls x M micro-batches whose
// sizes differ by at most one, and the engine runs with dynamic_shapes: the activation shape may then change
// between micro-batches instead of being an error. Training batches are all full, so there it never changes.
Evaluation evaluate(pipe::PipelineEngine& engine, const data::Example<>& shard, int64_t replica_batch) {
  const int m = engine.options().micro_batches;
  const int64_t n = shard.target.size(0);
  const int64_t calls = std::max<int64_t>(1, n / replica_batch);
  const std::vector<int64_t> offsets = even_offsets(n, calls * m);
  double loss = 0, correct = 0, count = 0;
  for (int64_t call = 0; call < calls; ++call) {
    const auto first = offsets.begin() + call * m;
    std::vector<tensor_list> outputs;  // filled on the last stage only
    loss += engine.eval_batch(micro_batches(shard, {first, first + m + 1}), &outputs);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Tensor labels = shard.target.narrow(0, first[k], first[k + 1] - first[k]);
      correct += outputs[k][0].argmax(1).eq(labels.to(outputs[k][0].device())).sum().item<double>();
      count += static_cast<double>(labels.numel());
    }
  }
  // Only the last stages counted; the sum over every rank covers the whole test set.
  Tensor totals = tensor(std::vector<double>{correct, count}, kFloat64);
  distributed::all_reduce(totals);
  return {loss / static_cast<double>(calls), totals[0].item<double>() / totals[1].item<double>()};
}

// One rank's seconds in train_batch, summed over the whole training.
struct StageTime {
  double compute = 0, p2p = 0, reduce = 0, total = 0;

  void add(const pipe::PipelineTimings& t) {
    using I = pipe::PipeInstruction;
    compute += t.compute();
    p2p +=
        t.seconds[I::SendActivation] + t.seconds[I::RecvActivation] + t.seconds[I::SendGrad] + t.seconds[I::RecvGrad];
    reduce += t.seconds[I::ReduceTiedGrads] + t.seconds[I::ReduceGrads];
    total += t.total;
  }
};

// Gathers every rank's StageTime to rank 0, which prints one line per rank and the bubble: the share of a
// rank's time not spent computing, measured next to the schedule's prediction.
void print_stage_times(const StageTime& mine, const pipe::PipelineParallelGrid& grid, double predicted_bubble) {
  constexpr int kFields = 6;
  const int world = distributed::get_world_size();
  const Tensor local = tensor(std::vector<double>{double(grid.get_stage_id()), double(grid.get_data_parallel_id()),
                                                  mine.compute, mine.p2p, mine.reduce, mine.total},
                              kFloat64);
  const Tensor all = empty({world * kFields}, kFloat64);
  distributed::all_gather_into_tensor(all, local);
  if (grid.get_global_rank() != 0) return;
  std::printf("time in train_batch (s): compute = forward + backward, p2p = send/recv, all-reduce = grad reduction\n");
  double compute = 0, total = 0;
  for (int r = 0; r < world; ++r) {
    std::array<double, kFields> f;
    for (int i = 0; i < kFields; ++i) f[i] = all[r * kFields + i].item<double>();
    std::printf("  stage %d replica %d: compute %6.2f  p2p %6.2f  all-reduce %6.2f  total %6.2f  bubble %.3f\n",
                int(f[0]), int(f[1]), f[2], f[3], f[4], f[5], f[5] > 0 ? 1 - f[2] / f[5] : 0.0);
    compute += f[2];
    total += f[5];
  }
  std::printf("bubble: predicted %.3f, measured %.3f (1 - compute / total over all ranks)\n", predicted_bubble,
              total > 0 ? 1 - compute / total : 0.0);
}

void train(const Args& args, const pipe::PipelineParallelGrid& grid, const std::shared_ptr<pipe::PipelineModule>& model,
           Data& data) {
  const int rank = grid.get_global_rank(), stages = grid.get_pipe_parallel_world_size();
  const int replicas = grid.get_data_parallel_world_size();
  const int64_t replica_batch = args.batch_size / replicas, batches = data.train.size();

  auto adamw = std::make_shared<optim::AdamW>(model->parameters(), optim::AdamWOptions(args.lr).weight_decay(1e-4));
  // dynamic_shapes for evaluation: Note [sharded evaluation].
  pipe::PipelineEngine engine(model, grid, adamw, {.micro_batches = args.micro_batches, .dynamic_shapes = true});
  const int64_t steps = args.epochs * batches;
  optim::WarmupCosineLR schedule(*adamw, std::min<int64_t>(100, steps / 10), steps);

  double predicted_bubble = 0;
  if (rank == 0) {
    const auto layers = make_layers();
    const std::vector<int>& parts = model->parts();
    std::printf("pipeline: MLP");
    for (size_t i = 0; i < kWidths.size(); ++i)
      std::printf("%s%lld", i ? "-" : " ", static_cast<long long>(kWidths[i]));
    std::printf(", %d layers on %d stages x %d replicas; global batch %lld = %d replicas x %d micro-batches x %lld\n",
                model->num_layers(), stages, replicas, static_cast<long long>(args.batch_size), replicas,
                args.micro_batches, static_cast<long long>(replica_batch / args.micro_batches));
    for (int s = 0; s < stages; ++s) {
      int64_t parameters = 0;
      for (int l = parts[s]; l < parts[s + 1]; ++l) parameters += layers[l].spec().num_parameters();
      std::printf("  stage %d: layers %d-%d, %lld parameters\n", s, parts[s], parts[s + 1] - 1,
                  static_cast<long long>(parameters));
    }
    const pipe::ScheduleReport plan = pipe::validate_schedule("train", args.micro_batches, stages);
    predicted_bubble = plan.bubble_fraction;
    std::printf("schedule: 1F1B, %d steps per batch, predicted bubble %.3f\n", plan.steps, predicted_bubble);
    std::fflush(stdout);
  }

  // Only the first stage (images) and the last (labels) draw micro-batches; the others never call the iterator.
  const bool loads = grid.is_first_stage() || grid.is_last_stage();
  const std::vector<int64_t> cuts = even_offsets(replica_batch, args.micro_batches);
  StageTime time;
  double accuracy = 0;
  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    data.train.set_epoch(epoch);
    std::optional<report::ProgressBar> bar;
    if (rank == 0) bar.emplace(epoch, args.epochs, batches);
    double loss_sum = 0;
    for (int64_t i = 0; i < batches; ++i) {
      loss_sum += engine.train_batch(micro_batches(loads ? data.train.batch(i) : data::Example<>{}, cuts));
      schedule.step();
      time.add(engine.timings());
      if (bar) bar->update(i + 1, loss_sum / static_cast<double>(i + 1), (i + 1) * args.batch_size);
    }
    const Evaluation eval = evaluate(engine, data.test, replica_batch);
    accuracy = eval.accuracy;
    if (bar) {
      char summary[160];
      std::snprintf(summary, sizeof summary, "train loss %.4f, test loss %.4f, test accuracy %.4f",
                    loss_sum / static_cast<double>(batches), eval.loss, eval.accuracy);
      bar->finish(summary);
    }
  }
  print_stage_times(time, grid, predicted_bubble);
  if (rank == 0) std::cout << "test_accuracy=" << accuracy << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  distributed::init();
  const int rank = distributed::get_rank();
  Args args;
  std::optional<pipe::PipelineParallelGrid> grid;
  std::optional<Data> data;
  std::shared_ptr<pipe::PipelineModule> model;
  std::string error;  // what went wrong on this rank while setting up
  try {
    args = parse(argc, argv);
    if (args.help) {
      if (rank == 0) std::cout << kUsage;
      return 0;
    }
    if (args.threads > 0) set_num_threads(args.threads);
    if (rank == 0)
      std::cout << "threads per rank: " << get_num_threads() << " ("
                << (args.threads > 0 ? std::string("--threads") : distributed::thread_choice().reason) << ")\n";
    grid.emplace(args.stages);
    const int replicas = grid->get_data_parallel_world_size();
    if (args.batch_size % (int64_t{replicas} * args.micro_batches) != 0)
      throw UsageError("--batch-size " + std::to_string(args.batch_size) + " does not split into " +
                       std::to_string(replicas) + " replicas x " + std::to_string(args.micro_batches) +
                       " micro-batches");
    data.emplace(load_data(args, *grid));
    pipe::PipelineModuleOptions options;
    options.partition_method = "parameters";
    options.loss_fn = pipe::cross_entropy_loss;
    options.seed_layers = true;  // the same initial parameters for any number of stages
    options.base_seed = args.seed;
    model = std::make_shared<pipe::PipelineModule>(make_layers(), *grid, options);
    if (args.device == "cuda") model->to(cuda::device());
  } catch (const UsageError& e) {
    error = std::string(e.what()) + "\n" + kUsage;
  } catch (const Error& e) {
    error = std::string(e.what()) + "\n";
  }
  if (setup::failed_on_some_rank(error, "pipeline")) return 2;  // Note [setup errors] in examples/common
  train(args, *grid, model, *data);
  return 0;
}
