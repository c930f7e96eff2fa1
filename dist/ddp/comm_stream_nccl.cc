// CollectiveStream for CUDA builds (dist/ddp/comm_stream.h).
#include "dist/ddp/comm_stream.h"

#include "dist/process_group/nccl/process_group_nccl.h"

namespace tinyddp::dist {

cuda::Stream CollectiveStream(ProcessGroup& pg) {
  if (auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg)) return nccl->nccl_stream();
  return cuda::Stream();
}

std::string BucketAllReducePath(ProcessGroup& pg) {
  auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg);
  if (nccl == nullptr) return pg.backend_name();
  if (nccl->copy_engine_on()) {
    return nccl->copy_engine_direct_calls() > 0 ? "copy engines, into registered buckets" : "copy engines";
  }
  return "nccl kernels (copy engines off: " + nccl->copy_engine_off_reason() + ")";
}

absl::Status RegisterBucketBuffers(ProcessGroup& pg, const std::vector<Tensor>& buffers) {
  if (auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg)) return nccl->RegisterBuffers(buffers);
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
