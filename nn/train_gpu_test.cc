// Training on a GPU: after warm-up a step (forward, backward, SGD with momentum) calls cudaMalloc no
// more (the caching allocator serves everything), and CUDA training follows CPU training step for step.
#include <cmath>
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

void TrainStep(Module& model, SGD& sgd, const Batch& batch) {
  sgd.ZeroGrad();
  autograd::Backward(CrossEntropyLoss()(model(Variable(batch.x)), batch.labels));
  sgd.Step();
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
