// SpawnElasticWorkersIfNeeded: see spawn.h. The core's pieces (dist/launch/spawn.h), the limits, the rounds.
#include "dist/elastic/spawn.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/elastic/known_variables.h"
#include "dist/elastic/rounds.h"
#include "dist/elastic/worker_limits.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

absl::Status SpawnElasticWorkersIfNeeded(int argc, char** argv, const ElasticSpawnOptions& options) {
  if (IsWorker()) return absl::OkStatus();
  WarnAboutUnknownVariables("spawn: ");
  ASSIGN_OR_RETURN(const SpawnCount count, CountSpawnWorkers(options.spawn));
  if (!options.ignore_worker_limits) {
    RETURN_IF_ERROR(CheckWorkerCount(count.nproc, ReadMachineCapacity(), options.one_gpu_each, count.gpus,
                                     count.what.empty() ? absl::StrCat(count.nproc, " ranks (", count.why, ")")
                                                        : count.what,
                                     options.override_flag));
  }
  ASSIGN_OR_RETURN(SpawnedJob job, StartSpawnedJob(argc, argv, count.nproc));
  std::fprintf(stderr, "%s: starting %d worker(s) (%s; set TINYDDP_NPROC to change), store at 127.0.0.1:%d%s\n",
               job.program.c_str(), count.nproc, count.why.c_str(), job.workers.master_port,
               options.max_restarts > 0 ? absl::StrCat(", up to ", options.max_restarts, " restart(s)").c_str() : "");
  std::vector<JobObserver*> observers;
  for (const auto& observer : options.job_observers) observers.push_back(observer.get());
  const int exit_code = RunRounds("spawn", options.max_restarts, [&](int round) {
    SupervisorOptions supervisor_options{.name = "spawn"};
    std::vector<WorkerProcessSpec> specs = WorkerSpecs(job.workers, round);
    AttachObservers(observers, round, specs, supervisor_options);
    Supervisor supervisor(std::move(supervisor_options));
    if (absl::Status s = supervisor.Start(specs); !s.ok()) {
      return RoundEnd{.exit_code = 2, .why = std::string(s.message()), .interrupted = true};
    }
    JobResult result = supervisor.Wait();
    JudgeRound(observers, result);
    const bool preempted = result.exit_code == kPreemptedExitCode;  // they checkpointed on a signal: no failure
    for (JobObserver* observer : observers) {
      if (result.exit_code != 0 && !preempted) observer->FailedRound(round, "spawn: ", {});
      observer->Finish(result.exit_code == 0 || preempted);
    }
    return RoundEnd{.exit_code = result.exit_code,
                    .why = result.reason,
                    .preempted = preempted,
                    .interrupted = result.interrupted,
                    .permanent = result.permanent};
  });
  job.store.reset();
  std::fflush(nullptr);
  std::exit(exit_code);
}

}  // namespace tinyddp::dist
