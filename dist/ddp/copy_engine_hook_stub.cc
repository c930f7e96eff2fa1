// CopyEngineHook without CUDA (copy_engine_hook.h): no copy engines, so every bucket takes AllReduceHook.
#include "dist/ddp/copy_engine_hook.h"

namespace tinyddp::dist {

absl::StatusOr<std::shared_ptr<CopyEngineHook>> CopyEngineHook::Create(ProcessGroup& pg) {
  std::shared_ptr<CopyEngineHook> hook(new CopyEngineHook());
  hook->group_ = &pg;
  hook->off_reason_ = "this build has no CUDA";
  return hook;
}

CopyEngineHook::~CopyEngineHook() = default;

bool CopyEngineHook::Takes(const GradBucket&) const { return false; }

CommHook CopyEngineHook::AsCommHook() { return AllReduceHook(); }

CommFuture CopyEngineHook::Run(ProcessGroup& pg, GradBucket& bucket) { return AllReduceBucket(pg, bucket); }

absl::Status CopyEngineHook::RegisterBuckets(const std::vector<Tensor>&) { return absl::OkStatus(); }

int64_t CopyEngineHook::min_bytes() const { return 0; }
int64_t CopyEngineHook::calls() const { return 0; }
int64_t CopyEngineHook::direct_calls() const { return 0; }

}  // namespace tinyddp::dist
