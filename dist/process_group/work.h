// Work: the handle a collective returns, c10d's vocabulary. Every ProcessGroup call is asynchronous: it
// enqueues the collective and hands back a Work at once; the caller overlaps other work and waits later.
//
// Two ways to wait, because CPU and GPU collectives finish in different places: Wait() blocks the calling
// thread until the collective has finished; SynchronizeStream() makes the caller's current CUDA stream wait
// for a GPU collective (an event wait, queued on the GPU) and returns at once, PyTorch's work.wait() for
// NCCL. CompletionWork is the Work of collectives that finish on a host thread (Gloo, and errors found
// before a collective starts); ProcessGroupNCCL has its own, completed by CUDA events.
#ifndef TINYDDP_DIST_PROCESS_GROUP_WORK_H_
#define TINYDDP_DIST_PROCESS_GROUP_WORK_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace tinyddp::dist {

/// Collectives and Work::Wait() use this unless the group was created with another timeout.
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout = std::chrono::seconds(300);
/// How much longer than the group's timeout Work::Wait() waits: the group fails a late collective itself,
/// with the informative error (where the flight recorder dumped), and the margin lets that arrive first.
inline constexpr std::chrono::milliseconds kWaitMargin = std::chrono::seconds(5);

/// One collective in flight. Thread-safe: any thread may wait on it or poll it.
class Work {
 public:
  /// `description` names the collective in errors: "AllReduce(float32 [1000], SUM) #7 on gloo rank 0/2".
  Work(std::string description, std::chrono::milliseconds default_timeout)
      : description_(std::move(description)), default_timeout_(default_timeout) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  /// Blocks until the collective has finished, failed, or `timeout` has passed. Returns its status: OK (the
  /// outputs hold the result), its own error (InvalidArgument for bad arguments, DeadlineExceeded past the
  /// group's timeout, Internal/Unavailable for transport errors), or DeadlineExceeded if this wait gave up.
  virtual absl::Status Wait(std::chrono::milliseconds timeout) = 0;
  /// Waits for the collective's outcome: the group fails it once the group's timeout has passed since it
  /// was issued, so this returns within that timeout (plus kWaitMargin, should the group be late).
  absl::Status Wait() { return Wait(default_timeout_ + kWaitMargin); }

  /// For GPU work: makes the calling thread's current stream (of the collective's device) wait for the
  /// collective without blocking the host, so kernels queued afterwards see the result. Returns an error
  /// already known (argument checks, the watchdog), else OK. CPU work has no stream to order: Wait().
  virtual absl::Status SynchronizeStream() { return Wait(); }

  /// True once the collective has finished, successfully or not. Never blocks.
  virtual bool IsCompleted() = 0;

  /// For traces: when a host thread ran this collective (Gloo's worker), the steady_clock times it started
  /// and finished; false for GPU work or work that has not finished.
  virtual bool HostInterval(std::chrono::steady_clock::time_point* start, std::chrono::steady_clock::time_point* end) {
    return false;
  }

  const std::string& description() const { return description_; }

 private:
  const std::string description_;
  const std::chrono::milliseconds default_timeout_;
};

/// A Work finished by a host thread calling Complete(status) exactly once.
class CompletionWork : public Work {
 public:
  using Work::Work;

  /// A Work that has already finished with `status`, e.g. an argument error found before enqueueing.
  static std::shared_ptr<Work> Done(absl::Status status, std::string description,
                                    std::chrono::milliseconds default_timeout = kDefaultCollectiveTimeout);

  /// Records the outcome (and the time) and wakes every waiter; a second call is ignored.
  void Complete(absl::Status status);
  /// Records that a host thread starts running the collective now (for HostInterval).
  void MarkStarted();

  absl::Status Wait(std::chrono::milliseconds timeout) override;
  using Work::Wait;
  bool IsCompleted() override;
  bool HostInterval(std::chrono::steady_clock::time_point* start, std::chrono::steady_clock::time_point* end) override;

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  absl::Status status_;
  bool started_ = false;
  std::chrono::steady_clock::time_point started_at_, completed_at_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_WORK_H_
