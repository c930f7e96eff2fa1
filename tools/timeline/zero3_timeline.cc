// zero3_timeline: the picture of a real ZeRO-3 step (docs/images/zero3_timeline.svg in docs/zero.md). Two
// CPU ranks over Gloo train an MLP through FullyShardedDataParallel with a Tracer attached
// (FullyShardedOptions::tracer), and the timeline renderer (tools/timeline/timeline_svg.h) draws the last
// step: per rank, each layer's forward and backward on the training thread, and on Gloo's thread each
// layer's all_gather (issued by the layer before it, so it runs while that layer computes) and its
// reduce_scatter (issued as soon as its gradient exists).
//
//   ./bazelw run -c opt //tools/timeline:zero3_timeline --
//       --out=docs/images/zero3_timeline.svg --trace=/tmp/zero3_timeline.json
//
// It starts its own two ranks (dist/launch/spawn.h). The trace (--trace, by default beside the picture:
// FILE.json) opens in https://ui.perfetto.dev. Timings vary from run to run (2 shared cores, 2 ranks, 2 Gloo
// threads, and whatever else the machine runs: draw it on a quiet one); what the picture is for does not:
// which collective runs beside which layer.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "base/status_macros.h"
#include "dist/init.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tools/timeline/picture_job.h"
#include "tools/timeline/timeline_svg.h"


namespace tinyddp {
namespace {

absl::Status Draw(const PictureJob& job) {
  const std::vector<int64_t>& dims = job.dims;
  const int64_t batch = job.batch;
  const int steps = job.steps;
  const std::string& svg_path = job.svg_path;
  const std::string& trace_path = job.trace_path;
  dist::InitOptions init;
  init.backend = dist::Backend::kGloo;  // the picture is of CPU ranks, on any machine
  ASSIGN_OR_RETURN(std::shared_ptr<dist::ProcessGroup> pg, dist::InitProcessGroup(init));
  const int rank = pg->rank();
  auto model = nn::MLP(dims, nn::MlpOptions{.seed = 1});
  dist::Tracer tracer(rank, Device::CPU());
  tracer.set_enabled(false);  // the first steps warm up untraced
  auto factory = [](std::vector<autograd::Variable> params) {
    return std::make_unique<nn::SGD>(std::move(params), nn::SgdOptions{.lr = 0.01, .momentum = 0.9});
  };
  ASSIGN_OR_RETURN(std::unique_ptr<dist::zero::FullyShardedDataParallel> fsdp,
                   dist::zero::FullyShardedDataParallel::Create(model, pg, factory, {.tracer = &tracer}));
  Tensor x = Tensor::Empty({batch, dims.front()}, DType::kFloat32, Device::CPU());
  ops::NormalInit(x, 0.0, 1.0, /*seed=*/100 + rank);
  std::vector<int64_t> label_values(batch);
  for (int64_t i = 0; i < batch; ++i) label_values[i] = (i * 7 + rank) % dims.back();
  const Tensor labels = Tensor::FromVector<int64_t>(label_values, {batch}, Device::CPU());

  constexpr int kWarmup = 3;
  for (int step = 0; step < kWarmup + steps; ++step) {
    tracer.set_enabled(step >= kWarmup);
    // Start each step together, so that one rank's late start does not draw as waiting in the other's.
    RETURN_IF_ERROR(pg->Barrier()->Wait());
    autograd::Variable loss;
    {
      dist::Tracer::Span forward = tracer.Scope("forward", step);  // the loop's phases, as ddp_mlp records them
      loss = autograd::CrossEntropy(fsdp->Forward(autograd::Variable(x)), labels);
    }
    {
      dist::Tracer::Span backward = tracer.Scope("backward", step);  // the step runs at its end, inside it
      autograd::Backward(loss);
    }
    RETURN_IF_ERROR(fsdp->status());
  }
  tracer.set_enabled(true);
  RETURN_IF_ERROR(tracer.WriteChromeTrace(pg.get(), trace_path));  // collective: rank 0 writes
  if (rank == 0) {
    dist::TraceSvgOptions svg;
    svg.svg_path = svg_path;
    svg.last_steps = 1;  // one step across the whole width: two would halve the short all-gathers' bars
    svg.bucket_bytes = fsdp->UnitBytes();  // arg i of a collective is the layer: its bytes, whole
    svg.title = "ZeRO-3 step timeline";
    svg.source = absl::StrCat("bazel run -c opt //tools/timeline:zero3_timeline: MLP ", absl::StrJoin(dims, "-"),
                              ", batch ", batch, " per rank, SGD (trace: ", BaseName(trace_path), ")");
    svg.comm_unit = "layer";
    ASSIGN_OR_RETURN(const std::string written, dist::WriteTimelineSvg(trace_path, svg));
    std::printf("zero3_timeline: %s (trace %s)\n", written.c_str(), trace_path.c_str());
  }
  return pg->Barrier()->Wait();
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  return tinyddp::RunPictureJob(
      argc, argv, {.program = "zero3_timeline", .out = "/tmp/zero3_timeline.svg", .dims = "512,1024,1024,1024", .batch = 256, .min_dims = 3},
      tinyddp::Draw);
}
