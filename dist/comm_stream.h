// CollectiveStream: the CUDA stream a process group runs its collectives on, or none. The reducer records
// timing events there so the trace shows each bucket's all_reduce on the GPU. A seam with two
// implementations (flashlight-style): comm_stream_nccl.cc asks ProcessGroupNCCL, comm_stream_stub.cc (a
// build without CUDA) has no streams. Keeps NCCL out of the reducer's dependencies.
#ifndef TINYDDP_DIST_COMM_STREAM_H_
#define TINYDDP_DIST_COMM_STREAM_H_

#include <string>

#include "dist/process_group.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

/// ProcessGroupNCCL's NCCL stream; a default-constructed Stream (handle() == nullptr) for other groups.
cuda::Stream CollectiveStream(ProcessGroup& pg);

/// How the group all-reduces large float32 buckets, for benchmark output: "copy engines" when
/// ProcessGroupNCCL uses its copy-engine path, "nccl kernels (why)" when it does not, the backend's name
/// for other groups.
std::string BucketAllReducePath(ProcessGroup& pg);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_COMM_STREAM_H_
