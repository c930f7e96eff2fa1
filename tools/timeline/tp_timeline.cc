// tp_timeline: the picture of real tensor-parallel steps (docs/images/tp_timeline.svg in
// docs/tensor_parallel.md). Two CPU ranks over Gloo form one tp group (--tp=2, no data parallelism) and train
// an MLP of two column -> row pairs through TensorParallelMlp with a Tracer attached
// (TensorParallelMlp::set_tracer); the timeline renderer (tools/timeline/timeline_svg.h) draws the last steps:
// per rank, each layer's forward and backward on the training thread, and on Gloo's thread each all_reduce,
// labelled with its layer: g after each row layer's forward, f before the second pair's column layer in
// backward (the first pair's input is the data: no f).
//
//   ./bazelw run -c opt //tools/timeline:tp_timeline --
//       --out=docs/images/tp_timeline.svg --trace=/tmp/tp_timeline.json
//
// Two pairs, so that both directions show: with one pair (ddp_mlp's default model) the only f would be the
// data's, which does not exist. It starts its own two ranks (dist/launch/spawn.h). The trace (--trace, by
// default beside the picture: FILE.json) opens in https://ui.perfetto.dev. Timings vary from run to run (2
// shared cores, 2 ranks, 2 Gloo threads, and whatever else the machine runs: draw it on a quiet one); what
// the picture is for does not: every sum waited for by the layer after it.
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
#include "dist/parallel/tensor/tensor_parallel_mlp.h"
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
  auto full = nn::MLP(dims, nn::MlpOptions{.seed = 1});
  // The whole world is the tp group: --tp=2 on 2 ranks, no data parallelism (no DDP around the model).
  ASSIGN_OR_RETURN(std::unique_ptr<dist::tensor_parallel::TensorParallelMlp> model,
                   dist::tensor_parallel::TensorParallelMlp::Create(*full, pg));
  if (rank == 0) std::printf("%s", model->Describe(batch).c_str());
  dist::Tracer tracer(rank, Device::CPU());
  tracer.set_enabled(false);  // the first steps warm up untraced
  model->set_tracer(&tracer);
  nn::SGD sgd(model->Parameters(), nn::SgdOptions{.lr = 0.01, .momentum = 0.9});
  // The tp ranks of a group see the same batch: the same seed on both.
  Tensor x = Tensor::Empty({batch, dims.front()}, DType::kFloat32, Device::CPU());
  ops::NormalInit(x, 0.0, 1.0, /*seed=*/100);
  std::vector<int64_t> label_values(batch);
  for (int64_t i = 0; i < batch; ++i) label_values[i] = (i * 7) % dims.back();
  const Tensor labels = Tensor::FromVector<int64_t>(label_values, {batch}, Device::CPU());

  constexpr int kWarmup = 3;
  for (int step = 0; step < kWarmup + steps; ++step) {
    tracer.set_enabled(step >= kWarmup);
    // Start each step together, so that one rank's late start does not draw as waiting in the other's.
    RETURN_IF_ERROR(pg->Barrier()->Wait());
    sgd.ZeroGrad();
    autograd::Variable loss;
    {
      dist::Tracer::Span forward = tracer.Scope("forward", step);  // the loop's phases, as ddp_mlp records them
      const autograd::Variable logits = model->Forward(autograd::Variable(x));
      // The loss as a part of forward too (tools/timeline/step_timeline.h, "Parts"): else it would draw as the
      // thread waiting, beside g's last all_reduce.
      dist::Tracer::Span part = tracer.Scope("forward loss");
      loss = autograd::CrossEntropy(logits, labels);
    }
    {
      dist::Tracer::Span backward = tracer.Scope("backward", step);
      autograd::Backward(loss);
    }
    RETURN_IF_ERROR(model->status());  // a tp all_reduce failed
    dist::Tracer::Span optimizer = tracer.Scope("optimizer", step);
    sgd.Step();
  }
  tracer.set_enabled(true);
  RETURN_IF_ERROR(tracer.WriteChromeTrace(pg.get(), trace_path));  // collective: rank 0 writes
  if (rank == 0) {
    dist::TraceSvgOptions svg;
    svg.svg_path = svg_path;
    svg.last_steps = 2;
    svg.bucket_bytes = model->AllReduceBytes(batch);  // arg i of an all_reduce is its layer: its bytes
    svg.title = "Tensor parallelism step timeline, --tp=2";
    svg.source = absl::StrCat("bazel run -c opt //tools/timeline:tp_timeline: MLP ", absl::StrJoin(dims, "-"),
                              ", batch ", batch, " on both ranks, SGD (trace: ", BaseName(trace_path), ")");
    svg.comm_unit = "layer";
    ASSIGN_OR_RETURN(const std::string written, dist::WriteTimelineSvg(trace_path, svg));
    std::printf("tp_timeline: %s (trace %s)\n", written.c_str(), trace_path.c_str());
  }
  model->set_tracer(nullptr);
  return pg->Barrier()->Wait();
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  return tinyddp::RunPictureJob(
      argc, argv, {.program = "tp_timeline", .out = "/tmp/tp_timeline.svg", .dims = "512,1024,1024,1024,1024", .batch = 256, .min_dims = 3},
      tinyddp::Draw);
}
