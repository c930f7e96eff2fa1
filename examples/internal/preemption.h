// Preemption: a job told to stop (SIGTERM or SIGUSR1) finishes its step, agrees with every rank on where
// to stop, writes one checkpoint and exits with kPreemptedExitCode (75), which launch and spawn do not
// restart: it is run again, with --resume, by whoever stopped it (Slurm's requeue, a new pod, a person).
// ddp_mlp turns it on whenever it has a --checkpoint_dir (--preemption=false turns it off).
//
// Who sends what, and how long they wait before SIGKILL (the grace period):
//   Slurm       SIGTERM to every task of the job's steps when the job is cancelled, preempted or reaches
//               its time limit, SIGKILL KillWait later (30 s by default; `scontrol show config`);
//               `#SBATCH --signal=USR1@60` adds SIGUSR1 60 s before the time limit.
//   Kubernetes  SIGTERM to the PID 1 of each of the pod's containers, SIGKILL terminationGracePeriodSeconds
//               later (30 s by default).
//   launch      under sbatch's script or as a pod's PID 1 it gets the signal itself and forwards SIGTERM to
//               every worker, then SIGKILL --preempt_grace later (30 s by default).
// So the signal reaches every rank (srun), or every rank through a launcher, but never at the same moment
// or at the same point of a step. No rank may stop on its own: the others would wait for it in their next
// collective until --timeout.
//
// How the ranks agree. The handler only records the signal. After some steps (about one a second) every
// rank starts an all_reduce(MAX) of two numbers: the signal it has seen (0: none) and the seconds since it
// started the previous one. It reads the result after the next step, never waiting: the all_reduce ran on
// Gloo's thread, or on NCCL's stream with its result copied back to pinned memory behind an event, while
// that step ran. So every rank reads the same numbers after the same step: with a signal in them, every
// rank stops there; without, every rank derives from the same slowest time the same number of steps to the
// next agreement (doubling at most: 1, 2, 4, ... steps until they take about `check_seconds`). A signal is
// acted on within about check_seconds plus two steps. Checking after every step would cost a collective
// per step, measurable on small steps (docs/clusters.md, "Preemption", has the numbers).
//
// Sits between the training loop (examples/ddp_mlp.cc) and the process group; the exit code is
// dist/elastic/job_observer.h's.
#ifndef TINYDDP_EXAMPLES_INTERNAL_PREEMPTION_H_
#define TINYDDP_EXAMPLES_INTERNAL_PREEMPTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/elastic/job_observer.h"
#include "dist/process_group/process_group.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::examples {

/// 75 (EX_TEMPFAIL): the run checkpointed because it was told to stop; launch and spawn do not restart it.
using dist::kPreemptedExitCode;

/// Not copyable; at most one per process (signal handlers are process-wide). Used by the training
/// thread only; the handlers run on any thread.
class Preemption {
 public:
  /// Catches SIGTERM and SIGUSR1 from now on, for the rest of the process's life (with SA_RESTART, so no
  /// blocking call fails with EINTR).
  /// A handler installed before that is a function (the flight recorder's SIGUSR1 dump) still runs.
  /// `device`: where the job's collectives run (the agreement's tensor lives there). `check_seconds`:
  /// how often the ranks agree (0: after every step, as tests want).
  explicit Preemption(Device device, double check_seconds = 1.0);
  /// Leaves the handlers in place: the process is about to end (why: preemption.cc).
  ~Preemption();
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;

  /// Collective: call after every training step, on every rank. True, on every rank after the same
  /// step, once some rank was signalled (within about check_seconds and two steps); then call it no more.
  /// Errors: the all_reduce's (a rank gone, a timeout).
  absl::StatusOr<bool> StopAfterThisStep(dist::ProcessGroup& pg);

  /// Whether StopAfterThisStep has returned true.
  bool stopped() const { return agreed_signal_ > 0; }
  /// After StopAfterThisStep returned true: "SIGTERM" (the highest-numbered signal any rank saw).
  std::string SignalName() const;
  /// Seconds since this rank got the signal itself, or -1 when it heard of it only through the others.
  double SecondsSinceSignal() const;

 private:
  Device device_;
  double check_seconds_;
  Tensor agreement_;                        // float32 [2] on device_: {signal seen, seconds since the last}
  std::shared_ptr<dist::Work> in_flight_;   // the all_reduce started after the previous step, if any
  float* pinned_ = nullptr;                 // GPU: [0, 2) the values going out, [2, 4) the job's coming back
  std::unique_ptr<cuda::Event> copied_;     // GPU: the result is in pinned_[2, 4)
  int64_t steps_ = 0;                       // calls so far
  int64_t interval_ = 1;                    // steps from one agreement to the next
  int64_t next_ = 0;                        // the call that starts the next agreement
  std::chrono::steady_clock::time_point last_start_;
  int agreed_signal_ = 0;
};

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_PREEMPTION_H_
