// ZeroRedundancyOptimizer: ZeRO stage 1 (Rajbhandari et al. 2020; PyTorch's ZeroRedundancyOptimizer, llm.c's
// multi-GPU default), a wing beside DDP (dist/parallel/zero/). Plain DDP keeps a full copy of the optimizer
// state on every rank: N copies of the same momentum. ZeRO-1 gives each rank 1/N of it.
//
// It attaches to DistributedDataParallel (dist/ddp/ddp.h) at two of DDP's seams, and DDP knows nothing of it:
//   the comm hook            ReduceScatterHook (reduce_scatter_hook.h), given as DdpOptions::comm_hook: each
//                            bucket padded to whole blocks (CommHook::padded_numel) and reduce-scattered;
//   the bucket callback      Attach() takes DistributedDataParallel::SetBucketReducedCallback: once a
//                            bucket's reduce-scatter has arrived, this rank's block is stepped and gathered.
//                            The callback hands over the bucket (GradBucket: its parameters, its flat
//                            buffer), which is all ZeRO needs: it holds no reference to DDP's reducer.
//
//   DdpOptions options;
//   options.comm_hook = zero::ReduceScatterHook(*pg);                  // 1. before DDP: the buckets' path
//   auto ddp = DistributedDataParallel::Create(model, pg, options).value();
//   auto zero = zero::ZeroRedundancyOptimizer::Attach(*ddp, factory).value();  // 2. the sharded optimizer
//   for (...) {
//     model.ZeroGrad();
//     autograd::Backward(loss(ddp->Forward(x)));  // reduce-scatter, step, all-gather: all inside Backward
//     RETURN_IF_ERROR(ddp->status());             // ZeRO's own failures (an all-gather) land here too
//   }                                             // no optimizer.Step(): the shards stepped
//
// One ZeRO-1 step, bucket by bucket (buckets are DDP's, reducer.h; blocks are shard_layout.h's):
//   backward  as each bucket's gradients are ready, its flat buffer is reduce-scattered (reduce_scatter_hook.h):
//             rank r receives the average of block r only. Overlapped with the rest of backward, as
//             DDP's all_reduce is.
//   step      at the end of backward, bucket by bucket as its reduce-scatter completes, rank r steps the
//             optimizer for block r: one optimizer per bucket over one flat parameter (the block), so
//             the state (momentum, Adam's moments) exists for block r only.
//   gather    right after, the bucket's parameters are all-gathered (in place), so every rank again holds
//             every new weight. The all-gather of bucket b runs while bucket b+1 is stepped.
//   done      after the last bucket the current stream waits for the all-gathers (GPU: event waits, no host
//             blocking; CPU: the thread waits): when Backward returns, the parameters are the new ones.
// Wire bytes: reduce-scatter (N-1)/N + all-gather (N-1)/N of the parameters = one ring all_reduce.
//
// The optimizer inside backward (ZeroOptions::in_backward, `--optimizer_in_backward`; DDP's timing
// Reducer::CallbackTiming::kInBackward, as dist/accel/fused_optimizer uses it): bucket k's block is stepped
// already while backward computes the earlier layers' gradients, as soon as its reduce-scatter has landed
// (GPU: on the reducer's side stream, ordered after the reduce-scatter by an event; CPU: at the first
// gradient hook after Gloo finished it). That timing differs from rank to rank, and a collective must be
// issued at the same point on every rank, so the all-gathers are not issued there: they all go out at the
// end of backward, in bucket order, after the last bucket's step (the last bucket is always finished at the
// end of backward), and the current stream (CPU: the thread) waits for them before Backward returns, as
// without the flag: the next forward reads gathered parameters. On a GPU the compute stream is first ordered
// after the side stream's steps (an event), so each all-gather reads its stepped block. The arithmetic per
// element is the same, so the bits are those of the step after backward (zero_in_backward_test.cc).
// Gradient accumulation: backwards under NoSync run no callback, so only the last micro-step updates.
//
// The next forward cannot overlap the all-gathers: the first layer's parameters sit in the last bucket
// (buckets follow the order gradients arrive, last layer first), which is reduced, stepped and gathered
// last. What overlaps is each all-gather with the step of the following buckets, and on GPU the host
// queueing the next forward while the gathers run.
//
// Where the weights live: each bucket's parameters become views into one flat buffer (the layout of its
// gradient bucket, padded), so the all-gather writes them in place and the rank's block of that buffer is
// the float32 master the optimizer steps: no copy, no extra memory. Under ZeRO-1 a parameter's .grad after
// backward holds the average only in this rank's block (the rest is this rank's local gradient).
// DDP rebuilds its buckets once, after the first step (reducer.h); the shards follow bucket by bucket, each
// the first time its callback brings a bucket it was not cut from. The state moves through its consolidated
// form (collective, so at the same point on every rank: the first such bucket after backward, or with the
// optimizer inside backward the end of that backward, where the buckets to re-cut wait to be stepped); the
// old shards' state is dropped as soon as it is consolidated, and each parameter's part of the consolidated
// state as soon as its new shard took it, so the re-sharding briefly holds one full copy of the state (what
// plain DDP holds throughout), not two.
//
// Mixed precision (nn/precision.h, bf16): the layers compute with bfloat16 copies, which become views into
// a second flat buffer per bucket. The step of block r writes its float32 masters and, in the same pass,
// block r of the bfloat16 buffer; the all-gather moves the bfloat16 buffer (half the bytes). The float32
// parameters are then current in this rank's blocks only; ConsolidatedStateTensors (checkpoints) and the
// re-sharding all-gather them first.
//
// ZeRO-2 (gradient_shards.h) is the same optimizer over other gradients: Attach(ddp, factory, shards) with
// DDP in the coalesced layout and GradientShards::Hook() as its comm hook. The hook keeps only this rank's
// averaged block of each bucket (the parameters' own gradients are dropped as each bucket is staged), and
// each shard's optimizer reads its block from there; the rest (flat parameters, step, all-gather,
// checkpoints, bf16, the optimizer inside backward) is unchanged.
//
// Checkpoints stay those of plain DDP: ConsolidatedStateTensors gathers the shards into the full
// per-parameter state an nn::Optimizer over all parameters would hold (PyTorch's names, "state.3.exp_avg"),
// and LoadConsolidatedStateTensors takes its own blocks out of such a state, so a checkpoint written at N
// ranks resumes at any number of ranks, with or without ZeRO.
// Not thread-safe: the training thread only.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_ZERO_OPTIMIZER_H_
#define TINYDDP_DIST_PARALLEL_ZERO_ZERO_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/parallel/zero/gradient_shards.h"
#include "dist/parallel/zero/shard_layout.h"
#include "dist/parallel/zero/shard_state.h"
#include "dist/process_group/process_group.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/tensor_map.h"
#include "tensor/stream.h"

namespace tinyddp::dist::zero {

/// How the shards step.
struct ZeroOptions {
  /// Step each bucket's block during backward, as soon as its reduce-scatter has landed (see above); the
  /// all-gathers still go out at the end of backward.
  bool in_backward = false;
};

/// Builds an optimizer over the given parameters (e.g. a lambda making nn::SGD with fixed options).
using OptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<autograd::Variable>)>;

/// What one rank holds for the optimizer under ZeRO-1 or -2 (the same on every rank).
struct ShardMemory {
  int stage = 1;  // 1, or 2 with GradientShards
  int world = 1;
  /// P: elements of the parameters DDP reduces (those that require grad).
  int64_t parameters = 0;
  /// Elements this rank steps: the sum of its blocks over the buckets, ceil(P / world) plus padding.
  int64_t shard_elements = 0;
  /// world * shard_elements - P: zeros that pad the buckets to whole blocks, over all ranks.
  int64_t padding_elements = 0;
  /// This rank's optimizer state (momentum, Adam's moments; 0 before the first step allocates it).
  int64_t optimizer_state_bytes = 0;
  /// The same state held unsharded, as plain DDP holds it on every rank.
  int64_t unsharded_optimizer_state_bytes = 0;
  /// The master weights this rank steps (its blocks). Under float32 they are the rank's block of the
  /// parameters themselves, updated in place.
  int64_t master_weight_bytes = 0;
  /// The parameters' flat buffers (all of the model, padded), and under bf16 their compute copies.
  int64_t parameter_bytes = 0;
  /// Gradients: ZeRO-1 the padded buckets (all of them); ZeRO-2 this rank's blocks (GradientShards), plus
  /// what is staged now (nothing between steps).
  int64_t gradient_bytes = 0;
  /// ZeRO-2: the largest bucket staged during a backward (one at a time).
  int64_t peak_staging_bytes = 0;

  /// "this rank steps 203,530 of 407,050 parameters (+ 10 padding over 2 ranks); optimizer state
  ///  1,628,240 bytes (unsharded: 3,256,400); master weights 814,120 bytes".
  std::string ToString() const;
};

class ZeroRedundancyOptimizer {
 public:
  /// Shards the optimizer of `ddp` over its ranks: every parameter DDP buckets becomes a view into its
  /// bucket's flat parameter buffer (under bf16 its compute copy a view into the bucket's bfloat16
  /// buffer; same values), `factory` builds one optimizer per bucket over this rank's block, and from the
  /// next synchronised backward on the blocks are stepped and all-gathered inside Backward (the training
  /// loop calls no Step()). Not collective; every rank builds the same shards.
  /// InvalidArgument, attaching nothing, when `ddp` cannot carry ZeRO-1: its comm hook is not
  /// ReduceScatterHook (or does not pad the buckets), gradient_as_bucket_view is off, find_unused_parameters
  /// is on, or it already steps fused optimizers or another bucket callback.
  /// Preconditions: `factory` returns a non-null optimizer whose update is elementwise (SGD, Adam(W));
  /// the result is destroyed before `ddp` (destroying it detaches it; DDP then steps nothing).
  /// ZeRO-2: with `gradients`, the DDP must use gradients->Hook() in the coalesced layout
  /// (gradient_as_bucket_view = false) instead, and each shard steps with its block of `gradients`.
  /// With options.in_backward the blocks are stepped during backward (Reducer::CallbackTiming::kInBackward).
  /// DDP's buckets are read once, here; later layouts (DDP's rebuild) arrive with the callback's GradBucket,
  /// and no reference to the reducer is kept.
  static absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> Attach(
      DistributedDataParallel& ddp, OptimizerFactory factory, std::shared_ptr<GradientShards> gradients = nullptr,
      ZeroOptions options = {});
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  /// OK, or the first communication error of ZeRO-1's own collectives (an all-gather of parameters, the
  /// re-sharding): the parameters are then not the same on every rank, and training must stop.
  /// DistributedDataParallel::status() reports it too (the bucket callback returns it).
  const absl::Status& status() const { return status_; }
  bool in_backward() const { return options_.in_backward; }

  /// Sets the learning rate of every shard's optimizer (an LR schedule calls it before each step).
  void SetLr(double lr);

  ShardMemory Memory() const;
  /// The layout, one line per bucket (block size, padding): printed under DDP's bucket table.
  std::string ShardTable() const;

  // --- Checkpoints -----------------------------------------------------------------------------------
  /// Collective (every rank must call it; all receive the result): the state an optimizer made by the
  /// same factory over all the module's parameters would hold after the same steps, "state.<i>.<field>"
  /// with i the parameter's position in NamedParameters. Under bf16 it first all-gathers the float32
  /// parameters, so that the module itself can be saved too. Memory: briefly the full state on every rank.
  absl::StatusOr<nn::TensorMap> ConsolidatedStateTensors();
  /// Not collective: keeps this rank's blocks of a consolidated state (from ConsolidatedStateTensors, a
  /// checkpoint of plain DDP, or one written at another number of ranks). The parameters themselves come
  /// from the model (load it before). InvalidArgument, changing nothing, when the state does not fit:
  /// unknown parameter or field, wrong shape, or (Adam) parameters of one bucket at different steps.
  absl::Status LoadConsolidatedStateTensors(const nn::TensorMap& state);

 private:
  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, OptimizerFactory factory,
                          std::shared_ptr<GradientShards> gradients, ZeroOptions options);

  // One bucket's shard.
  struct Shard {
    std::vector<autograd::Variable> bucket_params;  // the DDP bucket it was cut from (GradBucket::parameters)
    int64_t gradient_bytes = 0;      // ZeRO-1: of that bucket's flat gradient buffer (DDP's; Memory())
    std::vector<ParamSpan> params;   // ParamSpan::index: position in params_; bucket order
    int64_t numel = 0;               // elements of the bucket's parameters
    int64_t shard_numel = 0;         // one block
    Tensor flat;                     // [world * shard_numel]: the parameters (views into it), padding at the end
    Tensor copies;                   // bf16: the same layout in bfloat16, the compute copies (views); else undefined
    autograd::Variable master;       // this rank's block of `flat`, as a leaf (its grad: during Step only)
    std::unique_ptr<nn::Optimizer> optimizer;  // over {master}
    std::shared_ptr<Work> gather;    // the all-gather in flight, until the end of backward
  };

  // A shard cut from `bucket`: its parameters move into a new flat buffer (views), an optimizer over this
  // rank's block. Not collective.
  Shard MakeShard(const GradBucket& bucket);
  // True when `b`'s shard was cut from `bucket` as it is now (DDP has not rebuilt it since).
  bool Fits(int b, const GradBucket& bucket) const;
  // DDP's bucket callback: steps this rank's block of `bucket` and all-gathers it (in backward: steps only,
  // the gathers follow the last bucket). Returns status().
  absl::Status OnBucketReduced(const GradBucket& bucket);
  // At the last bucket `last`: the shards of the buckets DDP rebuilt (deferred_) are cut again, their state
  // consolidated (collective) and handed over, and they are stepped. Failures go to status_.
  void Recut(int last);
  // Steps shard `b` (in backward on a GPU: records stepped_); starts its all-gather.
  void Step(const GradBucket& bucket);
  void Gather(int b);
  // Orders the current stream (CPU: the thread) after every all-gather in flight; failures go to status_.
  void DrainGathers();
  // bf16: all-gathers the float32 parameters, current only in this rank's blocks since the last step.
  absl::Status GatherMasters();
  void Fail(const absl::Status& status);
  // Gathers every shard's optimizer state into full per-parameter tensors (collective).
  absl::StatusOr<nn::TensorMap> GatherState();
  // Cuts `state` (validated) into this rank's blocks and loads them into the shards' optimizers.
  absl::Status ScatterState(const nn::TensorMap& state);
  // The shards and the parameters as shard_state.h moves them.
  static ShardedState StateOf(const Shard& s);
  std::vector<ShardedState> States() const;
  std::vector<ParamInfo> Params() const;

  DistributedDataParallel& ddp_;
  ProcessGroup& pg_;        // ddp_'s
  nn::Module& module_;      // ddp_'s
  std::vector<std::pair<std::string, autograd::Variable>> params_;  // module_.NamedParameters()
  OptimizerFactory factory_;
  std::shared_ptr<GradientShards> gradients_;  // ZeRO-2; null under ZeRO-1
  const ZeroOptions options_;
  std::vector<Shard> shards_;  // by bucket index
  double lr_ = -1;           // < 0: the factory's own
  bool masters_behind_ = false;  // bf16: the float32 parameters outside this rank's blocks are stale
  std::vector<GradBucket> deferred_;  // buckets DDP rebuilt, to cut again and step at the last bucket
  cuda::Event stepped_;               // in backward on a GPU: recorded after each step on the side stream
  bool stepped_in_backward_ = false;  // in this backward
  absl::Status status_;      // the first failure of a collective of ours (status())
};

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_ZERO_OPTIMIZER_H_
