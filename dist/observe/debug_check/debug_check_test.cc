// The debug check (TINYDDP_DISTRIBUTED_DEBUG=DETAIL) on two real processes: attached to a Gloo group
// directly, and switched on through the variable for a group InitProcessGroup built.
#include "dist/observe/debug_check/debug_check.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dist/init.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/prefix_store.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

TEST(CollectiveFingerprintCheck, MismatchedCollectivesAreReportedOnBothRanksWithBothCalls) {
  RunOnRanks(2, [](const RankContext& ctx) {
    GlooOptions options;
    options.timeout = std::chrono::seconds(120);
    auto created = ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size, options);
    ASSERT_TRUE(created.ok()) << created.status();
    std::unique_ptr<ProcessGroupGloo> pg = std::move(*created);
    pg->AddObserver(std::make_shared<CollectiveFingerprintCheck>(
        std::make_shared<PrefixStore>("debug", ctx.store), ctx.rank, ctx.world_size, std::chrono::seconds(60)));
    // Matching calls pass the check and run.
    Tensor ok = testing::MakeTensor({1.0 + ctx.rank, 2}, DType::kFloat32, Device::CPU());
    ASSERT_TRUE(pg->AllReduce(ok)->Wait().ok());
    EXPECT_EQ(testing::ReadTensor(ok), (std::vector<double>{3, 4}));

    // Collective #1: rank 0 all-reduces 1000 floats while rank 1 broadcasts 10.
    absl::Status s;
    if (ctx.rank == 0) {
      s = pg->AllReduce(Tensor::Zeros({1000}))->Wait();
    } else {
      s = pg->Broadcast(Tensor::Zeros({10}))->Wait();
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    const std::string m(s.message());
    EXPECT_PRED2(Contains, m, "collective #1");
    EXPECT_PRED2(Contains, m, "AllReduce(float32 [1000], SUM)");
    EXPECT_PRED2(Contains, m, "Broadcast(float32 [10], root=0)");
    EXPECT_PRED2(Contains, m, absl::StrCat("rank ", ctx.rank, " called"));
  });
}

TEST(AttachDebugCheck, DebugVariableMakesMismatchedCollectivesFailOnEveryRank) {
  RunOnRanks(2, [](const RankContext& ctx) {
    setenv("TINYDDP_DISTRIBUTED_DEBUG", "DETAIL", 1);
    InitOptions options;
    options.backend = Backend::kGloo;
    options.timeout = std::chrono::seconds(120);
    auto pg = InitProcessGroup(options);
    ASSERT_TRUE(pg.ok()) << pg.status();
    AttachDebugCheck(**pg);
    absl::Status s = ctx.rank == 0 ? (*pg)->AllReduce(Tensor::Zeros({7}, DType::kInt64))->Wait()
                                   : (*pg)->AllReduce(Tensor::Zeros({7}, DType::kInt32))->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(int64 [7], SUM)");
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(int32 [7], SUM)");
    EXPECT_PRED2(Contains, std::string(s.message()), "collective #0");
  });
}

}  // namespace
}  // namespace tinyddp::dist
