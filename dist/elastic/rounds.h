// RunRounds: the one restart loop, torch.distributed.elastic's agent in a dozen lines. The elastic launcher
// (launcher.h) and a self-starting program that opts in (spawn.h) both run their workers round after round
// here: after a failed round every worker starts again, TINYDDP_RESTART_COUNT one higher
// (dist/worker/env.h), up to max_restarts times, unless a signal stopped the round, its root cause was
// permanent (exit 73, kPermanentFailureExitCode) or the workers checkpointed on a preemption (exit 75).
#ifndef TINYDDP_DIST_ELASTIC_ROUNDS_H_
#define TINYDDP_DIST_ELASTIC_ROUNDS_H_

#include <functional>
#include <string>

namespace tinyddp::dist {

/// How one round ended, as far as restarting goes.
struct RoundEnd {
  int exit_code = 0;         // 0: every worker succeeded, and the job is done
  std::string why;           // the root cause ("rank 1 (local rank 1, pid 42) failed first: exit code 3")
  bool preempted = false;    // the workers checkpointed on a signal and exited with 75: not restarted
  bool interrupted = false;  // a signal stopped the round: not restarted
  bool permanent = false;    // the root cause exited with 73: not restarted
  bool said = false;         // the round already said why it ends the job (e.g. a lost store): stop now
};

/// Runs run_round(0), run_round(1), ... until a round succeeds or may not be restarted, saying why on
/// stderr in lines that start with "<name>: "; returns the job's exit code.
int RunRounds(const std::string& name, int max_restarts, const std::function<RoundEnd(int round)>& run_round);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_ROUNDS_H_
