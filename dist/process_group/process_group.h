// ProcessGroup: the collectives every rank of a job calls together, c10d's vocabulary. It sits between
// the rendezvous Store (below: ranks find each other) and DistributedDataParallel (above: gradients are
// averaged through AllReduce). Backends: ProcessGroupGloo (CPU tensors, TCP), ProcessGroupNCCL (CUDA
// tensors, NVLink/PCIe/network). InitProcessGroup (init.h) builds the right one from the environment.
//
// The contract, identical on every backend:
//   * Every call is asynchronous and returns a Work (work.h); call Wait() or SynchronizeStream() on it.
//   * Every rank must make the same calls in the same order with the same shapes and dtypes; a
//     collective is matched across ranks by its position in that order (its sequence number). A mismatch
//     hangs or computes garbage, unless the program attached the debug check
//     (TINYDDP_DISTRIBUTED_DEBUG=DETAIL, a wing), which reports it.
//   * Tensors are updated in place where PyTorch does so (AllReduce, Broadcast, Reduce on the root); the
//     caller keeps them alive and untouched until the Work completes (the group also holds a reference).
//   * Argument errors (unsupported dtype or device, size mismatch, bad root) come back as an already
//     completed Work whose Wait() returns InvalidArgument naming the call: one place to check errors.
//   * Thread-safety: calls on one group must come from one thread at a time (they define the order).
//   * The timeout of a collective counts from when it was issued. The group's first failure (a timeout,
//     a dead peer) is told to its observers (collective_observer.h), whose text the error carries.
//   * Point-to-point calls (Send, Recv, BatchSendRecv) are not collectives: only the two ranks named take
//     part, so they are numbered apart ("#p3", p2p_sequence_number()) and the collectives keep the same
//     numbers on every rank. Otherwise the same rules: issue order, timeouts, argument errors, observers.
#ifndef TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_
#define TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dist/process_group/collective_observer.h"
#include "dist/process_group/work.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

class ExternalAllReduce;  // external_all_reduce.h
class Store;              // dist/store/store.h

/// How AllReduce, Reduce and ReduceScatter combine the ranks' values (torch.distributed.ReduceOp).
/// kAvg is the sum divided by the world size; for integer dtypes the division truncates (as NCCL's).
enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProduct };

/// "SUM", "AVG", "MAX", "MIN", "PRODUCT".
const char* ReduceOpName(ReduceOp op);

/// "float32 [1000]" (and " cuda:0" on a GPU): how tensors appear in Work descriptions.
std::string TensorSignature(const Tensor& tensor);

/// One half of a point-to-point transfer (torch.distributed.P2POp).
struct P2POp {
  enum class Kind : uint8_t { kSend, kRecv };
  Kind kind;
  Tensor tensor;  // kSend: read; kRecv: written in place (caller keeps it alive until the Work completes)
  int peer;       // the other rank, != rank()
  int tag = 0;    // in [0, 2^24); must match between the two sides (Gloo); NCCL ignores it as PyTorch's NCCL does
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's rank in [0, size()).
  int rank() const { return rank_; }
  /// Number of ranks in the group.
  int size() const { return size_; }
  /// "gloo" or "nccl".
  virtual const char* backend_name() const = 0;
  /// The time a collective may take before it fails with DeadlineExceeded; Work::Wait()'s default.
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// How many collectives this rank has issued so far (the next one gets this number).
  int64_t sequence_number() const { return sequence_number_; }
  /// "pg0": the n-th group this process created (the same n on every rank, which creates its groups in
  /// the same order).
  const std::string& group_name() const { return group_name_; }

  /// Adds a watcher of every later collective (collective_observer.h); observers are told in the order they
  /// were added. Safe against the backend's threads. The group keeps `observer` alive.
  void AddObserver(std::shared_ptr<CollectiveObserver> observer);

  // --- Collectives. Each returns at once; see the contract above. ------------------------------------

  /// Combines `tensor` across ranks with `op`; every rank ends with the result, in place.
  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// AllReduce of several tensors as one collective (DDP's gradient buckets): Gloo flattens them into one
  /// buffer, NCCL issues them inside one ncclGroupStart/End. Precondition: all of one dtype and device.
  std::shared_ptr<Work> AllReduceCoalesced(absl::Span<const Tensor> tensors, ReduceOp op = ReduceOp::kSum);
  /// Copies `tensor` of rank `root` into `tensor` of every other rank. Precondition: 0 <= root < size().
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root = 0);
  /// Concatenates every rank's `input` in rank order into `output` (all_gather_into_tensor).
  /// Precondition: output.numel() == size() * input.numel(), same dtype and device.
  std::shared_ptr<Work> AllGather(const Tensor& output, const Tensor& input);
  /// Reduces the ranks' `input` with `op` and leaves block `rank()` of the result in `output`
  /// (reduce_scatter_tensor). Precondition: input.numel() == size() * output.numel().
  std::shared_ptr<Work> ReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::kSum);
  /// Combines `tensor` across ranks with `op` into `tensor` of rank `root`; other ranks' tensors are left
  /// unchanged.
  std::shared_ptr<Work> Reduce(const Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::kSum);
  /// Completes once every rank has entered the barrier.
  std::shared_ptr<Work> Barrier();

  // --- Point-to-point. Each rank runs its calls in issue order, collectives and these alike (Gloo's
  // worker thread, NCCL's stream), and the ops of one BatchSendRecv together: two ranks that each Send
  // to the other before they Recv deadlock (on Gloo at once, whose sends wait for the receiver; on NCCL
  // once messages outgrow its buffers) until the timeout. Issue such a pair as one BatchSendRecv. ---

  /// Sends `tensor` to rank `dst` (isend). Messages between one pair of ranks arrive in the order they were
  /// sent; the receiving side must post a Recv of the same numel/dtype naming this rank.
  std::shared_ptr<Work> Send(const Tensor& tensor, int dst, int tag = 0);
  /// Receives into `tensor` from rank `src` (irecv).
  std::shared_ptr<Work> Recv(const Tensor& tensor, int src, int tag = 0);
  /// batch_isend_irecv: issues all `ops` together (NCCL: inside one ncclGroupStart/End, so a send-forward /
  /// receive-backward pair of a 1F1B step cannot deadlock); one Work that completes when all have.
  std::shared_ptr<Work> BatchSendRecv(std::vector<P2POp> ops);
  /// How many point-to-point calls this rank has issued so far (its own count: "#p3").
  int64_t p2p_sequence_number() const { return p2p_sequence_number_; }

  // --- Seams for wings (docs/design.md). Each has a default for groups that cannot do it. ---

  /// The CUDA stream this group runs its collectives on; a null Stream for groups of host threads.
  virtual cuda::Stream collective_stream() const { return {}; }
  /// The GPU this group's tensors live on, -1 for host groups.
  virtual int device_index() const { return -1; }
  /// Watches the GPU work just enqueued on the current stream (a CUDA-graph replay, whose collectives no
  /// call of ours sees) as one collective: numbered (op "Replay"), told to the observers, and failed after
  /// the group's timeout naming `description`. Null for groups that cannot watch GPU work.
  virtual std::shared_ptr<Work> WatchReplay(std::string description) { return nullptr; }
  /// AllReduce (or AllReduceCoalesced) of `tensors` carried by `impl` (external_all_reduce.h) instead of
  /// the backend's kernels, as one of the group's collectives; its description ends "via
  /// <impl->path_name()>". Unimplemented on a backend that carries none (Gloo). Precondition: every rank
  /// makes this call at the same position.
  std::shared_ptr<Work> AllReduceExternal(std::shared_ptr<ExternalAllReduce> impl, absl::Span<const Tensor> tensors,
                                          ReduceOp op);
  /// A fresh key space ("<purpose>/<n>") in the group's store for a module set up beside the group (the
  /// copy engines, the debug check); null without a store. Every rank must call it in the same order.
  std::shared_ptr<Store> SubStore(const std::string& purpose);
  /// The store, private to this group, that SubStore carves from (NCCL sets its own; InitProcessGroup
  /// gives Gloo groups one).
  void set_store(std::shared_ptr<Store> store) { store_ = std::move(store); }

 protected:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout);

  /// What a backend is asked to do. The tensors have passed the generic checks (defined, of one dtype and
  /// device, CheckTensor(), sizes consistent) and hold at least one element.
  struct Call {
    std::string description;  // "AllReduce(float32 [1000], SUM) #7 on gloo rank 0/2"
    int64_t seq = 0;          // its sequence number: how observers and ranks match it
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
  };
  virtual std::shared_ptr<Work> RunAllReduce(std::vector<Tensor> tensors, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunBroadcast(const Tensor& tensor, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunAllGather(const Tensor& output, const Tensor& input, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunReduce(const Tensor& tensor, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunBarrier(const Call& call) = 0;
  /// Send, Recv, BatchSendRecv: `ops` hold at least one element each, name peers of the group other than
  /// this rank, and are issued together; the Work completes when all have.
  virtual std::shared_ptr<Work> RunPointToPoint(std::vector<P2POp> ops, const Call& call) = 0;
  /// AllReduceExternal's backend step. Default: Unimplemented ("<backend> carries no external all_reduce").
  virtual std::shared_ptr<Work> RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                     std::vector<Tensor> tensors, const Call& call);
  /// Whether this backend takes `tensor` (its device and dtype); the message names what it supports.
  virtual absl::Status CheckTensor(const Tensor& tensor) const = 0;

  /// Numbers work run without a public call (WatchReplay) and tells the observers; returns its number.
  int64_t NumberBackendWork(const char* op, absl::string_view signature);
  /// For backends, as they learn it (any thread): collective #seq began running / ended with `status`.
  void NotifyStarted(int64_t seq);
  void NotifyEnded(int64_t seq, const absl::Status& status);
  /// For a backend's failure path: the first time a collective of this group fails (not for bad
  /// arguments), tells every observer (`reason`: "timeout", "error", "abort", ...) and returns `status`
  /// with the text they returned appended; afterwards returns `status` unchanged. Thread-safe.
  absl::Status NoteFailure(const absl::Status& status, absl::string_view reason);
  /// For a backend about to free its resources after a failure: tells every observer (Aborting).
  void NotifyAborting();

 private:
  // Numbers `call`, tells the observers, lets them refuse it, checks `args_ok`. Returns the Work to hand
  // back at once (refused, bad arguments, or no element in `contribution`: OK everywhere), or null: run it.
  std::shared_ptr<Work> Prepare(const char* op_name, absl::Span<const Tensor> contribution,
                                const std::string& signature, absl::Status args_ok, Call* call,
                                const char* via = nullptr, const std::string* peers = nullptr);
  // Send, Recv, BatchSendRecv: checks each op, numbers the call apart ("#p3"), drops empty ops, runs it.
  std::shared_ptr<Work> PointToPoint(const char* op_name, std::vector<P2POp> ops);
  std::shared_ptr<Work> PrepareAllReduce(const char* op_name, absl::Span<const Tensor> tensors, ReduceOp op,
                                         Call* call, const char* via = nullptr);
  // Every tensor defined, accepted by CheckTensor, and all of one dtype and device.
  absl::Status CheckTensors(absl::Span<const Tensor> tensors) const;

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::string group_name_;
  int64_t sequence_number_ = 0;
  int64_t p2p_sequence_number_ = 0;
  std::shared_ptr<Store> store_;
  int64_t sub_stores_ = 0;
  // Copied on write: the backends' threads read a snapshot while AddObserver replaces it.
  using Observers = std::vector<std::shared_ptr<CollectiveObserver>>;
  std::shared_ptr<const Observers> Snapshot() const;
  mutable std::mutex observers_mu_;
  std::shared_ptr<const Observers> observers_ = std::make_shared<Observers>();
  std::atomic<bool> failed_{false};
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_
