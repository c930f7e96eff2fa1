// CudaGraph: the work one stream enqueues, recorded once and replayed with a single launch. The GPU half of
// "the whole training step as one CUDA graph" (dist/accel/graph/graphed_step.h builds the step on it).
//
// Why. A small training step is launch-bound: the GPU finishes each of its ~40 kernels faster than the host
// can enqueue the next (a few microseconds of CPU work per launch, in our code and in the driver). A CUDA
// graph is that sequence of kernels, copies and dependencies, recorded by stream capture
// (cudaStreamBeginCapture ... cudaStreamEndCapture) and instantiated once; cudaGraphLaunch then submits
// all of it in one call, and the GPU runs it back to back.
//
// What "recorded" means. Between begin and end nothing runs: every kernel, copy and event the capturing
// stream is given becomes a node of the graph, with its arguments (pointers included) frozen. Work on
// other streams joins the graph when such a stream waits on an event recorded on a capturing stream
// (DDP's NCCL stream does, for each bucket), and must be joined back the same way before the end. So the
// host code of the step runs once, at capture; a replay repeats only the GPU work it enqueued:
//   * every address stays the same: the inputs must be copied into the same buffers before each replay,
//     and the temporaries the step allocated come from a private pool of the caching allocator
//     (tensor/cuda_allocator.h) that eager code never receives, for as long as the graph lives;
//   * every scalar argument stays the same: a learning rate that changes must be read from device memory
//     by the kernel (nn/device_lr.h), not passed by value;
//   * nothing may wait for the GPU during capture (there is nothing to wait for): a host synchronisation
//     or a host read of a tensor inside the captured code stops the program with a message saying so.
// Capture mode: cudaStreamCaptureModeThreadLocal. Calls that cannot be recorded (a host wait, an event
// query, cudaFree) are errors on the capturing thread, where they would be mistakes in the step; other
// threads (the data loader's worker, the NCCL watchdog) carry on with their own streams undisturbed. The
// allocator switches to relaxed mode just around its cudaMalloc, whose memory then belongs to the graph.
//
// Thread-safety: one thread captures and replays. No CUDA include here; without CUDA, Capture returns
// FailedPrecondition.
#ifndef TINYDDP_TENSOR_CUDA_GRAPH_H_
#define TINYDDP_TENSOR_CUDA_GRAPH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "tensor/stream.h"

namespace tinyddp::cuda {

class CudaGraph {
 public:
  CudaGraph();
  /// Destroys the graph (replays still running finish; CUDA frees it afterwards) and gives its private
  /// memory back to the allocator's ordinary pools.
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  /// Records everything `body` enqueues on `stream` (and on streams it joins by event waits) into this
  /// graph and instantiates it; `body` runs once, on this thread, and nothing it enqueues executes now.
  /// Errors: FailedPrecondition when already captured, for the legacy default stream (make a stream of
  /// your own current: Stream::Create + SetCurrent), for a stream already capturing, or without a GPU;
  /// Internal with CUDA's error and a hint when the capture was invalidated or left a stream unjoined.
  /// Mistakes inside `body` (a host wait, Tensor::Item) stop the program with a message naming them.
  absl::Status Capture(const Stream& stream, const std::function<void()>& body);
  /// Launches the recorded work on the stream it was captured on, behind whatever is queued there; returns
  /// at once. FailedPrecondition before a successful Capture.
  absl::Status Replay();

  bool captured() const { return exec_ != nullptr; }
  /// Nodes of the graph (kernels, copies, memsets, dependencies' joins); 0 before Capture.
  int64_t num_nodes() const { return num_nodes_; }
  /// Device memory held by the graph's private pool (the temporaries of the captured code).
  int64_t pool_bytes() const;
  /// Writes the graph in Graphviz format (cudaGraphDebugDotPrint), a picture of one replayed step.
  absl::Status WriteDot(const std::string& path) const;

 private:
  Stream stream_;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  void* pool_ = nullptr;   // the allocator's private pool (cuda_context.h)
  int64_t num_nodes_ = 0;
};

}  // namespace tinyddp::cuda

#endif  // TINYDDP_TENSOR_CUDA_GRAPH_H_
