// tensor/cuda_graph.h with the CUDA runtime: begin capture, route allocations to a private pool, run the
// body, end capture, instantiate; replay is one cudaGraphLaunch.
#include <cuda_runtime.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "tensor/cuda_device.h"
#include "tensor/cuda_graph.h"
#include "tensor/internal/cuda_check.h"
#include "tensor/internal/cuda_context.h"

namespace tinyddp::cuda {
namespace {

absl::Status CudaError(const char* call, cudaError_t err) {
  cudaGetLastError();  // reported here; keep it from surfacing at an unrelated later check
  return absl::InternalError(absl::StrCat("CudaGraph: ", call, " failed: ", cudaGetErrorString(err), " (",
                                          cudaGetErrorName(err), "). Hint: ", internal::CudaErrorHint(err)));
}

cudaGraph_t AsGraph(void* g) { return static_cast<cudaGraph_t>(g); }
cudaGraphExec_t AsExec(void* e) { return static_cast<cudaGraphExec_t>(e); }

}  // namespace

CudaGraph::CudaGraph() = default;

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr || graph_ != nullptr) {
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess) {  // the runtime may already be gone at exit
      if (previous != stream_.device()) cudaSetDevice(stream_.device());
      // Replays in flight are not cut short: CUDA frees the executable graph once they complete.
      if (exec_ != nullptr) cudaGraphExecDestroy(AsExec(exec_));
      if (graph_ != nullptr) cudaGraphDestroy(AsGraph(graph_));
      if (previous != stream_.device()) cudaSetDevice(previous);
    }
  }
  // Later eager work on the capture stream comes after every replay already enqueued there, so the
  // private blocks may serve it.
  if (pool_ != nullptr) internal::ReleaseGraphPool(pool_);
}

absl::Status CudaGraph::Capture(const Stream& stream, const std::function<void()>& body) {
  if (captured()) return absl::FailedPreconditionError("CudaGraph::Capture: this graph was already captured");
  if (DeviceCount() == 0) {
    return absl::FailedPreconditionError("CudaGraph::Capture: no CUDA device is visible; a graph records GPU work");
  }
  if (stream.handle() == nullptr) {
    return absl::FailedPreconditionError(
        "CudaGraph::Capture: the legacy default stream cannot be captured; make a stream of your own current "
        "first (cuda::Stream::SetCurrent(cuda::Stream::Create(device)))");
  }
  if (stream.IsCapturing()) {
    return absl::FailedPreconditionError("CudaGraph::Capture: the stream is already recording a graph");
  }
  internal::DeviceGuard guard(stream.device());
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  if (cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); err != cudaSuccess) {
    return CudaError("cudaStreamBeginCapture", err);
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id));
  void* pool = internal::BeginGraphPool(stream.device(), id);

  body();

  internal::EndGraphPool(pool);
  cudaGraph_t graph = nullptr;
  if (cudaError_t err = cudaStreamEndCapture(s, &graph); err != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    internal::ReleaseGraphPool(pool);
    return CudaError("cudaStreamEndCapture", err);
  }
  cudaGraphExec_t exec = nullptr;
  // UseNodePriority: each kernel keeps the priority of the stream it was captured on (the reducer's
  // update stream is the most urgent); without it a replay runs every node at the launch stream's.
  if (cudaError_t err = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
      err != cudaSuccess) {
    cudaGraphDestroy(graph);
    internal::ReleaseGraphPool(pool);
    return CudaError("cudaGraphInstantiate", err);
  }
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  // Uploads the graph's launch data now, so the first replay costs what the others do.
  CUDA_CHECK(cudaGraphUpload(exec, s));
  stream_ = stream;
  graph_ = graph;
  exec_ = exec;
  pool_ = pool;
  num_nodes_ = static_cast<int64_t>(nodes);
  return absl::OkStatus();
}

absl::Status CudaGraph::Replay() {
  if (!captured()) return absl::FailedPreconditionError("CudaGraph::Replay: nothing was captured yet");
  internal::DeviceGuard guard(stream_.device());
  if (cudaError_t err = cudaGraphLaunch(AsExec(exec_), static_cast<cudaStream_t>(stream_.handle()));
      err != cudaSuccess) {
    return CudaError("cudaGraphLaunch", err);
  }
  return absl::OkStatus();
}

int64_t CudaGraph::pool_bytes() const { return pool_ != nullptr ? internal::GraphPoolBytes(pool_) : 0; }

absl::Status CudaGraph::WriteDot(const std::string& path) const {
  if (graph_ == nullptr) return absl::FailedPreconditionError("CudaGraph::WriteDot: nothing was captured yet");
  if (cudaError_t err = cudaGraphDebugDotPrint(AsGraph(graph_), path.c_str(), cudaGraphDebugDotFlagsVerbose);
      err != cudaSuccess) {
    return CudaError("cudaGraphDebugDotPrint", err);
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::cuda
