// The SVG timeline (tools/timeline/timeline_svg.h): what a reader must find in the picture is in the
// document - a lane pair per rank, a labelled bar per bucket's all_reduce (or per layer's all_gather and
// reduce_scatter, for ZeRO-3; per layer's f or g all_reduce, for tensor parallelism), the exposed stretches,
// the bucket table - text from the trace is escaped, and the file lands beside the trace.
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

// Two CPU ranks, three ZeRO-3 steps of a 3-layer model as dist/parallel/zero/fully_sharded.h records them:
// each layer's compute nested in forward and backward ("forward layer", "backward layer", args.i = the
// layer; layer 1's backward in two parts, dx then dW), the step nested at backward's end, and each layer's
// all_gather and reduce_scatter. Per step, three stretches of communication beside no layer's compute:
// layer 0's gather before forward has anything to compute (500 us), layer 2's reduce_scatter in the gap
// before layer 1's backward (400 us), and layer 0's reduce_scatter before the step (1000 us).
std::string ZeroThreeTrace() {
  json events = json::array();
  for (int rank = 0; rank < 2; ++rank) {
    auto span = [&](int tid, const std::string& name, int64_t start, int64_t end, int64_t i) {
      json e = {{"name", name}, {"ph", "X"}, {"pid", rank}, {"tid", tid}, {"ts", start + 50 * rank},
                {"dur", end - start}};
      if (i >= 0) e["args"]["i"] = i;
      events.push_back(e);
    };
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", 2},
                      {"args", {{"name", "Gloo collectives (all_reduce)"}}}});
    for (int k = 0; k < 3; ++k) {
      const int64_t t = 10000 * k;
      span(0, "forward", t, t + 3000, k);
      span(0, "forward layer", t + 500, t + 1300, 0);
      span(0, "forward layer", t + 1400, t + 2200, 1);
      span(0, "forward layer", t + 2300, t + 2900, 2);
      span(0, "backward", t + 3000, t + 9000, k);
      span(0, "backward layer", t + 3000, t + 4000, 2);
      span(0, "backward layer", t + 4500, t + 5500, 1);  // dx
      span(0, "backward layer", t + 5600, t + 6000, 1);  // dW and db, after layer 2's reduce_scatter
      span(0, "backward layer", t + 6000, t + 7500, 0);
      span(0, "optimizer", t + 8500, t + 9000, -1);
      span(2, "all_gather", t, t + 500, 0);
      span(2, "all_gather", t + 500, t + 1300, 1);         // prefetched by layer 0: hidden behind it
      span(2, "all_gather", t + 1400, t + 2200, 2);
      span(2, "all_gather", t + 3000, t + 3900, 1);        // layer 2 stays whole into backward
      span(2, "reduce_scatter", t + 4000, t + 4400, 2);
      span(2, "all_gather", t + 4500, t + 5400, 0);
      span(2, "reduce_scatter", t + 6000, t + 7000, 1);
      span(2, "reduce_scatter", t + 7500, t + 8500, 0);
    }
  }
  return json{{"traceEvents", events}}.dump();
}

TEST(TimelineSvg, DrawsAZeroThreeStepsLayersInsideItsPhasesAndEachLayersGatherAndReduceScatter) {
  absl::StatusOr<ChromeTrace> trace = ParseChromeTrace(ZeroThreeTrace());
  ASSERT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<StepTimeline> t =
      BuildStepTimeline(*trace, {.last_steps = 2, .bucket_bytes = {1 << 20, 1 << 20, 1 << 19}});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string svg = RenderTimelineSvg(*t, {.title = "ZeRO-3 step timeline", .comm_unit = "layer"});
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_TRUE(absl::StrContains(svg, "ZeRO-3 step timeline: 2 ranks over Gloo (CPU), steps 2-3 of 3"));
  // Each layer's compute inside its phase, and the phase itself drawn lighter: its gaps are waits.
  EXPECT_EQ(Count(svg, "<title>forward layer 0: 800 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>backward layer 1: "), 2 * 2 * 2);  // dx, then dW and db
  EXPECT_EQ(Count(svg, "<title>forward: 3.00 ms (lighter: waiting"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>optimizer: 500 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "backward waits for communication"), 0);  // no estimate: the parts say when it computed
  // Each collective, named with its layer and bytes.
  EXPECT_EQ(Count(svg, "<title>all_gather of layer 0: 1.0 MiB, Gloo, 500 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>all_gather of layer 2: 512.0 KiB, Gloo, 800 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>reduce_scatter of layer 0: 1.0 MiB, Gloo, 1.00 ms</title>"), 2 * 2);
  // Exposed: the three stretches beside no layer's compute, 1.9 ms a step on each rank.
  EXPECT_EQ(Count(svg, "exposed 1.90 ms/step"), 2);
  EXPECT_EQ(Count(svg, "<title>exposed 500 us: "), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>exposed 400 us: "), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>exposed 1.00 ms: "), 2 * 2);
  // A table row per collective and layer (layer 0's two gathers, 500 and 900 us, averaged); an all_gather's
  // busbw is algbw x (n-1)/n, half of it on 2 ranks.
  EXPECT_TRUE(absl::StrContains(svg, "AG L0   1.0 MiB     Gloo             | 700 us       1.50   0.75"));
  EXPECT_TRUE(absl::StrContains(svg, "RS L2   512.0 KiB   Gloo"));
  EXPECT_TRUE(absl::StrContains(svg, "all_gather of layer k (its parameters, whole)"));
  EXPECT_TRUE(absl::StrContains(svg, "all_gather is issued when the layer before it starts its forward"));
  // Every collective is labelled in the still picture, a bar too narrow for it beside the bar (layer 0's
  // gathers, 500 us): twice a step on each rank, and the table's row.
  EXPECT_EQ(Count(svg, ">AG L0"), 2 * 2 * 2 + 1);
  EXPECT_EQ(Count(svg, ">AG L2"), 2 * 2 + 1);
  EXPECT_EQ(Count(svg, ">fwd L0<"), 2 * 2);  // each layer's compute says which phase it is
  EXPECT_EQ(Count(svg, ">bwd L0<"), 2 * 2);
  EXPECT_EQ(Count(svg, ">L0<"), 0);
}

TEST(TimelineSvg, ItsLegendListsOnlyWhatThePictureDraws) {
  // DDP with fused optimizers: the optimizer steps inside backward's wait, untraced; no optimizer bar.
  json trace = json::parse(ThreeRankTrace());
  json kept = json::array();
  for (const json& e : trace["traceEvents"]) {
    if (e["name"] != "optimizer") kept.push_back(e);
  }
  trace["traceEvents"] = kept;
  const std::string without = RenderTimelineSvg(Timeline(trace.dump(), 2));
  EXPECT_FALSE(absl::StrContains(without, ">optimizer<")) << "a swatch for a bar the picture does not have";
  EXPECT_TRUE(absl::StrContains(without, ">backward waiting for communication<"));
  const std::string with = RenderTimelineSvg(Timeline(ThreeRankTrace(), 2));
  EXPECT_TRUE(absl::StrContains(with, ">optimizer<"));
}

// Two CPU ranks, three tensor-parallel steps of two column -> row pairs as dist/parallel/tensor/ records them:
// each layer's compute nested in forward and backward (a row layer's GEMM, then its bias after g), g's
// all_reduce after layers 1 and 3 in forward, f's before layer 2 in backward, each waited for where it was
// issued: 500 + 300 + 400 us a step beside no compute.
std::string TensorParallelTrace() {
  json events = json::array();
  for (int rank = 0; rank < 2; ++rank) {
    auto span = [&](int tid, const std::string& name, int64_t start, int64_t end, int64_t i) {
      json e = {{"name", name}, {"ph", "X"}, {"pid", rank}, {"tid", tid}, {"ts", start + 50 * rank},
                {"dur", end - start}};
      if (i >= 0) e["args"]["i"] = i;
      events.push_back(e);
    };
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", 2},
                      {"args", {{"name", "Gloo collectives (all_reduce)"}}}});
    for (int k = 0; k < 3; ++k) {
      const int64_t t = 10000 * k;
      span(0, "forward", t, t + 4000, k);
      span(0, "forward layer", t, t + 500, 0);
      span(0, "forward layer", t + 500, t + 1300, 1);
      span(2, "all_reduce (g)", t + 1300, t + 1800, 1);
      span(0, "forward layer", t + 1800, t + 1900, 1);  // the bias, after the sum
      span(0, "forward layer", t + 1900, t + 2700, 2);
      span(0, "forward layer", t + 2700, t + 3500, 3);
      span(2, "all_reduce (g)", t + 3500, t + 3800, 3);
      span(0, "forward layer", t + 3800, t + 3900, 3);
      span(0, "backward", t + 4000, t + 8500, k);
      span(0, "backward layer", t + 4000, t + 5000, 3);
      span(0, "backward layer", t + 5000, t + 6000, 2);
      span(2, "all_reduce (f)", t + 6000, t + 6400, 2);
      span(0, "backward layer", t + 6400, t + 7400, 1);
      span(0, "backward layer", t + 7400, t + 8000, 0);
      span(0, "optimizer", t + 8500, t + 9000, k);
    }
  }
  return json{{"traceEvents", events}}.dump();
}

TEST(TimelineSvg, DrawsATensorParallelStepsLayersAndEachLayersFOrGAllReduce) {
  absl::StatusOr<ChromeTrace> trace = ParseChromeTrace(TensorParallelTrace());
  ASSERT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<StepTimeline> t =
      BuildStepTimeline(*trace, {.last_steps = 2, .bucket_bytes = {0, 1 << 20, 1 << 20, 1 << 19}});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string svg = RenderTimelineSvg(*t, {.title = "Tensor parallelism step timeline", .comm_unit = "layer"});
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_TRUE(absl::StrContains(svg, "Tensor parallelism step timeline: 2 ranks over Gloo (CPU), steps 2-3 of 3"));
  EXPECT_EQ(Count(svg, "<title>forward layer 1: "), 2 * 2 * 2);  // the GEMM, then the bias
  EXPECT_EQ(Count(svg, "<title>backward layer 0: 600 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>forward: 4.00 ms (lighter: waiting, e.g. for an all_reduce)"), 2 * 2);
  // Each all_reduce, named after its op and layer, with its bytes; labelled (inside, or beside a narrow bar).
  EXPECT_EQ(Count(svg, "<title>all_reduce (g) of layer 1&apos;s output: 1.0 MiB, Gloo, 500 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>all_reduce (g) of layer 3&apos;s output: 512.0 KiB, Gloo, 300 us</title>"), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>all_reduce (f) of layer 2&apos;s input gradient: 1.0 MiB, Gloo, 400 us</title>"),
            2 * 2);
  EXPECT_EQ(Count(svg, ">g L1"), 2 * 2 + 1);  // and the table's row
  EXPECT_EQ(Count(svg, ">f L2"), 2 * 2 + 1);
  // Exposed: every sum, 1.2 ms a step on each rank.
  EXPECT_EQ(Count(svg, "exposed 1.20 ms/step"), 2);
  EXPECT_EQ(Count(svg, "<title>exposed 500 us: "), 2 * 2);
  EXPECT_EQ(Count(svg, "<title>exposed 400 us: "), 2 * 2);
  // A row per all_reduce, by layer; an all_reduce's busbw is algbw x 2(n-1)/n, equal to it on 2 ranks.
  EXPECT_TRUE(absl::StrContains(svg, "g L1    1.0 MiB     Gloo             | 500 us       2.10   2.10"));
  EXPECT_LT(svg.find("g L1    1.0 MiB"), svg.find("f L2    1.0 MiB"));
  EXPECT_LT(svg.find("f L2    1.0 MiB"), svg.find("g L3    512.0 KiB"));
  EXPECT_TRUE(absl::StrContains(svg, "g: all_reduce of layer k&apos;s output (forward)"));
  EXPECT_TRUE(absl::StrContains(svg, "f: all_reduce of layer k&apos;s input gradient (backward)"));
  EXPECT_TRUE(absl::StrContains(svg, "Each column -&gt; row pair ends its forward in g"));
  EXPECT_FALSE(absl::StrContains(svg, "all_gather"));
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
