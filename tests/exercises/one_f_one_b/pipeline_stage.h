// PipelineStage: one stage of the small pipeline of exercise 8 (docs/exercises.md), given, not yours to
// write. Rank s of a group of p ranks is stage s: a Linear(5 -> 5) layer. Microbatch k (3 rows) enters
// stage 0, flows forward through the stages (stage s sends its output, the activation, to stage s+1) to
// the last stage, whose loss is the mean squared error against a target; its gradient flows back (stage s
// sends d(its input) to stage s-1). Each layer's weight and bias gradients sum over the microbatches, so
// that after every microbatch's backward they equal the gradients of one process running the p layers on
// the whole batch (the check compares them).
//
// The order of a stage's work is the caller's (RunOneFOneB, one_f_one_b.h): Forward(k) and Backward(k)
// compute, and the transfers around them are point-to-point ops that the caller issues, together when
// they must (Communicate). The stage counts the microbatches whose activations it holds (forwarded, not
// yet backwarded): what a pipeline schedule is about.
#ifndef TINYDDP_TESTS_EXERCISES_ONE_F_ONE_B_PIPELINE_STAGE_H_
#define TINYDDP_TESTS_EXERCISES_ONE_F_ONE_B_PIPELINE_STAGE_H_

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "autograd/variable.h"
#include "dist/process_group/process_group.h"
#include "nn/linear.h"
#include "tensor/tensor.h"

namespace tinyddp::exercises {

class PipelineStage {
 public:
  static constexpr int64_t kWidth = 5;  // every layer is Linear(kWidth -> kWidth)
  static constexpr int64_t kRows = 3;   // rows of a microbatch

  /// Stage pg.rank() of pg.size(), for `microbatches` microbatches. The layers' parameters, the inputs
  /// and the targets are the same wherever they are built (ReferenceGradients rebuilds them).
  PipelineStage(dist::ProcessGroup& pg, int microbatches);

  int stage() const { return pg_.rank(); }
  int stages() const { return pg_.size(); }
  int microbatches() const { return microbatches_; }
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == stages() - 1; }

  /// Runs the layer on microbatch k (stage 0: its rows; other stages: the activation RecvActivation(k)
  /// received) and keeps what its backward needs; the last stage also computes k's loss. FailedPrecondition
  /// if the input has not arrived or k was forwarded already.
  absl::Status Forward(int k);
  /// Backpropagates microbatch k through the layer (the last stage from k's loss; the others from the
  /// gradient RecvGradient(k) received), adds to the layer's gradients, and frees k's activations.
  /// FailedPrecondition if k was not forwarded, or its gradient has not arrived.
  absl::Status Backward(int k);

  /// The point-to-point ops of one transfer of microbatch k on this stage, to issue with Communicate;
  /// empty where this stage has no such neighbour (stage 0 receives no activation and sends no gradient,
  /// the last stage sends no activation and receives no gradient). Each op's tag is k.
  std::vector<dist::P2POp> RecvActivation(int k);  // k's input, from stage - 1 (before Forward(k))
  std::vector<dist::P2POp> SendActivation(int k);  // Forward(k)'s output, to stage + 1
  std::vector<dist::P2POp> RecvGradient(int k);    // d(k's output), from stage + 1 (before Backward(k))
  std::vector<dist::P2POp> SendGradient(int k);    // d(k's input) from Backward(k), to stage - 1
  /// Issues the ops of all `transfers` as ONE pg.BatchSendRecv and waits for it (nothing if all are empty):
  /// Communicate({stage.SendActivation(3), stage.RecvGradient(1)}). Returns its error, or the misuse of an
  /// op above (sending what was not computed yet).
  absl::Status Communicate(std::initializer_list<std::vector<dist::P2POp>> transfers);

  // --- What the check reads. ---
  /// Microbatches forwarded and not yet backwarded: whose activations this stage holds now / at most so far.
  int live() const { return static_cast<int>(alive_.size()); }
  int peak_live() const { return peak_live_; }
  /// "F0", "F1", "B0", ...: the Forward and Backward calls that succeeded, in order.
  const std::vector<std::string>& actions() const { return actions_; }
  nn::Linear& layer() { return layer_; }

  /// Microbatch k's rows for stage 0 and its target for the last stage.
  static Tensor InputOf(int k);
  static Tensor TargetOf(int k);
  /// The gradients (weight [kWidth, kWidth] then bias [kWidth]) of every stage's layer from one process
  /// running all `stages` layers on all `microbatches` microbatches concatenated: what a pipeline must match.
  static std::vector<std::vector<Tensor>> ReferenceGradients(int stages, int microbatches);

 private:
  struct Alive {
    autograd::Variable input, output, loss;
  };
  dist::ProcessGroup& pg_;
  const int microbatches_;
  nn::Linear layer_;
  std::map<int, Tensor> inputs_, output_grads_;  // received: k's activation / d(k's output)
  std::map<int, Alive> alive_;                   // forwarded, not yet backwarded
  std::map<int, Tensor> outputs_, input_grads_;  // to send: k's output / d(k's input)
  absl::Status misuse_;
  int peak_live_ = 0;
  std::vector<std::string> actions_;
};

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_ONE_F_ONE_B_PIPELINE_STAGE_H_
