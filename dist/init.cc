// InitProcessGroup: environment -> store -> backend -> group, with one error message per way to fail.
#include "dist/init.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/rendezvous.h"
#include "dist/store/prefix_store.h"
#include "dist/worker/job_timeout.h"
#include "tensor/cuda_device.h"
#ifdef TINYDDP_HAVE_NCCL
#include "dist/process_group/nccl/process_group_nccl.h"
#endif

namespace tinyddp::dist {

namespace {

// The group and the store it was built on, released in that order (the group first) when the last
// shared_ptr to the group goes away: rank 0 may host the store's server.
struct GroupWithStore {
  std::shared_ptr<Store> store;
  std::unique_ptr<ProcessGroup> group;
};

// Gloo, or NCCL on cuda:LOCAL_RANK, over `store`.
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeGroup(Backend backend, const WorkerEnv& env,
                                                        std::shared_ptr<Store> store,
                                                        std::chrono::milliseconds timeout) {
  if (backend == Backend::kGloo) {
    ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupGloo> gloo,
                     ProcessGroupGloo::Create(store, env.rank, env.world_size,
                                              {.timeout = timeout, .master_addr = env.master_addr}));
    gloo->set_store(std::make_shared<PrefixStore>(gloo->group_name(), std::move(store)));  // for SubStore
    return std::unique_ptr<ProcessGroup>(std::move(gloo));
  }
#ifdef TINYDDP_HAVE_NCCL
  const int gpus = cuda::DeviceCount();
  if (gpus == 0) {
    return absl::FailedPreconditionError(
        "backend nccl needs a CUDA GPU and none is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use "
        "backend gloo for CPU tensors");
  }
  if (env.local_rank >= gpus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend nccl binds each rank to cuda:LOCAL_RANK, but LOCAL_RANK is ", env.local_rank, " and only ", gpus,
        " GPU(s) are visible: start at most one rank per GPU (launch --nproc_per_node=gpu) or check "
        "CUDA_VISIBLE_DEVICES"));
  }
  cuda::SetDevice(env.local_rank);
  ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupNCCL> nccl,
                   ProcessGroupNCCL::Create(std::move(store), env.rank, env.world_size,
                                            {.timeout = timeout, .device = env.local_rank}));
  return std::unique_ptr<ProcessGroup>(std::move(nccl));
#else
  return absl::FailedPreconditionError(
      "backend nccl: this binary was built without the CUDA toolkit, so it has no NCCL; rebuild where CUDA is "
      "installed (CUDA_HOME), or use backend gloo");
#endif
}

}  // namespace

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kNccl: return "nccl";
    case Backend::kGloo: return "gloo";
  }
  return "?";
}

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "auto") return Backend::kAuto;
  if (n == "nccl") return Backend::kNccl;
  if (n == "gloo") return Backend::kGloo;
  return absl::InvalidArgumentError(absl::StrCat("unknown backend \"", name, "\": choose auto, nccl or gloo"));
}

bool NcclAvailable() {
#ifdef TINYDDP_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Backend ResolveBackend(Backend backend, int ranks_on_this_machine) {
  if (backend != Backend::kAuto) return backend;
  const int gpus = NcclAvailable() ? cuda::DeviceCount() : 0;
  return gpus > 0 && ranks_on_this_machine <= gpus ? Backend::kNccl : Backend::kGloo;
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> InitProcessGroup(const InitOptions& options) {
  absl::StatusOr<WorkerEnv> env = ReadWorkerEnv();
  if (!env.ok()) {
    return absl::Status(env.status().code(), absl::StrCat("InitProcessGroup: ", env.status().message()));
  }
  return InitProcessGroup(*env, options);
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> InitProcessGroup(const WorkerEnv& env, const InitOptions& options) {
  std::chrono::milliseconds timeout = options.timeout.value_or(kDefaultJobTimeout);
  if (!options.timeout) {
    ASSIGN_OR_RETURN(timeout, ResolveJobTimeout());
  }
  const Backend backend = ResolveBackend(options.backend, env.local_world_size);
  if (options.backend == Backend::kAuto && backend == Backend::kGloo && NcclAvailable() && env.local_rank == 0 &&
      cuda::DeviceCount() > 0) {
    // More ranks than GPUs here: NCCL would have no cuda:LOCAL_RANK for some. Said once per machine.
    std::fprintf(stderr,
                 "InitProcessGroup: backend auto: %d ranks on this machine but %d GPU(s), so gloo on CPU tensors "
                 "(start one rank per GPU for nccl, or pass backend gloo to silence this)\n",
                 env.local_world_size, cuda::DeviceCount());
  }
  if (backend == Backend::kGloo && env.rank == 0 && std::getenv("NCCL_DEBUG") != nullptr) {
    std::fprintf(stderr, "InitProcessGroup: NCCL_DEBUG has no effect on gloo (CPU) ranks; use "
                         "TINYDDP_DISTRIBUTED_DEBUG=DETAIL or the flight recorder (docs/troubleshooting.md)\n");
  }
  auto holder = std::make_shared<GroupWithStore>();
  ASSIGN_OR_RETURN(holder->store, ConnectToJobStore(env, timeout));
  if (env.restart_count > 0) {
    // The store outlives a failed round (the launcher hosts it): its keys, a dead rank's address among
    // them, must not be read by the new round's rendezvous.
    holder->store = std::make_shared<PrefixStore>(absl::StrCat("restart", env.restart_count), holder->store);
  }
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = MakeGroup(backend, env, holder->store, timeout);
  if (!group.ok()) {
    return absl::Status(group.status().code(), absl::StrCat("InitProcessGroup(", BackendName(backend), ") on ",
                                                            env.DebugString(), ": ", group.status().message()));
  }
  holder->group = std::move(*group);
  ProcessGroup* raw = holder->group.get();
  return std::shared_ptr<ProcessGroup>(std::move(holder), raw);  // aliasing: owns the holder, points at the group
}

}  // namespace tinyddp::dist
