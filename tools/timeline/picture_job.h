// RunPictureJob: what the step-picture generators share around the one function that trains and traces
// (tools/timeline:zero3_timeline, tools/timeline:tp_timeline). Each draws a real trace of two CPU
// ranks over Gloo; what they have in common is the job around it: the same flags (--out, --trace, --dims,
// --batch, --steps), paths as the user typed them under `bazel run` (Bazel starts the binary in its runfiles,
// BUILD_WORKING_DIRECTORY says where the user was), and the two ranks the program starts itself
// (dist/launch/spawn.h). A generator's main() is then one call:
//
//   int main(int argc, char** argv) {
//     return tinyddp::RunPictureJob(argc, argv, {.program = "tp_timeline", .out = "/tmp/tp_timeline.svg",
//                                                .dims = "512,1024,1024,1024,1024", .min_dims = 3},
//                                   tinyddp::Draw);  // absl::Status Draw(const PictureJob&), on every rank
//   }
#ifndef TINYDDP_TOOLS_TIMELINE_PICTURE_JOB_H_
#define TINYDDP_TOOLS_TIMELINE_PICTURE_JOB_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tinyddp {

/// What a generator draws, from its flags.
struct PictureJob {
  std::vector<int64_t> dims;  // --dims: the MLP's layer sizes
  int64_t batch = 0;          // --batch
  int steps = 0;              // --steps traced (after 3 untraced ones; the picture shows the last 2,
                              // ZeRO-3's the last one)
  std::string svg_path;       // --out, resolved where the user typed the command
  std::string trace_path;     // --trace, or the SVG's path with .json for .svg
};

/// A generator's defaults, and what its --dims must have.
struct PictureDefaults {
  const char* program = "";  // its name, in messages and the usage line
  std::string out;           // --out's default
  std::string dims;          // --dims's default
  int64_t batch = 256;       // --batch's default
  int min_dims = 3;          // the fewest layer sizes it can draw (e.g. 3: two Linears)
};

/// For main(): parses the flags (a bad one: the usage on stderr and 2; --help: the usage and 0), starts the two
/// ranks when this process is not one yet, and runs `draw` on each rank. Returns main's exit status: 0, or 1
/// after printing the error of `draw` or of starting the ranks.
int RunPictureJob(int argc, char** argv, const PictureDefaults& defaults,
                  const std::function<absl::Status(const PictureJob&)>& draw);

/// "dir/name.json" -> "name.json": how a picture names its trace.
std::string BaseName(const std::string& path);

}  // namespace tinyddp

#endif  // TINYDDP_TOOLS_TIMELINE_PICTURE_JOB_H_
