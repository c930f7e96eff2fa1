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
}

namespace tinyddp::dist {

inline constexpr int64_t kMiB = int64_t{1} << 20;

/// DDP's options: the reducer's (reducer.h: bucket_cap_bytes, first_bucket_bytes, gradient_as_bucket_view,
/// find_unused_parameters, rebuild_buckets; PyTorch's defaults), plus what DDP itself adds.
struct DdpOptions : ReducerOptions {
  /// How a bucket is communicated (comm_hooks.h). Empty: AllReduceHook, one all_reduce with AVG per
  /// bucket. Wings attach here: the copy engines of two GPUs, a trace of each bucket (a hook that wraps
  /// any hook); docs/design.md says where they live.
  CommHook comm_hook;
};

class DistributedDataParallel {
 public:
  /// Wraps `module`, whose parameters must all be on one device: a CPU with a Gloo group, or this rank's
  /// GPU with an NCCL group. Collective: every rank of `pg` must call it. Verifies that all ranks hold the
  /// same parameter list (FailedPrecondition naming the first mismatch and the ranks that differ),
  /// broadcasts rank 0's parameter values, builds the buckets (then the comm hook's on_buckets_rebuilt
  /// runs, if it has one) and registers one hook per parameter.
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

  /// The seam for optimizer wrappers outside dist/ddp (the fused optimizer; ZeRO-1/2: wings, see
  /// docs/design.md): `callback` runs once per bucket of each synchronised backward, in launch
  /// order, right after that bucket's reduction has arrived, at the end of backward or already during it
  /// (`timing`, Reducer::CallbackTiming), with the bucket (its index, parameters and flat buffer). An error
  /// it returns becomes status() and no further callback runs.
  /// One callback at a time: setting a second one without removing the first (empty) stops the program.
  void SetBucketReducedCallback(std::function<absl::Status(const GradBucket& bucket)> callback,
                                Reducer::CallbackTiming timing = Reducer::CallbackTiming::kAfterBackward);
  /// True while an optimizer wrapper is attached there (its backward then updates the parameters).
  bool has_bucket_reduced_callback() const { return has_bucket_reduced_callback_; }
  /// False inside NoSync(): the next forward arms no communication.
  bool sync_enabled() const { return sync_enabled_; }

  nn::Module& module() { return module_; }
  ProcessGroup& process_group() { return *pg_; }
  /// The buckets, their order and per-iteration state (for tests, docs and the trace).
  const Reducer& reducer() const { return *reducer_; }
  /// OK, or the first communication error of this DDP (a bucket's all_reduce that failed because a peer
  /// died, froze past the timeout or lost its link; the rebuild's collectives; the collectives of the
  /// bucket-reduced callback, e.g. ZeRO-1's all-gathers). Check it after every Backward: once it is an
  /// error the gradients are not averages (or the parameters differ across ranks) and the loop must stop
  /// with it (a loop that calls Forward again instead ends the process there: exit status 3,
  /// exit_on_failure.h).
  absl::Status status() const;
  const DdpOptions& options() const { return options_; }

  /// How bucket `b` is communicated: "NCCL all_reduce", "Gloo all_reduce", or the name the comm hook gives
  /// ("copy engines", "NCCL all_reduce, bf16"). The same on every rank.
  const char* BucketPath(int b) const;
  /// The buckets in launch order as a table a person reads at the start of a run (ddp_mlp, ddp_step_bench
  /// print it on rank 0): index, bytes, parameters, path. The buckets are rebuilt once after the first
  /// step, in the order gradients arrived.
  std::string BucketTable() const;

 private:
  DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> pg, DdpOptions options,
                          std::unique_ptr<Reducer> reducer);

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> pg_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool sync_enabled_ = true;  // false inside NoSync()

  bool has_bucket_reduced_callback_ = false;
};

/// The collective check behind Create(), usable on its own: OK when every rank of `pg` passes the same
/// list of (name, shape, dtype); otherwise FailedPrecondition naming the first differing entry and which
/// ranks disagree with rank 0. Collective.
absl::Status VerifyParametersMatchAcrossRanks(ProcessGroup& pg,
                                              const std::vector<std::pair<std::string, autograd::Variable>>& params);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_DDP_H_
