// Exercise 8, a reference solution: Megatron-LM's forward_backward_pipelining_without_interleaving, on one
// stage.
#include "tests/exercises/one_f_one_b/one_f_one_b.h"

#include <algorithm>

#include "base/status_macros.h"

namespace tinyddp::exercises {

absl::Status RunOneFOneB(PipelineStage& stage) {
  const int p = stage.stages(), s = stage.stage(), m = stage.microbatches();
  const int warmup = std::min(p - 1 - s, m);
  // Warm-up: fill the pipeline below this stage. A later stage is receiving, so a lone send is safe.
  for (int k = 0; k < warmup; ++k) {
    RETURN_IF_ERROR(stage.Communicate({stage.RecvActivation(k)}));
    RETURN_IF_ERROR(stage.Forward(k));
    RETURN_IF_ERROR(stage.Communicate({stage.SendActivation(k)}));
  }
  // Steady: one forward, one backward. The next stage sends us a gradient while we send it an activation,
  // and the previous stage sends us an activation while we send it a gradient: each pair goes together.
  if (warmup < m) RETURN_IF_ERROR(stage.Communicate({stage.RecvActivation(warmup)}));
  for (int k = warmup, oldest = 0; k < m; ++k, ++oldest) {
    RETURN_IF_ERROR(stage.Forward(k));
    RETURN_IF_ERROR(stage.Communicate({stage.SendActivation(k), stage.RecvGradient(oldest)}));
    RETURN_IF_ERROR(stage.Backward(oldest));
    if (k + 1 < m) {
      RETURN_IF_ERROR(stage.Communicate({stage.SendGradient(oldest), stage.RecvActivation(k + 1)}));
    } else {
      RETURN_IF_ERROR(stage.Communicate({stage.SendGradient(oldest)}));
    }
  }
  // Cool-down: drain the backwards the warm-up left.
  for (int k = m - warmup; k < m; ++k) {
    RETURN_IF_ERROR(stage.Communicate({stage.RecvGradient(k)}));
    RETURN_IF_ERROR(stage.Backward(k));
    RETURN_IF_ERROR(stage.Communicate({stage.SendGradient(k)}));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::exercises
