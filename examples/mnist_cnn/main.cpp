// pytorch/examples' cpp/mnist/mnist.cpp, ported to strata by renaming torch:: to strata:: (README.md
// in this folder lists every other line that differs, and why). It trains on Fashion-MNIST, which
// Debian packages with MNIST's file names; the optional arguments exist for the test suite:
//
//   mnist_cnn [EPOCHS [DATA_ROOT]]      (defaults: 10, /usr/share/datasets/fashion-mnist)

#include <strata/strata.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

// Where to find the MNIST dataset.
const char* kDataRoot = strata::data::FashionMNIST::kDefaultRoot;

// The batch size for training.
const int64_t kTrainBatchSize = 64;

// The batch size for testing.
const int64_t kTestBatchSize = 1000;

// The number of epochs to train.
int64_t kNumberOfEpochs = 10;

// After how many batches to log a new update with the loss value.
const int64_t kLogInterval = 10;

struct Net : strata::nn::Module {
  Net()
      : conv1(strata::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2(strata::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        fc1(320, 50),
        fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  strata::Tensor forward(strata::Tensor x) {
    x = strata::relu(strata::max_pool2d(conv1->forward(x), 2));
    x = strata::relu(strata::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = strata::relu(fc1->forward(x));
    x = strata::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = fc2->forward(x);
    return strata::log_softmax(x, /*dim=*/1);
  }

  strata::nn::Conv2d conv1;
  strata::nn::Conv2d conv2;
  strata::nn::Dropout2d conv2_drop;
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
    loss.backward();
    optimizer.step();

    if (batch_idx++ % kLogInterval == 0) {
      std::printf("\rTrain Epoch: %ld [%5ld/%5ld] Loss: %.4f", epoch, batch_idx * batch.data.size(0), dataset_size,
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
  if (argc > 1) kNumberOfEpochs = std::atoll(argv[1]);
  if (argc > 2) kDataRoot = argv[2];
  strata::manual_seed(1);

  strata::DeviceType device_type;
  if (strata::cuda::is_available()) {
    std::cout << "CUDA available! Training on GPU." << std::endl;
    device_type = strata::kCUDA;
  } else {
    std::cout << "Training on CPU." << std::endl;
    device_type = strata::kCPU;
  }
  strata::Device device(device_type);

  Net model;
  model.to(device);

  auto train_dataset = strata::data::datasets::MNIST(kDataRoot)
                           .map(strata::data::transforms::Normalize<>(0.2860, 0.3530))
                           .map(strata::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader = strata::data::make_data_loader<strata::data::samplers::SequentialSampler>(
      std::move(train_dataset), kTrainBatchSize);

  auto test_dataset = strata::data::datasets::MNIST(kDataRoot, strata::data::datasets::MNIST::Mode::kTest)
                          .map(strata::data::transforms::Normalize<>(0.2860, 0.3530))
                          .map(strata::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = strata::data::make_data_loader(std::move(test_dataset), kTestBatchSize);

  strata::optim::SGD optimizer(model.parameters(), strata::optim::SGDOptions(0.01).momentum(0.5));

  for (size_t epoch = 1; epoch <= static_cast<size_t>(kNumberOfEpochs); ++epoch) {
    train(epoch, model, device, *train_loader, optimizer, train_dataset_size);
    test(model, device, *test_loader, test_dataset_size);
  }
}
