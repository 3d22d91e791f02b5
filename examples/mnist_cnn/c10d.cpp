// mnist_cnn_ddp's program written against libtorch's C++ distributed API instead of DistributedDataParallel, as
// pytorch/examples' cpp/distributed/dist-mnist.cpp is: a ProcessGroupMPI, a DistributedRandomSampler, and after
// each backward one allreduce Work per parameter, waited for before the gradients are averaged. README.md in this
// folder lists what differs from dist-mnist.cpp and why.
//
//   mnist_cnn_c10d [--epochs N] [--data DIR]               (one process)
//   mpirun -np 2 mnist_cnn_c10d [--epochs N] [--data DIR]   (defaults: 5, Fashion-MNIST)

#include <strata/c10d/ProcessGroupMPI.hpp>
#include <strata/strata.h>

#include "cli.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

// The batch size for training, over all ranks together.
const int64_t kTrainBatchSize = 64;

// The batch size for testing.
const int64_t kTestBatchSize = 1000;

// After how many batches to log a new update with the loss value.
const int64_t kLogInterval = 10;

struct Net : strata::nn::Module {
  Net()
      : conv1(strata::nn::Conv2dOptions(1, 20, /*kernel_size=*/5)),
        bn1(20),
        conv2(strata::nn::Conv2dOptions(20, 40, /*kernel_size=*/5)),
        bn2(40),
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
  strata::nn::BatchNorm2d bn1;
  strata::nn::Conv2d conv2;
  strata::nn::BatchNorm2d bn2;
  strata::nn::Linear fc1;
  strata::nn::Linear fc2;
};

// As dist-mnist.cpp's waitWork: a failed allreduce ends the whole job.
void waitWork(std::shared_ptr<strata::c10d::ProcessGroupMPI> pg,
              std::vector<std::shared_ptr<strata::c10d::ProcessGroup::Work>> works) {
  for (auto& work : works) {
    try {
      work->wait();
    } catch (const std::exception& ex) {
      std::cerr << "Exception received: " << ex.what() << std::endl;
      pg->abort();
    }
  }
}

template <typename DataLoader>
void train(size_t epoch, Net& model, strata::Device device, DataLoader& data_loader,
           strata::optim::Optimizer& optimizer, size_t dataset_size,
           const std::shared_ptr<strata::c10d::ProcessGroupMPI>& pg) {
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = strata::nll_loss(output, targets);
    STRATA_CHECK(!std::isnan(loss.template item<float>()));
    loss.backward();

    // Averaging the gradients of the parameters over the processes: one allreduce per parameter, all in
    // flight together, then the division once every sum has arrived.
    std::vector<std::shared_ptr<strata::c10d::ProcessGroup::Work>> works;
    for (auto& param : model.named_parameters()) {
      std::vector<strata::Tensor> tmp = {param.value().grad()};
      works.push_back(pg->allreduce(tmp));
    }
    waitWork(pg, works);
    for (auto& param : model.named_parameters()) param.value().grad().data() = param.value().grad() / pg->getSize();
    optimizer.step();

    if (batch_idx++ % kLogInterval == 0 && pg->getRank() == 0) {
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
  std::string data_root = strata::data::FashionMNIST::kDefaultRoot;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) {
      const auto n = cli::parse_number<int64_t>(argv[++i]);
      if (!n || *n < 1) {
        std::cerr << "mnist_cnn_c10d: bad value for --epochs: " << argv[i] << "\n";
        return 2;
      }
      epochs = *n;
    } else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) {
      data_root = argv[++i];
    } else {
      std::cerr << "usage: [mpirun -np N] mnist_cnn_c10d [--epochs N] [--data DIR]\n";
      return 2;
    }
  }
  // Creating the MPI process group (it joins MPI).
  auto pg = strata::c10d::ProcessGroupMPI::createProcessGroupMPI();
  const int64_t numranks = pg->getSize(), rank = pg->getRank();
  if (kTrainBatchSize % numranks != 0) {
    if (rank == 0)
      std::cerr << "mnist_cnn_c10d: the batch of " << kTrainBatchSize << " does not divide among " << numranks
                << " ranks\n";
    return 2;
  }
  strata::manual_seed(1);  // the same initial parameters, and the same shuffled order, on every rank

  const strata::Device device = strata::cuda::is_available() ? strata::cuda::device() : strata::Device(strata::kCPU);
  if (rank == 0) std::cout << "Training on " << device << ", " << numranks << " rank(s)." << std::endl;

  auto model = std::make_shared<Net>();
  model->to(device);

  auto train_dataset = strata::data::datasets::MNIST(data_root)
                           .map(strata::data::transforms::Normalize<>(0.2860, 0.3530))
                           .map(strata::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  // Distributed Random Sampler: this rank's share of one shuffled order.
  auto data_sampler = strata::data::samplers::DistributedRandomSampler(
      train_dataset_size, static_cast<size_t>(numranks), static_cast<size_t>(rank));
  auto train_loader =
      strata::data::make_data_loader(std::move(train_dataset), data_sampler, kTrainBatchSize / numranks);

  auto test_dataset = strata::data::datasets::MNIST(data_root, strata::data::datasets::MNIST::Mode::kTest)
                          .map(strata::data::transforms::Normalize<>(0.2860, 0.3530))
                          .map(strata::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = strata::data::make_data_loader(std::move(test_dataset), kTestBatchSize);

  strata::optim::Adam optimizer(model->parameters(), strata::optim::AdamOptions(1e-3));
  strata::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.7);

  for (size_t epoch = 1; epoch <= static_cast<size_t>(epochs); ++epoch) {
    train(epoch, *model, device, *train_loader, optimizer, train_dataset_size, pg);
    // Rank 0's model is tested: with BatchNorm2d the ranks' running statistics differ (each saw its own
    // samples); everything else is the same on every rank.
    if (rank == 0) test(*model, device, *test_loader, test_dataset_size);
    scheduler.step();
  }
}
