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
//          --hook=allreduce|bf16  --backend=auto|nccl|gloo   (allreduce over NCCL goes through the copy-engine
//          hook, dist/accel/copy_engine: on two GPUs of one machine the large buckets take the copy engines)
//          --fused_optimizer=true|false (DDP only, default true: one SGD per bucket stepped at the end of
//          backward as each bucket's average arrives, dist/accel/fused_optimizer)
//          --optimizer_in_backward (with the fused optimizer: each bucket's update already during backward, on
//          a stream of its own right after the bucket's all_reduce, beside the rest of backward; with --zero=1|2
//          each bucket's shard as its reduce-scatter lands, the all-gathers at the end; not --zero=3, --tp)
//          --gemm_sm_count=N (GPU: cuBLASLt plans every GEMM for N SMs, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET;
//          0, the default, all of them: leaves SMs to the in-backward updates' stream)
//          --zero=0|1|2|3 (--ddp=full only, default 0; docs/zero.md. 1: ZeRO-1, each bucket reduce-scattered,
//          each rank steps its 1/N of the SGD (its momentum only), the parameters all-gathered, all inside
//          backward; needs the fused optimizer. 2: ZeRO-2, the same keeping only this rank's block of each
//          bucket's gradients (coalesced buckets, staged). 3: ZeRO-3, no DDP: every layer sharded, gathered
//          for its forward and backward, its gradient reduce-scattered (bf16: the bfloat16 copies gathered). 1-3 print a table of what
//          each rank holds: parameters, gradients, optimizer state, and the host allocator's peak)
//          --tp=N (tensor parallelism, dist/parallel/tensor, docs/tensor_parallel.md: the MLP's Linear pairs split
//          column -> row over rows of N ranks of a (world/N) x N mesh, DDP down its columns; --tp=1 runs the
//          tensor-parallel module over groups of one, the plain step's work through its code path; --ddp=full
//          with --zero=0 only, eager; the ranks of a row share a batch, so samples_per_s counts rows)
//          --precision=fp32|bf16 (bf16: bfloat16 compute copies and activations, float32 master weights,
//          gradients, momentum and loss; nn/precision.h, docs/mixed_precision.md)
//          --cuda_graph (the whole step - zero_grad, forward, backward with DDP's all_reduces, optimizer -
//          recorded into one CUDA graph after the warm-up and replayed: dist/accel/graph/graphed_step.h; where that
//          is not possible the step runs eagerly and the reason is printed)  --cuda_graph_dot=FILE (the
//          recorded graph in Graphviz format)
//          --ddp=naive|flat|bucketed|full (default full): which rung of the DDP ladder (dist/ladder,
//          docs/ddp_ladder.md) averages the gradients - full is DistributedDataParallel itself, the others
//          the ladder's teaching rungs; --hook, --bucket_view and --fused_optimizer are full's
//          --sweep_buckets: the same step with one bucket per tensor, 1 MiB buckets, DDP's default (1 MiB first,
//          25 MiB), and one bucket for everything (--ddp=full or bucketed): a table of step time and exposed
//          communication, then a JSON line per row
//
// The step is PyTorch's: zero_grad(set_to_none) ; loss = cross_entropy(model(x), y) ; backward ; SGD
// (lr 0.01, momentum 0.9) step. Inputs are made on the device once (different on each rank), so only the
// step is measured. Each rank is started by SpawnWorkersIfNeeded (one per GPU, or 2 Gloo ranks without one).
// After --warmup steps:
//   step_ms_median_synced  median over --steps of one step timed with CUDA events on the compute stream,
//                          the host waiting for each step to finish before starting the next;
//   step_ms_burst          --steps steps back to back without waiting, total / steps (the host runs ahead,
//                          as in a real training loop).
//   cpu_ms_per_step        CPU time of rank 0's process (every thread) over the burst, per step: on a
//                          shared machine the wall clock also counts other jobs, this does not.
// Every result line says which mode ran: "mode=cuda_graph" (each step one replay) or "mode=eager", and the
// JSON row carries "mode" (with "mode_detail", the reason, under --cuda_graph).
// On CPU (Gloo) the host clock replaces the events; the line starting with '#' names the CPU kernels'
// instruction set (tensor/cpu_isa.h). Rank 0 prints DDP's bucket table after the warm-up (the
// buckets as measured, after the one-time rebuild: index, bytes, parameters, and the path each takes,
// "NCCL all_reduce" or "copy engines"), then a readable line and one JSON line. Both report the optimizer
// state one rank holds (SGD momentum: 4 bytes per parameter, or per parameter of its shard under ZeRO-1)
// and, on GPU, the device bytes held by live tensors after the warm-up (parameters, gradients, state).
//   comm_ms, exposed_ms    with --trace or --sweep_buckets: the communication per step, and the part of it no
//                          computation hid, from rank 0's trace of --trace_steps more steps, as the trace's
//                          picture marks it (tools/timeline/step_timeline.h; for the naive and flat rungs,
//                          backward's end to the last all_reduce's end).
// Without DDP (--no_ddp) the two halves of the step are also timed alone, each as a burst of --steps:
//   fwd_bwd_ms_burst    zero_grad + forward + loss + backward: the GEMMs and what surrounds them. gemm_tflops
//                       is the layers' GEMM work (forward, dW, dX but the first layer's) over that time, so a
//                       lower bound on what the GEMMs achieve;
//   optimizer_ms_burst  the SGD step alone; optimizer_gbps is its compulsory traffic (float32 p, g, momentum
//                       read, p and momentum written: 20 bytes per parameter, +2 for the bf16 copy) over it.
#include <time.h>

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
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "base/status_macros.h"
#include "dist/accel/fused_optimizer/fused_optimizer.h"
#include "dist/accel/graph/graphed_step.h"
#include "dist/accel/copy_engine/copy_engine_hook.h"
#include "dist/ddp/bf16_compress_hook.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/reducer.h"
#include "dist/init.h"
#include "dist/ladder/ladder.h"
#include "dist/launch/spawn.h"
#include "dist/observe/trace/trace.h"
#include "dist/observe/trace/traced_comm_hook.h"
#include "dist/parallel/subgroups/device_mesh.h"
#include "dist/parallel/tensor/tensor_parallel_mlp.h"
#include "dist/parallel/zero/fully_sharded.h"
#include "dist/parallel/zero/gradient_shards.h"
#include "dist/parallel/zero/memory_table.h"
#include "dist/parallel/zero/reduce_scatter_hook.h"
#include "dist/parallel/zero/zero_optimizer.h"
#include "nlohmann/json.hpp"
#include "nn/mlp.h"
#include "nn/precision.h"
#include "nn/sgd.h"
#include "tensor/cpu_isa.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tools/timeline/chrome_trace.h"
#include "tools/timeline/step_timeline.h"
#include "tools/timeline/timeline_svg.h"

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
  bool optimizer_in_backward = false;
  int gemm_sm_count = 0;
  int zero = 0;
  int tp = 0;  // 0: the plain MLP; N >= 1: TensorParallelMlp over rows of N ranks
  bool cuda_graph = false;
  std::string cuda_graph_dot;
  nn::Precision precision = nn::Precision::kFloat32;
  dist::Backend backend = dist::Backend::kAuto;
  std::string ddp = "full";    // the rung of the DDP ladder
  bool sweep_buckets = false;  // time several bucket sizes
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
    } else if (kv[0] == "--optimizer_in_backward" && (!has || v == "true" || v == "false")) {
      o.optimizer_in_backward = !has || v == "true";
    } else if (kv[0] == "--gemm_sm_count" && has && absl::SimpleAtoi(v, &o.gemm_sm_count) && o.gemm_sm_count >= 0) {
    } else if (kv[0] == "--cuda_graph" && (!has || v == "true" || v == "false")) {
      o.cuda_graph = !has || v == "true";
    } else if (kv[0] == "--cuda_graph_dot" && has && !v.empty()) {
      o.cuda_graph_dot = v;
    } else if (kv[0] == "--zero" && has && v.size() == 1 && v[0] >= '0' && v[0] <= '3') {
      o.zero = v[0] - '0';
    } else if (kv[0] == "--tp" && has && absl::SimpleAtoi(v, &o.tp) && o.tp >= 1) {
    } else if (kv[0] == "--hook" && has && (v == "allreduce" || v == "bf16")) {
      o.bf16_hook = v == "bf16";
    } else if (kv[0] == "--precision" && has) {
      ASSIGN_OR_RETURN(o.precision, nn::ParsePrecision(v));
    } else if (kv[0] == "--ddp" && has &&
               std::find(dist::ladder::RungNames().begin(), dist::ladder::RungNames().end(), v) !=
                   dist::ladder::RungNames().end()) {
      o.ddp = v;
    } else if (kv[0] == "--sweep_buckets" && !has) {
      o.sweep_buckets = true;
    } else if (kv[0] == "--backend" && has) {
      absl::StatusOr<dist::Backend> b = dist::ParseBackend(v);
      RETURN_IF_ERROR(b);
      o.backend = *b;
    } else {
      return absl::InvalidArgumentError("unknown or malformed flag " + arg +
                                        " (see the header of bench/ddp_step_bench.cc)");
    }
  }
  if (o.sweep_buckets && (o.no_ddp || (o.ddp != "full" && o.ddp != "bucketed"))) {
    return absl::InvalidArgumentError("--sweep_buckets needs buckets: --ddp=full (the default) or --ddp=bucketed");
  }
  if (o.ddp != "full" && (o.bf16_hook || !o.bucket_view)) {
    return absl::InvalidArgumentError("--hook and --bucket_view=false are settings of --ddp=full only");
  }
  if (o.zero >= 1 && (o.no_ddp || o.ddp != "full" || !o.fused_optimizer || o.bf16_hook)) {
    return absl::InvalidArgumentError(
        "--zero shards the optimizer (and steps it inside backward) with its own reduce-scatter: it needs --ddp=full "
        "and cannot be combined with --no_ddp, --fused_optimizer=false or --hook=bf16");
  }
  if (o.tp > 0 && (o.no_ddp || o.ddp != "full" || o.zero != 0 || o.sweep_buckets)) {
    return absl::InvalidArgumentError("--tp runs with DDP down the mesh's columns: --ddp=full, --zero=0, no --no_ddp "
                                      "or --sweep_buckets");
  }
  if (o.zero == 1 && !o.bucket_view) return absl::InvalidArgumentError("--zero=1 needs flat buckets (--bucket_view)");
  if (o.optimizer_in_backward && (o.no_ddp || o.ddp != "full" || !o.fused_optimizer || o.zero == 3 || o.tp > 0)) {
    return absl::InvalidArgumentError(
        "--optimizer_in_backward steps the fused optimizer (or ZeRO-1/2's shards) of --ddp=full during backward: it "
        "needs DDP's buckets and the fused optimizer, and is not built for --zero=3 (each layer already steps inside "
        "its own backward op) or --tp (its optimizer steps shards of a split model)");
  }
  if (o.zero == 2) o.bucket_view = false;  // ZeRO-2 stages coalesced buckets and keeps no flat ones
  return o;
}

// A fused optimizer's per-bucket optimizers, for the graph's learning-rate check and the memory table.
std::vector<const nn::Optimizer*> PerBucket(const dist::FusedOptimizer& fused) {
  std::vector<const nn::Optimizer*> all;
  for (const auto& opt : fused.optimizers()) all.push_back(opt.get());
  return all;
}

// CPU time of this process, every thread, in milliseconds.
double ProcessCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
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

// What one configuration measured, as rank 0 saw it.
struct Measured {
  double median_ms = 0, burst_ms = 0, cpu_ms = 0;  // cpu_ms: rank 0's process over the burst, per step
  double fwd_bwd_ms = 0, optimizer_ms = 0;  // without DDP: the halves of the step alone
  double comm_ms = -1, exposed_ms = -1;  // -1: no traced steps
  int collectives = 0;                   // all_reduces per step: buckets, tensors (naive) or 1 (flat)
  int updated_in_backward = 0;           // --optimizer_in_backward: buckets updated before backward ended
  std::string paths;                     // full DDP: how many buckets each path carries
  int64_t params = 0;
  int64_t state_bytes = 0;   // optimizer state one rank holds
  dist::zero::RankMemory held;  // parameters, gradients, state between steps, and the peak over the warm-up
  int64_t device_bytes = 0;  // GPU: device bytes in live tensors after the warm-up
  bool replayed = false;     // --cuda_graph: the timed steps were replays of one recorded step
  std::string mode_detail;   // --cuda_graph: GraphedStep::ModeName (why eager, when it is)
  int64_t graph_nodes = 0, graph_collectives = 0;
};

// "copy engines 4/5, NCCL all_reduce 1/5": how many buckets each path carries.
std::string PathCounts(const dist::DistributedDataParallel& ddp) {
  const int buckets = ddp.reducer().num_buckets();
  std::vector<std::pair<std::string, int>> counts;
  for (int b = 0; b < buckets; ++b) {
    const std::string path = ddp.BucketPath(b);
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == path; });
    if (it == counts.end()) it = counts.insert(counts.end(), {path, 0});
    ++it->second;
  }
  std::string paths;
  for (const auto& [path, n] : counts) absl::StrAppend(&paths, paths.empty() ? "" : ", ", path, " ", n, "/", buckets);
  return paths;
}

// What one rank holds without DistributedDataParallel (a ladder rung, or no DDP): the module's parameters
// (and compute copies) and their .grad; the flat and bucketed rungs also copy the gradients into buffers of
// their own, one per all_reduce (AllReduceBytes), while naive all-reduces each .grad in place.
dist::zero::RankMemory HeldWithoutDdp(const nn::Module& module, const std::vector<int64_t>& buffer_bytes) {
  dist::zero::RankMemory m;
  for (const auto& [name, p] : module.NamedParameters()) {
    m.parameters += static_cast<int64_t>(p.data().nbytes());
    if (p.grad().defined()) m.gradients += static_cast<int64_t>(p.grad().nbytes());
  }
  for (const auto& [p, copy] : module.ComputeCopies()) m.parameters += static_cast<int64_t>(copy.nbytes());
  for (int64_t bytes : buffer_bytes) m.gradients += bytes;
  return m;
}

// One configuration: the model and its DDP (DistributedDataParallel with `ddp_options` for --ddp=full, a
// ladder rung for the others; none without `pg`), warm-up,
// --steps synced steps, --steps back to back, and when `traced`, --trace_steps more steps recorded in a
// trace (written to o.trace when set) whose rank-0 events give the exposed communication. Collective.
absl::StatusOr<Measured> Measure(const Options& o, const std::shared_ptr<dist::ProcessGroup>& pg, Device device,
                                 dist::DdpOptions ddp_options, bool traced, bool print_table) {
  const int rank = pg ? pg->rank() : 0;
  // --- Model, optimizer, data: all on the device before the clock starts. ---
  const int64_t memory_baseline = dist::zero::StartPeak(device);  // the memory table's peak is above this
  nn::MlpOptions mo;
  mo.device = device;
  mo.seed = 0;
  mo.precision = o.precision;
  std::shared_ptr<nn::Sequential> model = nn::MLP(o.dims, mo);
  // --tp=N: the rows of a (world/N) x N mesh split every Linear pair (dist/parallel/tensor); DDP runs down the
  // columns on the shards, and the ranks of a row share a batch. `trained` is what the step runs.
  std::shared_ptr<dist::ProcessGroup> dp_pg = pg;
  std::unique_ptr<dist::tensor_parallel::TensorParallelMlp> tp_model;
  if (o.tp > 0) {
    if (pg->size() % o.tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--tp=", o.tp, " does not divide the ", pg->size(), " ranks"));
    }
    ASSIGN_OR_RETURN(const dist::DeviceMesh mesh,
                     dist::DeviceMesh::Create(*pg, pg->SubStore("mesh"), pg->size() / o.tp, o.tp));
    ASSIGN_OR_RETURN(tp_model, dist::tensor_parallel::TensorParallelMlp::Create(*model, mesh.tp_group));
    dp_pg = mesh.dp_group;
    if (rank == 0 && print_table) std::printf("# %s\n%s", mesh.ToString(rank).c_str(), tp_model->Describe(o.batch).c_str());
  }
  nn::Module& trained = tp_model ? static_cast<nn::Module&>(*tp_model) : *model;
  std::unique_ptr<dist::Tracer> tracer;
  if (traced) tracer = std::make_unique<dist::Tracer>(rank, device);
  std::unique_ptr<dist::DistributedDataParallel> ddp;  // --ddp=full: the production DDP
  std::unique_ptr<dist::ladder::DataParallel> rung;    // --ddp=naive|flat|bucketed: a teaching rung instead
  std::unique_ptr<dist::zero::FullyShardedDataParallel> fsdp;  // --zero=3: instead of DDP
  std::shared_ptr<dist::zero::GradientShards> shards;          // --zero=2: the comm hook's blocks
  if (o.zero == 2) {
    shards = dist::zero::GradientShards::Create(*pg);
    ddp_options.comm_hook = shards->Hook();
    ddp_options.gradient_as_bucket_view = false;
  }
  if (pg && o.zero == 3) {
    // Made below, with the optimizer factory.
  } else if (pg && o.ddp == "full") {
    // Traced: each bucket's collective recorded by wrapping the hook (forward_backward records the rest).
    if (tracer) ddp_options.comm_hook = dist::TracedCommHook(ddp_options.comm_hook, tracer.get());
    ASSIGN_OR_RETURN(ddp, dist::DistributedDataParallel::Create(trained, dp_pg, ddp_options));
  } else if (pg) {
    ASSIGN_OR_RETURN(rung, dist::ladder::CreateDataParallel(o.ddp, *model, pg, ddp_options, tracer.get()));
  }
  // The bytes of each all_reduce (or bucket) of one step, in order.
  auto all_reduce_bytes = [&]() {
    if (rung) return rung->AllReduceBytes();
    if (fsdp) return fsdp->UnitBytes();
    std::vector<int64_t> bytes;
    for (int b = 0; ddp && b < ddp->reducer().num_buckets(); ++b) bytes.push_back(ddp->reducer().BucketBytes(b));
    return bytes;
  };
  nn::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  nn::SGD optimizer(trained.Parameters(), so);
  optimizer.SetComputeCopies(trained.ComputeCopies());  // bf16: the step writes them; fp32: there are none
  const bool fused = (ddp && o.fused_optimizer) || o.zero == 3;
  std::unique_ptr<dist::zero::ZeroRedundancyOptimizer> zero;  // --zero=1|2: the fused optimizer, sharded
  std::unique_ptr<dist::FusedOptimizer> fused_optimizer;      // --zero=0: one optimizer per bucket
  if (fused) {
    auto factory = [so, &trained](std::vector<autograd::Variable> params) -> std::unique_ptr<nn::Optimizer> {
      auto sgd = std::make_unique<nn::SGD>(std::move(params), so);
      sgd->SetComputeCopies(trained.ComputeCopies());  // this bucket's parameters' copies
      return sgd;
    };
    if (o.zero == 3) {
      ASSIGN_OR_RETURN(fsdp, dist::zero::FullyShardedDataParallel::Create(model, pg, factory));
    } else if (o.zero) {
      ASSIGN_OR_RETURN(zero, dist::zero::ZeroRedundancyOptimizer::Attach(*ddp, factory, shards,
                                                                          {.in_backward = o.optimizer_in_backward}));
      optimizer.SetComputeCopies({});  // bf16: ZeRO re-pointed the copies; the unused plain one keeps no old ones
    } else {
      ASSIGN_OR_RETURN(fused_optimizer,
                       dist::FusedOptimizer::Attach(*ddp, factory, {.in_backward = o.optimizer_in_backward}));
    }
  }
  Tensor x = Tensor::Empty({o.batch, o.dims.front()}, DType::kFloat32, device);
  const int replica = dp_pg ? dp_pg->rank() : 0;  // --tp: a row's ranks see the same batch
  ops::NormalInit(x, 0.0, 1.0, /*seed=*/1234 + replica);
  std::vector<int64_t> labels(o.batch);
  for (int64_t i = 0; i < o.batch; ++i) labels[i] = (i * 7 + replica * 3) % o.dims.back();
  const Tensor y = Tensor::FromVector<int64_t>(labels, {o.batch}, device);
  const autograd::Variable input(x);

  dist::Tracer* trace = nullptr;  // set only for the traced steps at the end
  int64_t step_number = 0;
  auto forward_backward = [&]() -> absl::StatusOr<Tensor> {
    optimizer.ZeroGrad(/*set_to_none=*/true);
    autograd::Variable logits;
    if (rung) {
      logits = rung->Forward(input);  // every rung records its own "forward" span
    } else {
      dist::Tracer::Span f = dist::Tracer::MaybeScope(trace, "forward");
      logits = ddp ? ddp->Forward(input) : fsdp ? fsdp->Forward(input) : trained.Forward(input);
    }
    autograd::Variable loss = autograd::CrossEntropy(logits, y);
    {
      dist::Tracer::Span b = dist::Tracer::MaybeScope(trace, "backward");
      autograd::Backward(loss);  // bucketed, full: buckets all-reduced inside; full: averaged when it returns
    }
    // naive, flat: all the communication; bucketed: the wait; full: DDP's status (a bucket's failed all_reduce)
    if (rung) RETURN_IF_ERROR(rung->FinishBackward());
    if (ddp) RETURN_IF_ERROR(ddp->status());
    if (fsdp) RETURN_IF_ERROR(fsdp->status());
    if (tp_model) RETURN_IF_ERROR(tp_model->status());  // a tensor-parallel all_reduce failed
    return loss.data();
  };
  auto eager_step = [&]() -> absl::StatusOr<Tensor> {
    dist::Tracer::Span whole = dist::Tracer::MaybeScope(trace, "step", step_number++);
    ASSIGN_OR_RETURN(Tensor loss, forward_backward());
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
    go.traced = tracer != nullptr;  // a traced step runs eagerly (the reason is printed)
    go.log = [rank](const std::string& line) {
      if (rank == 0) std::printf("# %s\n", line.c_str());
    };
    if (pg && o.ddp != "full") {
      go.eager_reason = absl::StrCat("--ddp=", o.ddp, " waits for its all_reduces on the host; --ddp=full records");
    } else if (o.zero != 0) {
      go.eager_reason = absl::StrCat("ZeRO-", o.zero, " under a CUDA graph is not implemented (its sharded steps are "
                                     "not recorded)");
    } else if (o.tp > 0) {
      go.eager_reason = "--tp under a CUDA graph is not implemented";
    }
    if (fused_optimizer) go.rebuilt_optimizers = [&fused_optimizer] { return PerBucket(*fused_optimizer); };
    graphed = std::make_unique<dist::GraphedStep>(device, eager_step, ddp.get(),
                                                  std::vector<const nn::Optimizer*>{&optimizer}, std::move(go));
  }
  auto step = [&]() -> absl::Status { return graphed ? graphed->Run().status() : eager_step().status(); };

  // DDP records into the tracer whenever it is enabled; keep it quiet until the traced steps.
  if (tracer) tracer->set_enabled(false);
  for (int i = 0; i < o.warmup; ++i) RETURN_IF_ERROR(step());
  // The capture belongs to the warm-up, whatever --warmup says: the timed steps are all replays.
  while (graphed && !graphed->replaying() && graphed->eager_reason().empty()) RETURN_IF_ERROR(step());
  if (pg) RETURN_IF_ERROR(pg->Barrier()->Wait());
  if (device.is_cuda()) cuda::Stream::Current(device.index).Synchronize();
  if ((ddp || rung || fsdp) && rank == 0 && print_table) {
    const std::string table = rung   ? rung->Describe()
                              : fsdp ? fsdp->ShardTable()
                                     : absl::StrCat(ddp->BucketTable(), zero ? zero->ShardTable() : "");
    std::printf("%s\n", std::string(absl::StripTrailingAsciiWhitespace(table)).c_str());
    std::fflush(stdout);
  }

  Measured m;
  // What one rank holds, measured after the warm-up (the state exists, the buckets are rebuilt).
  m.held = fsdp ? dist::zero::HeldBy(*fsdp)
           : zero ? dist::zero::HeldBy(*zero)
           : ddp  ? dist::zero::HeldBy(*ddp, optimizer, fused_optimizer ? PerBucket(*fused_optimizer)
                                                                        : std::vector<const nn::Optimizer*>{})
           : rung && o.ddp != "naive" ? HeldWithoutDdp(trained, rung->AllReduceBytes())
                                      : HeldWithoutDdp(trained, {});
  m.state_bytes = zero || fsdp ? m.held.optimizer_state : 4 * model->NumParameters();  // one float of momentum each
  dist::zero::StartPeak(device);  // the peak of the timed steps (host; a GPU's counts since the start)
  StepTimer timer(device);
  std::vector<double> synced;
  for (int i = 0; i < o.steps; ++i) {
    timer.Start();
    RETURN_IF_ERROR(step());
    synced.push_back(timer.StopMs());
  }
  if (pg) RETURN_IF_ERROR(pg->Barrier()->Wait());
  const double cpu_start_ms = ProcessCpuMs();
  timer.Start();
  for (int i = 0; i < o.steps; ++i) RETURN_IF_ERROR(step());
  m.burst_ms = timer.StopMs() / o.steps;
  m.held.peak = dist::zero::PeakAbove(device, memory_baseline);
  if (pg && (ddp || fsdp) && print_table) {  // collective: every rank's figures, one table on rank 0
    ASSIGN_OR_RETURN(const std::string held,
                     dist::zero::GatherMemoryTable(*pg, m.held, absl::StrCat(
                         "# memory per rank, --zero=", o.zero, ", bytes: tensors held after the warm-up; peak: the "
                         "most live tensor bytes at once in the timed steps, above what was live before the model "
                         "(allocator)")));
    if (rank == 0) std::printf("%s", held.c_str());
  }
  m.cpu_ms = (ProcessCpuMs() - cpu_start_ms) / o.steps;
  std::sort(synced.begin(), synced.end());
  m.median_ms = synced[synced.size() / 2];
  if (!ddp && !rung) {  // the halves alone (one device only: with DDP, backward also waits for the all_reduce)
    timer.Start();
    for (int i = 0; i < o.steps; ++i) RETURN_IF_ERROR(forward_backward().status());  // always eager
    m.fwd_bwd_ms = timer.StopMs() / o.steps;
    timer.Start();
    for (int i = 0; i < o.steps; ++i) optimizer.Step();  // on the last backward's gradients
    m.optimizer_ms = timer.StopMs() / o.steps;
  }
  m.params = fsdp ? fsdp->Memory().parameters : model->NumParameters();
  m.collectives = static_cast<int>(all_reduce_bytes().size());
  if (ddp) m.updated_in_backward = ddp->reducer().buckets_finished_in_backward();
  if (ddp) m.paths = PathCounts(*ddp);
  if (graphed) {
    m.replayed = graphed->replaying();
    m.mode_detail = graphed->ModeName();
    m.graph_nodes = graphed->graph().num_nodes();
    m.graph_collectives = static_cast<int64_t>(graphed->captured_collectives().size());
  }

  if (tracer) {
    // A few more steps, traced (the DDPs were created with the tracer; the step's spans come from `trace`).
    tracer->set_enabled(true);
    trace = tracer.get();
    for (int i = 0; i < o.trace_steps; ++i) {
      // Start each traced step together: on a few shared CPU cores the ranks drift apart, and a rank that
      // started late makes the other's picture show its wait as exposed communication. This keeps that skew
      // out of the picture; it costs one tiny collective per traced step (outside the step's span).
      if (pg) RETURN_IF_ERROR(pg->Barrier()->Wait());
      RETURN_IF_ERROR(step());
    }
    if (rank == 0) {
      // The communication no computation hid, per step, measured as the trace's picture marks it in red
      // (tools/timeline/step_timeline.h), from this rank's events.
      ASSIGN_OR_RETURN(const dist::ChromeTrace events,
                       dist::ParseChromeTrace(absl::StrCat("[", tracer->EventsJson(), "]")));
      ASSIGN_OR_RETURN(const dist::StepTimeline timeline, dist::BuildStepTimeline(events));
      m.comm_ms = timeline.MeanCommUs() / 1000;
      m.exposed_ms = timeline.MeanExposedUs() / 1000;
    }
    if (!o.trace.empty()) {
      RETURN_IF_ERROR(tracer->WriteChromeTrace(pg.get(), o.trace));
      if (rank == 0) {
        std::printf("# trace of %d steps written to %s (open in https://ui.perfetto.dev)\n", o.trace_steps,
                    o.trace.c_str());
        dist::TraceSvgOptions svg;  // its picture beside it: the last two steps, all_reduces labelled with their bytes
        if (pg) svg.bucket_bytes = all_reduce_bytes();
        if (pg) svg.title = absl::StrCat("DDP step timeline, --ddp=", o.ddp);
        const absl::StatusOr<std::string> drawn = dist::WriteTimelineSvg(o.trace, svg);
        std::printf("# timeline: %s\n", drawn.ok() ? drawn->c_str() : std::string(drawn.status().message()).c_str());
      }
    }
  }
  // Leave together: rank 0 may host the store, which the others still use until here.
  if (pg) RETURN_IF_ERROR(pg->Barrier()->Wait());
  return m;
}

// --sweep_buckets: the same step with each bucket size, one table.
struct BucketSize {
  const char* name;
  int64_t first_bytes, cap_bytes;
};
const BucketSize kSweep[] = {
    {"one per tensor", 1, 1},
    {"1 MiB", dist::kMiB, dist::kMiB},
    {"25 MiB (default)", dist::kMiB, 25 * dist::kMiB},
    {"one for all", int64_t{1} << 50, int64_t{1} << 50},
};

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
  dist::DdpOptions ddp_options;
  ddp_options.bucket_cap_bytes = static_cast<int64_t>(o.bucket_cap_mb * dist::kMiB);
  ddp_options.first_bucket_bytes = static_cast<int64_t>(o.first_bucket_mb * dist::kMiB);
  ddp_options.gradient_as_bucket_view = o.bucket_view;
  if (o.zero == 1) ddp_options.comm_hook = dist::zero::ReduceScatterHook(*pg);  // ZeRO-1: padded, reduce-scattered
  if (o.bf16_hook) ddp_options.comm_hook = dist::Bf16CompressHook();
  // --hook=allreduce over NCCL: the copy-engine hook, which sends the large float32 buckets of two GPUs to the
  // copy engines and the others to NCCL's all_reduce (collective setup; the bucket table names each path).
  std::shared_ptr<dist::CopyEngineHook> copy_engines;
  if (pg && o.ddp == "full" && o.zero == 0 && o.tp == 0 && !ddp_options.comm_hook.run &&
      std::string(pg->backend_name()) == "nccl") {
    absl::StatusOr<std::shared_ptr<dist::CopyEngineHook>> made = dist::CopyEngineHook::Create(*pg);
    if (!made.ok()) return Fail("copy engines", made.status());
    copy_engines = *made;
    ddp_options.comm_hook = copy_engines->AsCommHook();
    if (rank == 0) std::printf("%s", copy_engines->Describe().c_str());
  }
  const std::string dims = absl::StrJoin(o.dims, ",");
  const char* backend = pg ? pg->backend_name() : (device.is_cuda() ? "cuda" : "cpu");
  auto round4 = [](double v) { return std::round(v * 1e4) / 1e4; };

  if (o.sweep_buckets) {
    if (rank == 0) {
      std::printf("# bucket sweep: --ddp=%s dims=%s batch=%lld, %d ranks over %s; step ms: median of %d synced "
                  "steps, burst: %d back to back; comm, exposed: mean of %d traced steps\n",
                  o.ddp.c_str(), dims.c_str(), static_cast<long long>(o.batch), world, backend, o.steps, o.steps,
                  o.trace_steps);
      std::printf("%-18s %8s %12s %11s %10s %12s\n", "buckets", "count", "median ms", "burst ms", "comm ms",
                  "exposed ms");
    }
    std::string json_lines;  // after the table, so that it reads as one
    for (const BucketSize& size : kSweep) {
      dist::DdpOptions options = ddp_options;
      options.first_bucket_bytes = size.first_bytes;
      options.bucket_cap_bytes = size.cap_bytes;
      Options one = o;
      one.trace.clear();  // the sweep traces for the exposure only
      absl::StatusOr<Measured> m = Measure(one, pg, device, options, /*traced=*/true, /*print_table=*/false);
      if (!m.ok()) return Fail(size.name, m.status());
      if (rank != 0) continue;
      std::printf("%-18s %8d %12.3f %11.3f %10.3f %12.3f\n", size.name, m->collectives, m->median_ms, m->burst_ms,
                  m->comm_ms, m->exposed_ms);
      nlohmann::json row = {{"impl", "tinyddp"}, {"sweep", "buckets"}, {"ddp", o.ddp}, {"dims", dims},
                            {"batch", o.batch}, {"world", world}, {"backend", backend}, {"buckets_name", size.name},
                            {"buckets", m->collectives}, {"first_bucket_bytes", size.first_bytes},
                            {"bucket_cap_bytes", size.cap_bytes}, {"step_ms_median_synced", round4(m->median_ms)},
                            {"step_ms_burst", round4(m->burst_ms)}, {"comm_ms", round4(m->comm_ms)},
                            {"exposed_ms", round4(m->exposed_ms)}};
      absl::StrAppend(&json_lines, row.dump(), "\n");
      std::fflush(stdout);
    }
    if (rank == 0) std::printf("%s", json_lines.c_str());
    return 0;
  }

  absl::StatusOr<Measured> m = Measure(o, pg, device, ddp_options, /*traced=*/!o.trace.empty(), /*print_table=*/true);
  if (!m.ok()) return Fail("step", m.status());
  if (rank == 0) {
    if (device.is_cpu()) std::printf("# %s\n", CpuIsaSummary().c_str());
    const bool full = pg && o.ddp == "full";
    const bool fused = full && o.fused_optimizer;
    std::string what = "";
    if (full && o.zero == 3) {  // no DDP: a layer's all-gathers and its reduce-scatter
      what = absl::StrCat(" zero=3 layers=", m->collectives, " all_gather+reduce_scatter per layer");
    } else if (full) {
      what = absl::StrCat(o.tp > 0 ? absl::StrCat(" tp=", o.tp) : "", " buckets=", m->collectives, o.bucket_view ? " layout=views" : " layout=coalesced",
                          !fused                    ? ""
                          : o.optimizer_in_backward ? absl::StrCat(" fused_optimizer=in_backward(", m->updated_in_backward,
                                                                   " of ", m->collectives, " buckets during backward)")
                                                    : " fused_optimizer",
                          o.zero ? absl::StrCat(" zero=", o.zero) : "",
                          o.bf16_hook ? " hook=bf16" : "",
                          " all_reduce=", m->paths);
    } else if (pg) {
      what = absl::StrCat(" all_reduces=", m->collectives);
    }
    const std::string exposed =
        m->exposed_ms >= 0 ? absl::StrFormat(", comm %.3f ms, exposed %.3f ms", m->comm_ms, m->exposed_ms) : "";
    const std::string label = !pg         ? (device.is_cuda() ? "1-GPU" : "1-CPU")
                              : o.zero == 3 ? "FSDP"
                              : full        ? "DDP"
                                            : "DDP(" + o.ddp + ")";
    std::printf("tinyddp %s %s mode=%s dims=%s batch=%lld world=%d backend=%s%s: median %.3f ms/step (synced), "
                "burst %.3f ms/step, CPU %.3f ms/step%s\n",
                label.c_str(), nn::PrecisionName(o.precision), m->replayed ? "cuda_graph" : "eager", dims.c_str(),
                static_cast<long long>(o.batch), world, backend, what.c_str(), m->median_ms, m->burst_ms, m->cpu_ms,
                exposed.c_str());
    if (o.cuda_graph) std::printf("  mode: %s\n", m->mode_detail.c_str());
    std::printf("  per rank: parameters %lld bytes, gradients %lld bytes, optimizer state %lld bytes, peak %lld "
                "bytes%s\n", static_cast<long long>(m->held.parameters), static_cast<long long>(m->held.gradients),
                static_cast<long long>(m->state_bytes), static_cast<long long>(m->held.peak),
                device.is_cuda() ? absl::StrCat(", device memory in live tensors ", m->device_bytes, " bytes").c_str()
                                 : "");
    double gemm_flop = 0;  // forward, dW, and dX except the first layer's (the input needs no gradient)
    for (size_t l = 0; l + 1 < o.dims.size(); ++l) {
      gemm_flop += 2.0 * o.batch * o.dims[l] * o.dims[l + 1] * (l == 0 ? 2 : 3);
    }
    const double optimizer_bytes =
        static_cast<double>(m->params) * (o.precision == nn::Precision::kBFloat16 ? 22 : 20);
    if (!pg) {
      std::printf("  %s: forward+backward %.3f ms (%.3g TFLOP of GEMMs: %.4g TFLOP/s or more), optimizer %.3f ms "
                  "(%.3g GB: %.4g GB/s)\n",
                  nn::PrecisionName(o.precision), m->fwd_bwd_ms, gemm_flop / 1e12, gemm_flop / (m->fwd_bwd_ms * 1e9),
                  m->optimizer_ms, optimizer_bytes / 1e9, optimizer_bytes / (m->optimizer_ms * 1e6));
    }
    nlohmann::json row = {{"impl", "tinyddp"},
                          {"dims", dims},
                          {"batch", o.batch},
                          {"world", world},
                          {"backend", backend},
                          {"ddp", pg != nullptr},
                          {"rung", pg ? o.ddp : "none"},
                          {"step_ms_median_synced", round4(m->median_ms)},
                          {"step_ms_burst", round4(m->burst_ms)},
                          {"cpu_ms_per_step", round4(m->cpu_ms)},
                          {"samples_per_s", std::round(o.batch * (world / std::max(1, o.tp)) * 10000.0 / m->burst_ms) / 10.0},
                          {"params", m->params},
                          {"buckets", m->collectives},
                          {"bucket_view", o.bucket_view},
                          {"fused_optimizer", fused},
                          {"optimizer_in_backward", o.optimizer_in_backward},
                          {"gemm_sm_count", o.gemm_sm_count},
                          {"buckets_updated_in_backward", m->updated_in_backward},
                          {"zero", o.zero},
                          {"tp", o.tp},
                          {"optimizer_state_bytes_per_rank", m->state_bytes},
                          {"parameter_bytes_per_rank", m->held.parameters},
                          {"gradient_bytes_per_rank", m->held.gradients},
                          {"peak_bytes_per_rank", m->held.peak},
                          {"device_allocated_bytes", m->device_bytes},
                          {"hook", o.bf16_hook ? "bf16" : "allreduce"},
                          {"all_reduce", m->paths},
                          {"precision", nn::PrecisionName(o.precision)},
                          {"cpu_isa", device.is_cpu() ? CpuIsaName(ActiveCpuIsa()) : ""},
                          {"mode", m->replayed ? "cuda_graph" : "eager"}};
    if (o.cuda_graph) {
      row["mode_detail"] = m->mode_detail;
      row["graph_nodes"] = m->graph_nodes;
      row["graph_collectives"] = m->graph_collectives;
    }
    if (!pg) {
      row["fwd_bwd_ms_burst"] = round4(m->fwd_bwd_ms);
      row["gemm_tflops"] = std::round(gemm_flop / (m->fwd_bwd_ms * 1e9) * 100) / 100;
      row["optimizer_ms_burst"] = round4(m->optimizer_ms);
      row["optimizer_gbps"] = std::round(optimizer_bytes / (m->optimizer_ms * 1e6) * 10) / 10;
    }
    if (m->exposed_ms >= 0) {
      row["comm_ms"] = round4(m->comm_ms);
      row["exposed_ms"] = round4(m->exposed_ms);
    }
    std::printf("%s\n", row.dump().c_str());
    std::fflush(stdout);
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
  tinyddp::cuda::SetGemmSmCountTarget(options->gemm_sm_count);  // before the first product is planned
  return tinyddp::Run(*options);
}
