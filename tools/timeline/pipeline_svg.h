// PipelineSvg: the picture every pipeline explainer draws - ranks down, time across, each microbatch's forward
// (F) and backward (B; zero-bubble: B and W) as a bar, the bubbles shaded - drawn from a real step's measured compute intervals
// (dist/parallel/pipeline/bubble.h: GatherComputes), not from a model. Part of the tools/timeline wing. Several
// panels (GPipe, 1F1B, interleaved on the same work) share one time scale, so their lengths compare.
#ifndef TINYDDP_TOOLS_TIMELINE_PIPELINE_SVG_H_
#define TINYDDP_TOOLS_TIMELINE_PIPELINE_SVG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/parallel/pipeline/pipeline_runtime.h"

namespace tinyddp::dist {

struct PipelinePanel {
  std::string title;  // "1f1b, p=2, m=8"
  std::vector<std::vector<pipeline::ComputeRecord>> computes;  // by pipeline rank
  double formula = -1;  // the formula's idle fraction, shown beside the measured one; < 0: none
};

/// The panels stacked, one time scale (the longest panel's window), each rank's idle fraction at its right.
std::string PipelineSvg(const std::vector<PipelinePanel>& panels, const std::string& caption = "");
/// One panel, written to `path`. The file's error, if any.
absl::Status WritePipelineSvg(const std::vector<std::vector<pipeline::ComputeRecord>>& computes,
                              const std::string& path, const std::string& title);

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_PIPELINE_SVG_H_
