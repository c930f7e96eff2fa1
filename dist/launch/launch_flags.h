// The command line of the `launch` binary: torchrun's flags, as Abseil flags, read into LaunchOptions
// (launch_options.h). Only `launch` (and the launcher's own test) links this, so its flags never show
// up in a training program that links the launcher's pieces (spawn.h).
//
// torchrun's rules hold: flags come before PROGRAM (`--flag=value` or `--flag value`, dashes or
// underscores: --nproc-per-node is --nproc_per_node), and everything from PROGRAM on is PROGRAM's,
// split off before any flag is parsed, so `launch ./train --nnodes=7` passes --nnodes=7 to ./train.
// `--` ends the flags explicitly (for a PROGRAM whose name starts with a dash).
#ifndef TINYDDP_DIST_LAUNCH_LAUNCH_FLAGS_H_
#define TINYDDP_DIST_LAUNCH_LAUNCH_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/launch/launch_options.h"

namespace tinyddp::dist {

/// Parses launch's arguments (argv without argv[0]), starting from LaunchOptions' defaults on every
/// call. InvalidArgument names the bad flag and why, followed by the usage.
absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args);

/// The usage text printed by --help and after argument errors.
std::string LaunchUsage();

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_LAUNCH_LAUNCH_FLAGS_H_
