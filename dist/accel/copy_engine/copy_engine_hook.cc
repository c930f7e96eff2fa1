// CopyEngineHook (copy_engine_hook.h): the conditions, the setup beside the group, and the hook that sends
// each bucket one way or the other. The copy engines exist in CUDA builds only (TINYDDP_HAVE_COPY_ENGINES,
// set by the BUILD file); the section at the end is the one place where a build without CUDA differs.
#include "dist/accel/copy_engine/copy_engine_hook.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "tensor/stream.h"

#ifdef TINYDDP_HAVE_COPY_ENGINES
#include "dist/accel/copy_engine/copy_engine_all_reduce.h"
#endif

namespace tinyddp::dist {

absl::StatusOr<std::shared_ptr<CopyEngineHook>> CopyEngineHook::Create(ProcessGroup& pg) {
  std::shared_ptr<CopyEngineHook> hook(new CopyEngineHook());
  hook->group_ = &pg;
  // 1. A group on GPUs, of two ranks (every rank sees the same group).
  if (pg.device_index() < 0) {
    hook->off_reason_ = absl::StrCat("the group is ", pg.backend_name(), ", whose collectives run on host threads");
    return hook;
  }
  if (pg.size() != 2) {
    hook->off_reason_ = absl::StrCat("it joins exactly two ranks, and this group has ", pg.size());
    return hook;
  }
  // 0, 2-4: the copy engines themselves, where the build has them.
  RETURN_IF_ERROR(hook->SetUp(pg));
  if (hook->on()) {
    if (const char* debug = std::getenv("NCCL_DEBUG"); debug != nullptr && *debug != '\0') {
      std::fprintf(stderr,
                   "tinyddp rank %d: NCCL_DEBUG=%s: DDP buckets of float32 from %lld bytes are averaged by the copy "
                   "engines (ProcessGroup::AllReduceExternal), not by NCCL, so they do not appear in NCCL's log; "
                   "DDP's bucket table names each bucket's path. TINYDDP_COPY_ENGINE_ALLREDUCE=0 sends them to "
                   "NCCL.\n",
                   pg.rank(), debug, static_cast<long long>(hook->min_bytes()));
    }
  }
  return hook;
}

CopyEngineHook::~CopyEngineHook() = default;

CommHook CopyEngineHook::AsCommHook() {
  std::shared_ptr<CopyEngineHook> self = shared_from_this();
  CommHook hook;
  hook.run = [self](ProcessGroup& pg, GradBucket& bucket) { return self->Run(pg, bucket); };
  hook.path = [self](const ProcessGroup& pg, const GradBucket& bucket) {
    return self->Takes(bucket) ? "copy engines" /* CopyEngineAllReduce::kPathName */ : AllReducePath(pg);
  };
  hook.on_buckets_rebuilt = [self](const std::vector<Tensor>& buffers) {
    const absl::Status registered = self->RegisterBuckets(buffers);
    if (registered.ok()) return registered;
    return absl::Status(registered.code(), absl::StrCat("registering the bucket buffers with the copy engines: ",
                                                        registered.message()));
  };
  return hook;
}

std::string CopyEngineHook::Describe() const {
  if (!on()) return absl::StrCat("copy engines: off (", off_reason_, ")\n");
  std::string out = absl::StrFormat(
      "copy engines: on for float32 buckets from %d bytes (TINYDDP_COPY_ENGINE_ALLREDUCE=0 turns them off)\n",
      min_bytes());
  if (const char* debug = std::getenv("NCCL_DEBUG"); debug != nullptr && *debug != '\0') {
    absl::StrAppend(&out, "note: NCCL_DEBUG=", debug, " logs NCCL's calls only; the buckets on the copy engines "
                    "do not appear in NCCL's log\n");
  }
  return out;
}

// --- The copy engines (CUDA builds) ---------------------------------------------------------------------
#ifdef TINYDDP_HAVE_COPY_ENGINES

absl::Status CopyEngineHook::SetUp(ProcessGroup& pg) {
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
  std::shared_ptr<Store> store = pg.SubStore("copy_engine");
  if (store == nullptr) {
    off_reason_ = absl::StrCat("the ", pg.backend_name(), " group keeps no store to set them up through");
    return absl::OkStatus();
  }
  // 2. One host, peer access: the module checks both and tells the peer.
  ASSIGN_OR_RETURN(std::unique_ptr<CopyEngineAllReduce> module,
                   CopyEngineAllReduce::Create(std::move(store), pg.rank(), pg.device_index(), pg.timeout(), options,
                                               &off_reason_));
  module_ = std::move(module);
  device_ = pg.device_index();
  // Beside the group: its other calls wait for the copy engines' last end, and an abort lets their waits go.
  if (module_ != nullptr) pg.AddObserver(module_);
  return absl::OkStatus();
}

bool CopyEngineHook::Takes(const GradBucket& bucket) const {
  return module_ != nullptr && module_->Takes(bucket.dtype, bucket.numel, ReduceOp::kAvg) &&
         !cuda::Stream::Current(device_).IsCapturing();  // condition 5
}

CommFuture CopyEngineHook::Run(ProcessGroup& pg, GradBucket& bucket) {
  if (!Takes(bucket)) return AllReduceBucket(pg, bucket);
  TINYDDP_CHECK_OP(&pg == group_, "CopyEngineHook", "called with another process group than it was made for");
  const absl::Span<const Tensor> tensors =
      bucket.buffer.defined() ? absl::MakeConstSpan(&bucket.buffer, 1) : absl::MakeConstSpan(bucket.gradients);
  return CommFuture{pg.AllReduceExternal(module_, tensors, ReduceOp::kAvg), nullptr};
}

absl::Status CopyEngineHook::RegisterBuckets(const std::vector<Tensor>& buffers) {
  if (module_ == nullptr) return absl::OkStatus();
  return module_->Register(buffers);
}

int64_t CopyEngineHook::min_bytes() const { return module_ != nullptr ? module_->min_bytes() : 0; }
int64_t CopyEngineHook::calls() const { return module_ != nullptr ? module_->calls() : 0; }
int64_t CopyEngineHook::direct_calls() const { return module_ != nullptr ? module_->direct_calls() : 0; }

#else  // 0. A build without CUDA has no copy engines: module_ stays null, and every bucket takes AllReduceHook.

absl::Status CopyEngineHook::SetUp(ProcessGroup&) {
  off_reason_ = "this build has no CUDA";
  return absl::OkStatus();
}
bool CopyEngineHook::Takes(const GradBucket&) const { return false; }
CommFuture CopyEngineHook::Run(ProcessGroup& pg, GradBucket& bucket) { return AllReduceBucket(pg, bucket); }
absl::Status CopyEngineHook::RegisterBuckets(const std::vector<Tensor>&) { return absl::OkStatus(); }
int64_t CopyEngineHook::min_bytes() const { return 0; }
int64_t CopyEngineHook::calls() const { return 0; }
int64_t CopyEngineHook::direct_calls() const { return 0; }

#endif  // TINYDDP_HAVE_COPY_ENGINES

}  // namespace tinyddp::dist
