// The flight recorder attached to a real group (two Gloo ranks in two processes): the group's first failure
// dumps it, the error says where, and the verdict over both ranks' files names the rank that never came.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/observe/flight_recorder/record.h"
#include "dist/observe/flight_recorder/recorder.h"
#include "dist/observe/flight_recorder/verdict.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

std::unique_ptr<ProcessGroupGloo> Connect(const RankContext& ctx, std::chrono::milliseconds timeout) {
  GlooOptions options;
  options.timeout = timeout;
  auto pg = ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

TEST(FlightRecorderOnGloo, FirstFailureDumpsAndTheVerdictNamesTheRankThatNeverCame) {
  RunOnRanks(2, [](const RankContext& ctx) {
    // Both ranks' rings in one directory, as the launcher arranges it.
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_flight_recorder");
    ::setenv(kFlightRecorderDirEnv, dir.c_str(), 1);
    auto pg = Connect(ctx, std::chrono::milliseconds(1500));
    ASSERT_NE(pg, nullptr);
    AttachFlightRecorder(*pg);
    Tensor warm = testing::MakeTensor({1.0 + ctx.rank, 2, 3}, DType::kFloat32, Device::CPU());
    ASSERT_TRUE(pg->AllReduce(warm)->Wait().ok());  // collective #0, done by both
    if (ctx.rank == 1) {
      // Stays connected (rank 0 sees silence, not a closed socket) but never calls collective #1.
      ASSERT_TRUE(ctx.store->Wait({"rank0_done"}, std::chrono::seconds(120)).ok());
      return;
    }
    std::shared_ptr<Work> stuck, queued;
    {
      CollectiveBucketScope bucket(0);  // as DDP's reducer marks a bucket's all_reduce
      stuck = pg->AllReduce(Tensor::Zeros({1031}), ReduceOp::kAvg);
    }
    queued = pg->Broadcast(Tensor::Zeros({7}));
    const absl::Status s = stuck->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    const std::string dump = absl::StrCat(dir, "/", pg->group_name(), ".rank0.json");
    EXPECT_PRED2(Contains, std::string(s.message()), "Flight recorder: rank 0's last collectives are in " + dump);
    // The collective behind it fails at once, quoting the first failure and where to look.
    const absl::Status after = queued->Wait();
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    EXPECT_PRED2(Contains, std::string(after.message()), "Flight recorder:");

    absl::StatusOr<std::vector<FlightVerdict>> verdicts = AnalyzeFlightRecorderDir(dir);
    ASSERT_TRUE(verdicts.ok()) << verdicts.status();
    const FlightVerdict* mine = nullptr;
    for (const FlightVerdict& v : *verdicts) {
      if (v.group == pg->group_name()) mine = &v;
    }
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->verdict,
              "collective #1 AllReduce(float32 [1031], AVG) (bucket 0, 4.0 KiB): ranks {1} never started it; rank 1's "
              "last completed collective is #0; ranks {0} failed in it (DEADLINE_EXCEEDED)");
    ASSERT_TRUE(ctx.store->Set("rank0_done", "1").ok());
  });
}

}  // namespace
}  // namespace tinyddp::dist
