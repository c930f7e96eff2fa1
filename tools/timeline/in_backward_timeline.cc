// in_backward_timeline: the picture of the optimizer inside backward (docs/images/in_backward_timeline_*.svg in
// docs/ddp.md). Two CPU ranks over Gloo train an MLP through DDP with one optimizer per bucket
// (dist/accel/fused_optimizer), once stepping each bucket after backward and once inside it
// (FusedOptimizerOptions::in_backward, `--optimizer_in_backward`), each run traced and drawn by the timeline
// renderer (tools/timeline/timeline_svg.h): per rank, forward and backward on the training thread, each
// bucket's update as an orange "opt" bar (its bucket on hover), and on Gloo's thread each bucket's
// all_reduce. After backward, the updates sit in backward's tail, after the last all_reduce; inside it, each
// starts at the first gradient hook after its bucket's all_reduce landed, under the rest of backward.
//
//   ./bazelw run -c opt //tools/timeline:in_backward_timeline -- --out=docs/images/in_backward_timeline.svg
//
// writes FILE_after.svg and FILE_inside.svg (and their traces, FILE_after.json, FILE_inside.json). It starts
// its own two ranks (dist/launch/spawn.h). Timings vary from run to run (2 shared cores, 2 ranks, 2 Gloo
// threads); what the picture is for does not: where each bucket's update starts.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "base/status_macros.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/ddp/ddp.h"
#include "dist/init.h"
#include "dist/observe/trace/trace.h"
#include "dist/observe/trace/traced_comm_hook.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tools/timeline/picture_job.h"
#include "tools/timeline/step_timeline.h"
#include "tools/timeline/timeline_svg.h"

namespace tinyddp {
namespace {

// An optimizer that records its Step as a span labelled with its bucket, "optimizer" after backward and
// "optimizer in backward" inside it (the renderer then knows backward computed on after it,
// step_timeline.h): what draws each bucket's update as its own bar. Everything else is the wrapped one's.
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

// One traced run: a fresh model, DDP and fused optimizer, 3 untraced steps and `job.steps` traced ones, drawn
// into `svg_path` (trace beside it). Collective.
absl::Status TraceOneRun(const PictureJob& job, const std::shared_ptr<dist::ProcessGroup>& pg, bool in_backward,
                         const std::string& svg_path) {
  const int rank = pg->rank();
  auto model = nn::MLP(job.dims, nn::MlpOptions{.seed = 1});
  dist::Tracer tracer(rank, Device::CPU());
  tracer.set_enabled(false);  // the first steps warm up untraced
  dist::DdpOptions options;
  options.first_bucket_bytes = int64_t{1} << 20;
  options.bucket_cap_bytes = int64_t{2} << 20;  // below a 1024 x 1024 layer: one layer per bucket
  options.comm_hook = dist::TracedCommHook(dist::AllReduceHook(), &tracer);
  ASSIGN_OR_RETURN(std::unique_ptr<dist::DistributedDataParallel> ddp,
                   dist::DistributedDataParallel::Create(*model, pg, options));
  dist::DistributedDataParallel* ddp_ptr = ddp.get();
  auto factory = [&tracer, ddp_ptr, in_backward](std::vector<autograd::Variable> params)
      -> std::unique_ptr<nn::Optimizer> {
    int bucket = 0;  // which bucket these parameters are: the label of the update's bar
    while (bucket + 1 < ddp_ptr->reducer().num_buckets() &&
           !ddp_ptr->reducer().BucketParameters(bucket).front().Is(params.front())) {
      ++bucket;
    }
    auto sgd = std::make_unique<nn::SGD>(std::move(params), nn::SgdOptions{.lr = 0.01, .momentum = 0.9});
    return std::make_unique<TracedUpdate>(std::move(sgd), &tracer, bucket, in_backward);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<dist::FusedOptimizer> fused,
                   dist::FusedOptimizer::Attach(*ddp, factory, {.in_backward = in_backward}));
  const std::vector<int64_t>& dims = job.dims;
  Tensor x = Tensor::Empty({job.batch, dims.front()}, DType::kFloat32, Device::CPU());
  ops::NormalInit(x, 0.0, 1.0, /*seed=*/100 + rank);
  std::vector<int64_t> label_values(job.batch);
  for (int64_t i = 0; i < job.batch; ++i) label_values[i] = (i * 7 + rank) % dims.back();
  const Tensor labels = Tensor::FromVector<int64_t>(label_values, {job.batch}, Device::CPU());

  constexpr int kWarmup = 3;
  for (int step = 0; step < kWarmup + job.steps; ++step) {
    tracer.set_enabled(step >= kWarmup);
    RETURN_IF_ERROR(pg->Barrier()->Wait());  // each step starts together on both ranks
    model->ZeroGrad(/*set_to_none=*/true);
    autograd::Variable loss;
    {
      dist::Tracer::Span forward = tracer.Scope("forward", step);
      loss = autograd::CrossEntropy(ddp->Forward(autograd::Variable(x)), labels);
    }
    {
      dist::Tracer::Span backward = tracer.Scope("backward", step);  // the updates run inside it
      autograd::Backward(loss);
    }
    RETURN_IF_ERROR(ddp->status());
  }
  tracer.set_enabled(true);
  const std::string trace_path = svg_path.substr(0, svg_path.rfind(".svg")) + ".json";
  RETURN_IF_ERROR(tracer.WriteChromeTrace(pg.get(), trace_path));  // collective: rank 0 writes
  if (rank == 0) {
    dist::TraceSvgOptions svg;
    svg.svg_path = svg_path;
    svg.last_steps = 1;
    for (int b = 0; b < ddp->reducer().num_buckets(); ++b) svg.bucket_bytes.push_back(ddp->reducer().BucketBytes(b));
    svg.title = in_backward ? "DDP step, optimizer inside backward (--optimizer_in_backward)"
                            : "DDP step, optimizer after backward (fused, bucket by bucket)";
    svg.source = absl::StrCat("bazel run -c opt //tools/timeline:in_backward_timeline: MLP ", absl::StrJoin(dims, "-"),
                              ", batch ", job.batch, " per rank, SGD momentum, 2 Gloo ranks (trace: ",
                              BaseName(trace_path), ")");
    ASSIGN_OR_RETURN(const std::string written, dist::WriteTimelineSvg(trace_path, svg));
    std::printf("in_backward_timeline: %s (trace %s)\n", written.c_str(), trace_path.c_str());
  }
  return pg->Barrier()->Wait();
}

absl::Status Draw(const PictureJob& job) {
  dist::InitOptions init;
  init.backend = dist::Backend::kGloo;  // the picture is of CPU ranks, on any machine
  ASSIGN_OR_RETURN(std::shared_ptr<dist::ProcessGroup> pg, dist::InitProcessGroup(init));
  const std::string stem = job.svg_path.substr(0, job.svg_path.rfind(".svg"));
  RETURN_IF_ERROR(TraceOneRun(job, pg, /*in_backward=*/false, stem + "_after.svg"));
  return TraceOneRun(job, pg, /*in_backward=*/true, stem + "_inside.svg");
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  return tinyddp::RunPictureJob(argc, argv,
                                {.program = "in_backward_timeline",
                                 .out = "/tmp/in_backward_timeline.svg",
                                 .dims = "1024,1024,1024,1024,1024,1024,10",
                                 .batch = 512,
                                 .min_dims = 3},
                                tinyddp::Draw);
}
