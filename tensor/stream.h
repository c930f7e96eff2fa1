// CUDA streams and events as small RAII types, and the per-device "current stream".
//
// Compute kernels launch on the current stream of their device. NCCL runs on its own stream; the two are
// ordered by events (Event::Record on one stream, Stream::Wait(event) on the other), never by
// device-wide synchronisation. The handles are opaque here (cudaStream_t / cudaEvent_t inside), so this
// header needs no CUDA include; without CUDA every call but the constructors stops with a message.
#ifndef TINYDDP_TENSOR_STREAM_H_
#define TINYDDP_TENSOR_STREAM_H_

#include <memory>

namespace tinyddp::cuda {

class Event;

/// A CUDA stream on one device. Copyable handle; the owning copy destroys the stream.
class Stream {
 public:
  /// A new non-blocking stream on `device` (priority: lower is more urgent, as in CUDA; 0 = default).
  static Stream Create(int device, int priority = 0);
  /// The current stream of `device` for this process (the legacy default stream until SetCurrent).
  static Stream Current(int device);
  /// Makes `stream` the current stream of its device (returns the previous one).
  static Stream SetCurrent(const Stream& stream);

  Stream() = default;
  /// cudaStream_t, as void*.
  void* handle() const { return handle_ ? handle_->raw : nullptr; }
  int device() const { return device_; }
  /// Makes all future work on this stream wait until `event` has completed (cudaStreamWaitEvent).
  void Wait(const Event& event) const;
  /// Blocks the host until the stream is idle. Tests, checkpoints and teardown only. Stops with a message
  /// naming the mistake when the stream is recording a CUDA graph (tensor/cuda_graph.h): a captured step
  /// must only enqueue work, and there is nothing to wait for until the graph is replayed.
  void Synchronize() const;
  /// True while the stream is recording a CUDA graph (cudaStreamIsCapturing): between CudaGraph::Capture's
  /// begin and end, or when another stream's capture has been joined to it by an event wait. Work enqueued
  /// on it now is recorded, not run. False without CUDA.
  bool IsCapturing() const;

 private:
  struct Handle {
    void* raw = nullptr;
    bool owned = false;
    int device = 0;  // where `raw` lives, so the destructor can make it current
    ~Handle();
  };
  std::shared_ptr<Handle> handle_;
  int device_ = 0;
};

/// A CUDA event. Timing events (enable_timing) support ElapsedMs; others are lighter, for ordering.
class Event {
 public:
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Records the event at the current tail of `stream`.
  void Record(const Stream& stream);
  /// True once all work captured by the last Record has completed (does not block).
  bool Query() const;
  /// Blocks the host until the recorded work completes.
  void Synchronize() const;
  /// Milliseconds between two recorded timing events (both must have completed).
  static float ElapsedMs(const Event& start, const Event& end);
  void* handle() const { return raw_; }

 private:
  // Created lazily by the first Record, on the recorded stream's device: an Event can be declared on a
  // machine without a GPU, and CUDA events belong to one device.
  void* raw_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

}  // namespace tinyddp::cuda

#endif  // TINYDDP_TENSOR_STREAM_H_
