// ProcessGroupNCCL: communicator setup through the store, the collective path (start event, stream wait,
// the NCCL call, end event) shared by NCCL's and external calls, one short function per collective, and
// WatchReplay. What happens to a Work once enqueued (the watchdog, the abort) is in nccl_watchdog.cc.
#include "dist/process_group/nccl/process_group_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/host_reduce.h"
#include "dist/process_group/nccl/nccl_watchdog.h"
#include "dist/process_group/nccl/work_nccl.h"
#include "dist/store/prefix_store.h"
#include "tensor/cuda_device.h"

namespace tinyddp::dist {

namespace {

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
  static constexpr ncclRedOp_t kOps[] = {ncclSum, ncclAvg, ncclMax, ncclMin, ncclProd};  // ReduceOp's order
  return kOps[static_cast<int>(op)];
}

// The current stream of `device`: where the caller queued the work a collective must follow.
cudaStream_t CurrentStream(int device) { return static_cast<cudaStream_t>(cuda::Stream::Current(device).handle()); }

// Whether `stream` is recording a CUDA graph: then a call is recorded, not run (the header's "CUDA graphs").
bool Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (stream != nullptr && cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return capture != cudaStreamCaptureStatusNone;
}

// --- Setup: the device, rank 0's ncclUniqueId through the store, every rank joins ----------------------

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

absl::StatusOr<ncclUniqueId> ShareUniqueId(Store& keys, int rank) {  // waits up to keys.timeout()
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat("ncclGetUniqueId failed: ", NcclError(r, nullptr)));
    }
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&id);
    RETURN_IF_ERROR(keys.Set("unique_id", Bytes(p, p + sizeof(id))));
    return id;
  }
  // One request per rank: the Get waits on the server until rank 0's Set (its error names the key).
  ASSIGN_OR_RETURN(const Bytes bytes, keys.Get("unique_id"));
  if (bytes.size() != sizeof(id)) return absl::DataLossError("the NCCL id in the store has the wrong size");
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

// A BLOCKING communicator: a non-blocking one answers ncclInProgress and must be polled until NCCL's thread
// has enqueued each call, ~30 us per call (2x H200: 55 us for an 8-byte all_reduce, PyTorch ~25 us). Setup
// is still bounded: it runs on a helper thread, and we stop waiting after the timeout (the thread is left
// behind). Hung collectives are bounded by the watchdog's ncclCommAbort.
absl::StatusOr<ncclComm_t> JoinCommunicator(const ncclUniqueId& id, int rank, int size, int device,
                                            std::chrono::milliseconds timeout) {
  // Connect every channel now, not lazily inside the first collective, where a blocking communicator would
  // block the host until every peer joins, out of the watchdog's reach. A value the user set wins.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  struct Joined {
    ncclResult_t r = ncclInProgress;
    ncclComm_t comm = nullptr;
  };
  auto promise = std::make_shared<std::promise<Joined>>();  // shared: the thread may outlive this call
  std::future<Joined> future = promise->get_future();
  std::thread([promise, size, id, rank, device] {
    cudaSetDevice(device);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    Joined joined;
    joined.r = ncclCommInitRankConfig(&joined.comm, size, id, rank, &config);
    promise->set_value(joined);
  }).detach();
  Joined joined;
  if (future.wait_for(timeout) == std::future_status::ready) joined = future.get();
  if (joined.r == ncclInProgress) {
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL communicator setup of rank ", rank, "/", size, " did not finish within ", timeout.count(),
        " ms: a rank did not join, or the ranks cannot reach each other (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME)"));
  }
  if (joined.r != ncclSuccess) {
    if (joined.comm != nullptr) ncclCommAbort(joined.comm);
    return absl::UnavailableError(absl::StrCat("ncclCommInitRankConfig (rank ", rank, "/", size,
                                               ") failed: ", NcclError(joined.r, nullptr)));
  }
  return joined.comm;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupNCCL>> ProcessGroupNCCL::Create(std::shared_ptr<Store> store, int rank,
                                                                           int size, NcclOptions options) {
  ASSIGN_OR_RETURN(const int device, ChooseDevice(rank, size, options));
  // Each group gets its own keys (the n-th group has the same n on every rank): a second group over the
  // same store (a new group after an abort) must never read the previous group's stale id.
  static std::atomic<int64_t> groups_created{0};
  auto keys = std::make_shared<PrefixStore>(absl::StrCat(options.store_prefix, "/", groups_created.fetch_add(1)),
                                            std::move(store));
  keys->set_timeout(options.timeout);
  ASSIGN_OR_RETURN(const ncclUniqueId id, ShareUniqueId(*keys, rank));
  auto nccl = std::make_unique<NcclCommunicator>();
  ASSIGN_OR_RETURN(nccl->comm, JoinCommunicator(id, rank, size, device, options.timeout));
  return std::unique_ptr<ProcessGroupNCCL>(
      new ProcessGroupNCCL(rank, size, options.timeout, device, std::move(nccl), std::move(keys)));
}

ProcessGroupNCCL::ProcessGroupNCCL(int rank, int size, std::chrono::milliseconds timeout, int device,
                                   std::unique_ptr<NcclCommunicator> nccl, std::shared_ptr<Store> store)
    : ProcessGroup(rank, size, timeout), device_(device), events_(std::make_shared<CudaEventPool>(device)),
      nccl_(std::move(nccl)) {
  set_store(std::move(store));
  // The highest priority the device offers: when compute and communication kernels both wait to run,
  // communication goes first, so the all-reduce of early buckets is never starved by backward kernels.
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  nccl_stream_ = cuda::Stream::Create(device_, greatest);
  cudaMalloc(&barrier_buffer_, sizeof(float));
  cudaMemset(barrier_buffer_, 0, sizeof(float));
  watchdog_ = std::make_unique<NcclWatchdog>(this, nccl_.get());
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  // Waits for collectives in flight (bounded) and aborts a communicator that failed; a healthy one is
  // finalized here, so destroying it cannot cut a collective short.
  watchdog_->Stop();
  if (ncclComm_t comm = nccl_->comm; comm != nullptr) {
    if (ncclCommFinalize(comm) == ncclSuccess) ncclCommDestroy(comm);
    else ncclCommAbort(comm);
    nccl_->comm = nullptr;
  }
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

// --- The collective path: RunAllReduce names the NCCL calls, LaunchNccl checks NCCL's answer, Launch does
// steps 1-3 around them and hands the Work to the watchdog.

std::shared_ptr<Work> ProcessGroupNCCL::RunAllReduce(std::vector<Tensor> tensors, const Call& call) {
  const ncclRedOp_t op = ToNccl(call.op);
  return LaunchNccl(call, tensors, [&](ncclComm_t comm, cudaStream_t stream) {
    if (tensors.size() == 1) {
      const Tensor& t = tensors[0];
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), ToNccl(t.dtype()), op, comm, stream);
    }
    // Coalesced: one group, so NCCL fuses the launches instead of running one kernel per tensor.
    ncclGroupStart();
    for (const Tensor& t : tensors) {
      if (t.numel() > 0) ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), ToNccl(t.dtype()), op, comm, stream);
    }
    return ncclGroupEnd();
  });
}

template <typename Issue>
std::shared_ptr<Work> ProcessGroupNCCL::LaunchNccl(const Call& call, std::vector<Tensor> tensors, Issue&& issue) {
  return Launch(call, std::move(tensors), nullptr, [&](cudaStream_t stream, cudaEvent_t end) {
    // 2. The NCCL call(s). The communicator is blocking (JoinCommunicator): its answer is final.
    ncclComm_t comm = nccl_->comm;
    const ncclResult_t r = issue(comm, stream);
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL refused it: ", NcclError(r, comm)));
    }
    if (r != ncclSuccess) return absl::InternalError(absl::StrCat("NCCL failed: ", NcclError(r, comm)));
    // 3. Its completion, for SynchronizeStream/Wait and the watchdog.
    if (cudaError_t err = cudaEventRecord(end, stream); err != cudaSuccess) {
      return absl::InternalError(absl::StrCat("recording its end event: ", cudaGetErrorString(err)));
    }
    return absl::OkStatus();
  });
}

template <typename Enqueue>
std::shared_ptr<Work> ProcessGroupNCCL::Launch(const Call& call, std::vector<Tensor> tensors,
                                               std::shared_ptr<ExternalAllReduce> external, Enqueue&& enqueue) {
  std::lock_guard<std::timed_mutex> launch(nccl_->launch_mu);
  const char* refusal = "not run: this nccl process group was aborted earlier (create a new group)";
  if (absl::Status s = RefuseIfBroken(call.description, refusal); !s.ok()) return EndNow(call, std::move(s));
  DeviceScope scope(device_);
  cudaStream_t compute = CurrentStream(device_);
  const bool captured = Capturing(compute);
  auto work = std::make_shared<WorkNCCL>(call.description, timeout(), device_, events_, std::move(tensors), compute,
                                         external, call.seq, captured);
  cudaStream_t stream = static_cast<cudaStream_t>(nccl_stream_.handle());
  // 1. The NCCL stream waits for everything queued on the caller's stream so far.
  cudaError_t err = cudaEventRecord(work->start_event(), compute);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(stream, work->start_event(), 0);
  if (err != cudaSuccess) {
    return EndNow(call, absl::InternalError(absl::StrCat(call.description, ": CUDA error while enqueueing: ",
                                                         cudaGetErrorString(err))));
  }
  // 2-3. The collective and its end event.
  if (absl::Status s = enqueue(stream, work->end_event()); !s.ok()) return EndNow(call, std::move(s), true);
  if (captured) return work;  // the graph holds it; each replay is watched instead (WatchReplay)
  watchdog_->Watch(work);
  return work;
}

absl::Status ProcessGroupNCCL::RefuseIfBroken(const std::string& what, const char* refusal) {
  const absl::Status broken = watchdog_->broken();
  if (broken.ok()) return broken;
  return absl::FailedPreconditionError(absl::StrCat(what, " ", refusal, ". The cause: ", broken.message()));
}

std::shared_ptr<Work> ProcessGroupNCCL::EndNow(const Call& call, absl::Status status, bool enqueue_failed) {
  if (enqueue_failed) {
    status = absl::Status(status.code(), absl::StrCat(call.description, ": ", status.message()));
    // Only an abort can undo a collective left half-issued; the watchdog makes it (it alone frees the
    // communicator). InvalidArgument: nothing was enqueued.
    if (!absl::IsInvalidArgument(status)) watchdog_->RequestAbort(status);
  }
  NotifyEnded(call.seq, status);
  return CompletionWork::Done(std::move(status), call.description, timeout());
}

// --- The other collectives ---------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroupNCCL::RunBroadcast(const Tensor& tensor, const Call& call) {
  return LaunchNccl(call, {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), ToNccl(tensor.dtype()), call.root,
                         comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunAllGather(const Tensor& output, const Tensor& input, const Call& call) {
  return LaunchNccl(call, {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), ToNccl(input.dtype()), comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) {
  // On one rank every reduction is the identity. NCCL before 2.29.7 gets one wrong: a one-rank AVG of
  // floating point (PreMulSum) leaves the last (n mod blocks) elements unwritten when output != input
  // (NVIDIA/nccl issue 1950). SUM on one rank is a plain copy: the same answer from any NCCL.
  const ReduceOp op = size() == 1 ? ReduceOp::kSum : call.op;
  return LaunchNccl(call, {output, input}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), ToNccl(output.dtype()), ToNccl(op),
                             comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunReduce(const Tensor& tensor, const Call& call) {
  // In place: NCCL writes the receive buffer on the root only, so other ranks' tensors stay unchanged.
  return LaunchNccl(call, {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), ToNccl(tensor.dtype()), ToNccl(call.op),
                      call.root, comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunBarrier(const Call& call) {
  // NCCL has no barrier; a one-element all-reduce completes only once every rank has joined it.
  return LaunchNccl(call, {}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm, stream);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::RunPointToPoint(std::vector<P2POp> ops, const Call& call) {
  std::vector<Tensor> tensors;
  for (const P2POp& op : ops) tensors.push_back(op.tensor);
  return LaunchNccl(call, std::move(tensors), [&](ncclComm_t comm, cudaStream_t stream) {
    // One group: NCCL schedules the sends and receives together, so a rank that sends to its next
    // neighbour and receives from its previous one (or both ways with one peer) cannot deadlock.
    ncclGroupStart();
    for (const P2POp& op : ops) {
      const Tensor& t = op.tensor;
      if (op.kind == P2POp::Kind::kSend) ncclSend(t.data_ptr(), t.numel(), ToNccl(t.dtype()), op.peer, comm, stream);
      else ncclRecv(t.data_ptr(), t.numel(), ToNccl(t.dtype()), op.peer, comm, stream);
    }
    return ncclGroupEnd();
  });
}

// --- Seams for wings -----------------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroupNCCL::RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                             std::vector<Tensor> tensors, const Call& call) {
  {
    // Outside the launch lock: it may wait for earlier calls, which only the watchdog can release.
    DeviceScope scope(device_);
    if (absl::Status s = impl->Prepare(tensors, call.op); !s.ok()) {
      return EndNow(call, absl::Status(s.code(), absl::StrCat(call.description, ": ", s.message())));
    }
  }
  ExternalAllReduce* raw = impl.get();
  return Launch(call, tensors, std::move(impl), [&](cudaStream_t stream, cudaEvent_t end) {
    return raw->Enqueue(tensors, call.op, stream, end);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::WatchReplay(std::string description) {
  std::lock_guard<std::timed_mutex> launch(nccl_->launch_mu);
  if (absl::Status s = RefuseIfBroken(description, "not watched: this nccl process group was aborted earlier");
      !s.ok()) {
    return CompletionWork::Done(std::move(s), description, timeout());
  }
  DeviceScope scope(device_);
  cudaStream_t compute = CurrentStream(device_);
  // Numbered like a collective (those inside were numbered at capture): a flight recorder shows a replay
  // that never ends as the call a rank was stuck in.
  const int64_t seq = NumberBackendWork("Replay", "a CUDA graph of the training step");
  auto work = std::make_shared<WorkNCCL>(description, timeout(), device_, events_, std::vector<Tensor>{}, compute,
                                         /*external=*/nullptr, seq, /*captured=*/false);
  // The end event behind the replay: the Work is "the replay has finished", timed from now.
  if (const cudaError_t err = cudaEventRecord(work->end_event(), compute); err != cudaSuccess) {
    return EndNow({.description = description, .seq = seq},
                  absl::InternalError(absl::StrCat(description, ": recording its end event: ", cudaGetErrorString(err))));
  }
  watchdog_->Watch(work);
  return work;
}

}  // namespace tinyddp::dist
