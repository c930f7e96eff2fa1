// Drawing the scaling panels (tools/timeline/scaling_plot.h) with SvgCanvas.
#include "tools/timeline/scaling_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/timeline/svg_canvas.h"

namespace tinyddp::dist {
namespace {

constexpr double kPanelWidth = 560, kPanelHeight = 380;
constexpr double kMarginLeft = 75, kMarginRight = 20, kMarginTop = 40, kMarginBottom = 50;

std::string YLabel(double v) {
  if (v >= 100) return absl::StrFormat("%.0f", v);
  if (v >= 1) return absl::StrFormat("%.4g", v);
  return absl::StrFormat("%.2g", v);
}

void DrawPanel(SvgCanvas& svg, const ScalingPanel& panel, double left, double top) {
  const double x0 = left + kMarginLeft, x1 = left + kPanelWidth - kMarginRight;
  const double y0 = top + kPanelHeight - kMarginBottom, y1 = top + kMarginTop;
  double gmin = 1e300, gmax = 0, vmin = 1e300, vmax = -1e300;
  for (const ScalingSeries& s : panel.series) {
    for (const auto& [g, v] : s.points) {
      gmin = std::min(gmin, g), gmax = std::max(gmax, g);
      vmin = std::min(vmin, v), vmax = std::max(vmax, v);
    }
  }
  const double lg0 = std::log2(gmin), lg1 = std::max(std::log2(gmax), lg0 + 1);
  auto X = [&](double g) { return x0 + (x1 - x0) * (std::log2(g) - lg0) / (lg1 - lg0); };
  std::vector<double> ticks;
  if (panel.log_y) {
    const double lo = std::floor(std::log10(std::max(vmin, 1e-12))), hi = std::ceil(std::log10(vmax));
    for (double e = lo; e <= hi; e += 1) {
      for (double m : {1.0, 2.0, 5.0}) ticks.push_back(m * std::pow(10.0, e));
    }
    ticks.erase(std::remove_if(ticks.begin(), ticks.end(),
                               [&](double t) { return t < std::pow(10.0, lo) || t > std::pow(10.0, hi); }),
                ticks.end());
  } else {
    ticks = NiceTicks(std::min(0.0, vmin), vmax, 5);
  }
  const double t0 = ticks.front(), t1 = ticks.back();
  auto Y = [&](double v) {
    if (panel.log_y) return y0 - (y0 - y1) * (std::log10(v) - std::log10(t0)) / (std::log10(t1) - std::log10(t0));
    return y0 - (y0 - y1) * (v - t0) / (t1 - t0);
  };
  svg.Text(left + kPanelWidth / 2, top + 20, panel.title, {.size = 14, .anchor = "middle", .bold = true});
  for (double t : ticks) {
    svg.Line(x0, Y(t), x1, Y(t), "#e6e6e6", 1);
    svg.Text(x0 - 6, Y(t) + 4, YLabel(t), {.size = 11, .fill = "#555", .anchor = "end"});
  }
  for (double lg = std::ceil(lg0); lg <= lg1 + 1e-9; lg += 1) {
    const double g = std::pow(2.0, lg);
    svg.Line(X(g), y0, X(g), y1, "#f0f0f0", 1);
    svg.Text(X(g), y0 + 16, absl::StrFormat("%.0f", g), {.size = 11, .fill = "#555", .anchor = "middle"});
  }
  svg.Line(x0, y0, x1, y0, "#777", 1);
  svg.Line(x0, y0, x0, y1, "#777", 1);
  svg.Text((x0 + x1) / 2, y0 + 36, "GPUs (8 per node)", {.size = 12, .fill = "#333", .anchor = "middle"});
  svg.Text(left + 18, (y0 + y1) / 2, panel.y_label, {.size = 12, .fill = "#333", .anchor = "middle", .rotate = -90});
  double legend_y = panel.legend_at_bottom ? y0 - 10 - 17.0 * (panel.series.size() - 1) : y1 + 4;
  for (const ScalingSeries& s : panel.series) {
    std::vector<std::pair<double, double>> points;
    for (const auto& [g, v] : s.points) {
      if (panel.log_y && v <= 0) continue;
      points.emplace_back(X(g), Y(v));
    }
    svg.Polyline(points, s.color, 2.2, s.dashed ? "6,4" : "");
    for (const auto& [x, y] : points) svg.Circle(x, y, 2.6, s.color);
  }
  for (const ScalingSeries& s : panel.series) {  // the legend, over the lines
    svg.Rect(x0 + 8, legend_y - 8, TextWidth(s.label, 11.5) + 40, 16, "white", "", "fill-opacity=\"0.85\"");
    svg.Line(x0 + 12, legend_y, x0 + 34, legend_y, s.color, 2.5, s.dashed ? "6,4" : "");
    svg.Text(x0 + 40, legend_y + 4, s.label, {.size = 11.5});
    legend_y += 17;
  }
}

}  // namespace

std::string RenderScalingSvg(const std::string& title, const std::string& subtitle,
                             const std::vector<ScalingPanel>& panels) {
  SvgCanvas svg;
  svg.Text(16, 26, title, {.size = 17, .bold = true});
  svg.Text(16, 46, subtitle, {.size = 12, .fill = "#555"});
  for (size_t i = 0; i < panels.size(); ++i) DrawPanel(svg, panels[i], 10 + i * kPanelWidth, 56);
  return svg.Finish(static_cast<int>(20 + panels.size() * kPanelWidth), static_cast<int>(56 + kPanelHeight + 10));
}

}  // namespace tinyddp::dist
