// WorkNCCL: the Work of one NCCL collective, completed by a CUDA event rather than by a host thread; and
// CudaEventPool, which recycles those events so steady-state training creates none.
//
// A WorkNCCL owns two pooled events: `start`, recorded on the caller's stream (the NCCL stream waits on
// it), and `end`, recorded on the NCCL stream after the collective (or, for an external all_reduce,
// wherever its implementation ends it; the Work then also keeps the implementation alive). Completion is "end has completed",
// unless the watchdog failed the Work first (timeout or NCCL error). The Work keeps its tensors alive
// until the watchdog sees it complete, so memory cannot be reused while NCCL still reads or writes it.
// CUDA builds only; included by process_group_nccl.cc.
#ifndef TINYDDP_DIST_PROCESS_GROUP_NCCL_WORK_NCCL_H_
#define TINYDDP_DIST_PROCESS_GROUP_NCCL_WORK_NCCL_H_

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/process_group/external_all_reduce.h"
#include "dist/process_group/work.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

/// Makes `device` current for a scope (the caller's thread may be working on another GPU).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    cudaGetDevice(&now);
    if (now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

/// Ordering-only events (no timing) for one device; thread-safe.
class CudaEventPool {
 public:
  explicit CudaEventPool(int device) : device_(device) {}
  ~CudaEventPool();
  /// A free event, created only when none is free.
  cudaEvent_t Get();
  /// Returns `event` for reuse. Precondition: nothing will wait on its current recording any more.
  void Put(cudaEvent_t event);

 private:
  const int device_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

class WorkNCCL : public Work {
 public:
  using Clock = std::chrono::steady_clock;

  /// `caller_stream`: the stream the collective was issued from (its start event is recorded there).
  /// `external`: the implementation carrying it, for an external all_reduce; null for NCCL's.
  /// `seq`: its sequence number in the group (the flight recorder's key).
  WorkNCCL(std::string description, std::chrono::milliseconds default_timeout, int device,
           std::shared_ptr<CudaEventPool> pool, std::vector<Tensor> tensors, cudaStream_t caller_stream,
           std::shared_ptr<ExternalAllReduce> external, int64_t seq);
  ~WorkNCCL() override;

  /// Polls the end event from the host (spinning briefly, then sleeping) until it completes, the
  /// watchdog fails this Work, or `timeout` passes.
  absl::Status Wait(std::chrono::milliseconds timeout) override;
  using Work::Wait;
  /// cudaStreamWaitEvent(current stream of the device, end): the GPU waits, the host does not. When that
  /// is the caller's stream, the tensors are let go at once: whatever that stream does next, including
  /// reusing their memory through the caching allocator, runs after the collective.
  absl::Status SynchronizeStream() override;
  bool IsCompleted() override;

  // --- For ProcessGroupNCCL and its watchdog. --------------------------------------------------------
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t end_event() const { return end_; }
  Clock::time_point enqueued_at() const { return enqueued_at_; }
  /// The implementation of an external all_reduce (the watchdog releases it on abort); null for NCCL's.
  const std::shared_ptr<ExternalAllReduce>& external() const { return external_; }
  int64_t seq() const { return seq_; }
  /// True once the NCCL kernels behind this Work have finished on the GPU.
  bool GpuFinished() const;
  /// True once the caller's stream has reached the call (its start event completed).
  bool StartReached() const;
  /// The failure set by Fail(), or OK.
  absl::Status FailureSoFar() { return Failure(); }
  /// Marks the Work failed; Wait() and SynchronizeStream() return `status` from now on.
  void Fail(absl::Status status);
  /// The collective was recorded into a CUDA graph (its caller's stream was capturing): it runs at every
  /// replay, so there is no single run to wait for. Wait() refuses; SynchronizeStream() still orders the
  /// capturing stream after it (inside the graph). The watchdog never holds such a Work: each replay is
  /// watched instead (ProcessGroupNCCL::WatchReplay).
  void MarkCaptured() { captured_ = true; }
  bool captured() const { return captured_; }
  /// Drops the references to the tensors (the watchdog calls this once the GPU is done with them).
  void ReleaseTensors();

 private:
  absl::Status Failure();

  const int device_;
  std::shared_ptr<CudaEventPool> pool_;
  cudaEvent_t start_;
  cudaEvent_t end_;
  const Clock::time_point enqueued_at_;
  const cudaStream_t caller_stream_;
  const std::shared_ptr<ExternalAllReduce> external_;
  const int64_t seq_;
  bool captured_ = false;
  std::mutex mu_;
  std::vector<Tensor> tensors_;
  absl::Status failure_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_WORK_NCCL_H_
