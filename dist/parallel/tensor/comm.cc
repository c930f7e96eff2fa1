// TensorParallelComm (dist/parallel/tensor/comm.h).
#include "dist/parallel/tensor/comm.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tinyddp::dist::tensor_parallel {
namespace {

int64_t Microseconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

TensorParallelComm::TensorParallelComm(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {
  TINYDDP_CHECK_OP(group_ != nullptr, "TensorParallelComm", "the tp group is null");
}

void TensorParallelComm::AllReduceSum(Tensor& t, const LayerLabel& layer, const char* what, const char* trace_name) {
  if (!status_.ok()) return;  // the group already failed: this sum would fail too, after the timeout
  Tracer* const traced = tracer();
  const cuda::Stream comm = traced != nullptr && traced->on_gpu() ? group_->collective_stream() : cuda::Stream();
  std::shared_ptr<Work> work;
  if (comm.handle() == nullptr) {
    work = group_->AllReduce(t, ReduceOp::kSum);  // untraced, or a group of host threads (below)
  } else {
    // On a GPU: bracketed by timing events on the group's stream, which first waits for the compute stream
    // (the group adds the same wait before its collective; a second one is free), so that the begin event
    // marks when the all_reduce can really start.
    if (fence_ == nullptr) fence_ = std::make_unique<cuda::Event>();
    fence_->Record(cuda::Stream::Current(comm.device()));
    comm.Wait(*fence_);
    const int slot = traced->BeginGpu(comm);
    work = group_->AllReduce(t, ReduceOp::kSum);
    traced->EndGpu(slot, comm, TraceTrack::kComm, trace_name, layer.index);
  }
  const absl::Status s = work->SynchronizeStream();
  std::chrono::steady_clock::time_point start, end;
  if (traced != nullptr && work->HostInterval(&start, &end)) {  // Gloo: when its thread ran the all_reduce
    traced->AddHostEvent(TraceTrack::kComm, trace_name, Microseconds(start), Microseconds(end), layer.index);
  }
  if (!s.ok()) {
    status_ = absl::Status(s.code(), absl::StrCat("tensor parallel: the all_reduce of ", layer.name, "'s ", what,
                                                  " over the tp group (", group_->size(),
                                                  " ranks) failed; the tp "
                                                  "ranks' results differ from here on, stop training: ",
                                                  s.message()));
  }
}

bool TensorParallelComm::OpenBackwardPart(int64_t index) {
  backward_part_.reset();  // the layer before it in backward ends here, if its marker did not end it
  Tracer* const traced = tracer();
  if (traced != nullptr) backward_part_.emplace(traced->Scope("backward layer", index));
  const bool first = !in_backward_;
  in_backward_ = true;
  return first;
}

void TensorParallelComm::EndBackward() {
  backward_part_.reset();
  in_backward_ = false;
}

}  // namespace tinyddp::dist::tensor_parallel
