// tensor/cuda_allocator.h on a GPU: blocks are reused without cudaMalloc on the freeing stream at once and
// on other streams only after the freeing stream's work is done; sizes round to their classes; the
// statistics add up; a training step of real ops reaches a steady state with zero cudaMalloc; out of
// memory stops with a message; pinned buffers are reused only after their copies finish.
#include "tensor/cuda_allocator.h"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/testing/cuda_test_util.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::cuda {
namespace {

using ::tinyddp::testing::StreamBlocker;

constexpr size_t kMiB = size_t{1} << 20;

TEST(CachingAllocator, TheFreeingStreamGetsItsBlockBackAtOnceWithoutCudaMalloc) {
  TINYDDP_REQUIRE_GPU();
  Stream s = Stream::Create(0);
  void* p = CachingMalloc(1000, 0, s.handle());
  StreamBlocker hold(s);  // pending work on s does not matter: later work on s runs after it anyway
  ASSERT_EQ(cudaMemsetAsync(p, 1, 1000, static_cast<cudaStream_t>(s.handle())), cudaSuccess);  // a pending use
  CachingFree(p);
  const int64_t mallocs = GetAllocatorStats(0).num_cuda_malloc;
  void* q = CachingMalloc(700, 0, s.handle());  // the same 1024-byte class
  EXPECT_EQ(q, p);
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, mallocs);
  CachingFree(q);
}

TEST(CachingAllocator, SizesRoundUpTo512BytesUpTo1MiBAndTo2MiBBeyond) {
  TINYDDP_REQUIRE_GPU();
  const std::vector<std::pair<size_t, int64_t>> cases = {{1, 512},     {512, 512},           {513, 1024},
                                                         {kMiB, kMiB}, {kMiB + 1, 2 * kMiB}, {5 * kMiB + 3, 6 * kMiB}};
  for (const auto& [request, rounded] : cases) {
    const int64_t before = GetAllocatorStats(0).allocated_bytes;
    void* p = CachingMalloc(request, 0, nullptr);
    EXPECT_EQ(GetAllocatorStats(0).allocated_bytes - before, rounded) << "request of " << request << " bytes";
    CachingFree(p);
    EXPECT_EQ(GetAllocatorStats(0).allocated_bytes, before);
  }
}

TEST(CachingAllocator, StatisticsCountLiveCachedAndDriverMemory) {
  TINYDDP_REQUIRE_GPU();
  EmptyCache();
  const AllocatorStats start = GetAllocatorStats(0);
  void* a = CachingMalloc(3 * kMiB, 0, nullptr);  // 4 MiB
  void* b = CachingMalloc(10000, 0, nullptr);     // 10240 B
  AllocatorStats mid = GetAllocatorStats(0);
  EXPECT_EQ(mid.allocated_bytes - start.allocated_bytes, int64_t{4 * kMiB + 10240});
  EXPECT_EQ(mid.reserved_bytes - start.reserved_bytes, int64_t{4 * kMiB + 10240});
  EXPECT_EQ(mid.num_cuda_malloc - start.num_cuda_malloc, 2);
  EXPECT_GE(mid.peak_allocated_bytes, mid.allocated_bytes);
  CachingFree(a);
  CachingFree(b);
  AllocatorStats cached = GetAllocatorStats(0);
  EXPECT_EQ(cached.allocated_bytes, start.allocated_bytes);
  EXPECT_EQ(cached.reserved_bytes, mid.reserved_bytes) << "freed blocks stay cached";
  EXPECT_EQ(cached.peak_allocated_bytes, mid.peak_allocated_bytes);
  EmptyCache();
  AllocatorStats emptied = GetAllocatorStats(0);
  EXPECT_EQ(emptied.reserved_bytes, start.reserved_bytes);
  EXPECT_EQ(emptied.num_cuda_free - start.num_cuda_free, 2);
}

TEST(CachingAllocator, AnotherStreamTakesAFreedBlockOnlyAfterTheFreeingStreamsWorkIsDone) {
  TINYDDP_REQUIRE_GPU();
  EmptyCache();  // no cached block of this class anywhere but the one freed below
  Stream s1 = Stream::Create(0), s2 = Stream::Create(0);
  const size_t size = 7 * kMiB + 123;
  void* p = CachingMalloc(size, 0, s1.handle());
  StreamBlocker hold(s1);
  ASSERT_EQ(cudaMemsetAsync(p, 1, size, static_cast<cudaStream_t>(s1.handle())), cudaSuccess);  // pending use
  CachingFree(p);  // s1 still has work writing p: it is blocked
  const int64_t mallocs = GetAllocatorStats(0).num_cuda_malloc;
  void* q = CachingMalloc(size, 0, s2.handle());
  EXPECT_NE(q, p) << "s2 must not get a block s1 may still be using";
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, mallocs + 1);
  hold.Release();
  s1.Synchronize();
  void* r = CachingMalloc(size, 0, s2.handle());
  EXPECT_EQ(r, p) << "once s1 is idle its cached block is everyone's";
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, mallocs + 1);
  CachingFree(q);
  CachingFree(r);
}

TEST(CachingAllocator, ADestroyedStreamsBlocksGoToOtherStreamsOnceItsWorkIsDone) {
  TINYDDP_REQUIRE_GPU();
  EmptyCache();
  const size_t size = 9 * kMiB;
  void* p = nullptr;
  {
    Stream doomed = Stream::Create(0);
    p = CachingMalloc(size, 0, doomed.handle());
    CachingFree(p);
  }  // destroyed with p cached in its pool
  DeviceSynchronize();
  Stream t = Stream::Create(0);
  const int64_t mallocs = GetAllocatorStats(0).num_cuda_malloc;
  void* q = CachingMalloc(size, 0, t.handle());
  EXPECT_EQ(q, p);
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, mallocs);
  CachingFree(q);
}

TEST(CachingAllocator, ARepeatedAllocFreePatternCallsCudaMallocZeroTimesAfterWarmUp) {
  TINYDDP_REQUIRE_GPU();
  const std::vector<int64_t> sizes = {1, 7, 100, 4096, 1 << 18, (1 << 20) + 3, 3 << 20, (64 << 20) + 7};
  int64_t after_warm_up = 0;
  for (int iter = 0; iter < 12; ++iter) {
    std::vector<Tensor> live;
    for (int64_t n : sizes) live.push_back(Tensor::Empty({n}, DType::kFloat32, Device::CUDA(0)));
    // Free in a different order each time: reuse must not depend on it.
    for (size_t i = 0; i < live.size(); ++i) live[(i * 5 + iter) % live.size()] = Tensor();
    if (iter == 1) after_warm_up = GetAllocatorStats(0).num_cuda_malloc;
  }
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, after_warm_up);
}

TEST(CachingAllocator, ATrainingStepOfOpsCallsCudaMallocAndCudaFreeZeroTimesInSteadyState) {
  TINYDDP_REQUIRE_GPU();
  const Device gpu = Device::CUDA(0);
  // The tiny MLP of docs/design.md, 784-512-10, batch 64: forward, cross-entropy, backward, SGD with momentum.
  Tensor x = Tensor::Empty({64, 784}, DType::kFloat32, gpu);
  ops::UniformInit(x, 0.0, 1.0, /*seed=*/1);
  std::vector<int64_t> label_values(64);
  for (int i = 0; i < 64; ++i) label_values[i] = (i * 7) % 10;
  Tensor labels = Tensor::FromVector(label_values, {64}, gpu);
  std::vector<Tensor> params = {
      Tensor::Empty({512, 784}, DType::kFloat32, gpu), Tensor::Empty({512}, DType::kFloat32, gpu),
      Tensor::Empty({10, 512}, DType::kFloat32, gpu), Tensor::Empty({10}, DType::kFloat32, gpu)};
  std::vector<Tensor> bufs;
  for (size_t i = 0; i < params.size(); ++i) {
    ops::UniformInit(params[i], -0.04, 0.04, /*seed=*/10 + i);
    bufs.push_back(Tensor::Zeros(params[i].shape(), DType::kFloat32, gpu));
  }
  const Tensor one = Tensor::Full({}, 1.0, DType::kFloat32, gpu);
  ops::SgdConfig config;
  config.lr = 0.02;
  config.momentum = 0.9;

  auto step = [&](int i) {
    Tensor h = ops::Relu(ops::Linear(x, params[0], params[1]));
    Tensor logits = ops::Linear(h, params[2], params[3]);
    Tensor softmax;
    Tensor loss = ops::CrossEntropy(logits, labels, &softmax);
    Tensor dlogits = ops::CrossEntropyBackward(softmax, labels, one);
    Tensor dh = ops::ReluBackward(ops::MatMul(dlogits, params[2]), h);
    std::vector<Tensor> grads = {ops::MatMul(dh, x, true, false), ops::Sum(dh, 0), ops::MatMul(dlogits, h, true, false),
                                 ops::Sum(dlogits, 0)};
    config.first_step = i == 0;
    ops::SgdStep(absl::MakeSpan(params), grads, absl::MakeSpan(bufs), config);
    return loss;
  };
  const double first_loss = step(0).Item();
  step(1);
  const AllocatorStats warm = GetAllocatorStats(0);
  double loss = 0;
  for (int i = 2; i < 12; ++i) loss = step(i).Item();
  const AllocatorStats steady = GetAllocatorStats(0);
  EXPECT_EQ(steady.num_cuda_malloc, warm.num_cuda_malloc);
  EXPECT_EQ(steady.num_cuda_free, warm.num_cuda_free);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(loss, first_loss) << "12 SGD steps on one fixed batch lower its loss";
}

TEST(CachingAllocatorDeathTest, OutOfMemoryStopsWithTheRequestAndTheStatistics) {
  TINYDDP_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(CachingMalloc(size_t{1} << 50, 0, nullptr), "out of memory on cuda:0: tried to allocate");
}

TEST(CachingAllocatorDeathTest, FreeingAForeignPointerStopsWithAMessage) {
  TINYDDP_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int local = 0;
  EXPECT_DEATH(CachingFree(&local), "not allocated by the caching allocator");
}

TEST(PinnedAllocator, ABufferIsReusedOnlyAfterCopiesQueuedBeforeItsFreeHaveFinished) {
  TINYDDP_REQUIRE_GPU();
  // Everything is allocated before the stream is held (allocations need not wait for it, but better
  // not to depend on that), so the test only frees and re-takes cached buffers while it is held.
  Stream s = Stream::Create(0);
  void* device = CachingMalloc(5000, 0, s.handle());
  void* p = PinnedMalloc(5000);
  void* other = PinnedMalloc(5000);
  const Stream previous = Stream::SetCurrent(s);  // PinnedFree fences on the current stream
  {
    StreamBlocker hold(s);
    MemcpyAsync(device, p, 5000, CopyKind::kHostToDevice, s.handle());  // queued behind the blocker
    PinnedFree(p);                                                      // freed first: oldest in the cache
    Stream::SetCurrent(previous);
    PinnedFree(other);  // fenced on the legacy stream, which nothing holds
    previous.Synchronize();
    void* q = PinnedMalloc(4900);  // same 5120-byte class: p is older but its copy has not run
    EXPECT_EQ(q, other);
    EXPECT_NE(q, p);
    PinnedFree(q);
  }
  s.Synchronize();
  previous.Synchronize();
  void* r = PinnedMalloc(4900);
  EXPECT_EQ(r, p) << "once its copy has run, the oldest free buffer comes first";
  PinnedFree(r);
  CachingFree(device);
}

}  // namespace
}  // namespace tinyddp::cuda
