// Reading a Chrome trace (tools/timeline/chrome_trace.h) with nlohmann-json: metadata first names the
// processes and threads, then every "X" event becomes a span on its lane.
#include "tools/timeline/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tinyddp::dist {
namespace {

using nlohmann::json;

// A number field as an integer (Chrome allows fractional microseconds: rounded), or nothing.
bool IntField(const json& event, const char* key, int64_t* out) {
  auto it = event.find(key);
  if (it == event.end() || !it->is_number()) return false;
  *out = it->is_number_float() ? static_cast<int64_t>(std::llround(it->get<double>())) : it->get<int64_t>();
  return true;
}

// The event list: {"traceEvents": [...]} or a bare [...].
const json* EventList(const json& doc) {
  if (doc.is_array()) return &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it != doc.end() && it->is_array()) return &*it;
  }
  return nullptr;
}

}  // namespace

const TraceLane* TraceProcess::Lane(int tid) const {
  for (const TraceLane& lane : lanes) {
    if (lane.tid == tid) return &lane;
  }
  return nullptr;
}

absl::StatusOr<ChromeTrace> ParseChromeTrace(absl::string_view json_text) {
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("not JSON (", e.what(), ")"));
  }
  const json* events = EventList(doc);
  if (events == nullptr) {
    return absl::InvalidArgumentError(
        "no event list: expected {\"traceEvents\": [...]} or [...] (a Chrome trace, as --trace writes)");
  }
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<std::pair<int, int>, std::vector<TraceSpan>> spans;  // (pid, tid) -> spans
  for (size_t n = 0; n < events->size(); ++n) {
    const json& e = (*events)[n];
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    int64_t pid = 0, tid = 0;
    const bool has_pid = IntField(e, "pid", &pid), has_tid = IntField(e, "tid", &tid);
    if (ph == "M") {
      auto args = e.find("args");
      if (!has_pid || args == e.end() || !args->is_object() || !args->contains("name")) continue;
      if (!(*args)["name"].is_string()) continue;
      const std::string name = (*args)["name"].get<std::string>();
      if (e.value("name", "") == "process_name") process_names[pid] = name;
      if (e.value("name", "") == "thread_name" && has_tid) thread_names[{pid, tid}] = name;
      continue;
    }
    if (ph != "X") continue;  // instant, counter, begin/end, flow events: not drawn here
    TraceSpan span;
    int64_t ts = 0, dur = 0;
    if (!has_pid || !has_tid || !IntField(e, "ts", &ts) || !IntField(e, "dur", &dur)) {
      return absl::InvalidArgumentError(absl::StrCat("event #", n,
                                                     " (\"ph\":\"X\") lacks a numeric pid, tid, ts "
                                                     "or dur: ",
                                                     e.dump().substr(0, 200)));
    }
    span.name = e.value("name", "");
    span.start_us = ts;
    span.end_us = ts + std::max<int64_t>(dur, 0);
    if (auto args = e.find("args"); args != e.end() && args->is_object()) {
      IntField(*args, "i", &span.index);
      IntField(*args, "bytes", &span.bytes);
      if (auto path = args->find("path"); path != args->end() && path->is_string())
        span.path = path->get<std::string>();
    }
    spans[{static_cast<int>(pid), static_cast<int>(tid)}].push_back(std::move(span));
  }

  ChromeTrace trace;
  std::map<int, TraceProcess> processes;
  for (auto& [key, list] : spans) {
    std::sort(list.begin(), list.end(), [](const TraceSpan& a, const TraceSpan& b) {
      return a.start_us != b.start_us ? a.start_us < b.start_us : a.end_us > b.end_us;
    });
    TraceProcess& p = processes[key.first];
    p.pid = key.first;
    TraceLane lane;
    lane.tid = key.second;
    auto name = thread_names.find(key);
    lane.name = name != thread_names.end() ? name->second : absl::StrCat("tid ", key.second);
    lane.spans = std::move(list);
    p.lanes.push_back(std::move(lane));  // spans is a map: lanes arrive sorted by tid
  }
  for (auto& [pid, p] : processes) {
    auto name = process_names.find(pid);
    p.name = name != process_names.end() ? name->second : absl::StrCat("pid ", pid);
    trace.processes.push_back(std::move(p));
  }
  return trace;
}

absl::StatusOr<ChromeTrace> ReadChromeTrace(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("trace '", path, "': cannot open it"));
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<ChromeTrace> trace = ParseChromeTrace(text.str());
  if (!trace.ok()) {
    return absl::Status(trace.status().code(), absl::StrCat("trace '", path, "': ", trace.status().message()));
  }
  return trace;
}

}  // namespace tinyddp::dist
