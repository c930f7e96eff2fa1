// CommRecorder (dist/ladder/comm_recorder.h).
#include "dist/ladder/comm_recorder.h"

#include <chrono>

#include "dist/ddp/comm_hooks.h"

namespace tinyddp::dist::ladder {
namespace {

int64_t Microseconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

CommRecorder::CommRecorder(ProcessGroup& pg, Tracer* tracer)
    : pg_(pg), tracer_(tracer), comm_stream_(pg.collective_stream()) {}

std::shared_ptr<Work> CommRecorder::AllReduce(const Tensor& tensor, ReduceOp op, int index) {
  Tracer* tracer = Tracer::Active(tracer_);
  if (tracer == nullptr) return pg_.AllReduce(tensor, op);
  if (tracer->on_gpu() && comm_stream_.handle() != nullptr) {
    ready_.Record(cuda::Stream::Current(comm_stream_.device()));
    comm_stream_.Wait(ready_);
    const int slot = tracer->BeginGpu(comm_stream_);
    std::shared_ptr<Work> work = pg_.AllReduce(tensor, op);
    tracer->EndGpu(slot, comm_stream_, TraceTrack::kComm, "all_reduce", index, AllReducePath(pg_));
    return work;
  }
  std::shared_ptr<Work> work = pg_.AllReduce(tensor, op);
  pending_.emplace_back(index, work);
  return work;
}

void CommRecorder::Flush() {
  for (const auto& [index, work] : pending_) {
    std::chrono::steady_clock::time_point start, end;
    if (work->HostInterval(&start, &end)) {
      tracer_->AddHostEvent(TraceTrack::kComm, "all_reduce", Microseconds(start), Microseconds(end), index,
                            AllReducePath(pg_));
    }
  }
  pending_.clear();
}

}  // namespace tinyddp::dist::ladder
