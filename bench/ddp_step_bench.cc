// ddp_step_bench: the time of one training step of an MLP, with DistributedDataParallel or without, timed
// the way bench/reference/torch_ddp_step.py times PyTorch so the two compare line by line.
//
//   bazel run -c opt //bench:ddp_step_bench -- --dims=784,512,512,10 --batch=64           # DDP, one rank per GPU
//   bazel run -c opt //bench:ddp_step_bench -- --dims=784,512,512,10 --batch=64 --no_ddp  # 1 GPU, no DDP
//   flags: --dims=D0,D1,...  --batch=B (per rank)  --nproc=N  --no_ddp  --steps=100  --warmup=20
//          --trace=FILE.json (Chrome trace of --trace_steps=5 extra steps, and its picture FILE.svg)
//          --bucket_cap_mb=25  --first_bucket_mb=1
//          --bucket_view=true|false (DdpOptions::gradient_as_bucket_view; default true, as in DDP: gradients
//          are views into the flat buckets, written there by the GEMMs; false: coalesced lists)
//          --hook=allreduce|bf16  --backend=auto|nccl|gloo
//          --fused_optimizer=true|false (DDP only, default true: one SGD per bucket stepped inside backward as
//          each bucket's average arrives, DistributedDataParallel::RegisterFusedOptimizer)
//          --precision=fp32|bf16 (bf16: bfloat16 compute copies and activations, float32 master weights,
//          gradients, momentum and loss; nn/precision.h, docs/mixed_precision.md)
//          --cuda_graph (the whole step - zero_grad, forward, backward with DDP's all_reduces, optimizer -
//          recorded into one CUDA graph after the warm-up and replayed: dist/ddp/graphed_step.h; where that
//          is not possible the step runs eagerly and the reason is printed)  --cuda_graph_dot=FILE (the
//          recorded graph in Graphviz format)
//
// The step is PyTorch's: zero_grad(set_to_none) ; loss = cross_entropy(model(x), y) ; backward ; SGD
// (lr 0.01, momentum 0.9) step. Inputs are made on the device once (different on each rank), so only the
// step is measured. Each rank is started by SpawnWorkersIfNeeded (one per GPU, or 2 Gloo ranks without one).
// After --warmup steps:
//   step_ms_median_synced  median over --steps of one step timed with CUDA events on the compute stream,
//                          the host waiting for each step to finish before starting the next;
//   step_ms_burst          --steps steps back to back without waiting, total / steps (the host runs ahead,
//                          as in a real training loop).
// On CPU (Gloo) the host clock replaces the events. Every output line says which mode ran: "mode=cuda_graph"
// (each step one replay) or "mode=eager", and the JSON row carries "mode" with the reason when eager. Rank 0 prints DDP's bucket table after the warm-up (the
// buckets as measured, after the one-time rebuild: index, bytes, parameters, and the path each takes,
// "NCCL all_reduce" or "copy engines"), then a readable line and one JSON line.
// Without DDP (--no_ddp) the two halves of the step are also timed alone, each as a burst of --steps:
//   fwd_bwd_ms_burst    zero_grad + forward + loss + backward: the GEMMs and what surrounds them. gemm_tflops
//                       is the layers' GEMM work (forward, dW, dX but the first layer's) over that time, so a
//                       lower bound on what the GEMMs achieve;
//   optimizer_ms_burst  the SGD step alone; optimizer_gbps is its compulsory traffic (float32 p, g, momentum
//                       read, p and momentum written: 20 bytes per parameter, +2 for the bf16 copy) over it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "base/status_macros.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/graphed_step.h"
#include "dist/init.h"
#include "dist/ddp/reducer.h"
#include "dist/launch/spawn.h"
#include "dist/ddp/timeline/timeline_svg.h"
#include "dist/ddp/trace.h"
#include "nlohmann/json.hpp"
#include "nn/mlp.h"
#include "nn/precision.h"
#include "nn/sgd.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp {
namespace {

struct Options {
  std::vector<int64_t> dims = {784, 512, 512, 10};
  int64_t batch = 64;
  int nproc = 0;  // 0: one per GPU, or 2 CPU ranks
  bool no_ddp = false;
  int steps = 100;
  int warmup = 20;
  std::string trace;
  int trace_steps = 5;
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  bool bucket_view = true;
  bool bf16_hook = false;
  bool fused_optimizer = true;
  nn::Precision precision = nn::Precision::kFloat32;
  dist::Backend backend = dist::Backend::kAuto;
  bool cuda_graph = false;
  std::string cuda_graph_dot;
};

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::vector<std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const bool has = kv.size() == 2;
    const std::string& v = has ? kv[1] : kv[0];
    if (kv[0] == "--dims" && has) {
      o.dims.clear();
      for (absl::string_view d : absl::StrSplit(v, ',')) {
        int64_t x;
        if (!absl::SimpleAtoi(d, &x) || x <= 0) return absl::InvalidArgumentError("bad --dims " + v);
        o.dims.push_back(x);
      }
      if (o.dims.size() < 2) return absl::InvalidArgumentError("--dims needs at least input and output sizes");
    } else if (kv[0] == "--batch" && has && absl::SimpleAtoi(v, &o.batch) && o.batch > 0) {
    } else if (kv[0] == "--nproc" && has && absl::SimpleAtoi(v, &o.nproc) && o.nproc > 0) {
    } else if (kv[0] == "--steps" && has && absl::SimpleAtoi(v, &o.steps) && o.steps > 0) {
    } else if (kv[0] == "--warmup" && has && absl::SimpleAtoi(v, &o.warmup) && o.warmup >= 0) {
    } else if (kv[0] == "--trace_steps" && has && absl::SimpleAtoi(v, &o.trace_steps) && o.trace_steps > 0) {
    } else if (kv[0] == "--bucket_cap_mb" && has && absl::SimpleAtod(v, &o.bucket_cap_mb) && o.bucket_cap_mb > 0) {
    } else if (kv[0] == "--first_bucket_mb" && has && absl::SimpleAtod(v, &o.first_bucket_mb) &&
               o.first_bucket_mb > 0) {
    } else if (kv[0] == "--trace" && has && !v.empty()) {
      o.trace = v;
    } else if (kv[0] == "--no_ddp" && !has) {
      o.no_ddp = true;
    } else if (kv[0] == "--bucket_view" && (!has || v == "true" || v == "false")) {
      o.bucket_view = !has || v == "true";
    } else if (kv[0] == "--fused_optimizer" && (!has || v == "true" || v == "false")) {
      o.fused_optimizer = !has || v == "true";
    } else if (kv[0] == "--hook" && has && (v == "allreduce" || v == "bf16")) {
      o.bf16_hook = v == "bf16";
    } else if (kv[0] == "--cuda_graph" && (!has || v == "true" || v == "false")) {
      o.cuda_graph = !has || v == "true";
    } else if (kv[0] == "--cuda_graph_dot" && has && !v.empty()) {
      o.cuda_graph_dot = v;
    } else if (kv[0] == "--precision" && has) {
      ASSIGN_OR_RETURN(o.precision, nn::ParsePrecision(v));
    } else if (kv[0] == "--backend" && has) {
      absl::StatusOr<dist::Backend> b = dist::ParseBackend(v);
      RETURN_IF_ERROR(b);
      o.backend = *b;
    } else {
      return absl::InvalidArgumentError("unknown or malformed flag " + arg +
                                        " (see the header of bench/ddp_step_bench.cc)");
    }
  }
  return o;
}

// Times a region on the compute stream (CUDA events) or with the host clock (CPU).
class StepTimer {
 public:
  explicit StepTimer(Device device) : device_(device) {}
  void Start() {
    if (device_.is_cuda()) {
      start_.Record(cuda::Stream::Current(device_.index));
    } else {
      t0_ = std::chrono::steady_clock::now();
    }
  }
  // Waits for the region to finish and returns its milliseconds.
  double StopMs() {
    if (!device_.is_cuda()) {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    }
    stop_.Record(cuda::Stream::Current(device_.index));
    stop_.Synchronize();
    return cuda::Event::ElapsedMs(start_, stop_);
  }

 private:
  Device device_;
  cuda::Event start_{/*enable_timing=*/true}, stop_{/*enable_timing=*/true};
  std::chrono::steady_clock::time_point t0_;
};

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "ddp_step_bench: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return 1;
}

int Run(const Options& o) {
  // --- The group (DDP) or a single device (--no_ddp). ---
  std::shared_ptr<dist::ProcessGroup> pg;
  Device device = cuda::DeviceCount() > 0 ? Device::CUDA(0) : Device::CPU();
  if (!o.no_ddp) {
    dist::InitOptions init;
    init.backend = o.backend;
    absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg_or = dist::InitProcessGroup(init);
    if (!pg_or.ok()) return Fail("init", pg_or.status());
    pg = *pg_or;
    device = std::string(pg->backend_name()) == "nccl" ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();
  }
  const int rank = pg ? pg->rank() : 0;
  const int world = pg ? pg->size() : 1;
  if (device.is_cuda()) {
    // A stream of our own for compute: non-blocking, so it never serialises with the legacy default stream.
    cuda::Stream::SetCurrent(cuda::Stream::Create(device.index));
  }

  // --- Model, optimizer, data: all on the device before the clock starts. ---
  nn::MlpOptions mo;
  mo.device = device;
  mo.seed = 0;
  mo.precision = o.precision;
  std::shared_ptr<nn::Sequential> model = nn::MLP(o.dims, mo);
  std::unique_ptr<dist::Tracer> tracer;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  dist::DdpOptions ddp_options;
  ddp_options.bucket_cap_bytes = static_cast<int64_t>(o.bucket_cap_mb * dist::kMiB);
  ddp_options.first_bucket_bytes = static_cast<int64_t>(o.first_bucket_mb * dist::kMiB);
  ddp_options.gradient_as_bucket_view = o.bucket_view;
  if (o.bf16_hook) ddp_options.comm_hook = dist::Bf16CompressHook();
  if (!o.trace.empty()) {
    tracer = std::make_unique<dist::Tracer>(rank, device);
    ddp_options.tracer = tracer.get();
  }
  if (pg) {
    absl::StatusOr<std::unique_ptr<dist::DistributedDataParallel>> ddp_or =
        dist::DistributedDataParallel::Create(*model, pg, ddp_options);
    if (!ddp_or.ok()) return Fail("DistributedDataParallel", ddp_or.status());
    ddp = std::move(*ddp_or);
  }
  nn::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  nn::SGD optimizer(model->Parameters(), so);
  optimizer.SetComputeCopies(model->ComputeCopies());  // bf16: the step writes them; fp32: there are none
  const bool fused = ddp && o.fused_optimizer;
  if (fused) {
    ddp->RegisterFusedOptimizer([so, model](std::vector<autograd::Variable> params) {
      auto sgd = std::make_unique<nn::SGD>(std::move(params), so);
      sgd->SetComputeCopies(model->ComputeCopies());  // this bucket's parameters' copies
      return sgd;
    });
  }
  Tensor x = Tensor::Empty({o.batch, o.dims.front()}, DType::kFloat32, device);
  ops::NormalInit(x, 0.0, 1.0, /*seed=*/1234 + rank);
  std::vector<int64_t> labels(o.batch);
  for (int64_t i = 0; i < o.batch; ++i) labels[i] = (i * 7 + rank * 3) % o.dims.back();
  const Tensor y = Tensor::FromVector<int64_t>(labels, {o.batch}, device);
  const autograd::Variable input(x);

  dist::Tracer* trace = nullptr;  // set only for the traced steps at the end
  int64_t step_number = 0;
  auto forward_backward = [&]() -> Tensor {
    optimizer.ZeroGrad(/*set_to_none=*/true);
    autograd::Variable logits;
    if (ddp) {
      logits = ddp->Forward(input);  // DDP records its own "forward" span
    } else {
      dist::Tracer::Span f = dist::Tracer::MaybeScope(trace, "forward");
      logits = model->Forward(input);
    }
    autograd::Variable loss = autograd::CrossEntropy(logits, y);
    {
      dist::Tracer::Span b = dist::Tracer::MaybeScope(trace, "backward");
      autograd::Backward(loss);  // DDP: buckets all-reduced inside; averaged gradients when it returns
    }
    return loss.data();
  };
  auto step = [&]() -> Tensor {
    dist::Tracer::Span whole = dist::Tracer::MaybeScope(trace, "step", step_number++);
    Tensor loss = forward_backward();
    if (fused) return loss;  // the per-bucket optimizers stepped inside Backward
    dist::Tracer::Span s = dist::Tracer::MaybeScope(trace, "optimizer");
    optimizer.Step();
    return loss;
  };

  // --cuda_graph: the same step, recorded once after a few eager steps and then replayed. Its inputs (x, y)
  // are fixed buffers already, and the learning rate never changes, so the step needs nothing else.
  std::unique_ptr<dist::GraphedStep> graphed;
  if (o.cuda_graph) {
    dist::GraphedStepOptions go;
    go.dot_path = o.cuda_graph_dot;
    go.log = [rank](const std::string& line) {
      if (rank == 0) std::printf("# %s\n", line.c_str());
    };
    graphed = std::make_unique<dist::GraphedStep>(device, step, ddp.get(),
                                                  std::vector<const nn::Optimizer*>{&optimizer}, std::move(go));
  }
  absl::Status step_error;  // a failed capture or replay stops the run
  auto run_step = [&] {
    if (!graphed) {
      step();
      return;
    }
    absl::StatusOr<Tensor> loss = graphed->Run();
    if (!loss.ok() && step_error.ok()) step_error = loss.status();
  };

  // DDP records into the tracer whenever it is enabled; keep it quiet until the traced steps.
  if (tracer) tracer->set_enabled(false);
  for (int i = 0; i < o.warmup; ++i) run_step();
  // The capture belongs to the warm-up, whatever --warmup says: the timed steps are all replays.
  while (graphed && !graphed->replaying() && graphed->eager_reason().empty() && step_error.ok()) run_step();
  if (!step_error.ok()) return Fail("cuda graph", step_error);
  if (pg) {
    if (absl::Status s = pg->Barrier()->Wait(); !s.ok()) return Fail("barrier", s);
  }
  if (device.is_cuda()) cuda::Stream::Current(device.index).Synchronize();
  if (ddp && !ddp->status().ok()) return Fail("warm-up", ddp->status());  // a bucket's all_reduce failed
  if (ddp && rank == 0) {
    std::printf("%s", ddp->BucketTable().c_str());
    std::fflush(stdout);
  }

  StepTimer timer(device);
  std::vector<double> synced;
  for (int i = 0; i < o.steps; ++i) {
    timer.Start();
    run_step();
    synced.push_back(timer.StopMs());
  }
  if (pg) {
    if (absl::Status s = pg->Barrier()->Wait(); !s.ok()) return Fail("barrier", s);
  }
  timer.Start();
  for (int i = 0; i < o.steps; ++i) run_step();
  const double burst = timer.StopMs() / o.steps;
  if (!step_error.ok()) return Fail("cuda graph", step_error);
  if (ddp && !ddp->status().ok()) return Fail("timed steps", ddp->status());
  std::sort(synced.begin(), synced.end());
  const double median = synced[synced.size() / 2];

  // The halves alone (one device only: with DDP, backward also waits for the all_reduce). Always eager.
  double fwd_bwd = 0, optimizer_ms = 0;
  if (!ddp) {
    timer.Start();
    for (int i = 0; i < o.steps; ++i) forward_backward();
    fwd_bwd = timer.StopMs() / o.steps;
    timer.Start();
    for (int i = 0; i < o.steps; ++i) optimizer.Step();  // on the last backward's gradients
    optimizer_ms = timer.StopMs() / o.steps;
  }
  double gemm_flop = 0;  // forward, dW, and dX except the first layer's (the input needs no gradient)
  for (size_t l = 0; l + 1 < o.dims.size(); ++l) {
    gemm_flop += 2.0 * o.batch * o.dims[l] * o.dims[l + 1] * (l == 0 ? 2 : 3);
  }
  const double optimizer_bytes =
      static_cast<double>(model->NumParameters()) * (o.precision == nn::Precision::kBFloat16 ? 22 : 20);

  if (tracer) {
    // A few more steps, traced (DDP's reducer was created with the tracer; spans come from `trace`).
    tracer->set_enabled(true);
    trace = tracer.get();
    for (int i = 0; i < o.trace_steps; ++i) run_step();
    if (absl::Status s = tracer->WriteChromeTrace(pg.get(), o.trace); !s.ok()) return Fail("trace", s);
    if (rank == 0) {
      std::printf("# trace of %d steps written to %s (open in https://ui.perfetto.dev)\n", o.trace_steps,
                  o.trace.c_str());
      dist::TraceSvgOptions svg;  // its picture beside it: the last two steps, buckets labelled with their bytes
      for (int b = 0; ddp && b < ddp->reducer().num_buckets(); ++b) {
        svg.bucket_bytes.push_back(ddp->reducer().BucketBytes(b));
      }
      const absl::StatusOr<std::string> drawn = dist::WriteTimelineSvg(o.trace, svg);
      std::printf("# timeline: %s\n", drawn.ok() ? drawn->c_str() : std::string(drawn.status().message()).c_str());
    }
  }

  if (rank == 0) {
    const std::string dims = absl::StrJoin(o.dims, ",");
    const char* backend = pg ? pg->backend_name() : (device.is_cuda() ? "cuda" : "cpu");
    const int buckets = ddp ? ddp->reducer().num_buckets() : 0;
    // "copy engines 4/5, NCCL all_reduce 1/5": how many buckets each path carries.
    std::string paths;
    if (ddp) {
      std::vector<std::pair<std::string, int>> counts;
      for (int b = 0; b < buckets; ++b) {
        const std::string path = ddp->BucketPath(b);
        auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == path; });
        if (it == counts.end()) it = counts.insert(counts.end(), {path, 0});
        ++it->second;
      }
      for (const auto& [path, n] : counts) absl::StrAppend(&paths, paths.empty() ? "" : ", ", path, " ", n, "/", buckets);
    }
    const bool replayed = graphed && graphed->replaying();
    std::printf("tinyddp %s %s mode=%s dims=%s batch=%lld world=%d backend=%s%s: median %.3f ms/step (synced), "
                "burst %.3f ms/step\n",
                ddp ? "DDP" : (device.is_cuda() ? "1-GPU" : "1-CPU"), nn::PrecisionName(o.precision),
                replayed ? "cuda_graph" : "eager", dims.c_str(), static_cast<long long>(o.batch),
                world, backend,
                ddp ? absl::StrCat(" buckets=", buckets, o.bucket_view ? " layout=views" : " layout=coalesced",
                                   fused ? " fused_optimizer" : "", o.bf16_hook ? " hook=bf16" : "",
                                   " all_reduce=", paths).c_str()
                    : "",
                median, burst);
    if (graphed) std::printf("  mode: %s\n", graphed->ModeName().c_str());
    if (!ddp) {
      std::printf("  %s: forward+backward %.3f ms (%.3g TFLOP of GEMMs: %.4g TFLOP/s or more), optimizer %.3f ms "
                  "(%.3g GB: %.4g GB/s)\n",
                  nn::PrecisionName(o.precision), fwd_bwd, gemm_flop / 1e12, gemm_flop / (fwd_bwd * 1e9),
                  optimizer_ms, optimizer_bytes / 1e9, optimizer_bytes / (optimizer_ms * 1e6));
    }
    auto round4 = [](double v) { return std::round(v * 1e4) / 1e4; };
    nlohmann::json row = {{"impl", "tinyddp"},
                          {"dims", dims},
                          {"batch", o.batch},
                          {"world", world},
                          {"backend", backend},
                          {"ddp", ddp != nullptr},
                          {"step_ms_median_synced", round4(median)},
                          {"step_ms_burst", round4(burst)},
                          {"samples_per_s", std::round(o.batch * world * 10000.0 / burst) / 10.0},
                          {"params", model->NumParameters()},
                          {"buckets", buckets},
                          {"bucket_view", o.bucket_view},
                          {"fused_optimizer", fused},
                          {"hook", o.bf16_hook ? "bf16" : "allreduce"},
                          {"all_reduce", paths},
                          {"precision", nn::PrecisionName(o.precision)},
                          {"mode", replayed ? "cuda_graph" : "eager"}};
    if (graphed) {
      row["mode_detail"] = graphed->ModeName();
      row["graph_nodes"] = graphed->graph().num_nodes();
      row["graph_collectives"] = graphed->captured_collectives().size();
    }
    if (!ddp) {
      row["fwd_bwd_ms_burst"] = round4(fwd_bwd);
      row["gemm_tflops"] = std::round(gemm_flop / (fwd_bwd * 1e9) * 100) / 100;
      row["optimizer_ms_burst"] = round4(optimizer_ms);
      row["optimizer_gbps"] = std::round(optimizer_bytes / (optimizer_ms * 1e6) * 10) / 10;
    }
    std::printf("%s\n", row.dump().c_str());
    std::fflush(stdout);
  }
  // Leave together: rank 0 may host the store, which the others still use until here.
  if (pg) {
    if (absl::Status s = pg->Barrier()->Wait(); !s.ok()) return Fail("barrier", s);
  }
  return 0;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  const absl::StatusOr<tinyddp::Options> options = tinyddp::ParseFlags(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "ddp_step_bench: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (!options->no_ddp) {
    tinyddp::dist::SpawnOptions spawn;
    spawn.nproc = options->nproc;
    if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv, spawn); !s.ok()) {
      std::fprintf(stderr, "ddp_step_bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return tinyddp::Run(*options);
}
