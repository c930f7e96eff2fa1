// Drawing a StepTimeline (tools/timeline/timeline_svg.h): a header with the step's numbers, a time
// axis, per rank its lanes (host on GPUs, compute, communication), then a legend and the bucket table.
#include "tools/timeline/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tools/timeline/svg_canvas.h"

namespace tinyddp::dist {
namespace {

using Style = SvgCanvas::TextStyle;

constexpr double kLeft = 210;  // the label column
constexpr double kRight = 30;
constexpr double kHostHeight = 18;
constexpr double kLaneHeight = 38;
constexpr double kLaneGap = 6;
constexpr double kRankGap = 30;     // room for the "exposed" labels under a rank's communication lane
constexpr double kRankHeader = 22;  // "rank 0  exposed ... per step", and the step labels
constexpr char kExposedRed[] = "#d62728";

const char* PhaseColor(const std::string& name) {
  if (name == "forward") return "#4e79a7";
  if (name == "backward") return "#59a14f";
  if (absl::StartsWith(name, "optimizer")) return "#f28e2b";
  return "#9d9d9d";
}

const char* BucketColor(int bucket) {
  static const char* kColors[] = {"#6a51a3", "#2b8cbe", "#1b9e77", "#9e6ab8", "#5aa6d6", "#3d8f6d"};
  return kColors[(bucket < 0 ? 0 : bucket) % 6];
}

// The time window drawn and its mapping to x.
struct Frame {
  int64_t t0 = 0, t1 = 1;
  double x0 = kLeft, width = 1;
  double X(int64_t t) const { return x0 + width * static_cast<double>(t - t0) / static_cast<double>(t1 - t0); }
  double W(int64_t a, int64_t b) const { return X(b) - X(a); }
};

// A label inside a bar when it fits: the first of `choices` that does, else nothing.
void LabelInside(SvgCanvas& svg, double x, double w, double y, const std::vector<std::string>& choices,
                 const std::string& color = "white", double size = 11) {
  for (const std::string& text : choices) {
    if (TextWidth(text, size) + 6 <= w) {
      svg.Text(x + w / 2, y, text, {.size = size, .fill = color, .anchor = "middle", .halo = color == "white"});
      return;
    }
  }
}

std::string Patterns() {
  return "<pattern id=\"wait\" patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\" "
         "patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#cfe6c9\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"#59a14f\" stroke-width=\"2.5\"/></pattern>\n"
         "<pattern id=\"exposed\" patternUnits=\"userSpaceOnUse\" width=\"7\" height=\"7\" "
         "patternTransform=\"rotate(-45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"7\" stroke=\"#d62728\" "
         "stroke-width=\"2\"/></pattern>\n";
}

std::string StepWord(const StepTimeline& t) {
  const int shown = static_cast<int>(t.steps.size());
  if (shown == 1) return absl::StrCat("step ", t.first_step + 1, " of ", t.total_steps);
  return absl::StrCat("steps ", t.first_step + 1, "-", t.first_step + shown, " of ", t.total_steps);
}

std::string BackendWord(const StepTimeline& t) {
  return absl::StrCat(t.num_ranks(), t.num_ranks() == 1 ? " rank" : " ranks", t.backend.empty() ? "" : " over ",
                      t.backend, t.on_gpu ? " (GPUs)" : " (CPU)");
}

void DrawHeader(SvgCanvas& svg, const StepTimeline& t, const TimelineSvgOptions& o) {
  svg.Text(16, 28, absl::StrCat(o.title, ": ", BackendWord(t), ", ", StepWord(t)), {.size = 18, .bold = true});
  if (!o.source.empty()) svg.Text(16, 48, o.source, {.size = 12, .fill = "#555", .mono = true});
  const double step = t.MeanStepUs(), exposed = t.MeanExposedUs();
  std::string wait;
  double waiting = 0;
  int n = 0;
  for (const auto& s : t.steps) {
    for (const RankStep& r : s) {
      for (const TraceSpan& span : r.compute) {
        if (span.name != "backward") continue;
        for (const TimeInterval& own : r.backward_compute) {
          if (own.start_us == span.start_us) waiting += static_cast<double>(span.end_us - own.end_us);
        }
      }
      ++n;
    }
  }
  if (n > 0 && waiting > 0) wait = absl::StrCat(" (its last ", FormatDurationUs(waiting / n), " waiting)");
  svg.Text(16, 70,
           absl::StrCat("per step (mean of the steps and ranks shown): step ", FormatDurationUs(step), "  |  forward ",
                        FormatDurationUs(t.MeanSpanUs("forward")), "  |  backward ",
                        FormatDurationUs(t.MeanSpanUs("backward")), wait, "  |  communication ",
                        FormatDurationUs(t.MeanCommUs())),
           {.size = 13});
  svg.Text(16, 90,
           absl::StrCat("exposed communication (no computation beside it): ", FormatDurationUs(exposed), " = ",
                        absl::StrFormat("%.0f%%", step > 0 ? 100 * exposed / step : 0.0), " of the step"),
           {.size = 13, .fill = kExposedRed, .bold = true});
}

void DrawAxis(SvgCanvas& svg, const Frame& f, double y, double bottom) {
  const double span = static_cast<double>(f.t1 - f.t0);
  const bool ms = span >= 2000;
  for (double tick : NiceTicks(0, span, 12)) {
    if (tick > span) break;
    const double x = f.X(f.t0 + static_cast<int64_t>(tick));
    svg.Line(x, y, x, bottom, "#e3e3e3", 1);
    const double step = NiceTicks(0, span, 12)[1];
    const std::string label =
        ms ? absl::StrFormat(step >= 1000 ? "%.0f ms" : "%.1f ms", tick / 1000) : absl::StrFormat("%.0f us", tick);
    svg.Text(x, y - 5, label, {.size = 11, .fill = "#666", .anchor = "middle"});
  }
  svg.Line(f.x0, y, f.x0 + f.width, y, "#999", 1);
}

// The compute lane of one rank: phases, with backward's waiting tail hatched.
void DrawCompute(SvgCanvas& svg, const Frame& f, const RankStep& r, double y) {
  for (const TraceSpan& s : r.compute) {
    if (s.name == "step") continue;
    const double x = f.X(s.start_us), w = std::max(1.0, f.W(s.start_us, s.end_us));
    const bool nested =
        s.name != "backward" && std::any_of(r.compute.begin(), r.compute.end(), [&](const TraceSpan& b) {
          return b.name == "backward" && s.start_us > b.start_us && s.end_us <= b.end_us;
        });
    const double inset = nested ? 7 : 0;  // spans inside backward (fused optimizers) drawn inside it
    const std::string what = nested && s.index >= 0 ? absl::StrCat(s.name, " (bucket ", s.index, ")") : s.name;
    svg.Rect(x, y + inset, w, kLaneHeight - 2 * inset, PhaseColor(s.name),
             absl::StrCat(what, ": ", FormatDurationUs(static_cast<double>(s.duration_us()))),
             "stroke=\"white\" stroke-width=\"0.5\"");
    if (s.name == "backward") {
      for (const TimeInterval& own : r.backward_compute) {
        if (own.start_us != s.start_us || own.end_us >= s.end_us) continue;
        const double xw = f.X(own.end_us), ww = f.W(own.end_us, s.end_us);
        svg.Rect(xw, y, ww, kLaneHeight, "url(#wait)",
                 absl::StrCat("backward waits for communication: ",
                              FormatDurationUs(static_cast<double>(s.end_us - own.end_us))));
        LabelInside(svg, xw, ww, y + kLaneHeight / 2 + 4, {"waits for all_reduce", "waits", ""}, "#1d4d18");
        LabelInside(
            svg, x, xw - x, y + kLaneHeight / 2 + 4,
            {absl::StrCat("backward ", FormatDurationUs(static_cast<double>(own.length_us()))), "backward", "bwd"});
      }
      if (std::none_of(r.backward_compute.begin(), r.backward_compute.end(),
                       [&](const TimeInterval& own) { return own.start_us == s.start_us && own.end_us < s.end_us; })) {
        LabelInside(
            svg, x, w, y + kLaneHeight / 2 + 4,
            {absl::StrCat("backward ", FormatDurationUs(static_cast<double>(s.duration_us()))), "backward", "bwd"});
      }
    } else {
      const std::string name = s.name == "optimizer" ? (nested ? "opt" : "optimizer") : s.name;
      LabelInside(
          svg, x, w, y + kLaneHeight / 2 + 4,
          {absl::StrCat(name, " ", FormatDurationUs(static_cast<double>(s.duration_us()))), name, s.name.substr(0, 3)});
    }
  }
}

// The communication lane of one rank: one bar per bucket, exposed stretches hatched red.
void DrawComm(SvgCanvas& svg, const Frame& f, const RankStep& r, double y) {
  for (const BucketComm& c : r.comm) {
    const double x = f.X(c.start_us), w = std::max(1.5, f.W(c.start_us, c.end_us));
    const std::string bucket = c.bucket >= 0 ? absl::StrCat("b", c.bucket) : "all_reduce";
    const std::string dur = FormatDurationUs(static_cast<double>(c.duration_us()));
    svg.Rect(x, y, w, kLaneHeight, BucketColor(c.bucket),
             absl::StrCat("all_reduce of bucket ", c.bucket, ": ", FormatBytes(c.bytes),
                          c.path.empty() ? "" : absl::StrCat(", ", c.path), ", ", dur),
             "stroke=\"white\" stroke-width=\"0.75\"");
    std::vector<std::string> top = {
        absl::StrCat(bucket, " · ", FormatBytes(c.bytes), c.path.empty() ? "" : absl::StrCat(" · ", c.path)),
        absl::StrCat(bucket, " · ", FormatBytes(c.bytes)), bucket};
    if (c.bytes < 0) top.erase(top.begin(), top.begin() + 2);
    LabelInside(svg, x, w, y + 15, top);
    LabelInside(svg, x, w, y + 30, {dur});
  }
  for (const TimeInterval& e : r.exposed) {
    const double x = f.X(e.start_us), w = std::max(1.5, f.W(e.start_us, e.end_us));
    svg.Rect(x, y, w, kLaneHeight, "url(#exposed)",
             absl::StrCat("exposed ", FormatDurationUs(static_cast<double>(e.length_us())),
                          ": communication while this rank computes nothing"),
             absl::StrCat("stroke=\"", kExposedRed, "\" stroke-width=\"1.5\""));
    svg.Rect(x, y + kLaneHeight + 2, w, 4, kExposedRed);
  }
  if (r.exposed.empty()) return;
  // One label per step (its stretches may be many short gaps), centred under them, kept inside the plot.
  const std::string text = absl::StrCat("exposed ", FormatDurationUs(static_cast<double>(r.ExposedUs())));
  const double half = TextWidth(text, 11) / 2 + 2;
  const double middle = (f.X(r.exposed.front().start_us) + f.X(r.exposed.back().end_us)) / 2;
  const double cx = std::clamp(middle, f.x0 + half, f.x0 + f.width - half);
  svg.Text(cx, y + kLaneHeight + 18, text, {.size = 11, .fill = kExposedRed, .anchor = "middle", .bold = true});
}

// Host spans (GPU traces): what the training thread did while the GPU ran behind it.
void DrawHost(SvgCanvas& svg, const Frame& f, const RankStep& r, double y) {
  for (const TraceSpan& s : r.host) {
    if (s.name == "step") continue;
    const int64_t from = std::max(s.start_us, f.t0), to = std::min(s.end_us, f.t1);
    if (to <= from) continue;
    const double x = f.X(from), w = std::max(1.0, f.W(from, to));
    svg.Rect(x, y + 3, w, kHostHeight - 6, PhaseColor(s.name),
             absl::StrCat("host: ", s.name, " ", FormatDurationUs(static_cast<double>(s.duration_us()))),
             "fill-opacity=\"0.55\"");
  }
}

void LaneBox(SvgCanvas& svg, const Frame& f, double y, double h, const std::string& label, const std::string& sub) {
  svg.Rect(f.x0, y, f.width, h, "#f5f5f5");
  svg.Text(kLeft - 10, y + h / 2 + (sub.empty() ? 4 : -1), label, {.size = 12, .anchor = "end"});
  if (!sub.empty()) svg.Text(kLeft - 10, y + h / 2 + 12, sub, {.size = 10, .fill = "#777", .anchor = "end"});
}

double DrawLegend(SvgCanvas& svg, double y) {
  struct Item {
    const char* fill;
    const char* text;
  };
  const Item items[] = {{"#4e79a7", "forward"},
                        {"#59a14f", "backward (computing gradients)"},
                        {"url(#wait)", "backward waiting for communication"},
                        {"#f28e2b", "optimizer"},
                        {"#6a51a3", "all_reduce of bucket b (bytes, path)"},
                        {"url(#exposed)", "exposed: communication, no computation"}};
  double x = 16;
  for (const Item& item : items) {
    svg.Rect(x, y - 11, 22, 14, item.fill, "", "stroke=\"#888\" stroke-width=\"0.5\"");
    svg.Text(x + 28, y, item.text, {.size = 12});
    x += 28 + TextWidth(item.text, 12) + 26;
  }
  return y + 24;
}

// Per bucket: bytes, path, mean time on each rank, and the bandwidths (docs/collectives.md).
double DrawBucketTable(SvgCanvas& svg, const StepTimeline& t, double y) {
  struct Row {
    int64_t bytes = -1;
    std::string path;
    std::vector<double> sum_us;
    std::vector<int> count;
  };
  const int n = t.num_ranks();
  std::map<int, Row> rows;
  for (const auto& step : t.steps) {
    for (int rank = 0; rank < n; ++rank) {
      for (const BucketComm& c : step[rank].comm) {
        Row& row = rows[c.bucket];
        if (row.sum_us.empty()) row.sum_us.assign(n, 0), row.count.assign(n, 0);
        row.bytes = std::max(row.bytes, c.bytes);
        if (!c.path.empty()) row.path = c.path;
        row.sum_us[rank] += static_cast<double>(c.duration_us());
        row.count[rank] += 1;
      }
    }
  }
  svg.Text(16, y,
           absl::StrCat("Buckets, mean over the steps shown. algbw = bytes / time; busbw = algbw x 2(n-1)/n ",
                        "with n = ", n, ": what each link carried (docs/collectives.md)"),
           {.size = 12, .bold = true});
  y += 20;
  std::string header = absl::StrFormat("%-7s %-11s %-16s", "bucket", "bytes", "path");
  for (int rank = 0; rank < std::min(n, 4); ++rank) {
    header += absl::StrFormat(" | %-10s %6s %6s", absl::StrCat("r", rank, " time"), "algbw", "busbw");
  }
  header += "   (GB/s)";
  svg.Text(16, y, header, {.size = 12, .fill = "#444", .mono = true});
  y += 17;
  int shown = 0;
  for (const auto& [bucket, row] : rows) {
    if (++shown > 24) {
      svg.Text(16, y, absl::StrCat("... and ", rows.size() - 24, " more buckets"), {.size = 12, .mono = true});
      y += 17;
      break;
    }
    std::string line = absl::StrFormat("%-7s %-11s %-16s", absl::StrCat("b", bucket), FormatBytes(row.bytes),
                                       row.path.empty() ? "-" : row.path.substr(0, 16));
    for (int rank = 0; rank < std::min(n, 4); ++rank) {
      const double us = row.count[rank] > 0 ? row.sum_us[rank] / row.count[rank] : 0;
      std::string algbw = "-", busbw = "-";
      if (row.bytes > 0 && us > 0) {
        const double a = static_cast<double>(row.bytes) / us / 1e3;  // bytes/us = MB/s; /1e3 = GB/s
        const char* format = a >= 10 ? "%.0f" : "%.2f";
        algbw = absl::StrFormat(format, a);
        busbw = absl::StrFormat(format, a * 2.0 * (n - 1) / n);
      }
      line += absl::StrFormat(" | %-10s %6s %6s", FormatDurationUs(us), algbw, busbw);
    }
    svg.Rect(12, y - 12, 14, 14, BucketColor(bucket));
    svg.Text(30, y, line, {.size = 12, .mono = true});
    y += 17;
  }
  return y;
}

double DrawNotes(SvgCanvas& svg, double y) {
  const char* lines[] = {
      "How the exposed part is found: backward's span ends when DDP's end-of-backward wait returns, so its tail is "
      "waiting, not computing. Its computation",
      "ends no later than the start of its last bucket's all_reduce (those gradients are computed last) or of the "
      "first span nested in it (fused optimizers).",
      "Communication beside no compute span is exposed: the step would be that much shorter if it were free. "
      "Hover over any bar for its numbers.",
      "An all_reduce cannot finish before every rank has joined it: a rank that starts it early waits inside it, "
      "and its bar is longer than the others'.",
  };
  for (const char* line : lines) {
    svg.Text(16, y, line, {.size = 11.5, .fill = "#555"});
    y += 16;
  }
  return y;
}

}  // namespace

std::string RenderTimelineSvg(const StepTimeline& t, const TimelineSvgOptions& o) {
  SvgCanvas svg;
  svg.Defs(Patterns());
  const int n = t.num_ranks();
  Frame f;
  f.t0 = t.steps.front().front().start_us;
  f.t1 = t.steps.back().front().end_us;
  for (int rank = 0; rank < n; ++rank) {
    f.t0 = std::min(f.t0, t.steps.front()[rank].start_us);
    for (const auto& step : t.steps) {
      f.t1 = std::max(f.t1, step[rank].end_us);
      for (const BucketComm& c : step[rank].comm) f.t1 = std::max(f.t1, c.end_us);
      for (const TraceSpan& s : step[rank].compute) f.t1 = std::max(f.t1, s.end_us);
    }
  }
  if (f.t1 <= f.t0) f.t1 = f.t0 + 1;
  f.width = o.width - kLeft - kRight;

  DrawHeader(svg, t, o);
  const double axis_y = 126;
  // The host lane (GPU traces): only when the host thread did something inside the window; in a run
  // whose host is far ahead of the GPU it did all its work for these steps before the window opened.
  bool host_lane = false;
  for (const auto& step : t.steps) {
    for (const RankStep& r : step) {
      for (const TraceSpan& h : r.host) host_lane = host_lane || (h.end_us > f.t0 && h.start_us < f.t1);
    }
  }
  const double rank_height =
      kRankHeader + (host_lane ? kHostHeight + kLaneGap : 0) + 2 * kLaneHeight + kLaneGap + kRankGap;
  const double lanes_bottom = axis_y + 8 + n * rank_height;
  DrawAxis(svg, f, axis_y, lanes_bottom - kRankGap + 8);

  double y = axis_y + 8;
  for (int rank = 0; rank < n; ++rank) {
    double exposed = 0;
    for (const auto& step : t.steps) exposed += static_cast<double>(step[rank].ExposedUs());
    exposed /= static_cast<double>(t.steps.size());
    const double header = y + 14;
    svg.Text(16, header, t.rank_names[rank], {.size = 14, .bold = true});
    svg.Text(16 + TextWidth(t.rank_names[rank], 14) + 16, header,
             absl::StrCat("exposed ", FormatDurationUs(exposed), "/step"), {.size = 11, .fill = kExposedRed});
    y += kRankHeader;
    const double top = y;
    if (host_lane) {
      LaneBox(svg, f, y, kHostHeight, "host thread (ahead)", "");
      y += kHostHeight + kLaneGap;
    }
    const double compute_y = y;
    LaneBox(svg, f, compute_y, kLaneHeight, t.on_gpu ? "GPU compute stream" : "compute",
            t.on_gpu ? "" : "the training thread");
    const double comm_y = compute_y + kLaneHeight + kLaneGap;
    LaneBox(svg, f, comm_y, kLaneHeight, "communication", t.on_gpu ? "all_reduce per bucket" : "Gloo's thread");
    for (size_t k = 0; k < t.steps.size(); ++k) {
      const RankStep& r = t.steps[k][rank];
      if (host_lane) DrawHost(svg, f, r, top);
      DrawCompute(svg, f, r, compute_y);
      DrawComm(svg, f, r, comm_y);
      const double x = f.X(r.start_us);
      svg.Line(x, top - 14, x, comm_y + kLaneHeight + 4, "#333", 1, "4,3");
      svg.Text(x + 4, top - 4, absl::StrCat("step ", t.first_step + static_cast<int>(k) + 1),
               {.size = 11, .fill = "#333"});
    }
    y = comm_y + kLaneHeight + kRankGap;
  }
  y += 6;
  y = DrawLegend(svg, y);
  y = DrawBucketTable(svg, t, y + 14);
  y = DrawNotes(svg, y + 10);
  return svg.Finish(o.width, static_cast<int>(y + 8));
}

std::string SvgPathFor(const std::string& trace_path) {
  if (absl::EndsWith(trace_path, ".json")) return absl::StrCat(trace_path.substr(0, trace_path.size() - 5), ".svg");
  return absl::StrCat(trace_path, ".svg");
}

absl::StatusOr<std::string> WriteTimelineSvg(const std::string& trace_path, const TraceSvgOptions& options) {
  ASSIGN_OR_RETURN(const ChromeTrace trace, ReadChromeTrace(trace_path));
  absl::StatusOr<StepTimeline> timeline =
      BuildStepTimeline(trace, {.last_steps = options.last_steps, .bucket_bytes = options.bucket_bytes});
  if (!timeline.ok()) {
    return absl::Status(timeline.status().code(),
                        absl::StrCat("trace '", trace_path, "': ", timeline.status().message()));
  }
  TimelineSvgOptions svg_options;
  svg_options.title = options.title;
  svg_options.source = options.source.empty() ? absl::StrCat("trace: ", trace_path) : options.source;
  const std::string svg = RenderTimelineSvg(*timeline, svg_options);
  const std::string path = options.svg_path.empty() ? SvgPathFor(trace_path) : options.svg_path;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::UnavailableError(absl::StrCat("timeline: cannot open '", path, "' for writing"));
  file << svg;
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("timeline: writing '", path, "' failed"));
  return path;
}

}  // namespace tinyddp::dist
