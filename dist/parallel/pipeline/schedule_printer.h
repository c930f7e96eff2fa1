// FormatPipelineOrder: a schedule as the table every pipeline explainer draws, for rank 0 to print (the idea
// of PyTorch's torch.distributed.pipelining _format_pipeline_order). A piece of the pipeline wing.
//
//   1f1b, p=2, m=4 (F and B one slot each; "." idle: the bubble, formula (p-1)/(m+p-1) = 20%)
//   rank 0 | 0F0 0F1 .   0B0 0F2 0B1 0F3 0B2 .   0B3
//   rank 1 | .   1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3 .
//
// The grid places each rank's compute actions in time by running the schedule (SimulatedTimeline) with
// every action one slot long and messages free, so the bubbles are the schedule's own, not a measurement;
// below it, each rank's whole action list (receives and sends included) in the order the runtime issues it.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_SCHEDULE_PRINTER_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_SCHEDULE_PRINTER_H_

#include <string>

#include "dist/parallel/pipeline/schedule.h"

namespace tinyddp::dist::pipeline {

/// The rank x time grid, and with `with_actions` each rank's full action list too. Precondition: the
/// schedule passed ValidateSchedule.
std::string FormatPipelineOrder(const PipelineSchedule& schedule, bool with_actions = true);

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_SCHEDULE_PRINTER_H_
