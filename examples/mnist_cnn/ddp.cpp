// main.cpp's program trained data parallel: under mpirun each rank trains on its share of every batch
// of 64 and nn::DistributedDataParallel averages the gradients. Run alone it is one rank. To reach 0.90
// test accuracy on Fashion-MNIST (main.cpp's SGD reaches 0.84 in ten epochs) it changes what README.md
// in this folder lists: batch norm after each convolution (BatchNorm2d, or SyncBatchNorm with --sync-bn,
// whose statistics cover every rank's samples), twice the channels, Adam with StepLR, shuffling.
//
//   mnist_cnn_ddp [--epochs N] [--sync-bn] [--data DIR]               (one process)
//   mpirun -np 2 mnist_cnn_ddp [--epochs N] [--sync-bn] [--data DIR]   (defaults: 5, no, Fashion-MNIST)

#include <strata/strata.h>

#include "cli.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

namespace dist = strata::distributed;

// The batch size for training, over all ranks together.
const int64_t kTrainBatchSize = 64;

// The batch size for testing.
const int64_t kTestBatchSize = 1000;

// After how many batches to log a new update with the loss value.
const int64_t kLogInterval = 10;

// Batch normalisation of `channels` over this rank's samples, or with --sync-bn over every rank's.
strata::nn::Sequential batch_norm(int64_t channels, bool sync) {
  if (sync) return strata::nn::Sequential(strata::nn::SyncBatchNorm(channels));
  return strata::nn::Sequential(strata::nn::BatchNorm2d(channels));
}

struct Net : strata::nn::Module {
  explicit Net(bool sync_bn)
      : conv1(strata::nn::Conv2dOptions(1, 20, /*kernel_size=*/5)),
        bn1(batch_norm(20, sync_bn)),
        conv2(strata::nn::Conv2dOptions(20, 40, /*kernel_size=*/5)),
        bn2(batch_norm(40, sync_bn)),
        fc1(640, 128),
        fc2(128, 10) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  strata::Tensor forward(strata::Tensor x) {
    x = strata::relu(strata::max_pool2d(bn1->forward(conv1->forward(x)), 2));
    x = strata::relu(strata::max_pool2d(bn2->forward(conv2->forward(x)), 2));
    x = x.view({-1, 640});
    x = strata::relu(fc1->forward(x));
    x = fc2->forward(x);
    return strata::log_softmax(x, /*dim=*/1);
  }

  strata::nn::Conv2d conv1;
  strata::nn::Sequential bn1;
  strata::nn::Conv2d conv2;
  strata::nn::Sequential bn2;
  strata::nn::Linear fc1;
  strata::nn::Linear fc2;
};

template <typename DataLoader>
void train(size_t epoch, Net& model, strata::Device device, DataLoader& data_loader,
           strata::optim::Optimizer& optimizer, size_t dataset_size) {
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = strata::nll_loss(output, targets);
    STRATA_CHECK(!std::isnan(loss.template item<float>()));
    loss.backward();  // DDP averages the gradients over the ranks as backward produces them
    optimizer.step();

    if (batch_idx++ % kLogInterval == 0 && dist::get_rank() == 0) {
      std::printf("\rTrain Epoch: %zu [%5zu/%5zu] Loss: %.4f", epoch, batch_idx * kTrainBatchSize, dataset_size,
                  loss.template item<float>());
    }
  }
}

template <typename DataLoader>
void test(Net& model, strata::Device device, DataLoader& data_loader, size_t dataset_size) {
  strata::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int32_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    auto output = model.forward(data);
    test_loss += strata::nll_loss(output, targets,
                                  /*weight=*/{}, strata::Reduction::Sum)
                     .template item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
  }

  test_loss /= dataset_size;
  std::printf("\nTest set: Average loss: %.4f | Accuracy: %.3f\n", test_loss,
              static_cast<double>(correct) / dataset_size);
}

auto main(int argc, char** argv) -> int {
  int64_t epochs = 5;
  bool sync_bn = false;
  std::string data_root = strata::data::FashionMNIST::kDefaultRoot;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) {
      const auto n = cli::parse_number<int64_t>(argv[++i]);
      if (!n || *n < 1) {
        std::cerr << "mnist_cnn_ddp: bad value for --epochs: " << argv[i] << "\n";
        return 2;
      }
      epochs = *n;
    } else if (!std::strcmp(argv[i], "--sync-bn")) {
      sync_bn = true;
    } else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) {
      data_root = argv[++i];
    } else {
      std::cerr << "usage: [mpirun -np N] mnist_cnn_ddp [--epochs N] [--sync-bn] [--data DIR]\n";
      return 2;
    }
  }
  dist::init();
  const int64_t world = dist::get_world_size(), rank = dist::get_rank();
  if (kTrainBatchSize % world != 0) {
    if (rank == 0)
      std::cerr << "mnist_cnn_ddp: the batch of " << kTrainBatchSize << " does not divide among " << world
                << " ranks\n";
    return 2;
  }
  strata::manual_seed(1);  // the same initial parameters, and the same shuffled order, on every rank

  const strata::Device device = strata::cuda::is_available() ? strata::cuda::device() : strata::Device(strata::kCPU);
  if (rank == 0)
    std::cout << "Training on " << device << ", " << world << " rank(s), "
              << (sync_bn ? "SyncBatchNorm" : "BatchNorm2d") << "." << std::endl;

  auto model = std::make_shared<Net>(sync_bn);
  model->to(device);
  strata::nn::DistributedDataParallel ddp(model);  // broadcasts rank 0's parameters and buffers

  auto train_dataset = strata::data::datasets::MNIST(data_root)
                           .map(strata::data::transforms::Normalize<>(0.2860, 0.3530))
                           .map(strata::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader =
      strata::data::make_data_loader(std::move(train_dataset),
                                     strata::data::samplers::DistributedRandomSampler(
                                         train_dataset_size, static_cast<size_t>(world), static_cast<size_t>(rank)),
                                     kTrainBatchSize / world);

  auto test_dataset = strata::data::datasets::MNIST(data_root, strata::data::datasets::MNIST::Mode::kTest)
                          .map(strata::data::transforms::Normalize<>(0.2860, 0.3530))
                          .map(strata::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = strata::data::make_data_loader(std::move(test_dataset), kTestBatchSize);

  strata::optim::Adam optimizer(model->parameters(), strata::optim::AdamOptions(1e-3));
  strata::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.7);

  for (size_t epoch = 1; epoch <= static_cast<size_t>(epochs); ++epoch) {
    train(epoch, *model, device, *train_loader, optimizer, train_dataset_size);
    // Rank 0's model is tested, as PyTorch's DDP examples do: with BatchNorm2d the ranks' running
    // statistics differ (each saw its own samples); everything else is the same on every rank.
    if (rank == 0) test(*model, device, *test_loader, test_dataset_size);
    scheduler.step();
  }
}
