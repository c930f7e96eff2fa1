// torchrun's PET_* variables as launch's flags. torchrun reads each of its flags also from a PET_ variable
// (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT, PET_MAX_RESTARTS,
// PET_STANDALONE, and PET_RDZV_ENDPOINT=host:port), which is how Kubeflow's PyTorchJob and Trainer describe
// a pod that starts its processes with a launcher. The launch binary reads them before its own command line
// (launch_flags.h), so that a flag given there wins. A worker's own reading of PET_* is engines.h's.
#ifndef TINYDDP_DIST_ENGINES_PET_FLAGS_H_
#define TINYDDP_DIST_ENGINES_PET_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

/// The `launch` flags the PET_ variables stand for ("--nnodes=2", ...), MASTER_ADDR/MASTER_PORT winning
/// over PET_MASTER_*. Empty without PET_ variables. InvalidArgument, naming the variable, for an elastic
/// range (PET_NNODES=1:4: tinyddp's jobs have a fixed size) or a malformed value.
absl::StatusOr<std::vector<std::string>> LaunchFlagsFromEnvironment(const EnvVars& vars);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ENGINES_PET_FLAGS_H_
