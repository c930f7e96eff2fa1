// The schedule table (schedule_printer.h).
#include "dist/parallel/pipeline/schedule_printer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist::pipeline {

std::string FormatPipelineOrder(const PipelineSchedule& schedule, bool with_actions) {
  const ScheduleOptions& o = schedule.options;
  const std::vector<std::vector<TimedAction>> timeline = SimulatedTimeline(schedule, 1, 1);
  int64_t slots = 0;
  size_t width = 1;
  for (const auto& row : timeline) {
    if (!row.empty()) slots = std::max(slots, row.back().end);
    for (const TimedAction& t : row) width = std::max(width, t.action.ToString().size());
  }
  std::string out = absl::StrFormat(
      "%s, p=%d, m=%d%s (%s one slot each; \".\" idle: the bubble, formula %s = %.0f%%)\n",
      ScheduleName(o.kind), o.ranks, o.microbatches, o.virtual_stages > 1 ? absl::StrCat(", v=", o.virtual_stages) : "",
      o.kind == ScheduleKind::kZeroBubble ? "F, B and W" : "F and B",
      o.kind == ScheduleKind::kZeroBubble ? "(p-1)/(3m+p-1)"
      : o.virtual_stages > 1              ? "(p-1)/(v*m+p-1)"
                                          : "(p-1)/(m+p-1)",
      100 * schedule.FormulaBubble());
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    std::vector<std::string> cells(slots, ".");
    for (const TimedAction& t : timeline[r]) cells[t.start] = t.action.ToString();
    for (std::string& c : cells) c.resize(width, ' ');
    absl::StrAppend(&out, absl::StrFormat("rank %d | ", r), absl::StripTrailingAsciiWhitespace(absl::StrJoin(cells, " ")),
                    "\n");
  }
  if (!with_actions) return out;
  absl::StrAppend(&out, "each rank's actions in issue order (the sends and receives between two computes go out "
                        "as one BatchSendRecv; a compute waits only for the call holding its receive):\n");
  for (int r = 0; r < schedule.num_ranks(); ++r) {
    std::vector<std::string> names;
    for (const Action& a : schedule.ranks[r]) names.push_back(a.ToString());
    absl::StrAppend(&out, absl::StrFormat("rank %d: ", r), absl::StrJoin(names, " "), "\n");
  }
  return out;
}

}  // namespace tinyddp::dist::pipeline
