// The pipeline's command-line settings (ddp_mlp's --pp, --pp_schedule, --microbatches, --pp_virtual_stages),
// checked together, a piece of the pipeline wing: the program parses the flags, the wing says what is wrong
// with them and what to do instead, before any worker starts.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_FLAGS_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "dist/parallel/pipeline/schedule.h"

namespace tinyddp::dist::pipeline {

struct PipelineFlags {
  int64_t pp = 1;                 // pipeline ranks per data-parallel replica
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb
  int64_t microbatches = 0;       // 0: --pp
  int64_t virtual_stages = 1;     // interleaved only

  /// The pipeline path runs: more than one stage, or microbatches asked for (at --pp=1: the reference).
  bool on() const { return pp > 1 || microbatches > 0; }
  int64_t resolved_microbatches() const { return microbatches > 0 ? microbatches : pp; }
  /// Precondition: CheckPipelineFlags passed.
  ScheduleOptions ToScheduleOptions() const;
};

/// InvalidArgument naming the flag and the fix for: --pp outside [1, 1024]; an unknown --pp_schedule;
/// --microbatches < 0, above --batch_size or not dividing it; --pp_virtual_stages without
/// interleaved; more stages (--pp x --pp_virtual_stages) than the MLP's `linears` Linear layers; interleaved
/// with a layer count that is not a multiple of the stages, or --microbatches not a multiple of --pp.
absl::Status CheckPipelineFlags(const PipelineFlags& flags, int64_t linears, int64_t batch_size);

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_PIPELINE_FLAGS_H_
