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
//   * Every collective is recorded in the group's flight recorder (flight_recorder.h): when one fails
//     (a timeout, a dead peer), the group dumps it once and the error says where, so the analyzer can
//     name the rank the others waited for. The timeout of a collective counts from when it was issued.
#ifndef TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_
#define TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dist/process_group/flight_recorder.h"
#include "dist/process_group/work.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

class CollectiveFingerprintCheck;  // debug_check.h

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
  /// The group's last collectives (always on; see flight_recorder.h).
  FlightRecorder& flight_recorder() { return *recorder_; }

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

 protected:
  /// GPU work the group watches but did not issue as one collective (a CUDA-graph replay of collectives it
  /// recorded earlier): numbered in the same sequence and entered in the flight recorder with `op` and
  /// `signature` (the same on every rank), so a replay that never ends is diagnosed like a collective.
  /// Returns its sequence number. Every rank must record the same works in the same order.
  int64_t RecordWatchedWork(const char* op, absl::string_view signature);

  /// `backend` is backend_name() (not callable from here while the backend is being constructed).
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout, const char* backend);

  /// What a backend is asked to do. The tensors have passed the generic checks (defined, one dtype and
  /// one device among them, CheckTensor() below, sizes consistent) and hold at least one element.
  struct Call {
    std::string description;  // "AllReduce(float32 [1000], SUM) #7 on gloo rank 0/2"
    int64_t seq = 0;          // its sequence number: the flight recorder's key
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
  };
  virtual std::shared_ptr<Work> RunAllReduce(std::vector<Tensor> tensors, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunBroadcast(const Tensor& tensor, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunAllGather(const Tensor& output, const Tensor& input, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunReduce(const Tensor& tensor, const Call& call) = 0;
  virtual std::shared_ptr<Work> RunBarrier(const Call& call) = 0;
  /// Whether this backend takes `tensor` (its device and dtype); the message names what it supports.
  virtual absl::Status CheckTensor(const Tensor& tensor) const = 0;

  /// A call numbered and checked: either `failed` (the Work to hand back at once: bad arguments, a
  /// debug-check mismatch, or no elements, which completes OK on every rank), or `call` to run.
  struct Prepared {
    std::shared_ptr<Work> failed;
    Call call;
  };
  /// For a backend's own flavours of all_reduce (ProcessGroupNCCL::AllReduceExternal): numbers and checks
  /// the call exactly as AllReduce (one tensor) or AllReduceCoalesced (several) do. `via` names the path
  /// that will carry it; it ends the description ("... #7 on nccl rank 0/2 via copy engines") and the
  /// debug fingerprint, so that ranks taking different paths for the same collective are reported.
  Prepared PrepareExternalAllReduce(absl::Span<const Tensor> tensors, ReduceOp op, const char* via);

  /// Every call's last step: the fault-injection point "collective" (base/fault_injection.h, for failure
  /// tests: TINYDDP_FAULT=...,point=collective,step=<seq>), then `work` back to the caller.
  std::shared_ptr<Work> Issued(std::shared_ptr<Work> work, int64_t seq);

  /// For a backend's failure path: the first time a collective of this group fails (not for bad
  /// arguments), dumps the flight recorder (`reason`: "timeout", "error", "abort") and returns `status`
  /// with where to look appended; afterwards returns `status` unchanged. Thread-safe.
  absl::Status NoteFailure(const absl::Status& status, absl::string_view reason);
  /// NoteFailure in two steps, for a backend that must record the failure in between: true the first
  /// time only (thread-safe); and `status` with where the dump is appended.
  bool FirstFailure() { return !dumped_.exchange(true); }
  absl::Status WithFlightRecorderHint(const absl::Status& status) const;

 private:
  // Numbers the call, checks it (arguments, then the debug fingerprint), and returns either the
  // description to run it under or the failed Work to hand back.
  Prepared Prepare(const char* op_name, absl::Span<const Tensor> tensors, std::string signature, ReduceOp op,
                   int root, absl::Status args_ok, const char* via = nullptr);
  Prepared PrepareAllReduce(const char* op_name, absl::Span<const Tensor> tensors, ReduceOp op, const char* via);

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::string group_name_;
  int64_t sequence_number_ = 0;
  std::unique_ptr<CollectiveFingerprintCheck> debug_check_;
  std::unique_ptr<FlightRecorder> recorder_;
  std::atomic<bool> dumped_{false};
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_PROCESS_GROUP_H_
