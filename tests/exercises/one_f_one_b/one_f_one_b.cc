// Exercise 8: write RunOneFOneB (one_f_one_b.h) here, then run
//   ./bazelw test //tests/exercises/one_f_one_b:check --test_output=all
// Hints: warm-up = std::min(p - 1 - s, m). A warm-up step is Communicate({RecvActivation(k)}), Forward(k),
// Communicate({SendActivation(k)}). In the steady phase, after Forward(k) the stage sends k on and needs
// the gradient of the oldest live microbatch from the same neighbour, who is sending that gradient: one
// Communicate({SendActivation(k), RecvGradient(j)}). After Backward(j) it sends the gradient back and
// needs the next forward's activation from the previous stage: Communicate({SendGradient(j),
// RecvActivation(k + 1)}) (no RecvActivation after the last forward). Every call returns a Status: check it.
#include "tests/exercises/one_f_one_b/one_f_one_b.h"

namespace tinyddp::exercises {

absl::Status RunOneFOneB(PipelineStage& stage) {
  (void)stage;
  return absl::UnimplementedError(
      "exercise 8 is not solved yet: write RunOneFOneB in tests/exercises/one_f_one_b/one_f_one_b.cc");
}

}  // namespace tinyddp::exercises
