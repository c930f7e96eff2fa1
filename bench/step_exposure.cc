// StepExposure (bench/step_exposure.h).
#include "bench/step_exposure.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tinyddp::bench {
namespace {

struct Span {
  std::string name;
  int tid = 0;
  int64_t start = 0, end = 0;
};
struct Interval {
  int64_t start = 0, end = 0;
};

// Sorted, merged, non-empty.
std::vector<Interval> Union(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.end <= i.start) continue;
    if (!out.empty() && i.start <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

int64_t Length(const std::vector<Interval>& v) {
  int64_t n = 0;
  for (const Interval& i : v) n += i.end - i.start;
  return n;
}

// Length of `from` minus `minus` (both merged by Union).
int64_t LengthOutside(const std::vector<Interval>& from, const std::vector<Interval>& minus) {
  int64_t n = 0;
  for (const Interval& f : from) {
    int64_t covered = 0;
    for (const Interval& m : minus) covered += std::max<int64_t>(0, std::min(f.end, m.end) - std::max(f.start, m.start));
    n += (f.end - f.start) - covered;
  }
  return n;
}

}  // namespace

absl::StatusOr<StepExposure> MeasureStepExposure(absl::string_view events_json) {
  std::string text(events_json);
  if (text.find_first_not_of(" \n\t") == std::string::npos || text[text.find_first_not_of(" \n\t")] != '[') {
    text = absl::StrCat("[", text, "]");
  }
  const nlohmann::json events = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (events.is_discarded() || !events.is_array()) {
    return absl::InvalidArgumentError("step exposure: the trace events are not a JSON array");
  }
  std::vector<Span> spans;
  bool gpu = false;
  for (const nlohmann::json& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const int64_t ts = e.value("ts", int64_t{0});
    spans.push_back({e.value("name", ""), e.value("tid", 0), ts, ts + e.value("dur", int64_t{0})});
    gpu = gpu || spans.back().tid == 1;
  }
  const int lane = gpu ? 1 : 0;  // the compute lane
  StepExposure out;
  for (const Span& step : spans) {
    if (step.tid != lane || step.name != "step") continue;
    const auto in_step = [&](const Span& s) { return s.start >= step.start && s.start < step.end; };
    std::vector<Interval> comm, busy;
    for (const Span& s : spans) {
      if (s.tid == 2 && in_step(s)) comm.push_back({s.start, s.end});
    }
    std::sort(comm.begin(), comm.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
    for (const Span& s : spans) {
      if (s.tid != lane || s.name == "step" || !in_step(s)) continue;
      int64_t end = s.end;
      if (s.name == "backward") {  // its own computation ends where the last bucket started, or earlier
        for (const Interval& c : comm) {
          if (c.start >= s.start && c.start < s.end) end = c.start;  // comm is in start order
        }
        for (const Span& n : spans) {
          if (n.tid == lane && n.name != "backward" && n.name != "step" && n.start >= s.start && n.end <= s.end) {
            end = std::min(end, n.start);
          }
        }
      }
      busy.push_back({s.start, end});
    }
    const std::vector<Interval> comm_union = Union(comm);
    ++out.steps;
    out.step_us += static_cast<double>(step.end - step.start);
    out.comm_us += static_cast<double>(Length(comm_union));
    out.exposed_us += static_cast<double>(LengthOutside(comm_union, Union(busy)));
  }
  if (out.steps == 0) return absl::FailedPreconditionError("step exposure: the trace holds no \"step\" span");
  out.step_us /= out.steps;
  out.comm_us /= out.steps;
  out.exposed_us /= out.steps;
  return out;
}

}  // namespace tinyddp::bench
