// CompletionWork: a mutex, a condition variable and the final status.
#include "dist/process_group/work.h"

#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

std::shared_ptr<Work> CompletionWork::Done(absl::Status status, std::string description,
                                           std::chrono::milliseconds default_timeout) {
  auto work = std::make_shared<CompletionWork>(std::move(description), default_timeout);
  work->Complete(std::move(status));
  return work;
}

void CompletionWork::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;  // a second completion would be a bug in the caller; keep the first outcome
    done_ = true;
    status_ = std::move(status);
    completed_at_ = std::chrono::steady_clock::now();
  }
  done_cv_.notify_all();
}

void CompletionWork::MarkStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  started_at_ = std::chrono::steady_clock::now();
}

bool CompletionWork::HostInterval(std::chrono::steady_clock::time_point* start,
                                  std::chrono::steady_clock::time_point* end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_ || !started_) return false;
  *start = started_at_;
  *end = completed_at_;
  return true;
}

absl::Status CompletionWork::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("Work::Wait gave up after ", timeout.count(), " ms: ", description(),
                     " has not finished (another rank may not have called it yet)"));
  }
  return status_;
}

bool CompletionWork::IsCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

}  // namespace tinyddp::dist
