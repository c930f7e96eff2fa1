// ShadowBackward (dist/parallel/join/shadow_step.h): a DDP step whose gradients are exactly zero.
#include "dist/parallel/join/shadow_step.h"

#include "absl/strings/str_cat.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "nn/module.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::join {

absl::Status ShadowBackward(DistributedDataParallel& ddp, const autograd::Variable& placeholder_input) {
  // DDP's Forward ends the process on an earlier failure; a status reaches the training loop instead.
  if (absl::Status failed = ddp.status(); !failed.ok()) return failed;
  if (!ddp.sync_enabled()) {
    return absl::FailedPreconditionError(
        "Join: Shadow was called inside DistributedDataParallel::NoSync(). Join does not support gradient "
        "accumulation: a backward under NoSync communicates nothing, so the ranks would no longer issue the "
        "same collectives. hint: call Shadow (and train) outside NoSync, one synchronised backward per step");
  }
  if (!autograd::GradModeEnabled()) {
    return absl::FailedPreconditionError(
        "Join: Shadow was called with grad mode off (inside a NoGradGuard): DDP arms no backward then. hint: "
        "call Shadow where the training step runs, outside any NoGradGuard");
  }
  ddp.module().ZeroGrad();
  const autograd::Variable out = ddp.Forward(placeholder_input);
  // The seed is d(objective)/d(out): all zeros, so every parameter's gradient is exactly 0.
  autograd::Backward(out, Tensor::Zeros(out.shape(), out.dtype(), out.device()));
  if (absl::Status s = ddp.status(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("Join: the shadow step on rank ", ddp.process_group().rank(),
                                               " failed: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::join
