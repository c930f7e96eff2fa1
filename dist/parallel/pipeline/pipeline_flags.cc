// The pipeline's flags, checked (pipeline_flags.h).
#include "dist/parallel/pipeline/pipeline_flags.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace tinyddp::dist::pipeline {

ScheduleOptions PipelineFlags::ToScheduleOptions() const {
  return {.kind = ParseSchedule(schedule).value(),
          .ranks = static_cast<int>(pp),
          .microbatches = static_cast<int>(resolved_microbatches()),
          .virtual_stages = static_cast<int>(virtual_stages)};
}

absl::Status CheckPipelineFlags(const PipelineFlags& f, int64_t linears, int64_t batch_size) {
  if (f.pp < 1 || f.pp > 1024) {
    return absl::InvalidArgumentError(absl::StrFormat("--pp: must be in [1, 1024] pipeline stages, got %d", f.pp));
  }
  ASSIGN_OR_RETURN(const ScheduleKind kind, ParseSchedule(f.schedule));
  if (f.virtual_stages < 1 || f.virtual_stages > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--pp_virtual_stages: must be in [1, 64], got %d", f.virtual_stages));
  }
  const int64_t stages = f.pp * f.virtual_stages;
  if (stages > linears) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pp=%d%s asks for %d pipeline stages, but the MLP has %d Linear layers (--hidden gives %d widths) and "
        "a stage needs at least one: use --pp <= %d, or more layers with --hidden",
        f.pp, f.virtual_stages > 1 ? absl::StrFormat(" x --pp_virtual_stages=%d", f.virtual_stages) : "", stages,
        linears, linears - 1, linears / f.virtual_stages));
  }
  const int64_t m = f.resolved_microbatches();
  if (f.microbatches < 0 || m > batch_size || batch_size % m != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--microbatches=%d: must divide --batch_size=%d (the rows each pipeline's step cuts into microbatches of "
        "equal size)%s; use a divisor of %d, or change --batch_size",
        m, batch_size, f.microbatches == 0 ? " (it defaults to --pp)" : "", batch_size));
  }
  if (kind == ScheduleKind::kInterleaved && linears % stages != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pp_schedule=interleaved: the MLP's %d Linear layers do not split evenly into %d stages (--pp=%d x "
        "--pp_virtual_stages=%d); give --hidden %d widths (%d Linears), or change --pp or --pp_virtual_stages",
        linears, stages, f.pp, f.virtual_stages, stages * ((linears + stages - 1) / stages) - 1,
        stages * ((linears + stages - 1) / stages)));
  }
  // What the schedule itself refuses: v without interleaved, interleaved's m, zb.
  const absl::Status schedule = MakeSchedule(f.ToScheduleOptions()).status();
  if (!schedule.ok()) return absl::InvalidArgumentError(schedule.message());
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::pipeline
