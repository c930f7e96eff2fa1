// The copy-engine all_reduce of two GPUs (dist/process_group/nccl/copy_engine/copy_engine_all_reduce.h), through
// ProcessGroupNCCL as DDP uses it: flat buffers and coalesced lists, SUM and AVG, odd sizes, long runs of
// collectives in flight while the compute stream rewrites the tensors, coexistence with NCCL collectives,
// registered buffers, and what stays with NCCL. Needs two GPUs of one machine that reach each other
// (the GPU machine); skips with fewer.
#include <chrono>
#include <memory>
#include <vector>

#include "dist/process_group/nccl/process_group_nccl.h"
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

// DDP's buckets are all-reduced this way (comm_hooks.cc); only such calls take the copy engines.
const AllReduceOptions kOverlapped{/*overlaps_compute=*/true};

#define SKIP_WITHOUT_TWO_GPUS() \
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices"

std::unique_ptr<ProcessGroupNCCL> Connect(const RankContext& ctx) {
  NcclOptions options;
  options.timeout = std::chrono::seconds(120);
  options.device = ctx.rank;
  auto pg = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

// Rank-dependent values whose sums and halves are exact in float32.
std::vector<float> Pattern(int64_t n, int rank, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = rank == 0 ? static_cast<float>((i * 7 + salt) % 1024) : 0.5f * static_cast<float>((i + salt) % 13) - 3.0f;
  }
  return v;
}

// `steps` "steps" without any host wait, as backward does: the compute stream writes each bucket
// ((rank + 1) * (step + 1) + b, a step's gradients), the bucket is all-reduced, the compute stream is
// ordered after it, adds the result into that bucket's sum and, next step, overwrites the bucket again.
// Any hole in the protocol shows up as a wrong sum (CheckSums). `at_step_5`: the allocator's counters then.
std::vector<Tensor> ReduceLikeBackward(ProcessGroupNCCL& pg, const std::vector<Tensor>& buckets, int steps,
                                       cuda::AllocatorStats* at_step_5 = nullptr) {
  std::vector<Tensor> sums;
  for (const Tensor& b : buckets) sums.push_back(Tensor::Zeros({b.numel()}, DType::kFloat32, b.device()));
  for (int step = 0; step < steps; ++step) {
    if (step == 5 && at_step_5 != nullptr) *at_step_5 = cuda::GetAllocatorStats(pg.device());
    for (size_t b = 0; b < buckets.size(); ++b) {
      Tensor bucket = buckets[b];
      ops::Fill(bucket, (pg.rank() + 1.0) * (step + 1) + static_cast<double>(b));
      EXPECT_TRUE(pg.AllReduce(bucket, ReduceOp::kSum, kOverlapped)->SynchronizeStream().ok());
      ops::AddInto(sums[b], bucket);
    }
  }
  return sums;
}

// Sum over the steps of (1 * (s + 1) + b) + (2 * (s + 1) + b) = 3 * steps * (steps + 1) / 2 + 2 * b * steps.
void CheckSums(const std::vector<Tensor>& sums, int steps) {
  for (size_t b = 0; b < sums.size(); ++b) {
    const float want = 3.0f * steps * (steps + 1) / 2 + 2.0f * static_cast<float>(b) * steps;
    const std::vector<float> got = sums[b].ToVector<float>();
    int64_t wrong = 0;
    for (float g : got) wrong += g != want;
    EXPECT_EQ(wrong, 0) << "bucket " << b << ": " << wrong << " of " << got.size() << " elements wrong, e.g. "
                        << got.front() << " and " << got.back() << " instead of " << want;
  }
}

TEST(CopyEngineAllReduce, IsOnForTwoGpusOfThisMachine) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    EXPECT_TRUE(pg->copy_engine_on()) << "copy-engine all_reduce is off: " << pg->copy_engine_off_reason();
  });
}

TEST(CopyEngineAllReduce, SumAndAverageOfFlatBuffersAreExact) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    ASSERT_TRUE(pg->copy_engine_on()) << pg->copy_engine_off_reason();
    const Device gpu = Device::CUDA(pg->device());
    // Sizes: a round 4 MiB, an odd count whose halves are unaligned, and 64 MiB (a medium MLP's layer).
    const std::vector<int64_t> sizes = {int64_t{1} << 20, 3000017, int64_t{16} << 20};
    std::vector<Tensor> buffers(sizes.size());
    Tensor small = Tensor::Zeros({1000}, DType::kFloat32, gpu);  // unregistered: NCCL
    for (int round = 0; round < 6; ++round) {
      for (size_t b = 0; b < buffers.size(); ++b) {
        const int64_t n = sizes[b];
        const int salt = round * 3 + static_cast<int>(b);
        buffers[b] = Tensor::FromVector<float>(Pattern(n, ctx.rank, salt), {n}, gpu);
        const bool avg = (round + b) % 2 == 1;
        const int64_t calls = pg->copy_engine_calls();
        ASSERT_TRUE(pg->AllReduce(buffers[b], avg ? ReduceOp::kAvg : ReduceOp::kSum, kOverlapped)->Wait().ok());
        ASSERT_EQ(pg->copy_engine_calls(), calls + 1) << "took NCCL, not the copy engines";
        ops::Fill(small, ctx.rank + 1.0);
        ASSERT_TRUE(pg->AllReduce(small)->Wait().ok());
        const std::vector<float> got = buffers[b].ToVector<float>();
        const std::vector<float> a = Pattern(n, 0, salt), c = Pattern(n, 1, salt);
        int64_t wrong = 0, first = -1;
        for (int64_t i = 0; i < n; ++i) {
          const float want = avg ? (a[i] + c[i]) * 0.5f : a[i] + c[i];
          if (got[i] != want && wrong++ == 0) first = i;
        }
        ASSERT_EQ(wrong, 0) << wrong << " of " << n << " elements wrong in round " << round << " ("
                            << (avg ? "AVG" : "SUM") << "), first at " << first << ": got " << got[first];
        ASSERT_EQ(small.ToVector<float>()[999], 3.0f);
      }
    }
  });
}

TEST(CopyEngineAllReduce, ManyInFlightWhileComputeRewritesTheBuffersAsBackwardDoes) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    ASSERT_TRUE(pg->copy_engine_on()) << pg->copy_engine_off_reason();
    cuda::Stream compute = cuda::Stream::Create(pg->device());
    cuda::Stream::SetCurrent(compute);
    const Device gpu = Device::CUDA(pg->device());
    const int64_t n = (int64_t{6} << 20) + 5;
    std::vector<Tensor> buckets;
    for (int b = 0; b < 3; ++b) buckets.push_back(Tensor::Zeros({n}, DType::kFloat32, gpu));
    const int steps = 40;
    cuda::AllocatorStats before{};
    const std::vector<Tensor> sums = ReduceLikeBackward(*pg, buckets, steps, &before);
    EXPECT_EQ(cuda::GetAllocatorStats(pg->device()).num_cuda_malloc, before.num_cuda_malloc);
    CheckSums(sums, steps);
  });
}

TEST(CopyEngineAllReduce, CallsQueuedWithoutWaitingSeeEachOthersResultsAsOnOneStream) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    ASSERT_TRUE(pg->copy_engine_on()) << pg->copy_engine_off_reason();
    const Device gpu = Device::CUDA(pg->device());
    // A call drains into its tensors after the group's stream has moved on; the next calls on the same
    // tensors, and an NCCL collective, must still see its result. Two sizes, so consecutive calls cut
    // their halves into different numbers of chunks (4 and 2) over the same scratch.
    const int64_t nt = (int64_t{10} << 20) + 3, nu = int64_t{5} << 20;
    Tensor t = Tensor::FromVector<float>(Pattern(nt, ctx.rank, 1), {nt}, gpu);
    Tensor u = Tensor::FromVector<float>(Pattern(nu, ctx.rank, 2), {nu}, gpu);
    const int64_t calls = pg->copy_engine_calls();
    std::vector<std::shared_ptr<Work>> works;
    works.push_back(pg->AllReduce(t, ReduceOp::kSum, kOverlapped));  // t = a + c
    works.push_back(pg->AllReduce(u, ReduceOp::kSum, kOverlapped));  // u = a' + c'
    works.push_back(pg->AllReduce(t, ReduceOp::kSum, kOverlapped));  // t = 2 (a + c)
    works.push_back(pg->AllReduce(t, ReduceOp::kSum));               // NCCL: t = 4 (a + c)
    works.push_back(pg->AllReduce(u, ReduceOp::kAvg, kOverlapped));  // u unchanged
    works.push_back(pg->AllReduce(t, ReduceOp::kSum, kOverlapped));  // t = 8 (a + c)
    for (auto& w : works) ASSERT_TRUE(w->Wait().ok());
    EXPECT_EQ(pg->copy_engine_calls(), calls + 5);
    const std::vector<float> got_t = t.ToVector<float>(), got_u = u.ToVector<float>();
    const std::vector<float> a = Pattern(nt, 0, 1), c = Pattern(nt, 1, 1);
    const std::vector<float> a2 = Pattern(nu, 0, 2), c2 = Pattern(nu, 1, 2);
    int64_t wrong_t = 0, wrong_u = 0;
    for (int64_t i = 0; i < nt; ++i) wrong_t += got_t[i] != 8.0f * (a[i] + c[i]);
    for (int64_t i = 0; i < nu; ++i) wrong_u += got_u[i] != a2[i] + c2[i];
    EXPECT_EQ(wrong_t, 0) << "of " << nt << "; first: " << got_t[0] << " instead of " << 8.0f * (a[0] + c[0]);
    EXPECT_EQ(wrong_u, 0) << "of " << nu;
  });
}

TEST(CopyEngineAllReduce, RegisteredBuffersAreReducedStraightIntoEachOther) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    ASSERT_TRUE(pg->copy_engine_on()) << pg->copy_engine_off_reason();
    cuda::Stream compute = cuda::Stream::Create(pg->device());
    cuda::Stream::SetCurrent(compute);
    const Device gpu = Device::CUDA(pg->device());
    // Two buckets carved from one allocation (as the caching allocator does) and one on its own;
    // odd sizes, so halves and chunks end mid-vector.
    const int64_t n0 = (int64_t{6} << 20) + 5, n1 = 3000017;
    Tensor arena = Tensor::Zeros({n0 + 7 + n1}, DType::kFloat32, gpu);
    Tensor b0 = arena.Rows(0, n0), b1 = arena.Rows(n0 + 7, n0 + 7 + n1);
    Tensor loose = Tensor::Zeros({n1}, DType::kFloat32, gpu);
    ASSERT_TRUE(pg->RegisterBuffers({b0, b1}).ok());
    const int64_t direct = pg->copy_engine_direct_calls();
    const int steps = 12;
    CheckSums(ReduceLikeBackward(*pg, {b0, b1, loose}, steps), steps);
    EXPECT_EQ(pg->copy_engine_direct_calls(), direct + 2 * steps) << "the loose buffer is not registered";
    // The 7 elements between the two registered buckets were never written by the peer.
    const std::vector<float> gap = arena.Rows(n0, n0 + 7).ToVector<float>();
    for (float g : gap) EXPECT_EQ(g, 0.0f);
    // A new registration replaces the old one: b0 is staged again, AVG of the loose one goes direct.
    ASSERT_TRUE(pg->RegisterBuffers({loose}).ok());
    ops::Fill(b0, ctx.rank + 1.0);
    ops::Fill(loose, ctx.rank == 0 ? 1.0 : 4.0);
    const int64_t before = pg->copy_engine_direct_calls();
    ASSERT_TRUE(pg->AllReduce(b0, ReduceOp::kSum, kOverlapped)->Wait().ok());
    ASSERT_TRUE(pg->AllReduce(loose, ReduceOp::kAvg, kOverlapped)->Wait().ok());
    EXPECT_EQ(pg->copy_engine_direct_calls(), before + 1);
    EXPECT_EQ(b0.ToVector<float>()[n0 - 1], 3.0f);
    EXPECT_EQ(loose.ToVector<float>()[n1 - 1], 2.5f);
  });
}

TEST(CopyEngineAllReduce, RegistrationsThatDifferAcrossRanksFailOnBoth) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    ASSERT_TRUE(pg->copy_engine_on()) << pg->copy_engine_off_reason();
    const Device gpu = Device::CUDA(pg->device());
    Tensor a = Tensor::Zeros({int64_t{2} << 20}, DType::kFloat32, gpu);
    Tensor b = Tensor::Zeros({(int64_t{2} << 20) + ctx.rank}, DType::kFloat32, gpu);
    const absl::Status count = pg->RegisterBuffers(ctx.rank == 0 ? std::vector<Tensor>{a, b} : std::vector<Tensor>{a});
    EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument) << count;
    EXPECT_NE(count.message().find(ctx.rank == 0 ? "registers 2 buffer(s), rank 1 1" : "registers 1 buffer(s), rank 0 2"),
              std::string::npos)
        << count;
    const absl::Status size = pg->RegisterBuffers({a, b});
    EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_NE(size.message().find("buffer 1 has"), std::string::npos) << size;
  });
}

TEST(CopyEngineAllReduce, CoalescedTensorsOfOddSizesAreReducedAsOneVector) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    ASSERT_TRUE(pg->copy_engine_on()) << pg->copy_engine_off_reason();
    const Device gpu = Device::CUDA(pg->device());
    // A weight, its bias, another weight: the split between the ranks' halves falls inside a tensor.
    const std::vector<int64_t> sizes = {1000003, 1031, 2500001, 7};
    std::vector<Tensor> grads;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(Tensor::FromVector<float>(Pattern(sizes[i], ctx.rank, static_cast<int>(i)), {sizes[i]}, gpu));
    }
    const int64_t calls = pg->copy_engine_calls();
    ASSERT_TRUE(pg->AllReduceCoalesced(grads, ReduceOp::kAvg, kOverlapped)->Wait().ok());
    ASSERT_EQ(pg->copy_engine_calls(), calls + 1);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<float> got = grads[i].ToVector<float>();
      const int salt = static_cast<int>(i);
      const std::vector<float> a = Pattern(sizes[i], 0, salt), c = Pattern(sizes[i], 1, salt);
      int64_t wrong = 0;
      for (int64_t j = 0; j < sizes[i]; ++j) wrong += got[j] != (a[j] + c[j]) * 0.5f;
      EXPECT_EQ(wrong, 0) << "tensor " << i << " of " << sizes[i] << " elements";
    }
  });
}

TEST(CopyEngineAllReduce, StandaloneCallsOtherOpsTypesAndSmallCallsStayWithNccl) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    const Device gpu = Device::CUDA(pg->device());
    const int64_t n = int64_t{2} << 20;
    const int64_t calls = pg->copy_engine_calls();
    Tensor big = Tensor::Full({n}, ctx.rank + 1.0, DType::kFloat32, gpu);
    ASSERT_TRUE(pg->AllReduce(big, ReduceOp::kMax, kOverlapped)->Wait().ok());
    Tensor small = Tensor::Full({1000}, ctx.rank + 1.0, DType::kFloat32, gpu);
    ASSERT_TRUE(pg->AllReduce(small, ReduceOp::kSum, kOverlapped)->Wait().ok());
    Tensor bf16 = Tensor::Full({n}, ctx.rank + 1.0, DType::kBFloat16, gpu);
    ASSERT_TRUE(pg->AllReduce(bf16, ReduceOp::kSum, kOverlapped)->Wait().ok());
    Tensor standalone = Tensor::Full({n}, ctx.rank + 1.0, DType::kFloat32, gpu);
    ASSERT_TRUE(pg->AllReduce(standalone, ReduceOp::kSum)->Wait().ok());  // not overlapped: NCCL is faster
    EXPECT_EQ(pg->copy_engine_calls(), calls);
    EXPECT_EQ(standalone.ToVector<float>()[n - 1], 3.0f);
    EXPECT_EQ(big.ToVector<float>()[n - 1], 2.0f);
    EXPECT_EQ(small.ToVector<float>()[999], 3.0f);
    EXPECT_EQ(ops::Cast(bf16, DType::kFloat32).ToVector<float>()[n / 2], 3.0f);
  });
}

}  // namespace
}  // namespace tinyddp::dist
