// CollectiveStream for CUDA builds (dist/ddp/comm_stream.h).
#include "dist/ddp/comm_stream.h"

#include "dist/process_group/nccl/process_group_nccl.h"

namespace tinyddp::dist {

cuda::Stream CollectiveStream(ProcessGroup& pg) {
  if (auto* nccl = dynamic_cast<ProcessGroupNCCL*>(&pg)) return nccl->nccl_stream();
  return cuda::Stream();
}

}  // namespace tinyddp::dist
