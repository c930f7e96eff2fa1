// PipelineRuntime: runs one rank's row of a PipelineSchedule (schedule.h) for one training step, a piece of
// the pipeline wing (dist/parallel/pipeline/, docs/pipeline_parallel.md). It sits between the schedule (what
// to do, in which order) and the process group's point-to-point calls (ProcessGroup::BatchSendRecv) and
// autograd (Backward with a seed).
//
// One step, as seen from stage s on microbatch k:
//   F k   input: stage 0 the microbatch's rows; else the activation stage s-1 sent, wrapped in a new leaf that
//         requires grad (so backward stops here and leaves the input's gradient in its .grad). The stage's
//         layers run on it; the last stage also computes the loss. The input leaf, the output and the loss
//         are held until B k: these are the activations a schedule keeps alive.
//   B k   the last stage: Backward(loss, share of the batch), exactly as one process accumulating microbatches
//         seeds it; the others: Backward(output, the gradient stage s+1 sent). The weight gradients add into
//         .grad (the first B of a step writes them, ZeroGrad having cleared them); the input leaf's .grad is
//         what SEND_B sends upstream. Then the microbatch's activations are released.
//   W k   zb only: B k ran under autograd::WeightGradDeferral (input gradients only); W k adds the weight
//         gradients it left into .grad, in microbatch order, with the same GEMMs: the same bits.
//   the communication between two computes is one BatchSendRecv; the runtime waits for it only in front of
//   the compute that reads what it receives, and for the rest at the end of the step (schedule.h says why
//   one call, and why this cannot deadlock).
//
// After Step the stages' parameters hold the step's gradients summed over the microbatches, each weighted by
// its share of the batch, summed in microbatch order: what one process accumulating the same microbatches
// holds, bit for bit (schedule.h, "Why every schedule..."). The caller then averages them over data-parallel
// replicas if any, and steps its optimizer.
//
// Measuring: each compute action's host interval (steady clock, Tracer::NowUs) is recorded, for the idle
// fractions and the picture (bubble.h); on a GPU these are the times the kernels were enqueued, not run (the
// bubble table is measured with Gloo ranks). Devices: the stages' (CPU with Gloo, a GPU with NCCL). Not
// thread-safe: the training thread.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_RUNTIME_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/pipeline/schedule.h"
#include "dist/parallel/pipeline/stage_plan.h"
#include "dist/process_group/process_group.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::pipeline {

/// One microbatch: consecutive rows of the batch, and its share of the batch's examples (rows / batch rows).
struct Microbatch {
  Tensor inputs, labels;
  double share = 1;
};

/// The batch cut into `m` microbatches of consecutive rows (views, no copy), as equal as possible (the first
/// rows % m ones one row longer). InvalidArgument when the batch has fewer than m rows.
absl::StatusOr<std::vector<Microbatch>> SplitBatch(const Tensor& inputs, const Tensor& labels, int m);

using LossFn = std::function<autograd::Variable(const autograd::Variable& logits, const Tensor& labels)>;

/// One compute action as it ran on this rank (host steady clock, microseconds).
struct ComputeRecord {
  Action action;
  int64_t start_us = 0, end_us = 0;
};

/// What one Step did on this rank.
struct StepRecord {
  std::vector<ComputeRecord> computes;  // in the order they ran
  int peak_in_flight = 0;     // the most microbatches whose activations were held at once
  int64_t peak_bytes = 0;     // the allocator's most live tensor bytes during the step, above its start
};

class PipelineRuntime {
 public:
  /// `stages[c]`: this rank's chunk c, the schedule's stage c*p + rank (one stage unless interleaved).
  /// `group`: the pipeline's ranks, its rank r the schedule's rank r; null only when p == 1. InvalidArgument
  /// for a group whose size or stage count does not match the schedule, or a schedule that fails its check.
  static absl::StatusOr<std::unique_ptr<PipelineRuntime>> Create(PipelineSchedule schedule,
                                                                 std::shared_ptr<ProcessGroup> group,
                                                                 std::vector<std::shared_ptr<PipelineStage>> stages,
                                                                 LossFn loss);

  /// Forward and backward of every microbatch in the schedule's order; the gradients accumulate into the
  /// stages' parameters (clear them before, step after). Every pipeline rank calls it with the same batch
  /// (only stage 0 reads the inputs, only the last stage the labels). Returns the step's loss (the
  /// shares' weighted sum of the microbatches' losses) on the rank holding the last stage, an undefined
  /// tensor on the others. The group's error when a transfer fails (a peer died, or timed out).
  absl::StatusOr<Tensor> Step(const std::vector<Microbatch>& microbatches);

  const PipelineSchedule& schedule() const { return schedule_; }
  int rank() const { return rank_; }
  bool holds_last_stage() const { return rank_ == schedule_.RankOfStage(schedule_.num_stages() - 1); }
  const std::vector<std::shared_ptr<PipelineStage>>& stages() const { return stages_; }
  const StepRecord& last_step() const { return last_; }
  /// What flows between stages: float32, or bfloat16 under bf16 mixed precision.
  DType activation_dtype() const { return activation_dtype_; }
  /// Records each compute action as a span on `tracer` ("F"/"B"/"W", arg = microbatch + 1000 x chunk); null: off.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 private:
  PipelineRuntime(PipelineSchedule schedule, std::shared_ptr<ProcessGroup> group,
                  std::vector<std::shared_ptr<PipelineStage>> stages, LossFn loss, int rank);
  // The shape and dtype of the tensor a communication action carries for `rows` rows.
  Tensor MessageBuffer(const Action& action, int64_t rows, Device device) const;

  PipelineSchedule schedule_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::shared_ptr<PipelineStage>> stages_;
  LossFn loss_;
  int rank_ = 0;
  DType activation_dtype_ = DType::kFloat32;
  Tracer* tracer_ = nullptr;
  StepRecord last_;
};

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_RUNTIME_H_
