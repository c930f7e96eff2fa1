// The restart loop: see rounds.h.
#include "dist/elastic/rounds.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "dist/elastic/job_observer.h"
#include "dist/worker/env.h"

namespace tinyddp::dist {

int RunRounds(const std::string& name, int max_restarts, const std::function<RoundEnd(int round)>& run_round) {
  auto say = [&](const std::string& line) { std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str()); };
  for (int round = 0;; ++round) {
    const RoundEnd end = run_round(round);
    if (end.exit_code == 0 || end.said) return end.exit_code;
    if (end.preempted) {
      say(absl::StrCat("job preempted: ", end.why, "; the workers wrote a checkpoint and exited; exiting with ",
                       end.exit_code, ", not restarted: run the job again with --resume to continue"));
      return end.exit_code;
    }
    if (end.interrupted || end.permanent || round >= max_restarts) {
      std::string note;
      if (!end.interrupted && end.permanent && round < max_restarts) {
        note = absl::StrCat(" (not restarting: exit code ", kPermanentFailureExitCode, " means a permanent error)");
      } else if (!end.interrupted && max_restarts > 0) {
        note = absl::StrCat(" (no restarts left: --max_restarts=", max_restarts, ")");
      }
      say(absl::StrCat("job failed: ", end.why, note, "; exiting with ", end.exit_code));
      return end.exit_code;
    }
    say(absl::StrCat("round ", round, " failed: ", end.why, "; restarting all workers (restart ", round + 1, " of ",
                     max_restarts, ", ", kRestartCountEnv, "=", round + 1, ")"));
  }
}

}  // namespace tinyddp::dist
