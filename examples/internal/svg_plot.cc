// SVG line chart: see svg_plot.h. Coordinates: SVG's y grows downwards, so data y maps to
// top + height * (1 - (y - y0) / (y1 - y0)).
#include "examples/internal/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace tinyddp::examples {
namespace {

using Canvas = dist::SvgCanvas;

constexpr int kMarginLeft = 64, kMarginRight = 16, kMarginTop = 36, kMarginBottom = 48;

// A tick label without float noise: 0.30000000000000004 prints as 0.3.
std::string TickLabel(double v) {
  if (std::fabs(v) < 1e-12) v = 0;
  return absl::StrFormat("%.6g", v);
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

void RenderPanel(const PlotPanel& panel, int x0, int y0, int width, int height, Canvas& svg) {
  Range xr, yr;
  for (const PlotSeries& s : panel.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      xr.Add(x);
      yr.Add(y);
    }
  }
  const bool no_data = xr.empty();
  if (no_data) xr = {0, 1}, yr = {0, 1};
  const std::vector<double> xt = NiceTicks(xr.lo, xr.hi), yt = NiceTicks(yr.lo, yr.hi);
  const double ax0 = xt.front(), ax1 = xt.back(), ay0 = yt.front(), ay1 = yt.back();
  const int left = x0 + kMarginLeft, top = y0 + kMarginTop;
  const int w = width - kMarginLeft - kMarginRight, h = height - kMarginTop - kMarginBottom;
  auto px = [&](double x) { return left + w * (x - ax0) / (ax1 - ax0); };
  auto py = [&](double y) { return top + h * (1 - (y - ay0) / (ay1 - ay0)); };

  svg.Text(left + w / 2, y0 + 22, panel.title, {.size = 15, .anchor = "middle"});
  // Grid and tick labels.
  for (double t : xt) {
    svg.Line(px(t), top, px(t), top + h, "#e5e5e5");
    svg.Text(px(t), top + h + 16, TickLabel(t), {.size = 11, .anchor = "middle"});
  }
  for (double t : yt) {
    svg.Line(left, py(t), left + w, py(t), "#e5e5e5");
    svg.Text(left - 6, py(t) + 4, TickLabel(t), {.size = 11, .anchor = "end"});
  }
  // Axes and their labels.
  svg.Polyline({{left, top}, {left, top + h}, {left + w, top + h}}, "#333", 1);
  svg.Text(left + w / 2, top + h + 36, panel.x_label, {.size = 12, .anchor = "middle"});
  svg.Text(x0 + 16, top + h / 2, panel.y_label, {.size = 12, .anchor = "middle", .rotate = -90});
  if (no_data) svg.Text(left + w / 2, top + h / 2, "no data", {.size = 14, .fill = "#999", .anchor = "middle"});
  // The series, then the legend (top right, one row per series).
  int legend_row = 0;
  for (const PlotSeries& s : panel.series) {
    std::vector<std::pair<double, double>> points;
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) points.emplace_back(px(x), py(y));
    }
    svg.Polyline(points, s.color, 1.5);
    if (s.markers) {
      for (const auto& [x, y] : points) svg.Circle(x, y, 3, s.color);
    }
    const int ly = top + 14 + 16 * legend_row++;
    svg.Line(left + w - 24, ly - 4, left + w - 6, ly - 4, s.color, 2);
    svg.Text(left + w - 30, ly, s.label, {.size = 11, .anchor = "end"});
  }
}

}  // namespace

std::string RenderSvg(const std::vector<PlotPanel>& panels, const std::string& title, int panel_width,
                      int panel_height) {
  const int width = panel_width * static_cast<int>(std::max<size_t>(panels.size(), 1));
  const int height = panel_height + 28;
  Canvas svg;
  svg.Text(width / 2, 20, title, {.size = 16, .anchor = "middle", .bold = true});
  for (size_t i = 0; i < panels.size(); ++i) {
    RenderPanel(panels[i], static_cast<int>(i) * panel_width, 28, panel_width, panel_height, svg);
  }
  return svg.Element(width, height);
}

}  // namespace tinyddp::examples
