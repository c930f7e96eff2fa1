// Send, Recv and BatchSendRecv on ProcessGroupGloo, over 2 to 4 real processes: ring exchanges, FIFO order
// between one pair, the batch that a rendezvous transport needs, timeouts that name the peer and the tag,
// tags, argument errors, and the numbering apart from the collectives.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/process_group/collective_observer.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using testing::MakeTensor;
using testing::RankContext;
using testing::ReadTensor;
using testing::RunOnRanks;

std::unique_ptr<ProcessGroupGloo> Connect(const RankContext& ctx,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  GlooOptions options;
  options.timeout = timeout;
  auto pg = ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

// n values that say who sent them and which message they were: 1000 * rank + 10 * message + i % 7.
std::vector<double> Message(int rank, int message, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 1000.0 * rank + 10.0 * message + static_cast<double>(i % 7);
  return v;
}

Tensor Zeros(int64_t n, DType dtype = DType::kFloat32) { return MakeTensor(std::vector<double>(n, 0.0), dtype, Device::CPU()); }

TEST(GlooPointToPoint, RingExchangeOfOddSizesReachesTheNextRankOn3And4Ranks) {
  for (int world : {3, 4}) {
    RunOnRanks(world, [](const RankContext& ctx) {
      auto pg = Connect(ctx);
      ASSERT_NE(pg, nullptr);
      const int next = (ctx.rank + 1) % ctx.world_size, prev = (ctx.rank + ctx.world_size - 1) % ctx.world_size;
      for (int64_t n : {1, 1001, 300007}) {
        Tensor out = MakeTensor(Message(ctx.rank, 0, n), DType::kFloat64, Device::CPU());
        Tensor in = Zeros(n, DType::kFloat64);
        // Even ranks send first, odd ranks receive first: with one op per call, a ring of plain Sends
        // would wait for receivers that are all sending (the header's deadlock).
        std::shared_ptr<Work> first, second;
        if (ctx.rank % 2 == 0) {
          first = pg->Send(out, next);
          second = pg->Recv(in, prev);
        } else {
          first = pg->Recv(in, prev);
          second = pg->Send(out, next);
        }
        ASSERT_TRUE(first->Wait().ok()) << first->description();
        ASSERT_TRUE(second->Wait().ok()) << second->description();
        EXPECT_EQ(ReadTensor(in), Message(prev, 0, n)) << "n=" << n;
      }
    });
  }
}

TEST(GlooPointToPoint, MessagesBetweenOnePairArriveInTheOrderTheyWereSent) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    constexpr int kMessages = 5;
    if (ctx.rank == 0) {
      std::vector<Tensor> sent;
      std::vector<std::shared_ptr<Work>> works;
      for (int m = 0; m < kMessages; ++m) {
        sent.push_back(MakeTensor(Message(0, m, 37 + m), DType::kFloat32, Device::CPU()));
        works.push_back(pg->Send(sent.back(), 2));
      }
      for (auto& w : works) EXPECT_TRUE(w->Wait().ok()) << w->description();
    } else if (ctx.rank == 2) {
      for (int m = 0; m < kMessages; ++m) {
        Tensor in = Zeros(37 + m);
        ASSERT_TRUE(pg->Recv(in, 0)->Wait().ok());
        EXPECT_EQ(ReadTensor(in), Message(0, m, 37 + m)) << "message " << m;
      }
    }
    // Rank 1 took no part, and the collectives that follow still match on every rank.
    Tensor t = MakeTensor({1.0 + ctx.rank}, DType::kFloat32, Device::CPU());
    ASSERT_TRUE(pg->AllReduce(t)->Wait().ok());
    EXPECT_EQ(ReadTensor(t), std::vector<double>{6.0});
    EXPECT_EQ(pg->sequence_number(), 1);
    EXPECT_EQ(pg->p2p_sequence_number(), ctx.rank == 1 ? 0 : kMessages);
  });
}

TEST(GlooPointToPoint, BatchSendRecvToBothNeighboursCompletesWhereSerialCallsWouldWait) {
  for (int world : {3, 4}) {
    RunOnRanks(world, [](const RankContext& ctx) {
      auto pg = Connect(ctx);
      ASSERT_NE(pg, nullptr);
      const int w = ctx.world_size;
      const int next = (ctx.rank + 1) % w, prev = (ctx.rank + w - 1) % w;
      const int64_t n = 4099;
      Tensor to_next = MakeTensor(Message(ctx.rank, 1, n), DType::kFloat32, Device::CPU());
      Tensor to_prev = MakeTensor(Message(ctx.rank, 2, n), DType::kFloat32, Device::CPU());
      Tensor from_prev = Zeros(n), from_next = Zeros(n);
      // Every rank sends before it receives, in both directions: issued one call at a time on Gloo's
      // rendezvous transport, each rank's first Send would wait for a receiver that is itself sending.
      auto work = pg->BatchSendRecv({{P2POp::Kind::kSend, to_next, next},
                                     {P2POp::Kind::kSend, to_prev, prev},
                                     {P2POp::Kind::kRecv, from_prev, prev},
                                     {P2POp::Kind::kRecv, from_next, next}});
      ASSERT_TRUE(work->Wait().ok()) << work->description();
      EXPECT_EQ(ReadTensor(from_prev), Message(prev, 1, n));
      EXPECT_EQ(ReadTensor(from_next), Message(next, 2, n));
    });
  }
}

TEST(GlooPointToPoint, TwoRanksThatEachSendBeforeTheyReceiveWaitUntilTheTimeout) {
  // The header's warning, shown: why BatchSendRecv exists. Gloo's send waits for the receiver's Recv, which
  // each rank queued behind its own Send.
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::milliseconds(1500));
    ASSERT_NE(pg, nullptr);
    Tensor out = MakeTensor(Message(ctx.rank, 0, 3), DType::kFloat32, Device::CPU()), in = Zeros(3);
    auto send = pg->Send(out, 1 - ctx.rank);
    auto recv = pg->Recv(in, 1 - ctx.rank);
    const absl::Status s = send->Wait();
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "make the pair one BatchSendRecv")) << s;
    EXPECT_FALSE(recv->Wait().ok());
  });
}

TEST(GlooPointToPoint, RecvThatNoRankAnswersTimesOutNamingThePeerAndTheTag) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::milliseconds(1500));
    ASSERT_NE(pg, nullptr);
    if (ctx.rank == 0) {
      Tensor in = Zeros(11);
      const absl::Status s = pg->Recv(in, 1, 7)->Wait();
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "Recv(float32 [11]) from 1 tag 7 #p0 on gloo rank 0/2")) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 did not send the message with tag 7")) << s;
    }
    // Rank 1 sends nothing and leaves once rank 0 has seen its timeout.
    ASSERT_TRUE(ctx.store->Set(absl::StrCat("done/", ctx.rank), "1").ok());
    ASSERT_TRUE(ctx.store->Wait({"done/0", "done/1"}).ok());
  });
}

TEST(GlooPointToPoint, TagsAreSeparateQueuesAndAMismatchedTagIsNeverReceived) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::milliseconds(4000));
    ASSERT_NE(pg, nullptr);
    Tensor a = MakeTensor(Message(0, 1, 9), DType::kFloat32, Device::CPU());
    Tensor b = MakeTensor(Message(0, 2, 9), DType::kFloat32, Device::CPU());
    if (ctx.rank == 0) {
      // Tag 5 then tag 3, received the other way round: each tag is its own FIFO queue.
      ASSERT_TRUE(pg->BatchSendRecv({{P2POp::Kind::kSend, a, 1, 5}, {P2POp::Kind::kSend, b, 1, 3}})->Wait().ok());
      // A message with tag 1 that rank 1 waits for with tag 2: neither side ever completes.
      const absl::Status s = pg->Send(a, 1, 1)->Wait();
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 did not receive the message with tag 1")) << s;
    } else {
      Tensor got3 = Zeros(9), got5 = Zeros(9);
      ASSERT_TRUE(pg->BatchSendRecv({{P2POp::Kind::kRecv, got3, 0, 3}, {P2POp::Kind::kRecv, got5, 0, 5}})->Wait().ok());
      EXPECT_EQ(ReadTensor(got3), Message(0, 2, 9));
      EXPECT_EQ(ReadTensor(got5), Message(0, 1, 9));
      Tensor never = Zeros(9);
      const absl::Status s = pg->Recv(never, 0, 2)->Wait();
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "from 0 tag 2")) << s;
      EXPECT_EQ(ReadTensor(never), std::vector<double>(9, 0.0));
    }
  });
}

TEST(GlooPointToPoint, BadArgumentsFailAtOnceNamingTheCallAndWhatWasWrong) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    Tensor t = Zeros(5);
    auto expect = [&](std::shared_ptr<Work> work, const std::string& call, const std::string& why) {
      ASSERT_TRUE(work->IsCompleted()) << call;
      const absl::Status s = work->Wait();
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), call)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), why)) << s;
    };
    expect(pg->Send(t, 3), "Send(float32 [5]) to 3 tag 0 #p0", "peer 3 is not a rank of this group (size 3)");
    expect(pg->Recv(t, -1), "Recv(float32 [5]) from -1 tag 0 #p1", "peer -1 is not a rank");
    expect(pg->Send(t, ctx.rank), "#p2", "is this rank");
    expect(pg->Recv(Tensor(), (ctx.rank + 1) % 3), "Recv(undefined)", "the tensor is undefined");
    expect(pg->Send(Tensor::Zeros({2}, DType::kUInt8), (ctx.rank + 1) % 3), "Send(uint8 [2])",
           "does not reduce uint8");
    expect(pg->Send(t, (ctx.rank + 1) % 3, -4), "tag -4", "tag -4 is outside");
    expect(pg->BatchSendRecv({}), "BatchSendRecv() #p6", "no ops to issue");
    expect(pg->BatchSendRecv({{P2POp::Kind::kSend, t, (ctx.rank + 1) % 3}, {P2POp::Kind::kRecv, t, 9}}),
           "recv float32 [5] from 9 tag 0", "op 1: peer 9 is not a rank");
    EXPECT_EQ(pg->sequence_number(), 0) << "point-to-point calls took collective numbers";
    // Nothing reached the transport: the group still works.
    Tensor x = MakeTensor({2.0}, DType::kFloat32, Device::CPU());
    ASSERT_TRUE(pg->AllReduce(x)->Wait().ok());
    EXPECT_EQ(ReadTensor(x), std::vector<double>{6.0});
  });
}

// Records what the observers are told, for the test below.
class Told : public CollectiveObserver {
 public:
  void Issued(const CollectiveInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(absl::StrCat("issued ", info.seq, " ", info.op, " ", info.signature, " ", info.numel));
  }
  void Ended(int64_t seq, const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(absl::StrCat("ended ", seq, " ", status.ok() ? "ok" : "failed"));
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST(GlooPointToPoint, ObserversSeePointToPointCallsNumberedApartFromTheCollectives) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    auto told = std::make_shared<Told>();
    pg->AddObserver(told);
    Tensor t = MakeTensor(Message(ctx.rank, 0, 6), DType::kFloat32, Device::CPU());
    ASSERT_TRUE(pg->AllReduce(t)->Wait().ok());
    auto p2p = ctx.rank == 0 ? pg->Send(t, 1, 4) : pg->Recv(t, 0, 4);
    EXPECT_EQ(p2p->description(), ctx.rank == 0 ? "Send(float32 [6]) to 1 tag 4 #p0 on gloo rank 0/2"
                                                 : "Recv(float32 [6]) from 0 tag 4 #p0 on gloo rank 1/2");
    ASSERT_TRUE(p2p->Wait().ok());
    ASSERT_TRUE(pg->AllReduce(t)->Wait().ok());
    const std::string p = absl::StrCat(kPointToPointSeqBase);
    const std::vector<std::string> want = {
        "issued 0 AllReduce float32 [6], SUM 6", "ended 0 ok",
        ctx.rank == 0 ? "issued " + p + " Send float32 [6] to 1 tag 4 6" : "issued " + p + " Recv float32 [6] from 0 tag 4 6",
        "ended " + p + " ok", "issued 1 AllReduce float32 [6], SUM 6", "ended 1 ok"};
    EXPECT_EQ(told->lines(), want);
  });
}

}  // namespace
}  // namespace tinyddp::dist
