// tensor/cuda_graph.h on a GPU. The claims: capturing runs nothing and a replay repeats the recorded
// kernels, reading the inputs' current contents; replays call no cudaMalloc; the temporaries of the
// captured code stay private to the graph while eager code allocates and holds memory between replays; a
// destroyed graph gives its memory back to the ordinary pools; the legacy stream and a second capture are
// refused; a host wait or a host read inside the captured code stops with a message naming the mistake.
#include "tensor/cuda_graph.h"

#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"
#include "tensor/testing/cuda_test_util.h"

namespace tinyddp::cuda {
namespace {

const Device kGpu = Device::CUDA(0);

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    SetDevice(0);
    stream_ = Stream::Create(0);
    previous_ = Stream::SetCurrent(stream_);
  }
  void TearDown() override {
    if (DeviceCount() > 0) Stream::SetCurrent(previous_);
  }
  Stream stream_, previous_;
};

Tensor Random(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kFloat32, kGpu);
  ops::NormalInit(t, 0.0, 1.0, seed);
  return t;
}

TEST_F(CudaGraphTest, CapturingRunsNothingAndEachReplayRepeatsTheRecordedKernelsOnTheInputsNow) {
  Tensor acc = Tensor::Zeros({1000, 3}, DType::kFloat32, kGpu);
  Tensor x = Random({1000, 3}, 1);
  CudaGraph graph;
  ASSERT_TRUE(graph.Capture(stream_, [&] { ops::AddInto(acc, ops::Scale(x, 2.0)); }).ok());
  EXPECT_TRUE(graph.captured());
  EXPECT_GE(graph.num_nodes(), 2);
  for (float v : acc.ToVector<float>()) ASSERT_EQ(v, 0.0f) << "recording ran a kernel";
  for (int k = 0; k < 5; ++k) ASSERT_TRUE(graph.Replay().ok());
  const std::vector<float> xs = x.ToVector<float>();
  std::vector<float> got = acc.ToVector<float>();
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_FLOAT_EQ(got[i], 10 * xs[i]) << i;
  // The input buffer is read when the replay runs: new contents, same address, new result.
  ops::Fill(x, 0.5);
  ops::Fill(acc, 1.0);
  ASSERT_TRUE(graph.Replay().ok());
  for (float v : acc.ToVector<float>()) ASSERT_EQ(v, 2.0f);
}

TEST_F(CudaGraphTest, ReplaysCallNoCudaMallocAndEagerMemoryHeldBetweenThemIsNeverTheGraphs) {
  const Tensor x = Random({517, 33}, 2);
  Tensor out = Tensor::Zeros({517, 33}, DType::kFloat32, kGpu);
  CudaGraph graph;
  // Two temporaries die inside the captured code; their blocks stay the graph's.
  ASSERT_TRUE(graph.Capture(stream_, [&] {
    const Tensor doubled = ops::Scale(x, 2.0);
    ops::CopyInto(out, ops::Add(doubled, x));
  }).ok());
  EXPECT_GE(graph.pool_bytes(), static_cast<int64_t>(2 * x.nbytes()));
  ASSERT_TRUE(graph.Replay().ok());
  // Eager tensors of the temporaries' sizes, kept alive across replays, filled with a value no replay writes.
  std::vector<Tensor> eager;
  for (int k = 0; k < 4; ++k) eager.push_back(Tensor::Full({517, 33}, 9.5, DType::kFloat32, kGpu));
  Stream::Current(0).Synchronize();
  const AllocatorStats before = GetAllocatorStats(0);
  for (int k = 0; k < 100; ++k) ASSERT_TRUE(graph.Replay().ok());
  Stream::Current(0).Synchronize();
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, before.num_cuda_malloc);
  for (const Tensor& e : eager) {
    for (float v : e.ToVector<float>()) ASSERT_EQ(v, 9.5f) << "a replay wrote into eager memory";
  }
  const std::vector<float> xs = x.ToVector<float>(), got = out.ToVector<float>();
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_FLOAT_EQ(got[i], 3 * xs[i]);
}

TEST_F(CudaGraphTest, ADestroyedGraphGivesItsMemoryBackToTheOrdinaryPools) {
  const Tensor x = Random({1 << 18}, 3);  // 1 MiB: a class of its own
  int64_t mallocs = 0;
  {
    CudaGraph graph;
    ASSERT_TRUE(graph.Capture(stream_, [&] { (void)ops::Scale(x, 3.0); }).ok());
    ASSERT_TRUE(graph.Replay().ok());
    mallocs = GetAllocatorStats(0).num_cuda_malloc;
  }
  // The same request, eagerly on the same stream: served by the block the graph held, no cudaMalloc.
  const Tensor again = ops::Scale(x, 3.0);
  EXPECT_EQ(GetAllocatorStats(0).num_cuda_malloc, mallocs);
}

TEST_F(CudaGraphTest, TheLegacyStreamAndASecondCaptureAreRefusedWithAReason) {
  CudaGraph legacy;
  const absl::Status s = legacy.Capture(Stream(), [] { ADD_FAILURE() << "nothing runs"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.message()).find("legacy default stream"), std::string::npos) << s;
  Tensor t = Tensor::Zeros({64}, DType::kFloat32, kGpu);
  auto fill = [&] { ops::Fill(t, 1.0); };
  CudaGraph graph;
  ASSERT_TRUE(graph.Capture(stream_, fill).ok());
  EXPECT_EQ(graph.Capture(stream_, fill).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(stream_.IsCapturing());
  CudaGraph nested;
  bool inner_refused = false;
  CudaGraph outer;
  ASSERT_TRUE(outer.Capture(stream_, [&] {
    EXPECT_TRUE(stream_.IsCapturing());
    fill();
    inner_refused = nested.Capture(stream_, fill).code() == absl::StatusCode::kFailedPrecondition;
  }).ok());
  EXPECT_TRUE(inner_refused);
}

TEST_F(CudaGraphTest, AHostWaitOrAHostReadInsideTheCapturedCodeStopsNamingTheMistake) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor x = Random({8}, 4);
  EXPECT_DEATH(
      {
        CudaGraph graph;
        (void)graph.Capture(stream_, [&] { (void)ops::Sum(x).Item(); });
      },
      "read on the host .* while its stream records a CUDA graph");
  EXPECT_DEATH(
      {
        CudaGraph graph;
        (void)graph.Capture(stream_, [&] { stream_.Synchronize(); });
      },
      "Stream::Synchronize on a stream that is recording a CUDA graph");
}

}  // namespace
}  // namespace tinyddp::cuda
