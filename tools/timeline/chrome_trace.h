// ChromeTrace: a Chrome trace file read back into spans. The tracer (dist/observe/trace/trace.h) writes
// one per run (--trace); chrome://tracing and https://ui.perfetto.dev draw it in a browser; this lets a
// program draw it (timeline_svg.h) and reason about it (step_timeline.h, step_cost_model.h) without one.
// Where the tools/timeline wing starts: it reads files only, and the library never links it.
//
// What is read: "X" (complete) events with pid, tid, ts and dur in microseconds, with three optional
// args: "i" (a step or bucket index), "bytes" and "path" (how an all_reduce was carried: "NCCL
// all_reduce", "copy engines", ...); and the "M" metadata that names processes (one per rank) and
// threads (one per track). Everything else - other phases, other args, other top-level keys - is
// ignored, so a trace that grows new fields still reads. Both forms of the format are accepted: an
// object with "traceEvents" and a bare array of events.
#ifndef TINYDDP_TOOLS_TIMELINE_CHROME_TRACE_H_
#define TINYDDP_TOOLS_TIMELINE_CHROME_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp::dist {

/// One interval on one track.
struct TraceSpan {
  std::string name;
  int64_t start_us = 0;
  int64_t end_us = 0;
  int64_t index = -1;  // args.i: the step or bucket number; -1 when absent
  int64_t bytes = -1;  // args.bytes; -1 when absent
  std::string path;    // args.path; empty when absent
  int64_t duration_us() const { return end_us - start_us; }
};

/// One track of one process (a Chrome "thread").
struct TraceLane {
  int tid = 0;
  std::string name;              // its thread_name, or "tid N"
  std::vector<TraceSpan> spans;  // by start time; at equal starts the longer (enclosing) span first
};

/// One process: in a tinyddp trace, one rank.
struct TraceProcess {
  int pid = 0;
  std::string name;              // its process_name, or "pid N"
  std::vector<TraceLane> lanes;  // by tid
  /// The lane with thread id `tid`, or null.
  const TraceLane* Lane(int tid) const;
};

struct ChromeTrace {
  std::vector<TraceProcess> processes;  // by pid
};

/// Parses the JSON text of a trace. InvalidArgument when it is not JSON, has no event list, or an "X"
/// event lacks a numeric pid, tid, ts or dur (the message names the event's position).
absl::StatusOr<ChromeTrace> ParseChromeTrace(absl::string_view json_text);

/// Reads and parses the file at `path`; NotFound when it cannot be opened, errors name the file.
absl::StatusOr<ChromeTrace> ReadChromeTrace(const std::string& path);

}  // namespace tinyddp::dist

#endif  // TINYDDP_TOOLS_TIMELINE_CHROME_TRACE_H_
