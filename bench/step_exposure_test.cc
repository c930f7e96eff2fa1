// StepExposure on hand-made traces whose exposed communication is known: the naive rung's all_reduces
// after backward, a bucket overlapping backward, fused optimizers nested in backward, the GPU lane.
#include "bench/step_exposure.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tinyddp::bench {
namespace {

std::string Event(const std::string& name, int tid, int64_t ts, int64_t dur) {
  return absl::StrCat("{\"name\":\"", name, "\",\"ph\":\"X\",\"pid\":0,\"tid\":", tid, ",\"ts\":", ts,
                      ",\"dur\":", dur, "}");
}

TEST(StepExposure, CommunicationAfterBackwardIsExposedUpToTheLastAllReducesEnd) {
  // naive: forward 0-10, backward 10-50, two all_reduces 55-70 and 70-85 while the thread waits (no
  // span), optimizer 90-95. Exposed: 55-85.
  const std::string events =
      absl::StrCat("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"rank 0\"}},",
                   Event("step", 0, 0, 100), ",", Event("forward", 0, 0, 10), ",", Event("backward", 0, 10, 40), ",",
                   Event("all_reduce", 2, 55, 15), ",", Event("all_reduce", 2, 70, 15), ",",
                   Event("optimizer", 0, 90, 5));
  auto m = MeasureStepExposure(events);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->steps, 1);
  EXPECT_EQ(m->step_us, 100);
  EXPECT_EQ(m->comm_us, 30);
  EXPECT_EQ(m->exposed_us, 30);
}

TEST(StepExposure, BackwardsOwnComputationEndsWhereItsLastBucketStarts) {
  // Two steps. Step 1: buckets at 20-35 (hidden by backward) and 40-70; backward 10-60 includes the wait
  // for the second, so its computation ends at 40: exposed 40-70 = 30. Step 2: one bucket at 130-140 fully
  // inside backward 110-150: computation ends at 130, exposed 10. Mean: 20.
  const std::string events = absl::StrCat(
      "[", Event("step", 0, 0, 100), ",", Event("backward", 0, 10, 50), ",", Event("all_reduce", 2, 20, 15), ",",
      Event("all_reduce", 2, 40, 30), ",", Event("step", 0, 100, 100), ",", Event("backward", 0, 110, 40), ",",
      Event("all_reduce", 2, 130, 10), "]");
  auto m = MeasureStepExposure(events);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->steps, 2);
  EXPECT_EQ(m->exposed_us, 20);
  EXPECT_EQ(m->comm_us, (45 + 10) / 2.0);
}

TEST(StepExposure, NestedSpansCutBackwardAndTheGpuLaneIsTheComputeLane) {
  // GPU trace: the host lane (tid 0) is ignored once a compute lane (tid 1) exists. Backward 0-100 on the
  // compute stream; bucket 0 all-reduced 30-58, its fused optimizer nested at 40-45, bucket 1 at 60-90.
  // Computation ends at 40 (the nested span comes before bucket 1's start), busy until 45: exposed 45-58
  // and 60-90 = 43.
  const std::string events =
      absl::StrCat(Event("step", 0, 0, 500), ",", Event("backward", 0, 0, 500), ",", Event("step", 1, 0, 100), ",",
                   Event("backward", 1, 0, 100), ",", Event("optimizer", 1, 40, 5), ",",
                   Event("all_reduce", 2, 30, 28), ",", Event("all_reduce", 2, 60, 30));
  auto m = MeasureStepExposure(events);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->steps, 1);
  EXPECT_EQ(m->exposed_us, 43);
}

TEST(StepExposure, RefusesTextThatIsNotATraceAndTracesWithoutSteps) {
  EXPECT_EQ(MeasureStepExposure("{not json").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureStepExposure(Event("backward", 0, 0, 5)).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tinyddp::bench
