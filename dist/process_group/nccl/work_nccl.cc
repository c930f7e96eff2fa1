// WorkNCCL and CudaEventPool: events in, events out, and host-side polling with a deadline.
#include "dist/process_group/nccl/work_nccl.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

CudaEventPool::~CudaEventPool() {
  DeviceScope scope(device_);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t CudaEventPool::Get() {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  DeviceScope scope(device_);
  // Ordering only: timing makes every record more expensive and we never read elapsed times here.
  return cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess ? e : nullptr;
}

void CudaEventPool::Put(cudaEvent_t event) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

WorkNCCL::WorkNCCL(std::string description, std::chrono::milliseconds default_timeout, int device,
                   std::shared_ptr<CudaEventPool> pool, std::vector<Tensor> tensors, cudaStream_t caller_stream,
                   std::shared_ptr<ExternalAllReduce> external, int64_t seq, bool captured)
    : Work(std::move(description), default_timeout), device_(device), pool_(std::move(pool)),
      start_(pool_->Get()), end_(pool_->Get()), enqueued_at_(Clock::now()), caller_stream_(caller_stream),
      external_(std::move(external)), seq_(seq), captured_(captured), tensors_(std::move(tensors)) {}

WorkNCCL::~WorkNCCL() {
  // Nobody can wait on these recordings any more (this Work was the only handle to them).
  pool_->Put(start_);
  pool_->Put(end_);
}

absl::Status WorkNCCL::Failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void WorkNCCL::Fail(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.ok()) failure_ = std::move(status);
}

void WorkNCCL::ReleaseTensors() {
  std::vector<Tensor> drop;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  drop.swap(tensors_);
}

// An event recorded inside a capture must not be queried (it exists only inside the graph).
bool WorkNCCL::GpuFinished() const { return !captured_ && cudaEventQuery(end_) == cudaSuccess; }

bool WorkNCCL::StartReached() const { return cudaEventQuery(start_) == cudaSuccess; }

bool WorkNCCL::IsCompleted() { return !Failure().ok() || GpuFinished(); }

absl::Status WorkNCCL::Wait(std::chrono::milliseconds timeout) {
  if (captured_) {
    return absl::FailedPreconditionError(absl::StrCat(
        description(), " was recorded into a CUDA graph: it runs at every replay of the graph, so the host cannot "
        "wait for it here. hint: order the stream after it with SynchronizeStream() (DDP's reducer does), and "
        "watch each replay instead (ProcessGroupNCCL::WatchReplay)"));
  }
  const auto deadline = Clock::now() + timeout;
  for (int spins = 0;; ++spins) {
    RETURN_IF_ERROR(Failure());
    const cudaError_t q = cudaEventQuery(end_);
    // A Work the watchdog failed is failed before its kernels are aborted, so once the event has
    // completed, Failure() is final.
    if (q == cudaSuccess) {
      // The GPU is done with the tensors: let them go now rather than at the watchdog's next sweep, so a
      // caller that waits and then allocates again gets the same blocks back from the caching allocator.
      ReleaseTensors();
      return Failure();
    }
    if (q != cudaErrorNotReady) {
      return absl::InternalError(absl::StrCat(description(), ": CUDA reported ", cudaGetErrorName(q), " (",
                                              cudaGetErrorString(q), ") while waiting for it"));
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Work::Wait gave up after ", timeout.count(), " ms: ", description(),
          " has not finished on the GPU (another rank may not have called it yet; the watchdog aborts it "
          "once it exceeds the group's timeout)"));
    }
    // Small collectives finish in tens of microseconds: spin first, then back off to sleeping.
    if (spins < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

absl::Status WorkNCCL::SynchronizeStream() {
  RETURN_IF_ERROR(Failure());
  DeviceScope scope(device_);
  cudaStream_t current = static_cast<cudaStream_t>(cuda::Stream::Current(device_).handle());
  const cudaError_t err = cudaStreamWaitEvent(current, end_, 0);
  if (err != cudaSuccess) {
    return absl::InternalError(absl::StrCat(description(), ": cudaStreamWaitEvent failed: ", cudaGetErrorString(err)));
  }
  // The tensors' memory returns to the caching allocator's pool of the stream they were made on, which is
  // reused in that stream's order: safe once that stream is behind the collective. Holding them until
  // the watchdog's next sweep instead would make every step allocate afresh (DDP's coalesced gradients).
  if (current == caller_stream_) ReleaseTensors();
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
