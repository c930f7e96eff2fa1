// StagePlan and PipelineStage: the MLP cut into stages of consecutive layers, a piece of the pipeline wing
// (dist/parallel/pipeline/, docs/pipeline_parallel.md). The plan is a pure function of the model's shape and
// the number of stages, so every rank derives the same one and rank 0 prints it; a PipelineStage is one
// stage's layers as an nn::Module, the very modules of the whole model (shared, not copied), so its
// parameters keep the whole model's names ("2.weight") and a checkpoint gathered from the stages is one
// process's.
//
// The balance: a Linear [N, in] -> [N, out] costs about in*out multiply-adds per row forward and twice that
// backward, and the activation after it is free next to that; the plan groups consecutive Linears (each with
// the activation after it) into S stages so that the most expensive stage is as cheap as possible (a small
// dynamic program over the cut points), because the slowest stage sets the pipeline's pace. Interleaved
// schedules give every stage the same number of Linears instead (the rule: the layer count must be
// a multiple of p*v), so that each rank's v stages are alike.
//
// A cut sits after an activation, never between a Linear and its ReLU: Sequential fuses those into one GEMM
// (Linear::ForwardRelu), and a stage does the same, so each stage computes exactly what the whole model
// computes for those layers, bit for bit.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_STAGE_PLAN_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_STAGE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/module.h"
#include "nn/sequential.h"

namespace tinyddp::dist::pipeline {

struct StageLayers {
  size_t first_child = 0, end_child = 0;  // the Sequential's children [first_child, end_child)
  int64_t in_features = 0, out_features = 0;
  int linears = 0;
  int64_t cost = 0;  // sum of in*out over its Linears
};

struct StagePlan {
  std::vector<StageLayers> stages;

  /// `stages` stages of `full` (an MLP as nn::MLP builds it: Linear layers, one elementwise activation between
  /// each two). `equal`: every stage the same number of Linears (interleaved). InvalidArgument, naming the
  /// flags and the fix, for a model that is not such an MLP, more stages than Linears, or (equal) a Linear
  /// count that is not a multiple of the stages.
  static absl::StatusOr<StagePlan> Make(const nn::Sequential& full, int stages, bool equal = false);
  /// A table for rank 0: each stage, its rank, its layers, widths and share of the cost.
  std::string Describe(int ranks) const;
};

/// One stage's layers, under the whole model's child names. Forward is Sequential's (a Linear followed by a
/// ReLU fused); the stage's parameters are those of the shared modules.
class PipelineStage : public nn::Module {
 public:
  /// The children [layers.first_child, layers.end_child) of `full`, shared.
  PipelineStage(const nn::Sequential& full, const StageLayers& layers);
  /// A stage computed by `inner` (a tensor-parallel split of StageSequential's layers, --pp with --tp), then
  /// `trailing` (the activation after the stage's last Linear; null when it ends in a Linear). The stage's
  /// parameters are inner's children's, under their own names.
  PipelineStage(std::shared_ptr<nn::Module> inner, std::shared_ptr<nn::Module> trailing, const StageLayers& layers);
  autograd::Variable Forward(const autograd::Variable& x) override;
  std::string ToString() const override;
  const StageLayers& layers() const { return layers_; }

 private:
  StageLayers layers_;
  std::shared_ptr<nn::Module> inner_, trailing_;  // only for a stage built around another module
};

/// The stage's layers as a Sequential under the whole model's child names ("2", "3", ...), without the
/// activation after its last Linear, which goes to *trailing (null when there is none): the MLP shape that
/// tensor parallelism's plan takes (dist/parallel/tensor/mlp_plan.h).
std::shared_ptr<nn::Sequential> StageSequential(const nn::Sequential& full, const StageLayers& layers,
                                                std::shared_ptr<nn::Module>* trailing);

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_STAGE_PLAN_H_
