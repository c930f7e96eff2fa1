// SvgCanvas: the one SVG canvas of the repo. Every picture is drawn with its few elements - rectangles,
// lines, text, polylines, circles - written as text, with XML escaping done once, here: the DDP timeline
// (timeline_svg.h), the cost model's scaling plot (scaling_plot.h) and the training run's loss/accuracy
// plot (examples/internal/svg_plot.h). Plus the number formats and axis ticks the pictures share.
// Part of the tools/timeline wing; it knows nothing of DDP.
#ifndef TINYDDP_TOOLS_TIMELINE_SVG_CANVAS_H_
#define TINYDDP_TOOLS_TIMELINE_SVG_CANVAS_H_

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
    bool light_halo = false;  // a white outline: dark text stays readable where it crosses a bar
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

  /// The document as a standalone file: the XML declaration, then Element(width, height).
  std::string Finish(int width, int height) const;
  /// The <svg> element alone: width x height pixels, white background, everything drawn so far in
  /// order. Also a complete SVG file (the declaration is optional); what an HTML page embeds.
  std::string Element(int width, int height) const;

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
/// Tick positions for an axis showing [lo, hi]: multiples of a step that is 1, 2 or 5 times a power of
/// ten, chosen so that about `target` intervals cover the range; the first tick is at or below lo and
/// the last at or above hi, so they also give the axis its ends. Increasing; at least two.
/// Precondition: lo <= hi, both finite (lo == hi is widened by one unit either side).
std::vector<double> NiceTicks(double lo, double hi, int target = 5);

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_SVG_CANVAS_H_
