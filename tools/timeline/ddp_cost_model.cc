// ddp_cost_model: what a DDP step measured on two ranks would cost on 2 .. 1024 GPUs, on paper
// (tools/timeline/step_cost_model.h has the model). It reads a trace, takes its compute timeline -
// forward, backward, when each bucket's gradients were ready, the optimizer - and replays DDP's rules
// with ring all_reduce times from an alpha-beta model of a cluster (NVLink inside a node, 400 Gb/s
// InfiniBand between nodes). It prints:
//   1. the compute profile it read;
//   2. the check against the trace: the measured step and exposed communication, the same replayed with
//      the measured all_reduce times (tests the replay), and with the link model's (tests the link model);
//   3. a table per GPU count: the step of the DDP ladder's rungs - naive (one all_reduce per parameter
//      after backward), flat (one all_reduce of everything after backward), after bwd (DDP's
//      buckets, all-reduced once backward has ended: not the ladder's bucketed rung, which overlaps), each
//      followed by one optimizer step; DDP (buckets overlapped with backward, and fused
//      per-bucket optimizers when the trace had them) - and DDP's exposed communication;
//   and with --plot, the same as an SVG.
//
//   bazel-bin/tools/timeline/ddp_cost_model --trace=docs/traces/ddp_medium_2xh200_ce.json --dims=1024,4096,4096,4096,4096,1024 --plot=/tmp/scaling.svg
//   bazel-bin/tools/timeline/ddp_cost_model --trace=/tmp/cpu.json --dims=784,512,512,10 --link=800,0.45
//
// --help lists the flags: the cluster's parameters, the GPU counts, re-bucketing (--bucket_cap_mb).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "base/status_macros.h"
#include "tools/timeline/scaling_plot.h"
#include "tools/timeline/step_cost_model.h"
#include "tools/timeline/svg_canvas.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, trace, "", "the trace to read (--trace of ddp_mlp or ddp_step_bench); required");
ABSL_FLAG(std::string, dims, "",
          "layer sizes of the traced MLP (784,512,512,10): gives the buckets' bytes and the naive rung");
ABSL_FLAG(std::string, bucket_bytes, "", "bytes of each traced bucket, for a trace that does not carry them");
ABSL_FLAG(double, trace_first_bucket_mb, 1, "the traced run's first bucket limit (with --dims)");
ABSL_FLAG(double, trace_bucket_cap_mb, 25, "the traced run's bucket cap (with --dims)");
ABSL_FLAG(double, first_bucket_mb, 0, "predict with this first bucket limit instead (needs --dims; 0: the trace's)");
ABSL_FLAG(double, bucket_cap_mb, 0, "predict with this bucket cap instead (needs --dims; 0: the trace's)");
ABSL_FLAG(int32_t, steps, 0,
          "steps of the trace to average: the last N (0: all but the first, which rebuilds buckets)");
ABSL_FLAG(std::string, link, "",
          "ALPHA_US,BUSBW_GBPS[,BASE_US] of the traced pair's link, for the check (default: the cluster's NVLink)");
ABSL_FLAG(std::string, gpus, "2,4,8,16,32,64,128,256,512,1024", "GPU counts to predict");
ABSL_FLAG(int32_t, gpus_per_node, 8, "GPUs per node, linked by NVLink");
ABSL_FLAG(int32_t, nics_per_node, 8, "400 Gb/s NICs per node (8: one per GPU, as on DGX H100/H200)");
ABSL_FLAG(double, base_us, 8.4, "fixed cost of an all_reduce (NCCL ring/Simple baseLat)");
ABSL_FLAG(double, nvlink_alpha_us, 3.4, "latency of a ring step over NVLink (NCCL hwLat)");
ABSL_FLAG(double, nvlink_busbw_gbps, 330, "ring bus bandwidth over NVLink (2x H200, measured at 1 GiB)");
ABSL_FLAG(double, nic_alpha_us, 9.6, "latency of a ring step between nodes (NCCL hwLat, network)");
ABSL_FLAG(double, nic_busbw_gbps, 45, "ring bus bandwidth of one 400 Gb/s NIC (50 GB/s on the wire)");
ABSL_FLAG(std::string, plot, "", "write the predictions as an SVG plot here");
ABSL_FLAG(bool, json, false, "also print one JSON line per GPU count");

namespace tinyddp::dist {
namespace {

constexpr double kMiB = 1 << 20;

absl::StatusOr<std::vector<double>> Numbers(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  if (text.empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", text, ": expected positive numbers, comma separated"));
    }
    out.push_back(v);
  }
  return out;
}

std::string Ms(double us) { return FormatDurationUs(us); }

// The rungs below DDP communicate after backward and then step one optimizer: `p` so.
StepProfile AfterBackward(StepProfile p) {
  double optimizer = 0;
  for (double o : p.optimizer_us) optimizer += o;
  p.optimizer_us = {optimizer};
  p.fused_optimizer = false;
  return p;
}

// The flat rung: every gradient in one all_reduce, after backward.
StepProfile Flat(const StepProfile& p) {
  StepProfile flat = AfterBackward(p);
  int64_t total = 0;
  for (int64_t b : p.bucket_bytes) total += b;
  flat.bucket_bytes = {total};
  flat.ready_us = {p.backward_us};
  return flat;
}

int Run() {
  const std::string trace_path = absl::GetFlag(FLAGS_trace);
  if (trace_path.empty()) {
    std::fprintf(stderr, "ddp_cost_model: --trace=FILE.json is required (--help lists the flags)\n");
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "ddp_cost_model: %s\n", std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  absl::StatusOr<std::vector<double>> dims_d = Numbers("dims", absl::GetFlag(FLAGS_dims));
  absl::StatusOr<std::vector<double>> bytes_d = Numbers("bucket_bytes", absl::GetFlag(FLAGS_bucket_bytes));
  absl::StatusOr<std::vector<double>> link = Numbers("link", absl::GetFlag(FLAGS_link));
  absl::StatusOr<std::vector<double>> gpus_d = Numbers("gpus", absl::GetFlag(FLAGS_gpus));
  for (const absl::Status& s : {dims_d.status(), bytes_d.status(), link.status(), gpus_d.status()}) {
    if (!s.ok()) return fail(s);
  }
  if (!link->empty() && link->size() != 2 && link->size() != 3) {
    return fail(absl::InvalidArgumentError("--link: expected ALPHA_US,BUSBW_GBPS or ALPHA_US,BUSBW_GBPS,BASE_US"));
  }
  std::optional<ModelGradients> model;
  if (!dims_d->empty()) model = MlpGradients(std::vector<int64_t>(dims_d->begin(), dims_d->end()));
  StepTimelineOptions options;
  for (double b : *bytes_d) options.bucket_bytes.push_back(static_cast<int64_t>(b));
  if (options.bucket_bytes.empty() && model) {
    options.bucket_bytes =
        BucketBytesFor(*model, static_cast<int64_t>(absl::GetFlag(FLAGS_trace_first_bucket_mb) * kMiB),
                       static_cast<int64_t>(absl::GetFlag(FLAGS_trace_bucket_cap_mb) * kMiB));
  }
  absl::StatusOr<ChromeTrace> trace = ReadChromeTrace(trace_path);
  if (!trace.ok()) return fail(trace.status());
  absl::StatusOr<StepTimeline> all = BuildStepTimeline(*trace, options);
  if (!all.ok()) return fail(all.status());
  options.last_steps = absl::GetFlag(FLAGS_steps) > 0 ? absl::GetFlag(FLAGS_steps)
                       : all->total_steps > 2         ? all->total_steps - 1
                                                      : 0;
  absl::StatusOr<StepTimeline> timeline = BuildStepTimeline(*trace, options);
  if (!timeline.ok()) return fail(timeline.status());
  MeasuredStep measured;
  absl::StatusOr<StepProfile> traced = ProfileFromTimeline(*timeline, &measured);
  if (!traced.ok()) return fail(traced.status());
  const int n_traced = timeline->num_ranks();

  ClusterModel cluster;
  cluster.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  cluster.nics_per_node = absl::GetFlag(FLAGS_nics_per_node);
  cluster.base_us = absl::GetFlag(FLAGS_base_us);
  cluster.nvlink = {absl::GetFlag(FLAGS_nvlink_alpha_us), absl::GetFlag(FLAGS_nvlink_busbw_gbps)};
  cluster.nic = {absl::GetFlag(FLAGS_nic_alpha_us), absl::GetFlag(FLAGS_nic_busbw_gbps)};

  // 1. What was read.
  std::vector<std::string> sizes, ready;
  for (size_t k = 0; k < traced->bucket_bytes.size(); ++k) {
    sizes.push_back(FormatBytes(traced->bucket_bytes[k]));
    ready.push_back(absl::StrCat("b", k, " ", Ms(traced->ready_us[k])));
  }
  double optimizer = 0;
  for (double o : traced->optimizer_us) optimizer += o;
  std::printf("# ddp_cost_model: %s, %d step(s) x %d rank(s) averaged, %zu bucket(s) (%s)%s\n", trace_path.c_str(),
              static_cast<int>(timeline->steps.size()), n_traced, sizes.size(), absl::StrJoin(sizes, ", ").c_str(),
              traced->fused_optimizer ? ", fused optimizer" : "");
  std::printf("# compute: forward %s, backward %s, optimizer %s, other %s = %s per step without communication\n",
              Ms(traced->forward_us).c_str(), Ms(traced->backward_us).c_str(), Ms(optimizer).c_str(),
              Ms(traced->other_us).c_str(), Ms(traced->ComputeOnlyUs()).c_str());
  std::printf("# gradients ready, from backward's start: %s\n\n", absl::StrJoin(ready, ", ").c_str());

  // 2. The check on the traced ranks.
  const StepPrediction replay = PredictStep(*traced, [&](int k) { return measured.all_reduce_us[k]; });
  std::optional<ClusterModel> traced_link;
  std::string link_name;
  if (!link->empty()) {
    traced_link = SingleLinkCluster((*link)[0], (*link)[1], link->size() == 3 ? (*link)[2] : 0);
    link_name = absl::StrFormat("--link: alpha %.4g us, busbw %.4g GB/s", (*link)[0], (*link)[1]);
  } else if (timeline->on_gpu) {
    traced_link = cluster;
    link_name = absl::StrFormat("NVLink: base %.3g + alpha %.3g us/step, busbw %.4g GB/s", cluster.base_us,
                                cluster.nvlink.alpha_us, cluster.nvlink.busbw_gbps);
  }
  std::printf("# check on the traced %d ranks: measured | replayed with the measured all_reduce times | %s\n", n_traced,
              traced_link ? absl::StrCat("alpha-beta (", link_name, ")").c_str()
                          : "alpha-beta: give --link=ALPHA_US,BUSBW_GBPS (allreduce_bench measures them)");
  std::optional<StepPrediction> modelled;
  if (traced_link) modelled = PredictStepOn(*traced, n_traced, *traced_link);
  auto row = [&](const std::string& what, double m, double r, double a) {
    std::printf("  %-18s %12s %12s %12s\n", what.c_str(), Ms(m).c_str(), r < 0 ? "" : Ms(r).c_str(),
                a < 0 ? "-" : Ms(a).c_str());
  };
  std::printf("  %-18s %12s %12s %12s\n", "", "measured", "replayed", "alpha-beta");
  row("step", measured.step_us, replay.step_us, modelled ? modelled->step_us : -1);
  row("exposed comm", measured.exposed_us, replay.exposed_us, modelled ? modelled->exposed_us : -1);
  for (size_t k = 0; k < measured.all_reduce_us.size(); ++k) {
    row(absl::StrCat("b", k, " all_reduce"), measured.all_reduce_us[k], -1,
        traced_link ? RingAllReduceUs(traced->bucket_bytes[k], n_traced, *traced_link) : -1);
  }

  // 3. Past this machine.
  StepProfile ddp = *traced;
  const double first_mb = absl::GetFlag(FLAGS_first_bucket_mb), cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  if (first_mb > 0 || cap_mb > 0) {
    if (!model) return fail(absl::InvalidArgumentError("--bucket_cap_mb / --first_bucket_mb need --dims"));
    absl::StatusOr<StepProfile> re =
        Rebucket(*traced, *model,
                 static_cast<int64_t>((first_mb > 0 ? first_mb : absl::GetFlag(FLAGS_trace_first_bucket_mb)) * kMiB),
                 static_cast<int64_t>((cap_mb > 0 ? cap_mb : absl::GetFlag(FLAGS_trace_bucket_cap_mb)) * kMiB));
    if (!re.ok()) return fail(re.status());
    ddp = *re;
    std::vector<std::string> resized;
    for (int64_t b : ddp.bucket_bytes) resized.push_back(FormatBytes(b));
    std::printf("\n# re-bucketed: %zu bucket(s) (%s)\n", resized.size(), absl::StrJoin(resized, ", ").c_str());
  }
  std::optional<StepProfile> naive;
  if (model) {
    absl::StatusOr<StepProfile> per_parameter = Rebucket(*traced, *model, 1, 1);
    if (per_parameter.ok()) naive = AfterBackward(*per_parameter);
  }
  const StepProfile flat = Flat(ddp), after = AfterBackward(ddp);
  std::printf(
      "\n# predicted, ring all_reduce: %d GPUs per node over NVLink (alpha %.3g us, busbw %.4g GB/s), "
      "%d x 400 Gb/s NICs per node (alpha %.3g us, busbw %.4g GB/s each), base %.3g us\n",
      cluster.gpus_per_node, cluster.nvlink.alpha_us, cluster.nvlink.busbw_gbps, cluster.nics_per_node,
      cluster.nic.alpha_us, cluster.nic.busbw_gbps, cluster.base_us);
  std::printf(
      "# step per rung of the ladder: naive = one all_reduce per parameter after backward; flat = one of "
      "everything after backward;\n# after bwd = the buckets after backward; ddp = the buckets overlapped "
      "with backward. Compute alone: %s.\n",
      Ms(ddp.ComputeOnlyUs()).c_str());
  std::printf("  %5s %5s %12s %12s %12s %12s %12s %12s %10s\n", "GPUs", "nodes", "naive", "flat", "after bwd", "ddp",
              "ddp exposed", "ddp comm", "ddp eff.");
  ScalingSeries s_naive{"naive: per parameter, after backward", "#b07aa1", {}, false};
  ScalingSeries s_flat{"flat: one all_reduce after backward", "#e15759", {}, false};
  ScalingSeries s_after{"buckets after backward (no overlap)", "#f28e2b", {}, false};
  ScalingSeries s_ddp{"ddp: buckets overlapped with backward", "#4e79a7", {}, false};
  ScalingSeries s_compute{"compute alone", "#59a14f", {}, true};
  ScalingSeries e_ddp = s_ddp, e_after = s_after, e_flat = s_flat, e_naive = s_naive;
  for (double g : *gpus_d) {
    const int n = static_cast<int>(g);
    const int nodes = (n + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
    const StepPrediction p_ddp = PredictStepOn(ddp, n, cluster, /*overlap=*/true);
    const StepPrediction p_after = PredictStepOn(after, n, cluster, /*overlap=*/false);
    const StepPrediction p_flat = PredictStepOn(flat, n, cluster, /*overlap=*/false);
    std::optional<StepPrediction> p_naive;
    if (naive) p_naive = PredictStepOn(*naive, n, cluster, /*overlap=*/false);
    const double compute = ddp.ComputeOnlyUs();
    std::printf("  %5d %5d %12s %12s %12s %12s %12s %12s %9.0f%%\n", n, nodes,
                p_naive ? Ms(p_naive->step_us).c_str() : "-", Ms(p_flat.step_us).c_str(),
                Ms(p_after.step_us).c_str(), Ms(p_ddp.step_us).c_str(), Ms(p_ddp.exposed_us).c_str(),
                Ms(p_ddp.comm_us).c_str(), 100 * compute / p_ddp.step_us);
    if (absl::GetFlag(FLAGS_json)) {
      nlohmann::json j = {{"gpus", n},
                          {"nodes", nodes},
                          {"compute_ms", compute / 1e3},
                          {"flat_ms", p_flat.step_us / 1e3},
                          {"after_backward_ms", p_after.step_us / 1e3},
                          {"ddp_ms", p_ddp.step_us / 1e3},
                          {"ddp_exposed_ms", p_ddp.exposed_us / 1e3},
                          {"ddp_comm_ms", p_ddp.comm_us / 1e3}};
      if (p_naive) j["naive_ms"] = p_naive->step_us / 1e3;
      std::printf("%s\n", j.dump().c_str());
    }
    s_ddp.points.emplace_back(g, p_ddp.step_us / 1e3);
    s_after.points.emplace_back(g, p_after.step_us / 1e3);
    s_flat.points.emplace_back(g, p_flat.step_us / 1e3);
    if (p_naive) s_naive.points.emplace_back(g, p_naive->step_us / 1e3);
    s_compute.points.emplace_back(g, compute / 1e3);
    e_ddp.points.emplace_back(g, 100 * compute / p_ddp.step_us);
    e_after.points.emplace_back(g, 100 * compute / p_after.step_us);
    e_flat.points.emplace_back(g, 100 * compute / p_flat.step_us);
    if (p_naive) e_naive.points.emplace_back(g, 100 * compute / p_naive->step_us);
  }
  const std::string plot = absl::GetFlag(FLAGS_plot);
  if (!plot.empty()) {
    std::vector<ScalingSeries> steps = {s_compute, s_ddp, s_after, s_flat}, efficiency = {e_ddp, e_after, e_flat};
    if (naive) steps.push_back(s_naive), efficiency.push_back(e_naive);
    const std::string svg = RenderScalingSvg(
        "DDP on paper: the traced step on 2 .. 1024 GPUs, ring all_reduce",
        absl::StrCat("compute profile from ", trace_path, "; ", cluster.gpus_per_node, " GPUs/node on NVLink (",
                     cluster.nvlink.busbw_gbps, " GB/s), ", cluster.nics_per_node, " x 400 Gb/s NICs per node (",
                     cluster.nic.busbw_gbps, " GB/s each)"),
        {{"step time (log scale)", "ms per step", true, false, steps},
         {"scaling efficiency: compute alone / step", "% of compute-only speed", false, true, efficiency}});
    std::FILE* f = std::fopen(plot.c_str(), "w");
    if (f == nullptr || std::fputs(svg.c_str(), f) < 0 || std::fclose(f) != 0) {
      return fail(absl::UnavailableError(absl::StrCat("cannot write --plot=", plot)));
    }
    std::printf("# plot: %s\n", plot.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tinyddp::dist

int main(int argc, char** argv) {
  const std::vector<tinyddp::FlagGroup> flags = {
      {"the trace", {"trace", "dims", "bucket_bytes", "trace_first_bucket_mb", "trace_bucket_cap_mb", "steps", "link"}},
      {"the prediction", {"gpus", "first_bucket_mb", "bucket_cap_mb", "plot", "json"}},
      {"the cluster",
       {"gpus_per_node", "nics_per_node", "base_us", "nvlink_alpha_us", "nvlink_busbw_gbps", "nic_alpha_us",
        "nic_busbw_gbps"}},
  };
  absl::StatusOr<tinyddp::CommandLine> command_line =
      tinyddp::ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!command_line.ok()) {
    std::fprintf(stderr, "ddp_cost_model: %s (--help lists the flags)\n",
                 std::string(command_line.status().message()).c_str());
    return 2;
  }
  if (command_line->help) {
    std::printf("usage: ddp_cost_model --trace=FILE.json [flags]\n\n%s", tinyddp::FlagsHelp(flags).c_str());
    return 0;
  }
  if (!command_line->rest.empty()) {
    std::fprintf(stderr, "ddp_cost_model: unexpected argument '%s'\n", command_line->rest.front().c_str());
    return 2;
  }
  return tinyddp::dist::Run();
}
