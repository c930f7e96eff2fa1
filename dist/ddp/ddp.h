// DistributedDataParallel (DDP): N ranks train one model as if it were one process on N times the batch.
// The top of dist/: it wraps an nn::Module and a ProcessGroup, and plugs into autograd through one seam,
// the post-accumulate-grad hook of every parameter (autograd/engine.h), which hands gradients to the
// Reducer (dist/ddp/reducer.h): buckets of gradients all_reduced while backward is still running.
//
//   auto ddp = DistributedDataParallel::Create(*model, pg).value();  // same model everywhere, rank 0's weights
//   for (...) {
//     optimizer.ZeroGrad();
//     Variable loss = CrossEntropy(ddp->Forward(x), labels);         // Forward arms the reducer
//     autograd::Backward(loss);   // hooks launch bucket all_reduces; at the end every .grad is the average
//     optimizer.Step();           // sees the same averaged gradients on every rank
//   }
//
// Semantics follow torch.nn.parallel.DistributedDataParallel (defaults included):
//   * Create() checks that every rank holds the same parameters (names, shapes, dtypes, order) and copies
//     rank 0's values to all ranks, so training starts from one model.
//   * After a Backward through Forward's output, every parameter's .grad holds the average over ranks of
//     the ranks' gradients, bit-identical on every rank. .grad is a view into the reducer's flat bucket
//     (gradient_as_bucket_view=True): DDP keeps no second copy of the gradients.
//   * NoSync(): while the guard lives, backwards accumulate local gradients without communicating; the
//     first synchronised backward afterwards averages the accumulated sums (gradient accumulation).
//   * find_unused_parameters: parameters the forward did not use are found from the output's graph and
//     count as ready (their gradient is zero for the average). Without it, a backward that never reaches
//     some parameter stops the program with a message naming them and this option.
// Not thread-safe: one training thread per rank, as in PyTorch.
#ifndef TINYDDP_DIST_DDP_DDP_H_
#define TINYDDP_DIST_DDP_DDP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/reducer.h"
#include "dist/process_group/process_group.h"

namespace tinyddp::nn {
class Module;
class Optimizer;
}

namespace tinyddp::dist {

class CopyEngineHook;  // copy_engine_hook.h
class Tracer;          // trace.h
namespace zero {
class ZeroRedundancyOptimizer;  // zero/zero_optimizer.h
}

inline constexpr int64_t kMiB = int64_t{1} << 20;

/// DDP's options: the reducer's (reducer.h: bucket_cap_bytes, first_bucket_bytes, gradient_as_bucket_view,
/// find_unused_parameters, rebuild_buckets; PyTorch's defaults), plus what DDP itself adds.
struct DdpOptions : ReducerOptions {
  /// How a bucket is communicated (comm_hooks.h). Empty: DDP's default, which averages each bucket with
  /// the group's all_reduce or, for large float32 buckets of two GPUs of one machine, with their copy
  /// engines (copy_engine_hook.h states when).
  CommHook comm_hook;
  /// When set, DDP records forward and each bucket's all_reduce into it (trace.h). Not owned.
  Tracer* tracer = nullptr;
  /// 1: ZeRO stage 1 (dist/ddp/zero/zero_optimizer.h). Each bucket is reduce-scattered instead of
  /// all-reduced, the optimizer registered with RegisterFusedOptimizer is sharded (each rank keeps the
  /// state of 1/N of every bucket and steps only that), and the parameters are all-gathered after the
  /// step, all inside Backward. Needs gradient_as_bucket_view, no comm_hook and no
  /// find_unused_parameters. 0: plain DDP.
  int zero_stage = 0;
};

class DistributedDataParallel {
 public:
  /// Wraps `module`, whose parameters must all be on one device: a CPU with a Gloo group, or this rank's
  /// GPU with an NCCL group. Collective: every rank of `pg` must call it. Verifies that all ranks hold the
  /// same parameter list (FailedPrecondition naming the first mismatch and the ranks that differ),
  /// broadcasts rank 0's parameter values, chooses each bucket's path (the default hook), builds the
  /// buckets and registers one hook per parameter.
  /// `module` must outlive the returned object and keep its parameter set.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(nn::Module& module,
                                                                         std::shared_ptr<ProcessGroup> pg,
                                                                         DdpOptions options = {});
  /// Removes the hooks; the parameters' gradients stay valid (they keep the bucket memory alive).
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Runs the module and arms the reducer for the backward that follows (outside NoSync: that backward
  /// all_reduces). Precondition: the previous armed backward has run, or no output of the previous
  /// Forward is differentiated any more (a Forward without Backward, e.g. evaluation, is fine).
  autograd::Variable Forward(const autograd::Variable& input);
  autograd::Variable operator()(const autograd::Variable& input) { return Forward(input); }

  /// Gradient accumulation: while the returned guard lives, forwards arm no communication, so their
  /// backwards accumulate into .grad locally (torch's no_sync()). Guards nest; each restores what it found.
  class NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(NoSyncGuard&& other) noexcept;
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    friend class DistributedDataParallel;
    NoSyncGuard(DistributedDataParallel* ddp, bool previous) : ddp_(ddp), previous_(previous) {}
    DistributedDataParallel* ddp_;  // null once moved from
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard NoSync();

  /// Builds an optimizer over the given parameters (e.g. a lambda making nn::SGD with fixed options).
  using OptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<autograd::Variable>)>;
  /// Optimizer overlap (PyTorch's DistributedDataParallel._register_fused_optim): DDP builds one optimizer
  /// per bucket with `factory` and steps it at the end of each synchronised backward, right after that
  /// bucket's average has arrived - so the update of the buckets that finished early runs while the last
  /// buckets (the first layers' gradients, produced last) are still being all-reduced, hiding that tail.
  /// The training loop then calls no Step(): Backward leaves updated parameters (and averaged .grad).
  /// Per-parameter optimizer state follows the parameters when buckets are rebuilt. Backwards under NoSync
  /// step nothing. Precondition: call before the first Forward; `factory` returns a non-null optimizer.
  /// With DdpOptions::zero_stage 1 the optimizer is ZeRO-1's, sharded over the ranks (zero()); it must
  /// then be registered, and its update must be elementwise (SGD, Adam, AdamW).
  void RegisterFusedOptimizer(OptimizerFactory factory);
  /// Sets the learning rate of every fused optimizer (an LR schedule calls it before each step).
  void SetFusedOptimizerLr(double lr);
  /// The fused optimizers read their learning rate from `lr` on the device (Optimizer::UseDeviceLr), also
  /// after a bucket rebuild: what a step recorded into a CUDA graph needs when the rate changes. Undefined:
  /// back to SetFusedOptimizerLr's value.
  void UseFusedOptimizerDeviceLr(const Tensor& lr);
  /// The fused optimizers, one per bucket (empty without RegisterFusedOptimizer).
  const std::vector<std::unique_ptr<nn::Optimizer>>& fused_optimizers() const { return fused_; }
  /// False inside NoSync(): the next forward arms no communication.
  bool sync_enabled() const { return sync_enabled_; }

  nn::Module& module() { return module_; }
  ProcessGroup& process_group() { return *pg_; }
  /// The buckets, their order and per-iteration state (for tests, docs and the trace).
  const Reducer& reducer() const { return *reducer_; }
  /// OK, or the first communication error of this DDP (a bucket's all_reduce that failed because a peer
  /// died, froze past the timeout or lost its link; the rebuild's collectives; under ZeRO-1 also its
  /// all-gathers). Check it after every Backward: once it is an error the gradients are not averages (or
  /// the parameters differ across ranks) and the loop must stop with it (a loop that calls Forward again
  /// instead ends the process there: exit status 3, exit_on_failure.h).
  absl::Status status() const;
  const DdpOptions& options() const { return options_; }

  /// How bucket `b` is communicated: "NCCL all_reduce", "Gloo all_reduce", "copy engines", or the name a
  /// custom hook gives. The same on every rank.
  const char* BucketPath(int b) const;
  /// The buckets in launch order as a table a person reads at the start of a run (ddp_mlp, ddp_step_bench
  /// print it on rank 0): index, bytes, parameters, path; then whether the copy engines are on and why
  /// not. The buckets are rebuilt once after the first step, in the order gradients arrived.
  std::string BucketTable() const;
  /// DDP's default hook, which chooses between NCCL and the copy engines (on, off_reason, calls); null
  /// when DdpOptions::comm_hook was given.
  const CopyEngineHook* copy_engines() const { return copy_engines_.get(); }
  /// ZeRO-1's sharded optimizer (memory, consolidated state for checkpoints); null unless zero_stage is 1
  /// and RegisterFusedOptimizer was called.
  zero::ZeroRedundancyOptimizer* zero() { return zero_.get(); }

 private:
  DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> pg, DdpOptions options,
                          std::unique_ptr<Reducer> reducer, std::shared_ptr<CopyEngineHook> copy_engines);
  // Collective: after the buckets were (re)built, offers their flat buffers to the copy engines.
  absl::Status RegisterBucketsIfRebuilt();

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> pg_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::shared_ptr<CopyEngineHook> copy_engines_;  // null with a custom comm hook
  int64_t registered_generation_ = -1;            // the bucket layout the copy engines know
  bool sync_enabled_ = true;  // false inside NoSync()
  absl::Status status_;       // the buckets' registration failed (status())

  // Fused optimizers: one per bucket, rebuilt (with their state) when the reducer rebuilds its buckets.
  void RebuildFusedOptimizers();
  OptimizerFactory fused_factory_;
  std::vector<std::unique_ptr<nn::Optimizer>> fused_;
  int64_t fused_generation_ = -1;
  double fused_lr_ = -1;  // < 0: the factory's own
  std::unique_ptr<zero::ZeroRedundancyOptimizer> zero_;  // zero_stage 1: replaces fused_
  Tensor fused_device_lr_;  // defined: every fused optimizer reads its learning rate there
};

/// The collective check behind Create(), usable on its own: OK when every rank of `pg` passes the same
/// list of (name, shape, dtype); otherwise FailedPrecondition naming the first differing entry and which
/// ranks disagree with rank 0. Collective.
absl::Status VerifyParametersMatchAcrossRanks(ProcessGroup& pg,
                                              const std::vector<std::pair<std::string, autograd::Variable>>& params);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_DDP_H_
