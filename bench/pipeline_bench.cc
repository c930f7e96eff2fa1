// pipeline_bench: the pipeline's bubble measured on real ranks, beside the formula, for each schedule and number
// of microbatches; and the activations each schedule holds, beside theirs. The table of docs/performance.md
// ("Pipeline bubbles, measured") and the picture docs/images/pipeline_schedules.svg.
//
//   ./bazelw run -c opt //bench:pipeline_bench                       # p = 2: starts 2 Gloo ranks itself
//   ./bazelw run -c opt //bench:pipeline_bench -- --pp=4 --svg=pipeline_schedules.svg
//   flags: --pp=P (pipeline ranks, started here; default 2)  --microbatches=1,2,4,8,16
//          --schedules=gpipe,1f1b,interleaved,zb  --virtual_stages=2 (interleaved)  --width=512  --layers=8
//          --rows=32 (per microbatch)  --steps=10 (timed, after --warmup=2)  --json=FILE  --svg=FILE
//          --svg_microbatches=8 (the picture's m)
//          --print_schedules  only print each schedule's table (schedule_printer.h) for --pp and each --microbatches
//                      (no ranks started)
//
// The model: an MLP of --layers Linears, all --width wide (so every stage costs the same: the formula's
// assumption), cut into p stages (p*v for interleaved). A step is M microbatches of --rows rows: the work grows
// with M, and the bubble's share shrinks as (p-1)/(m+p-1) says - if forward and backward each cost the same on
// every stage and messages were free. Neither holds: a backward costs about twice a forward, and each message
// is a Gloo round trip through a worker thread. The table shows what remains.
//
// Measured, per step: every rank's compute intervals (dist/parallel/pipeline/bubble.h), the window from the
// first compute to the last, each rank's idle fraction; reported: the median over --steps of the mean over
// ranks, and the simulated idle of the same schedule with a backward twice a forward (zb: B and W one forward
// each; schedule.h, SimulatedBubble). Each step starts after a barrier. Memory: the most microbatches rank 0 held at once (the
// runtime's count) beside the formula (GPipe m, 1F1B min(m, p)), and the allocator's peak bytes on rank 0
// during the step. Rank 0 prints a table a person reads, then a JSON line per row.
//
// CPU ranks share the machine's cores: run at most one rank per core (p=2 here on 2 cores; p=4, 8 on the GPU
// machine's 16-core host with bench/pipeline_session.sh).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "dist/init.h"
#include "dist/launch/spawn.h"
#include "dist/parallel/pipeline/bubble.h"
#include "dist/parallel/pipeline/pipeline_runtime.h"
#include "dist/parallel/pipeline/schedule.h"
#include "dist/parallel/pipeline/schedule_printer.h"
#include "dist/parallel/pipeline/stage_plan.h"
#include "nlohmann/json.hpp"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "tensor/ops.h"
#include "tools/timeline/pipeline_svg.h"

namespace tinyddp {
namespace {

using dist::pipeline::ScheduleKind;

struct Options {
  int pp = 2;
  std::vector<int> microbatches = {1, 2, 4, 8, 16};
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb"};
  int virtual_stages = 2;
  int64_t width = 512, layers = 8, rows = 32;
  int steps = 10, warmup = 2;
  int svg_microbatches = 8;
  std::string json_path, svg_path;
  bool print_schedules = false;
};

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::vector<std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    const bool has = kv.size() == 2;
    auto ints = [&](std::vector<int>* out) {
      out->clear();
      for (absl::string_view piece : absl::StrSplit(kv[1], ',')) {
        int v = 0;
        if (!absl::SimpleAtoi(piece, &v) || v < 1) return false;
        out->push_back(v);
      }
      return !out->empty();
    };
    if (kv[0] == "--pp" && has && absl::SimpleAtoi(kv[1], &o.pp) && o.pp >= 1) {
    } else if (kv[0] == "--microbatches" && has && ints(&o.microbatches)) {
    } else if (kv[0] == "--schedules" && has) {
      o.schedules = absl::StrSplit(kv[1], ',');
      for (const std::string& s : o.schedules) RETURN_IF_ERROR(dist::pipeline::ParseSchedule(s).status());
    } else if (kv[0] == "--virtual_stages" && has && absl::SimpleAtoi(kv[1], &o.virtual_stages) && o.virtual_stages >= 1) {
    } else if (kv[0] == "--width" && has && absl::SimpleAtoi(kv[1], &o.width) && o.width >= 1) {
    } else if (kv[0] == "--layers" && has && absl::SimpleAtoi(kv[1], &o.layers) && o.layers >= 1) {
    } else if (kv[0] == "--rows" && has && absl::SimpleAtoi(kv[1], &o.rows) && o.rows >= 1) {
    } else if (kv[0] == "--steps" && has && absl::SimpleAtoi(kv[1], &o.steps) && o.steps >= 1) {
    } else if (kv[0] == "--warmup" && has && absl::SimpleAtoi(kv[1], &o.warmup) && o.warmup >= 0) {
    } else if (kv[0] == "--svg_microbatches" && has && absl::SimpleAtoi(kv[1], &o.svg_microbatches)) {
    } else if (kv[0] == "--print_schedules" && !has) {
      o.print_schedules = true;
    } else if (kv[0] == "--json" && has) {
      o.json_path = kv[1];
    } else if (kv[0] == "--svg" && has) {
      o.svg_path = kv[1];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown or bad flag '", argv[i], "' (see the header of "
                                                     "bench/pipeline_bench.cc)"));
    }
  }
  if (o.layers < o.pp) {
    return absl::InvalidArgumentError(absl::StrCat("--layers=", o.layers, " gives fewer stages than --pp=", o.pp));
  }
  return o;
}

struct Row {
  std::string schedule;
  int p = 0, m = 0, v = 1;
  double idle = 0, formula = 0, simulated = 0, step_ms = 0;
  std::vector<double> rank_idle;
  int in_flight = 0, in_flight_formula = 0;
  int64_t peak_bytes = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One (schedule, m) configuration: warm-up, then --steps measured steps. Collective over `pg` (the pipeline).
absl::StatusOr<Row> Measure(const Options& o, dist::ProcessGroup& pg, std::shared_ptr<dist::ProcessGroup> group,
                            ScheduleKind kind, int m, dist::PipelinePanel* panel) {
  const int v = kind == ScheduleKind::kInterleaved ? o.virtual_stages : 1;
  std::vector<int64_t> dims(o.layers + 1, o.width);
  auto model = nn::MLP(dims, {.seed = 1});
  ASSIGN_OR_RETURN(const dist::pipeline::StagePlan plan,
                   dist::pipeline::StagePlan::Make(*model, o.pp * v, kind == ScheduleKind::kInterleaved));
  std::vector<std::shared_ptr<dist::pipeline::PipelineStage>> mine;
  for (int s = pg.rank(); s < o.pp * v; s += o.pp) {
    mine.push_back(std::make_shared<dist::pipeline::PipelineStage>(*model, plan.stages[s]));
  }
  model.reset();
  ASSIGN_OR_RETURN(dist::pipeline::PipelineSchedule schedule,
                   dist::pipeline::MakeSchedule({.kind = kind, .ranks = o.pp, .microbatches = m, .virtual_stages = v}));
  Row row{dist::pipeline::ScheduleName(kind), o.pp, m, v};
  row.formula = schedule.FormulaBubble();
  // A backward twice a forward; zb's split into B and W of one each.
  const std::vector<double> simulated = kind == ScheduleKind::kZeroBubble
                                            ? dist::pipeline::SimulatedBubble(schedule, 1, 1, 1)
                                            : dist::pipeline::SimulatedBubble(schedule, 1, 2);
  for (double s : simulated) row.simulated += s / simulated.size();
  ASSIGN_OR_RETURN(auto runtime, dist::pipeline::PipelineRuntime::Create(
                                     schedule, o.pp > 1 ? group : nullptr, mine,
                                     [](const autograd::Variable& logits, const Tensor& labels) {
                                       return nn::CrossEntropyLoss()(logits, labels);
                                     }));
  const Tensor inputs = Tensor::Full({o.rows * m, o.width}, 0.01);
  std::vector<int64_t> label_values(o.rows * m);
  for (size_t i = 0; i < label_values.size(); ++i) label_values[i] = static_cast<int64_t>(i % o.width);
  const Tensor labels = Tensor::FromVector<int64_t>(label_values, {o.rows * m});
  ASSIGN_OR_RETURN(const auto microbatches, dist::pipeline::SplitBatch(inputs, labels, m));
  std::vector<double> idle, step_ms;
  std::vector<std::vector<double>> rank_idle(o.pp);
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    for (const auto& stage : mine) stage->ZeroGrad();
    RETURN_IF_ERROR(pg.Barrier()->Wait());
    RETURN_IF_ERROR(runtime->Step(microbatches).status());
    ASSIGN_OR_RETURN(const auto computes, dist::pipeline::GatherComputes(o.pp > 1 ? &pg : nullptr, runtime->last_step()));
    if (step < o.warmup) continue;
    const dist::pipeline::StepIdle measured = dist::pipeline::IdleOf(computes);
    idle.push_back(measured.mean_idle);
    step_ms.push_back(measured.window_us / 1000);
    for (int r = 0; r < o.pp; ++r) rank_idle[r].push_back(measured.idle[r]);
    if (panel != nullptr && step + 1 == o.warmup + o.steps) {
      panel->title = absl::StrFormat("%s, p=%d, m=%d%s", row.schedule, o.pp, m, v > 1 ? absl::StrCat(", v=", v) : "");
      panel->computes = computes;
      panel->formula = row.formula;
    }
  }
  row.idle = Median(idle);
  row.step_ms = Median(step_ms);
  for (int r = 0; r < o.pp; ++r) row.rank_idle.push_back(Median(rank_idle[r]));
  row.in_flight = runtime->last_step().peak_in_flight;
  // GPipe holds all m, 1F1B at most p; interleaved: its warm-up's count, from the schedule itself.
  row.in_flight_formula = kind == ScheduleKind::kGPipe                                        ? m
                          : kind == ScheduleKind::kOneFOneB || kind == ScheduleKind::kZeroBubble ? std::min(m, o.pp)
                                                            : dist::pipeline::PeakMicrobatchesInFlight(schedule, 0);
  row.peak_bytes = runtime->last_step().peak_bytes;
  return row;
}

int Run(const Options& o) {
  dist::InitOptions init;
  init.backend = dist::Backend::kGloo;
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::InitProcessGroup(init);
  if (!pg.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", std::string(pg.status().message()).c_str());
    return 1;
  }
  if ((*pg)->size() != o.pp) {
    std::fprintf(stderr, "pipeline_bench: --pp=%d needs %d ranks, the job has %d (start it with TINYDDP_NPROC unset "
                 "or equal to --pp)\n", o.pp, o.pp, (*pg)->size());
    return 2;
  }
  const bool lead = (*pg)->rank() == 0;
  std::vector<Row> rows;
  std::vector<dist::PipelinePanel> panels;
  for (const std::string& name : o.schedules) {
    const ScheduleKind kind = dist::pipeline::ParseSchedule(name).value();
    for (int m : o.microbatches) {
      const int v = kind == ScheduleKind::kInterleaved ? o.virtual_stages : 1;
      if (kind == ScheduleKind::kInterleaved && (m % o.pp != 0 || o.layers % (o.pp * v) != 0 || o.pp < 2)) continue;
      dist::PipelinePanel panel;
      absl::StatusOr<Row> row = Measure(o, **pg, *pg, kind, m, m == o.svg_microbatches ? &panel : nullptr);
      if (!row.ok()) {
        std::fprintf(stderr, "pipeline_bench: rank %d: %s\n", (*pg)->rank(), std::string(row.status().message()).c_str());
        return 1;
      }
      rows.push_back(*row);
      if (!panel.computes.empty()) panels.push_back(panel);
    }
  }
  if (lead) {
    std::printf("pipeline_bench: p=%d Gloo ranks, MLP of %d Linears %d wide, %d rows per microbatch, median of %d "
                "steps\n", o.pp, static_cast<int>(o.layers), static_cast<int>(o.width), static_cast<int>(o.rows),
                o.steps);
    std::printf("%-12s %3s %3s %3s %9s %9s %9s %9s %-24s %12s %14s\n", "schedule", "p", "m", "v", "idle", "formula",
                "sim F:B=1:2", "step ms", "idle per rank", "in flight", "peak bytes r0");
    std::string json;
    for (const Row& r : rows) {
      std::vector<std::string> per_rank;
      for (double x : r.rank_idle) per_rank.push_back(absl::StrFormat("%.1f%%", 100 * x));
      std::printf("%-12s %3d %3d %3d %8.1f%% %8.1f%% %8.1f%% %9.2f %-24s %5d (<=%3d) %14lld\n", r.schedule.c_str(), r.p,
                  r.m, r.v, 100 * r.idle, 100 * r.formula, 100 * r.simulated, r.step_ms,
                  absl::StrJoin(per_rank, " ").c_str(), r.in_flight, r.in_flight_formula,
                  static_cast<long long>(r.peak_bytes));
      nlohmann::json line = {{"bench", "pipeline"}, {"schedule", r.schedule}, {"p", r.p}, {"m", r.m}, {"v", r.v},
                             {"idle", r.idle}, {"formula", r.formula}, {"simulated_f1_b2", r.simulated},
                             {"step_ms", r.step_ms}, {"idle_per_rank", r.rank_idle}, {"in_flight_rank0", r.in_flight},
                             {"in_flight_formula", r.in_flight_formula}, {"peak_bytes_rank0", r.peak_bytes},
                             {"width", o.width}, {"layers", o.layers}, {"rows", o.rows}};
      absl::StrAppend(&json, line.dump(), "\n");
    }
    if (!o.json_path.empty()) {
      std::ofstream(o.json_path) << json;
      std::printf("# JSON lines: %s\n", o.json_path.c_str());
    } else {
      std::printf("%s", json.c_str());
    }
    if (!o.svg_path.empty() && !panels.empty()) {
      std::ofstream(o.svg_path) << dist::PipelineSvg(
          panels, absl::StrFormat("One training step of %d microbatches on %d Gloo ranks, measured (bench/pipeline_bench)",
                                  o.svg_microbatches, o.pp));
      std::printf("# picture: %s\n", o.svg_path.c_str());
    }
  }
  return (*pg)->Barrier()->Wait().ok() ? 0 : 1;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  const absl::StatusOr<tinyddp::Options> options = tinyddp::ParseFlags(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->print_schedules) {  // the tables alone, no ranks
    for (const std::string& name : options->schedules) {
      for (int m : options->microbatches) {
        const auto kind = tinyddp::dist::pipeline::ParseSchedule(name).value();
        const int v = kind == tinyddp::dist::pipeline::ScheduleKind::kInterleaved ? options->virtual_stages : 1;
        auto schedule = tinyddp::dist::pipeline::MakeSchedule(
            {.kind = kind, .ranks = options->pp, .microbatches = m, .virtual_stages = v});
        if (schedule.ok()) std::printf("%s\n", tinyddp::dist::pipeline::FormatPipelineOrder(*schedule, false).c_str());
      }
    }
    return 0;
  }
  if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv, {.nproc = options->pp}); !s.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return tinyddp::Run(*options);
}
