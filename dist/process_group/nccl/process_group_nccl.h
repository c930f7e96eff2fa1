// ProcessGroupNCCL: collectives on CUDA tensors with NCCL, one process per GPU. This is what DDP's
// gradient all-reduce runs on in a GPU job. CUDA builds only (InitProcessGroup says so otherwise).
//
// The life of one collective, all on the caller's thread, without blocking the host:
//   1. record a start event on the caller's current stream (tensor/stream.h: Stream::Current) and make
//      the group's NCCL stream wait for it: the collective sees every kernel queued before the call;
//   2. issue the NCCL call(s) on the NCCL stream (several inside ncclGroupStart/End when coalesced);
//   3. record an end event on the NCCL stream. Work::SynchronizeStream() makes the caller's stream wait
//      for that event; Work::Wait() polls it from the host. (DDP's buckets on two GPUs of one machine
//      take the copy engines instead, internal/copy_engine_all_reduce.h, whose end is on a stream of
//      its own; later collectives on the NCCL stream are ordered after it.)
// Compute and communication overlap because they run on different streams, ordered only by these events:
// no device-wide synchronisation anywhere on this path. Events come from a pool and return to it when
// their Work is destroyed, so a training loop creates no CUDA events after its first step.
//
// The watchdog thread keeps every in-flight Work (and thus its tensors) alive until its end event has
// completed, polls ncclCommGetAsyncError, and aborts the communicator (ncclCommAbort) when NCCL reports an
// error or a collective exceeds the group's timeout. The affected Works then fail with a clear status
// (DeadlineExceeded for a timeout) instead of hanging, and the group refuses further collectives. A
// Work that was only SynchronizeStream()ed when its collective was aborted leaves undefined data behind:
// check Wait() (or the next collective's status) before trusting results after an error.
// NCCL's environment variables (NCCL_DEBUG, NCCL_SOCKET_IFNAME, ...) are read by NCCL itself, untouched.
#ifndef TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_
#define TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"
#include "tensor/stream.h"

struct ncclComm;  // nccl.h's communicator, kept opaque so this header needs no CUDA include

namespace tinyddp::dist {

class WorkNCCL;
class CudaEventPool;
namespace internal {
class CopyEngineAllReduce;
}

struct NcclOptions {
  /// Bound on communicator setup and on every collective; past it the watchdog aborts the communicator.
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  /// The GPU this rank uses; -1: the calling thread's current device (InitProcessGroup sets cuda:LOCAL_RANK).
  int device = -1;
  /// Key prefix in the store, distinct for each group sharing one store.
  std::string store_prefix = "nccl";
};

class ProcessGroupNCCL : public ProcessGroup {
 public:
  /// Creates the communicator: rank 0 makes an ncclUniqueId and publishes it in `store`; every rank reads
  /// it and joins with ncclCommInitRankConfig (non-blocking, so setup is bounded by the timeout).
  /// Precondition: one process per GPU; every rank passes the same size, store and store_prefix.
  static absl::StatusOr<std::unique_ptr<ProcessGroupNCCL>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                                  NcclOptions options = {});
  /// Waits (up to the timeout) for collectives in flight, then destroys the communicator.
  ~ProcessGroupNCCL() override;

  const char* backend_name() const override { return "nccl"; }
  /// The GPU this group's tensors must live on.
  int device() const { return device_; }
  /// The stream NCCL kernels run on (for benchmarks and tests that time or inspect it).
  const cuda::Stream& nccl_stream() const { return nccl_stream_; }

  /// Two ranks on one machine whose GPUs reach each other: a float32 SUM/AVG all_reduce of 4 MiB or more
  /// issued with AllReduceOptions::overlaps_compute (DDP's buckets) runs on the copy engines instead of in
  /// an NCCL kernel (dist/process_group/nccl/copy_engine/copy_engine_all_reduce.h), leaving the SMs to the backward it overlaps.
  /// TINYDDP_COPY_ENGINE_ALLREDUCE=0 turns it off, TINYDDP_COPY_ENGINE_MIN_BYTES moves the threshold.
  bool copy_engine_on() const { return copy_engine_ != nullptr; }
  /// Why it is off ("TINYDDP_COPY_ENGINE_ALLREDUCE=0", "the two ranks run on different machines", ...).
  const std::string& copy_engine_off_reason() const { return copy_engine_off_; }
  /// How many all_reduces took the copy-engine path so far.
  int64_t copy_engine_calls() const { return copy_engine_calls_; }
  /// Of those, how many went straight into a registered buffer (RegisterBuffers).
  int64_t copy_engine_direct_calls() const;
  /// Collective, host-blocking: pairs these buffers (DDP's flat buckets, all-reduced again and again)
  /// with the other rank's for the copy-engine path, which then sends reduced halves straight into the
  /// peer's buffer (CopyEngineAllReduce::Register). Replaces the previous registration; a no-op when
  /// the copy engines are off. Errors when the ranks' lists differ.
  absl::Status RegisterBuffers(const std::vector<Tensor>& buffers);

 protected:
  std::shared_ptr<Work> RunAllReduce(std::vector<Tensor> tensors, const Call& call) override;
  std::shared_ptr<Work> RunBroadcast(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunAllGather(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduce(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunBarrier(const Call& call) override;
  /// CUDA tensors on device() of float32, float64, bfloat16, int32 or int64.
  absl::Status CheckTensor(const Tensor& tensor) const override;

 private:
  ProcessGroupNCCL(int rank, int size, std::chrono::milliseconds timeout, int device, ncclComm* comm);

  // Steps 1-3 above around `issue`, which makes the NCCL calls on (comm, stream, end event) and returns
  // the ncclResult_t (as int, to keep nccl.h out of this header). With `issue_records_end` the issue
  // records the Work's end event itself (the copy-engine path, whose end is on another stream); else
  // step 3 records it on the NCCL stream, which first waits for any copy-engine call still draining.
  template <typename Issue>
  std::shared_ptr<Work> Launch(const Call& call, std::vector<Tensor> tensors, Issue&& issue,
                               bool issue_records_end = false);
  void WatchdogLoop();
  // Drops finished Works from in_flight_, releasing their tensors. Requires works_mu_.
  void ReapFinishedLocked();
  static constexpr size_t kReapEvery = 64;
  // Aborts the communicator and fails every in-flight Work: `culprit` with `status`, the others with a
  // note that they were aborted along with it. Requires comm_mu_.
  void AbortLocked(const absl::Status& status, const WorkNCCL* culprit);

  const int device_;
  cuda::Stream nccl_stream_;
  std::shared_ptr<CudaEventPool> events_;
  void* barrier_buffer_ = nullptr;  // one float on device_, all-reduced by Barrier()

  std::mutex comm_mu_;  // guards comm_ and broken_: NCCL calls, abort and destroy never overlap
  ncclComm* comm_ = nullptr;
  absl::Status broken_;  // set once the communicator was aborted

  std::unique_ptr<internal::CopyEngineAllReduce> copy_engine_;  // used under comm_mu_
  std::string copy_engine_off_ = "it needs exactly two ranks";
  int64_t copy_engine_calls_ = 0;

  std::mutex works_mu_;
  std::vector<std::shared_ptr<WorkNCCL>> in_flight_;
  std::condition_variable watchdog_cv_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_
