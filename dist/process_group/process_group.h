// ProcessGroup: the collectives every rank of a job calls together, c10d's vocabulary. It sits between
// the rendezvous Store (below: ranks find each other) and DistributedDataParallel (above: gradients are
// averaged through AllReduce). Backends: ProcessGroupGloo (CPU tensors, TCP), ProcessGroupNCCL (CUDA
// tensors, NVLink/PCIe/network). InitProcessGroup (init.h) builds the right one from the environment.
//
// The contract, identical on every backend:
//   * Every call is asynchronous and returns a Work (work.h); call Wait() or SynchronizeStream() on it.
//   * Every rank must make the same calls in the same order with the same shapes and dtypes; a
//     collective is matched across ranks by its position in that order (its sequence number). With
//     TINYDDP_DISTRIBUTED_DEBUG=DETAIL a mismatch is reported (debug_check.h) instead of hanging.
//   * Tensors are updated in place where PyTorch does so (AllReduce, Broadcast, Reduce on the root); the
//     caller keeps them alive and untouched until the Work completes (the group also holds a reference).
//   * Argument errors (unsupported dtype or device, size mismatch, bad root) come back as an already
//     completed Work whose Wait() returns InvalidArgument naming the call: one place to check errors.
//   * Thread-safety: calls on one group must come from one thread at a time (they define the order).
//   * The timeout of a collective counts from when it was issued. The first failure of the group (a
//     timeout, a dead peer) is told to its observers (collective_observer.h: the flight recorder dumps
//     there, and the error names the dump); observers see every call, and change none.
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

class CollectiveFingerprintCheck;  // debug_check.h
class ExternalAllReduce;           // external_all_reduce.h
class Store;                       // dist/store/store.h

/// How AllReduce, Reduce and ReduceScatter combine the ranks' values (torch.distributed.ReduceOp).
/// kAvg is the sum divided by the world size; for integer dtypes the division truncates (as NCCL's).
enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProduct };

/// "SUM", "AVG", "MAX", "MIN", "PRODUCT".
const char* ReduceOpName(ReduceOp op);

/// "float32 [1000]": how tensors appear in Work descriptions and debug-mode reports.
std::string TensorSignature(const Tensor& tensor);

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
  /// "pg0": the n-th group this process created (every rank creates its groups in the same order, so
  /// the same n everywhere). Names the group's flight recorder files.
  const std::string& group_name() const { return group_name_; }

  /// Adds a watcher of every later collective (collective_observer.h); observers are told in the order they
  /// were added. Call before the first collective; safe against the backend's threads, which notify
  /// observers concurrently. The group keeps `observer` alive.
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

  /// Turns on TINYDDP_DISTRIBUTED_DEBUG=DETAIL checking: before each collective the ranks compare what
  /// they are about to call (InitProcessGroup does this when the variable is set).
  void EnableDebugCheck(std::unique_ptr<CollectiveFingerprintCheck> check);

  // --- Acceleration seams: what a wing (dist/accel/, the tracer) may ask of a group. Each has a default
  // for groups that cannot do it; ProcessGroupNCCL overrides them. ---------------------------------------

  /// The CUDA stream this group runs its collectives on; a default-constructed Stream (handle() == nullptr)
  /// for groups that run on host threads.
  virtual cuda::Stream collective_stream() const { return {}; }
  /// CUDA graphs: descriptions of the collectives recorded into a graph since the last call; empty for
  /// groups that cannot be captured.
  virtual std::vector<std::string> TakeCapturedCollectives() { return {}; }
  /// CUDA graphs: watch the replay just enqueued on the current stream under the group's timeout; null for
  /// groups that cannot watch GPU work.
  virtual std::shared_ptr<Work> WatchReplay(std::string description) { return nullptr; }
  /// An all_reduce of `tensors` (one, or several as in AllReduceCoalesced) carried by `impl`
  /// (external_all_reduce.h) instead of the backend's own kernels: numbered, checked and watched as
  /// AllReduce; its description and debug fingerprint end "via <impl->path_name()>", so ranks that took
  /// different paths for one collective are reported. A backend that carries none (Gloo) returns a
  /// completed Work with Unimplemented. Precondition: every rank makes this call at the same position,
  /// with the same kind of `impl`.
  std::shared_ptr<Work> AllReduceExternal(std::shared_ptr<ExternalAllReduce> impl, absl::Span<const Tensor> tensors,
                                          ReduceOp op);
  /// A fresh key space in the group's store for a module set up beside the group; null when the group
  /// keeps no store. Precondition: every rank calls it in the same order.
  virtual std::shared_ptr<Store> SubStore(const std::string& purpose) { return nullptr; }
  /// The GPU this group's tensors live on, -1 for host groups.
  virtual int device_index() const { return -1; }

 protected:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout);

  /// What a backend is asked to do. The tensors have passed the generic checks (defined, one dtype and
  /// one device among them, CheckTensor() below, sizes consistent) and hold at least one element.
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
  /// AllReduceExternal's backend step. Default: Unimplemented ("<backend> carries no external all_reduce").
  virtual std::shared_ptr<Work> RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                     std::vector<Tensor> tensors, const Call& call);
  /// Whether this backend takes `tensor` (its device and dtype); the message names what it supports.
  virtual absl::Status CheckTensor(const Tensor& tensor) const = 0;

  /// Numbers work a backend runs without a public call (a CUDA-graph replay of collectives it recorded
  /// earlier) in the group's sequence, and tells the observers (op "Replay", `signature` the same on every
  /// rank), so a replay that never ends is diagnosed like a collective. Every rank numbers the same works in
  /// the same order. Returns its sequence number.
  int64_t NumberBackendWork(const char* op, absl::string_view signature);

  /// For backends, as they learn it (any thread): collective #seq began running / ended with `status`.
  void NotifyStarted(int64_t seq);
  void NotifyEnded(int64_t seq, const absl::Status& status);

  /// For a backend's failure path: the first time a collective of this group fails (not for bad
  /// arguments), tells every observer (`reason`: "timeout", "error", "abort", "debug check") and returns
  /// `status` with the text they returned appended (where the flight recorder's dump is); afterwards
  /// returns `status` unchanged. Thread-safe.
  absl::Status NoteFailure(const absl::Status& status, absl::string_view reason);

 private:
  // A call numbered and checked: either `failed` (the Work to hand back at once: bad arguments, a
  // debug-check mismatch, or no elements, which completes OK on every rank), or `call` to run.
  struct Prepared {
    std::shared_ptr<Work> failed;
    Call call;
  };
  // Numbers the call, tells the observers, checks it (the debug fingerprint, then the arguments), and
  // returns either the description to run it under or the failed Work to hand back.
  Prepared Prepare(const char* op_name, absl::Span<const Tensor> tensors, std::string signature, ReduceOp op,
                   int root, absl::Status args_ok, const char* via = nullptr);
  Prepared PrepareAllReduce(const char* op_name, absl::Span<const Tensor> tensors, ReduceOp op, const char* via);

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::string group_name_;
  int64_t sequence_number_ = 0;
  std::unique_ptr<CollectiveFingerprintCheck> debug_check_;
  // Copied on write: the backends' threads read a snapshot while AddObserver replaces it.
  using Observers = std::vector<std::shared_ptr<CollectiveObserver>>;
  std::shared_ptr<const Observers> Snapshot() const;
  mutable std::mutex observers_mu_;
  std::shared_ptr<const Observers> observers_ = std::make_shared<Observers>();
  std::atomic<bool> failed_{false};
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_
