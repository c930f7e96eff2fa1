// A hand-written SVG line chart: panels side by side, each with axes, "nice" tick labels, a title and
// polylines (optionally with point markers). Enough to look at a training run's loss and accuracy in any
// browser without Python or a plotting library. Used by metrics_writer.cc. Drawn on the repo's one SVG
// canvas (tools/timeline/svg_canvas.h), the same elements and escaping as the DDP timeline.
#ifndef TINYDDP_EXAMPLES_INTERNAL_SVG_PLOT_H_
#define TINYDDP_EXAMPLES_INTERNAL_SVG_PLOT_H_

#include <string>
#include <utility>
#include <vector>

#include "tools/timeline/svg_canvas.h"

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

/// The axes' ticks: the canvas's (svg_canvas.h), the same on every picture of the repo.
using ::tinyddp::dist::NiceTicks;

/// A complete SVG document with `panels` left to right, each panel_width x panel_height pixels.
/// Non-finite points are skipped; an empty panel gets axes and a "no data" note.
std::string RenderSvg(const std::vector<PlotPanel>& panels, const std::string& title, int panel_width = 480,
                      int panel_height = 340);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_SVG_PLOT_H_
