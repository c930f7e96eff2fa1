// CommRecorder: the ladder's all_reduces (naive_ddp.h, flat_ddp.h, bucketed_ddp.h) put on --trace's
// timeline the way the production DDP's TracedCommHook (dist/observe/trace/traced_comm_hook.h) puts its buckets
// there, so that the four rungs' pictures compare: one "all_reduce" interval per collective on the
// communication track, numbered in launch order, labelled with its path ("Gloo all_reduce").
//   GPU  timing events on the group's NCCL stream around the collective; the stream first waits for the
//        compute stream (as the group itself does before every collective), so the begin marks the moment
//        the data was ready, not the moment the host asked;
//   CPU  the interval Gloo's worker thread really ran it (Work::HostInterval), read once it has finished.
// Without a tracer, or while it is disabled, AllReduce is exactly pg.AllReduce and records nothing.
#ifndef TINYDDP_DIST_LADDER_COMM_RECORDER_H_
#define TINYDDP_DIST_LADDER_COMM_RECORDER_H_

#include <memory>
#include <utility>
#include <vector>

#include "dist/observe/trace/trace.h"
#include "dist/process_group/process_group.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::ladder {

class CommRecorder {
 public:
  /// `tracer` may be null (nothing is recorded); it is not owned and must outlive the recorder.
  CommRecorder(ProcessGroup& pg, Tracer* tracer);

  /// pg.AllReduce(tensor, op), recorded as all_reduce number `index` of this iteration.
  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op, int index);
  /// The tracer (null when none was given): the rungs record their "forward" span into it too.
  Tracer* tracer() const { return tracer_; }
  /// CPU: files the intervals of the all_reduces launched since the last call. Call once they have been
  /// waited for (at the end of FinishBackward). GPU: nothing to do (the events were recorded at launch).
  void Flush();

 private:
  ProcessGroup& pg_;
  Tracer* const tracer_;
  const cuda::Stream comm_stream_;  // the NCCL stream; none on CPU
  cuda::Event ready_;               // GPU: the compute stream's tail, for comm_stream_ to wait on
  std::vector<std::pair<int, std::shared_ptr<Work>>> pending_;  // CPU: launched, not yet filed
};

}  // namespace tinyddp::dist::ladder

#endif  // TINYDDP_DIST_LADDER_COMM_RECORDER_H_
