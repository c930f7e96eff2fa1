// The pipeline picture (pipeline_svg.h).
#include "tools/timeline/pipeline_svg.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dist/parallel/pipeline/bubble.h"
#include "tools/timeline/svg_canvas.h"

namespace tinyddp::dist {
namespace {

constexpr double kLeft = 70, kRight = 150, kRowHeight = 26, kRowGap = 6, kWidth = 1100;

// Forwards blue, backwards green; an interleaved rank's second chunk darker, so the two stages it holds differ.
std::string ColorOf(const pipeline::ComputeRecord& c, int ranks) {
  const int chunk = c.action.stage / std::max(ranks, 1);
  static const char* const kForward[] = {"#6baed6", "#2171b5", "#08306b"};
  static const char* const kBackward[] = {"#74c476", "#238b45", "#00441b"};
  if (c.action.kind == pipeline::ActionKind::kWeight) return "#fd8d3c";  // zb's deferred weight gradients
  return c.action.kind == pipeline::ActionKind::kForward ? kForward[chunk % 3] : kBackward[chunk % 3];
}

}  // namespace

std::string PipelineSvg(const std::vector<PipelinePanel>& panels, const std::string& caption) {
  double longest = 1;
  for (const PipelinePanel& panel : panels) longest = std::max(longest, pipeline::IdleOf(panel.computes).window_us);
  const double scale = (kWidth - kLeft - kRight) / longest;
  SvgCanvas svg;
  svg.Defs(R"svg(<pattern id="bubble" width="6" height="6" patternUnits="userSpaceOnUse" )svg"
           R"svg(patternTransform="rotate(45)"><rect width="6" height="6" fill="#f4f4f4"/>)svg"
           R"svg(<line x1="0" y1="0" x2="0" y2="6" stroke="#c8c8c8" stroke-width="3"/></pattern>)svg");
  double y = 28;
  if (!caption.empty()) {
    svg.Text(kLeft, y - 8, caption, {.size = 14, .bold = true});
    y += 14;
  }
  for (const PipelinePanel& panel : panels) {
    const pipeline::StepIdle idle = pipeline::IdleOf(panel.computes);
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const auto& rank : panel.computes) {
      for (const auto& c : rank) first = std::min(first, c.start_us);
    }
    std::string title = absl::StrFormat("%s: %s, measured mean idle %.1f%%", panel.title,
                                        FormatDurationUs(idle.window_us), 100 * idle.mean_idle);
    if (panel.formula >= 0) absl::StrAppend(&title, absl::StrFormat(", formula %.1f%%", 100 * panel.formula));
    svg.Text(kLeft, y + 12, title, {.size = 13, .bold = true});
    y += 20;
    const int ranks = static_cast<int>(panel.computes.size());
    for (int r = 0; r < ranks; ++r) {
      svg.Text(kLeft - 8, y + kRowHeight / 2 + 4, absl::StrCat("rank ", r), {.size = 12, .anchor = "end"});
      // The whole window shaded: what no bar covers is the bubble (waiting for a neighbour, filling, draining).
      svg.Rect(kLeft, y, idle.window_us * scale, kRowHeight, "url(#bubble)", "idle");
      for (const pipeline::ComputeRecord& c : panel.computes[r]) {
        const double x = kLeft + static_cast<double>(c.start_us - first) * scale;
        const double w = std::max(1.0, static_cast<double>(c.end_us - c.start_us) * scale);
        const char* letter = c.action.kind == pipeline::ActionKind::kForward    ? "F"
                             : c.action.kind == pipeline::ActionKind::kBackward ? "B"
                                                                                : "W";
        const std::string name = absl::StrCat(letter, c.action.microbatch);
        svg.Rect(x, y, w, kRowHeight, ColorOf(c, ranks),
                 absl::StrFormat("stage %d %s: %s", c.action.stage, name, FormatDurationUs(c.end_us - c.start_us)),
                 R"(stroke="white" stroke-width="0.5")");
        if (TextWidth(name, 10) + 2 < w) {
          svg.Text(x + w / 2, y + kRowHeight / 2 + 4, name, {.size = 10, .fill = "white", .anchor = "middle"});
        }
      }
      svg.Text(kLeft + idle.window_us * scale + 8, y + kRowHeight / 2 + 4,
               absl::StrFormat("idle %.1f%%", 100 * idle.idle[r]), {.size = 12});
      y += kRowHeight + kRowGap;
    }
    y += 18;
  }
  svg.Text(kLeft, y, "blue: forward (F k: microbatch k), green: backward (B k; zb: its input gradient), orange: zb's "
                     "weight gradient (W k); darker: a rank's second stage (interleaved); hatched: idle, the bubble",
           {.size = 11, .fill = "#555"});
  return svg.Finish(static_cast<int>(kWidth), static_cast<int>(y + 14));
}

absl::Status WritePipelineSvg(const std::vector<std::vector<pipeline::ComputeRecord>>& computes,
                              const std::string& path, const std::string& title) {
  std::ofstream out(path);
  out << PipelineSvg({{title, computes, -1}});
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("could not write ", path));
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
