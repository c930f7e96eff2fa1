// SVG line chart: see svg_plot.h. Coordinates: SVG's y grows downwards, so data y maps to
// top + height * (1 - (y - y0) / (y1 - y0)).
#include "examples/internal/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/xml_escape.h"

namespace tinyddp::examples {
namespace {

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

void RenderPanel(const PlotPanel& panel, int x0, int y0, int width, int height, std::string& svg) {
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

  absl::StrAppendFormat(&svg, "<g>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n",
                        left + w / 2, y0 + 22, XmlEscape(panel.title));
  // Grid and tick labels.
  for (double t : xt) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e5e5e5\"/>"
                          "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n",
                          px(t), top, px(t), top + h, px(t), top + h + 16, TickLabel(t));
  }
  for (double t : yt) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
                          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n",
                          left, py(t), left + w, py(t), left - 6, py(t) + 4, TickLabel(t));
  }
  // Axes and their labels.
  absl::StrAppendFormat(&svg, "<polyline points=\"%d,%d %d,%d %d,%d\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
                        left, top + h, left + w, top + h);
  absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">%s</text>\n",
                        left + w / 2, top + h + 36, XmlEscape(panel.x_label));
  absl::StrAppendFormat(&svg,
                        "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\" "
                        "transform=\"rotate(-90 %d %d)\">%s</text>\n",
                        x0 + 16, top + h / 2, x0 + 16, top + h / 2, XmlEscape(panel.y_label));
  if (no_data) {
    absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#999\">no data</text>\n",
                          left + w / 2, top + h / 2);
  }
  // The series, then the legend (top right, one row per series).
  int legend_row = 0;
  for (const PlotSeries& s : panel.series) {
    std::string points;
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) absl::StrAppendFormat(&points, "%.1f,%.1f ", px(x), py(y));
    }
    absl::StrAppendFormat(&svg, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", points,
                          s.color);
    if (s.markers) {
      for (const auto& [x, y] : s.points) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(x), py(y), s.color);
      }
    }
    const int ly = top + 14 + 16 * legend_row++;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
                          "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
                          left + w - 24, ly - 4, left + w - 6, ly - 4, s.color, left + w - 30, ly, XmlEscape(s.label));
  }
  svg += "</g>\n";
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) lo -= 1, hi += 1;
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last + 0.5; k += 1) ticks.push_back(k * step);
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string RenderSvg(const std::vector<PlotPanel>& panels, const std::string& title, int panel_width,
                      int panel_height) {
  const int width = panel_width * static_cast<int>(std::max<size_t>(panels.size(), 1));
  const int height = panel_height + 28;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"20\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">%s</text>\n",
      width, height, width, height, width / 2, XmlEscape(title));
  for (size_t i = 0; i < panels.size(); ++i) {
    RenderPanel(panels[i], static_cast<int>(i) * panel_width, 28, panel_width, panel_height, svg);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tinyddp::examples
