// FusedOptimizer: the optimizer step fused into DDP's backward, one optimizer per gradient bucket, each
// stepped as soon as its bucket's average has arrived. A wing: it attaches to DistributedDataParallel at its
// one seam for optimizer wrappers, the bucket-reduced callback (dist/ddp/ddp.h), and DDP knows nothing of it.
//
// Why: a plain loop runs backward, waits for the last gradient, then steps every parameter. But bucket k's
// update needs only bucket k's average. Two timings (Options::in_backward):
//   after backward (PyTorch's DDP._register_fused_optim): at the end of backward, bucket by bucket as each
//     average lands; the updates of the early buckets hide the all_reduce tail of the last ones.
//   in backward (PyTorch's _apply_optim_in_backward; `--optimizer_in_backward`): already while backward is
//     computing the earlier layers' gradients. On a GPU each update runs on a stream of DDP's reducer,
//     ordered after its bucket's all_reduce by an event, so a memory-bound optimizer pass runs beside the
//     compute-bound GEMMs of the rest of backward; the step ends when the last bucket's update ends. On a
//     CPU an update runs on the training thread at the first gradient hook after its all_reduce finished.
// Either way each element gets the arithmetic Step() after backward would give it: the same gradient
// (the average), the same state, the same learning rate. So the parameters are bit for bit those of the
// plain loop (fused_optimizer_test.cc), and the update order between buckets changes nothing.
//
// Why it is safe to update bucket k during backward: its parameters belong to layers whose backward has
// already been queued (a bucket launches once all its gradients exist, and a layer's input gradient is
// queued with its weight gradient), and the bucket's all_reduce started after those kernels.
//
// Learning rate: SetLr before each step (a schedule), or UseDeviceLr for a step captured in a CUDA graph.
// Checkpoints: StateTensorsOver / LoadStateTensorsOver speak the state of one optimizer over the model's
// parameters, so a fused run saves and resumes exactly as a plain one. When DDP rebuilds its buckets the
// per-bucket optimizers are rebuilt with their state, at the next callback. Not thread-safe (training thread).
#ifndef TINYDDP_DIST_ACCEL_FUSED_OPTIMIZER_FUSED_OPTIMIZER_H_
#define TINYDDP_DIST_ACCEL_FUSED_OPTIMIZER_FUSED_OPTIMIZER_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/ddp/ddp.h"
#include "nn/optimizer.h"

namespace tinyddp::dist {

struct FusedOptimizerOptions {
  /// Step each bucket during backward instead of at its end (see above).
  bool in_backward = false;
};

class FusedOptimizer {
 public:
  /// Builds an optimizer over the given parameters (e.g. a lambda making nn::SGD with fixed options and the
  /// parameters' bf16 compute copies).
  using Factory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<autograd::Variable>)>;
  using Options = FusedOptimizerOptions;

  /// Attaches to `ddp` (which must outlive it, and have no other bucket-reduced callback): from the next
  /// synchronised backward on, its parameters are updated inside Backward and the loop calls no Step().
  /// Backwards under NoSync step nothing (gradient accumulation updates on the last micro-step only).
  /// InvalidArgument with `find_unused_parameters` (which settles the gradients only at the end of backward).
  static absl::StatusOr<std::unique_ptr<FusedOptimizer>> Attach(DistributedDataParallel& ddp, Factory factory,
                                                                Options options = {});
  /// Detaches: DDP steps nothing any more.
  ~FusedOptimizer();
  FusedOptimizer(const FusedOptimizer&) = delete;
  FusedOptimizer& operator=(const FusedOptimizer&) = delete;

  /// The learning rate of every per-bucket optimizer (a schedule calls it before each step).
  void SetLr(double lr);
  /// Every per-bucket optimizer reads its learning rate from `lr` on the device (nn::Optimizer::UseDeviceLr),
  /// also after a rebuild: what a step captured into a CUDA graph needs. Undefined: back to SetLr's value.
  void UseDeviceLr(const Tensor& lr);
  /// The per-bucket optimizers, in bucket order.
  const std::vector<std::unique_ptr<nn::Optimizer>>& optimizers() const { return per_bucket_; }
  bool in_backward() const { return options_.in_backward; }

  /// The state as one optimizer over `params` would name it ("state.<i>.<field>", i = position in `params`):
  /// what a checkpoint saves. Every parameter of the buckets must be in `params`.
  nn::TensorMap StateTensorsOver(const std::vector<autograd::Variable>& params) const;
  /// Restores such a state (a checkpoint's, or a plain optimizer's) into the per-bucket optimizers.
  /// InvalidArgument, changing nothing, when a name is malformed or its tensor does not fit.
  absl::Status LoadStateTensorsOver(const std::vector<autograd::Variable>& params, const nn::TensorMap& state);

 private:
  FusedOptimizer(DistributedDataParallel& ddp, Factory factory, Options options);
  // The callback: bucket `b`'s average has arrived (on the current stream): step its optimizer.
  absl::Status OnBucketReduced(int b);
  // One optimizer per bucket of the current layout, the state carried over by parameter identity.
  void Rebuild();

  DistributedDataParallel& ddp_;
  Factory factory_;
  const Options options_;
  std::vector<std::unique_ptr<nn::Optimizer>> per_bucket_;
  int64_t generation_ = -1;  // the reducer's layout_generation() per_bucket_ was built for
  double lr_ = -1;           // < 0: the factory's own
  Tensor device_lr_;         // defined: every optimizer reads its learning rate there
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ACCEL_FUSED_OPTIMIZER_FUSED_OPTIMIZER_H_
