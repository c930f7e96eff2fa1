// Send, Recv and BatchSendRecv on ProcessGroupNCCL, two ranks on two GPUs (re-executing this binary):
// the batch that exchanges messages larger than NCCL's buffers both ways, ordering with the caller's
// stream, FIFO order between the pair, the watchdog's abort of a Recv nobody answers, argument errors.
// Skips with fewer than two GPUs (NCCL's point-to-point needs two ranks, one per GPU).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

int Gpus() { return cuda::DeviceCount(); }

#define SKIP_WITHOUT_TWO_GPUS() \
  if (Gpus() < 2) GTEST_SKIP() << "needs two CUDA GPUs (one rank each), found " << Gpus()

std::unique_ptr<ProcessGroupNCCL> Connect(const RankContext& ctx,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  NcclOptions options;
  options.timeout = timeout;
  options.device = ctx.rank;
  auto pg = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

// Elements of `t` (on the host) that differ from `want`.
int64_t Wrong(const Tensor& t, float want) {
  int64_t bad = 0;
  for (float v : t.ToVector<float>()) bad += v != want;
  return bad;
}

TEST(NcclPointToPoint, BatchExchangesLargeMessagesBothWaysAfterTheKernelsQueuedBeforeIt) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    const Device gpu = Device::CUDA(pg->device_index());
    cuda::Stream compute = cuda::Stream::Create(pg->device_index());
    cuda::Stream::SetCurrent(compute);
    const int64_t n = (16 << 20) + 3;  // 64 MiB: far past what NCCL buffers, so a serial pair would wait
    Tensor out = Tensor::Empty({n}, DType::kFloat32, gpu), in = Tensor::Empty({n}, DType::kFloat32, gpu);
    ops::Fill(out, 1.0);
    for (int i = 0; i < 10; ++i) ops::ScaleInPlace(out, 1.0);
    ops::ScaleInPlace(out, 10.0 + ctx.rank);  // what the peer must receive: queued just before the call
    const int peer = 1 - ctx.rank;
    auto work = pg->BatchSendRecv({{P2POp::Kind::kSend, out, peer}, {P2POp::Kind::kRecv, in, peer}});
    ASSERT_TRUE(work->SynchronizeStream().ok());
    ops::ScaleInPlace(in, 2.0);  // must run after the receive wrote `in`
    EXPECT_EQ(Wrong(in, 2.0f * (10.0f + peer)), 0);
    ASSERT_TRUE(work->Wait().ok()) << work->description();
    EXPECT_EQ(pg->sequence_number(), 0);
    EXPECT_EQ(pg->p2p_sequence_number(), 1);
  });
}

TEST(NcclPointToPoint, MessagesBetweenThePairArriveInTheOrderTheyWereSent) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    const Device gpu = Device::CUDA(pg->device_index());
    std::vector<Tensor> messages;
    std::vector<std::shared_ptr<Work>> works;
    for (int m = 0; m < 4; ++m) {
      messages.push_back(Tensor::Full({1001 + m}, ctx.rank == 0 ? 100.0 + m : 0.0, DType::kFloat32, gpu));
      works.push_back(ctx.rank == 0 ? pg->Send(messages.back(), 1) : pg->Recv(messages.back(), 0));
    }
    for (int m = 0; m < 4; ++m) {
      ASSERT_TRUE(works[m]->Wait().ok()) << works[m]->description();
      EXPECT_EQ(Wrong(messages[m], 100.0f + m), 0) << "message " << m;
    }
  });
}

TEST(NcclPointToPoint, RecvNobodyAnswersIsAbortedByTheWatchdogNamingThePeer) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::seconds(3));
    ASSERT_NE(pg, nullptr);
    // One exchange first: NCCL connects a pair on its first transfer, on the host, where no timeout reaches
    // (process_group_nccl.h); after that a receive nobody answers waits on the GPU, where the watchdog does.
    Tensor in = Tensor::Zeros({1000}, DType::kFloat32, Device::CUDA(pg->device_index()));
    Tensor out = Tensor::Full({1000}, 1.0, DType::kFloat32, Device::CUDA(pg->device_index()));
    ASSERT_TRUE(pg->BatchSendRecv({{P2POp::Kind::kSend, out, 1 - ctx.rank}, {P2POp::Kind::kRecv, in, 1 - ctx.rank}})
                    ->Wait()
                    .ok());
    if (ctx.rank == 1) {
      ASSERT_TRUE(ctx.store->Wait({"rank0_done"}, std::chrono::seconds(120)).ok());
      return;
    }
    auto work = pg->Recv(in, 1, 5);
    const absl::Status s = work->Wait(std::chrono::seconds(60));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Recv(float32 [1000] cuda:0) from 1 tag 5 #p1")) << s;
    ASSERT_TRUE(ctx.store->Set("rank0_done", "1").ok());
  });
}

TEST(NcclPointToPoint, HostTensorsAndBadPeersFailAtOnceNamingTheCall) {
  SKIP_WITHOUT_TWO_GPUS();
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    const absl::Status host = pg->Send(Tensor::Zeros({4}), 1 - ctx.rank)->Wait();
    EXPECT_TRUE(absl::IsInvalidArgument(host)) << host;
    EXPECT_TRUE(absl::StrContains(host.message(), "Send(float32 [4]) to")) << host;
    Tensor t = Tensor::Zeros({4}, DType::kFloat32, Device::CUDA(pg->device_index()));
    const absl::Status self = pg->Recv(t, ctx.rank)->Wait();
    EXPECT_TRUE(absl::IsInvalidArgument(self)) << self;
    EXPECT_TRUE(absl::StrContains(self.message(), "is this rank")) << self;
    ASSERT_TRUE(pg->Barrier()->Wait().ok());  // nothing reached NCCL: the group still works
  });
}

}  // namespace
}  // namespace tinyddp::dist
