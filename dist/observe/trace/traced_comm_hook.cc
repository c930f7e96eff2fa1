// TracedCommHook (traced_comm_hook.h): the wrapped hook between two timing events (GPU), or between the
// backend's own timestamps (CPU).
#include "dist/observe/trace/traced_comm_hook.h"

#include <chrono>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

int64_t Microseconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

class TracedHook {
 public:
  TracedHook(CommHook inner, Tracer* tracer) : inner_(std::move(inner)), tracer_(tracer) {}

  CommFuture Run(ProcessGroup& pg, GradBucket& bucket) {
    Tracer* tracer = Tracer::Active(tracer_);
    if (tracer == nullptr) return inner_.run(pg, bucket);
    const char* path = inner_.PathOf(pg, bucket);
    if (tracer->on_gpu()) {
      const cuda::Stream comm_stream = pg.collective_stream();  // none for a group on host threads
      if (comm_stream.handle() != nullptr) return RunOnGpu(*tracer, pg, bucket, path, comm_stream);
    }
    return RunOnHost(pg, bucket, path);
  }

 private:
  // One bucket's host-side record, kept until the end of backward (CommFuture::then).
  struct HostRecord {
    int64_t launch_us = 0;
    const char* path = nullptr;
    Work* work = nullptr;            // alive until its future has completed, which runs Finish
    std::function<void()> then;      // the wrapped hook's own `then`
  };

  CommFuture RunOnGpu(Tracer& tracer, ProcessGroup& pg, GradBucket& bucket, const char* path,
                      const cuda::Stream& comm_stream) {
    const int device = comm_stream.device();
    // Order the comm stream after the gradients first, so that the begin event marks when the all_reduce
    // can really start (the group adds the same wait before its collective; a second one is free).
    fence_.Record(cuda::Stream::Current(device));
    comm_stream.Wait(fence_);
    const int slot = tracer.BeginGpu(comm_stream);
    CommFuture future = inner_.run(pg, bucket);
    if (slot < 0 || future.work == nullptr) return future;
    // The interval closes where the collective really ends, which need not be the comm stream (the copy
    // engines end on a stream of their own): a side stream waits for the Work, the closing event goes there.
    if (side_.handle() == nullptr) side_ = cuda::Stream::Create(device);
    const cuda::Stream previous = cuda::Stream::SetCurrent(side_);
    const absl::Status waited = future.work->SynchronizeStream();
    cuda::Stream::SetCurrent(previous);
    tracer.EndGpu(slot, waited.ok() ? side_ : comm_stream, TraceTrack::kComm, "all_reduce", bucket.index, path);
    return future;
  }

  CommFuture RunOnHost(ProcessGroup& pg, GradBucket& bucket, const char* path) {
    if (host_.size() <= static_cast<size_t>(bucket.index)) host_.resize(bucket.index + 1);
    HostRecord& record = host_[bucket.index];
    record.launch_us = Tracer::NowUs();
    record.path = path;
    CommFuture future = inner_.run(pg, bucket);
    record.work = future.work.get();
    record.then = std::move(future.then);
    // Captures a pointer and an int: stored inside the std::function, no allocation per bucket.
    TracedHook* self = this;
    const int index = bucket.index;
    future.then = [self, index] { self->FinishOnHost(index); };
    return future;
  }

  void FinishOnHost(int index) {
    HostRecord& record = host_[index];
    // Gloo's worker thread stamps when it really ran the collective; without that (another backend), the
    // interval from the launch to now is the best the training thread knows.
    int64_t start_us = record.launch_us, end_us = Tracer::NowUs();
    std::chrono::steady_clock::time_point start, end;
    if (record.work != nullptr && record.work->HostInterval(&start, &end)) {
      start_us = Microseconds(start);
      end_us = Microseconds(end);
    }
    if (Tracer* tracer = Tracer::Active(tracer_)) {
      tracer->AddHostEvent(TraceTrack::kComm, "all_reduce", start_us, end_us, index, record.path);
    }
    record.work = nullptr;
    if (record.then) {
      std::function<void()> then = std::move(record.then);
      record.then = nullptr;
      then();
    }
  }

  const CommHook inner_;
  Tracer* const tracer_;
  cuda::Stream side_;
  cuda::Event fence_;
  std::vector<HostRecord> host_;
};

}  // namespace

CommHook TracedCommHook(CommHook inner, Tracer* tracer) {
  if (!inner.run) inner = AllReduceHook();
  CommHook hook = inner;  // the path, on_buckets_rebuilt and the rest pass through unchanged
  auto traced = std::make_shared<TracedHook>(std::move(inner), tracer);
  hook.run = [traced](ProcessGroup& pg, GradBucket& bucket) { return traced->Run(pg, bucket); };
  return hook;
}

}  // namespace tinyddp::dist
