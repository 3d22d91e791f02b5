// nn, optimizers, checkpoints and gradcheck on CUDA tensors, against the same code on the CPU: three training
// steps of an MLP and a TransformerBlock with SGD with momentum and with AdamW, float64 and float32; gradcheck
// in float64 on the GPU; checkpoints saved from the GPU, loaded on the CPU and back, bit for bit; Module::to;
// and no new device memory once training has warmed up. Every test skips without a GPU.

#include <functional>

#include <strata/autograd/gradcheck.h>
#include <strata/nn/activation.h>
#include <strata/nn/container.h>
#include <strata/nn/conv.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>
#include <strata/nn/pooling.h>
#include <strata/nn/safetensors.h>
#include <strata/nn/serialize.h>
#include <strata/nn/transformer.h>
#include <strata/optim/adam.h>
#include <strata/optim/sgd.h>
#include <strata/tensor/cuda.h>
#include <strata/tensor/kernels.h>

#include "parity.h"

namespace strata {
namespace {

using testing::cuda_matches_cpu;
using testing::normalized_error;
using testing::same_tensor;

enum class OptimizerKind { SgdMomentum, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(OptimizerKind kind, const std::vector<Tensor>& params) {
  if (kind == OptimizerKind::SgdMomentum)
    return std::make_unique<optim::SGD>(params, optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(1e-3));
}

// A model on the CPU, its loss and the batch of a step (made on the CPU; the GPU run copies it over).
struct Task {
  std::function<std::shared_ptr<nn::Module>()> make;  // seeded by the caller
  std::function<Tensor(nn::Module&, const Tensor&)> forward;
  std::function<Tensor(const Tensor&, const Tensor&)> loss;
  std::function<std::pair<Tensor, Tensor>(int step)> batch;
};

Task mlp_task() {
  return {
      [] {
        return nn::Sequential(nn::Linear(8, 32), nn::Tanh(), nn::Linear(32, 32), nn::GELU(), nn::Linear(32, 4)).ptr();
      },
      [](nn::Module& m, const Tensor& x) { return static_cast<nn::SequentialImpl&>(m).forward(x); },
      [](const Tensor& logits, const Tensor& y) { return cross_entropy(logits, y); },
      [](int step) {
        Generator gen(100 + step);
        return std::pair{randn({16, 8}, kDouble, &gen), randint(4, {16}, kLong, &gen)};
      }};
}

// Note [frozen key bias]: the key third of c_attn.bias adds the same number to every score of a query, which
// softmax ignores, so its gradient is zero up to rounding. AdamW divides that rounding by its own size and
// turns it into steps of about lr in a direction that differs between devices, so the bias is frozen here:
// the comparison would measure rounding noise, not the GPU.
Task transformer_task() {
  return {[] {
            nn::TransformerBlock block(16, 4);
            block->attn->c_attn->bias.requires_grad_(false);
            return std::static_pointer_cast<nn::Module>(block.ptr());
          },
          [](nn::Module& m, const Tensor& x) { return static_cast<nn::TransformerBlockImpl&>(m).forward(x); },
          [](const Tensor& out, const Tensor& y) { return mse_loss(out, y); },
          [](int step) {
            Generator gen(200 + step);
            return std::pair{randn({2, 5, 16}, kDouble, &gen), randn({2, 5, 16}, kDouble, &gen)};
          }};
}

std::vector<Tensor> trainable(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// Three steps on the CPU and on the GPU from the same values and batches: every loss and every parameter agree
// within `tolerance`, and the GPU run keeps parameters, gradients and optimizer buffers on the GPU.
void expect_gpu_training_matches_cpu(const Task& task, OptimizerKind kind, ScalarType dtype, double tolerance) {
  manual_seed(0);
  std::shared_ptr<nn::Module> cpu = task.make();
  manual_seed(0);
  std::shared_ptr<nn::Module> gpu = task.make();
  cpu->to(dtype);
  gpu->to(strata::testing::gpu(), dtype);
  auto cpu_opt = make_optimizer(kind, trainable(*cpu)), gpu_opt = make_optimizer(kind, trainable(*gpu));
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = task.batch(step);
    const Tensor cx = x.to(dtype), cy = y.is_floating_point() ? y.to(dtype) : y;
    cpu_opt->zero_grad();
    Tensor cpu_loss = task.loss(task.forward(*cpu, cx), cy);
    cpu_loss.backward();
    cpu_opt->step();
    gpu_opt->zero_grad();
    Tensor gpu_loss = task.loss(task.forward(*gpu, cx.to(strata::testing::gpu())), cy.to(strata::testing::gpu()));
    gpu_loss.backward();
    gpu_opt->step();
    EXPECT_TRUE(gpu_loss.is_cuda());
    EXPECT_LT(normalized_error(gpu_loss, cpu_loss), tolerance) << "loss of step " << step;
  }
  const nn::NamedTensors gpu_params = gpu->named_parameters(), cpu_params = cpu->named_parameters();
  for (size_t i = 0; i < gpu_params.size(); ++i) {
    const auto& [name, p] = gpu_params[i];
    EXPECT_EQ(p.device(), strata::testing::gpu()) << name;
    if (p.requires_grad()) {
      EXPECT_EQ(p.grad().device(), strata::testing::gpu()) << name;
    }
    EXPECT_LT(normalized_error(p, cpu_params[i].second), tolerance) << name;
  }
  for (const auto& [key, t] : gpu_opt->state_dict()) {
    if (!key.starts_with("state.")) continue;
    // Adam's step count stays on the host, so a step never waits for the GPU.
    EXPECT_EQ(t.device(), key.ends_with(".step") ? Device(kCPU) : strata::testing::gpu()) << key;
  }
}

TEST(CudaNnTraining, MlpMatchesTheCpuInFloat64) {
  STRATA_REQUIRE_CUDA();
  expect_gpu_training_matches_cpu(mlp_task(), OptimizerKind::SgdMomentum, kDouble, 1e-12);
  expect_gpu_training_matches_cpu(mlp_task(), OptimizerKind::AdamW, kDouble, 1e-12);
}

TEST(CudaNnTraining, MlpMatchesTheCpuInFloat32) {
  STRATA_REQUIRE_CUDA();
  expect_gpu_training_matches_cpu(mlp_task(), OptimizerKind::SgdMomentum, kFloat, 1e-5);
  expect_gpu_training_matches_cpu(mlp_task(), OptimizerKind::AdamW, kFloat, 1e-5);
}

TEST(CudaNnTraining, TransformerBlockMatchesTheCpuInFloat64) {
  STRATA_REQUIRE_CUDA();
  expect_gpu_training_matches_cpu(transformer_task(), OptimizerKind::SgdMomentum, kDouble, 1e-12);
  expect_gpu_training_matches_cpu(transformer_task(), OptimizerKind::AdamW, kDouble, 1e-12);
}

TEST(CudaNnTraining, TransformerBlockMatchesTheCpuInFloat32) {
  STRATA_REQUIRE_CUDA();
  expect_gpu_training_matches_cpu(transformer_task(), OptimizerKind::SgdMomentum, kFloat, 1e-5);
  expect_gpu_training_matches_cpu(transformer_task(), OptimizerKind::AdamW, kFloat, 1e-5);
}

// ---- gradcheck in float64 on the GPU ----

tensor_list with_parameters(const Tensor& x, const nn::Module& m) {
  tensor_list inputs{x};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  return inputs;
}

TEST(CudaGradcheck, Layers) {
  STRATA_REQUIRE_CUDA();
  manual_seed(3);
  const TensorOptions gpu64 = TensorOptions(kDouble).device(strata::testing::gpu()).requires_grad(true);

  nn::Linear fc(4, 3);
  fc->to(strata::testing::gpu(), kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return fc(in[0]); }, with_parameters(randn({2, 4}, gpu64), *fc));

  nn::LayerNorm ln(5);
  ln->to(strata::testing::gpu(), kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return ln(in[0]); }, with_parameters(randn({3, 5}, gpu64), *ln));

  nn::CausalSelfAttention attn(4, 2);
  attn->to(strata::testing::gpu(), kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return attn(in[0]); }, with_parameters(randn({2, 3, 4}, gpu64), *attn));
}

// The sliding-window ops and the new normalisations on the GPU: forward and gradients match the CPU in
// float64 (they are composites of gathers, matmuls and reductions, so the same code runs on both), and
// gradcheck passes on the GPU.
TEST(CudaGradcheck, ConvolutionPoolingAndNormalization) {
  STRATA_REQUIRE_CUDA();
  manual_seed(4);
  const tensor_list inputs{randn({2, 4, 7, 6}, kDouble), randn({6, 2, 3, 3}, kDouble), randn({6}, kDouble)};
  auto net = [](const tensor_list& in) {
    Tensor y = conv2d(in[0], in[1], in[2], {2, 1}, 1, 1, 2);
    Tensor pooled = max_pool2d(y, 3, 1, 1) + avg_pool2d(y, 3, 1, 1, false, false);
    Tensor z = conv_transpose2d(pooled, in[1], {}, 2, 1, 1);
    Tensor normed = batch_norm(z, {}, {}, {}, {}, true) + group_norm(z, 2) + adaptive_avg_pool2d(z, {3, 2}).mean();
    return tensor_list{normed, im2col(in[0], 2, 1, 0, 2)};
  };
  EXPECT_TRUE(cuda_matches_cpu(net, inputs));
  const TensorOptions gpu64 = TensorOptions(kDouble).device(strata::testing::gpu()).requires_grad(true);
  nn::Conv2d conv(nn::Conv2dOptions(2, 3, 2).padding(kSame));
  conv->to(strata::testing::gpu(), kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return max_pool2d(conv(in[0]), 2); },
                   with_parameters(randn({1, 2, 4, 4}, gpu64), *conv));
  nn::BatchNorm2d bn(3);
  bn->to(strata::testing::gpu(), kDouble);
  EXPECT_GRADCHECK([&](const tensor_list& in) { return bn(in[0]); }, with_parameters(randn({2, 3, 2, 2}, gpu64), *bn));
}

TEST(CudaGradcheck, CrossEntropy) {
  STRATA_REQUIRE_CUDA();
  manual_seed(4);
  const Tensor logits = randn({4, 5}, TensorOptions(kDouble).device(strata::testing::gpu()).requires_grad(true));
  const Tensor target = tensor({0, 3, 4, 1}).to(strata::testing::gpu());
  EXPECT_GRADCHECK([&](const tensor_list& in) { return cross_entropy(in[0], target); }, {logits});
  const Tensor weight = tensor({1.0, 0.5, 2.0, 1.0, 0.25}, kDouble).to(strata::testing::gpu());
  EXPECT_GRADCHECK(
      [&](const tensor_list& in) {
        return cross_entropy(in[0], target, {.ignore_index = 3, .label_smoothing = 0.1, .weight = weight});
      },
      {logits});
  EXPECT_TRUE(autograd::gradgradcheck([](const tensor_list& in) { return (in[0] * in[0]).tanh(); }, {logits}));
}

// The GPU path of gradcheck can fail: x * x.detach() has gradient x, not 2x.
TEST(CudaGradcheck, FindsAWrongGradient) {
  STRATA_REQUIRE_CUDA();
  const Tensor x = randn({3}, TensorOptions(kDouble).device(strata::testing::gpu()).requires_grad(true));
  EXPECT_FALSE(autograd::gradcheck([](const tensor_list& in) { return in[0] * in[0].detach(); }, {x},
                                   {.raise_exception = false}));
  EXPECT_THROW_MSG(autograd::gradcheck([](const tensor_list& in) { return in[0] * in[0].detach(); }, {x}),
                   "gradcheck: Jacobian mismatch for output 0 with respect to input 0");
}

// ---- Module::to ----

TEST(CudaModule, ToMovesParametersBuffersAndGradsBehindTheSameHandles) {
  STRATA_REQUIRE_CUDA();
  auto m = std::make_shared<nn::Module>("Bare");
  const Tensor w = m->register_parameter("w", randn({3, 4}));
  const Tensor steps = m->register_buffer("steps", tensor({int64_t(5)}));
  (w * w).sum().backward();
  const Tensor w_before = w.detach().clone(), grad_before = w.grad().clone();

  m->to(strata::testing::gpu());
  EXPECT_EQ(w.device(), strata::testing::gpu());
  EXPECT_EQ(steps.device(), strata::testing::gpu());
  EXPECT_EQ(w.grad().device(), strata::testing::gpu());  // gradients move with their tensors, as torch's Module._apply
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  EXPECT_TRUE(same_tensor(w.cpu(), w_before));
  EXPECT_TRUE(same_tensor(w.grad().cpu(), grad_before));
  EXPECT_EQ(nn::parameters_device(*m, "test").value_or(Device(kCPU)), strata::testing::gpu());

  optim::SGD sgd(std::vector<Tensor>{w}, optim::SGDOptions(0.5));  // made after the move, as in libtorch
  sgd.step();
  EXPECT_EQ(w.device(), strata::testing::gpu());
  EXPECT_LT(normalized_error(w, w_before - grad_before * 0.5), 1e-7);

  m->to(Device(kCPU));
  EXPECT_TRUE(w.is_cpu() && steps.is_cpu() && w.grad().is_cpu());
  EXPECT_VALUES(steps, {5});

  m->to(strata::testing::gpu(), kHalf);  // a dtype change drops the gradients, as to(dtype)
  EXPECT_EQ(w.device(), strata::testing::gpu());
  EXPECT_EQ(w.dtype(), kHalf);
  EXPECT_EQ(steps.dtype(), kLong);
  EXPECT_FALSE(w.grad().defined());

  auto mixed = std::make_shared<nn::Module>("Mixed");
  mixed->register_parameter("a", zeros({2}));
  mixed->register_parameter("b", zeros({2}, strata::testing::gpu()));
  EXPECT_THROW_MSG(nn::parameters_device(*mixed, "DistributedDataParallel"),
                   "DistributedDataParallel: the module's parameters are on more than one device (a on cpu, b on "
                   "cuda:0)");
}

// ---- checkpoints ----

class CudaCheckpoint : public testing::TempFolderTest {};

nn::Sequential small_mlp() { return nn::Sequential(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3)); }

// Two AdamW steps of `model`, so that the optimizer has state.
void two_steps(nn::Sequential& model, optim::Optimizer& opt, uint64_t seed) {
  const Device device = model->parameters()[0].device();
  for (int step = 0; step < 2; ++step) {
    Generator gen(seed + step);
    const Tensor x = randn({8, 6}, kFloat, &gen).to(device), y = randint(3, {8}, kLong, &gen).to(device);
    opt.zero_grad();
    cross_entropy(model(x), y).backward();
    opt.step();
  }
}

::testing::AssertionResult same_on_host(const nn::StateDict& a, const nn::StateDict& b) {
  nn::StateDict host_a, host_b;
  for (const auto& [name, t] : a) host_a.emplace(name, t.cpu());
  for (const auto& [name, t] : b) host_b.emplace(name, t.cpu());
  return testing::same_state(host_a, host_b);
}

TEST_F(CudaCheckpoint, SavedOnTheGpuLoadsOnTheCpuAndBackBitForBit) {
  STRATA_REQUIRE_CUDA();
  manual_seed(1);
  nn::Sequential gpu = small_mlp();
  gpu->to(strata::testing::gpu());
  optim::AdamW gpu_opt(gpu->parameters(), optim::AdamWOptions(1e-2));
  two_steps(gpu, gpu_opt, 10);
  const std::string from_gpu = file("gpu.safetensors");
  nn::save_checkpoint(from_gpu, *gpu, &gpu_opt, {{"epoch", "2"}});

  manual_seed(2);  // other values, overwritten by the load
  nn::Sequential cpu = small_mlp();
  optim::AdamW cpu_opt(cpu->parameters(), optim::AdamWOptions(1e-2));
  two_steps(cpu, cpu_opt, 20);
  EXPECT_EQ(nn::load_checkpoint(from_gpu, *cpu, &cpu_opt).at("epoch"), "2");
  EXPECT_TRUE(same_on_host(cpu->state_dict(), gpu->state_dict()));
  EXPECT_TRUE(same_on_host(cpu_opt.state_dict(), gpu_opt.state_dict()));
  for (const auto& [key, t] : cpu_opt.state_dict()) EXPECT_TRUE(t.is_cpu()) << key;

  const std::string from_cpu = file("cpu.safetensors");
  nn::save_checkpoint(from_cpu, *cpu, &cpu_opt);
  manual_seed(3);
  nn::Sequential back = small_mlp();
  back->to(strata::testing::gpu());
  optim::AdamW back_opt(back->parameters(), optim::AdamWOptions(1e-2));
  nn::load_checkpoint(from_cpu, *back, &back_opt);
  EXPECT_TRUE(same_on_host(back->state_dict(), gpu->state_dict()));
  EXPECT_TRUE(same_on_host(back_opt.state_dict(), gpu_opt.state_dict()));
  for (const Tensor& p : back->parameters()) EXPECT_EQ(p.device(), strata::testing::gpu());
  for (const auto& [key, t] : back_opt.state_dict()) {
    if (key.starts_with("state.")) {
      EXPECT_EQ(t.device(), key.ends_with(".step") ? Device(kCPU) : strata::testing::gpu()) << key;
    }
  }

  // The resumed run continues as the original one does.
  two_steps(gpu, gpu_opt, 30);
  two_steps(back, back_opt, 30);
  for (size_t i = 0; i < gpu->parameters().size(); ++i)
    EXPECT_LT(normalized_error(back->parameters()[i], gpu->parameters()[i]), 1e-6);

  // nn::save / nn::load of a module alone, and 16-bit tensors straight from the GPU.
  const std::string module_file = file("module.safetensors");
  nn::save(*gpu, module_file);
  nn::load(*cpu, module_file);
  EXPECT_TRUE(same_on_host(cpu->state_dict(), gpu->state_dict()));
  const Tensor x = randn({4, 3});
  nn::save_file({{"h", x.to(strata::testing::gpu(), kHalf)}, {"b", x.to(strata::testing::gpu(), kBFloat16).t()}},
                file("half.safetensors"));
  const nn::StateDict halves = nn::load_file(file("half.safetensors"));
  EXPECT_TRUE(same_tensor(halves.at("h"), x.to(kHalf)));
  EXPECT_TRUE(same_tensor(halves.at("b"), x.to(kBFloat16).t().contiguous()));
}

// ---- memory ----

// The caching allocator serves every step once the first ones have shaped the pool: no cudaMalloc per step.
TEST(CudaMemory, TrainingStepsAfterWarmUpReserveNoNewMemory) {
  STRATA_REQUIRE_CUDA();
  manual_seed(5);
  nn::TransformerBlock block(64, 4);
  block->to(strata::testing::gpu());
  optim::AdamW opt(block->parameters(), optim::AdamWOptions(1e-3));
  const Tensor x = randn({4, 32, 64}).to(strata::testing::gpu()), y = randn({4, 32, 64}).to(strata::testing::gpu());
  auto step = [&] {
    opt.zero_grad();
    mse_loss(block(x), y).backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();
  cuda::synchronize();
  const int64_t reserved = cuda::memory_reserved(0);
  EXPECT_GT(reserved, 0);
  for (int i = 0; i < 5; ++i) step();
  cuda::synchronize();
  EXPECT_EQ(cuda::memory_reserved(0), reserved);
}

// The window kernels called directly on both devices: strided, padded, dilated windows, integer dtypes
// with an infinite pad value (their lowest value), and col2im's sums (in a fixed order on both).
TEST(CudaWindow, Im2colAndCol2imMatchTheCpu) {
  STRATA_REQUIRE_CUDA();
  const Window2d g{{3, 2}, {2, 1}, {2, 1}, {2, 1}, {7, 5}, {4, 6}};  // kernel, stride, dilation, pad, in, out
  const int64_t offsets = g.offsets(), positions = g.positions();
  for (ScalarType dt : {kFloat, kDouble, kLong, kInt, kByte}) {
    const bool floating = is_floating_point(dt);
    const double pad = floating ? -3 : -INFINITY;
    const Tensor x = testing::uniform({2, 3, 7, 5}, 0, 50, kDouble, 3).to(dt);
    Tensor cols = empty({2, 3, offsets, positions}, dt);
    Tensor cols_cuda = empty({2, 3, offsets, positions}, TensorOptions(dt).device(kCUDA));
    cpu_kernels().im2col(x, g, pad, cols);
    kernels_for(cols_cuda.device()).im2col(x.cuda(), g, pad, cols_cuda);
    EXPECT_TRUE(testing::matches(cols_cuda, cols)) << dt;

    const Tensor c = testing::uniform({2, 3, offsets, positions}, 0, 20, kDouble, 4).to(dt);
    Tensor folded = empty({2, 3, 7, 5}, dt), folded_cuda = empty({2, 3, 7, 5}, TensorOptions(dt).device(kCUDA));
    cpu_kernels().col2im(c, g, folded);
    kernels_for(folded_cuda.device()).col2im(c.cuda(), g, folded_cuda);
    EXPECT_TRUE(testing::matches(folded_cuda, folded)) << dt;
  }
}

}  // namespace
}  // namespace strata
