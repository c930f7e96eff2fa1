// The pipeline wing's pure pieces on one process: the schedules (order, deadlock freedom, bubbles, memory), the
// printer, and the stage split with its refusals.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "dist/parallel/pipeline/pipeline_flags.h"
#include "dist/parallel/pipeline/schedule.h"
#include "dist/parallel/pipeline/schedule_printer.h"
#include "dist/parallel/pipeline/stage_plan.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"

namespace tinyddp::dist::pipeline {
namespace {

PipelineSchedule Make(ScheduleKind kind, int p, int m, int v = 1) {
  absl::StatusOr<PipelineSchedule> s = MakeSchedule({.kind = kind, .ranks = p, .microbatches = m, .virtual_stages = v});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::string ComputeOrder(const PipelineSchedule& s, int rank) {
  std::vector<std::string> names;
  for (const Action& a : s.ranks[rank]) {
    if (a.is_compute()) names.push_back(a.ToString());
  }
  return absl::StrJoin(names, " ");
}

TEST(Schedule, OneFOneBWarmsUpWithPMinusSMinusOneForwardsThenAlternates) {
  const PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 3, 4);
  EXPECT_EQ(ComputeOrder(s, 0), "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3");
  EXPECT_EQ(ComputeOrder(s, 1), "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3");
  EXPECT_EQ(ComputeOrder(s, 2), "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3");
}

TEST(Schedule, GPipeForwardsEveryMicrobatchBeforeAnyBackward) {
  const PipelineSchedule s = Make(ScheduleKind::kGPipe, 2, 3);
  EXPECT_EQ(ComputeOrder(s, 1), "1F0 1F1 1F2 1B0 1B1 1B2");
}

TEST(Schedule, EachGapIsOneCallOfThePreviousSendsAndTheNextReceive) {
  const PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 2, 2);
  std::vector<std::string> names;
  for (const Action& a : s.ranks[0]) names.push_back(a.ToString());
  // After 0F1 the activation goes out and the gradient for 0B0 comes in, together (one BatchSendRecv).
  EXPECT_EQ(absl::StrJoin(names, " "), "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1");
}

TEST(Schedule, EverySchedulePassesItsChecksOverManyShapes) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m : {1, 2, 3, 4, 7, 8, 16}) {
        const PipelineSchedule s = Make(kind, p, m);
        EXPECT_TRUE(ValidateSchedule(s).ok()) << ScheduleName(kind) << " p=" << p << " m=" << m << ": "
                                              << ValidateSchedule(s);
      }
    }
  }
  for (int p = 2; p <= 8; p *= 2) {
    for (int v : {2, 3, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        const PipelineSchedule s = Make(ScheduleKind::kInterleaved, p, m, v);
        EXPECT_TRUE(ValidateSchedule(s).ok()) << "interleaved p=" << p << " v=" << v << " m=" << m << ": "
                                              << ValidateSchedule(s);
      }
    }
  }
}

TEST(Schedule, ZeroBubbleSplitsEachBackwardAndSpendsTheHeldBackWeightGradientsLate) {
  const PipelineSchedule s = Make(ScheduleKind::kZeroBubble, 3, 4);
  EXPECT_EQ(ComputeOrder(s, 0), "0F0 0F1 0F2 0B0 0W0 0F3 0B1 0W1 0B2 0W2 0B3 0W3");
  EXPECT_EQ(ComputeOrder(s, 2), "2F0 2B0 2F1 2B1 2F2 2B2 2W0 2F3 2B3 2W1 2W2 2W3");
  for (int p : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16}) {
      const PipelineSchedule zb = Make(ScheduleKind::kZeroBubble, p, m);
      EXPECT_TRUE(ValidateSchedule(zb).ok()) << "zb p=" << p << " m=" << m << ": " << ValidateSchedule(zb);
      // F, B and W one unit each against 1F1B's F of one and B (= B + W) of two: at most its bubble, a third of
      // it once the pipeline is full.
      const double zb_idle = SimulatedBubble(zb, 1, 1, 1)[0];
      const double one_idle = SimulatedBubble(Make(ScheduleKind::kOneFOneB, p, m), 1, 2)[0];
      EXPECT_LE(zb_idle, one_idle + 1e-12) << "p=" << p << " m=" << m;
      if (m >= p) {
        EXPECT_NEAR(zb_idle, zb.FormulaBubble(), 1e-12) << "p=" << p << " m=" << m;
      }
    }
  }
}

TEST(Schedule, ValidateNamesTheRankThatWouldWaitForeverForAMissingSend) {
  PipelineSchedule s = Make(ScheduleKind::kOneFOneB, 2, 2);
  ASSERT_EQ(s.ranks[1].back().ToString(), "1SEND_B1");
  s.ranks[1].pop_back();  // rank 1 never sends the last gradient
  const absl::Status status = ValidateSchedule(s);
  EXPECT_NE(status.message().find("rank 0 waits forever at 0B1"), std::string::npos) << status;
}

TEST(Schedule, BackwardsOutOfMicrobatchOrderAreRefusedBecauseTheSumsWouldDiffer) {
  PipelineSchedule s = Make(ScheduleKind::kGPipe, 1, 2);
  std::swap(s.ranks[0][2], s.ranks[0][3]);  // 0B1 before 0B0
  const absl::Status status = ValidateSchedule(s);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("microbatch order"), std::string::npos) << status;
}

TEST(Schedule, SimulatedBubbleMatchesTheFormulaWhenForwardAndBackwardCostTheSame) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
    for (int p : {2, 4}) {
      for (int m : {1, 4, 16}) {
        const PipelineSchedule s = Make(kind, p, m);
        for (double idle : SimulatedBubble(s, 1, 1)) EXPECT_NEAR(idle, s.FormulaBubble(), 1e-12);
      }
    }
  }
  const PipelineSchedule s = Make(ScheduleKind::kInterleaved, 4, 8, 2);
  EXPECT_NEAR(s.FormulaBubble(), 3.0 / 19.0, 1e-12);
  for (double idle : SimulatedBubble(s, 1, 1)) EXPECT_LT(idle, Make(ScheduleKind::kOneFOneB, 4, 8).FormulaBubble());
}

TEST(Schedule, OneFOneBHoldsAtMostPMicrobatchesAndGPipeHoldsAllOfThem) {
  for (int p : {2, 4}) {
    const PipelineSchedule one = Make(ScheduleKind::kOneFOneB, p, 16), all = Make(ScheduleKind::kGPipe, p, 16);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(PeakMicrobatchesInFlight(one, r), p - r);
      EXPECT_EQ(PeakMicrobatchesInFlight(all, r), 16);
    }
  }
}

TEST(Schedule, RefusesWhatCannotRunNamingTheFlag) {
  auto err = [](ScheduleOptions o) { return std::string(MakeSchedule(o).status().message()); };
  EXPECT_NE(err({.kind = ScheduleKind::kOneFOneB, .ranks = 2, .microbatches = 2, .virtual_stages = 2})
                .find("--pp_virtual_stages=2 applies to --pp_schedule=interleaved"),
            std::string::npos);
  EXPECT_NE(err({.kind = ScheduleKind::kInterleaved, .ranks = 2, .microbatches = 3, .virtual_stages = 2})
                .find("use --microbatches=4"),
            std::string::npos);
  EXPECT_FALSE(ParseSchedule("afab").ok());
}

TEST(SchedulePrinter, DrawsTheBubblesAsDots) {
  const std::string table = FormatPipelineOrder(Make(ScheduleKind::kOneFOneB, 2, 4), /*with_actions=*/false);
  EXPECT_NE(table.find("rank 0 | 0F0 0F1 .   0B0 0F2 0B1 0F3 0B2 .   0B3"), std::string::npos) << table;
  EXPECT_NE(table.find("rank 1 | .   1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"), std::string::npos) << table;
  EXPECT_NE(table.find("= 20%"), std::string::npos) << table;
}

TEST(StagePlan, BalancesCostAcrossStagesAndCutsAfterActivations) {
  // Linears 784x512 (401k), 512x512 (262k), 512x512, 512x10 (5k): the best cut is after the first Linear.
  auto mlp = nn::MLP({784, 512, 512, 512, 10});
  absl::StatusOr<StagePlan> plan = StagePlan::Make(*mlp, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(plan->stages[0].first_child, 0u);
  EXPECT_EQ(plan->stages[0].end_child, 2u);  // 0 Linear, 1 ReLU: 401k against 529k for the rest
  EXPECT_EQ(plan->stages[1].in_features, 512);
  EXPECT_EQ(plan->stages[1].out_features, 10);
  PipelineStage second(*mlp, plan->stages[1]);
  std::vector<std::string> names;
  for (const auto& [name, param] : second.NamedParameters()) names.push_back(name);
  EXPECT_EQ(absl::StrJoin(names, ","), "2.weight,2.bias,4.weight,4.bias,6.weight,6.bias");  // the whole model's names
}

TEST(StagePlan, RefusesMoreStagesThanLinearsAndUnevenInterleavedSplits) {
  auto mlp = nn::MLP({16, 8, 8, 4});  // 3 Linears
  absl::StatusOr<StagePlan> too_many = StagePlan::Make(*mlp, 4);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("use at most 3 stages"), std::string::npos) << too_many.status();
  absl::StatusOr<StagePlan> uneven = StagePlan::Make(*mlp, 2, /*equal=*/true);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("--pp_schedule=interleaved"), std::string::npos) << uneven.status();
}

TEST(PipelineFlags, EveryBadInputNamesItsFlagAndTheFix) {
  auto err = [](PipelineFlags f, int64_t linears = 3, int64_t batch = 64) {
    return std::string(CheckPipelineFlags(f, linears, batch).message());
  };
  EXPECT_EQ(err({.pp = 2}), "");
  EXPECT_EQ(err({.pp = 1, .microbatches = 4}), "");  // the reference: microbatches at one stage
  EXPECT_NE(err({.pp = 0}).find("--pp: must be in [1, 1024]"), std::string::npos);
  EXPECT_NE(err({.pp = 4}).find("use --pp <= 3"), std::string::npos);  // more stages than Linears
  EXPECT_NE(err({.pp = 2, .microbatches = 6}).find("--microbatches=6: must divide --batch_size=64"), std::string::npos);
  EXPECT_NE(err({.pp = 2, .schedule = "afab"}).find("--pp_schedule=afab"), std::string::npos);
  EXPECT_EQ(err({.pp = 2, .schedule = "zb"}), "");
  EXPECT_NE(err({.pp = 2, .schedule = "zb", .virtual_stages = 2}, 4).find("applies to --pp_schedule=interleaved"),
            std::string::npos);
  EXPECT_NE(err({.pp = 2, .virtual_stages = 2}, 4).find("applies to --pp_schedule=interleaved only"), std::string::npos);
  EXPECT_NE(err({.pp = 2, .schedule = "interleaved", .virtual_stages = 2}, 6).find("do not split evenly"),
            std::string::npos);
  EXPECT_NE(err({.pp = 2, .schedule = "interleaved", .microbatches = 1, .virtual_stages = 2}, 4)
                .find("a multiple of --pp"),
            std::string::npos);
  EXPECT_EQ(err({.pp = 2, .schedule = "interleaved", .microbatches = 4, .virtual_stages = 2}, 4), "");
}

}  // namespace
}  // namespace tinyddp::dist::pipeline
