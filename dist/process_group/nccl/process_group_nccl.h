// ProcessGroupNCCL: collectives on CUDA tensors with NCCL, one process per GPU. This is what DDP's
// gradient all-reduce runs on in a GPU job. CUDA builds only (InitProcessGroup says so otherwise).
//
// The life of one collective, all on the caller's thread, without blocking the host:
//   1. record a start event on the caller's current stream (tensor/stream.h: Stream::Current) and make
//      the group's NCCL stream wait for it: the collective sees every kernel queued before the call;
//   2. issue the NCCL call(s) on the NCCL stream (several inside ncclGroupStart/End when coalesced);
//   3. record an end event on the NCCL stream. Work::SynchronizeStream() makes the caller's stream wait
//      for that event; Work::Wait() polls it from the host.
// Compute and communication overlap because they run on different streams, ordered only by these events:
// no device-wide synchronisation anywhere on this path. Events come from a pool (no CUDA event is created
// after the first step). An all_reduce implemented outside NCCL (AllReduceExternal, external_all_reduce.h:
// two GPUs' copy engines) goes through the same steps, its implementation issuing step 2.
//
// Reliability lives beside this path, in the watchdog (nccl_watchdog.h): past the group's timeout or on an
// NCCL error it aborts the communicator and the Works fail with a clear status instead of hanging. A Work
// only SynchronizeStream()ed then leaves undefined data: check Wait() before trusting results after an error.
//
// CUDA graphs (tensor/cuda_graph.h): on a capturing stream the same steps are recorded, not run (the start
// event's wait pulls the NCCL stream into the capture; SynchronizeStream joins it back). Such a Work is
// captured: Wait() refuses, the watchdog does not hold it, each replay is watched instead (WatchReplay).
// Sequence numbers are taken at capture, not at replays.
#ifndef TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_
#define TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/process_group/external_all_reduce.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

class WorkNCCL;
class CudaEventPool;
struct NcclCommunicator;  // nccl_watchdog.h: the communicator and its launch lock, kept opaque here
class NcclWatchdog;

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
  /// Creates the communicator: choose the device, share rank 0's ncclUniqueId through `store`, join on a
  /// helper thread (so that setup is bounded by the timeout). Precondition: one process per GPU; every rank
  /// passes the same size, store and store_prefix, and creates its groups in the same order.
  static absl::StatusOr<std::unique_ptr<ProcessGroupNCCL>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                                  NcclOptions options = {});
  /// Waits (up to the timeout) for collectives in flight, then destroys the communicator.
  ~ProcessGroupNCCL() override;

  const char* backend_name() const override { return "nccl"; }
  /// The GPU this group's tensors must live on.
  int device_index() const override { return device_; }
  /// The stream NCCL kernels run on (high priority; DDP's hooks order their work after it).
  cuda::Stream collective_stream() const override { return nccl_stream_; }
  /// An end event behind the replay on the caller's stream, held by the watchdog like a collective (an
  /// abort lets the replay's NCCL kernels exit).
  std::shared_ptr<Work> WatchReplay(std::string description) override;

 protected:
  std::shared_ptr<Work> RunAllReduce(std::vector<Tensor> tensors, const Call& call) override;
  std::shared_ptr<Work> RunBroadcast(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunAllGather(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduce(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunBarrier(const Call& call) override;
  /// ncclSend/ncclRecv inside one ncclGroupStart/End on the NCCL stream, ordered and watched like a
  /// collective (NCCL has no tags: messages between a pair match in issue order, as in PyTorch). The first
  /// transfer between two ranks also connects them, inside ncclGroupEnd: the calling thread waits there
  /// until the peer makes its matching call, a wait no timeout bounds (NCCL's blocking communicator).
  std::shared_ptr<Work> RunPointToPoint(std::vector<P2POp> ops, const Call& call) override;
  /// Steps 1-3 with `impl` issuing step 2 (what else `impl` needs it does as an observer of the group).
  std::shared_ptr<Work> RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl, std::vector<Tensor> tensors,
                                             const Call& call) override;
  /// CUDA tensors on device_index() of float32, float64, bfloat16, int32 or int64.
  absl::Status CheckTensor(const Tensor& tensor) const override;

 private:
  ProcessGroupNCCL(int rank, int size, std::chrono::milliseconds timeout, int device,
                   std::unique_ptr<NcclCommunicator> nccl, std::shared_ptr<Store> store);

  // Steps 1-3 above: step 1, then `enqueue(stream, end)` issues step 2 and records the end event; then the
  // watchdog holds the Work. `external`: the implementation (kept alive by the Work), null for NCCL's calls.
  template <typename Enqueue>
  std::shared_ptr<Work> Launch(const Call& call, std::vector<Tensor> tensors,
                               std::shared_ptr<ExternalAllReduce> external, Enqueue&& enqueue);
  // Launch for NCCL's own calls: `issue(comm, stream)` makes them and returns NCCL's answer.
  template <typename Issue>
  std::shared_ptr<Work> LaunchNccl(const Call& call, std::vector<Tensor> tensors, Issue&& issue);
  // OK, or FailedPrecondition "<what> <refusal>. The cause: <the group's first failure>".
  absl::Status RefuseIfBroken(const std::string& what, const char* refusal);
  // A call that ends before the watchdog holds it: told to the observers, returned as a completed Work.
  std::shared_ptr<Work> EndNow(const Call& call, absl::Status status, bool enqueue_failed = false);

  const int device_;
  cuda::Stream nccl_stream_;
  std::shared_ptr<CudaEventPool> events_;
  void* barrier_buffer_ = nullptr;  // one float on device_, all-reduced by Barrier()
  // The communicator and the lock the launching thread holds for a whole enqueue (nccl_watchdog.h).
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<NcclWatchdog> watchdog_;
  friend class NcclWatchdog;  // tells the observers (NotifyStarted, NotifyEnded, NoteFailure, NotifyAborting)
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_
