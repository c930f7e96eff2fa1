// ResolveUserPath: where a path typed on the command line really points.
//
// `bazel run` starts the binary inside its runfiles tree, not in the folder the user typed the command
// in, so `--metrics_out=metrics.jsonl` would land somewhere under bazel-bin/ and be lost. Bazel passes
// the user's folder in BUILD_WORKING_DIRECTORY; relative paths are resolved against it. Outside Bazel
// (the binary run directly, or under launch/srun/mpirun) the variable is absent and paths stay relative
// to the current directory, as usual. Workers started by spawn.h inherit the variable, so every rank
// resolves the same way.
#ifndef TINYDDP_EXAMPLES_INTERNAL_USER_PATH_H_
#define TINYDDP_EXAMPLES_INTERNAL_USER_PATH_H_

#include <string>

namespace tinyddp::examples {

/// `path` unchanged when it is empty or absolute; otherwise joined onto `working_directory` when that
/// is non-empty, or unchanged (relative to the current directory) when it is empty. A leading "~/" is
/// expanded from $HOME, as the shell would have done for an unquoted path.
std::string ResolveUserPath(const std::string& path, const std::string& working_directory);

/// ResolveUserPath against $BUILD_WORKING_DIRECTORY (empty when not under `bazel run`).
std::string ResolveUserPath(const std::string& path);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_USER_PATH_H_
