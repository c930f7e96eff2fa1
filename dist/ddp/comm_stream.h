// What DDP asks of a process group beyond collectives: CollectiveStream, the CUDA stream the group runs
// its collectives on, or none (the reducer records timing events there so the trace shows each
// bucket's all_reduce on the GPU), and RegisterBucketBuffers (the reducer's flat buckets, for the
// copy engines). A seam with two implementations (flashlight-style): comm_stream_nccl.cc asks
// ProcessGroupNCCL, comm_stream_stub.cc (a build without CUDA) has no streams and nothing to register.
// Keeps NCCL out of the reducer's dependencies.
#ifndef TINYDDP_DIST_DDP_COMM_STREAM_H_
#define TINYDDP_DIST_DDP_COMM_STREAM_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

/// ProcessGroupNCCL's NCCL stream; a default-constructed Stream (handle() == nullptr) for other groups.
cuda::Stream CollectiveStream(ProcessGroup& pg);

/// How the group all-reduces large float32 buckets, for benchmark output: "copy engines" when
/// ProcessGroupNCCL uses its copy-engine path, "nccl kernels (why)" when it does not, the backend's name
/// for other groups.
std::string BucketAllReducePath(ProcessGroup& pg);

/// Collective: offers DDP's flat bucket buffers to the group for its fastest path (ProcessGroupNCCL::
/// RegisterBuffers: the copy engines then all-gather straight into the peer's bucket). OK and nothing
/// for other groups.
absl::Status RegisterBucketBuffers(ProcessGroup& pg, const std::vector<Tensor>& buffers);

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_DDP_COMM_STREAM_H_
