// NcclWatchdog: what keeps a hung NCCL collective from hanging the job. ProcessGroupNCCL's collective path
// (process_group_nccl.cc) hands it every Work it enqueued; this file holds everything that happens to a
// Work after that, on the watchdog's own thread, so that the collective path reads as its few CUDA calls.
//
// The watchdog keeps every Work in flight (and thus its tensors) alive until its end event has completed,
// tells the group's observers when each collective started and ended on the GPU, polls
// ncclCommGetAsyncError, and aborts the communicator (ncclCommAbort) when NCCL reports an error or a
// collective exceeds the group's timeout (counted from when it was issued). The affected Works then fail
// with a clear status (DeadlineExceeded for a timeout, with what the observers add, e.g. where the flight
// recorder dumped) instead of hanging, the external implementations with calls in flight are released, and
// the group refuses further collectives. It also keeps the descriptions of collectives recorded into a
// CUDA graph (Captured / TakeCaptured), whose replays it watches like collectives.
//
// Two locks, so that the watchdog never waits on a collective being enqueued: NcclCommunicator::launch_mu
// is held by the launching thread for the whole enqueue (NCCL calls, stream order, external calls);
// `works_mu_` guards the list of Works in flight and the failure, and is held only for moments. The
// watchdog decides and fails the Works under works_mu_ alone; it needs launch_mu only for ncclCommAbort
// itself (NCCL must not be inside a call on the communicator that it frees). If the launching thread does
// not leave NCCL within kLaunchLockWait (it can block there for good: a full CUDA launch queue behind the
// hung collective), no Status can ever reach it, so the watchdog ends the process cleanly
// (exit_on_failure.h): never a hang. CUDA builds only; included by process_group_nccl.cc.
#ifndef TINYDDP_DIST_PROCESS_GROUP_NCCL_NCCL_WATCHDOG_H_
#define TINYDDP_DIST_PROCESS_GROUP_NCCL_NCCL_WATCHDOG_H_

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dist/process_group/external_all_reduce.h"
#include "dist/process_group/nccl/work_nccl.h"

namespace tinyddp::dist {

/// NCCL's message for `r`, with the communicator's last error if any, and where to look next.
std::string NcclError(ncclResult_t r, ncclComm_t comm);

/// The communicator and the lock around its use. The launching thread holds `launch_mu` for a whole
/// enqueue; the watchdog takes it only to abort; the group's destructor to finalize. `comm` is set to null
/// only by the watchdog (holding launch_mu) or by the destructor after the watchdog stopped, so the
/// watchdog reads it without a lock.
struct NcclCommunicator {
  std::timed_mutex launch_mu;
  ncclComm_t comm = nullptr;
};

class NcclWatchdog {
 public:
  /// What the watchdog tells its group: ProcessGroup's NotifyStarted, NotifyEnded and NoteFailure.
  struct Group {
    int rank = 0;
    std::chrono::milliseconds timeout{0};
    std::function<void(int64_t seq)> started;
    std::function<void(int64_t seq, const absl::Status& status)> ended;
    std::function<absl::Status(const absl::Status& status, absl::string_view reason)> note_failure;
  };
  /// How long the watchdog waits for the launching thread to leave NCCL before it gives up on the process.
  static constexpr std::chrono::milliseconds kLaunchLockWait = std::chrono::seconds(5);

  /// Starts the thread. `nccl` outlives the watchdog.
  NcclWatchdog(Group group, NcclCommunicator* nccl);
  /// Stop().
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // --- For the launching thread (holding launch_mu). -----------------------------------------------------

  /// OK while the group works; afterwards its first failure, which every later call should quote.
  absl::Status broken();
  /// Holds `work` until its end event has completed, under the group's timeout. A Work enqueued while the
  /// group failed (the watchdog did not see it) fails at once, before its kernels are aborted.
  void Watch(std::shared_ptr<WorkNCCL> work);
  /// A launch that failed half-way (it may have left a collective half-issued): the watchdog aborts the
  /// communicator, as only it may.
  void RequestAbort(const absl::Status& why);
  /// CUDA graphs: `description` was recorded into a graph. TakeCaptured returns those recorded since its
  /// last call, in issue order.
  void Captured(std::string description);
  std::vector<std::string> TakeCaptured();

  /// For the group's destructor: waits (up to the timeout) for the Works in flight, stops the thread, fails
  /// what is still unfinished, and aborts the communicator when the group failed or a collective was cut
  /// short (a failed group is never finalized: finalizing waits for collectives that will never complete).
  /// Otherwise leaves `nccl->comm` for the group to finalize. Idempotent.
  void Stop();

 private:
  void Loop();
  // Drops finished Works from in_flight_, releasing their tensors, and tells the group which of them
  // started or ended on the GPU. Requires works_mu_.
  void ReapFinishedLocked();
  static constexpr size_t kReapEvery = 64;
  // Marks the group broken and tells the group that every unfinished Work in flight ended with `status`
  // (`culprit`) or as aborted along with it (the others); returns those Works. Requires works_mu_.
  std::vector<std::shared_ptr<WorkNCCL>> MarkInFlightFailedLocked(const absl::Status& status, const WorkNCCL* culprit);
  // Fails `victims` (as above, with `status`, which may now say where the flight recorder dumped) and
  // returns the external implementations to release. Requires works_mu_.
  std::vector<std::shared_ptr<ExternalAllReduce>> FailLocked(const std::vector<std::shared_ptr<WorkNCCL>>& victims,
                                                             const absl::Status& status, const WorkNCCL* culprit);
  // The abort: the Works end, the group hears of its failure (observers dump), the Works fail with what
  // they added, then (with launch_mu, waited for at most kLaunchLockWait, else the process exits) the
  // communicator is aborted and the externals released.
  void Abort(const absl::Status& cause, const WorkNCCL* culprit, const char* reason);
  // The externals' Release(), then ncclCommAbort. Requires launch_mu.
  void AbortCommunicatorLocked(const std::vector<std::shared_ptr<ExternalAllReduce>>& externals);

  const Group group_;
  NcclCommunicator* const nccl_;
  std::mutex works_mu_;  // held for moments only: the watchdog must always get it
  std::vector<std::shared_ptr<WorkNCCL>> in_flight_;
  absl::Status broken_;          // the first failure; set once, then every call fails fast with it
  absl::Status abort_request_;   // a launch that failed half-way asks the watchdog to abort
  std::vector<std::string> captured_;  // descriptions recorded into a graph
  std::condition_variable cv_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_NCCL_WATCHDOG_H_
