// CollectiveStream: the CUDA stream a process group runs its collectives on, or none. TracedCommHook
// (traced_comm_hook.h) records each bucket's begin event there. A seam with two implementations
// (flashlight-style): comm_stream_nccl.cc asks ProcessGroupNCCL, comm_stream_stub.cc (a build without
// CUDA) has no streams. Keeps NCCL out of the trace's dependencies.
#ifndef TINYDDP_DIST_DDP_COMM_STREAM_H_
#define TINYDDP_DIST_DDP_COMM_STREAM_H_

#include "dist/process_group/process_group.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

/// ProcessGroupNCCL's NCCL stream; a default-constructed Stream (handle() == nullptr) for other groups.
cuda::Stream CollectiveStream(ProcessGroup& pg);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_COMM_STREAM_H_
