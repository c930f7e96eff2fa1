// NcclWatchdog: the thread's loop (reap, time out, poll NCCL's async error), the abort, and the teardown.
#include "dist/process_group/nccl/nccl_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dist/process_group/exit_on_failure.h"

namespace tinyddp::dist {

namespace {

using Clock = std::chrono::steady_clock;

// How a Work that fails with the group fails: `culprit` with `status`, the others as aborted along with it.
absl::Status FailureOf(const WorkNCCL& work, const absl::Status& status, const WorkNCCL* culprit) {
  if (&work == culprit) return status;
  return absl::AbortedError(absl::StrCat(work.description(), " was aborted with the communicator: ", status.message()));
}

}  // namespace

std::string NcclError(ncclResult_t r, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::StrCat(ncclGetErrorString(r), last != nullptr && *last ? absl::StrCat(" (", last, ")") : "",
                      ". Set NCCL_DEBUG=INFO to see NCCL's view.");
}

NcclWatchdog::NcclWatchdog(ProcessGroupNCCL* group, NcclCommunicator* nccl) : group_(group), nccl_(nccl) {
  in_flight_.reserve(256);
  thread_ = std::thread([this] { Loop(); });
}

// --- For the launching thread --------------------------------------------------------------------------

absl::Status NcclWatchdog::broken() {
  std::lock_guard<std::mutex> lock(works_mu_);
  return broken_;
}

void NcclWatchdog::Watch(std::shared_ptr<WorkNCCL> work) {
  std::lock_guard<std::mutex> lock(works_mu_);
  // Failed while this call was enqueued: it fails too, before its kernels are aborted (so Wait can never
  // read an aborted end as success).
  if (!broken_.ok()) work->Fail(FailureOf(*work, broken_, nullptr));
  // Tight loops of small collectives outpace the watchdog's period: one sweep per kReapEvery launches
  // keeps the list (and the events its Works hold) bounded.
  if (in_flight_.size() >= kReapEvery) ReapFinishedLocked();
  in_flight_.push_back(std::move(work));
}

void NcclWatchdog::RequestAbort(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(works_mu_);
  if (abort_request_.ok()) abort_request_ = why;
  cv_.notify_all();
}

// --- The thread ----------------------------------------------------------------------------------------

void NcclWatchdog::Loop() {
  const auto timeout = group_->timeout();
  const auto period =
      std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), timeout / 10 + std::chrono::milliseconds(1));
  for (;;) {
    absl::Status failure;
    std::shared_ptr<WorkNCCL> late;
    const char* reason = "abort";
    {
      std::unique_lock<std::mutex> lock(works_mu_);
      cv_.wait_for(lock, period, [this] { return stopping_ || !abort_request_.ok(); });
      if (stopping_) return;
      ReapFinishedLocked();
      if (!abort_request_.ok()) {
        failure = std::exchange(abort_request_, absl::OkStatus());
      } else if (broken_.ok() && !in_flight_.empty() && Clock::now() - in_flight_.front()->enqueued_at() > timeout) {
        // The oldest unfinished Work decides about the timeout.
        late = in_flight_.front();
        failure = absl::DeadlineExceededError(absl::StrCat(
            late->description(), " did not finish within ", timeout.count(),
            " ms (the group's timeout, counted from when it was issued): another rank did not join it, is stuck, "
            "or died. The NCCL communicator was aborted; create a new process group to continue."));
        reason = "timeout";
      }
    }
    // nccl_->comm is only ever cleared by this thread (see the header), so reading it here needs no lock;
    // NCCL allows the query while another thread enqueues.
    if (failure.ok() && nccl_->comm != nullptr) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(nccl_->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        failure = absl::UnavailableError(absl::StrCat("NCCL reported an asynchronous error on rank ", group_->rank(),
                                                      ": ", NcclError(async, nccl_->comm), " (a peer may have died)"));
        reason = "error";
      }
    }
    if (!failure.ok()) Abort(failure, late.get(), reason);
  }
}

void NcclWatchdog::ReapFinishedLocked() {
  // The NCCL stream runs its collectives in order, so the first unfinished one has started once the stream
  // reached its start event (approximate for external calls, which end on streams of their own).
  size_t kept = 0;
  bool earlier_finished = true;
  for (auto& w : in_flight_) {
    if (w->GpuFinished()) {
      group_->NotifyEnded(w->seq(), w->Failure());
      w->ReleaseTensors();
      continue;
    }
    if (earlier_finished && w->StartReached()) group_->NotifyStarted(w->seq());
    earlier_finished = false;
    in_flight_[kept++] = std::move(w);
  }
  in_flight_.resize(kept);
}

// --- The abort -----------------------------------------------------------------------------------------

void NcclWatchdog::FailInFlight(const absl::Status& cause, const WorkNCCL* culprit, const char* reason,
                                absl::Status* status) {
  // The observers see the Works end first, then hear of the failure (a flight recorder dumps, so its dump
  // shows them failed, and says where it is); the Works then fail with that text appended.
  std::vector<std::shared_ptr<WorkNCCL>> victims;
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    if (broken_.ok()) broken_ = cause;
    for (auto& w : in_flight_) {
      if (w->GpuFinished()) continue;
      group_->NotifyEnded(w->seq(), FailureOf(*w, cause, culprit));  // recorded before the waiter wakes and looks
      victims.push_back(w);
    }
  }
  *status = reason != nullptr ? group_->NoteFailure(cause, reason) : cause;
  // Fail the Works before any abort: aborting lets their kernels exit, and an end event that completes
  // after an abort must never read as success (WorkNCCL::Wait checks the failure after seeing the event).
  std::lock_guard<std::mutex> lock(works_mu_);
  if (broken_ == cause) broken_ = *status;  // later calls quote it, with where the dump is
  for (const auto& w : victims) w->Fail(FailureOf(*w, *status, culprit));
}

void NcclWatchdog::Abort(const absl::Status& cause, const WorkNCCL* culprit, const char* reason) {
  absl::Status status;
  FailInFlight(cause, culprit, reason, &status);
  // Every waiter has its error now. Freeing the communicator needs the launching thread out of NCCL.
  std::unique_lock<std::timed_mutex> launch(nccl_->launch_mu, std::defer_lock);
  if (!launch.try_lock_for(kLaunchLockWait)) {
    ExitOnCollectiveFailure(
        absl::StrCat("ProcessGroupNCCL watchdog (rank ", group_->rank(), ")"),
        absl::Status(status.code(),
                     absl::StrCat(status.message(), "\nThe thread issuing collectives has been inside an NCCL/CUDA call "
                                  "for over ", kLaunchLockWait.count() / 1000, " s (its launch queue is full behind the "
                                  "hung collective), so this error cannot be returned to it.")));
  }
  AbortCommunicatorLocked();
}

void NcclWatchdog::AbortCommunicatorLocked() {
  // The observers first: GPU work of theirs that waits on a peer (an external all_reduce's) lets go, so its
  // streams drain. Only then NCCL: ncclCommAbort frees device memory, and cudaFree waits for the whole
  // device, including a stream still waiting for its peer (measured: aborting NCCL first hung the
  // watchdog for good on one H200, behind an external all_reduce's waits).
  group_->NotifyAborting();
  if (nccl_->comm != nullptr) ncclCommAbort(nccl_->comm);  // NCCL kernels exit; the streams move on
  nccl_->comm = nullptr;
}

// --- Teardown ------------------------------------------------------------------------------------------

void NcclWatchdog::Stop() {
  if (std::exchange(stopped_, true)) return;
  auto first_unfinished = [this]() -> std::shared_ptr<WorkNCCL> {  // requires works_mu_
    auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [](const auto& w) { return !w->IsCompleted(); });
    return it == in_flight_.end() ? nullptr : *it;
  };
  // Let collectives in flight finish (bounded), so destroying the communicator cannot cut one short.
  for (const auto deadline = Clock::now() + group_->timeout(); Clock::now() < deadline;) {
    {
      std::lock_guard<std::mutex> lock(works_mu_);
      if (first_unfinished() == nullptr) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::timed_mutex> launch(nccl_->launch_mu);
  std::shared_ptr<WorkNCCL> unfinished;
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    unfinished = first_unfinished();
  }
  if (unfinished != nullptr) {  // cut short after all: fail it (the group is then aborted below)
    const absl::Status status = absl::AbortedError(
        absl::StrCat(unfinished->description(), " was still in flight when its group was destroyed"));
    absl::Status same;
    FailInFlight(status, unfinished.get(), /*reason=*/nullptr, &same);
  }
  // A group that failed (or whose last launch asked for an abort the watchdog had no time to make) is
  // aborted, never finalized: finalizing waits for collectives that will never complete.
  if (nccl_->comm != nullptr && (!broken_.ok() || !abort_request_.ok())) AbortCommunicatorLocked();
  for (auto& w : in_flight_) w->ReleaseTensors();
}

}  // namespace tinyddp::dist
