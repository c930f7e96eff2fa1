// Training on a GPU: after warm-up a step (forward, backward, SGD with momentum) calls cudaMalloc no
// more (the caching allocator serves everything), and CUDA training follows CPU training step for step,
// in float32 and in bf16 mixed precision (nn/precision.h).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "gtest/gtest.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

struct Batch {
  Tensor x, labels;
};

Batch MakeBatch(Device device) {
  Tensor x = Tensor::Empty({64, 96});
  ops::UniformInit(x, -1.0, 1.0, 7);
  std::vector<int64_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = (i * 7 + 3) % 10;
  return {x.To(device), Tensor::FromVector(labels, {64}).To(device)};
}

double TrainStep(Module& model, SGD& sgd, const Batch& batch) {
  sgd.ZeroGrad();
  const Variable loss = CrossEntropyLoss()(model(Variable(batch.x)), batch.labels);
  autograd::Backward(loss);
  sgd.Step();
  return loss.data().Item();
}

std::shared_ptr<Sequential> Bf16Mlp(Device device) {
  MlpOptions options;
  options.device = device;
  options.precision = Precision::kBFloat16;
  return MLP({96, 128, 64, 10}, options);
}

TEST(GpuTraining, SteadyStateStepsDoNoCudaMalloc) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  MlpOptions options;
  options.device = Device::CUDA(0);
  auto model = MLP({96, 128, 64, 10}, options);
  SGD sgd(model->Parameters(), {.lr = 0.05, .momentum = 0.9});
  const Batch batch = MakeBatch(Device::CUDA(0));
  for (int step = 0; step < 3; ++step) TrainStep(*model, sgd, batch);  // warm-up fills the cache
  cuda::DeviceSynchronize();
  const cuda::AllocatorStats before = cuda::GetAllocatorStats(0);
  for (int step = 0; step < 10; ++step) TrainStep(*model, sgd, batch);
  cuda::DeviceSynchronize();
  const cuda::AllocatorStats after = cuda::GetAllocatorStats(0);
  EXPECT_EQ(after.num_cuda_malloc, before.num_cuda_malloc);
  EXPECT_EQ(after.num_cuda_free, before.num_cuda_free);
  EXPECT_GT(before.num_cuda_malloc, 0);
}

TEST(GpuTraining, CudaTrainingMatchesCpuTrainingOverSeveralSteps) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  MlpOptions gpu_options;
  gpu_options.device = Device::CUDA(0);
  auto cpu_model = MLP({96, 128, 64, 10});
  auto gpu_model = MLP({96, 128, 64, 10}, gpu_options);  // same seed: identical init (Philox)
  const auto cpu_params = cpu_model->Parameters(), gpu_params = gpu_model->Parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    ASSERT_EQ(cpu_params[i].data().ToVector<float>(), gpu_params[i].data().ToVector<float>()) << i;
  }
  SGD cpu_sgd(cpu_params, {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  SGD gpu_sgd(gpu_params, {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  const Batch cpu_batch = MakeBatch(Device::CPU()), gpu_batch = MakeBatch(Device::CUDA(0));
  for (int step = 0; step < 5; ++step) {
    TrainStep(*cpu_model, cpu_sgd, cpu_batch);
    TrainStep(*gpu_model, gpu_sgd, gpu_batch);
  }
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const std::vector<float> c = cpu_params[i].data().ToVector<float>(), g = gpu_params[i].data().ToVector<float>();
    double max_diff = 0;
    for (size_t k = 0; k < c.size(); ++k) max_diff = std::max(max_diff, std::abs(double{c[k]} - g[k]));
    EXPECT_LT(max_diff, 1e-4) << cpu_params[i].name();
  }
}

TEST(GpuTraining, Bf16SteadyStateStepsDoNoCudaMalloc) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto model = Bf16Mlp(Device::CUDA(0));
  SGD sgd(model->Parameters(), {.lr = 0.05, .momentum = 0.9});
  sgd.SetComputeCopies(model->ComputeCopies());
  const Batch batch = MakeBatch(Device::CUDA(0));
  for (int step = 0; step < 3; ++step) TrainStep(*model, sgd, batch);
  cuda::DeviceSynchronize();
  const cuda::AllocatorStats before = cuda::GetAllocatorStats(0);
  for (int step = 0; step < 10; ++step) TrainStep(*model, sgd, batch);
  cuda::DeviceSynchronize();
  const cuda::AllocatorStats after = cuda::GetAllocatorStats(0);
  EXPECT_EQ(after.num_cuda_malloc, before.num_cuda_malloc);
  EXPECT_EQ(after.num_cuda_free, before.num_cuda_free);
}

TEST(GpuTraining, Bf16CudaTrainingMatchesBf16CpuTrainingWithinBfloat16Tolerance) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  // Same seed, same float32 masters and bfloat16 copies on both devices. The GEMMs sum in another order
  // on the GPU, so an activation may round to the neighbouring bfloat16 (2^-8 relative) now and then:
  // the runs agree to bfloat16 tolerance, not bit for bit.
  auto cpu_model = Bf16Mlp(Device::CPU()), gpu_model = Bf16Mlp(Device::CUDA(0));
  SGD cpu_sgd(cpu_model->Parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  SGD gpu_sgd(gpu_model->Parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  cpu_sgd.SetComputeCopies(cpu_model->ComputeCopies());
  gpu_sgd.SetComputeCopies(gpu_model->ComputeCopies());
  const Batch cpu_batch = MakeBatch(Device::CPU()), gpu_batch = MakeBatch(Device::CUDA(0));
  for (int step = 0; step < 5; ++step) {
    const double cpu_loss = TrainStep(*cpu_model, cpu_sgd, cpu_batch);
    const double gpu_loss = TrainStep(*gpu_model, gpu_sgd, gpu_batch);
    EXPECT_NEAR(cpu_loss, gpu_loss, 1e-2 * cpu_loss) << "step " << step;
  }
  const auto cpu_copies = cpu_model->ComputeCopies(), gpu_copies = gpu_model->ComputeCopies();
  ASSERT_EQ(cpu_copies.size(), gpu_copies.size());
  for (size_t i = 0; i < cpu_copies.size(); ++i) {
    const Variable& p = gpu_copies[i].first;
    const std::vector<float> c = cpu_copies[i].first.data().ToVector<float>(), g = p.data().ToVector<float>();
    const std::vector<BFloat16> g_copy = gpu_copies[i].second.ToVector<BFloat16>();
    double max_diff = 0;
    for (size_t k = 0; k < c.size(); ++k) {
      max_diff = std::max(max_diff, std::abs(double{c[k]} - g[k]));
      ASSERT_EQ(g_copy[k].bits, BFloat16(g[k]).bits) << p.name() << " element " << k << ": copy = bf16(master)";
    }
    EXPECT_EQ(p.dtype(), DType::kFloat32);
    EXPECT_LT(max_diff, 1e-3) << p.name();
  }
}

TEST(GpuTraining, ModuleToMovesParametersAndGradientsButKeepsTheVariables) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto model = MLP({96, 32, 10});
  const std::vector<Variable> before = model->Parameters();
  const Batch cpu_batch = MakeBatch(Device::CPU());
  autograd::Backward(CrossEntropyLoss()((*model)(Variable(cpu_batch.x)), cpu_batch.labels));
  const std::vector<float> weight = before[0].data().ToVector<float>(), grad = before[0].grad().ToVector<float>();
  model->To(Device::CUDA(0));
  const std::vector<Variable> after = model->Parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].Is(before[i])) << "optimizers and hooks holding the Variable stay valid";
    EXPECT_EQ(after[i].device(), Device::CUDA(0));
    EXPECT_EQ(after[i].grad().device(), Device::CUDA(0));
  }
  EXPECT_EQ(after[0].data().ToVector<float>(), weight);
  EXPECT_EQ(after[0].grad().ToVector<float>(), grad);
}

}  // namespace
}  // namespace tinyddp::nn
