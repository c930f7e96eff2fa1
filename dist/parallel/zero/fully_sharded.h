// FullyShardedDataParallel: ZeRO stage 3 (Rajbhandari et al. 2020; PyTorch's FSDP), a piece of the ZeRO wing
// (dist/parallel/zero/, docs/zero.md). ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too; ZeRO-3
// also shards the parameters, so that between steps each rank holds 1/N of everything, and a layer exists
// whole only while it computes.
//
//   auto fsdp = zero::FullyShardedDataParallel::Create(model, pg, factory).value();  // collective
//   for (...) {
//     autograd::Backward(loss(fsdp->Forward(x)));  // gathers, computes, frees; reduce-scatters; steps 1/N
//     RETURN_IF_ERROR(fsdp->status());
//   }
//
// It replaces DDP (it is its own data parallelism): no DistributedDataParallel, no reducer, no buckets.
//
// Units: one per nn::Linear of an nn::Sequential (its weight and bias, one flat buffer cut into N blocks,
// as a ZeRO-1 bucket is; shard_layout.h's blocks). Per layer, as FSDP1 and DeepSpeed do, rather than per
// parameter as FSDP2: a Linear's weight and bias are always needed together, so one flat buffer makes one
// all-gather and one reduce-scatter per layer instead of two, with no bookkeeping of which parameters
// arrived; FSDP2 shards every parameter on its first dimension for what tinyddp does not have (DTensor,
// mixing with tensor parallelism, frozen parameters, per-parameter dtypes).
//
// One step, as seen from here (L layers, this rank r):
//   forward   layer l: its all-gather was issued by layer l-1 (the prefetch); wait for it, issue layer
//             l+1's, compute with the gathered weights, free them (the last layer keeps them: its backward
//             comes next). At most two layers are whole at any time.
//   backward  layer l (last to first): wait for its all-gather (issued by layer l+1's backward), issue
//             layer l-1's, compute dx (while layer l+1's reduce-scatter runs), wait for that reduce-scatter
//             and free its staging buffer, compute dW and db into a staging buffer of this layer, free the
//             weights, and reduce-scatter the staging buffer into this rank's gradient block.
//   end       (a callback queued on autograd's engine) wait for the last reduce-scatters; each layer's
//             optimizer steps block r of its parameters with block r of its averaged gradient. Nothing is
//             gathered after the step: the next forward gathers the new values.
// Peak parameter memory: 4P/N (the shards) + two layers whole; gradients: 4P/N + one layer staged (with
// gradient accumulation: + every layer's sum, 4P, below).
// Wire bytes per step: all-gather (N-1)/N of the parameters twice (forward, backward) + reduce-scatter
// (N-1)/N of the gradients = 1.5x one ring all_reduce (DDP, ZeRO-1 and ZeRO-2 move 1x).
//
// The seam: the layers' computation is an autograd op of this file (Record, autograd/node.h), written like
// autograd/linear.cc's (the same kernels in the same order, so on 2 ranks the result is plain DDP's, bit
// for bit), whose inputs are the activation and this rank's shard of the layer (a leaf that requires grad,
// the "master"). Its backward gathers the weights again, which autograd's saved tensors could not do: a
// graph that saved the gathered weights would keep every layer whole until backward. The master's gradient
// destination is this rank's gradient block (Variable::set_grad_destination), so the engine offers it to
// the op (NeedsGrad::write_into), the reduce-scatter writes there, and backward goes on while it runs. No
// hook in nn/ or autograd/ was needed.
//
// Mixed precision (a model set to bf16, nn/precision.h), FSDP2's MixedPrecisionPolicy(param_dtype=bf16,
// reduce_dtype=fp32): the shard a rank keeps stays float32 (the master its optimizer steps), beside a
// bfloat16 copy of it that the optimizer writes in the same pass (Optimizer::SetComputeCopies). The
// all-gathers move the bfloat16 copies: half the bytes, and the layer arrives in the dtype the GEMMs read.
// The gradients stay float32: dW and db are written float32 from bfloat16 operands (as autograd/linear.cc
// does), and the reduce-scatter averages float32. Why fp32 for the reduction: plain DDP under bf16 all-reduces
// float32 buckets (docs/mixed_precision.md), and a bfloat16 reduction would round every rank's gradient
// to 8 bits before the sum, so ZeRO-3 would no longer train to DDP's bits (it does, on 2 ranks). On the
// wire a step then moves (N-1)/N x (2P + 2P + 4P) bytes per rank, two thirds of the float32 step's 12P.
//
// Gradient accumulation (NoSync, torch FSDP's no_sync()): the backward of a forward run under the guard
// reduce-scatters nothing and steps nothing: each layer's gradient is added, whole and float32, into a
// buffer of the layer kept until the step (the GEMM adds into it: beta = 1). The first synchronised
// backward adds its own micro-batch into the same buffers and reduce-scatters their sums, layer by layer
// as before, then steps once. The other choice - reduce-scatter every micro-batch and add the averaged
// blocks - and what each costs, per rank, with k micro-batches per step:
//                           memory for gradients during the step    reduce-scatters per step
//   whole (this file)       4P (every layer's sum, as DDP holds it)  1 (as without accumulation)
//   sharded per micro-batch 4P/N + one layer staged                  k
// Either way every micro-batch gathers each layer for its forward and again for its backward.
// Whole sums were chosen because they are what plain DDP adds (each rank's micro-batches first, then the
// average over ranks, in the same order), so accumulation under ZeRO-3 trains to --zero=0's bits on 2
// ranks, as ZeRO-2's NoSync does; averaging each micro-batch separately would add in another order
// (within float reassociation only), and move k times the reduce-scatter bytes. Its cost is the 4P: a model
// whose gradient does not fit whole on one rank should accumulate by the other rule (not done).
//
// Tracing (FullyShardedOptions::tracer, ddp_mlp --trace): each layer's compute as a span on the compute
// track ("forward layer", "backward layer"; arg = the layer's position among the Linears, 0 first), the
// end-of-backward step ("optimizer", inside backward's span), and each collective on the communication
// track ("all_gather", "reduce_scatter", same arg): on the CPU the interval Gloo's worker ran it, on a GPU
// two timing events on the group's stream. docs/images/zero3_timeline.svg is such a trace, drawn.
//
// The nn::Linear modules keep their Variables (names, registration order: checkpoints are the model's),
// but between GatherFullParameters and ReleaseFullParameters only do they hold the weights; otherwise
// their data (and under bf16 their compute copies) is an empty placeholder. Run the model through this
// object (it is an nn::Module: Forward also works under NoGradGuard for evaluation, gathering and freeing
// layer by layer).
// Checkpoints stay one consolidated model (GatherFullParameters, then save the model as one process
// does) and one consolidated optimizer state (ConsolidatedStateTensors: plain DDP's names and shapes), so
// they load at any number of ranks, with or without ZeRO.
// Not supported (Create refuses, saying so): modules other than an nn::Sequential of nn::Linear and
// parameter-free layers, frozen parameters. Not thread-safe: the training thread.
#ifndef TINYDDP_DIST_PARALLEL_ZERO_FULLY_SHARDED_H_
#define TINYDDP_DIST_PARALLEL_ZERO_FULLY_SHARDED_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/node.h"
#include "autograd/variable.h"
#include "dist/ddp/ddp.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/zero/shard_layout.h"
#include "dist/parallel/zero/shard_state.h"
#include "dist/process_group/process_group.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/sequential.h"
#include "nn/tensor_map.h"
#include "tensor/stream.h"

namespace tinyddp::dist::zero {

/// Builds an optimizer over the given parameters (the same alias as zero_optimizer.h's).
using OptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<autograd::Variable>)>;

/// What one rank holds under ZeRO-3, in bytes (the same figures on every rank, up to padding).
struct FullyShardedMemory {
  int world = 1;
  int64_t parameters = 0;             // P, elements
  int64_t shard_elements = 0;         // this rank's blocks together: ceil(P/N) + padding
  int64_t parameter_bytes = 0;        // the parameter shards (the masters, float32), between steps
  int64_t compute_copy_bytes = 0;     // bf16: their bfloat16 copies, what the all-gathers move; else 0
  int64_t gradient_bytes = 0;         // the gradient blocks, between steps
  int64_t optimizer_state_bytes = 0;  // this rank's optimizer state
  int64_t largest_unit_bytes = 0;     // one layer whole (padded), as gathered (bfloat16 under bf16)
  int64_t largest_gradient_bytes = 0;  // one layer's gradient whole (padded, float32): one staging buffer
  int64_t peak_gathered_bytes = 0;    // the most whole layers held at once, since Create
  int64_t peak_staging_bytes = 0;     // the most whole gradients held at once, since Create: one layer's
                                      // staged; with NoSync every layer's sum until the synchronised backward
  std::string ToString() const;
};

struct FullyShardedOptions {
  /// Records each layer's compute and collectives (the header's "Tracing"); null: nothing. The tracer
  /// must outlive the wrapper.
  Tracer* tracer = nullptr;
};

class FullyShardedDataParallel : public nn::Module {
 public:
  /// Shards `model` over `pg` (collective: every rank, the same model): verifies every rank holds the same
  /// parameters (DistributedDataParallel's check), broadcasts rank 0's values, keeps this rank's block of
  /// each layer, builds one optimizer per layer over it with `factory`, and empties the model's parameters.
  /// Under bf16 (model->precision()) each layer's optimizer is also given the bfloat16 copy of its shard
  /// (SetComputeCopies: the factory need not). InvalidArgument, changing nothing, when `model` holds a
  /// layer with parameters that is not an nn::Linear, or a parameter that does not require grad. The
  /// graphs its forwards record call back into it: run or drop them before destroying it.
  static absl::StatusOr<std::unique_ptr<FullyShardedDataParallel>> Create(
      std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> pg,
      zero::OptimizerFactory factory, const FullyShardedOptions& options = {});
  ~FullyShardedDataParallel() override;

  /// The model's forward, each layer gathered just before it runs. With grad mode on the backward that
  /// follows reduce-scatters and steps (see the header comment), or under NoSync only adds each layer's
  /// gradient into its whole sum; under NoGradGuard it only computes.
  autograd::Variable Forward(const autograd::Variable& x) override;

  /// Gradient accumulation (torch FSDP's no_sync(), DistributedDataParallel::NoSync): while the guard
  /// lives, forwards record backwards that neither reduce-scatter nor step; each adds its layers'
  /// gradients into their whole sums. The next backward of a forward outside the guard adds its own,
  /// reduce-scatters the sums and steps once. Only the Forward decides, as for DDP:
  ///   for (i < k - 1) { auto guard = fsdp->NoSync(); Backward(loss(fsdp->Forward(x[i]))); }
  ///   Backward(loss(fsdp->Forward(x[k - 1])));  // reduce-scatters the k micro-batches' sum, steps
  /// Guards nest; each restores what it found.
  class NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(NoSyncGuard&& other) noexcept;
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    friend class FullyShardedDataParallel;
    NoSyncGuard(FullyShardedDataParallel* fsdp, bool previous) : fsdp_(fsdp), previous_(previous) {}
    FullyShardedDataParallel* fsdp_;  // null once moved from
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard NoSync();
  std::string ToString() const override;

  /// OK, or the first failure of a collective of ours (an all-gather, a reduce-scatter): the ranks'
  /// parameters may then differ, and training must stop. Steps stop at the first failure.
  const absl::Status& status() const { return status_; }
  /// Sets the learning rate of every layer's optimizer.
  void SetLr(double lr);
  FullyShardedMemory Memory() const;
  /// The layout, one line per layer (block size, padding), for the start of a run.
  std::string ShardTable() const;
  /// Bytes of each layer whole, in order: what each all-gather returns (the trace's labels; under bf16
  /// the bfloat16 copies, half of what the layer's reduce-scatter reads).
  std::vector<int64_t> UnitBytes() const;
  nn::Sequential& module() { return *model_; }

  // --- Checkpoints ---------------------------------------------------------------------------------
  /// Collective: every rank's model parameters hold the whole model (all-gathered), e.g. to save it as one
  /// process would, or to evaluate it unsharded. Until ReleaseFullParameters or the next Forward.
  absl::Status GatherFullParameters();
  /// The model's parameters empty again.
  void ReleaseFullParameters();
  /// Collective: the state an optimizer made by the factory over all the model's parameters would hold
  /// ("state.<i>.<field>", plain DDP's names and shapes). Memory: briefly the whole state on every rank.
  absl::StatusOr<nn::TensorMap> ConsolidatedStateTensors();
  /// Not collective: keeps this rank's blocks of a consolidated state (written at any number of ranks).
  /// InvalidArgument, changing nothing, when it does not fit.
  absl::Status LoadConsolidatedStateTensors(const nn::TensorMap& state);

 private:
  // One nn::Linear, sharded.
  struct Unit {
    size_t child = 0;        // its position in the Sequential
    bool relu = false;       // followed by a ReLU, fused as nn::Sequential does
    int64_t out = 0, in = 0;
    bool has_bias = false;
    std::vector<ParamSpan> params;  // weight then bias; index: position in params_
    int64_t numel = 0, shard_numel = 0;
    autograd::Variable master;  // this rank's block of the parameters [shard_numel]: the optimizer's leaf
    Tensor copy;                // bf16: master's bfloat16 compute copy, what the all-gather sends; else undefined
    Tensor grad_block;          // this rank's averaged gradient block: master's gradient destination
    std::unique_ptr<nn::Optimizer> optimizer;  // over {master}
    Tensor full;                     // the layer whole [N * shard_numel] while needed; else undefined
    std::shared_ptr<Work> gather;    // the all-gather into `full`, in flight
    Tensor sum;                      // NoSync: the layer's gradient whole, summed over the local backwards
    Tensor staging;                  // the layer's gradient whole, while its reduce-scatter reads it
    std::shared_ptr<Work> reduce;    // that reduce-scatter, in flight
  };

  FullyShardedDataParallel(std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> pg,
                           const FullyShardedOptions& options);
  // Forward of unit u on x; `training`: a backward will follow, which synchronises when `sync`.
  autograd::Variable RunUnit(size_t u, const autograd::Variable& x, bool training, bool sync);
  // The op's backward: dW, db and dx of unit u; reduce-scatters its gradient (`sync`) or adds it into
  // the unit's sum.
  autograd::Grads BackwardUnit(size_t u, const Tensor& x, const Tensor& relu_out, const Tensor& dy,
                               const autograd::NeedsGrad& needs, bool sync);
  // End of backward (autograd::QueueCallback): drain the reduce-scatters, step (`sync`).
  void FinishBackward(bool sync);
  void StartGather(size_t u);
  const Tensor& FinishGather(size_t u);
  void Free(size_t u);
  // Waits for the oldest reduce-scatter in flight and frees its staging buffer.
  void DrainOneReduce();
  void Fail(const absl::Status& status);
  std::vector<ShardedState> States() const;
  // Tracing: issues a collective, bracketed by timing events on the group's stream on a GPU; and, once it
  // has completed, files the interval Gloo's worker ran it (CPU).
  std::shared_ptr<Work> Issue(const char* name, size_t u, const std::function<std::shared_ptr<Work>()>& collective);
  void TraceCompleted(const char* name, size_t u, Work& work);

  std::shared_ptr<nn::Sequential> model_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<std::pair<std::string, autograd::Variable>> named_;  // model_->NamedParameters()
  std::vector<ParamInfo> params_;  // their names, shapes and dtypes (the Variables hold placeholders)
  std::vector<Unit> units_;
  std::deque<size_t> reducing_;    // units whose reduce-scatter is in flight, oldest first (one at most)
  bool bf16_ = false;              // the model computes in bf16: gather the bfloat16 copies
  bool no_sync_ = false;           // inside a NoSyncGuard
  bool in_backward_ = false;       // FinishBackward queued
  Tracer* tracer_ = nullptr;
  std::unique_ptr<cuda::Event> fence_;  // tracing on a GPU: orders the group's stream after the compute stream
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  int64_t staging_bytes_ = 0, peak_staging_bytes_ = 0;
  absl::Status status_;
};

}  // namespace tinyddp::dist::zero

#endif  // TINYDDP_DIST_PARALLEL_ZERO_FULLY_SHARDED_H_
