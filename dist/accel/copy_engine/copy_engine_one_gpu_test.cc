// The copy-engine all_reduce end to end on ONE GPU: two processes share it (CopyEngineOptions::
// allow_one_gpu), each sets the module up from the job's store and CUDA IPC alone (no NCCL, which refuses
// two ranks on one GPU), and drives it as ProcessGroupNCCL does: the group's stream waits for the compute
// stream, Prepare, Enqueue, and the compute stream waits for the call's end. Exact sums on odd sizes,
// many calls in flight without host waits (DDP's pattern), calls queued on the same tensors, coalesced
// tensors, registered buffers. It complements the two-GPU tests (copy_engine_all_reduce_test, through the
// group), which a one-GPU machine skips. Skips without a GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/accel/copy_engine/copy_engine_all_reduce.h"
#include "dist/store/prefix_store.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

// Why two processes cannot share GPU 0 here, or "" when they can.
std::string CannotShareGpu() {
  if (cuda::DeviceCount() < 1) return "needs one CUDA GPU (both ranks share it); none is visible";
  int mode = cudaComputeModeDefault;
  cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, 0);
  if (mode != cudaComputeModeDefault) return "GPU 0 is not in the default compute mode: two processes cannot share it";
  return "";
}

#define SKIP_WITHOUT_GPU()                                  \
  if (const std::string why = CannotShareGpu(); !why.empty()) \
  GTEST_SKIP() << why

// One rank's module on GPU 0, and what ProcessGroupNCCL would do around each call.
class OneGpuRank {
 public:
  explicit OneGpuRank(const RankContext& ctx) : rank_(ctx.rank) {
    cuda::SetDevice(0);
    compute_ = cuda::Stream::Create(0);
    group_ = cuda::Stream::Create(0);
    cuda::Stream::SetCurrent(compute_);
    CopyEngineOptions options;
    options.allow_one_gpu = true;
    options.min_bytes = 0;
    std::string why_not;
    auto ce = CopyEngineAllReduce::Create(std::make_shared<PrefixStore>("one_gpu", ctx.store), ctx.rank, /*device=*/0,
                                          std::chrono::seconds(120), options, &why_not);
    EXPECT_TRUE(ce.ok()) << ce.status();
    if (ce.ok()) ce_ = std::move(*ce);
    EXPECT_NE(ce_, nullptr) << "the copy engines refused two processes on one GPU: " << why_not;
  }
  ~OneGpuRank() {
    compute_.Synchronize();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  bool ok() const { return ce_ != nullptr; }
  int rank() const { return rank_; }
  CopyEngineAllReduce& ce() { return *ce_; }

  // Issues the all_reduce of `tensors` after everything queued on the compute stream; returns its end.
  cudaEvent_t AllReduce(const std::vector<Tensor>& tensors, ReduceOp op) {
    cudaEvent_t start = NewEvent(), done = NewEvent();
    cudaEventRecord(start, Raw(compute_));
    cudaStreamWaitEvent(Raw(group_), start, 0);
    const absl::Status prepared = ce_->Prepare(tensors, op);
    EXPECT_TRUE(prepared.ok()) << prepared;
    const absl::Status enqueued = ce_->Enqueue(tensors, op, Raw(group_), done);
    EXPECT_TRUE(enqueued.ok()) << enqueued;
    return done;
  }
  // The compute stream waits for a call (Work::SynchronizeStream).
  void WaitFor(cudaEvent_t done) { cudaStreamWaitEvent(Raw(compute_), done, 0); }
  // Host waits until the compute stream is idle, then reads `t`.
  std::vector<float> Read(const Tensor& t) {
    compute_.Synchronize();
    return t.ToVector<float>();
  }

 private:
  static cudaStream_t Raw(const cuda::Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
  cudaEvent_t NewEvent() {
    cudaEvent_t e = nullptr;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    events_.push_back(e);
    return e;
  }

  const int rank_;
  cuda::Stream compute_, group_;
  std::unique_ptr<CopyEngineAllReduce> ce_;
  std::vector<cudaEvent_t> events_;
};

// Rank-dependent values whose sums and halves are exact in float32.
std::vector<float> Pattern(int64_t n, int rank, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = rank == 0 ? static_cast<float>((i * 7 + salt) % 1024) : 0.5f * static_cast<float>((i + salt) % 13) - 3.0f;
  }
  return v;
}

// Elements of `got` that differ from factor * (rank 0's + rank 1's Pattern), and the first of them.
std::string Mismatches(const std::vector<float>& got, int salt, float factor) {
  const int64_t n = static_cast<int64_t>(got.size());
  const std::vector<float> a = Pattern(n, 0, salt), c = Pattern(n, 1, salt);
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != factor * (a[i] + c[i]) && wrong++ == 0) first = i;
  }
  if (wrong == 0) return "";
  return std::to_string(wrong) + " of " + std::to_string(n) + " wrong, first at " + std::to_string(first) + ": " +
         std::to_string(got[first]) + " instead of " + std::to_string(factor * (a[first] + c[first]));
}

TEST(CopyEngineOnOneGpu, TwoProcessesSumAndAverageOddSizesExactly) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(2, [](const RankContext& ctx) {
    OneGpuRank r(ctx);
    ASSERT_TRUE(r.ok());
    const Device gpu = Device::CUDA(0);
    // One element (rank 1's half is empty), odd counts whose halves end unaligned, and 9 Mi + 5 elements
    // (four chunks per half).
    const std::vector<int64_t> sizes = {1, 1000003, 3000017, (int64_t{9} << 20) + 5};
    for (int round = 0; round < 2; ++round) {
      for (size_t k = 0; k < sizes.size(); ++k) {
        const int salt = round * 7 + static_cast<int>(k);
        const bool avg = (round + k) % 2 == 1;
        Tensor t = Tensor::FromVector<float>(Pattern(sizes[k], ctx.rank, salt), {sizes[k]}, gpu);
        r.WaitFor(r.AllReduce({t}, avg ? ReduceOp::kAvg : ReduceOp::kSum));
        EXPECT_EQ(Mismatches(r.Read(t), salt, avg ? 0.5f : 1.0f), "")
            << sizes[k] << " elements, " << (avg ? "AVG" : "SUM");
      }
    }
    EXPECT_EQ(r.ce().calls(), 8);
  });
}

TEST(CopyEngineOnOneGpu, ManyCallsInFlightWhileComputeRewritesTheBucketsAsDdpsBackwardDoes) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(2, [](const RankContext& ctx) {
    OneGpuRank r(ctx);
    ASSERT_TRUE(r.ok());
    const Device gpu = Device::CUDA(0);
    // Each step the compute stream writes every bucket ((rank + 1) * (step + 1) + b) and its all_reduce is
    // issued at once; only at the end of the step does the compute stream wait for them and add each bucket
    // into its sum (DDP's FinalizeBackward). Calls of different sizes pipeline behind each other.
    const std::vector<int64_t> sizes = {(int64_t{6} << 20) + 5, 3000017, 4099};
    std::vector<Tensor> buckets, sums;
    for (int64_t n : sizes) {
      buckets.push_back(Tensor::Zeros({n}, DType::kFloat32, gpu));
      sums.push_back(Tensor::Zeros({n}, DType::kFloat32, gpu));
    }
    const int steps = 12;
    cuda::AllocatorStats warm{};
    for (int step = 0; step < steps; ++step) {
      if (step == 2) warm = cuda::GetAllocatorStats(0);
      std::vector<cudaEvent_t> ends;
      for (size_t b = 0; b < buckets.size(); ++b) {
        ops::Fill(buckets[b], (ctx.rank + 1.0) * (step + 1) + static_cast<double>(b));
        ends.push_back(r.AllReduce({buckets[b]}, ReduceOp::kSum));
      }
      for (size_t b = 0; b < buckets.size(); ++b) {
        r.WaitFor(ends[b]);
        ops::AddInto(sums[b], buckets[b]);
      }
    }
    EXPECT_EQ(cuda::GetAllocatorStats(0).num_cuda_malloc, warm.num_cuda_malloc);
    for (size_t b = 0; b < sums.size(); ++b) {
      const float want = 3.0f * steps * (steps + 1) / 2 + 2.0f * static_cast<float>(b) * steps;
      const std::vector<float> got = r.Read(sums[b]);
      int64_t wrong = 0;
      for (float g : got) wrong += g != want;
      EXPECT_EQ(wrong, 0) << "bucket " << b << ": e.g. " << got.front() << " and " << got.back() << " instead of "
                          << want;
    }
  });
}

TEST(CopyEngineOnOneGpu, CallsQueuedWithoutWaitingSeeEachOthersResultsAsOnOneStream) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(2, [](const RankContext& ctx) {
    OneGpuRank r(ctx);
    ASSERT_TRUE(r.ok());
    const Device gpu = Device::CUDA(0);
    // A call drains into its tensors after the group's stream has moved on; the next calls on the same
    // tensors must still see its result. Two sizes, so consecutive calls cut their halves into different
    // numbers of chunks over the same scratch.
    const int64_t nt = (int64_t{10} << 20) + 3, nu = int64_t{5} << 20;
    Tensor t = Tensor::FromVector<float>(Pattern(nt, ctx.rank, 1), {nt}, gpu);
    Tensor u = Tensor::FromVector<float>(Pattern(nu, ctx.rank, 2), {nu}, gpu);
    std::vector<cudaEvent_t> ends;
    ends.push_back(r.AllReduce({t}, ReduceOp::kSum));  // t = a + c
    ends.push_back(r.AllReduce({u}, ReduceOp::kSum));  // u = a' + c'
    ends.push_back(r.AllReduce({t}, ReduceOp::kSum));  // t = 2 (a + c)
    ends.push_back(r.AllReduce({t}, ReduceOp::kSum));  // t = 4 (a + c)
    ends.push_back(r.AllReduce({u}, ReduceOp::kAvg));  // u unchanged
    ends.push_back(r.AllReduce({t}, ReduceOp::kSum));  // t = 8 (a + c)
    for (cudaEvent_t e : ends) r.WaitFor(e);
    EXPECT_EQ(Mismatches(r.Read(t), 1, 8.0f), "");
    EXPECT_EQ(Mismatches(r.Read(u), 2, 1.0f), "");
  });
}

TEST(CopyEngineOnOneGpu, CoalescedTensorsOfOddSizesAreReducedAsOneVector) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(2, [](const RankContext& ctx) {
    OneGpuRank r(ctx);
    ASSERT_TRUE(r.ok());
    const Device gpu = Device::CUDA(0);
    // A weight, its bias, another weight: the split between the ranks' halves falls inside a tensor.
    const std::vector<int64_t> sizes = {1000003, 1031, 2500001, 7};
    std::vector<Tensor> grads;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(Tensor::FromVector<float>(Pattern(sizes[i], ctx.rank, static_cast<int>(i)), {sizes[i]}, gpu));
    }
    r.WaitFor(r.AllReduce(grads, ReduceOp::kAvg));
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(Mismatches(r.Read(grads[i]), static_cast<int>(i), 0.5f), "") << "tensor " << i;
    }
  });
}

TEST(CopyEngineOnOneGpu, RegisteredBuffersAreReducedStraightIntoEachOther) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(2, [](const RankContext& ctx) {
    OneGpuRank r(ctx);
    ASSERT_TRUE(r.ok());
    const Device gpu = Device::CUDA(0);
    // Two buckets carved from one allocation (as the caching allocator does) and one on its own; odd
    // sizes, so halves and chunks end mid-vector.
    const int64_t n0 = (int64_t{6} << 20) + 5, n1 = 3000017;
    Tensor arena = Tensor::Zeros({n0 + 7 + n1}, DType::kFloat32, gpu);
    Tensor b0 = arena.Rows(0, n0), b1 = arena.Rows(n0 + 7, n0 + 7 + n1);
    Tensor loose = Tensor::Zeros({n1}, DType::kFloat32, gpu);
    ASSERT_TRUE(r.ce().Register({b0, b1}).ok());
    const int steps = 6;
    std::vector<Tensor> buckets = {b0, b1, loose}, sums;
    for (const Tensor& b : buckets) sums.push_back(Tensor::Zeros({b.numel()}, DType::kFloat32, gpu));
    for (int step = 0; step < steps; ++step) {
      std::vector<cudaEvent_t> ends;
      for (size_t b = 0; b < buckets.size(); ++b) {
        ops::Fill(buckets[b], (ctx.rank + 1.0) * (step + 1) + static_cast<double>(b));
        ends.push_back(r.AllReduce({buckets[b]}, ReduceOp::kSum));
      }
      for (size_t b = 0; b < buckets.size(); ++b) {
        r.WaitFor(ends[b]);
        ops::AddInto(sums[b], buckets[b]);
      }
    }
    EXPECT_EQ(r.ce().direct_calls(), 2 * steps) << "b0 and b1 go straight into the peer's; the loose one not";
    for (size_t b = 0; b < sums.size(); ++b) {
      const float want = 3.0f * steps * (steps + 1) / 2 + 2.0f * static_cast<float>(b) * steps;
      int64_t wrong = 0;
      for (float g : r.Read(sums[b])) wrong += g != want;
      EXPECT_EQ(wrong, 0) << "bucket " << b;
    }
    // The 7 elements between the two registered buckets were never written by the peer.
    for (float g : r.Read(arena.Rows(n0, n0 + 7))) EXPECT_EQ(g, 0.0f);
    // A new registration replaces the old one, and differing lists fail on both ranks.
    ASSERT_TRUE(r.ce().Register({loose}).ok());
    const int64_t before = r.ce().direct_calls();
    ops::Fill(loose, ctx.rank == 0 ? 1.0 : 4.0);
    r.WaitFor(r.AllReduce({loose}, ReduceOp::kAvg));
    EXPECT_EQ(r.ce().direct_calls(), before + 1);
    EXPECT_EQ(r.Read(loose)[n1 - 1], 2.5f);
    const absl::Status differ = r.ce().Register(ctx.rank == 0 ? std::vector<Tensor>{b0, b1} : std::vector<Tensor>{b0});
    EXPECT_EQ(differ.code(), absl::StatusCode::kInvalidArgument) << differ;
  });
}

}  // namespace
}  // namespace tinyddp::dist
