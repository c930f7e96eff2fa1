// The command line of the `launch` binary: torchrun's flags, as Abseil flags, read into LaunchOptions
// (launch_options.h). Only `launch` (and the launcher's own test) links this, so its flags never show
// up in a training program that links the launcher's pieces (spawn.h).
//
// torchrun's rules hold: flags come before PROGRAM (`--flag=value` or `--flag value`, dashes or
// underscores: --nproc-per-node is --nproc_per_node), and everything from PROGRAM on is PROGRAM's,
// split off before any flag is parsed, so `launch ./train --nnodes=7` passes --nnodes=7 to ./train.
// `--` ends the flags explicitly (for a PROGRAM whose name starts with a dash).
//
// torchrun's PET_* variables (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, ...: what
// Kubeflow sets in a pod) are read as flags placed before the command line's, so a flag given there wins
// (pet_flags.h, LaunchFlagsFromEnvironment). --standalone is torchrun's too: one node, the store on loopback at a
// free port (launch's default for one node; the flag refuses --nnodes above 1).
#ifndef TINYDDP_DIST_ELASTIC_LAUNCH_FLAGS_H_
#define TINYDDP_DIST_ELASTIC_LAUNCH_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/worker/env.h"
#include "dist/elastic/launch_options.h"

namespace tinyddp::dist {

/// Parses launch's arguments (argv without argv[0]) after the flags that `env`'s PET_* variables stand
/// for, starting from LaunchOptions' defaults on every call (launch passes CurrentEnvironment()).
/// InvalidArgument names the bad flag or variable and why, followed by the usage.
absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args, const EnvVars& env = {});

/// The usage text printed by --help and after argument errors.
std::string LaunchUsage();

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_LAUNCH_FLAGS_H_
