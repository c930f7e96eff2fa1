// ChromeTrace (tools/timeline/chrome_trace.h): spans per rank and track with their args, tolerance of
// what it does not know, errors that say what is wrong, and the committed two-GPU traces.
#include "tools/timeline/chrome_trace.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/" + path;
}

TEST(ParseChromeTrace, ReadsSpansPerRankAndTrackWithTheirArgsAndIgnoresWhatItDoesNotKnow) {
  const std::string json = R"json({"displayTimeUnit":"ms","otherData":{"x":1},"traceEvents":[
    {"name":"process_name","ph":"M","pid":1,"args":{"name":"rank 1"}},
    {"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"Gloo collectives (all_reduce)"}},
    {"name":"backward","ph":"X","pid":1,"tid":0,"ts":1000.6,"dur":250,"args":{"i":7,"color":"green"}},
    {"name":"all_reduce","ph":"X","pid":1,"tid":2,"ts":1100,"dur":90,"cat":"comm",
     "args":{"i":1,"path":"copy engines","bytes":1613864}},
    {"name":"mark","ph":"i","pid":1,"tid":0,"ts":1050},
    {"name":"begin","ph":"B","pid":1,"tid":0,"ts":1060},
    {"name":"ctr","ph":"C","pid":1,"ts":1070,"args":{"v":3}},
    {"name":"forward","ph":"X","pid":0,"tid":0,"ts":900,"dur":80},
    {"name":"step","ph":"X","pid":1,"tid":0,"ts":1000,"dur":400},
    {"name":"optimizer","ph":"X","pid":1,"tid":0,"ts":1000,"dur":5}
  ]})json";
  absl::StatusOr<ChromeTrace> trace = ParseChromeTrace(json);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->processes.size(), 2u);
  EXPECT_EQ(trace->processes[0].name, "pid 0");  // no process_name: a made-up one
  const TraceProcess& rank1 = trace->processes[1];
  EXPECT_EQ(rank1.name, "rank 1");
  ASSERT_EQ(rank1.lanes.size(), 2u);
  const TraceLane* host = rank1.Lane(0);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->name, "tid 0");
  // Sorted by start, the enclosing span before what it encloses; the fractional ts rounded.
  ASSERT_EQ(host->spans.size(), 3u);
  EXPECT_EQ(host->spans[0].name, "step");
  EXPECT_EQ(host->spans[1].name, "optimizer");
  EXPECT_EQ(host->spans[2].name, "backward");
  EXPECT_EQ(host->spans[2].start_us, 1001);
  EXPECT_EQ(host->spans[2].end_us, 1251);
  EXPECT_EQ(host->spans[2].index, 7);
  EXPECT_EQ(host->spans[2].bytes, -1);
  const TraceLane* comm = rank1.Lane(2);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->name, "Gloo collectives (all_reduce)");
  ASSERT_EQ(comm->spans.size(), 1u);
  EXPECT_EQ(comm->spans[0].index, 1);
  EXPECT_EQ(comm->spans[0].bytes, 1613864);
  EXPECT_EQ(comm->spans[0].path, "copy engines");
  EXPECT_EQ(comm->spans[0].duration_us(), 90);
  EXPECT_EQ(rank1.Lane(1), nullptr);
}

TEST(ParseChromeTrace, AcceptsABareArrayOfEvents) {
  absl::StatusOr<ChromeTrace> trace =
      ParseChromeTrace(R"([{"name":"forward","ph":"X","pid":3,"tid":1,"ts":5,"dur":17}])");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->processes.size(), 1u);
  EXPECT_EQ(trace->processes[0].pid, 3);
  EXPECT_EQ(trace->processes[0].Lane(1)->spans[0].end_us, 22);
}

TEST(ParseChromeTrace, SaysWhatIsWrongWithABadFile) {
  absl::StatusOr<ChromeTrace> not_json = ParseChromeTrace("{\"traceEvents\": [ {\"ph\": ");
  EXPECT_EQ(not_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(not_json.status().message(), "not JSON")) << not_json.status();

  absl::StatusOr<ChromeTrace> no_events = ParseChromeTrace(R"({"events": []})");
  EXPECT_TRUE(absl::StrContains(no_events.status().message(), "traceEvents")) << no_events.status();

  absl::StatusOr<ChromeTrace> no_time = ParseChromeTrace(
      R"([{"ph":"M","name":"process_name","pid":0,"args":{"name":"rank 0"}},{"ph":"X","pid":0,"tid":0,"ts":"soon"}])");
  EXPECT_EQ(no_time.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(no_time.status().message(), "event #1")) << no_time.status();
}

TEST(ReadChromeTrace, NamesAFileItCannotOpen) {
  absl::StatusOr<ChromeTrace> trace = ReadChromeTrace("/nonexistent/run.json");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(trace.status().message(), "/nonexistent/run.json")) << trace.status();
}

TEST(ReadChromeTrace, ReadsTheCommittedTwoGpuTraces) {
  for (const char* name : {"docs/traces/ddp_medium_2xh200.json", "docs/traces/ddp_medium_2xh200_ce.json"}) {
    absl::StatusOr<ChromeTrace> trace = ReadChromeTrace(Runfile(name));
    ASSERT_TRUE(trace.ok()) << trace.status();
    ASSERT_EQ(trace->processes.size(), 2u) << name;
    for (const TraceProcess& rank : trace->processes) {
      ASSERT_EQ(rank.lanes.size(), 3u) << name;  // host, GPU compute stream, communication
      ASSERT_NE(rank.Lane(2), nullptr);
      EXPECT_EQ(rank.Lane(2)->spans.size(), 25u) << name;  // 5 steps x 5 buckets
      for (const TraceSpan& s : rank.Lane(2)->spans) {
        EXPECT_EQ(s.name, "all_reduce");
        EXPECT_GE(s.index, 0);
        EXPECT_LE(s.index, 4);
        EXPECT_GT(s.duration_us(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace tinyddp::dist
