// The SVG helpers (svg_canvas.h) and the scaling plot (scaling_plot.h): escaping, the number formats the
// pictures are labelled with, tick choice, and a plot that holds one line per series.
#include "tools/timeline/svg_canvas.h"

#include <string>

#include "absl/strings/match.h"
#include "tools/timeline/scaling_plot.h"
#include "gtest/gtest.h"

namespace tinyddp::dist {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Formats, PickAUnitAReaderTakesInAtAGlance) {
  EXPECT_EQ(FormatDurationUs(87), "87 us");
  EXPECT_EQ(FormatDurationUs(2488.6), "2.49 ms");
  EXPECT_EQ(FormatDurationUs(35512), "35.5 ms");
  EXPECT_EQ(FormatDurationUs(1.24e6), "1.24 s");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(20520), "20.0 KiB");
  EXPECT_EQ(FormatBytes(1613864), "1.5 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(FormatBytes(-1), "?");
}

TEST(NiceTicks, CoverTheRangeWithRoundSteps) {
  EXPECT_EQ(NiceTicks(0, 73000, 12), (std::vector<double>{0, 10000, 20000, 30000, 40000, 50000, 60000, 70000, 80000}));
  EXPECT_EQ(NiceTicks(3, 11, 4), (std::vector<double>{2, 4, 6, 8, 10, 12}));
}

TEST(SvgCanvas, WritesOneDocumentWithItsDefinitionsAndElementsInOrder) {
  SvgCanvas svg;
  svg.Defs("<pattern id=\"p\"/>");
  svg.Rect(1, 2, 3, 4, "red", "hover <me>");
  svg.Text(5, 6, "a & b", {.size = 11, .mono = true});
  const std::string doc = svg.Finish(300, 200);
  EXPECT_TRUE(absl::StrContains(doc, "width=\"300\" height=\"200\" viewBox=\"0 0 300 200\""));
  EXPECT_LT(doc.find("<defs>"), doc.find("<rect x=\"1.0\""));
  EXPECT_TRUE(absl::StrContains(doc, "<title>hover &lt;me&gt;</title>"));
  EXPECT_TRUE(absl::StrContains(doc, "xml:space=\"preserve\">a &amp; b</text>"));
}

TEST(RenderScalingSvg, DrawsALineAndALegendEntryPerSeriesInEveryPanel) {
  ScalingPanel steps{"step", "ms", /*log_y=*/true, false, {}};
  steps.series.push_back({"ddp", "#4e79a7", {{2, 2.5}, {64, 4.9}, {1024, 45}}, false});
  steps.series.push_back({"compute <alone>", "#59a14f", {{2, 2.5}, {1024, 2.5}}, true});
  ScalingPanel efficiency{"efficiency", "%", false, true, {{"ddp", "#4e79a7", {{2, 100}, {1024, 5}}, false}}};
  const std::string svg = RenderScalingSvg("title", "subtitle", {steps, efficiency});
  EXPECT_EQ(Count(svg, "<polyline"), 3);
  EXPECT_EQ(Count(svg, "stroke-dasharray=\"6,4\""), 2);  // the dashed series and its legend swatch
  EXPECT_TRUE(absl::StrContains(svg, ">compute &lt;alone&gt;<"));
  EXPECT_TRUE(absl::StrContains(svg, ">1024<"));  // the log2 axis reaches the last GPU count
}

}  // namespace
}  // namespace tinyddp::dist
