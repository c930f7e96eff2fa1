// A hand-written SVG line chart: panels side by side, each with axes, "nice" tick labels, a title and
// polylines (optionally with point markers). Enough to look at a training run's loss and accuracy in any
// browser without Python or a plotting library. Used by metrics_writer.cc.
#ifndef TINYDDP_EXAMPLES_INTERNAL_SVG_PLOT_H_
#define TINYDDP_EXAMPLES_INTERNAL_SVG_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace tinyddp::examples {

struct PlotSeries {
  std::string label;                              // shown in the panel's legend
  std::string color;                              // any SVG color ("#1f77b4")
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
  bool markers = false;                           // a dot at each point (for sparse series)
};

struct PlotPanel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
};

/// Tick positions for an axis showing [lo, hi]: multiples of a step that is 1, 2 or 5 times a power of
/// ten, chosen so that about `target` intervals cover the range; the first tick is at or below lo and
/// the last at or above hi, so they also give the axis its ends. Increasing; at least two.
/// Precondition: lo <= hi, both finite (lo == hi is widened by one unit either side).
std::vector<double> NiceTicks(double lo, double hi, int target = 5);

/// A complete SVG document with `panels` left to right, each panel_width x panel_height pixels.
/// Non-finite points are skipped; an empty panel gets axes and a "no data" note.
std::string RenderSvg(const std::vector<PlotPanel>& panels, const std::string& title, int panel_width = 480,
                      int panel_height = 340);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_SVG_PLOT_H_
