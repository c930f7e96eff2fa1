// Drawing a StepTimeline (tools/timeline/timeline_svg.h): a header with the step's numbers, a time
// axis, per rank its lanes (host on GPUs, compute, communication), then a legend and the bucket table.
// A DDP trace draws all_reduce bars per bucket; a ZeRO-3 trace all_gather and reduce_scatter bars per
// layer, and its layers' compute as parts of forward and backward (step_timeline.h, "Parts"); a
// tensor-parallel trace the same parts, and its f and g all_reduces per layer.
#include "tools/timeline/timeline_svg.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <tuple>
#include <string>
#include <utility>
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

// --- Which collective a bar is: DDP's all_reduce of a bucket, ZeRO-3's all_gather / reduce_scatter of a
// layer, or tensor parallelism's all_reduce of a layer's output (g, forward) or input gradient (f,
// backward; dist/parallel/tensor/comm.h names them). Each kind has its colour (two shades, so neighbours
// differ) and its short label.
constexpr char kGatherColor[] = "#6a51a3";   // purple: parameters arriving
constexpr char kGatherColor2[] = "#8b72c6";
constexpr char kScatterColor[] = "#1a8fa3";  // teal: gradients leaving
constexpr char kScatterColor2[] = "#3fb1c4";
constexpr char kForwardSumColor[] = "#b6458f";   // magenta: g, a layer's output summed in forward
constexpr char kBackwardSumColor[] = "#8c6d1f";  // ochre: f, a layer's input gradient summed in backward
constexpr char kForwardSumName[] = "all_reduce (g)";
constexpr char kBackwardSumName[] = "all_reduce (f)";

bool IsAllReduce(const std::string& name) { return name.empty() || name == "all_reduce"; }
bool IsTensorParallel(const std::string& name) { return name == kForwardSumName || name == kBackwardSumName; }

const char* CommColor(const BucketComm& c) {
  const bool odd = c.bucket >= 0 && c.bucket % 2 == 1;
  if (c.name == "all_gather") return odd ? kGatherColor2 : kGatherColor;
  if (c.name == "reduce_scatter") return odd ? kScatterColor2 : kScatterColor;
  if (c.name == kForwardSumName) return kForwardSumColor;
  if (c.name == kBackwardSumName) return kBackwardSumColor;
  return IsAllReduce(c.name) ? BucketColor(c.bucket) : "#9d9d9d";
}

// "b" for buckets, "L" for layers: the prefix of an index in labels.
std::string UnitLetter(const std::string& unit) {
  if (unit.empty() || unit == "bucket") return "b";
  return std::string(1, static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
}

// "b3" (an all_reduce), "AG L1", "RS L1", "g L1", "f L2"; without an index, the collective's name.
std::string CommShort(const BucketComm& c, const std::string& unit) {
  const std::string index = c.bucket >= 0 ? absl::StrCat(UnitLetter(unit), c.bucket) : "";
  if (IsAllReduce(c.name)) return c.bucket >= 0 ? index : "all_reduce";
  const std::string kind = c.name == "all_gather"       ? "AG"
                           : c.name == "reduce_scatter" ? "RS"
                           : c.name == kForwardSumName  ? "g"
                           : c.name == kBackwardSumName ? "f"
                                                        : c.name;
  return index.empty() ? c.name : absl::StrCat(kind, " ", index);
}

// What the timeline's collectives are: DDP's all_reduces of buckets, ZeRO-3's (or anything else but an
// all_reduce), or tensor parallelism's f and g; the legend, the table and the notes say so.
enum class CommKind { kBuckets, kSharded, kTensorParallel };

CommKind KindOf(const StepTimeline& t) {
  CommKind kind = CommKind::kBuckets;
  for (const auto& step : t.steps) {
    for (const RankStep& r : step) {
      for (const BucketComm& c : r.comm) {
        if (IsTensorParallel(c.name)) return CommKind::kTensorParallel;
        if (!IsAllReduce(c.name)) kind = CommKind::kSharded;
      }
    }
  }
  return kind;
}

// Whether some forward or backward of the timeline is drawn in parts (step_timeline.h).
bool HasPhaseParts(const StepTimeline& t) {
  for (const auto& step : t.steps) {
    for (const RankStep& r : step) {
      for (const TraceSpan& s : r.compute) {
        if (HasParts(s, r.compute)) return true;
      }
    }
  }
  return false;
}

// Whether a compute span of the timeline is named `prefix`... ("optimizer", "optimizer (bucket 1)").
bool HasSpanNamed(const StepTimeline& t, const std::string& prefix) {
  for (const auto& step : t.steps) {
    for (const RankStep& r : step) {
      for (const TraceSpan& s : r.compute) {
        if (absl::StartsWith(s.name, prefix)) return true;
      }
    }
  }
  return false;
}

// Whether some backward of the timeline ends waiting for communication (drawn hatched).
bool HasBackwardWait(const StepTimeline& t) {
  for (const auto& step : t.steps) {
    for (const RankStep& r : step) {
      for (const TraceSpan& s : r.compute) {
        if (s.name != "backward") continue;
        for (const TimeInterval& own : r.backward_compute) {
          if (own.start_us == s.start_us && own.end_us < s.end_us) return true;
        }
      }
    }
  }
  return false;
}

// The forward or backward span of `compute` that `part` is a part of, or null.
const TraceSpan* PhaseOf(const TraceSpan& part, const std::vector<TraceSpan>& compute) {
  for (const TraceSpan& phase : compute) {
    if (&phase != &part && IsPartOf(part, phase)) return &phase;
  }
  return nullptr;
}

// The time window drawn and its mapping to x.
struct Frame {
  int64_t t0 = 0, t1 = 1;
  double x0 = kLeft, width = 1;
  double X(int64_t t) const { return x0 + width * static_cast<double>(t - t0) / static_cast<double>(t1 - t0); }
  double W(int64_t a, int64_t b) const { return X(b) - X(a); }
};

// A label inside a bar when it fits: the first of `choices` that does, else nothing (says whether it drew).
bool LabelInside(SvgCanvas& svg, double x, double w, double y, const std::vector<std::string>& choices,
                 const std::string& color = "white", double size = 11) {
  for (const std::string& text : choices) {
    if (TextWidth(text, size) + 6 <= w) {
      svg.Text(x + w / 2, y, text, {.size = size, .fill = color, .anchor = "middle", .halo = color == "white"});
      return true;
    }
  }
  return false;
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

// The compute lane of one rank: phases, with backward's waiting tail hatched. A phase drawn in parts
// (ZeRO-3's or tensor parallelism's layers) is a light band, with its parts in full colour on it: the light
// gaps are waits.
void DrawCompute(SvgCanvas& svg, const Frame& f, const RankStep& r, double y, const std::string& unit,
                 CommKind kind) {
  for (const TraceSpan& s : r.compute) {
    if (s.name == "step") continue;
    const double x = f.X(s.start_us), w = std::max(1.0, f.W(s.start_us, s.end_us));
    const std::string took = FormatDurationUs(static_cast<double>(s.duration_us()));
    if (HasParts(s, r.compute)) {
      svg.Rect(x, y, w, kLaneHeight, PhaseColor(s.name),
               absl::StrCat(s.name, ": ", took,
                            kind == CommKind::kTensorParallel ? " (lighter: waiting, e.g. for an all_reduce)"
                                                              : " (lighter: waiting, e.g. for a layer's all_gather)"),
               "fill-opacity=\"0.3\" stroke=\"white\" stroke-width=\"0.5\"");
      continue;
    }
    if (const TraceSpan* phase = PhaseOf(s, r.compute)) {
      const std::string index = s.index >= 0 ? absl::StrCat(UnitLetter(unit), s.index) : "";
      svg.Rect(x, y, w, kLaneHeight, PhaseColor(phase->name),
               absl::StrCat(s.name, s.index >= 0 ? absl::StrCat(" ", s.index) : "", ": ", took),
               "stroke=\"white\" stroke-width=\"0.5\"");
      if (s.index < 0) {  // a part that is no layer's ("forward loss"): its word
        LabelInside(svg, x, w, y + kLaneHeight / 2 + 4, {s.name.substr(phase->name.size() + 1)});
        continue;
      }
      // "fwd L1", smaller where the bar is narrow; never the bare "L1", which would not say which phase.
      const std::string label = absl::StrCat(phase->name == "forward" ? "fwd " : "bwd ", index);
      if (!LabelInside(svg, x, w, y + kLaneHeight / 2 + 4, {label})) {
        LabelInside(svg, x, w, y + kLaneHeight / 2 + 3, {label}, "white", 9);
      }
      continue;
    }
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
      const std::string name = absl::StartsWith(s.name, "optimizer") ? (nested ? "opt" : "optimizer") : s.name;
      LabelInside(
          svg, x, w, y + kLaneHeight / 2 + 4,
          {absl::StrCat(name, " ", FormatDurationUs(static_cast<double>(s.duration_us()))), name, s.name.substr(0, 3)});
    }
  }
}

// The communication lane of one rank: one bar per bucket (or per layer's collective), exposed stretches
// hatched red. Tensor parallelism's lane holds a few short all_reduces far apart: a bar too narrow for its
// label has it beside it, to its right. ZeRO-3's short collectives, whose neighbours may be close, keep
// theirs inside as long as they can (smaller, then upright); only a sliver's goes beside it, drawn after
// every bar (outlined in white where it crosses one), on the first of the lane's two text rows where it does
// not run into the label before it.
void DrawComm(SvgCanvas& svg, const Frame& f, const RankStep& r, double y, const std::string& unit,
              CommKind kind) {
  struct Beside {
    double x, y;
    std::string text;
    const char* color;
    const char* anchor;
  };
  std::vector<Beside> beside;
  double row_free_from[2] = {f.x0, f.x0};  // where each text row is free again
  for (const BucketComm& c : r.comm) {
    const double x = f.X(c.start_us), w = std::max(1.5, f.W(c.start_us, c.end_us));
    const std::string bucket = CommShort(c, unit);
    const std::string dur = FormatDurationUs(static_cast<double>(c.duration_us()));
    const char* of_what = c.name == kForwardSumName    ? "'s output"
                          : c.name == kBackwardSumName ? "'s input gradient"
                                                       : "";
    const std::string what = IsAllReduce(c.name) ? absl::StrCat("all_reduce of bucket ", c.bucket)
                                                 : absl::StrCat(c.name, " of ", unit, " ", c.bucket, of_what);
    svg.Rect(x, y, w, kLaneHeight, CommColor(c),
             absl::StrCat(what, ": ", FormatBytes(c.bytes), c.path.empty() ? "" : absl::StrCat(", ", c.path), ", ",
                          dur),
             "stroke=\"white\" stroke-width=\"0.75\"");
    std::vector<std::string> top = {
        absl::StrCat(bucket, " · ", FormatBytes(c.bytes), c.path.empty() ? "" : absl::StrCat(" · ", c.path)),
        absl::StrCat(bucket, " · ", FormatBytes(c.bytes)), bucket};
    if (c.bytes < 0) top.erase(top.begin(), top.begin() + 2);
    if (kind == CommKind::kTensorParallel && TextWidth(bucket, 11) + 6 > w) {
      svg.Text(x + w + 3, y + 15, bucket, {.size = 11, .fill = CommColor(c), .bold = true});
      svg.Text(x + w + 3, y + 30, dur, {.size = 10, .fill = "#555"});
      continue;
    }
    if (kind == CommKind::kSharded && TextWidth(bucket, 11) + 6 > w) {
      if (LabelInside(svg, x, w, y + 15, {bucket}, "white", 9)) {  // smaller, still inside
        LabelInside(svg, x, w, y + 30, {dur}, "white", 9);
        continue;
      }
      if (w >= 12) {  // upright inside the bar, reading bottom to top
        svg.Text(x + w / 2 + 3.5, y + kLaneHeight / 2, bucket,
                 {.size = 9, .fill = "white", .anchor = "middle", .halo = true, .rotate = -90});
        continue;
      }
      if (x + w + 3 + TextWidth(bucket, 11) > f.x0 + f.width + kRight - 2) {  // no room right: to its left
        beside.push_back({x - 3, y + 15, bucket, CommColor(c), "end"});
        continue;
      }
      const int row = row_free_from[0] <= x + w + 3 || row_free_from[1] > x + w + 3 ? 0 : 1;
      beside.push_back({x + w + 3, y + 15 + 15 * row, bucket, CommColor(c), "start"});
      row_free_from[row] = x + w + 3 + TextWidth(bucket, 11) + 4;
      continue;
    }
    LabelInside(svg, x, w, y + 15, top);
    LabelInside(svg, x, w, y + 30, {dur});
  }
  for (const Beside& b : beside) {
    svg.Text(b.x, b.y, b.text, {.size = 11, .fill = b.color, .anchor = b.anchor, .bold = true, .light_halo = true});
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

double DrawLegend(SvgCanvas& svg, double y, const StepTimeline& t, const TimelineSvgOptions& o) {
  struct Item {
    const char* fill;
    std::string text;
    const char* extra = "";
  };
  std::vector<Item> items;
  const CommKind kind = KindOf(t);
  if (HasPhaseParts(t)) {  // ZeRO-3, tensor parallelism: layers inside the phases
    const std::string l = UnitLetter(o.comm_unit);
    items = {{"#4e79a7", absl::StrCat("forward of ", o.comm_unit, " ", l, "k")},
             {"#59a14f", kind == CommKind::kTensorParallel
                             ? absl::StrCat("backward of ", o.comm_unit, " ", l, "k (dx, dW and db)")
                             : absl::StrCat("backward of ", o.comm_unit, " ", l, "k (dx, then dW and db)")},
             {"#59a14f", "lighter: inside forward/backward, waiting", "fill-opacity=\"0.3\" "}};
  } else {
    items = {{"#4e79a7", "forward"}, {"#59a14f", "backward (computing gradients)"}};
    if (HasBackwardWait(t)) items.push_back({"url(#wait)", "backward waiting for communication"});
  }
  // A legend lists what the picture draws: a step whose optimizer was not traced (DDP's fused optimizers
  // step inside backward's wait) shows no optimizer bar, so no swatch either.
  if (HasSpanNamed(t, "optimizer")) items.push_back({"#f28e2b", "optimizer"});
  if (kind == CommKind::kTensorParallel) {
    items.push_back({kForwardSumColor, absl::StrCat("g: all_reduce of ", o.comm_unit, " k's output (forward)")});
    items.push_back(
        {kBackwardSumColor, absl::StrCat("f: all_reduce of ", o.comm_unit, " k's input gradient (backward)")});
  } else if (kind == CommKind::kSharded) {
    items.push_back({kGatherColor, absl::StrCat("all_gather of ", o.comm_unit, " k (its parameters, whole)")});
    items.push_back({kScatterColor, absl::StrCat("reduce_scatter of ", o.comm_unit, " k's gradient")});
  } else {
    items.push_back({"#6a51a3", "all_reduce of bucket b (bytes, path)"});
  }
  items.push_back({"url(#exposed)", "exposed: communication, no computation"});
  double x = 16;
  for (const Item& item : items) {
    const double width = 28 + TextWidth(item.text, 12) + 26;  // swatch, text, gap
    if (x > 16 && x + width - 26 > o.width - 8) {  // the next line
      x = 16;
      y += 22;
    }
    svg.Rect(x, y - 11, 22, 14, item.fill, "",
             absl::StrCat(item.extra, "stroke=\"#888\" stroke-width=\"0.5\""));
    svg.Text(x + 28, y, item.text, {.size = 12});
    x += width;
  }
  return y + 24;
}

// Per bucket (per collective and layer): bytes, path, mean time on each rank, and the bandwidths
// (docs/collectives.md).
double DrawBucketTable(SvgCanvas& svg, const StepTimeline& t, double y, const std::string& unit) {
  struct Row {
    int64_t bytes = -1;
    std::string path;
    std::vector<double> sum_us;
    std::vector<int> count;
  };
  const int n = t.num_ranks();
  const CommKind kind = KindOf(t);
  const bool sharded = kind != CommKind::kBuckets;  // a row per collective and layer
  const bool tp = kind == CommKind::kTensorParallel;
  // (order, collective, index): by bucket; ZeRO-3's all_gathers, then its reduce_scatters; tensor
  // parallelism's by layer, as they run in forward.
  std::map<std::tuple<int, std::string, int>, Row> rows;
  for (const auto& step : t.steps) {
    for (int rank = 0; rank < n; ++rank) {
      for (const BucketComm& c : step[rank].comm) {
        Row& row = rows[{tp ? c.bucket : 0, IsAllReduce(c.name) ? std::string() : c.name, c.bucket}];
        if (row.sum_us.empty()) row.sum_us.assign(n, 0), row.count.assign(n, 0);
        row.bytes = std::max(row.bytes, c.bytes);
        if (!c.path.empty()) row.path = c.path;
        row.sum_us[rank] += static_cast<double>(c.duration_us());
        row.count[rank] += 1;
      }
    }
  }
  const std::string title =
      tp        ? absl::StrCat("All_reduces of the tp group, mean over the steps shown (bytes: the ", unit,
                               "'s output, or its input gradient). algbw = bytes / time; busbw = algbw x 2(n-1)/n ",
                               "with n = ", n, " (docs/collectives.md)")
      : sharded ? absl::StrCat("Collectives, mean over the steps shown (bytes: the ", unit, " whole). algbw = bytes / ",
                             "time; busbw = algbw x (n-1)/n with n = ", n,
                             ": what each link carried (docs/collectives.md)")
              : absl::StrCat("Buckets, mean over the steps shown. algbw = bytes / time; busbw = algbw x 2(n-1)/n ",
                             "with n = ", n, ": what each link carried (docs/collectives.md)");
  svg.Text(16, y, title, {.size = 12, .bold = true});
  y += 20;
  std::string header = absl::StrFormat("%-7s %-11s %-16s", sharded ? "what" : "bucket", "bytes", "path");
  for (int rank = 0; rank < std::min(n, 4); ++rank) {
    header += absl::StrFormat(" | %-10s %6s %6s", absl::StrCat("r", rank, " time"), "algbw", "busbw");
  }
  header += "   (GB/s)";
  svg.Text(16, y, header, {.size = 12, .fill = "#444", .mono = true});
  y += 17;
  int shown = 0;
  for (const auto& [key, row] : rows) {
    const auto& [order, name, index] = key;
    if (++shown > 24) {
      svg.Text(16, y, absl::StrCat("... and ", rows.size() - 24, sharded ? " more" : " more buckets"),
               {.size = 12, .mono = true});
      y += 17;
      break;
    }
    BucketComm c;
    c.name = name;
    c.bucket = index;
    // Ring: an all_reduce is two passes, the others one.
    const double bus = IsAllReduce(c.name) || IsTensorParallel(c.name) ? 2.0 : 1.0;
    std::string line = absl::StrFormat("%-7s %-11s %-16s", CommShort(c, unit), FormatBytes(row.bytes),
                                       row.path.empty() ? "-" : row.path.substr(0, 16));
    for (int rank = 0; rank < std::min(n, 4); ++rank) {
      const double us = row.count[rank] > 0 ? row.sum_us[rank] / row.count[rank] : 0;
      std::string algbw = "-", busbw = "-";
      if (row.bytes > 0 && us > 0) {
        const double a = static_cast<double>(row.bytes) / us / 1e3;  // bytes/us = MB/s; /1e3 = GB/s
        const char* format = a >= 10 ? "%.0f" : "%.2f";
        algbw = absl::StrFormat(format, a);
        busbw = absl::StrFormat(format, a * bus * (n - 1) / n);
      }
      line += absl::StrFormat(" | %-10s %6s %6s", FormatDurationUs(us), algbw, busbw);
    }
    svg.Rect(12, y - 12, 14, 14, CommColor(c));
    svg.Text(30, y, line, {.size = 12, .mono = true});
    y += 17;
  }
  return y;
}

double DrawNotes(SvgCanvas& svg, double y, CommKind kind) {
  const char* tensor_parallel[] = {
      "Each column -> row pair ends its forward in g, the all_reduce of the row layer's partial outputs: the next "
      "layer's input is their sum, so the thread",
      "waits for it, and it is exposed. In backward, f sums the gradient of a column layer's input before the layer "
      "below it can go on; the first pair's",
      "input is the data, which needs no gradient: it has no f. Nothing overlaps these sums in this form: each is "
      "waited for where it was issued. Their bytes",
      "grow with the batch, not the parameters. An all_reduce cannot finish before every rank has joined it: the "
      "rank that arrives first waits inside it,",
      "and its bar is longer than the other's. Communication beside no compute is exposed. Hover over any bar for "
      "its numbers.",
  };
  if (kind == CommKind::kTensorParallel) {
    for (const char* line : tensor_parallel) {
      svg.Text(16, y, line, {.size = 11.5, .fill = "#555"});
      y += 16;
    }
    return y;
  }
  const bool sharded = kind == CommKind::kSharded;
  const char* zero3[] = {
      "Each layer's all_gather is issued when the layer before it starts its forward (after it, in backward), so "
      "it runs while that layer computes; the first",
      "layer's, at the start of forward, has nothing to hide behind. Each reduce_scatter is issued as soon as its "
      "layer's dW and db exist, and runs",
      "while the next layer's dx is computed. Gloo runs one collective at a time, in the order they were issued. "
      "The optimizer steps every layer's",
      "shard at the end of backward, once the last reduce_scatter has arrived. Communication beside no compute is "
      "exposed. Hover over any bar for its numbers.",
  };
  if (sharded) {
    for (const char* line : zero3) {
      svg.Text(16, y, line, {.size = 11.5, .fill = "#555"});
      y += 16;
    }
    return y;
  }
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
  const CommKind kind = KindOf(t);
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
    LaneBox(svg, f, comm_y, kLaneHeight, "communication",
            !t.on_gpu                          ? "Gloo's thread"
            : kind == CommKind::kSharded        ? "all_gather, reduce_scatter"
            : kind == CommKind::kTensorParallel ? "all_reduce f and g"
                                                : "all_reduce per bucket");
    for (size_t k = 0; k < t.steps.size(); ++k) {
      const RankStep& r = t.steps[k][rank];
      if (host_lane) DrawHost(svg, f, r, top);
      DrawCompute(svg, f, r, compute_y, o.comm_unit, kind);
      DrawComm(svg, f, r, comm_y, o.comm_unit, kind);
      const double x = f.X(r.start_us);
      svg.Line(x, top - 14, x, comm_y + kLaneHeight + 4, "#333", 1, "4,3");
      svg.Text(x + 4, top - 4, absl::StrCat("step ", t.first_step + static_cast<int>(k) + 1),
               {.size = 11, .fill = "#333"});
    }
    y = comm_y + kLaneHeight + kRankGap;
  }
  y += 6;
  y = DrawLegend(svg, y, t, o);
  y = DrawBucketTable(svg, t, y + 14, o.comm_unit);
  y = DrawNotes(svg, y + 10, kind);
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
  svg_options.comm_unit = options.comm_unit;
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
