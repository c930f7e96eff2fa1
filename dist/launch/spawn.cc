// SpawnWorkersIfNeeded: see spawn.h. The same pieces as `launch` (launcher.h), minus multi-node.
#include "dist/launch/spawn.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/launch/env.h"
#include "dist/launch/known_variables.h"
#include "dist/launch/supervisor.h"
#include "dist/launch/worker_limits.h"
#include "dist/store/store_secret.h"
#include "dist/store/tcp_store_server.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {

absl::Status SpawnWorkersIfNeeded(int argc, char** argv, const SpawnOptions& options) {
  if (IsWorker()) return absl::OkStatus();
  WarnAboutUnknownVariables("spawn: ");

  // How many, and why (for the one line below and the refusal): TINYDDP_NPROC, else the program's count,
  // else one per GPU or the CPU ranks.
  const int gpus = cuda::DeviceCount();
  int nproc = options.nproc > 0 ? options.nproc : (gpus > 0 ? gpus : options.cpu_ranks);
  std::string why = options.nproc > 0 ? "as the program asks" : (gpus > 0 ? "one per GPU" : "CPU ranks");
  std::string what = options.nproc > 0 ? absl::StrCat(options.nproc_flag, "=", nproc) : "";
  if (const char* override_nproc = std::getenv("TINYDDP_NPROC")) {
    auto n = ResolveNprocPerNode(override_nproc, gpus, UsableCpuCount());
    if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat("TINYDDP_NPROC: ", n.status().message()));
    nproc = *n;
    why = what = absl::StrCat("TINYDDP_NPROC=", override_nproc);
  }
  if (gpus > 0 && nproc > gpus) absl::StrAppend(&why, ", more than the ", gpus, " GPU(s)");
  if (!options.ignore_worker_limits) {
    RETURN_IF_ERROR(CheckWorkerCount(nproc, ReadMachineCapacity(), options.one_gpu_each, gpus,
                                     what.empty() ? absl::StrCat(nproc, " ranks (", why, ")") : what,
                                     options.override_flag));
  }

  // The real binary, even when argv[0] is a symlink or a bare name found through PATH.
  char exe[PATH_MAX];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return absl::InternalError("cannot read /proc/self/exe to re-execute this program");
  std::vector<std::string> args = {std::string(exe, static_cast<size_t>(len))};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);

  // Hosting the store here on port 0 picks a free port with no race: the kernel holds it for us. It
  // listens on loopback and admits only connections that present the job secret (store_secret.h): the
  // user's, or a fresh one handed to the workers in their environment.
  std::string secret = StoreSecretFromEnvironment();
  if (secret.empty()) {
    ASSIGN_OR_RETURN(secret, GenerateStoreSecret());
  }
  auto server = TCPStoreServer::Start({.host = "127.0.0.1", .port = 0, .secret = secret});
  RETURN_IF_ERROR(server);
  const int port = (*server)->port();

  const std::string program = args[0].substr(args[0].rfind('/') + 1);  // the name, not Bazel's long path
  std::fprintf(stderr, "%s: starting %d worker(s) (%s; set TINYDDP_NPROC to change), store at 127.0.0.1:%d%s\n",
               program.c_str(), nproc, why.c_str(), port,
               options.max_restarts > 0 ? absl::StrCat(", up to ", options.max_restarts, " restart(s)").c_str() : "");
  std::vector<JobObserver*> observers;
  for (const auto& observer : options.job_observers) observers.push_back(observer.get());
  int exit_code = 0;
  for (int round = 0;; ++round) {
    std::vector<WorkerProcessSpec> specs;
    for (int rank = 0; rank < nproc; ++rank) {
      specs.push_back(
          {rank, rank, args, WorkerEnvironment(rank, nproc, rank, nproc, 0, "127.0.0.1", port, secret, round)});
    }
    Supervisor supervisor({.name = "spawn", .round = round, .observers = observers});
    RETURN_IF_ERROR(supervisor.Start(specs));
    const JobResult result = supervisor.Wait();
    exit_code = result.exit_code;
    const bool preempted = exit_code == kPreemptedExitCode;  // they checkpointed on a signal: no failure
    for (JobObserver* observer : observers) {
      if (exit_code != 0 && !preempted) observer->FailedRound(round, "spawn: ", {});
      observer->Finish(exit_code == 0 || preempted);
    }
    if (exit_code == 0) break;
    if (result.interrupted || result.permanent || round >= options.max_restarts) {
      const std::string note =
          result.interrupted || options.max_restarts == 0 ? ""
          : result.permanent && round < options.max_restarts
              ? absl::StrCat(" (not restarting: exit code ", kPermanentFailureExitCode, " means a permanent error)")
              : absl::StrCat(" (no restarts left: --max_restarts=", options.max_restarts, ")");
      std::fprintf(stderr, "spawn: job %s: %s%s; exiting with %d\n", preempted ? "preempted" : "failed",
                   result.reason.c_str(), note.c_str(), exit_code);
      break;
    }
    std::fprintf(stderr, "spawn: round %d failed: %s; restarting all workers (restart %d of %d, %s=%d)\n", round,
                 result.reason.c_str(), round + 1, options.max_restarts, kRestartCountEnv, round + 1);
  }
  server->reset();
  std::fflush(nullptr);
  std::exit(exit_code);
}

}  // namespace tinyddp::dist
