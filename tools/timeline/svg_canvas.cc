// SVG text building (tools/timeline/svg_canvas.h).
#include "tools/timeline/svg_canvas.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/xml_escape.h"

namespace tinyddp::dist {
namespace {

constexpr char kSans[] = "DejaVu Sans, Liberation Sans, Arial, Helvetica, sans-serif";
constexpr char kMono[] = "DejaVu Sans Mono, Liberation Mono, Consolas, monospace";

std::string Num(double v) { return absl::StrFormat("%.1f", v); }

}  // namespace

double TextWidth(absl::string_view text, double size) {
  // DejaVu Sans averages a little over half an em per character for this kind of text.
  return 0.58 * size * static_cast<double>(text.size());
}

std::string FormatDurationUs(double us) {
  if (us < 1000) return absl::StrFormat("%.0f us", us);
  if (us < 10e3) return absl::StrFormat("%.2f ms", us / 1e3);
  if (us < 1e6) return absl::StrFormat("%.1f ms", us / 1e3);
  return absl::StrFormat("%.2f s", us / 1e6);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "?";
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (bytes >= (int64_t{1} << 10)) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrCat(bytes, " B");
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) lo -= 1, hi += 1;
  const double raw = (hi - lo) / std::max(target, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  // Whole multiples k * step (not a running sum, which gathers float noise: 0.6000000000000001).
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last + 0.5; k += 1) ticks.push_back(k * step);
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

void SvgCanvas::Rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip,
                     const std::string& extra) {
  absl::StrAppend(&body_, "<rect x=\"", Num(x), "\" y=\"", Num(y), "\" width=\"", Num(std::max(w, 0.0)), "\" height=\"",
                  Num(h), "\" fill=\"", fill, "\"", extra.empty() ? "" : " ", extra);
  if (tooltip.empty()) {
    body_ += "/>\n";
  } else {
    absl::StrAppend(&body_, "><title>", XmlEscape(tooltip), "</title></rect>\n");
  }
}

void SvgCanvas::Line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
                     const std::string& dash) {
  absl::StrAppend(&body_, "<line x1=\"", Num(x1), "\" y1=\"", Num(y1), "\" x2=\"", Num(x2), "\" y2=\"", Num(y2),
                  "\" stroke=\"", stroke, "\" stroke-width=\"", Num(width), "\"",
                  dash.empty() ? "" : absl::StrCat(" stroke-dasharray=\"", dash, "\""), "/>\n");
}

void SvgCanvas::Text(double x, double y, absl::string_view text, const TextStyle& style) {
  absl::StrAppend(
      &body_, "<text x=\"", Num(x), "\" y=\"", Num(y), "\" font-family=\"", style.mono ? kMono : kSans,
      "\" font-size=\"", Num(style.size), "\" fill=\"", style.fill, "\" text-anchor=\"", style.anchor, "\"",
      style.bold ? " font-weight=\"bold\"" : "", style.mono ? " xml:space=\"preserve\"" : "",
      style.halo ? " stroke=\"#000\" stroke-opacity=\"0.45\" stroke-width=\"2.5\" paint-order=\"stroke\"" : "",
      style.light_halo ? " stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\"" : "",
      style.rotate != 0 ? absl::StrCat(" transform=\"rotate(", Num(style.rotate), " ", Num(x), " ", Num(y), ")\"") : "",
      ">", XmlEscape(text), "</text>\n");
}

void SvgCanvas::Polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke, double width,
                         const std::string& dash) {
  std::string list;
  for (const auto& [x, y] : points) absl::StrAppend(&list, list.empty() ? "" : " ", Num(x), ",", Num(y));
  absl::StrAppend(&body_, "<polyline points=\"", list, "\" fill=\"none\" stroke=\"", stroke, "\" stroke-width=\"",
                  Num(width), "\"", dash.empty() ? "" : absl::StrCat(" stroke-dasharray=\"", dash, "\""), "/>\n");
}

void SvgCanvas::Circle(double x, double y, double r, const std::string& fill) {
  absl::StrAppend(&body_, "<circle cx=\"", Num(x), "\" cy=\"", Num(y), "\" r=\"", Num(r), "\" fill=\"", fill, "\"/>\n");
}

std::string SvgCanvas::Finish(int width, int height) const {
  return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", Element(width, height));
}

std::string SvgCanvas::Element(int width, int height) const {
  return absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"",
                      width, "\" height=\"", height, "\" viewBox=\"0 0 ", width, " ", height, "\">\n",
                      defs_.empty() ? "" : absl::StrCat("<defs>\n", defs_, "</defs>\n"), "<rect width=\"", width,
                      "\" height=\"", height, "\" fill=\"white\"/>\n", body_, "</svg>\n");
}

}  // namespace tinyddp::dist
