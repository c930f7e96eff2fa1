// InitProcessGroup: environment -> store -> backend -> group, with one error message per way to fail.
#include "dist/init.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/prefix_store.h"
#include "dist/store/store_secret.h"
#include "dist/worker/job_timeout.h"
#include "tensor/cuda_device.h"
#ifdef TINYDDP_HAVE_NCCL
#include "dist/process_group/nccl/process_group_nccl.h"
#endif

namespace tinyddp::dist {

namespace {

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
  // ProcessGroupNCCL::Create checks that cuda:LOCAL_RANK exists and binds this process to it.
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

constexpr const char* kBackendNames[] = {"auto", "nccl", "gloo"};  // Backend's order

}  // namespace

const char* BackendName(Backend backend) { return kBackendNames[static_cast<int>(backend)]; }

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (size_t b = 0; b < std::size(kBackendNames); ++b) {
    if (lower == kBackendNames[b]) return static_cast<Backend>(b);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend \"", name, "\": choose auto, nccl or gloo"));
}

Backend ResolveBackend(Backend backend, int ranks_on_this_machine) {
  if (backend != Backend::kAuto) return backend;
  const int gpus = cuda::DeviceCount();  // 0 in a build without CUDA, which has no NCCL
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
  if (options.backend == Backend::kAuto && backend == Backend::kGloo && env.local_rank == 0 &&
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
  ASSIGN_OR_RETURN(std::shared_ptr<Store> store, ConnectToJobStore(env, timeout));
  if (env.restart_count > 0) {
    // The store outlives a failed round (the launcher hosts it): its keys, a dead rank's address among
    // them, must not be read by the new round's rendezvous.
    store = std::make_shared<PrefixStore>(absl::StrCat("restart", env.restart_count), std::move(store));
  }
  // Both backends keep the store (for SubStore) in their base, so it goes only after the group's own
  // teardown: rank 0 may host the store's server.
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = MakeGroup(backend, env, std::move(store), timeout);
  if (!group.ok()) {
    return absl::Status(group.status().code(), absl::StrCat("InitProcessGroup(", BackendName(backend), ") on ",
                                                            env.DebugString(), ": ", group.status().message()));
  }
  return std::shared_ptr<ProcessGroup>(std::move(*group));
}

absl::StatusOr<std::shared_ptr<TCPStore>> ConnectToJobStore(const WorkerEnv& env, std::chrono::milliseconds timeout) {
  TCPStoreOptions options;
  options.host = env.master_addr;
  options.port = env.master_port;
  options.is_server = env.rank == 0 && !env.launcher_hosts_store;
  options.timeout = timeout;
  options.secret = StoreSecretFromEnvironment();  // the launcher's, or the one the user set for every rank
  if (!env.launcher_hosts_store && env.world_size > env.local_world_size && options.secret.empty()) {
    // Several machines and no launcher (srun -N2, mpirun across hosts, a PyTorchJob): rank 0's store
    // would be open to the network. Refused on every rank, as a multi-node `launch` refuses to start.
    const int nodes = (env.world_size + env.local_world_size - 1) / env.local_world_size;
    absl::StatusOr<std::string> secret = JobStoreSecret(nodes, "");
    if (!secret.ok()) {
      return absl::Status(secret.status().code(),
                          absl::StrCat("rank ", env.rank, " (", env.source, ", ", env.world_size,
                                       " ranks on ", nodes, " machines, rank 0 hosting the store as under launch "
                                       "--nnodes=", nodes, "): ", secret.status().message()));
    }
  }
  if (options.is_server && options.secret.empty()) {
    std::fprintf(stderr, "rank 0: warning: %s is not set, so the job's store (port %d) accepts any client that "
                 "can reach it; set the same secret in every rank's environment\n", kStoreSecretEnv, env.master_port);
  }
  auto store = TCPStore::Create(options);
  if (!store.ok()) {
    return absl::Status(store.status().code(), absl::StrCat("rank ", env.rank, " (", env.source,
                                                            "): ", store.status().message()));
  }
  return std::shared_ptr<TCPStore>(std::move(*store));
}

}  // namespace tinyddp::dist
