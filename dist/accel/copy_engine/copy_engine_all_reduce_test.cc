// The copy-engine all_reduce of two GPUs (copy_engine_all_reduce.h) through ProcessGroupNCCL's external
// all_reduce seam, as CopyEngineHook issues it: flat buffers and coalesced lists, SUM and AVG, odd
// sizes, long runs of calls in flight while the compute stream rewrites the tensors, coexistence with NCCL
// collectives on the same group, registered buffers, and the group's safety nets (numbering, the debug
// fingerprint, the watchdog). Needs two GPUs of one machine that reach each other (the GPU machine);
// skips with fewer (copy_engine_one_gpu_test runs the protocol on one GPU).
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "dist/accel/copy_engine/copy_engine_all_reduce.h"
#include "dist/observe/debug_check/debug_check.h"
#include "dist/process_group/nccl/process_group_nccl.h"
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

#define SKIP_WITHOUT_TWO_GPUS() \
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << cuda::DeviceCount()

// An NCCL group on GPU `rank` and the copy engines beside it, set up as CopyEngineHook does.
struct Pair {
  std::unique_ptr<ProcessGroupNCCL> pg;
  std::shared_ptr<CopyEngineAllReduce> ce;
  std::string why_not;

  std::shared_ptr<Work> AllReduce(const Tensor& t, ReduceOp op = ReduceOp::kSum) {
    return pg->AllReduceExternal(ce, {t}, op);
  }
};

Pair Connect(const RankContext& ctx, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  Pair p;
  NcclOptions options;
  options.timeout = timeout;
  options.device = ctx.rank;
  auto pg = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return p;
  p.pg = std::move(*pg);
  auto ce = CopyEngineAllReduce::Create(p.pg->SubStore("copy_engine"), ctx.rank, p.pg->device_index(), timeout,
                                        CopyEngineOptions{}, &p.why_not);
  EXPECT_TRUE(ce.ok()) << ce.status();
  if (ce.ok()) p.ce = std::move(*ce);
  if (p.ce != nullptr) p.pg->AddObserver(p.ce);  // as CopyEngineHook attaches it
  return p;
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
std::vector<Tensor> ReduceLikeBackward(Pair& pair, const std::vector<Tensor>& buckets, int steps,
                                       cuda::AllocatorStats* at_step_5 = nullptr) {
  ProcessGroupNCCL& pg = *pair.pg;
  std::vector<Tensor> sums;
  for (const Tensor& b : buckets) sums.push_back(Tensor::Zeros({b.numel()}, DType::kFloat32, b.device()));
  for (int step = 0; step < steps; ++step) {
    if (step == 5 && at_step_5 != nullptr) *at_step_5 = cuda::GetAllocatorStats(pg.device_index());
    for (size_t b = 0; b < buckets.size(); ++b) {
      Tensor bucket = buckets[b];
      ops::Fill(bucket, (pg.rank() + 1.0) * (step + 1) + static_cast<double>(b));
      EXPECT_TRUE(pair.AllReduce(bucket)->SynchronizeStream().ok());
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

#define CONNECT_OR_RETURN(pair, ...)                                              \
  Pair pair = Connect(__VA_ARGS__);                                               \
  ASSERT_NE(pair.pg, nullptr);                                                    \
  ASSERT_NE(pair.ce, nullptr) << "the copy engines are off: " << pair.why_not

TEST(CopyEngineAllReduce, IsOnForTwoGpusOfThisMachineAndTakesOnlyLargeFloat32SumsAndAverages) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx);
    const int64_t mib = int64_t{1} << 20;
    EXPECT_TRUE(p.ce->Takes(DType::kFloat32, mib, ReduceOp::kSum));
    EXPECT_TRUE(p.ce->Takes(DType::kFloat32, 16 * mib, ReduceOp::kAvg));
    EXPECT_FALSE(p.ce->Takes(DType::kFloat32, mib - 1, ReduceOp::kSum)) << "below 4 MiB NCCL is faster";
    EXPECT_FALSE(p.ce->Takes(DType::kFloat32, 16 * mib, ReduceOp::kMax));
    EXPECT_FALSE(p.ce->Takes(DType::kBFloat16, 16 * mib, ReduceOp::kSum));
    // Asked anyway, an op it cannot do fails that call only, before anything moves.
    Tensor big = Tensor::Full({mib}, 1.0, DType::kFloat32, Device::CUDA(p.pg->device_index()));
    const absl::Status max = p.pg->AllReduceExternal(p.ce, {big}, ReduceOp::kMax)->Wait();
    EXPECT_EQ(max.code(), absl::StatusCode::kInvalidArgument) << max;
    EXPECT_TRUE(p.pg->AllReduce(big)->Wait().ok());
    EXPECT_EQ(big.ToVector<float>()[mib - 1], 2.0f);
  });
}

TEST(CopyEngineAllReduce, SumAndAverageOfFlatBuffersAreExact) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx);
    const Device gpu = Device::CUDA(p.pg->device_index());
    // Sizes: a round 4 MiB, an odd count whose halves are unaligned, and 64 MiB (a medium MLP's layer).
    const std::vector<int64_t> sizes = {int64_t{1} << 20, 3000017, int64_t{16} << 20};
    std::vector<Tensor> buffers(sizes.size());
    Tensor small = Tensor::Zeros({1000}, DType::kFloat32, gpu);  // NCCL, between the copy-engine calls
    for (int round = 0; round < 6; ++round) {
      for (size_t b = 0; b < buffers.size(); ++b) {
        const int64_t n = sizes[b];
        const int salt = round * 3 + static_cast<int>(b);
        buffers[b] = Tensor::FromVector<float>(Pattern(n, ctx.rank, salt), {n}, gpu);
        const bool avg = (round + b) % 2 == 1;
        const int64_t calls = p.ce->calls();
        ASSERT_TRUE(p.AllReduce(buffers[b], avg ? ReduceOp::kAvg : ReduceOp::kSum)->Wait().ok());
        ASSERT_EQ(p.ce->calls(), calls + 1);
        ops::Fill(small, ctx.rank + 1.0);
        ASSERT_TRUE(p.pg->AllReduce(small)->Wait().ok());
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
    CONNECT_OR_RETURN(p, ctx);
    cuda::Stream compute = cuda::Stream::Create(p.pg->device_index());
    cuda::Stream::SetCurrent(compute);
    const Device gpu = Device::CUDA(p.pg->device_index());
    const int64_t n = (int64_t{6} << 20) + 5;
    std::vector<Tensor> buckets;
    for (int b = 0; b < 3; ++b) buckets.push_back(Tensor::Zeros({n}, DType::kFloat32, gpu));
    const int steps = 40;
    cuda::AllocatorStats before{};
    const std::vector<Tensor> sums = ReduceLikeBackward(p, buckets, steps, &before);
    EXPECT_EQ(cuda::GetAllocatorStats(p.pg->device_index()).num_cuda_malloc, before.num_cuda_malloc);
    CheckSums(sums, steps);
  });
}

TEST(CopyEngineAllReduce, CallsQueuedWithoutWaitingSeeEachOthersResultsAsOnOneStream) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx);
    const Device gpu = Device::CUDA(p.pg->device_index());
    // A call drains into its tensors after the group's stream has moved on; the next calls on the same
    // tensors, and an NCCL collective (which the group orders after the last external call's end), must
    // still see its result. Two sizes, so consecutive calls cut their halves into different numbers of
    // chunks (4 and 2) over the same scratch.
    const int64_t nt = (int64_t{10} << 20) + 3, nu = int64_t{5} << 20;
    Tensor t = Tensor::FromVector<float>(Pattern(nt, ctx.rank, 1), {nt}, gpu);
    Tensor u = Tensor::FromVector<float>(Pattern(nu, ctx.rank, 2), {nu}, gpu);
    const int64_t calls = p.ce->calls();
    std::vector<std::shared_ptr<Work>> works;
    works.push_back(p.AllReduce(t));                    // t = a + c
    works.push_back(p.AllReduce(u));                    // u = a' + c'
    works.push_back(p.AllReduce(t));                    // t = 2 (a + c)
    works.push_back(p.pg->AllReduce(t));                // NCCL: t = 4 (a + c)
    works.push_back(p.AllReduce(u, ReduceOp::kAvg));    // u unchanged
    works.push_back(p.AllReduce(t));                    // t = 8 (a + c)
    for (auto& w : works) ASSERT_TRUE(w->Wait().ok());
    EXPECT_EQ(p.ce->calls(), calls + 5);
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
    CONNECT_OR_RETURN(p, ctx);
    cuda::Stream compute = cuda::Stream::Create(p.pg->device_index());
    cuda::Stream::SetCurrent(compute);
    const Device gpu = Device::CUDA(p.pg->device_index());
    // Two buckets carved from one allocation (as the caching allocator does) and one on its own;
    // odd sizes, so halves and chunks end mid-vector.
    const int64_t n0 = (int64_t{6} << 20) + 5, n1 = 3000017;
    Tensor arena = Tensor::Zeros({n0 + 7 + n1}, DType::kFloat32, gpu);
    Tensor b0 = arena.Rows(0, n0), b1 = arena.Rows(n0 + 7, n0 + 7 + n1);
    Tensor loose = Tensor::Zeros({n1}, DType::kFloat32, gpu);
    ASSERT_TRUE(p.ce->Register({b0, b1}).ok());
    const int64_t direct = p.ce->direct_calls();
    const int steps = 12;
    CheckSums(ReduceLikeBackward(p, {b0, b1, loose}, steps), steps);
    EXPECT_EQ(p.ce->direct_calls(), direct + 2 * steps) << "the loose buffer is not registered";
    // The 7 elements between the two registered buckets were never written by the peer.
    const std::vector<float> gap = arena.Rows(n0, n0 + 7).ToVector<float>();
    for (float g : gap) EXPECT_EQ(g, 0.0f);
    // A new registration replaces the old one: b0 is staged again, AVG of the loose one goes direct.
    ASSERT_TRUE(p.ce->Register({loose}).ok());
    ops::Fill(b0, ctx.rank + 1.0);
    ops::Fill(loose, ctx.rank == 0 ? 1.0 : 4.0);
    const int64_t before = p.ce->direct_calls();
    ASSERT_TRUE(p.AllReduce(b0)->Wait().ok());
    ASSERT_TRUE(p.AllReduce(loose, ReduceOp::kAvg)->Wait().ok());
    EXPECT_EQ(p.ce->direct_calls(), before + 1);
    EXPECT_EQ(b0.ToVector<float>()[n0 - 1], 3.0f);
    EXPECT_EQ(loose.ToVector<float>()[n1 - 1], 2.5f);
  });
}

TEST(CopyEngineAllReduce, RegistrationsThatDifferAcrossRanksFailOnBoth) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx);
    const Device gpu = Device::CUDA(p.pg->device_index());
    Tensor a = Tensor::Zeros({int64_t{2} << 20}, DType::kFloat32, gpu);
    Tensor b = Tensor::Zeros({(int64_t{2} << 20) + ctx.rank}, DType::kFloat32, gpu);
    const absl::Status count = p.ce->Register(ctx.rank == 0 ? std::vector<Tensor>{a, b} : std::vector<Tensor>{a});
    EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument) << count;
    EXPECT_NE(count.message().find(ctx.rank == 0 ? "registers 2 buffer(s), rank 1 1" : "registers 1 buffer(s), rank 0 2"),
              std::string::npos)
        << count;
    const absl::Status size = p.ce->Register({a, b});
    EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_NE(size.message().find("buffer 1 has"), std::string::npos) << size;
  });
}

TEST(CopyEngineAllReduce, CoalescedTensorsOfOddSizesAreReducedAsOneVector) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx);
    const Device gpu = Device::CUDA(p.pg->device_index());
    // A weight, its bias, another weight: the split between the ranks' halves falls inside a tensor.
    const std::vector<int64_t> sizes = {1000003, 1031, 2500001, 7};
    std::vector<Tensor> grads;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(Tensor::FromVector<float>(Pattern(sizes[i], ctx.rank, static_cast<int>(i)), {sizes[i]}, gpu));
    }
    std::shared_ptr<Work> work = p.pg->AllReduceExternal(p.ce, grads, ReduceOp::kAvg);
    EXPECT_TRUE(absl::StrContains(work->description(), "AllReduceCoalesced(")) << work->description();
    ASSERT_TRUE(work->Wait().ok());
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

// --- The group's safety nets apply to copy-engine calls ----------------------------------------------

TEST(CopyEngineAllReduce, CallsAreNumberedDescribedAndFingerprintedLikeNcclCalls) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx);
    p.pg->AddObserver(std::make_shared<CollectiveFingerprintCheck>(
        std::make_shared<PrefixStore>("debug", ctx.store), ctx.rank, 2, std::chrono::seconds(60)));
    const Device gpu = Device::CUDA(p.pg->device_index());
    Tensor t = Tensor::Full({int64_t{1} << 20}, ctx.rank + 1.0, DType::kFloat32, gpu);
    const int64_t seq = p.pg->sequence_number();
    std::shared_ptr<Work> work = p.AllReduce(t);
    EXPECT_EQ(p.pg->sequence_number(), seq + 1);
    EXPECT_TRUE(absl::StrContains(work->description(),
                 absl::StrCat("AllReduce(float32 [1048576] cuda:", ctx.rank, ", SUM) #", seq, " on nccl rank ",
                              ctx.rank, "/2 via copy engines")));
    ASSERT_TRUE(work->Wait().ok()) << "the fingerprints of both ranks match (their devices differ)";
    EXPECT_EQ(t.ToVector<float>()[12345], 3.0f);
    // Rank 0 takes the copy engines, rank 1 NCCL's kernel, for the same collective: both are told.
    std::shared_ptr<Work> mixed = ctx.rank == 0 ? p.AllReduce(t) : p.pg->AllReduce(t);
    const absl::Status s = mixed->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(std::string(s.message()), "via copy engines"));
  });
}

TEST(CopyEngineAllReduce, ACallThePeerNeverJoinsIsAbortedByTheWatchdogAndItsStreamsReleased) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    CONNECT_OR_RETURN(p, ctx, std::chrono::seconds(3));
    const Device gpu = Device::CUDA(p.pg->device_index());
    Tensor t = Tensor::Full({int64_t{2} << 20}, 1.0, DType::kFloat32, gpu);
    ASSERT_TRUE(p.AllReduce(t)->Wait().ok());  // both ranks: the scratch is set up
    if (ctx.rank != 0) {
      // Alive, but never joins the next call: rank 0's streams would wait for its signals forever.
      ASSERT_TRUE(ctx.store->Wait({"rank0_done"}, std::chrono::seconds(120)).ok());
      return;
    }
    std::shared_ptr<Work> work = p.AllReduce(t);
    const absl::Status s = work->Wait(std::chrono::seconds(60));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_TRUE(absl::StrContains(std::string(s.message()), "via copy engines did not finish within 3000 ms"));
    EXPECT_TRUE(work->IsCompleted());
    // Released: every stream the call used drains, so the device goes idle (no hang here).
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const absl::Status after = p.AllReduce(t)->Wait(std::chrono::seconds(10));
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    ASSERT_TRUE(ctx.store->Set("rank0_done", "1").ok());
  });
}

}  // namespace
}  // namespace tinyddp::dist
