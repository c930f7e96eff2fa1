// Exercise 8, a known WRONG solution, kept so that CI proves the check rejects it
// (:rejects_wrong_solution). It is GPipe's order: every forward, then every backward. The sends and
// receives all pair up, nothing deadlocks, and the gradients are exactly right; but stage s holds the
// activations of all m microbatches at once, where 1F1B holds p - s.
#include "tests/exercises/one_f_one_b/one_f_one_b.h"

#include "base/status_macros.h"

namespace tinyddp::exercises {

absl::Status RunOneFOneB(PipelineStage& stage) {
  const int m = stage.microbatches();
  for (int k = 0; k < m; ++k) {
    RETURN_IF_ERROR(stage.Communicate({stage.RecvActivation(k)}));
    RETURN_IF_ERROR(stage.Forward(k));
    RETURN_IF_ERROR(stage.Communicate({stage.SendActivation(k)}));
  }
  for (int k = 0; k < m; ++k) {
    RETURN_IF_ERROR(stage.Communicate({stage.RecvGradient(k)}));
    RETURN_IF_ERROR(stage.Backward(k));
    RETURN_IF_ERROR(stage.Communicate({stage.SendGradient(k)}));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::exercises
