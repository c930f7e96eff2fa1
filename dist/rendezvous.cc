// Rendezvous: see rendezvous.h.
#include "dist/rendezvous.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "dist/store/store_secret.h"

namespace tinyddp::dist {

absl::StatusOr<std::shared_ptr<TCPStore>> ConnectToJobStore(const WorkerEnv& env,
                                                           std::chrono::milliseconds timeout) {
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
