// The SVG timeline (tools/timeline/timeline_svg.h): what a reader must find in the picture is in the
// document - a lane pair per rank, a labelled bar per bucket's all_reduce, the exposed stretches, the
// bucket table - text from the trace is escaped, and the file lands beside the trace.
#include "tools/timeline/timeline_svg.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tinyddp::dist {
namespace {

using nlohmann::json;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Three CPU ranks, four steps of forward, backward (with its wait), optimizer and two buckets; the last
// bucket of rank r outlives backward's computation by 1000 + 100 r us.
std::string ThreeRankTrace() {
  json events = json::array();
  auto span = [&](int rank, int tid, const std::string& name, int64_t start, int64_t end, int64_t i) {
    json e = {{"name", name}, {"ph", "X"}, {"pid", rank}, {"tid", tid}, {"ts", start}, {"dur", end - start}};
    if (i >= 0) e["args"]["i"] = i;
    events.push_back(e);
  };
  for (int rank = 0; rank < 3; ++rank) {
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", 2},
                      {"args", {{"name", "Gloo collectives (all_reduce)"}}}});
    for (int k = 0; k < 4; ++k) {
      const int64_t t = 20000 * k + 50 * rank;
      span(rank, 0, "forward", t, t + 3000, -1);
      span(rank, 0, "backward", t + 3100, t + 15000 + 100 * rank, k);
      span(rank, 0, "optimizer", t + 15000 + 100 * rank, t + 16000 + 100 * rank, k);
      span(rank, 2, "all_reduce", t + 6000, t + 9000, 0);
      span(rank, 2, "all_reduce", t + 14000, t + 15000 + 100 * rank, 1);
    }
  }
  return json{{"traceEvents", events}}.dump();
}

StepTimeline Timeline(const std::string& text, int last_steps) {
  absl::StatusOr<ChromeTrace> trace = ParseChromeTrace(text);
  EXPECT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<StepTimeline> t =
      BuildStepTimeline(*trace, {.last_steps = last_steps, .bucket_bytes = {1050664, 1613864}});
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(TimelineSvg, DrawsEveryRanksLanesAndALabelledBarPerBucketWithItsExposedTail) {
  const std::string svg = RenderTimelineSvg(Timeline(ThreeRankTrace(), 2), {.source = "ddp_mlp --trace=t.json"});
  EXPECT_TRUE(absl::StartsWith(svg, "<?xml"));
  EXPECT_TRUE(absl::EndsWith(svg, "</svg>\n"));
  EXPECT_EQ(Count(svg, "<svg "), 1);
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_TRUE(absl::StrContains(svg, "3 ranks over Gloo (CPU), steps 3-4 of 4"));
  EXPECT_TRUE(absl::StrContains(svg, "ddp_mlp --trace=t.json"));
  for (const char* rank : {">rank 0<", ">rank 1<", ">rank 2<"}) EXPECT_EQ(Count(svg, rank), 1) << rank;
  EXPECT_EQ(Count(svg, ">communication<"), 3);
  // One bar per bucket, rank and step, each with its numbers on hover.
  EXPECT_EQ(Count(svg, "<title>all_reduce of bucket 0: 1.0 MiB, Gloo, 3.00 ms</title>"), 3 * 2);
  EXPECT_EQ(Count(svg, "<title>all_reduce of bucket 1: 1.5 MiB, Gloo"), 3 * 2);
  EXPECT_EQ(Count(svg, ">b0 · 1.0 MiB<"), 3 * 2);  // as much of "b0 · 1.0 MiB · Gloo" as fits in its bar
  // Exposed: from the last bucket's start (backward's computation ends there) to its end.
  EXPECT_EQ(Count(svg, "<title>exposed 1.00 ms: "), 2);
  EXPECT_EQ(Count(svg, "<title>exposed 1.10 ms: "), 2);
  EXPECT_EQ(Count(svg, "<title>exposed 1.20 ms: "), 2);
  EXPECT_EQ(Count(svg, "<title>backward waits for communication: "), 3 * 2);
  EXPECT_TRUE(absl::StrContains(svg, "exposed 1.10 ms/step"));  // rank 1's mean, in its header
  // The table: a row per bucket.
  EXPECT_TRUE(absl::StrContains(svg, "b0      1.0 MiB     Gloo"));
  EXPECT_TRUE(absl::StrContains(svg, "b1      1.5 MiB     Gloo"));
}

TEST(TimelineSvg, EscapesTextThatComesFromTheTrace) {
  std::string trace = ThreeRankTrace();
  trace.replace(trace.find("\"rank 1\""), 8, "\"r<1> & \\\"co\\\"\"");
  const std::string svg = RenderTimelineSvg(Timeline(trace, 1));
  EXPECT_TRUE(absl::StrContains(svg, "r&lt;1&gt; &amp; &quot;co&quot;"));
  EXPECT_FALSE(absl::StrContains(svg, "r<1>"));
}

TEST(SvgPathFor, ReplacesDotJsonOrAppendsDotSvg) {
  EXPECT_EQ(SvgPathFor("/tmp/run.json"), "/tmp/run.svg");
  EXPECT_EQ(SvgPathFor("run.trace"), "run.trace.svg");
}

TEST(WriteTimelineSvg, WritesThePictureBesideTheTraceAndNamesAFileItCannotRead) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string trace_path = dir + "/ddp.json";
  std::ofstream(trace_path) << ThreeRankTrace();
  absl::StatusOr<std::string> svg = WriteTimelineSvg(trace_path, {.bucket_bytes = {1050664, 1613864}});
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_EQ(*svg, dir + "/ddp.svg");
  std::stringstream written;
  written << std::ifstream(*svg).rdbuf();
  EXPECT_TRUE(absl::StrContains(written.str(), "steps 3-4 of 4"));  // the last two steps by default
  EXPECT_TRUE(absl::StrContains(written.str(), "trace: " + trace_path));

  absl::StatusOr<std::string> missing = WriteTimelineSvg(dir + "/none.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "none.json"));
  absl::StatusOr<std::string> unwritable = WriteTimelineSvg(trace_path, {.svg_path = "/nonexistent/x.svg"});
  EXPECT_FALSE(unwritable.ok());
  EXPECT_TRUE(absl::StrContains(unwritable.status().message(), "/nonexistent/x.svg"));
}

}  // namespace
}  // namespace tinyddp::dist
