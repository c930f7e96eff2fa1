// Cutting a trace into steps and finding the exposed communication (tools/timeline/step_timeline.h).
#include "tools/timeline/step_timeline.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tinyddp::dist {
namespace {

constexpr int64_t kNoTime = std::numeric_limits<int64_t>::max();

// Start times of the spans that open steps on `lane`: "forward", else "step", else "backward".
std::vector<int64_t> StepMarkers(const TraceLane* lane) {
  if (lane == nullptr) return {};
  for (const char* name : {"forward", "step", "backward"}) {
    std::vector<int64_t> starts;
    for (const TraceSpan& s : lane->spans) {
      if (s.name == name) starts.push_back(s.start_us);
    }
    if (!starts.empty()) return starts;
  }
  return {};
}

int64_t LastEnd(const TraceProcess& p) {
  int64_t end = 0;
  for (const TraceLane& lane : p.lanes) {
    for (const TraceSpan& s : lane.spans) end = std::max(end, s.end_us);
  }
  return end;
}

int64_t FirstStart(const TraceProcess& p) {
  int64_t start = kNoTime;
  for (const TraceLane& lane : p.lanes) {
    if (!lane.spans.empty()) start = std::min(start, lane.spans.front().start_us);
  }
  return start;
}

// The spans of `lane` that start in [from, to).
std::vector<TraceSpan> SpansIn(const TraceLane* lane, int64_t from, int64_t to) {
  std::vector<TraceSpan> out;
  if (lane == nullptr) return out;
  for (const TraceSpan& s : lane->spans) {
    if (s.start_us >= from && s.start_us < to) out.push_back(s);
  }
  return out;
}

std::string BackendFromLaneName(const std::string& lane_name) {
  const std::string lower = absl::AsciiStrToLower(lane_name);
  if (absl::StrContains(lower, "gloo")) return "Gloo";
  if (absl::StrContains(lower, "nccl")) return "NCCL";
  return "";
}

// Where backward's own computation ended: the estimate of the header, for the backward span `b`.
int64_t BackwardComputeEnd(const TraceSpan& b, const std::vector<TraceSpan>& compute,
                           const std::vector<BucketComm>& comm) {
  int64_t end = b.end_us;
  int64_t last_comm_start = -1;
  for (const BucketComm& c : comm) {
    if (c.start_us > b.start_us && c.start_us <= b.end_us) last_comm_start = std::max(last_comm_start, c.start_us);
  }
  if (last_comm_start >= 0) end = std::min(end, last_comm_start);
  for (const TraceSpan& s : compute) {
    const bool nested = s.start_us > b.start_us && s.end_us <= b.end_us && &s != &b;
    // An update inside backward (--optimizer_in_backward) runs between gradients: backward computes on after it.
    if (nested && s.name != "backward" && s.name != kUpdateInBackward) end = std::min(end, s.start_us);
  }
  return end;
}

// Fills the step's backward estimates, busy and exposed time.
void Analyse(RankStep& step) {
  std::vector<TimeInterval> busy;
  for (const TraceSpan& s : step.compute) {
    if (s.name == "step") continue;  // encloses the others, computes nothing of its own
    if (HasParts(s, step.compute)) continue;  // busy in its parts (spans of their own), waiting between them
    if (s.name == "backward") {
      const TimeInterval own{s.start_us, BackwardComputeEnd(s, step.compute, step.comm)};
      step.backward_compute.push_back(own);
      busy.push_back(own);
    } else {
      busy.push_back({s.start_us, s.end_us});
    }
  }
  step.busy = UnionOf(std::move(busy));
  std::vector<TimeInterval> comm;
  for (const BucketComm& c : step.comm) {
    comm.push_back({std::max(c.start_us, step.start_us), std::min(c.end_us, step.end_us)});
  }
  step.exposed = Subtract(UnionOf(std::move(comm)), step.busy);
}

}  // namespace

bool IsPartOf(const TraceSpan& span, const TraceSpan& phase) {
  return (phase.name == "forward" || phase.name == "backward") && span.start_us >= phase.start_us &&
         span.end_us <= phase.end_us && absl::StartsWith(span.name, phase.name + " ");
}

bool HasParts(const TraceSpan& phase, const std::vector<TraceSpan>& compute) {
  return std::any_of(compute.begin(), compute.end(), [&](const TraceSpan& s) { return IsPartOf(s, phase); });
}

std::vector<TimeInterval> UnionOf(std::vector<TimeInterval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const TimeInterval& a, const TimeInterval& b) { return a.start_us < b.start_us; });
  std::vector<TimeInterval> out;
  for (const TimeInterval& i : intervals) {
    if (i.length_us() == 0) continue;
    if (!out.empty() && i.start_us <= out.back().end_us) {
      out.back().end_us = std::max(out.back().end_us, i.end_us);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

std::vector<TimeInterval> Subtract(const std::vector<TimeInterval>& from, const std::vector<TimeInterval>& minus) {
  std::vector<TimeInterval> out;
  size_t j = 0;
  for (TimeInterval piece : from) {
    while (j < minus.size() && minus[j].end_us <= piece.start_us) ++j;
    for (size_t k = j; k < minus.size() && minus[k].start_us < piece.end_us; ++k) {
      if (minus[k].start_us > piece.start_us) out.push_back({piece.start_us, minus[k].start_us});
      piece.start_us = std::max(piece.start_us, minus[k].end_us);
    }
    if (piece.length_us() > 0) out.push_back(piece);
  }
  return out;
}

int64_t RankStep::ExposedUs() const {
  int64_t total = 0;
  for (const TimeInterval& i : exposed) total += i.length_us();
  return total;
}

int64_t RankStep::CommUs() const {
  std::vector<TimeInterval> comm_spans;
  for (const BucketComm& c : comm) comm_spans.push_back({std::max(c.start_us, start_us), std::min(c.end_us, end_us)});
  int64_t total = 0;
  for (const TimeInterval& i : UnionOf(std::move(comm_spans))) total += i.length_us();
  return total;
}

int64_t RankStep::SpanUs(const std::string& name) const {
  int64_t total = 0;
  for (const TraceSpan& s : compute) {
    if (s.name == name) total += TimeInterval{s.start_us, std::min(s.end_us, end_us)}.length_us();
  }
  return total;
}

namespace {

template <typename F>
double MeanOver(const StepTimeline& t, F per_rank_step) {
  double sum = 0;
  int count = 0;
  for (const std::vector<RankStep>& step : t.steps) {
    for (const RankStep& r : step) {
      sum += static_cast<double>(per_rank_step(r));
      ++count;
    }
  }
  return count > 0 ? sum / count : 0.0;
}

}  // namespace

double StepTimeline::MeanStepUs() const {
  return MeanOver(*this, [](const RankStep& r) { return r.step_us(); });
}
double StepTimeline::MeanExposedUs() const {
  return MeanOver(*this, [](const RankStep& r) { return r.ExposedUs(); });
}
double StepTimeline::MeanCommUs() const {
  return MeanOver(*this, [](const RankStep& r) { return r.CommUs(); });
}
double StepTimeline::MeanSpanUs(const std::string& name) const {
  return MeanOver(*this, [&name](const RankStep& r) { return r.SpanUs(name); });
}

absl::StatusOr<StepTimeline> BuildStepTimeline(const ChromeTrace& trace, const StepTimelineOptions& options) {
  StepTimeline t;
  bool any_span = false;
  for (const TraceProcess& p : trace.processes) {
    for (const TraceLane& lane : p.lanes) any_span = any_span || !lane.spans.empty();
    t.on_gpu = t.on_gpu || p.Lane(kComputeLaneTid) != nullptr;
  }
  if (!any_span) {
    return absl::FailedPreconditionError("the trace holds no span (was tracing on while the steps ran?)");
  }
  // Per rank: its lanes and the start of each of its steps.
  struct RankLanes {
    const TraceProcess* process;
    const TraceLane* compute;
    const TraceLane* host;  // GPU traces only
    const TraceLane* comm;
    std::vector<int64_t> markers;
  };
  std::vector<RankLanes> ranks;
  for (const TraceProcess& p : trace.processes) {
    RankLanes r{&p,
                p.Lane(t.on_gpu ? kComputeLaneTid : kHostLaneTid),
                t.on_gpu ? p.Lane(kHostLaneTid) : nullptr,
                p.Lane(kCommLaneTid),
                {}};
    r.markers = StepMarkers(r.compute);
    if (r.markers.empty()) r.markers = {FirstStart(p)};  // no markers: the whole trace is one step
    ranks.push_back(std::move(r));
    t.rank_names.push_back(p.name);
  }
  t.comm_lane_name = ranks.front().comm != nullptr ? ranks.front().comm->name : "";
  t.backend = BackendFromLaneName(t.comm_lane_name);
  t.total_steps = static_cast<int>(ranks.front().markers.size());
  for (const RankLanes& r : ranks) t.total_steps = std::min<int>(t.total_steps, r.markers.size());
  const int shown = options.last_steps > 0 ? std::min(options.last_steps, t.total_steps) : t.total_steps;
  t.first_step = t.total_steps - shown;

  for (int k = t.first_step; k < t.total_steps; ++k) {
    std::vector<RankStep> step;
    for (const RankLanes& r : ranks) {
      RankStep s;
      s.start_us = r.markers[k];
      s.end_us = k + 1 < static_cast<int>(r.markers.size()) ? r.markers[k + 1] : LastEnd(*r.process);
      s.compute = SpansIn(r.compute, s.start_us, s.end_us);
      if (r.host != nullptr) {
        for (const TraceSpan& h : r.host->spans) {
          if (h.end_us > s.start_us && h.start_us < s.end_us) s.host.push_back(h);
        }
      }
      for (const TraceSpan& c : SpansIn(r.comm, s.start_us, s.end_us)) {
        BucketComm b{c.name, static_cast<int>(c.index), c.start_us, c.end_us, c.bytes, c.path};
        if (b.bytes < 0 && b.bucket >= 0 && b.bucket < static_cast<int>(options.bucket_bytes.size())) {
          b.bytes = options.bucket_bytes[b.bucket];
        }
        // Gloo has one path; a GPU group may have several (NCCL's kernels, the copy engines), which only
        // the trace can say.
        if (b.path.empty() && t.backend == "Gloo") b.path = "Gloo";
        s.comm.push_back(std::move(b));
      }
      Analyse(s);
      step.push_back(std::move(s));
    }
    t.steps.push_back(std::move(step));
  }
  return t;
}

}  // namespace tinyddp::dist
