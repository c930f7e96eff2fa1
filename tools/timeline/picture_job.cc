// RunPictureJob (tools/timeline/picture_job.h).
#include "tools/timeline/picture_job.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "dist/launch/spawn.h"

// Empty or zero: the generator's default (PictureDefaults).
ABSL_FLAG(std::string, out, "", "where the SVG goes (default: the generator's, under /tmp)");
ABSL_FLAG(std::string, trace, "", "where the Chrome trace goes (default: beside --out, .json)");
ABSL_FLAG(std::string, dims, "", "the MLP's layer sizes, comma separated (default: the generator's)");
ABSL_FLAG(int64_t, batch, 0, "examples per rank and step (default: the generator's)");
ABSL_FLAG(int32_t, steps, 4,
          "steps traced, after 3 untraced ones (the picture shows the last 2; ZeRO-3's, the last one)");

namespace tinyddp {
namespace {

// A path as the user typed it: under `bazel run` relative to where they typed it, not the runfiles.
std::string UserPath(const std::string& path) {
  const char* typed_in = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || typed_in == nullptr) return path;
  return absl::StrCat(typed_in, "/", path);
}

std::string TracePathFor(const std::string& svg) {
  const bool is_svg = svg.size() > 4 && svg.substr(svg.size() - 4) == ".svg";
  return (is_svg ? svg.substr(0, svg.size() - 4) : svg) + ".json";
}

}  // namespace

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int RunPictureJob(int argc, char** argv, const PictureDefaults& defaults,
                  const std::function<absl::Status(const PictureJob&)>& draw) {
  const std::vector<FlagGroup> flags = {{"flags", {"out", "trace", "dims", "batch", "steps"}}};
  absl::StatusOr<CommandLine> command_line = ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!command_line.ok() || command_line->help || !command_line->rest.empty()) {
    if (!command_line.ok()) std::fprintf(stderr, "%s: %s\n", defaults.program, std::string(command_line.status().message()).c_str());
    std::fprintf(stderr, "usage: %s [--out=FILE.svg]\n\n%s", defaults.program, FlagsHelp(flags).c_str());
    return command_line.ok() && command_line->help ? 0 : 2;
  }
  PictureJob job;
  const std::string dims = absl::GetFlag(FLAGS_dims).empty() ? defaults.dims : absl::GetFlag(FLAGS_dims);
  for (absl::string_view part : absl::StrSplit(dims, ',')) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d <= 0) {
      std::fprintf(stderr, "%s: --dims must be positive integers, comma separated, got %s\n", defaults.program,
                   dims.c_str());
      return 2;
    }
    job.dims.push_back(d);
  }
  job.batch = absl::GetFlag(FLAGS_batch) == 0 ? defaults.batch : absl::GetFlag(FLAGS_batch);
  job.steps = absl::GetFlag(FLAGS_steps);
  if (static_cast<int>(job.dims.size()) < defaults.min_dims || job.batch < 1 || job.steps < 2) {
    std::fprintf(stderr, "%s: needs at least %d --dims, --batch >= 1 and --steps >= 2\n", defaults.program,
                 defaults.min_dims);
    return 2;
  }
  dist::SpawnOptions spawn;
  spawn.nproc = 2;  // two CPU ranks, whatever the machine has
  if (absl::Status s = dist::SpawnWorkersIfNeeded(argc, argv, spawn); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", defaults.program, std::string(s.message()).c_str());
    return 1;
  }
  job.svg_path = UserPath(absl::GetFlag(FLAGS_out).empty() ? defaults.out : absl::GetFlag(FLAGS_out));
  job.trace_path = absl::GetFlag(FLAGS_trace).empty() ? TracePathFor(job.svg_path) : UserPath(absl::GetFlag(FLAGS_trace));
  if (const absl::Status s = draw(job); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", defaults.program, std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tinyddp
