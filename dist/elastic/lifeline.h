// Lifeline: no process the launcher started, directly or through anything, outlives it, however it ends.
// Used by launcher.cc only (spawn's workers are its own binary, which starts nothing).
//
// The Supervisor gives every worker a process group of its own and PR_SET_PDEATHSIG, which covers the
// worker itself. But a worker command is often a wrapper (a job script, `sh -c 'prog & wait'`, a Python
// driver), and what the wrapper starts is the launcher's grandchild: when its parent dies it is
// re-parented to PID 1 and keeps training, and writing checkpoints into the folder that a restarted job
// then resumes from. Two mechanisms close that door:
//
//   - While the launcher lives it is a child subreaper (PR_SET_CHILD_SUBREAPER): an orphan anywhere below
//     it is re-parented to it, not to PID 1. After each round, once the workers are reaped, EndRound()
//     kills and reaps every child that is left, until none is. A failure, a normal end and every signal
//     the launcher can catch (supervisor.h) pass through there.
//   - For the deaths it cannot catch (SIGKILL, the OOM killer) there is a guard: a small process forked
//     first thing, in a process group of its own (a signal to the launcher's group leaves it alone),
//     blocked reading a pipe whose only write end the launcher holds. However the launcher dies, the
//     kernel closes that end: the guard wakes, SIGKILLs the process group of every worker of the round
//     and every process still holding the pipe's read end (every worker inherits it, and passes it on
//     through any wrapper, setsid included), then exits.
//
// A dying launcher is not a preemption: its workers stop at once (SIGKILL), nothing waits on a store.
#ifndef TINYDDP_DIST_ELASTIC_LIFELINE_H_
#define TINYDDP_DIST_ELASTIC_LIFELINE_H_

#include <sys/types.h>

#include <vector>

namespace tinyddp::dist {

/// Not copyable; one per launcher process.
class Lifeline {
 public:
  /// Makes this process a child subreaper and forks the guard. Call before this process starts any thread
  /// (the guard is a fork of it). When the guard cannot be forked it says so on stderr; the subreaper
  /// still covers every end the launcher lives through.
  Lifeline();
  /// Closes the pipe (the guard finds nothing left to stop after a clean end, and exits) and reaps the guard.
  ~Lifeline();
  Lifeline(const Lifeline&) = delete;
  Lifeline& operator=(const Lifeline&) = delete;

  /// Tells the guard the workers of the round that starts (each pid is its worker's process group).
  void Watch(const std::vector<pid_t>& workers);
  /// After a round, once its workers are reaped: kills (SIGKILL) and reaps every other child of this process
  /// (what the workers left running, re-parented here), says so on stderr, and tells the guard to forget
  /// the round's process groups.
  void EndRound();

 private:
  void Tell(pid_t pid);  // a worker's group to watch, or 0: forget them all

  int read_fd_ = -1;   // inherited by every worker (not close-on-exec): marks what the guard must stop
  int write_fd_ = -1;  // close-on-exec: only this process holds it
  pid_t guard_ = -1;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_LIFELINE_H_
