// TracedUpdate: an optimizer that records each Step as a tracer span labelled with its bucket, so a timeline
// draws every bucket's update as its own bar: "optimizer" when it runs after backward, "optimizer in
// backward" (kUpdateInBackward, step_timeline.h) when it runs inside it. On a GPU the span's GPU interval is
// timed on the stream the update runs on (the reducer's own stream inside backward), which is what shows
// whether the updates overlapped backward's kernels. Used by in_backward_timeline and ddp_step_bench --trace.
#ifndef TINYDDP_TOOLS_TIMELINE_TRACED_UPDATE_H_
#define TINYDDP_TOOLS_TIMELINE_TRACED_UPDATE_H_

#include <memory>
#include <utility>

#include "dist/observe/trace/trace.h"
#include "nn/optimizer.h"
#include "tools/timeline/step_timeline.h"

namespace tinyddp {

class TracedUpdate : public nn::Optimizer {
 public:
  TracedUpdate(std::unique_ptr<nn::Optimizer> inner, dist::Tracer* tracer, int bucket, bool in_backward)
      : nn::Optimizer(inner->params(), inner->lr(), "TracedUpdate"),
        inner_(std::move(inner)),
        tracer_(tracer),
        bucket_(bucket),
        name_(in_backward ? dist::kUpdateInBackward : "optimizer") {}
  void Step() override {
    dist::Tracer::Span span = tracer_->Scope(name_, bucket_);
    inner_->Step();
  }
  nn::TensorMap StateTensors() const override { return inner_->StateTensors(); }
  absl::Status LoadStateTensors(const nn::TensorMap& state) override { return inner_->LoadStateTensors(state); }

 private:
  std::unique_ptr<nn::Optimizer> inner_;
  dist::Tracer* tracer_;
  int bucket_;
  const char* name_;
};

}  // namespace tinyddp

#endif  // TINYDDP_TOOLS_TIMELINE_TRACED_UPDATE_H_
