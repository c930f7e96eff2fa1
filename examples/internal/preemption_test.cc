// Preemption over real Gloo ranks: a signal that reaches one rank in the middle of the run stops every
// rank after the same step, one step later; agreeing less often on short steps still stops them together;
// without a signal nobody ever stops; SIGUSR1 counts as SIGTERM does, and a handler installed before (the
// flight recorder's) still runs. (What the agreement costs a
// training step is measured with ddp_mlp: docs/clusters.md, "Preemption".)
#include "examples/internal/preemption.h"

#include <signal.h>

#include <atomic>

#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

// Steps run until every rank stops; rank `signalled` raises `signo` on itself during step `at`. Returns
// the step after which this rank stopped (-1: never, within `steps`).
int64_t RunSteps(dist::ProcessGroup& pg, Preemption& preemption, int signalled, int signo, int64_t at,
                 int64_t steps) {
  for (int64_t step = 0; step < steps; ++step) {
    if (pg.rank() == signalled && step == at) ::raise(signo);
    absl::StatusOr<bool> stop = preemption.StopAfterThisStep(pg);
    EXPECT_TRUE(stop.ok()) << stop.status();
    if (stop.ok() && *stop) return step;
  }
  return -1;
}

TEST(Preemption, ASignalOnOneRankStopsEveryRankAfterTheSameStepOneLater) {
  RunOnRanks(3, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    Preemption preemption(Device::CPU(), /*check_seconds=*/0);  // agree after every step
    // Rank 2 gets SIGTERM during step 17: every rank learns of it from the all_reduce started after step
    // 17, which it reads after step 18. The process is alive: the handler only recorded it.
    EXPECT_EQ(RunSteps(**pg, preemption, /*signalled=*/2, SIGTERM, /*at=*/17, /*steps=*/40), 18);
    EXPECT_EQ(preemption.SignalName(), "SIGTERM");
    if (ctx.rank == 2) {
      EXPECT_GE(preemption.SecondsSinceSignal(), 0);
    } else {
      EXPECT_EQ(preemption.SecondsSinceSignal(), -1) << "rank " << ctx.rank << " was not signalled itself";
    }
  });
}

TEST(Preemption, AgreeingLessOftenOnShortStepsStillStopsEveryRankAfterTheSameStep) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    // Steps far shorter than an hour: the agreements start after steps 0, 1, 3, 7, 15, 31 (the interval
    // doubles each time), and each is read one step later. Rank 1's signal during step 20 goes out with
    // the one after step 31: every rank stops after step 32.
    Preemption preemption(Device::CPU(), /*check_seconds=*/3600);
    EXPECT_EQ(RunSteps(**pg, preemption, /*signalled=*/1, SIGTERM, /*at=*/20, /*steps=*/100), 32);
  });
}

std::atomic<int> g_dumps{0};
void CountDump(int) { ++g_dumps; }

TEST(Preemption, SigusrOneStopsTooAndTheHandlerInstalledBeforeStillRuns) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    ::signal(SIGUSR1, CountDump);  // as the flight recorder takes SIGUSR1 for its dumps
    Preemption preemption(Device::CPU(), /*check_seconds=*/0);  // agree after every step
    EXPECT_EQ(RunSteps(**pg, preemption, /*signalled=*/0, SIGUSR1, /*at=*/0, /*steps=*/10), 1);
    EXPECT_EQ(preemption.SignalName(), "SIGUSR1");
    EXPECT_EQ(g_dumps.load(), ctx.rank == 0 ? 1 : 0);
  });
}

TEST(Preemption, WithoutASignalNoRankEverStops) {
  RunOnRanks(2, [](const RankContext& ctx) {
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size);
    ASSERT_TRUE(pg.ok()) << pg.status();
    Preemption preemption(Device::CPU(), /*check_seconds=*/0);  // agree after every step
    EXPECT_EQ(RunSteps(**pg, preemption, /*signalled=*/-1, 0, 0, /*steps=*/500), -1);
  });
}

}  // namespace
}  // namespace tinyddp::examples
