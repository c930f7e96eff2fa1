// ScalingPlot: line charts over the number of GPUs (2, 4, ..., 1024 on a log2 axis), side by side, for
// the step cost model's predictions (step_cost_model.h; tools/timeline/ddp_cost_model --plot).
#ifndef TINYDDP_TOOLS_TIMELINE_SCALING_PLOT_H_
#define TINYDDP_TOOLS_TIMELINE_SCALING_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace tinyddp::dist {

struct ScalingSeries {
  std::string label;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (GPUs, value), GPUs > 0
  bool dashed = false;
};

struct ScalingPanel {
  std::string title;
  std::string y_label;
  bool log_y = false;             // a log10 axis (for times that span decades); values must then be > 0
  bool legend_at_bottom = false;  // the legend in the lower left corner instead of the upper left
  std::vector<ScalingSeries> series;
};

/// An SVG document: `title` and `subtitle` over the panels, left to right, each with its legend.
/// Precondition: every panel has a series with at least one point.
std::string RenderScalingSvg(const std::string& title, const std::string& subtitle,
                             const std::vector<ScalingPanel>& panels);

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_SCALING_PLOT_H_
