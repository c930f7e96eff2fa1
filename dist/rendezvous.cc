// Rendezvous: see rendezvous.h.
#include "dist/rendezvous.h"

#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

absl::StatusOr<std::shared_ptr<TCPStore>> ConnectToJobStore(const WorkerEnv& env,
                                                           std::chrono::milliseconds timeout) {
  TCPStoreOptions options;
  options.host = env.master_addr;
  options.port = env.master_port;
  options.is_server = env.rank == 0 && !env.launcher_hosts_store;
  options.timeout = timeout;
  auto store = TCPStore::Create(options);
  if (!store.ok()) {
    return absl::Status(store.status().code(), absl::StrCat("rank ", env.rank, " (", EnvSourceName(env.source),
                                                            "): ", store.status().message()));
  }
  return std::shared_ptr<TCPStore>(std::move(*store));
}

}  // namespace tinyddp::dist
