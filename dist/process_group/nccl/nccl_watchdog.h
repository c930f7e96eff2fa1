// NcclWatchdog: what keeps a hung NCCL collective from hanging the job. ProcessGroupNCCL hands it every
// Work it enqueued; everything that happens to a Work after that runs here, on the watchdog's thread.
//
// It holds every Work in flight (and its tensors) until its end event completes, tells the observers when
// each started and ended on the GPU, and polls ncclCommGetAsyncError. On an NCCL error, or a collective
// past the group's timeout (counted from when it was issued), it aborts: the Works fail with a clear status
// (with what the observers add, e.g. where the flight recorder dumped), the observers hear that the group
// is aborting (what waits on a peer lets go), then the communicator is aborted, and the group refuses
// further calls.
//
// Two locks, so that the watchdog never waits on an enqueue: the launching thread holds
// NcclCommunicator::launch_mu for a whole enqueue; `works_mu_` (the Works, the failure) is held only for
// moments. The Works are failed under works_mu_ alone; launch_mu is needed only for ncclCommAbort (NCCL
// must not be inside a call on the communicator it frees). If the launching thread does not leave NCCL
// within kLaunchLockWait (a full CUDA launch queue behind the hung collective can hold it there for good),
// no Status can reach it: the watchdog ends the process cleanly (exit_on_failure.h), never a hang.
// CUDA builds only; included by process_group_nccl.cc.
#ifndef TINYDDP_DIST_PROCESS_GROUP_NCCL_NCCL_WATCHDOG_H_
#define TINYDDP_DIST_PROCESS_GROUP_NCCL_NCCL_WATCHDOG_H_

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "dist/process_group/nccl/process_group_nccl.h"
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
  /// How long the watchdog waits for the launching thread to leave NCCL before it gives up on the process.
  static constexpr std::chrono::milliseconds kLaunchLockWait = std::chrono::seconds(5);

  /// Starts the thread, which tells `group`'s observers. `group` and `nccl` outlive the watchdog.
  NcclWatchdog(ProcessGroupNCCL* group, NcclCommunicator* nccl);
  ~NcclWatchdog() { Stop(); }
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

  /// For the group's destructor: waits (up to the timeout) for the Works in flight, stops the thread, fails
  /// what is unfinished, and aborts the communicator if the group failed or a collective was cut short;
  /// otherwise leaves `nccl->comm` for the group to finalize. Idempotent.
  void Stop();

 private:
  void Loop();
  // Drops finished Works, releasing their tensors, and tells the group which started or ended on the GPU.
  // Requires works_mu_.
  void ReapFinishedLocked();
  static constexpr size_t kReapEvery = 64;
  // Marks the group broken and fails every unfinished Work: `culprit` with `cause`, the others as aborted
  // along with it. With a `reason`, the group hears of its failure (NoteFailure) in between, and `*status`
  // is `cause` with what the observers added.
  void FailInFlight(const absl::Status& cause, const WorkNCCL* culprit, const char* reason, absl::Status* status);
  // FailInFlight, then with launch_mu (waited for at most kLaunchLockWait, else the process exits)
  // AbortCommunicatorLocked.
  void Abort(const absl::Status& cause, const WorkNCCL* culprit, const char* reason);
  // The observers' Aborting(), then ncclCommAbort. Requires launch_mu.
  void AbortCommunicatorLocked();

  ProcessGroupNCCL* const group_;
  NcclCommunicator* const nccl_;
  std::mutex works_mu_;  // held for moments only: the watchdog must always get it
  std::vector<std::shared_ptr<WorkNCCL>> in_flight_;
  absl::Status broken_;         // the first failure; set once, then every call fails fast with it
  absl::Status abort_request_;  // a launch that failed half-way asks the watchdog to abort
  std::condition_variable cv_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_NCCL_WATCHDOG_H_
