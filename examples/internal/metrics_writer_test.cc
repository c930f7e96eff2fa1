// MetricsWriter and the SVG plot: one parseable JSON object per line, appends on resume, and a plot
// whose polylines carry exactly the recorded points.
#include "examples/internal/metrics_writer.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "examples/internal/durable_file.h"
#include "examples/internal/svg_plot.h"
#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

TEST(MetricsWriter, WritesOneJsonLinePerRecordAndAPlotBesideIt) {
  const std::string path = TempPath("run1.jsonl");
  auto writer = MetricsWriter::Open(path, /*append=*/false);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->WriteStep({50, 0, 1.25, 0.08, 2410.5}).ok());
  ASSERT_TRUE((*writer)->WriteStep({100, 0, 0.75, 0.07, 2500}).ok());
  ASSERT_TRUE((*writer)->WriteEpoch({0, 117, 0.9, 0.6, 0.8125, 12.5}).ok());
  absl::StatusOr<std::string> plot = (*writer)->Finish();
  ASSERT_TRUE(plot.ok()) << plot.status();
  EXPECT_EQ(*plot, TempPath("run1.svg"));

  const std::string text = ReadWholeFile(path).value();
  EXPECT_EQ(text,
            "{\"epoch\":0,\"loss\":1.25,\"lr\":0.08,\"samples_per_s\":2410.5,\"step\":50,\"type\":\"step\"}\n"
            "{\"epoch\":0,\"loss\":0.75,\"lr\":0.07,\"samples_per_s\":2500.0,\"step\":100,\"type\":\"step\"}\n"
            "{\"epoch\":0,\"step\":117,\"test_accuracy\":0.8125,\"test_loss\":0.6,\"time_s\":12.5,\"train_loss\":0.9,"
            "\"type\":\"epoch\"}\n");
  const std::string svg = ReadWholeFile(*plot).value();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("train loss"), std::string::npos);
  EXPECT_NE(svg.find("Test accuracy"), std::string::npos);
}

TEST(MetricsWriter, AppendKeepsEarlierRecordsAndLaterOnesWinInThePlot) {
  const std::string path = TempPath("resumed.jsonl");
  {
    auto w = MetricsWriter::Open(path, false).value();
    ASSERT_TRUE(w->WriteStep({10, 0, 2.0, 0.1, 1}).ok());
    ASSERT_TRUE(w->WriteStep({20, 0, 1.5, 0.1, 1}).ok());
  }
  {
    auto w = MetricsWriter::Open(path, true).value();
    ASSERT_TRUE(w->WriteStep({20, 0, 1.4, 0.1, 1}).ok());  // logged again after a resume
    ASSERT_TRUE(w->WriteStep({30, 0, 1.0, 0.1, 1}).ok());
    ASSERT_TRUE(w->Finish().ok());
  }
  const std::string text = ReadWholeFile(path).value();
  EXPECT_EQ(Count(text, "\n"), 4);
  // Three distinct steps: the train-loss polyline has three points.
  const std::string svg = PlotMetrics(text + "{\"torn line\n");
  const size_t line = svg.find("stroke=\"#1f77b4\" stroke-width=\"1.5\"");
  ASSERT_NE(line, std::string::npos);
  const size_t start = svg.rfind("points=\"", line);
  EXPECT_EQ(Count(svg.substr(start, line - start), ","), 3) << svg.substr(start, line - start);
}

TEST(MetricsWriter, PlotPathReplacesTheExtension) {
  EXPECT_EQ(PlotPathFor("/a/m.jsonl"), "/a/m.svg");
  EXPECT_EQ(PlotPathFor("m.json"), "m.svg");
  EXPECT_EQ(PlotPathFor("/a/metrics"), "/a/metrics.svg");
}

TEST(SvgPlot, NiceTicksCoverTheRangeWithRoundSteps) {
  const std::vector<double> unit = NiceTicks(0, 1);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * i, 1e-12);
  const std::vector<double> t = NiceTicks(13, 937);
  EXPECT_LE(t.front(), 13);
  EXPECT_GE(t.back(), 937);
  EXPECT_DOUBLE_EQ(t[1] - t[0], 200);
  const std::vector<double> flat = NiceTicks(0.5, 0.5);
  EXPECT_GE(flat.size(), 2u);
  EXPECT_LT(flat.front(), flat.back());
}

TEST(SvgPlot, EscapesLabelsAndDrawsAnEmptyPanel) {
  const std::string svg = RenderSvg({{"a<b & c", "x", "y", {}}}, "t\"q");
  EXPECT_NE(svg.find("a&lt;b &amp; c"), std::string::npos);
  EXPECT_NE(svg.find("t&quot;q"), std::string::npos);
  EXPECT_NE(svg.find("no data"), std::string::npos);
}

}  // namespace
}  // namespace tinyddp::examples
