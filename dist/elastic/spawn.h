// SpawnElasticWorkersIfNeeded: dist/launch/spawn.h's SpawnWorkersIfNeeded with the elastic agent's parts, for
// a program that wants them (ddp_mlp): TINYDDP_* variables checked for typos (known_variables.h), the
// workers checked against what the machine can hold (worker_limits.h), job observers told about each round
// (job_observer.h: ddp_mlp passes the root-cause blame and the flight recorder's verdict), and
// with max_restarts, every worker started again after a failure (rounds.h, the launcher's loop).
#ifndef TINYDDP_DIST_ELASTIC_SPAWN_H_
#define TINYDDP_DIST_ELASTIC_SPAWN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/elastic/job_observer.h"
#include "dist/launch/spawn.h"

namespace tinyddp::dist {

struct ElasticSpawnOptions {
  SpawnOptions spawn;  // how many workers (nproc, cpu_ranks)
  int max_restarts = 0;        // after a failed round (not a permanent failure: exit 73), start again this often
  bool one_gpu_each = false;   // the workers use NCCL: refuse more of them than there are GPUs
  bool ignore_worker_limits = false;  // skip the worker_limits.h check (the program's override flag)
  std::string override_flag = "--ignore_worker_limits";  // how the program spells it ("" = none offered)
  /// Told about each round of workers; none: the plain job, whose failure is the first one seen.
  std::vector<std::shared_ptr<JobObserver>> job_observers;
};

/// As SpawnWorkersIfNeeded: OK in a worker; otherwise runs the job, round after round, and calls std::exit()
/// with its status. Errors: ResourceExhausted when the machine cannot hold the workers (naming the limit and
/// `override_flag`), InvalidArgument for a bad TINYDDP_NPROC, the store's error.
absl::Status SpawnElasticWorkersIfNeeded(int argc, char** argv, const ElasticSpawnOptions& options = {});

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_SPAWN_H_
