// InitProcessGroup: torch.distributed.init_process_group for tinyddp. One call takes a process from "a
// rank of some job" (dist/worker/env.h: env://; docs/clusters.md says which programs also read Slurm's,
// Open MPI's, ... variables) to a ready ProcessGroup:
//
//   auto pg = dist::InitProcessGroup();          // backend auto: NCCL with a GPU, else Gloo
//   if (!pg.ok()) { ...print pg.status()... }
//   (*pg)->AllReduce(tensor)->Wait();
//
// Steps: resolve the job's timeout (InitOptions, else TINYDDP_TIMEOUT, else 300 s: job_timeout.h); read
// the WorkerEnv; connect to the job's TCPStore (ConnectToJobStore: rank 0 hosts it unless the launcher
// does; after an elastic restart, the group rendezvouses under keys of its own round, "restart<N>/");
// pick the backend (auto never starts more NCCL ranks than there are GPUs: it falls back to Gloo and says
// so in one line on stderr); for NCCL bind this process to cuda:LOCAL_RANK; build the group. The returned
// group keeps the store alive. Plain: it attaches no wing (programs attach the flight recorder, the debug
// check of TINYDDP_DISTRIBUTED_DEBUG=DETAIL, ... themselves, at the group's seams: docs/design.md).
#ifndef TINYDDP_DIST_INIT_H_
#define TINYDDP_DIST_INIT_H_

#include <chrono>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dist/process_group/process_group.h"
#include "dist/store/tcp_store.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

enum class Backend { kAuto, kNccl, kGloo };

/// "auto", "nccl", "gloo".
const char* BackendName(Backend backend);
/// Parses "auto", "nccl" or "gloo" (case-insensitive); InvalidArgument lists the choices otherwise.
absl::StatusOr<Backend> ParseBackend(absl::string_view name);
/// What kAuto resolves to on a machine running `ranks_on_this_machine` ranks (LOCAL_WORLD_SIZE): kNccl
/// when NCCL is built in (a CUDA build: cuda::BuiltWithCuda) and there is a visible GPU for every one of those ranks (NCCL binds rank i to
/// cuda:i), else kGloo. Every rank of a machine decides alike; on a job whose machines differ in GPU count,
/// pass the backend explicitly. Other backends resolve to themselves.
Backend ResolveBackend(Backend backend, int ranks_on_this_machine = 1);

struct InitOptions {
  Backend backend = Backend::kAuto;
  /// The job's timeout: bounds connecting to the store, every store wait, the rendezvous, NCCL
  /// communicator setup and every collective. Unset: TINYDDP_TIMEOUT, else 300 s (job_timeout.h).
  std::optional<std::chrono::milliseconds> timeout;
};

/// Builds this rank's process group from the environment (see the header comment). Errors: NotFound when
/// the process is not a rank of a job (with how to start one); InvalidArgument for a bad TINYDDP_TIMEOUT,
/// or listing missing or inconsistent variables; FailedPrecondition for nccl without CUDA or a GPU for
/// LOCAL_RANK; the store's or backend's error (e.g. DeadlineExceeded when a rank never arrives) otherwise.
absl::StatusOr<std::shared_ptr<ProcessGroup>> InitProcessGroup(const InitOptions& options = {});

/// The same from an explicit WorkerEnv (custom launchers, tests).
absl::StatusOr<std::shared_ptr<ProcessGroup>> InitProcessGroup(const WorkerEnv& env, const InitOptions& options);

/// InitProcessGroup's first step: connects to (and, for rank 0 without a launcher-hosted store,
/// kLauncherStoreEnv, starts) the job's TCPStore at env.master_addr:env.master_port, presenting the job
/// secret from TINYDDP_STORE_SECRET (store_secret.h). `timeout` bounds the connection and becomes the
/// store's timeout. A job of several machines that no launcher hosts a store for (WORLD_SIZE >
/// LOCAL_WORLD_SIZE: srun -N2, mpirun across hosts, a PyTorchJob) needs that secret: without it every rank
/// fails at once with FailedPrecondition, saying how to make one and hand it to every node (JobStoreSecret's
/// words). One-machine jobs run without one (rank 0 warns that its store admits anyone who reaches it).
/// Precondition: env came from ReadWorkerEnv (ranges checked). When rank 0 hosts the server, the store
/// lives as long as rank 0 keeps the returned object: other ranks must be done with it first (end with a
/// StoreBarrier).
absl::StatusOr<std::shared_ptr<TCPStore>> ConnectToJobStore(const WorkerEnv& env,
                                                           std::chrono::milliseconds timeout = kDefaultStoreTimeout);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_INIT_H_
