// ShardedStageOptimizer: ZeRO-1 for a pipeline stage (ddp_mlp --pp=P --zero=1), a piece of the pipeline wing. The
// ranks holding the same stage in different replicas (a column of the dp x pp mesh) each keep 1/D of that stage's
// optimizer state, as ZeRO-1 does for a whole model (dist/parallel/zero/zero_optimizer.h, which rides on DDP's
// buckets; a pipeline has no DDP, so this is the same idea on one flat buffer per stage):
//
//   step    after the pipeline's last backward: the stage's gradients copied into one flat buffer, padded to D
//           blocks, reduce-scattered (AVG) over the column: rank d receives the average of block d only;
//           rank d steps block d (one optimizer over one flat parameter, so its state exists for block d only);
//           the parameters, views into one flat buffer, are all-gathered in place: every rank again holds every
//           new weight of its stage.
//   bytes   reduce-scatter + all-gather = one ring all_reduce, as plain data parallelism sends.
//
// The optimizers here are elementwise (SGD with momentum and weight decay, AdamW), so stepping a block of the flat
// buffer gives each element the bits the whole optimizer gives it, and the padding stays zero. With two replicas
// the reduce-scatter's sums are the all_reduce's (a + b, then the division), so --zero=1 trains to the bits of
// --zero=0 (tested); with more, the sums follow Gloo's ring order, as ZeRO's do (docs/exactness.md).
//
// Checkpoints stay one process's: ConsolidatedStateTensors all-gathers the blocks' state into the per-parameter
// state an optimizer over the stage's Parameters() would hold; LoadConsolidatedStateTensors cuts such a state.
// Precision: under bf16 the compute copies are cast again from the gathered parameters. Not thread-safe.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_SHARDED_STAGE_OPTIMIZER_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_SHARDED_STAGE_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/process_group/process_group.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "nn/tensor_map.h"

namespace tinyddp::dist::pipeline {

class ShardedStageOptimizer {
 public:
  using Factory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<autograd::Variable>)>;

  /// Not collective. Makes `stage`'s parameters views into one flat buffer (their values kept) and builds
  /// this rank's block's optimizer with `factory`. `data`: the replicas holding the same stage (D ranks).
  static absl::StatusOr<std::unique_ptr<ShardedStageOptimizer>> Create(nn::Module& stage,
                                                                       std::shared_ptr<ProcessGroup> data,
                                                                       const Factory& factory);

  /// Collective over `data`: reduce-scatter the gradients (AVG), step this rank's block, all-gather the
  /// parameters. Precondition: every parameter of the stage has a gradient (a pipeline step ran).
  absl::Status Step();
  void SetLr(double lr) { block_optimizer_->set_lr(lr); }
  /// Bytes of this rank's optimizer state (tensors of more than one element).
  int64_t StateBytes() const;

  /// Collective over `data`: the state an optimizer over the stage's Parameters() would hold ("state.<i>.<field>").
  absl::StatusOr<nn::TensorMap> ConsolidatedStateTensors();
  /// Not collective: this rank's block of `state` (in the stage's Parameters() numbering). InvalidArgument for a
  /// tensor not of its parameter's shape.
  absl::Status LoadConsolidatedStateTensors(const nn::TensorMap& state);

 private:
  ShardedStageOptimizer(nn::Module& stage, std::shared_ptr<ProcessGroup> data) : stage_(stage), data_(std::move(data)) {}

  nn::Module& stage_;
  std::shared_ptr<ProcessGroup> data_;
  std::vector<autograd::Variable> params_;  // the stage's, in Parameters() order
  std::vector<int64_t> offsets_;            // each one's place in the flat buffers
  int64_t block_ = 0;                       // elements per rank; D blocks cover the parameters and padding
  Tensor flat_params_, flat_grads_, block_grad_;
  autograd::Variable block_param_;          // this rank's block of flat_params_, the one parameter it steps
  std::unique_ptr<nn::Optimizer> block_optimizer_;
};

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_SHARDED_STAGE_OPTIMIZER_H_
