// Trains an MLP on the real Fashion-MNIST data (Debian's dataset-fashion-mnist) with AdamW and a
// warm-up + cosine schedule, as one process or data parallel under mpirun. Each epoch it evaluates
// test accuracy, saves a checkpoint, appends to metrics.csv and redraws metrics.svg; --resume
// continues from the last checkpoint and ends with the same parameters as an uninterrupted run
// given the same settings (--epochs may grow; the schedule then follows the new length).
//
//   fashion_mnist [--epochs 5] [--batch-size 128] [--lr 2e-3] [--model mlp|mlp-ln] [--hidden 256]
//                 [--data DIR] [--out DIR] [--resume] [--stop-after E] [--limit N] [--seed S] [--threads N]
//                 [--device cpu|cuda]
//   mpirun -np 2 fashion_mnist          # the same global batch, split between two ranks
//
// The last line is `test_accuracy=<value>`.

#include <strata/strata.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli.h"
#include "report.h"

using namespace strata;

namespace {

struct Args {
  int epochs = 5;
  int64_t batch_size = 128;  // global: each of N ranks takes batch_size / N
  double lr = 2e-3;
  std::string model = "mlp";
  int64_t hidden = 256;
  std::string data = data::FashionMNIST::kDefaultRoot;
  std::string out = "fashion_mnist_out";
  bool resume = false;
  int stop_after = 0;  // end after this epoch as if interrupted (0: run all); for testing --resume
  int64_t limit = 0;   // train on the first `limit` examples only (0: all); for quick runs and tests
  uint64_t seed = 0;
  int threads = 0;             // 0: strata's default
  std::string device = "cpu";  // cuda: this rank's GPU (distributed::init makes it current)
};

const char* kUsage =
    "usage: fashion_mnist [--epochs N] [--batch-size B] [--lr LR] [--model mlp|mlp-ln] [--hidden H]\n"
    "                     [--data DIR] [--out DIR] [--resume] [--stop-after E] [--limit N] [--seed S]\n"
    "                     [--threads N] [--device cpu|cuda]\n";

[[noreturn]] void fail(const std::string& why) {
  std::cerr << "fashion_mnist: " << why << "\n" << kUsage;
  std::exit(2);
}

// `value` as a whole T, or the run ends naming the flag.
template <class T>
T number(const std::string& flag, const std::string& value) {
  const std::optional<T> out = cli::parse_number<T>(value);
  if (!out) fail("bad value for " + flag + ": " + value);
  return *out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--resume") {
      a.resume = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) fail(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--epochs")
      a.epochs = number<int>(flag, value);
    else if (flag == "--batch-size")
      a.batch_size = number<int64_t>(flag, value);
    else if (flag == "--lr")
      a.lr = number<double>(flag, value);
    else if (flag == "--model")
      a.model = value;
    else if (flag == "--hidden")
      a.hidden = number<int64_t>(flag, value);
    else if (flag == "--data")
      a.data = value;
    else if (flag == "--out")
      a.out = value;
    else if (flag == "--stop-after")
      a.stop_after = number<int>(flag, value);
    else if (flag == "--limit")
      a.limit = number<int64_t>(flag, value);
    else if (flag == "--seed")
      a.seed = number<uint64_t>(flag, value);
    else if (flag == "--threads")
      a.threads = number<int>(flag, value);
    else if (flag == "--device")
      a.device = value;
    else
      fail("unknown option " + flag);
  }
  if (a.epochs < 1 || a.batch_size < 1 || a.hidden < 1 || !(a.lr > 0 && std::isfinite(a.lr)) || a.limit < 0 ||
      a.threads < 0 || a.stop_after < 0)
    fail(
        "epochs, batch size and hidden size must be positive, lr finite and above 0, limit, threads and "
        "stop-after not negative");
  if (a.model != "mlp" && a.model != "mlp-ln") fail("unknown model " + a.model);
  if (a.device != "cpu" && a.device != "cuda") fail("unknown device " + a.device + " (expected cpu or cuda)");
  return a;
}

// 784 -> hidden -> hidden -> 10. mlp-ln normalises each hidden layer and uses GELU.
nn::Sequential make_model(const Args& a) {
  nn::Sequential model;
  model->push_back("flatten", nn::Functional([](const Tensor& x) { return x.flatten(1); }, "Flatten"));
  int64_t in = 28 * 28;
  for (int layer = 0; layer < 2; ++layer) {
    model->push_back(nn::Linear(in, a.hidden));
    if (a.model == "mlp-ln") {
      model->push_back(nn::LayerNorm(std::vector<int64_t>{a.hidden}));
      model->push_back(nn::GELU());
    } else {
      model->push_back(nn::ReLU());
    }
    in = a.hidden;
  }
  model->push_back(nn::Linear(in, 10));
  return model;
}

// Sums over every rank: the epoch's figures are the whole job's, not one shard's.
Tensor sum_over_ranks(std::vector<double> values) {
  Tensor t = tensor(values, kFloat64);
  distributed::all_reduce(t);
  return t;
}

struct Evaluation {
  double loss, accuracy;
};

Evaluation evaluate(nn::Sequential& model, data::DataLoader& test, Device device) {
  NoGradGuard no_grad;
  model->eval();
  double loss = 0, correct = 0, count = 0;
  for (data::Example<>& batch : test) {
    const Tensor target = batch.target.to(device);
    Tensor logits = model(batch.data.to(device));
    loss += cross_entropy(logits, target, {.reduction = Reduction::Sum}).item<double>();
    correct += logits.argmax(1).eq(target).sum().item<double>();
    count += static_cast<double>(batch.target.numel());
  }
  model->train();
  Tensor totals = sum_over_ranks({loss, correct, count});
  const double n = totals[2].item<double>();
  return {totals[0].item<double>() / n, totals[1].item<double>() / n};
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  distributed::init();
  const int rank = distributed::get_rank(), world = distributed::get_world_size();
  try {
    if (args.batch_size % world != 0)
      throw std::runtime_error("--batch-size " + std::to_string(args.batch_size) + " does not divide among " +
                               std::to_string(world) + " ranks");
    if (args.threads > 0) set_num_threads(args.threads);
    if (rank == 0)
      std::cout << "threads per rank: " << get_num_threads() << " ("
                << (args.threads > 0 ? std::string("--threads") : distributed::thread_choice().reason) << ")\n";

    const data::FashionMNIST full_train(args.data, data::FashionMNIST::Mode::kTrain);
    const data::FashionMNIST test_set(args.data, data::FashionMNIST::Mode::kTest);
    const int64_t n = args.limit > 0 ? std::min(args.limit, full_train.size()) : full_train.size();
    const data::TensorDataset train_set(full_train.data().narrow(0, 0, n), full_train.targets().narrow(0, 0, n));
    const auto shard = data::DataLoaderOptions().batch_size(args.batch_size / world).num_replicas(world).rank(rank);
    data::DataLoader train(train_set, data::DataLoaderOptions()
                                          .batch_size(shard.batch_size())
                                          .shuffle(true)
                                          .seed(args.seed)
                                          .num_replicas(world)
                                          .rank(rank));
    data::DataLoader test(test_set, shard);

    const Device device = args.device == "cuda" ? cuda::device() : Device(kCPU);
    manual_seed(args.seed);  // the same initial parameters on every run and every rank
    nn::Sequential model = make_model(args);
    model->to(device);                       // before DDP and the optimizer, as in libtorch
    nn::DistributedDataParallel ddp(model);  // averages gradients over the ranks during backward
    optim::AdamW optimizer(model->parameters(), optim::AdamWOptions(args.lr).weight_decay(1e-4));
    const int64_t steps = args.epochs * train.size();
    optim::WarmupCosineLR schedule(optimizer, std::min<int64_t>(100, steps / 10), steps);

    std::filesystem::create_directories(args.out);
    const std::string checkpoint = args.out + "/checkpoint.safetensors";
    int first_epoch = 1;
    std::vector<report::EpochMetrics> rows;
    if (args.resume && std::filesystem::exists(checkpoint)) {
      const auto metadata = nn::load_checkpoint(checkpoint, *model, &optimizer);
      const int done = std::stoi(metadata.at("epoch"));
      // The schedule is a function of the step count, so replaying the steps restores it exactly.
      for (int64_t s = std::stoll(metadata.at("step")); s > 0; --s) schedule.step();
      first_epoch = done + 1;
      for (const auto& row : report::read_csv(args.out + "/metrics.csv"))
        if (row.epoch <= done) rows.push_back(row);
      if (rank == 0) std::cout << "resuming after epoch " << done << " from " << checkpoint << "\n";
    }
    if (rank == 0)
      std::cout << "fashion_mnist: " << args.model << " with " << model->num_parameters() << " parameters, "
                << train_set.size() << " training examples, " << world << " rank(s), global batch " << args.batch_size
                << ", on " << device << "\n";

    const int last_epoch = args.stop_after > 0 ? std::min(args.stop_after, args.epochs) : args.epochs;
    for (int epoch = first_epoch; epoch <= last_epoch; ++epoch) {
      train.set_epoch(epoch);
      std::optional<report::ProgressBar> bar;
      if (rank == 0) bar.emplace(epoch, args.epochs, train.size());
      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t batches = 0;
      for (data::Example<>& batch : train) {
        Tensor loss = cross_entropy(model(batch.data.to(device)), batch.target.to(device));
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
        schedule.step();
        loss_sum += loss.item<double>();
        ++batches;
        if (bar) bar->update(batches, loss_sum / batches, batches * args.batch_size);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double train_loss = sum_over_ranks({loss_sum / batches}).item<double>() / world;
      const Evaluation eval = evaluate(model, test, device);
      rows.push_back({epoch, train_loss, eval.loss, eval.accuracy, batches * args.batch_size / seconds, seconds});
      if (rank == 0) {
        nn::save_checkpoint(checkpoint, *model, &optimizer,
                            {{"epoch", std::to_string(epoch)}, {"step", std::to_string(schedule.last_epoch())}});
        report::write_csv(args.out + "/metrics.csv", rows);
        report::write_svg(args.out + "/metrics.svg", rows);
        char summary[160];
        std::snprintf(summary, sizeof summary, "train loss %.4f, test loss %.4f, test accuracy %.4f", train_loss,
                      eval.loss, eval.accuracy);
        bar->finish(summary);
      }
    }
    if (rank == 0) {
      std::cout << "metrics: " << args.out << "/metrics.csv, plot: " << args.out << "/metrics.svg\n";
      std::cout << "test_accuracy=" << (rows.empty() ? 0.0 : rows.back().test_accuracy) << std::endl;
    }
  } catch (const std::exception& e) {
    // Alone, a clean exit; among several ranks the others may be waiting in a collective, and an
    // uncaught exception makes strata end the whole job.
    if (world > 1) throw;
    std::cerr << "fashion_mnist: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
