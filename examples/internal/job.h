// JoinJob: from "I am a worker" to a working process group, for the examples.
//
// Reads this process's place in the job from the launcher's variables (dist/env.h), connects to the
// job's store (dist/rendezvous.h), picks the device (cuda:LOCAL_RANK with NCCL, the CPU with Gloo) and
// builds the process group on it. Sits under examples/ddp_mlp.cc, above dist/.
#ifndef TINYDDP_EXAMPLES_INTERNAL_JOB_H_
#define TINYDDP_EXAMPLES_INTERNAL_JOB_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/env.h"
#include "dist/process_group.h"
#include "dist/store.h"
#include "tensor/device.h"

namespace tinyddp::examples {

struct Job {
  dist::WorkerEnv env;
  std::shared_ptr<dist::Store> store;        // the job's TCPStore (the trace is gathered through it)
  std::shared_ptr<dist::ProcessGroup> pg;
  Device device;                             // where this rank's model and batches live
};

/// Joins the job with `backend` ("auto": nccl when this process sees a GPU, else gloo). Errors name
/// what is missing: the launcher variables, the GPU for this local rank, or a backend this build lacks.
absl::StatusOr<Job> JoinJob(const std::string& backend);

/// The backend "auto" stands for on this machine: "nccl" when a GPU is visible, else "gloo".
std::string ResolveBackend(const std::string& backend);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_JOB_H_
