// Exercise 8 (docs/exercises.md): one rank's 1F1B order. A pipeline of p stages (one rank each) trains on
// m microbatches; the order in which a stage runs its forwards and backwards decides how many
// microbatches' activations it must hold. GPipe runs every forward, then every backward: m of them.
// 1F1B (PipeDream-Flush, Megatron-LM's default) starts backwards as soon as it can and holds at most p - s
// on stage s. Here you write that order for one stage, on PipelineStage (pipeline_stage.h), given.
// one_f_one_b.cc is yours to write; reference/ holds a solution, for after.
#ifndef TINYDDP_TESTS_EXERCISES_ONE_F_ONE_B_ONE_F_ONE_B_H_
#define TINYDDP_TESTS_EXERCISES_ONE_F_ONE_B_ONE_F_ONE_B_H_

#include "absl/status/status.h"
#include "tests/exercises/one_f_one_b/pipeline_stage.h"

namespace tinyddp::exercises {

/// Runs stage s = stage.stage() of p = stage.stages() on microbatches 0..m-1 (m = stage.microbatches()) in
/// 1F1B order, with the transfers around each step:
///   warm-up    the first min(p - 1 - s, m) forwards;
///   steady     then, while forwards remain, one forward and one backward (of the oldest microbatch
///              not yet backwarded): F(k), B(k - (p - 1 - s)), ...;
///   cool-down  the backwards that remain, in order.
/// Every forward but stage 0's needs its activation received first (RecvActivation), and every stage but
/// the last sends its output on (SendActivation); every backward but the last stage's needs its gradient
/// received first (RecvGradient), and every stage but the first sends d(input) back (SendGradient). Gloo's
/// sends wait for the receiver, so where a stage sends one thing and then must receive another from the
/// same neighbour that is itself sending, issue both in ONE stage.Communicate. Returns the first error.
absl::Status RunOneFOneB(PipelineStage& stage);

}  // namespace tinyddp::exercises

#endif  // TINYDDP_TESTS_EXERCISES_ONE_F_ONE_B_ONE_F_ONE_B_H_
