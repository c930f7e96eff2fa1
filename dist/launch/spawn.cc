// SpawnWorkersIfNeeded: see spawn.h. The core launcher (workers.h) for one machine, started by the program.
#include "dist/launch/spawn.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/store/store_secret.h"
#include "dist/worker/env.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {

absl::StatusOr<SpawnCount> CountSpawnWorkers(const SpawnOptions& options) {
  SpawnCount c;
  c.gpus = cuda::DeviceCount();
  c.nproc = options.nproc > 0 ? options.nproc : (c.gpus > 0 ? c.gpus : options.cpu_ranks);
  c.why = options.nproc > 0 ? "as the program asks" : (c.gpus > 0 ? "one per GPU" : "CPU ranks");
  c.what = options.nproc > 0 ? absl::StrCat("--nproc=", c.nproc) : "";
  if (const char* override_nproc = std::getenv("TINYDDP_NPROC")) {
    auto n = ResolveNprocPerNode(override_nproc, c.gpus, UsableCpuCount());
    if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat("TINYDDP_NPROC: ", n.status().message()));
    c.nproc = *n;
    c.why = c.what = absl::StrCat("TINYDDP_NPROC=", override_nproc);
  }
  if (c.gpus > 0 && c.nproc > c.gpus) absl::StrAppend(&c.why, ", more than the ", c.gpus, " GPU(s)");
  return c;
}

absl::StatusOr<SpawnedJob> StartSpawnedJob(int argc, char** argv, int nproc) {
  SpawnedJob job;
  // The real binary, even when argv[0] is a symlink or a bare name found through PATH.
  char exe[PATH_MAX];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return absl::InternalError("cannot read /proc/self/exe to re-execute this program");
  job.workers.argv = {std::string(exe, static_cast<size_t>(len))};
  for (int i = 1; i < argc; ++i) job.workers.argv.emplace_back(argv[i]);
  job.program = job.workers.argv[0].substr(job.workers.argv[0].rfind('/') + 1);  // not Bazel's long path

  // Hosting the store here on port 0 picks a free port with no race: the kernel holds it for us. It
  // listens on loopback and admits only connections that present the job secret (store_secret.h): the
  // user's, or a fresh one handed to the workers in their environment.
  std::string secret = StoreSecretFromEnvironment();
  if (secret.empty()) {
    ASSIGN_OR_RETURN(secret, GenerateStoreSecret());
  }
  ASSIGN_OR_RETURN(job.store, TCPStoreServer::Start({.host = "127.0.0.1", .port = 0, .secret = secret}));
  job.workers.nproc = job.workers.world_size = nproc;
  job.workers.master_addr = "127.0.0.1";
  job.workers.master_port = job.store->port();
  job.workers.store_secret = secret;
  return job;
}

absl::Status SpawnWorkersIfNeeded(int argc, char** argv, const SpawnOptions& options) {
  if (IsWorker()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const SpawnCount count, CountSpawnWorkers(options));
  if (count.nproc > kMaxSpawnedWorkers) {
    return absl::ResourceExhaustedError(absl::StrCat(
        count.what.empty() ? absl::StrCat(count.nproc, " ranks") : count.what, ": more than the ",
        kMaxSpawnedWorkers, " workers a program starts on one machine by itself; start them with `launch` instead"));
  }
  ASSIGN_OR_RETURN(SpawnedJob job, StartSpawnedJob(argc, argv, count.nproc));
  std::fprintf(stderr, "%s: starting %d worker(s) (%s; set TINYDDP_NPROC to change), store at 127.0.0.1:%d\n",
               job.program.c_str(), count.nproc, count.why.c_str(), job.workers.master_port);
  Supervisor supervisor({.name = "spawn"});
  RETURN_IF_ERROR(supervisor.Start(WorkerSpecs(job.workers)));
  const JobResult result = supervisor.Wait();
  if (result.exit_code != 0) {
    std::fprintf(stderr, "spawn: job failed: %s; exiting with %d\n", result.reason.c_str(), result.exit_code);
  }
  job.store.reset();
  std::fflush(nullptr);
  std::exit(result.exit_code);
}

}  // namespace tinyddp::dist
