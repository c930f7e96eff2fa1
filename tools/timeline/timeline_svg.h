// The picture of a DDP trace: an SVG timeline any browser shows offline, one lane per rank and stream.
// It is what one looks for in Perfetto, drawn without it: when each rank computed (forward, backward,
// optimizer), when each bucket's all_reduce ran (labelled with its bucket, bytes and path), and the
// communication that no computation hid, highlighted as *exposed* (step_timeline.h says how that is
// estimated). ddp_mlp and ddp_step_bench write one beside every --trace=FILE.json (FILE.svg), and
// tools/timeline/trace_svg draws one for any trace file.
//
//   rank 0  compute  [forward][backward ............ |waits][opt]     <- backward's own work, then its wait
//           comm                 [b0 1 MiB][b1 1.6 MiB  ]            <- one bar per bucket's all_reduce
//                                              ^^^^^^^ exposed        <- communication beside no compute
//
// Below the lanes, a legend and a table per bucket: bytes, path, time on each rank, and the algbw and
// busbw those give (docs/collectives.md explains the two).
//
// A ZeRO-3 trace (dist/parallel/zero/fully_sharded.h) draws the same way, with what it records instead:
// each layer's forward and backward as parts of the forward and backward bars (drawn lighter where the
// rank waits between them), and each layer's all_gather and reduce_scatter on the communication lane
// ("AG L1", "RS L1"), one table row per collective and layer (docs/images/zero3_timeline.svg).
//
// A tensor-parallel trace (dist/parallel/tensor/tensor_parallel_mlp.h) draws its layers the same way, and on
// the communication lane each all_reduce of a layer's output ("g L1", forward) or of its input gradient
// ("f L2", backward), labelled beside its bar when the bar is too narrow; its own legend, table (by layer)
// and notes (docs/images/tp_timeline.svg).
#ifndef TINYDDP_TOOLS_TIMELINE_TIMELINE_SVG_H_
#define TINYDDP_TOOLS_TIMELINE_TIMELINE_SVG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/timeline/step_timeline.h"

namespace tinyddp::dist {

struct TimelineSvgOptions {
  std::string title = "DDP step timeline";
  /// One line under the title: the trace file, or the command that made it.
  std::string source;
  int width = 1400;  // pixels; the height follows from the number of ranks and buckets
  /// What args.i of a collective numbers: "bucket" (DDP: labels b0, b1, ...) or "layer" (ZeRO-3, tensor
  /// parallelism: L0, ...).
  std::string comm_unit = "bucket";
};

/// The whole SVG document for `timeline`. Precondition: timeline.steps is not empty (BuildStepTimeline
/// guarantees it).
std::string RenderTimelineSvg(const StepTimeline& timeline, const TimelineSvgOptions& options = {});

/// Where the picture of a trace goes: FILE.json -> FILE.svg, any other name -> name + ".svg".
std::string SvgPathFor(const std::string& trace_path);

struct TraceSvgOptions {
  int last_steps = 2;                 // steps drawn: the last ones of the trace
  std::vector<int64_t> bucket_bytes;  // see StepTimelineOptions::bucket_bytes
  std::string title = "DDP step timeline";
  std::string source;    // default: "trace: <trace_path>"
  std::string svg_path;  // default: SvgPathFor(trace_path)
  std::string comm_unit = "bucket";  // see TimelineSvgOptions::comm_unit
};

/// Reads the trace at `trace_path`, draws its last steps and writes the SVG. Returns the SVG's path;
/// errors name the file (unreadable trace, no spans, an SVG that cannot be written).
absl::StatusOr<std::string> WriteTimelineSvg(const std::string& trace_path, const TraceSvgOptions& options = {});

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_TIMELINE_SVG_H_
