// trace_svg: the SVG timeline of any tinyddp trace file (tools/timeline/timeline_svg.h), for traces
// made elsewhere (the GPU machine, docs/traces/) or to draw other steps than the program drew.
//
//   bazel-bin/tools/timeline/trace_svg --trace=docs/traces/ddp_medium_2xh200_ce.json --out=/tmp/medium.svg
//       --dims=1024,4096,4096,4096,4096,1024      (the MLP's layer sizes: the buckets' bytes)
//   bazel-bin/tools/timeline/trace_svg --trace=run.json --steps=3 --bucket_bytes=1069096,1609728
//
// The picture goes to --out, by default beside the trace (FILE.json -> FILE.svg). Prints its path.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "tools/timeline/step_cost_model.h"
#include "tools/timeline/timeline_svg.h"

ABSL_FLAG(std::string, trace, "", "the trace to draw (--trace of ddp_mlp or ddp_step_bench); required");
ABSL_FLAG(std::string, out, "", "where to write the SVG (default: the trace's name with .svg)");
ABSL_FLAG(int32_t, steps, 2, "how many steps to draw: the last ones of the trace");
ABSL_FLAG(std::string, dims, "", "layer sizes of the traced MLP (784,512,512,10), to label buckets with bytes");
ABSL_FLAG(double, first_bucket_mb, 1, "with --dims: the run's first bucket limit");
ABSL_FLAG(double, bucket_cap_mb, 25, "with --dims: the run's bucket cap");
ABSL_FLAG(std::string, bucket_bytes, "", "bytes of each bucket, comma separated (instead of --dims)");
ABSL_FLAG(std::string, title, "DDP step timeline", "the picture's title");
ABSL_FLAG(std::string, source, "", "the line under the title (default: \"trace: FILE\")");

namespace {

bool ParseList(const std::string& text, std::vector<int64_t>& out) {
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) return false;
    out.push_back(v);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<tinyddp::FlagGroup> flags = {
      {"flags",
       {"trace", "out", "steps", "dims", "first_bucket_mb", "bucket_cap_mb", "bucket_bytes", "title", "source"}}};
  absl::StatusOr<tinyddp::CommandLine> command_line =
      tinyddp::ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!command_line.ok()) {
    std::fprintf(stderr, "trace_svg: %s (--help lists the flags)\n",
                 std::string(command_line.status().message()).c_str());
    return 2;
  }
  const std::string trace = absl::GetFlag(FLAGS_trace);
  if (command_line->help || !command_line->rest.empty() || trace.empty()) {
    std::fprintf(command_line->help ? stdout : stderr, "usage: trace_svg --trace=FILE.json [flags]\n\n%s",
                 tinyddp::FlagsHelp(flags).c_str());
    return command_line->help ? 0 : 2;
  }
  tinyddp::dist::TraceSvgOptions options;
  options.last_steps = absl::GetFlag(FLAGS_steps);
  options.svg_path = absl::GetFlag(FLAGS_out);
  options.title = absl::GetFlag(FLAGS_title);
  options.source = absl::GetFlag(FLAGS_source);
  std::vector<int64_t> dims;
  if (!ParseList(absl::GetFlag(FLAGS_bucket_bytes), options.bucket_bytes) ||
      !ParseList(absl::GetFlag(FLAGS_dims), dims) || options.last_steps < 1) {
    std::fprintf(stderr, "trace_svg: --steps must be positive, --dims and --bucket_bytes positive integers\n");
    return 2;
  }
  if (options.bucket_bytes.empty() && dims.size() >= 2) {
    constexpr double kMiB = 1 << 20;
    options.bucket_bytes = tinyddp::dist::BucketBytesFor(
        tinyddp::dist::MlpGradients(dims), static_cast<int64_t>(absl::GetFlag(FLAGS_first_bucket_mb) * kMiB),
        static_cast<int64_t>(absl::GetFlag(FLAGS_bucket_cap_mb) * kMiB));
  }
  absl::StatusOr<std::string> svg = tinyddp::dist::WriteTimelineSvg(trace, options);
  if (!svg.ok()) {
    std::fprintf(stderr, "trace_svg: %s\n", std::string(svg.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", svg->c_str());
  return 0;
}
