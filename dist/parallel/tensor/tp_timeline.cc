// tp_timeline: the picture of real tensor-parallel steps (docs/images/tp_timeline.svg in
// docs/tensor_parallel.md). Two CPU ranks over Gloo form one tp group (--tp=2, no data parallelism) and train
// an MLP of two column -> row pairs through TensorParallelMlp with a Tracer attached
// (TensorParallelMlp::set_tracer); the timeline renderer (tools/timeline/timeline_svg.h) draws the last steps:
// per rank, each layer's forward and backward on the training thread, and on Gloo's thread each all_reduce,
// labelled with its layer: g after each row layer's forward, f before the second pair's column layer in
// backward (the first pair's input is the data: no f).
//
//   ./bazelw run -c opt //dist/parallel/tensor:tp_timeline --
//       --out=docs/images/tp_timeline.svg --trace=/tmp/tp_timeline.json
//
// Two pairs, so that both directions show: with one pair (ddp_mlp's default model) the only f would be the
// data's, which does not exist. It starts its own two ranks (dist/launch/spawn.h). The trace (--trace, by
// default beside the picture: FILE.json) opens in https://ui.perfetto.dev. Timings vary from run to run (2
// shared cores, 2 ranks, 2 Gloo threads, and whatever else the machine runs: draw it on a quiet one); what
// the picture is for does not: every sum waited for by the layer after it.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "base/command_line.h"
#include "base/status_macros.h"
#include "dist/init.h"
#include "dist/launch/spawn.h"
#include "dist/observe/trace/trace.h"
#include "dist/parallel/tensor/tensor_parallel_mlp.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tools/timeline/timeline_svg.h"

ABSL_FLAG(std::string, out, "/tmp/tp_timeline.svg", "where the SVG goes");
ABSL_FLAG(std::string, trace, "", "where the Chrome trace goes (default: beside --out, .json)");
ABSL_FLAG(std::string, dims, "512,1024,1024,1024,1024", "the MLP's layer sizes");
ABSL_FLAG(int64_t, batch, 256, "examples per step (the same batch on both tp ranks)");
ABSL_FLAG(int32_t, steps, 4, "steps traced, after 3 untraced ones (the picture shows the last 2)");

namespace tinyddp {
namespace {

// A path as the user typed it: under `bazel run` relative to where they typed it, not the runfiles.
std::string UserPath(const std::string& path) {
  const char* typed_in = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || typed_in == nullptr) return path;
  return absl::StrCat(typed_in, "/", path);
}

std::string TracePathFor(const std::string& svg) {
  const std::string stem = svg.size() > 4 && svg.substr(svg.size() - 4) == ".svg" ? svg.substr(0, svg.size() - 4) : svg;
  return stem + ".json";
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status Run(const std::vector<int64_t>& dims, int64_t batch, int steps, const std::string& svg_path,
                 const std::string& trace_path) {
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
    svg.source = absl::StrCat("bazel run -c opt //dist/parallel/tensor:tp_timeline: MLP ", absl::StrJoin(dims, "-"),
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
  const std::vector<tinyddp::FlagGroup> flags = {{"flags", {"out", "trace", "dims", "batch", "steps"}}};
  absl::StatusOr<tinyddp::CommandLine> command_line =
      tinyddp::ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!command_line.ok() || command_line->help || !command_line->rest.empty()) {
    if (!command_line.ok()) {
      std::fprintf(stderr, "tp_timeline: %s\n", std::string(command_line.status().message()).c_str());
    }
    std::fprintf(stderr, "usage: tp_timeline [--out=FILE.svg]\n\n%s", tinyddp::FlagsHelp(flags).c_str());
    return command_line.ok() && command_line->help ? 0 : 2;
  }
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_dims), ',')) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d <= 0) {
      std::fprintf(stderr, "tp_timeline: --dims must be positive integers, comma separated\n");
      return 2;
    }
    dims.push_back(d);
  }
  if (dims.size() < 3 || absl::GetFlag(FLAGS_batch) < 1 || absl::GetFlag(FLAGS_steps) < 2) {
    std::fprintf(stderr, "tp_timeline: needs at least one pair (3 --dims), --batch >= 1 and --steps >= 2\n");
    return 2;
  }
  tinyddp::dist::SpawnOptions spawn;
  spawn.nproc = 2;  // two CPU ranks, one tp group, whatever the machine has
  if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv, spawn); !s.ok()) {
    std::fprintf(stderr, "tp_timeline: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const std::string svg = tinyddp::UserPath(absl::GetFlag(FLAGS_out));
  const std::string trace =
      absl::GetFlag(FLAGS_trace).empty() ? tinyddp::TracePathFor(svg) : tinyddp::UserPath(absl::GetFlag(FLAGS_trace));
  const absl::Status s = tinyddp::Run(dims, absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_steps), svg, trace);
  if (!s.ok()) {
    std::fprintf(stderr, "tp_timeline: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
