// CopyEngineHook: a DDP comm hook (dist/ddp/comm_hooks.h) that a program opts into, and the one place
// that decides whether a bucket is averaged by the copy engines (copy_engine_all_reduce.h: DMA over
// NVLink, which leaves the SMs to the backward it overlaps) or by the group's own all_reduce (AllReduceHook,
// DDP's default). It attaches through DdpOptions::comm_hook and runs its buckets through the group's one
// seam for it, ProcessGroup::AllReduceExternal (setup uses the generic device_index and SubStore):
//
//   ASSIGN_OR_RETURN(std::shared_ptr<CopyEngineHook> copy_engines, CopyEngineHook::Create(*pg));
//   options.comm_hook = copy_engines->AsCommHook();          // the bucket table names each bucket's path
//   auto ddp = DistributedDataParallel::Create(model, pg, options);
//
// A bucket goes through the copy engines when all of these hold:
//   0. the build has CUDA (without it the hook is off and says so: the one place that knows);
//   1. the group's collectives run on a GPU (device_index() >= 0) and it has exactly two ranks;
//   2. their GPUs are on one host and reach each other peer-to-peer (checked together in Create);
//   3. TINYDDP_COPY_ENGINE_ALLREDUCE is not "0" on either rank (the switch back to NCCL);
//   4. the bucket is float32 and holds at least 4 MiB (TINYDDP_COPY_ENGINE_MIN_BYTES moves the threshold;
//      the two ranks use the larger of their values). DDP's op, AVG, is one the copy engines take;
//   5. the step is not being recorded into a CUDA graph (tensor/cuda_graph.h). A copy-engine call numbers
//      itself: each call's sequence number goes into stream memory operations that the peer waits for, and
//      a graph would freeze the numbers of the captured call into every replay. NCCL's kernels are made to
//      be captured, so inside a graph every bucket takes the group's all_reduce.
// 0-3 are settled collectively in Create, 4 depends only on the bucket layout, which is identical on every
// rank, and every rank captures the same step (dist/accel/graph/graphed_step.h): every rank takes the same
// path for every bucket. Below 4 MiB NCCL's latency wins; and a standalone all_reduce (bench/allreduce_bench)
// is faster as NCCL's kernel, so only DDP's buckets, which overlap backward, come here.
//
// Both paths are collectives of the same group: ProcessGroup::AllReduceExternal gives copy-engine calls the
// group's sequence numbers, debug fingerprint, watchdog and timeout. What differs for the user:
// NCCL_DEBUG=INFO logs NCCL's calls only (the hook says so on stderr when NCCL_DEBUG is set), and DDP's
// bucket table and trace name the path of each bucket (CommHook::path); Describe() adds whether the copy
// engines are on, and why not.
//
// Registered buckets: through CommHook::on_buckets_rebuilt the reducer hands its flat bucket buffers over
// whenever it (re)builds them; the copy engines then write each reduced half straight into the peer's
// bucket (no staging, no local copy). A collective, host-blocking exchange, outside the training step.
#ifndef TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_HOOK_H_
#define TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_HOOK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

class CopyEngineAllReduce;  // copy_engine_all_reduce.h (CUDA builds)

class CopyEngineHook : public std::enable_shared_from_this<CopyEngineHook> {
 public:
  /// Collective over `pg` (every rank calls it at the same point, before DistributedDataParallel::Create):
  /// settles conditions 0-3 and sets the copy engines up when they hold. "Not possible" is no error: the
  /// hook then takes AllReduceHook for every bucket and off_reason() says why. Errors: the setup exchange
  /// failed (store, timeout), or TINYDDP_COPY_ENGINE_MIN_BYTES is not a byte count.
  static absl::StatusOr<std::shared_ptr<CopyEngineHook>> Create(ProcessGroup& pg);
  ~CopyEngineHook();
  CopyEngineHook(const CopyEngineHook&) = delete;
  CopyEngineHook& operator=(const CopyEngineHook&) = delete;

  /// The comm hook to give DDP (DdpOptions::comm_hook); it keeps this object alive. Its path is "copy
  /// engines" for the buckets they take, the group's all_reduce for the others; its on_buckets_rebuilt
  /// registers the buckets.
  CommHook AsCommHook();
  /// Whether `bucket` goes through the copy engines (conditions 4 and 5, once 0-3 hold).
  bool Takes(const GradBucket& bucket) const;

  /// Collective, host-blocking: pairs the flat bucket buffers across the two ranks (the copy engines
  /// then write straight into the peer's bucket). Replaces the previous registration; OK and nothing
  /// when the copy engines are off. Precondition: every rank passes its buffers of the same buckets.
  absl::Status RegisterBuckets(const std::vector<Tensor>& buffers);

  /// Whether conditions 0-3 hold; if not, why ("the group is gloo: its collectives run on host threads",
  /// "TINYDDP_COPY_ENGINE_ALLREDUCE=0", "the two GPUs cannot access each other peer-to-peer", ...).
  bool on() const { return module_ != nullptr; }
  const std::string& off_reason() const { return off_reason_; }
  /// One line for under DDP's bucket table: "copy engines: on for float32 buckets from N bytes (...)" or
  /// "copy engines: off (<off_reason>)".
  std::string Describe() const;
  /// Condition 4's threshold (0 when off).
  int64_t min_bytes() const;
  /// Buckets all-reduced by the copy engines so far, and how many of them went straight into the
  /// peer's registered bucket.
  int64_t calls() const;
  int64_t direct_calls() const;

 private:
  CopyEngineHook() = default;
  // Conditions 0 and 2-4 (copy_engine_hook.cc: the part that differs without CUDA).
  absl::Status SetUp(ProcessGroup& pg);
  CommFuture Run(ProcessGroup& pg, GradBucket& bucket);

  ProcessGroup* group_ = nullptr;                // the group Create saw (not owned)
  int device_ = -1;                              // its GPU, when the copy engines are on
  std::shared_ptr<CopyEngineAllReduce> module_;  // null when off
  std::string off_reason_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_HOOK_H_
