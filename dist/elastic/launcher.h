// RunLauncher: the body of the `launch` tool (launch.cc holds only main). On each machine it
//   1. resolves --nproc_per_node, checks that the machine can hold that many workers (worker_limits.h),
//      hosts the job's TCPStore on node 0 (a free port for one node),
//   2. with several nodes, meets the other launchers in that store: each node claims its node_rank
//      and all must agree on the settings that shape the job (job_settings.h),
//   3. starts the workers with their env:// variables and the job's timeout through the Supervisor and
//      watches them; nothing they start outlives the launcher, however it ends (lifeline.h),
//   4. with several nodes, tells the other launchers when a local worker fails (they stop theirs),
//      and all agree on how the round went, keeping node 0's store up until every node knows; a node
//      that cannot reach the store after a local failure gives up within seconds, naming that failure;
//   5. elastic restart (--max_restarts=N, torchrun's): after a failed round, steps 3-4 run again with
//      TINYDDP_RESTART_COUNT one higher, up to N times, unless a signal stopped it or its first failure was
//      permanent (kPermanentFailureExitCode, supervisor.h). The store stays up; the workers' process groups
//      rendezvous under keys of their own round (init.h), and a program that checkpoints resumes.
// Preemption: a SIGTERM or SIGUSR1 to launch (sbatch's script, a pod's PID 1) reaches every worker as
// SIGTERM, which then has --preempt_grace (30 s) to checkpoint before SIGKILL. Workers that exit with
// kPreemptedExitCode (75), signalled here or themselves (srun), make it launch's status: not restarted.
#ifndef TINYDDP_DIST_ELASTIC_LAUNCHER_H_
#define TINYDDP_DIST_ELASTIC_LAUNCHER_H_

#include <vector>

#include "dist/elastic/job_observer.h"
#include "dist/elastic/launch_options.h"

namespace tinyddp::dist {

/// Runs a whole job (this node's part of it) and returns the exit code for the launcher: 0 when every
/// worker succeeded, otherwise non-zero after printing which rank failed first and how.
/// `observers` are told about each round (job_observer.h; the launch binary passes the flight recorder's
/// and the root-cause blame). Precondition: options come from ParseLaunchArgs with help and check unset.
int RunLauncher(const LaunchOptions& options, const std::vector<JobObserver*>& observers = {});

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_LAUNCHER_H_
