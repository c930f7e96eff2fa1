// CopyEngineHook for CUDA builds (copy_engine_hook.h): the conditions, the setup beside the NCCL group, and
// the hook that sends each bucket one way or the other.
#include "dist/ddp/copy_engine_hook.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/nccl/copy_engine/copy_engine_all_reduce.h"
#include "dist/process_group/nccl/process_group_nccl.h"
#include "tensor/internal/check.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

absl::StatusOr<std::shared_ptr<CopyEngineHook>> CopyEngineHook::Create(ProcessGroup& pg) {
  std::shared_ptr<CopyEngineHook> hook(new CopyEngineHook());
  hook->group_ = &pg;
  // 1. An NCCL group of two ranks (every rank sees the same group).
  auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg);
  if (nccl == nullptr) {
    hook->off_reason_ = absl::StrCat("the group is ", pg.backend_name(), ", not nccl");
    return hook;
  }
  if (pg.size() != 2) {
    hook->off_reason_ = absl::StrCat("it joins exactly two ranks, and this group has ", pg.size());
    return hook;
  }
  // 3. The switch back to NCCL: a rank that sets it vetoes, and then both ranks stay with NCCL.
  CopyEngineOptions options;
  if (const char* v = std::getenv("TINYDDP_COPY_ENGINE_ALLREDUCE"); v != nullptr && std::string(v) == "0") {
    options.veto = "TINYDDP_COPY_ENGINE_ALLREDUCE=0";
  }
  // 4. The threshold (the module agrees on the larger of the two ranks' values).
  if (const char* v = std::getenv("TINYDDP_COPY_ENGINE_MIN_BYTES"); v != nullptr) {
    if (!absl::SimpleAtoi(v, &options.min_bytes) || options.min_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat("TINYDDP_COPY_ENGINE_MIN_BYTES='", v,
                                                     "' is not a byte count (e.g. 4194304); unset it for 4 MiB"));
    }
  }
  // 2. One host, peer access: the module checks both and tells the peer.
  std::string why_not;
  ASSIGN_OR_RETURN(std::unique_ptr<CopyEngineAllReduce> module,
                   CopyEngineAllReduce::Create(nccl->SubStore("copy_engine"), pg.rank(), nccl->device(),
                                               pg.timeout(), options, &why_not));
  if (module == nullptr) {
    hook->off_reason_ = why_not;
    return hook;
  }
  hook->module_ = std::move(module);
  hook->device_ = nccl->device();
  if (const char* debug = std::getenv("NCCL_DEBUG"); debug != nullptr && *debug != '\0') {
    std::fprintf(stderr,
                 "tinyddp rank %d: NCCL_DEBUG=%s: DDP buckets of float32 from %lld bytes are averaged by the copy "
                 "engines (ProcessGroupNCCL::AllReduceExternal), not by NCCL, so they do not appear in NCCL's log; "
                 "DDP's bucket table names each bucket's path. TINYDDP_COPY_ENGINE_ALLREDUCE=0 sends them to NCCL.\n",
                 pg.rank(), debug, static_cast<long long>(hook->module_->min_bytes()));
  }
  return hook;
}

CopyEngineHook::~CopyEngineHook() = default;

bool CopyEngineHook::Takes(const GradBucket& bucket) const {
  return module_ != nullptr && module_->Takes(bucket.dtype, bucket.numel, ReduceOp::kAvg) &&
         !cuda::Stream::Current(device_).IsCapturing();  // condition 5
}

CommHook CopyEngineHook::AsCommHook() {
  std::shared_ptr<CopyEngineHook> self = shared_from_this();
  CommHook hook;
  hook.run = [self](ProcessGroup& pg, GradBucket& bucket) { return self->Run(pg, bucket); };
  hook.path = [self](const ProcessGroup& pg, const GradBucket& bucket) {
    return self->Takes(bucket) ? CopyEngineAllReduce::kPathName : AllReducePath(pg);
  };
  return hook;
}

CommFuture CopyEngineHook::Run(ProcessGroup& pg, GradBucket& bucket) {
  if (!Takes(bucket)) return AllReduceBucket(pg, bucket);
  TINYDDP_CHECK_OP(&pg == group_, "CopyEngineHook", "called with another process group than it was made for");
  auto& nccl = static_cast<ProcessGroupNCCL&>(pg);  // on() implies Create saw an NCCL group
  if (bucket.buffer.defined()) {
    return CommFuture{nccl.AllReduceExternal(module_, absl::MakeConstSpan(&bucket.buffer, 1), ReduceOp::kAvg), nullptr};
  }
  return CommFuture{nccl.AllReduceExternal(module_, bucket.gradients, ReduceOp::kAvg), nullptr};
}

absl::Status CopyEngineHook::RegisterBuckets(const std::vector<Tensor>& buffers) {
  if (module_ == nullptr) return absl::OkStatus();
  return module_->Register(buffers);
}

int64_t CopyEngineHook::min_bytes() const { return module_ != nullptr ? module_->min_bytes() : 0; }
int64_t CopyEngineHook::calls() const { return module_ != nullptr ? module_->calls() : 0; }
int64_t CopyEngineHook::direct_calls() const { return module_ != nullptr ? module_->direct_calls() : 0; }

}  // namespace tinyddp::dist
