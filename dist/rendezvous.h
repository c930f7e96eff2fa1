// Rendezvous: from a WorkerEnv (dist/worker/env.h) to the job's shared TCPStore. Rank 0 starts the store server on
// MASTER_PORT unless the launcher already hosts one (kLauncherStoreEnv); every rank then connects,
// presenting the job secret from TINYDDP_STORE_SECRET (store_secret.h), which a job of several
// machines must set.
// Process groups (process_group*.h) are built on top of the store this returns.
#ifndef TINYDDP_DIST_RENDEZVOUS_H_
#define TINYDDP_DIST_RENDEZVOUS_H_

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "dist/store/store.h"
#include "dist/store/tcp_store.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

/// Connects to (and, for rank 0 without a launcher-hosted store, starts) the job's TCPStore at
/// env.master_addr:env.master_port. `timeout` bounds the connection and becomes the store's timeout.
/// A job of several machines that no launcher hosts a store for (WORLD_SIZE > LOCAL_WORLD_SIZE: srun -N2,
/// mpirun across hosts, a PyTorchJob) needs TINYDDP_STORE_SECRET: without it every rank fails at once
/// with FailedPrecondition, saying how to make one and hand it to every node (JobStoreSecret's words).
/// One-machine jobs run without one (rank 0 warns that its store admits anyone who reaches it).
/// Precondition: env came from ReadWorkerEnv (ranges checked). When rank 0 hosts the server, the
/// store lives as long as rank 0 keeps the returned object: other ranks must be done with it first
/// (end with a StoreBarrier).
absl::StatusOr<std::shared_ptr<TCPStore>> ConnectToJobStore(const WorkerEnv& env,
                                                           std::chrono::milliseconds timeout = kDefaultStoreTimeout);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_RENDEZVOUS_H_
