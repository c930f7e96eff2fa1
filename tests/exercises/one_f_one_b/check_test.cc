// Checks exercise 8 (one_f_one_b.h) on real processes over Gloo: a pipeline of 3 and of 4 stages, more
// microbatches than stages and fewer. On every stage: the order of its forwards and backwards is 1F1B's;
// it never holds more than p - s microbatches' activations (PipelineStage counts them); its sends and
// receives, as an observer on the group sees them (collective_log.h), are the transfers that order needs,
// to the right neighbour with the right microbatch (the tag); and its layer's gradients equal those of one
// process running the whole model on the whole batch.
//   ./bazelw test //tests/exercises/one_f_one_b:check --test_output=all   # your solution
//   ./bazelw test //tests/exercises/one_f_one_b:reference_check           # the reference (what CI runs)
//   ./bazelw test //tests/exercises/one_f_one_b:rejects_wrong_solution    # wrong/ (GPipe) must fail it
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/testing/multi_process.h"
#include "gtest/gtest.h"
#include "tests/exercises/collective_log.h"
#include "tests/exercises/one_f_one_b/one_f_one_b.h"

namespace tinyddp::exercises {
namespace {

using dist::testing::RankContext;
using dist::testing::RunOnRanks;

// 1F1B on stage s of p with m microbatches, written out: "F0 F1 B0 F2 B1 B2".
std::vector<std::string> OneFOneB(int p, int s, int m) {
  const int warmup = std::min(p - 1 - s, m);
  std::vector<std::string> order;
  for (int k = 0; k < warmup; ++k) order.push_back(absl::StrCat("F", k));
  for (int k = warmup; k < m; ++k) {
    order.push_back(absl::StrCat("F", k));
    order.push_back(absl::StrCat("B", k - warmup));
  }
  for (int k = m - warmup; k < m; ++k) order.push_back(absl::StrCat("B", k));
  return order;
}

// The transfers that order needs on stage s: before F(k) its activation arrives, after it k goes on; before
// B(k) its gradient arrives, after it d(input) goes back. "recv 3 from 0": microbatch 3 (the tag).
std::vector<std::string> TransfersOf(const std::vector<std::string>& order, int p, int s) {
  std::vector<std::string> transfers;
  for (const std::string& action : order) {
    const std::string k = action.substr(1);
    const bool forward = action[0] == 'F';
    const int from = forward ? s - 1 : s + 1, to = forward ? s + 1 : s - 1;
    if (from >= 0 && from < p) transfers.push_back(absl::StrCat("recv ", k, " from ", from));
    if (to >= 0 && to < p) transfers.push_back(absl::StrCat("send ", k, " to ", to));
  }
  return transfers;
}

// What the log saw, in the same words; within one call its sends come before its receives (a batch
// runs its ops together, so their order inside it means nothing).
std::vector<std::string> TransfersSeen(const std::vector<dist::CollectiveInfo>& calls) {
  std::vector<std::string> seen;
  for (const dist::CollectiveInfo& call : calls) {
    std::vector<CollectiveLog::Transfer> transfers = CollectiveLog::Transfers(call);
    std::stable_partition(transfers.begin(), transfers.end(), [](const auto& x) { return x.send; });
    for (const auto& x : transfers) {
      seen.push_back(absl::StrCat(x.send ? "send " : "recv ", x.tag, x.send ? " to " : " from ", x.peer));
    }
  }
  return seen;
}

void CheckPipeline(int stages, int microbatches) {
  RunOnRanks(stages, [microbatches](const RankContext& ctx) {
    dist::GlooOptions options;
    options.timeout = std::chrono::seconds(30);  // a schedule that deadlocks fails in 30 s, naming the transfer
    auto pg = dist::ProcessGroupGloo::Create(ctx.store, ctx.rank, ctx.world_size, options);
    ASSERT_TRUE(pg.ok()) << pg.status();
    auto log = std::make_shared<CollectiveLog>();
    (*pg)->AddObserver(log);
    const int p = ctx.world_size, s = ctx.rank, m = microbatches;
    PipelineStage stage(**pg, m);
    const absl::Status status = RunOneFOneB(stage);
    ASSERT_TRUE(status.ok()) << "stage " << s << " of " << p << ", " << m << " microbatches: " << status;
    const std::vector<dist::CollectiveInfo> calls = log->Take();

    // Memory first: it is what 1F1B is for.
    EXPECT_LE(stage.peak_live(), p - s)
        << "stage " << s << " held the activations of " << stage.peak_live() << " microbatches at once; 1F1B "
        << "holds at most p - s = " << p - s << " on stage " << s << " of " << p << " (its order: "
        << absl::StrJoin(stage.actions(), " ") << ")";
    const std::vector<std::string> want = OneFOneB(p, s, m);
    EXPECT_EQ(stage.actions(), want) << "stage " << s << " of " << p << ", " << m << " microbatches ran "
                                     << absl::StrJoin(stage.actions(), " ") << "; 1F1B runs "
                                     << absl::StrJoin(want, " ");
    for (const dist::CollectiveInfo& call : calls) {
      ASSERT_TRUE(dist::IsPointToPoint(call.seq)) << "stage " << s << " issued " << call.op << "(" << call.signature
                                                  << "): a pipeline talks to its neighbours only, point to point";
    }
    const std::vector<std::string> seen = TransfersSeen(calls), needed = TransfersOf(want, p, s);
    EXPECT_EQ(seen, needed) << "stage " << s << "'s transfers were\n  " << absl::StrJoin(seen, ", ")
                            << "\nwhere its 1F1B order needs\n  " << absl::StrJoin(needed, ", ");
    EXPECT_EQ(stage.live(), 0) << "stage " << s << " still holds microbatches: every forward needs its backward";

    // The gradients: the pipeline computed the whole model's, split by stage.
    const std::vector<Tensor> reference = PipelineStage::ReferenceGradients(p, m)[s];
    const Tensor got[] = {stage.layer().weight().grad(), stage.layer().bias().grad()};
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(got[i].defined()) << "stage " << s << "'s layer has no gradient: no backward ran";
      const std::vector<float> a = got[i].ToVector<float>(), b = reference[i].ToVector<float>();
      for (size_t j = 0; j < a.size(); ++j) {
        ASSERT_NEAR(a[j], b[j], 1e-5 * (1 + std::fabs(b[j])))
            << (i == 0 ? "weight" : "bias") << " gradient element " << j << " of stage " << s;
      }
    }
    if (s == 0 && !::testing::Test::HasFailure()) {
      std::printf("stage 0 of %d, %d microbatches: %s (at most %d alive)\n", p, m,
                  absl::StrJoin(stage.actions(), " ").c_str(), stage.peak_live());
    }
  });
}

TEST(OneFOneB, ThreeStagesSevenMicrobatches) { CheckPipeline(3, 7); }
TEST(OneFOneB, FourStagesSixMicrobatches) { CheckPipeline(4, 6); }
TEST(OneFOneB, FourStagesTwoMicrobatches) { CheckPipeline(4, 2); }

}  // namespace
}  // namespace tinyddp::exercises
