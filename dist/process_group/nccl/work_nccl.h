// WorkNCCL: the Work of one NCCL collective, completed by a CUDA event rather than by a host thread; and
// CudaEventPool, which recycles those events so steady-state training creates none. A WorkNCCL owns two
// pooled events: `start`, recorded on the caller's stream (the NCCL stream waits on it), and `end`, recorded
// after the collective. Completion is "end has completed", unless the watchdog failed the Work first. It
// keeps its tensors alive until the GPU is done with them. CUDA builds only.
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

  /// `caller_stream`: where it was issued (its start event is recorded there). `external`: the
  /// implementation of an external all_reduce (kept alive as long as this Work), else null. `seq`: its sequence number. `captured`: recorded
  /// into a CUDA graph (it runs at every replay): Wait() refuses, SynchronizeStream() still orders the
  /// capturing stream after it, and the watchdog never holds it.
  WorkNCCL(std::string description, std::chrono::milliseconds default_timeout, int device,
           std::shared_ptr<CudaEventPool> pool, std::vector<Tensor> tensors, cudaStream_t caller_stream,
           std::shared_ptr<ExternalAllReduce> external, int64_t seq, bool captured);
  ~WorkNCCL() override;

  /// Polls the end event from the host (spinning briefly, then sleeping) until it completes, the
  /// watchdog fails this Work, or `timeout` passes.
  absl::Status Wait(std::chrono::milliseconds timeout) override;
  using Work::Wait;
  /// cudaStreamWaitEvent(current stream of the device, end): the GPU waits, the host does not.
  absl::Status SynchronizeStream() override;
  bool IsCompleted() override;

  // --- For ProcessGroupNCCL and its watchdog. --------------------------------------------------------
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t end_event() const { return end_; }
  Clock::time_point enqueued_at() const { return enqueued_at_; }
  int64_t seq() const { return seq_; }
  /// The end event completed (never for a captured Work) / the start event did (the stream reached it).
  bool GpuFinished() const;
  bool StartReached() const;
  /// The failure set by Fail() (the first one), which Wait() and SynchronizeStream() return; else OK.
  absl::Status Failure();
  void Fail(absl::Status status);
  /// Drops the references to the tensors (once the GPU is done with them).
  void ReleaseTensors();

 private:
  const int device_;
  std::shared_ptr<CudaEventPool> pool_;
  cudaEvent_t start_, end_;
  const Clock::time_point enqueued_at_;
  const cudaStream_t caller_stream_;
  const std::shared_ptr<ExternalAllReduce> external_;
  const int64_t seq_;
  const bool captured_;
  std::mutex mu_;
  std::vector<Tensor> tensors_;
  absl::Status failure_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_WORK_NCCL_H_
