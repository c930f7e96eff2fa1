// CopyEngineHook: DDP's default comm hook, and the one place that decides whether a bucket is averaged by
// the copy engines (dist/process_group/nccl/copy_engine/copy_engine_all_reduce.h: DMA over NVLink, which
// leaves the SMs to the backward it overlaps) or by the group's own all_reduce (AllReduceHook).
//
// A bucket goes through the copy engines when all of these hold:
//   1. the group is ProcessGroupNCCL with exactly two ranks;
//   2. their GPUs are on one host and reach each other peer-to-peer (checked together when DDP is made);
//   3. TINYDDP_COPY_ENGINE_ALLREDUCE is not "0" on either rank (the switch back to NCCL);
//   4. the bucket is float32 and holds at least 4 MiB (TINYDDP_COPY_ENGINE_MIN_BYTES moves the threshold;
//      the two ranks use the larger of their values). DDP's op, AVG, is one the copy engines take;
//   5. the step is not being recorded into a CUDA graph (tensor/cuda_graph.h). A copy-engine call numbers
//      itself: each call's sequence number goes into stream memory operations that the peer waits for, and
//      a graph would freeze the numbers of the captured call into every replay. NCCL's kernels are made to
//      be captured, so inside a graph every bucket takes NCCL's all_reduce.
// 1-3 are settled collectively when DDP is created, 4 depends only on the bucket layout, which is
// identical on every rank, and every rank captures the same step (dist/ddp/graphed_step.h): every rank
// takes the same path for every bucket. Below 4 MiB NCCL's latency
// wins; and a standalone all_reduce (bench/allreduce_bench) is faster as NCCL's kernel, so only DDP's
// buckets, which overlap backward, come here.
//
// Both paths are collectives of the same group: ProcessGroupNCCL::AllReduceExternal gives copy-engine
// calls the group's sequence numbers, debug fingerprint, watchdog and timeout. What differs for the user:
// NCCL_DEBUG=INFO logs NCCL's calls only (the hook says so on stderr when NCCL_DEBUG is set), and DDP's
// bucket table and trace name the path of each bucket.
//
// Registered buckets: DDP hands its flat bucket buffers to RegisterBuckets whenever it (re)builds them;
// the copy engines then write each reduced half straight into the peer's bucket (no staging, no local
// copy). A collective, host-blocking exchange, outside the training step.
// CUDA builds have the copy engines (copy_engine_hook.cc); other builds a stub that always says no.
#ifndef TINYDDP_DIST_DDP_COPY_ENGINE_HOOK_H_
#define TINYDDP_DIST_DDP_COPY_ENGINE_HOOK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

class CopyEngineAllReduce;  // dist/process_group/nccl/copy_engine/copy_engine_all_reduce.h (CUDA builds)

class CopyEngineHook : public std::enable_shared_from_this<CopyEngineHook> {
 public:
  /// Collective over `pg` (every rank calls it at the same point, DDP's Create): settles conditions 1-3
  /// and sets the copy engines up when they hold. "Not possible" is no error: the hook then takes
  /// AllReduceHook for every bucket and off_reason() says why. Errors: the setup exchange failed (store,
  /// timeout), or TINYDDP_COPY_ENGINE_MIN_BYTES is not a byte count.
  static absl::StatusOr<std::shared_ptr<CopyEngineHook>> Create(ProcessGroup& pg);
  ~CopyEngineHook();
  CopyEngineHook(const CopyEngineHook&) = delete;
  CopyEngineHook& operator=(const CopyEngineHook&) = delete;

  /// The comm hook to give the reducer (it keeps this object alive).
  CommHook AsCommHook();
  /// Whether `bucket` goes through the copy engines (conditions 4 and 5, once 1-3 hold).
  bool Takes(const GradBucket& bucket) const;

  /// Collective, host-blocking: pairs DDP's flat bucket buffers across the two ranks (the copy engines
  /// then write straight into the peer's bucket). Replaces the previous registration; OK and nothing
  /// when the copy engines are off. Precondition: every rank passes its buffers of the same buckets.
  absl::Status RegisterBuckets(const std::vector<Tensor>& buffers);

  /// Whether conditions 1-3 hold; if not, why ("the group is gloo, not nccl", "TINYDDP_COPY_ENGINE_
  /// ALLREDUCE=0", "the two GPUs cannot access each other peer-to-peer", ...).
  bool on() const { return module_ != nullptr; }
  const std::string& off_reason() const { return off_reason_; }
  /// Condition 4's threshold (0 when off).
  int64_t min_bytes() const;
  /// Buckets all-reduced by the copy engines so far, and how many of them went straight into the
  /// peer's registered bucket.
  int64_t calls() const;
  int64_t direct_calls() const;

 private:
  CopyEngineHook() = default;
  CommFuture Run(ProcessGroup& pg, GradBucket& bucket);

  ProcessGroup* group_ = nullptr;                // the group Create saw (not owned)
  int device_ = -1;                              // its GPU, when the copy engines are on
  std::shared_ptr<CopyEngineAllReduce> module_;  // null when off
  std::string off_reason_;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_COPY_ENGINE_HOOK_H_
