// StepTimeline (tools/timeline/step_timeline.h): steps cut at forwards, the estimate of where
// backward's computation ends, exposed communication, on hand-made traces whose answers are known, and
// on the committed two-GPU traces whose reading docs/performance.md gives.
#include "tools/timeline/step_timeline.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tinyddp::dist {
namespace {

using nlohmann::json;

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/" + path;
}

// A trace built event by event, as dist/observe/trace/trace.h writes them.
class TraceBuilder {
 public:
  TraceBuilder& Span(int rank, int tid, const std::string& name, int64_t start, int64_t end, int64_t i = -1,
                     int64_t bytes = -1) {
    json e = {{"name", name}, {"ph", "X"}, {"pid", rank}, {"tid", tid}, {"ts", start}, {"dur", end - start}};
    if (i >= 0) e["args"]["i"] = i;
    if (bytes >= 0) e["args"]["bytes"] = bytes;
    events_.push_back(e);
    return *this;
  }
  TraceBuilder& Lane(int rank, int tid, const std::string& name) {
    events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", tid}, {"args", {{"name", name}}}});
    return *this;
  }
  ChromeTrace Build() const {
    absl::StatusOr<ChromeTrace> trace = ParseChromeTrace(json{{"traceEvents", events_}}.dump());
    EXPECT_TRUE(trace.ok()) << trace.status();
    return *trace;
  }

 private:
  json events_ = json::array();
};

std::vector<std::pair<int64_t, int64_t>> Pairs(const std::vector<TimeInterval>& intervals) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const TimeInterval& i : intervals) out.emplace_back(i.start_us, i.end_us);
  return out;
}

TEST(UnionOf, MergesOverlappingAndTouchingIntervalsInAnyOrderAndDropsEmptyOnes) {
  EXPECT_EQ(Pairs(UnionOf({{50, 60}, {3, 9}, {9, 14}, {13, 20}, {40, 40}, {55, 58}, {70, 71}})),
            (std::vector<std::pair<int64_t, int64_t>>{{3, 20}, {50, 60}, {70, 71}}));
}

TEST(Subtract, RemovesEveryCoveredStretch) {
  const std::vector<TimeInterval> from = UnionOf({{0, 100}, {150, 170}, {200, 230}});
  const std::vector<TimeInterval> minus = UnionOf({{-5, 10}, {20, 30}, {90, 160}, {165, 166}, {300, 400}});
  EXPECT_EQ(Pairs(Subtract(from, minus)),
            (std::vector<std::pair<int64_t, int64_t>>{{10, 20}, {30, 90}, {160, 165}, {166, 170}, {200, 230}}));
}

// One CPU rank's step: forward 0-8, backward 10-72 whose last bucket starts at 40, optimizer 72-75.
TraceBuilder& CpuStep(TraceBuilder& b, int rank, int64_t t0, int64_t last_bucket_end = 70,
                      int64_t last_bucket_bytes = -1) {
  return b.Span(rank, 0, "forward", t0, t0 + 8)
      .Span(rank, 0, "backward", t0 + 10, t0 + 72, /*i=*/3)
      .Span(rank, 0, "optimizer", t0 + 72, t0 + 75)
      .Span(rank, 2, "all_reduce", t0 + 20, t0 + 30, /*i=*/0)
      .Span(rank, 2, "all_reduce", t0 + 40, t0 + last_bucket_end, /*i=*/1, last_bucket_bytes);
}

TEST(StepTimeline, ExposedIsTheCommunicationAfterTheLastBucketStartsWhileBackwardOnlyWaits) {
  TraceBuilder b;
  b.Lane(0, 2, "Gloo collectives (all_reduce)");
  CpuStep(b, 0, 1000);
  absl::StatusOr<StepTimeline> t = BuildStepTimeline(b.Build());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->on_gpu);
  ASSERT_EQ(t->steps.size(), 1u);
  const RankStep& s = t->steps[0][0];
  EXPECT_EQ(s.start_us, 1000);
  EXPECT_EQ(s.end_us, 1075);  // the last step ends with the rank's last span
  ASSERT_EQ(s.backward_compute.size(), 1u);
  EXPECT_EQ(s.backward_compute[0].start_us, 1010);
  EXPECT_EQ(s.backward_compute[0].end_us, 1040);  // where bucket 1 (the gradients computed last) started
  EXPECT_EQ(Pairs(s.busy), (std::vector<std::pair<int64_t, int64_t>>{{1000, 1008}, {1010, 1040}, {1072, 1075}}));
  EXPECT_EQ(Pairs(s.exposed), (std::vector<std::pair<int64_t, int64_t>>{{1040, 1070}}));
  EXPECT_EQ(s.ExposedUs(), 30);
  EXPECT_EQ(s.CommUs(), 40);
  EXPECT_EQ(s.SpanUs("backward"), 62);
  ASSERT_EQ(s.comm.size(), 2u);
  EXPECT_EQ(s.comm[1].bucket, 1);
  EXPECT_EQ(s.comm[1].path, "Gloo");  // read off the lane's name
}

TEST(StepTimeline, SpansNestedInBackwardEndItsComputationAndCountAsBusy) {
  // GPU, fused optimizers: backward 10-60 holds per-bucket optimizer steps at 35-38 and 45-50.
  TraceBuilder b;
  b.Lane(0, 2, "GPU NCCL stream (all_reduce)")
      .Span(0, 0, "forward", 0, 3)
      .Span(0, 1, "forward", 2, 8)
      .Span(0, 1, "backward", 10, 60)
      .Span(0, 1, "optimizer", 35, 38, /*i=*/0)
      .Span(0, 1, "optimizer", 45, 50, /*i=*/1)
      .Span(0, 2, "all_reduce", 20, 30, /*i=*/0)
      .Span(0, 2, "all_reduce", 38, 55, /*i=*/1);
  absl::StatusOr<StepTimeline> t = BuildStepTimeline(b.Build());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->on_gpu);
  const RankStep& s = t->steps[0][0];
  EXPECT_EQ(s.start_us, 2);  // the GPU's forward, not the host's
  EXPECT_EQ(s.backward_compute[0].end_us, 35);
  EXPECT_EQ(Pairs(s.exposed), (std::vector<std::pair<int64_t, int64_t>>{{38, 45}, {50, 55}}));
  EXPECT_EQ(s.comm[1].path, "");  // a GPU group has several paths: only the trace can name one
  EXPECT_EQ(t->backend, "NCCL");
  ASSERT_EQ(s.host.size(), 1u);  // the host lane, kept apart
}

TEST(StepTimeline, UpdatesInsideBackwardDoNotEndItsComputation) {
  // --optimizer_in_backward on a CPU: bucket 0's update runs at 35-38 between gradients, backward computes on
  // until the last bucket's all_reduce starts at 55; bucket 1's update at 62-66 is in the end-of-backward wait.
  TraceBuilder b;
  b.Span(0, 0, "forward", 0, 10)
      .Span(0, 0, "backward", 10, 70)
      .Span(0, 0, kUpdateInBackward, 35, 38, /*i=*/0)
      .Span(0, 0, kUpdateInBackward, 62, 66, /*i=*/1)
      .Span(0, 2, "all_reduce", 20, 30, /*i=*/0)
      .Span(0, 2, "all_reduce", 55, 60, /*i=*/1);
  absl::StatusOr<StepTimeline> t = BuildStepTimeline(b.Build());
  ASSERT_TRUE(t.ok()) << t.status();
  const RankStep& s = t->steps[0][0];
  EXPECT_EQ(s.backward_compute[0].end_us, 55);  // not 35: the first update is not the end
  EXPECT_EQ(Pairs(s.exposed), (std::vector<std::pair<int64_t, int64_t>>{{55, 60}}));
}

TEST(StepTimeline, CommunicationAfterBackwardIsExposedUnlessSomethingComputesBesideIt) {
  // No overlap at all (one all_reduce after backward), with an optimizer that starts before it ends.
  TraceBuilder b;
  b.Span(0, 0, "forward", 0, 10)
      .Span(0, 0, "backward", 10, 40)
      .Span(0, 2, "all_reduce", 40, 65, /*i=*/0)
      .Span(0, 0, "optimizer", 60, 70);
  absl::StatusOr<StepTimeline> t = BuildStepTimeline(b.Build());
  ASSERT_TRUE(t.ok()) << t.status();
  const RankStep& s = t->steps[0][0];
  EXPECT_EQ(s.backward_compute[0].end_us, 40);  // nothing started inside it: all of it computed
  EXPECT_EQ(Pairs(s.exposed), (std::vector<std::pair<int64_t, int64_t>>{{40, 60}}));
}

TEST(StepTimeline, CutsStepsAtForwardsKeepsTheLastOnesAndLabelsBucketsWithTheirBytes) {
  TraceBuilder b;
  for (int rank = 0; rank < 3; ++rank) {
    for (int k = 0; k < 5; ++k) {
      // Rank 2's last step carries its own bytes, as a trace may.
      CpuStep(b, rank, 100 * k + 7 * rank, /*last_bucket_end=*/50 + 3 * k, rank == 2 && k == 4 ? 999 : -1);
    }
  }
  absl::StatusOr<StepTimeline> t = BuildStepTimeline(b.Build(), {.last_steps = 2, .bucket_bytes = {1050664, 1613864}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_ranks(), 3);
  EXPECT_EQ(t->total_steps, 5);
  EXPECT_EQ(t->first_step, 3);
  ASSERT_EQ(t->steps.size(), 2u);
  for (int rank = 0; rank < 3; ++rank) {
    const RankStep& third = t->steps[0][rank];  // step 3 (0-based) on every rank
    EXPECT_EQ(third.start_us, 300 + 7 * rank);
    EXPECT_EQ(third.end_us, 400 + 7 * rank);  // the next forward
    EXPECT_EQ(third.ExposedUs(), 19);         // 340 .. 359
    EXPECT_EQ(third.comm[0].bytes, 1050664);
    EXPECT_EQ(third.comm[1].bytes, 1613864);
  }
  EXPECT_EQ(t->steps[1][2].comm.back().bytes, 999);
  EXPECT_DOUBLE_EQ(t->MeanExposedUs(), (19 + 22) / 2.0);
  EXPECT_DOUBLE_EQ(t->MeanSpanUs("forward"), 8);
}

TEST(StepTimeline, ATraceWithoutSpansIsAnError) {
  TraceBuilder b;
  b.Lane(0, 0, "host");
  EXPECT_EQ(BuildStepTimeline(b.Build()).status().code(), absl::StatusCode::kFailedPrecondition);
}

// docs/ddp.md: in the copy-engine trace "every bucket's all_reduce is complete before its optimizer's
// turn: no communication is exposed"; the first version, with NCCL kernels, leaves the last bucket's
// tail exposed behind the fused optimizers.
TEST(StepTimeline, TheCommittedCopyEngineTraceExposesAlmostNothingAndTheNcclKernelOneMore) {
  absl::StatusOr<ChromeTrace> ce = ReadChromeTrace(Runfile("docs/traces/ddp_medium_2xh200_ce.json"));
  absl::StatusOr<ChromeTrace> nccl = ReadChromeTrace(Runfile("docs/traces/ddp_medium_2xh200.json"));
  ASSERT_TRUE(ce.ok() && nccl.ok());
  absl::StatusOr<StepTimeline> ce_steps = BuildStepTimeline(*ce);
  absl::StatusOr<StepTimeline> nccl_steps = BuildStepTimeline(*nccl);
  ASSERT_TRUE(ce_steps.ok() && nccl_steps.ok());
  EXPECT_EQ(ce_steps->total_steps, 5);
  for (const auto& step : ce_steps->steps) {
    for (const RankStep& r : step) {
      EXPECT_EQ(r.comm.size(), 5u);
      EXPECT_LT(r.ExposedUs(), 0.01 * r.step_us());  // a few microseconds of a 2.5 ms step
      EXPECT_GT(r.CommUs(), 0.3 * r.step_us());      // while a third of it communicates
    }
  }
  EXPECT_GT(nccl_steps->MeanExposedUs(), 4 * ce_steps->MeanExposedUs());
  EXPECT_GT(nccl_steps->MeanStepUs(), ce_steps->MeanStepUs());
}

}  // namespace
}  // namespace tinyddp::dist
