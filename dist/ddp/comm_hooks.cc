// The default communication hook (dist/ddp/comm_hooks.h).
#include "dist/ddp/comm_hooks.h"

#include <string>

namespace tinyddp::dist {

absl::Status CommFuture::Complete() {
  if (work == nullptr) return absl::OkStatus();
  // GPU: the current stream waits for the NCCL stream (no host blocking). CPU: the thread waits for Gloo.
  absl::Status status = work->SynchronizeStream();
  if (status.ok() && then) then();
  return status;
}

const char* CommHook::PathOf(const ProcessGroup& pg, const GradBucket& bucket) const {
  return path ? path(pg, bucket) : "comm hook";
}

const char* AllReducePath(const ProcessGroup& pg) {
  const std::string backend = pg.backend_name();
  if (backend == "nccl") return "NCCL all_reduce";
  if (backend == "gloo") return "Gloo all_reduce";
  return "all_reduce";
}

CommFuture AllReduceBucket(ProcessGroup& pg, GradBucket& bucket) {
  // kAvg: the sum over ranks divided by the world size, done by the backend (NCCL's ncclAvg folds the
  // division into the reduction kernel), so averaging costs no extra pass over the gradients.
  if (bucket.buffer.defined()) return CommFuture{pg.AllReduce(bucket.buffer, ReduceOp::kAvg), nullptr};
  return CommFuture{pg.AllReduceCoalesced(bucket.gradients, ReduceOp::kAvg), nullptr};
}

CommHook AllReduceHook() {
  return CommHook{AllReduceBucket, [](const ProcessGroup& pg, const GradBucket&) { return AllReducePath(pg); }};
}

}  // namespace tinyddp::dist
