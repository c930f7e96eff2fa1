// The CUDA DataLoader delivers exactly the CPU loader's batches, on the GPU, at every prefetch depth;
// batches held past later Next() calls stay intact; and buffer reuse is ordered after the consumer's
// kernels (row sums computed on the GPU from every batch match the CPU's), on the legacy default stream
// and on a created current stream alike. Skips without a GPU.
#include <random>

#include "data/data_loader.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp::data {
namespace {

constexpr int64_t kN = 1003, kD = 37, kClasses = 10;

std::shared_ptr<TensorDataset> RandomDataset() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-2, 2);
  std::vector<float> x(kN * kD);
  std::vector<int64_t> y(kN);
  for (float& v : x) v = uniform(rng);
  for (int64_t& v : y) v = rng() % kClasses;
  auto ds = TensorDataset::Create(Tensor::FromVector(x, {kN, kD}), Tensor::FromVector(y, {kN}), kClasses);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return std::make_shared<TensorDataset>(*ds);
}

std::unique_ptr<DataLoader> Loader(std::shared_ptr<const Dataset> ds, Device device, int depth, int64_t batch = 64) {
  auto sampler = DistributedSampler::Create(kN, {.num_replicas = 2, .rank = 1, .shuffle = true, .seed = 11});
  EXPECT_TRUE(sampler.ok());
  auto loader = DataLoader::Create(ds, *sampler, {.batch_size = batch, .prefetch_depth = depth, .device = device});
  EXPECT_TRUE(loader.ok()) << loader.status();
  return *std::move(loader);
}

struct Plain {
  std::vector<float> x;
  std::vector<int64_t> y;
  bool operator==(const Plain& o) const { return x == o.x && y == o.y; }
};

// ToVector copies on the current stream, which Next() ordered after the batch's copy.
Plain ToPlain(const Batch& b) { return {b.inputs.ToVector<float>(), b.labels.ToVector<int64_t>()}; }

std::vector<Plain> Epochs(DataLoader& loader, Device expected_device) {
  std::vector<Plain> out;
  for (int64_t epoch : {0, 1}) {
    for (loader.Reset(epoch); std::optional<Batch> b = loader.Next();) {
      EXPECT_EQ(b->inputs.device(), expected_device);
      EXPECT_EQ(b->labels.device(), expected_device);
      out.push_back(ToPlain(*b));
    }
    EXPECT_TRUE(loader.status().ok()) << loader.status();
  }
  return out;
}

#define SKIP_WITHOUT_GPU() \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

TEST(DataLoaderCuda, YieldsExactlyTheCpuLoadersBatchesAtEveryDepth) {
  SKIP_WITHOUT_GPU();
  auto ds = RandomDataset();
  const std::vector<Plain> cpu = Epochs(*Loader(ds, Device::CPU(), 2), Device::CPU());
  ASSERT_EQ(cpu.size(), 16u);  // 2 epochs x ceil(502 / 64)
  for (int depth : {1, 2, 3, 4}) {
    EXPECT_EQ(Epochs(*Loader(ds, Device::CUDA(0), depth), Device::CUDA(0)), cpu) << "depth " << depth;
  }
}

TEST(DataLoaderCuda, HeldBatchesStayIntactWhileLaterOnesArrive) {
  SKIP_WITHOUT_GPU();
  auto ds = RandomDataset();
  const std::vector<Plain> cpu = Epochs(*Loader(ds, Device::CPU(), 1, 16), Device::CPU());
  auto loader = Loader(ds, Device::CUDA(0), 1, 16);
  std::vector<Batch> held;
  for (int64_t epoch : {0, 1}) {
    for (loader->Reset(epoch); std::optional<Batch> b = loader->Next();) held.push_back(*b);
  }
  ASSERT_EQ(held.size(), cpu.size());
  for (size_t k = 0; k < held.size(); ++k) EXPECT_EQ(ToPlain(held[k]), cpu[k]) << "batch " << k;
  loader.reset();  // batches outlive the loader
  EXPECT_EQ(ToPlain(held.back()), cpu.back());
}

// Queues a GPU row sum per batch and drops the batch at once, so its buffer is refilled while the sum may
// still be pending, unless reuse waits for the consumer's stream (as it must).
void ExpectGpuRowSumsMatchCpu(const std::shared_ptr<TensorDataset>& ds) {
  auto cpu_loader = Loader(ds, Device::CPU(), 1, 8);
  auto gpu_loader = Loader(ds, Device::CUDA(0), 1, 8);
  std::vector<Tensor> gpu_sums;
  for (gpu_loader->Reset(3); std::optional<Batch> b = gpu_loader->Next();) {
    gpu_sums.push_back(ops::Sum(ops::Scale(b->inputs, 3.0), 1));
  }
  int64_t k = 0;
  for (cpu_loader->Reset(3); std::optional<Batch> b = cpu_loader->Next(); ++k) {
    ASSERT_LT(k, static_cast<int64_t>(gpu_sums.size()));
    const std::vector<float> want = ops::Sum(ops::Scale(b->inputs, 3.0), 1).ToVector<float>();
    const std::vector<float> got = gpu_sums[k].ToVector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i])));
  }
  EXPECT_EQ(k, static_cast<int64_t>(gpu_sums.size()));
  EXPECT_LE(gpu_loader->num_buffers_created(), 1 + 2);
}

TEST(DataLoaderCuda, BufferReuseWaitsForTheConsumersKernelsOnTheDefaultStream) {
  SKIP_WITHOUT_GPU();
  ExpectGpuRowSumsMatchCpu(RandomDataset());
}

TEST(DataLoaderCuda, BufferReuseWaitsForTheConsumersKernelsOnACreatedStream) {
  SKIP_WITHOUT_GPU();
  cuda::Stream previous = cuda::Stream::SetCurrent(cuda::Stream::Create(0));
  ExpectGpuRowSumsMatchCpu(RandomDataset());
  cuda::Stream::Current(0).Synchronize();
  cuda::Stream::SetCurrent(previous);
}

TEST(DataLoaderCuda, StoppingEarlyNeverHangs) {
  SKIP_WITHOUT_GPU();
  auto ds = RandomDataset();
  for (int depth : {1, 3}) {
    auto loader = Loader(ds, Device::CUDA(0), depth, 5);
    loader->Reset(0);
    std::optional<Batch> kept = loader->Next();
    ASSERT_TRUE(kept.has_value());
    loader->Reset(1);
    ASSERT_TRUE(loader->Next().has_value());
    loader->Reset(2);
  }
}

}  // namespace
}  // namespace tinyddp::data
