// ProcessGroupNCCL: communicator setup through the store (in stages), the launch path shared by every
// collective, NCCL's and external ones, one short function per collective, and the watchdog.
#include "dist/process_group/nccl/process_group_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/exit_on_failure.h"
#include "dist/process_group/host_reduce.h"
#include "dist/store/prefix_store.h"
#include "dist/process_group/nccl/work_nccl.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t ToNccl(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    default: return ncclFloat32;  // unreachable: CheckTensor rejected it
  }
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kProduct: return ncclProd;
  }
  return ncclSum;
}

std::string NcclError(ncclResult_t r, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::StrCat(ncclGetErrorString(r), last != nullptr && *last ? absl::StrCat(" (", last, ")") : "",
                      ". Set NCCL_DEBUG=INFO to see NCCL's view.");
}

// A non-blocking communicator may answer ncclInProgress; it must then be polled until it settles before
// the next call. Returns the settled result, or ncclInProgress if `deadline` passed first.
ncclResult_t Settle(ncclResult_t r, ncclComm_t comm, Clock::time_point deadline) {
  while (r == ncclInProgress) {
    if (Clock::now() >= deadline) return ncclInProgress;
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclSystemError;
  }
  return r;
}

}  // namespace

// --- Setup and teardown ------------------------------------------------------------------------------

namespace {

// Stage 1: the GPU of this rank, made current.
absl::StatusOr<int> ChooseDevice(int rank, int size, const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("ProcessGroupNCCL::Create: rank ", rank, " is not in [0, ", size, ")"));
  }
  const int count = cuda::DeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError("ProcessGroupNCCL needs a CUDA GPU and none is visible (use the gloo backend)");
  }
  const int device = options.device >= 0 ? options.device : cuda::CurrentDevice();
  if (device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("ProcessGroupNCCL: device cuda:", device, " does not exist (",
                                                   count, " visible; check LOCAL_RANK and CUDA_VISIBLE_DEVICES)"));
  }
  cuda::SetDevice(device);
  return device;
}

// Stage 2: rank 0 creates the communicator's identity; the store carries it to everyone else.
absl::StatusOr<ncclUniqueId> ShareUniqueId(Store& keys, int rank, std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat("ncclGetUniqueId failed: ", NcclError(r, nullptr)));
    }
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&id);
    RETURN_IF_ERROR(keys.Set("unique_id", Bytes(p, p + sizeof(id))));
    return id;
  }
  if (absl::Status s = keys.Wait({"unique_id"}, timeout); !s.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", rank, " waited ", timeout.count(),
                                                    " ms for rank 0's NCCL id: ", s.message()));
  }
  ASSIGN_OR_RETURN(const Bytes bytes, keys.Get("unique_id"));
  if (bytes.size() != sizeof(id)) return absl::DataLossError("the NCCL id in the store has the wrong size");
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

// Stage 3: every rank joins the communicator.
// A BLOCKING communicator: in non-blocking mode every collective may answer ncclInProgress and has to be
// polled until NCCL's own thread has enqueued it, which costs ~30 us per call (measured on 2x H200: 55 us
// for an 8-byte all_reduce instead of PyTorch's ~25 us). Setup is still bounded: it runs on a helper
// thread and we stop waiting after the timeout (the process then fails; the thread is left behind). Hung
// collectives are bounded by the watchdog, which aborts the communicator (ncclCommAbort unblocks them).
absl::StatusOr<ncclComm_t> JoinCommunicator(const ncclUniqueId& id, int rank, int size, int device,
                                            std::chrono::milliseconds timeout) {
  struct InitResult {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ncclResult_t r = ncclInProgress;
    ncclComm_t comm = nullptr;
  };
  auto init = std::make_shared<InitResult>();
  // Connect every channel during setup (NCCL otherwise connects lazily inside the first collective, where a
  // blocking communicator would block the host until every peer joins, out of the watchdog's reach).
  // A value the user set wins.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  std::thread([init, size, id, rank, device] {
    cudaSetDevice(device);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    ncclComm_t c = nullptr;
    ncclResult_t res = ncclCommInitRankConfig(&c, size, id, rank, &config);
    std::lock_guard<std::mutex> lock(init->mu);
    init->r = res;
    init->comm = c;
    init->done = true;
    init->cv.notify_all();
  }).detach();
  ncclResult_t r = ncclInProgress;
  ncclComm_t comm = nullptr;
  {
    std::unique_lock<std::mutex> lock(init->mu);
    if (init->cv.wait_for(lock, timeout, [&] { return init->done; })) {
      r = init->r;
      comm = init->comm;
    }
  }
  if (r == ncclInProgress) {
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL communicator setup of rank ", rank, "/", size, " did not finish within ", timeout.count(),
        " ms: a rank did not join, or the ranks cannot reach each other (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME)"));
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::UnavailableError(absl::StrCat("ncclCommInitRankConfig (rank ", rank, "/", size,
                                               ") failed: ", NcclError(r, nullptr)));
  }
  return comm;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupNCCL>> ProcessGroupNCCL::Create(std::shared_ptr<Store> store, int rank,
                                                                           int size, NcclOptions options) {
  ASSIGN_OR_RETURN(const int device, ChooseDevice(rank, size, options));
  // Each group this process creates gets its own keys: a second group over the same store (a test that
  // trains twice, a new group after an abort) must never read the previous group's stale id. Every rank
  // creates its groups in the same order, so the n-th group has the same number everywhere (as c10d's
  // group counter).
  static std::atomic<int64_t> groups_created{0};
  auto keys = std::make_shared<PrefixStore>(absl::StrCat(options.store_prefix, "/", groups_created.fetch_add(1)),
                                            std::move(store));
  ASSIGN_OR_RETURN(const ncclUniqueId id, ShareUniqueId(*keys, rank, options.timeout));
  ASSIGN_OR_RETURN(ncclComm_t comm, JoinCommunicator(id, rank, size, device, options.timeout));
  return std::unique_ptr<ProcessGroupNCCL>(
      new ProcessGroupNCCL(rank, size, options.timeout, device, comm, std::move(keys)));
}

ProcessGroupNCCL::ProcessGroupNCCL(int rank, int size, std::chrono::milliseconds timeout, int device, ncclComm* comm,
                                   std::shared_ptr<Store> store)
    : ProcessGroup(rank, size, timeout, "nccl"), device_(device), events_(std::make_shared<CudaEventPool>(device)),
      store_(std::move(store)), comm_(comm) {
  // The highest priority the device offers: when compute and communication kernels both wait to run,
  // communication goes first, so the all-reduce of early buckets is never starved by backward kernels.
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  nccl_stream_ = cuda::Stream::Create(device_, greatest);
  cudaMalloc(&barrier_buffer_, sizeof(float));
  cudaMemset(barrier_buffer_, 0, sizeof(float));
  in_flight_.reserve(256);
  watchdog_ = std::thread([this] { WatchdogLoop(); });
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  // Let collectives in flight finish (bounded), so destroying the communicator cannot cut one short.
  const auto deadline = Clock::now() + timeout();
  for (bool busy = true; busy && Clock::now() < deadline;) {
    {
      std::lock_guard<std::mutex> lock(works_mu_);
      busy = false;
      for (auto& w : in_flight_) busy = busy || !w->IsCompleted();
    }
    if (busy) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    stopping_ = true;
  }
  watchdog_cv_.notify_all();
  watchdog_.join();
  std::lock_guard<std::timed_mutex> launch(launch_mu_);
  std::vector<std::shared_ptr<ExternalAllReduce>> externals;
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    std::shared_ptr<WorkNCCL> unfinished;
    for (auto& w : in_flight_) {
      if (!unfinished && !w->IsCompleted()) unfinished = w;
    }
    if (unfinished) {
      // Cut short after all: fail it (and release external calls, so that their streams drain).
      externals = FailInFlightLocked(absl::AbortedError(absl::StrCat(
                                         unfinished->description(), " was still in flight when its group was destroyed")),
                                     unfinished.get());
    }
  }
  // A group that failed (or whose last launch asked for an abort the watchdog had no time to make) is
  // aborted, never finalized: finalizing waits for collectives that will never complete.
  if (!externals.empty() || (comm_ != nullptr && (!broken_.ok() || !abort_request_.ok()))) {
    AbortCommunicatorLocked(externals);
  } else if (comm_ != nullptr) {
    ncclResult_t r = Settle(ncclCommFinalize(comm_), comm_, Clock::now() + timeout());
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  for (auto& w : in_flight_) w->ReleaseTensors();
  last_external_.reset();
  cudaFree(barrier_buffer_);
}

absl::Status ProcessGroupNCCL::CheckTensor(const Tensor& tensor) const {
  if (tensor.device() != Device::CUDA(device_)) {
    const std::string hint = tensor.device().is_cpu()
                                 ? absl::StrCat(" (hint: move it with .To(Device::CUDA(", device_,
                                                ")), or use the gloo backend for CPU tensors)")
                                 : " (hint: one process per GPU; each rank uses cuda:LOCAL_RANK)";
    return absl::InvalidArgumentError(absl::StrCat("the nccl backend takes CUDA tensors on this rank's device cuda:",
                                                   device_, ", got ", TensorSignature(tensor), hint));
  }
  if (!IsCollectiveDType(tensor.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("the nccl backend does not reduce ", DTypeName(tensor.dtype()),
                                                   "; it takes float32, float64, bfloat16, int32 and int64"));
  }
  return absl::OkStatus();
}

// --- The launch path -------------------------------------------------------------------------------

template <typename Enqueue>
std::shared_ptr<Work> ProcessGroupNCCL::LaunchOnStream(const Call& call, std::vector<Tensor> tensors,
                                                       std::shared_ptr<ExternalAllReduce> external,
                                                       Enqueue&& enqueue) {
  auto fail_now = [&](absl::Status status) {
    flight_recorder().Finished(call.seq, status);
    return CompletionWork::Done(std::move(status), call.description, timeout());
  };
  std::lock_guard<std::timed_mutex> launch(launch_mu_);
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    if (!broken_.ok()) {
      return fail_now(absl::FailedPreconditionError(absl::StrCat(
          call.description, " not run: this nccl process group was aborted earlier (create a new group). The cause: ",
          broken_.message())));
    }
  }
  DeviceScope scope(device_);
  cudaStream_t compute = static_cast<cudaStream_t>(cuda::Stream::Current(device_).handle());
  // Recording a CUDA graph? Then this call is recorded, not run (the header's "CUDA graphs").
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (compute != nullptr && cudaStreamIsCapturing(compute, &capture) != cudaSuccess) {
    cudaGetLastError();
    capture = cudaStreamCaptureStatusNone;
  }
  const bool captured = capture != cudaStreamCaptureStatusNone;
  if (captured && external != nullptr) {
    return CompletionWork::Done(
        absl::FailedPreconditionError(absl::StrCat(call.description, ": an external all_reduce cannot be recorded "
                                                   "into a CUDA graph (its implementation synchronises outside the "
                                                   "stream); use the group's AllReduce inside a graph")),
        call.description, timeout());
  }
  auto work = std::make_shared<WorkNCCL>(call.description, timeout(), device_, events_, std::move(tensors), compute,
                                         external, call.seq);
  if (captured) work->MarkCaptured();
  cudaStream_t stream = static_cast<cudaStream_t>(nccl_stream_.handle());

  // 1. The NCCL stream waits for everything queued on the caller's stream so far.
  cudaError_t err = cudaEventRecord(work->start_event(), compute);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(stream, work->start_event(), 0);
  // An external call may leave the NCCL stream before it has finished (the copy engines drain on a stream
  // of their own): anything else run here comes after its end, as the stream's order promises. The next
  // call of the same implementation orders itself (it may start while the previous one drains). Not in a
  // capture: an event of eager work cannot be waited on inside a graph; a graph is replayed on the
  // caller's stream, which SynchronizeStream already ordered after that call.
  if (err == cudaSuccess && !captured && last_external_ != nullptr && last_external_->external() != external) {
    err = cudaStreamWaitEvent(stream, last_external_->end_event(), 0);
  }
  if (err != cudaSuccess) {
    return fail_now(
        absl::InternalError(absl::StrCat(call.description, ": CUDA error while enqueueing: ", cudaGetErrorString(err))));
  }
  // 2-3. The collective and its end event.
  if (absl::Status s = enqueue(stream, work->end_event()); !s.ok()) {
    s = absl::Status(s.code(), absl::StrCat(call.description, ": ", s.message()));
    // InvalidArgument: nothing was enqueued. Anything else may have left a collective half-issued, which
    // only an abort can undo: the watchdog does it (it alone frees the communicator).
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      std::lock_guard<std::mutex> lock(works_mu_);
      if (abort_request_.ok()) abort_request_ = s;
      watchdog_cv_.notify_all();
    }
    return fail_now(std::move(s));
  }
  if (captured) {
    // The graph holds it; each replay is watched as a whole (WatchReplay).
    std::lock_guard<std::mutex> works_lock(works_mu_);
    captured_.push_back(call.description);
    return work;
  }
  last_external_ = external != nullptr ? work : nullptr;
  {
    std::lock_guard<std::mutex> works_lock(works_mu_);
    // The watchdog may have failed the group while this call was enqueued: this Work, which it did not
    // see, fails too (before its kernels are aborted, so Wait can never read an aborted end as success).
    if (!broken_.ok()) {
      work->Fail(absl::AbortedError(
          absl::StrCat(call.description, " was aborted with the communicator: ", broken_.message())));
    }
    // Tight loops of small collectives outpace the watchdog's period; reaping here as well keeps the
    // list (and the events its Works hold) bounded. Amortised: one sweep per kReapEvery launches.
    if (in_flight_.size() >= kReapEvery) ReapFinishedLocked();
    in_flight_.push_back(work);
  }
  return work;
}

template <typename Issue>
std::shared_ptr<Work> ProcessGroupNCCL::Launch(const Call& call, std::vector<Tensor> tensors, Issue&& issue) {
  return LaunchOnStream(call, std::move(tensors), nullptr, [&](cudaStream_t stream, cudaEvent_t end) {
    // A blocking communicator answers at once; Settle only guards against one that does not.
    const ncclResult_t r = Settle(static_cast<ncclResult_t>(issue(comm_, stream, end)), comm_,
                                  Clock::now() + timeout());
    if (r == ncclInProgress) {
      return absl::DeadlineExceededError(absl::StrCat("NCCL did not accept the call within ", timeout().count(), " ms"));
    }
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL refused it: ", NcclError(r, comm_)));
    }
    if (r != ncclSuccess) return absl::InternalError(absl::StrCat("NCCL failed: ", NcclError(r, comm_)));
    // 3. Its completion, for SynchronizeStream/Wait and the watchdog.
    if (cudaError_t err = cudaEventRecord(end, stream); err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("recording its end event: ", cudaGetErrorString(err)));
    }
    return absl::OkStatus();
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::AllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                          absl::Span<const Tensor> tensors, ReduceOp op) {
  Prepared p = PrepareExternalAllReduce(tensors, op, impl->path_name());
  if (p.failed) return p.failed;
  std::vector<Tensor> list(tensors.begin(), tensors.end());
  {
    // Outside launch_mu_: preparing may wait for the implementation's earlier calls, which only the
    // watchdog can release if a peer died.
    DeviceScope scope(device_);
    if (absl::Status s = impl->Prepare(list, op); !s.ok()) {
      s = absl::Status(s.code(), absl::StrCat(p.call.description, ": ", s.message()));
      flight_recorder().Finished(p.call.seq, s);
      return CompletionWork::Done(std::move(s), p.call.description, timeout());
    }
  }
  ExternalAllReduce* raw = impl.get();
  return Issued(LaunchOnStream(p.call, list, std::move(impl),
                               [&](cudaStream_t stream, cudaEvent_t end) { return raw->Enqueue(list, op, stream, end); }),
                p.call.seq);
}

std::vector<std::string> ProcessGroupNCCL::TakeCapturedCollectives() {
  std::lock_guard<std::mutex> lock(works_mu_);
  std::vector<std::string> taken;
  taken.swap(captured_);
  return taken;
}

std::shared_ptr<Work> ProcessGroupNCCL::WatchReplay(std::string description) {
  std::lock_guard<std::timed_mutex> launch(launch_mu_);
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    if (!broken_.ok()) {
      return CompletionWork::Done(
          absl::FailedPreconditionError(absl::StrCat(description, " not watched: this nccl process group was "
                                                     "aborted earlier. The cause: ", broken_.message())),
          description, timeout());
    }
  }
  DeviceScope scope(device_);
  cudaStream_t compute = static_cast<cudaStream_t>(cuda::Stream::Current(device_).handle());
  // Numbered and in the flight recorder like a collective (the collectives inside were numbered when the
  // graph was recorded), so a replay that never ends shows there as the call a rank was stuck in.
  const int64_t seq = RecordWatchedWork("Replay", "a CUDA graph of the training step");
  auto work = std::make_shared<WorkNCCL>(description, timeout(), device_, events_, std::vector<Tensor>{}, compute,
                                         /*external=*/nullptr, seq);
  // The end event behind the replay: the Work is "the replay has finished", timed from now.
  if (const cudaError_t err = cudaEventRecord(work->end_event(), compute); err != cudaSuccess) {
    return CompletionWork::Done(absl::InternalError(absl::StrCat(description, ": recording its end event: ",
                                                                 cudaGetErrorString(err))),
                                description, timeout());
  }
  std::lock_guard<std::mutex> works_lock(works_mu_);
  if (in_flight_.size() >= kReapEvery) ReapFinishedLocked();
  in_flight_.push_back(work);
  return work;
}

std::shared_ptr<Store> ProcessGroupNCCL::SubStore(const std::string& purpose) {
  return std::make_shared<PrefixStore>(absl::StrCat(purpose, "/", sub_stores_++), store_);
}

// --- Collectives -----------------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroupNCCL::RunAllReduce(std::vector<Tensor> tensors, const Call& call) {
  const ncclRedOp_t op = ToNccl(call.op);
  std::vector<Tensor> keep = tensors;
  return Launch(call, std::move(keep), [&](ncclComm_t comm, cudaStream_t stream, cudaEvent_t) {
    if (tensors.size() == 1) {
      const Tensor& t = tensors[0];
      return static_cast<int>(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), ToNccl(t.dtype()), op, comm, stream));
    }
    // Coalesced: one group, so NCCL fuses the launches instead of running one kernel per tensor.
    ncclGroupStart();
    for (const Tensor& t : tensors) {
      if (t.numel() == 0) continue;
      ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), ToNccl(t.dtype()), op, comm, stream);
    }
    return static_cast<int>(ncclGroupEnd());
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunBroadcast(const Tensor& tensor, const Call& call) {
  return Launch(call, {tensor}, [&](ncclComm_t comm, cudaStream_t stream, cudaEvent_t) {
    return static_cast<int>(
        ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), ToNccl(tensor.dtype()), call.root, comm, stream));
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunAllGather(const Tensor& output, const Tensor& input, const Call& call) {
  return Launch(call, {output, input}, [&](ncclComm_t comm, cudaStream_t stream, cudaEvent_t) {
    return static_cast<int>(
        ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), ToNccl(input.dtype()), comm, stream));
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) {
  // On one rank every reduction is the identity: output = input. NCCL before 2.29.7 gets one case wrong:
  // a one-rank AVG of floating point runs its PreMulSum kernel, which splits the elements over up to 32
  // blocks rounding down and so leaves the last (n mod blocks) unwritten when output != input (NVIDIA/nccl
  // issue 1950; in-place calls such as AllReduce hide it, as x * 1 == x). SUM on one rank is NCCL's plain
  // copy, so it is asked for instead: the same answer from any NCCL.
  const ReduceOp op = size() == 1 ? ReduceOp::kSum : call.op;
  return Launch(call, {output, input}, [&](ncclComm_t comm, cudaStream_t stream, cudaEvent_t) {
    return static_cast<int>(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                              ToNccl(output.dtype()), ToNccl(op), comm, stream));
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunReduce(const Tensor& tensor, const Call& call) {
  // In place: NCCL writes the receive buffer on the root only, so other ranks' tensors stay unchanged.
  return Launch(call, {tensor}, [&](ncclComm_t comm, cudaStream_t stream, cudaEvent_t) {
    return static_cast<int>(ncclReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), ToNccl(tensor.dtype()),
                                       ToNccl(call.op), call.root, comm, stream));
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunBarrier(const Call& call) {
  // NCCL has no barrier; a one-element all-reduce completes only once every rank has joined it.
  return Launch(call, {}, [&](ncclComm_t comm, cudaStream_t stream, cudaEvent_t) {
    return static_cast<int>(ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm, stream));
  });
}

// --- The watchdog ----------------------------------------------------------------------------------

std::vector<std::shared_ptr<ExternalAllReduce>> ProcessGroupNCCL::FailInFlightLocked(const absl::Status& status,
                                                                                     const WorkNCCL* culprit) {
  if (broken_.ok()) broken_ = status;
  // Fail the Works first: aborting lets their kernels exit, and an end event that completes after an
  // abort must never read as success (WorkNCCL::Wait checks the failure after seeing the event).
  std::vector<std::shared_ptr<ExternalAllReduce>> externals;
  for (auto& w : in_flight_) {
    if (w->GpuFinished()) continue;
    const absl::Status why =
        w.get() == culprit
            ? status
            : absl::AbortedError(absl::StrCat(w->description(), " was aborted with the communicator: ", status.message()));
    flight_recorder().Finished(w->seq(), why);  // recorded before the waiter wakes and looks
    w->Fail(why);
    const std::shared_ptr<ExternalAllReduce>& e = w->external();
    if (e != nullptr && std::find(externals.begin(), externals.end(), e) == externals.end()) externals.push_back(e);
  }
  return externals;
}

void ProcessGroupNCCL::AbortCommunicatorLocked(const std::vector<std::shared_ptr<ExternalAllReduce>>& externals) {
  // External calls first: each implementation with a call in flight satisfies its waits on a peer that is
  // gone locally, so its streams drain. Only then NCCL: ncclCommAbort frees device memory, and cudaFree
  // waits for the whole device, including an external call's stream still waiting for its peer (measured:
  // aborting NCCL first hung the watchdog for good on one H200).
  for (const auto& e : externals) e->Release();
  if (comm_ != nullptr) ncclCommAbort(comm_);  // NCCL kernels exit; the streams move on
  comm_ = nullptr;
}

void ProcessGroupNCCL::Abort(const absl::Status& cause, const WorkNCCL* culprit, const char* reason) {
  // The Works fail with a status that says where the flight recorder's dump is; the dump follows, so that
  // it shows them failed.
  const bool first = FirstFailure();
  const absl::Status status = first ? WithFlightRecorderHint(cause) : cause;
  std::vector<std::shared_ptr<ExternalAllReduce>> externals;
  {
    std::lock_guard<std::mutex> lock(works_mu_);
    externals = FailInFlightLocked(status, culprit);
  }
  if (first) flight_recorder().Dump(reason, status);
  // Every waiter has its error now. Freeing the communicator needs the launching thread out of NCCL.
  std::unique_lock<std::timed_mutex> launch(launch_mu_, std::defer_lock);
  if (!launch.try_lock_for(kLaunchLockWait)) {
    ExitOnCollectiveFailure(
        absl::StrCat("ProcessGroupNCCL watchdog (rank ", rank(), ")"),
        absl::Status(status.code(),
                     absl::StrCat(status.message(), "\nThe thread issuing collectives has been inside an NCCL/CUDA call "
                                  "for over ", kLaunchLockWait.count() / 1000, " s (its launch queue is full behind the "
                                  "hung collective), so this error cannot be returned to it.")));
  }
  AbortCommunicatorLocked(externals);
}

void ProcessGroupNCCL::ReapFinishedLocked() {
  // Finished Works let go of their tensors (and, once the caller drops its handle, of their events). The
  // NCCL stream runs its collectives in order, so the first unfinished one has started once the stream
  // reached its start event (approximate for external calls, which end on streams of their own).
  size_t kept = 0;
  bool earlier_finished = true;
  for (auto& w : in_flight_) {
    if (w->GpuFinished()) {
      flight_recorder().Finished(w->seq(), w->FailureSoFar());
      w->ReleaseTensors();
      continue;
    }
    if (earlier_finished && w->StartReached()) flight_recorder().Started(w->seq());
    earlier_finished = false;
    in_flight_[kept++] = std::move(w);
  }
  in_flight_.resize(kept);
}

void ProcessGroupNCCL::WatchdogLoop() {
  const auto period = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), timeout() / 10 + std::chrono::milliseconds(1));
  for (;;) {
    absl::Status failure;
    std::shared_ptr<WorkNCCL> late;
    const char* reason = "abort";
    {
      std::unique_lock<std::mutex> lock(works_mu_);
      watchdog_cv_.wait_for(lock, period, [this] { return stopping_ || !abort_request_.ok(); });
      if (stopping_) return;
      ReapFinishedLocked();
      if (!abort_request_.ok()) {
        failure = abort_request_;
        abort_request_ = absl::OkStatus();
      } else if (broken_.ok() && !in_flight_.empty() && Clock::now() - in_flight_.front()->enqueued_at() > timeout()) {
        // The oldest unfinished Work decides about the timeout.
        late = in_flight_.front();
        failure = absl::DeadlineExceededError(absl::StrCat(
            late->description(), " did not finish within ", timeout().count(),
            " ms (the group's timeout, counted from when it was issued): another rank did not join it, is stuck, "
            "or died. The NCCL communicator was aborted; create a new process group to continue."));
        reason = "timeout";
      }
    }
    // comm_ is only ever cleared by this thread (see the header), so reading it here needs no lock; NCCL
    // allows the query while another thread enqueues.
    if (failure.ok() && comm_ != nullptr) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        failure = absl::UnavailableError(absl::StrCat("NCCL reported an asynchronous error on rank ", rank(), ": ",
                                                      NcclError(async, comm_), " (a peer may have died)"));
        reason = "error";
      }
    }
    if (!failure.ok()) Abort(failure, late.get(), reason);
  }
}

}  // namespace tinyddp::dist
