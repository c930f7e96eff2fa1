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
// no device-wide synchronisation anywhere on this path. Events come from a pool and return to it when
// their Work is destroyed, so a training loop creates no CUDA events after its first step.
//
// One seam for all_reduces implemented outside NCCL (ProcessGroup::AllReduceExternal, external_all_reduce.h:
// e.g. the copy engines of two GPUs, dist/accel/copy_engine/). Such a call goes through the same steps (its
// implementation issues step 2 and records the end, possibly on a stream of its own), the same numbering
// and debug check, the same watchdog and timeout; later collectives on the NCCL stream are ordered after
// its end.
//
// Reliability lives beside the collective path, in the watchdog (nccl_watchdog.h): a thread that holds
// every Work in flight until its end event completes, and aborts the communicator when NCCL reports an
// error or a collective exceeds the group's timeout (counted from when it was issued); the Works then fail
// with a clear status instead of hanging, and the group refuses further collectives. A Work that was only
// SynchronizeStream()ed when its collective was aborted leaves undefined data behind: check Wait() (or the
// next collective's status) before trusting results after an error.
// NCCL's environment variables (NCCL_DEBUG, NCCL_SOCKET_IFNAME, ...) are read by NCCL itself, untouched;
// NCCL_DEBUG=INFO logs NCCL's own calls only, not external ones.
//
// CUDA graphs (tensor/cuda_graph.h). When the caller's stream is recording a graph, a collective follows
// the same steps, and they are recorded instead of run: the start event's wait pulls the NCCL stream into
// the capture, the NCCL kernel becomes a node of the graph, and SynchronizeStream joins the NCCL stream
// back (NCCL >= 2.9 supports capture; the communicator exists before, as it must). Such a Work is marked
// captured: Wait() refuses (there is no single run to wait for) and the watchdog does not hold it, its
// events being the graph's. Its description is kept (TakeCapturedCollectives) so that each replay, which
// runs all of them where no call of ours can see, is watched as one unit: WatchReplay. External
// all_reduces are refused under capture (the copy-engine hook never sends one there). Sequence numbers
// are taken at capture and do not advance at replays, identically on every rank.
#ifndef TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_
#define TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
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
  /// Creates the communicator, in three stages (process_group_nccl.cc): choose the device, share rank 0's
  /// ncclUniqueId through `store`, join with ncclCommInitRankConfig on a helper thread (so that setup is
  /// bounded by the timeout). Precondition: one process per GPU; every rank passes the same size, store
  /// and store_prefix, and creates its groups in the same order.
  static absl::StatusOr<std::unique_ptr<ProcessGroupNCCL>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                                  NcclOptions options = {});
  /// Waits (up to the timeout) for collectives in flight, then destroys the communicator.
  ~ProcessGroupNCCL() override;

  const char* backend_name() const override { return "nccl"; }

  /// The GPU this group's tensors must live on.
  int device_index() const override { return device_; }
  /// The stream NCCL kernels run on (high priority; DDP's hooks order their work after it).
  cuda::Stream collective_stream() const override { return nccl_stream_; }

  /// CUDA graphs: the descriptions of the collectives recorded into a graph since the last call ("AllReduce(
  /// float32 [267786], AVG) #9 on nccl rank 0/2", in issue order), and forgets them. Called right after a
  /// capture: the collectives each replay of that graph runs.
  std::vector<std::string> TakeCapturedCollectives() override;
  /// CUDA graphs: watches one replay. Call right after enqueueing it (on the caller's current stream):
  /// records an end event there, behind the replay, and holds it in the watchdog like a collective, under
  /// the group's timeout. A replay that does not finish in time (a rank died or hangs) aborts the
  /// communicator, which lets the replay's NCCL kernels exit, and the returned Work fails naming
  /// `description` (which should say which collectives the graph holds). An aborted group returns a failed
  /// Work at once.
  std::shared_ptr<Work> WatchReplay(std::string description) override;

  /// A fresh key space in this group's part of the store ("<group prefix>/<purpose>/<n>") for a module
  /// set up beside the group (the copy-engine all_reduce). The n-th call gets the same keys on every rank.
  /// Precondition: every rank calls it in the same order.
  std::shared_ptr<Store> SubStore(const std::string& purpose) override;

 protected:
  std::shared_ptr<Work> RunAllReduce(std::vector<Tensor> tensors, const Call& call) override;
  std::shared_ptr<Work> RunBroadcast(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunAllGather(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduce(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunBarrier(const Call& call) override;
  /// ProcessGroup::AllReduceExternal on this group: started after the caller's stream, watched by the
  /// watchdog under the group's timeout (which releases `impl` when it aborts), and followed on the NCCL
  /// stream by whatever the group runs next. `impl` is kept alive while its call is in flight.
  std::shared_ptr<Work> RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl, std::vector<Tensor> tensors,
                                             const Call& call) override;
  /// CUDA tensors on device_index() of float32, float64, bfloat16, int32 or int64.
  absl::Status CheckTensor(const Tensor& tensor) const override;

 private:
  ProcessGroupNCCL(int rank, int size, std::chrono::milliseconds timeout, int device,
                   std::unique_ptr<NcclCommunicator> nccl, std::shared_ptr<Store> store);

  // Steps 1-3 above around `issue`, which makes the NCCL calls on (comm, stream) and returns the
  // ncclResult_t (as int, to keep nccl.h out of this header).
  template <typename Issue>
  std::shared_ptr<Work> Launch(const Call& call, std::vector<Tensor> tensors, Issue&& issue);
  // The launch path shared by NCCL and external calls: step 1, the ordering after an external call, then
  // `enqueue(stream, end)`, which issues step 2 and records the end event (step 3); then the watchdog.
  template <typename Enqueue>
  std::shared_ptr<Work> LaunchOnStream(const Call& call, std::vector<Tensor> tensors,
                                       std::shared_ptr<ExternalAllReduce> external, Enqueue&& enqueue);
  // OK, or why `what` is not run: the group failed earlier (the watchdog's first failure).
  absl::Status RefuseIfBroken(const std::string& what);
  // An enqueue that failed: the watchdog aborts the group unless nothing was enqueued (InvalidArgument).
  std::shared_ptr<Work> FailedEnqueue(const Call& call, absl::Status status);
  // A call that ends before it is enqueued: told to the observers, returned as a completed Work.
  std::shared_ptr<Work> EndNow(const Call& call, absl::Status status);

  const int device_;
  cuda::Stream nccl_stream_;
  std::shared_ptr<CudaEventPool> events_;
  void* barrier_buffer_ = nullptr;  // one float on device_, all-reduced by Barrier()
  std::shared_ptr<Store> store_;    // this group's keys
  int64_t sub_stores_ = 0;
  // The communicator and the lock the launching thread holds for a whole enqueue (nccl_watchdog.h).
  std::unique_ptr<NcclCommunicator> nccl_;
  // The last call, if it was external: its end may lie beyond the NCCL stream, so the next call waits for
  // it there (unless it is a call of the same implementation). Guarded by the launch lock.
  std::shared_ptr<WorkNCCL> last_external_;
  std::unique_ptr<NcclWatchdog> watchdog_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_NCCL_PROCESS_GROUP_NCCL_H_
