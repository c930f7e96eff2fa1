// JoinHook (dist/parallel/join/join_hook.h): scale, count, then the inner hook.
#include "dist/parallel/join/join_hook.h"

#include <utility>

#include "base/check.h"
#include "tensor/ops.h"

namespace tinyddp::dist::join {

CommHook JoinHook(std::shared_ptr<JoinHookState> state, CommHook inner) {
  TINYDDP_CHECK_OP(state != nullptr, "JoinHook", "the state is null; hint: use Join::Hook()");
  if (!inner.run) inner = AllReduceHook();
  CommHook hook = inner;  // path, padded_numel and on_buckets_rebuilt are the inner hook's
  hook.run = [state, run = inner.run](ProcessGroup& pg, GradBucket& bucket) -> CommFuture {
    ++state->buckets_sent;
    if (state->scale != 1.0) {
      // The bucket's flat buffer holds the parameters' .grad (and zero padding, which stays zero); in the
      // coalesced layout the gradients are separate tensors.
      if (bucket.buffer.defined()) {
        ops::ScaleInPlace(bucket.buffer, state->scale);
      } else {
        for (Tensor& g : bucket.gradients) ops::ScaleInPlace(g, state->scale);
      }
    }
    return run(pg, bucket);
  };
  return hook;
}

}  // namespace tinyddp::dist::join
