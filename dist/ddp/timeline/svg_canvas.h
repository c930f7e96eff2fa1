// SvgCanvas: the few SVG elements the timeline (timeline_svg.h) and the cost-model plot
// (step_cost_model_plot.h) are drawn with - rectangles, lines, text, polylines - written as text, with
// XML escaping done once, here; plus the number formats both pictures label things with.
#ifndef TINYDDP_DIST_DDP_TIMELINE_SVG_CANVAS_H_
#define TINYDDP_DIST_DDP_TIMELINE_SVG_CANVAS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tinyddp::dist {

class SvgCanvas {
 public:
  struct TextStyle {
    double size = 12;
    std::string fill = "#222";
    std::string anchor = "start";  // start, middle, end
    bool bold = false;
    bool mono = false;  // a monospace font, for tables
    bool halo = false;  // a dark outline behind the letters: white text stays readable on any bar
    double rotate = 0;  // degrees, about (x, y): -90 reads bottom to top (a y axis's label)
  };

  /// Definitions (patterns, markers) referenced by url(#id) fills.
  void Defs(const std::string& svg) { defs_ += svg; }
  /// A rectangle; `tooltip` becomes its <title> (browsers show it on hover); `extra` is raw attributes.
  void Rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip = "",
            const std::string& extra = "");
  void Line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& dash = "");
  void Text(double x, double y, absl::string_view text, const TextStyle& style);
  void Polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke, double width = 2,
                const std::string& dash = "");
  void Circle(double x, double y, double r, const std::string& fill);

  /// The document: width x height pixels, white background, everything drawn so far in order.
  std::string Finish(int width, int height) const;

 private:
  std::string defs_;
  std::string body_;
};

/// Rough width in pixels of `text` in the sans-serif font at `size` px (for deciding what fits).
double TextWidth(absl::string_view text, double size);
/// "850 us", "3.27 ms", "38.2 ms", "1.24 s".
std::string FormatDurationUs(double us);
/// "512 B", "4.0 KiB", "1.6 MiB", "2.00 GiB"; "?" for a negative count.
std::string FormatBytes(int64_t bytes);
/// Tick positions covering [lo, hi]: multiples of 1, 2 or 5 times a power of ten, about `target`
/// intervals; the first at or below lo, the last at or above hi. Precondition: lo < hi.
std::vector<double> NiceTicks(double lo, double hi, int target);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_TIMELINE_SVG_CANVAS_H_
