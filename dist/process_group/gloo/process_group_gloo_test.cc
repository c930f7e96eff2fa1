// ProcessGroupGloo on 2, 3 and 4 real processes over loopback TCP: every collective x op x dtype x size
// against locally computed results, Work semantics, timeouts and argument errors (the debug check:
// dist/observe/debug_check/).
#include "dist/process_group/gloo/process_group_gloo.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/process_group/collective_observer.h"
#include "dist/store/hash_store.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

std::unique_ptr<ProcessGroupGloo> Connect(const RankContext& ctx,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  GlooOptions options;
  options.timeout = timeout;
  auto pg = ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

// --- The sweep, on 2, 3 and 4 ranks ----------------------------------------------------------------

class GlooSweep : public ::testing::TestWithParam<int> {};

TEST_P(GlooSweep, AllReduceMatchesLocalReductionForEveryOpDTypeAndSize) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    testing::CheckAllReduce(*pg, {});
  });
}

TEST_P(GlooSweep, AllReduceCoalescedMatchesPerTensorReduction) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    testing::CheckAllReduceCoalesced(*pg, {});
  });
}

TEST_P(GlooSweep, BroadcastCopiesTheRootTensorToEveryRank) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    testing::CheckBroadcast(*pg, {});
  });
}

TEST_P(GlooSweep, AllGatherConcatenatesInputsInRankOrder) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    testing::CheckAllGather(*pg, {});
  });
}

TEST_P(GlooSweep, ReduceScatterLeavesBlockRankOfTheReduction) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    testing::CheckReduceScatter(*pg, {});
  });
}

TEST_P(GlooSweep, ReduceLeavesTheResultOnTheRootAndOtherRanksUnchanged) {
  RunOnRanks(GetParam(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    testing::CheckReduce(*pg, {});
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooSweep, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "ranks"); });

// --- Work, barrier, errors -------------------------------------------------------------------------

TEST(ProcessGroupGloo, BarrierReturnsOnlyAfterEveryRankHasEnteredIt) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    // The last rank arrives late; without a real barrier rank 0 would look before its key is set.
    if (ctx.rank == ctx.world_size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ASSERT_TRUE(ctx.store->Set(absl::StrCat("entered/", ctx.rank), "1").ok());
    ASSERT_TRUE(pg->Barrier()->Wait().ok());
    for (int r = 0; r < ctx.world_size; ++r) {
      EXPECT_TRUE(ctx.store->Wait({absl::StrCat("entered/", r)}, std::chrono::milliseconds(1)).ok())
          << "rank " << r << " had not entered the barrier when rank " << ctx.rank << " left it";
    }
  });
}

TEST(ProcessGroupGloo, WorkCompletesOnlyWhenEveryRankHasJoinedAndInIssueOrder) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    std::vector<double> values = {1.0 + ctx.rank, 10.0 * (ctx.rank + 1), -3.0};
    Tensor a = testing::MakeTensor(values, DType::kFloat32, Device::CPU());
    Tensor b = testing::MakeTensor(values, DType::kInt64, Device::CPU());
    Tensor c = testing::MakeTensor(values, DType::kFloat64, Device::CPU());
    if (ctx.rank == 1) {
      // Rank 1 joins only once rank 0 has seen its collective stay pending.
      ASSERT_TRUE(ctx.store->Wait({"rank0_saw_pending"}, std::chrono::seconds(60)).ok());
    }
    auto wa = pg->AllReduce(a);
    auto wb = pg->AllReduce(b, ReduceOp::kMax);
    auto wc = pg->AllReduce(c, ReduceOp::kMin);
    if (ctx.rank == 0) {
      EXPECT_FALSE(wa->IsCompleted());
      absl::Status early = wa->Wait(std::chrono::milliseconds(200));
      EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
      EXPECT_PRED2(Contains, std::string(early.message()), "AllReduce(float32 [3], SUM) #0");
      ASSERT_TRUE(ctx.store->Set("rank0_saw_pending", "1").ok());
    }
    ASSERT_TRUE(wc->Wait().ok());
    // One worker thread runs collectives in issue order: when the last is done, so are the others.
    EXPECT_TRUE(wa->IsCompleted());
    EXPECT_TRUE(wb->IsCompleted());
    EXPECT_TRUE(wa->Wait().ok());
    EXPECT_EQ(testing::ReadTensor(a), (std::vector<double>{3, 30, -6}));
    EXPECT_EQ(testing::ReadTensor(b), (std::vector<double>{2, 20, -3}));
    EXPECT_EQ(testing::ReadTensor(c), (std::vector<double>{1, 10, -3}));
  });
}

TEST(ProcessGroupGloo, CollectiveAnotherRankNeverJoinsFailsWithDeadlineExceededAndBreaksTheGroup) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::milliseconds(1500));
    ASSERT_NE(pg, nullptr);
    if (ctx.rank == 1) {
      // Stays connected (so rank 0 sees silence, not a closed socket) but never calls the collective.
      ASSERT_TRUE(ctx.store->Wait({"rank0_done"}, std::chrono::seconds(120)).ok());
      return;
    }
    Tensor t = testing::MakeTensor({1, 2, 3, 4, 5}, DType::kFloat32, Device::CPU());
    absl::Status s = pg->AllReduce(t)->Wait(std::chrono::seconds(60));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "timed out after 1500 ms");
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(float32 [5], SUM) #0");
    absl::Status after = pg->Barrier()->Wait(std::chrono::seconds(60));
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    EXPECT_PRED2(Contains, std::string(after.message()), "failed earlier");
    ASSERT_TRUE(ctx.store->Set("rank0_done", "1").ok());
  });
}

// Records what a group tells its observers (collective_observer.h), in order.
class LogObserver : public CollectiveObserver {
 public:
  void Issued(const CollectiveInfo& info) override {
    Add(absl::StrCat("issued #", info.seq, " ", info.op, "(", info.signature, ") bucket ", info.bucket, " ",
                     info.dtype, " ", info.numel, " ", info.bytes));
  }
  void Started(int64_t seq) override { Add(absl::StrCat("started #", seq)); }
  void Ended(int64_t seq, const absl::Status& status) override {
    Add(absl::StrCat("ended #", seq, " ", absl::StatusCodeToString(status.code())));
  }
  std::string Failed(absl::string_view reason, const absl::Status& status) override {
    Add(absl::StrCat("failed ", reason));
    return "the observer was told";
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  void Add(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(std::move(line));
  }
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST(ProcessGroupGloo, ObserversSeeEveryCallIssuedStartedAndEndedWithItsBucket) {
  RunOnRanks(1, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    auto log = std::make_shared<LogObserver>();
    pg->AddObserver(log);
    {
      CollectiveBucketScope outer(4);
      ASSERT_TRUE(pg->AllReduce(Tensor::Zeros({3}))->Wait().ok());
      {
        CollectiveBucketScope inner(5);
        ASSERT_TRUE(pg->Broadcast(Tensor::Zeros({2}))->Wait().ok());
      }
      ASSERT_TRUE(pg->Barrier()->Wait().ok());
    }
    // Bad arguments end at once and are not a failure of the group.
    EXPECT_EQ(pg->Broadcast(Tensor::Zeros({2}), /*root=*/3)->Wait().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(pg->sequence_number(), 4);
    EXPECT_EQ(log->Lines(), (std::vector<std::string>{
                                "issued #0 AllReduce(float32 [3], SUM) bucket 4 float32 3 12",
                                "started #0",
                                "ended #0 OK",
                                "issued #1 Broadcast(float32 [2], root=0) bucket 5 float32 2 8",
                                "started #1",
                                "ended #1 OK",
                                "issued #2 Barrier() bucket 4  0 0",
                                "started #2",
                                "ended #2 OK",
                                "issued #3 Broadcast(float32 [2], root=3) bucket -1 float32 2 8",
                                "ended #3 INVALID_ARGUMENT",
                            }));
  });
}

TEST(ProcessGroupGloo, TheFirstFailureIsToldToTheObserversAndTheirTextEndsTheError) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::milliseconds(1500));
    ASSERT_NE(pg, nullptr);
    auto log = std::make_shared<LogObserver>();
    pg->AddObserver(log);
    if (ctx.rank == 1) {
      ASSERT_TRUE(ctx.store->Wait({"rank0_done"}, std::chrono::seconds(120)).ok());
      return;
    }
    const absl::Status s = pg->AllReduce(Tensor::Zeros({5}))->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "\nthe observer was told");
    const absl::Status after = pg->Barrier()->Wait();
    EXPECT_PRED2(Contains, std::string(after.message()), "the observer was told");
    const std::vector<std::string> lines = log->Lines();
    EXPECT_EQ(std::count(lines.begin(), lines.end(), "failed timeout"), 1);
    ASSERT_TRUE(ctx.store->Set("rank0_done", "1").ok());
  });
}

TEST(ProcessGroupGloo, APeerThatExitsFailsTheCollectiveAsUnavailable) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::seconds(60));
    ASSERT_NE(pg, nullptr);
    if (ctx.rank == 1) return;  // the process exits: its connections close
    Tensor t = testing::MakeTensor({1, 2, 3}, DType::kFloat32, Device::CPU());
    const absl::Status s = pg->AllReduce(t)->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(float32 [3], SUM) #0");
  });
}

TEST(ProcessGroupGloo, RendezvousWaitsForALateRankUpToTheFullTimeout) {
  RunOnRanks(2, [](const RankContext& ctx) {
    // Gloo's connection setup runs under a fifth of the timeout (it waits five times its own); the
    // rendezvous through the store must still wait the whole timeout for a rank that starts late.
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    auto pg = Connect(ctx, std::chrono::milliseconds(6000));
    ASSERT_NE(pg, nullptr);
    Tensor x = testing::MakeTensor({1.0 + ctx.rank, -4}, DType::kFloat64, Device::CPU());
    ASSERT_TRUE(pg->AllReduce(x, ReduceOp::kMax)->Wait().ok());
    EXPECT_EQ(testing::ReadTensor(x), (std::vector<double>{2, -4}));
  });
}

TEST(ProcessGroupGloo, RejectsUnsupportedArgumentsWithInvalidArgumentNamingTheCall) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(30));
  auto pg = ProcessGroupGloo::Create(store, 0, 1);
  ASSERT_TRUE(pg.ok()) << pg.status();
  Tensor bytes = Tensor::Zeros({4}, DType::kUInt8);
  absl::Status s = (*pg)->AllReduce(bytes)->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_PRED2(Contains, std::string(s.message()), "does not reduce uint8");

  Tensor in = Tensor::Zeros({3});
  Tensor out = Tensor::Zeros({4});
  s = (*pg)->AllGather(out, in)->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_PRED2(Contains, std::string(s.message()), "AllGather(float32 [4] <- float32 [3])");

  s = (*pg)->Broadcast(in, /*root=*/1)->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_PRED2(Contains, std::string(s.message()), "root 1 is not a rank");

  Tensor f64 = Tensor::Zeros({3}, DType::kFloat64);
  s = (*pg)->AllReduceCoalesced({in, f64})->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_PRED2(Contains, std::string(s.message()), "one dtype and device");

  // The group still works after argument errors: nothing was sent.
  Tensor x = testing::MakeTensor({2, 4, 6}, DType::kFloat32, Device::CPU());
  EXPECT_TRUE((*pg)->AllReduce(x, ReduceOp::kAvg)->Wait().ok());
  EXPECT_EQ(testing::ReadTensor(x), (std::vector<double>{2, 4, 6}));
}

TEST(ProcessGroupGloo, ASecondGroupOverTheSameStoreConnectsAfreshAndWorks) {
  RunOnRanks(3, [](const RankContext& ctx) {
    // Short timeouts: a group that read the first one's rendezvous keys would fail (or wait) here.
    for (int round = 0; round < 3; ++round) {
      auto pg = Connect(ctx, std::chrono::seconds(20));
      ASSERT_NE(pg, nullptr) << "group " << round;
      Tensor x = testing::MakeTensor({1.0 * (ctx.rank + 1), 10.0 * round}, DType::kFloat32, Device::CPU());
      ASSERT_TRUE(pg->AllReduce(x)->Wait().ok()) << "group " << round;
      EXPECT_EQ(testing::ReadTensor(x), (std::vector<double>{6, 30.0 * round})) << "group " << round;
    }
  });
}

TEST(ProcessGroupGloo, RendezvousFailsWithDeadlineExceededWhenARankNeverArrives) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(30));
  GlooOptions options;
  options.timeout = std::chrono::milliseconds(500);
  auto pg = ProcessGroupGloo::Create(store, 0, 2, options);  // rank 1 never comes
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kDeadlineExceeded) << pg.status();
  EXPECT_PRED2(Contains, std::string(pg.status().message()), "rendezvous of rank 0/2");
}

}  // namespace
}  // namespace tinyddp::dist
