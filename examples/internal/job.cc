// JoinJob: see job.h.
#include "examples/internal/job.h"

#include "absl/strings/str_cat.h"
#include "dist/process_group_gloo.h"
#include "dist/rendezvous.h"
#include "tensor/cuda_device.h"

namespace tinyddp::examples {

std::string ResolveBackend(const std::string& backend) {
  if (backend != "auto") return backend;
  return cuda::DeviceCount() > 0 ? "nccl" : "gloo";
}

absl::StatusOr<Job> JoinJob(const std::string& requested_backend) {
  absl::StatusOr<dist::WorkerEnv> env = dist::ReadWorkerEnv();
  if (!env.ok()) return env.status();
  const std::string backend = ResolveBackend(requested_backend);
  Job job;
  job.env = *env;
  if (backend == "nccl") {
    return absl::UnimplementedError("--backend=nccl: the NCCL process group is not wired into ddp_mlp yet");
  }
  job.device = Device::CPU();
  absl::StatusOr<std::shared_ptr<dist::TCPStore>> store = dist::ConnectToJobStore(*env);
  if (!store.ok()) return store.status();
  job.store = *store;
  absl::StatusOr<std::unique_ptr<dist::ProcessGroupGloo>> pg =
      dist::ProcessGroupGloo::Create(job.store, env->rank, env->world_size);
  if (!pg.ok()) return pg.status();
  job.pg = std::move(*pg);
  return job;
}

}  // namespace tinyddp::examples
