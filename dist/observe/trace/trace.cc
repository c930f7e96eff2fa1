// Tracer (dist/observe/trace/trace.h): records on the hot path, resolves GPU times and writes JSON at the end.
#include "dist/observe/trace/trace.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/check.h"

namespace tinyddp::dist {
namespace {

const char* TrackName(TraceTrack track, bool gpu) {
  switch (track) {
    case TraceTrack::kHost:
      return "host (training thread)";
    case TraceTrack::kCompute:
      return "GPU compute stream";
    case TraceTrack::kComm:
      return gpu ? "GPU communication (all_reduce per bucket)" : "Gloo collectives (all_reduce)";
  }
  return "?";
}

// `text` as the inside of a JSON string.
std::string Escaped(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == '"' || *c == '\\') out += '\\';
    out += *c;
  }
  return out;
}

void AppendEvent(std::string& out, const char* name, int pid, TraceTrack track, int64_t start_us, int64_t end_us,
                 int64_t arg, const char* path) {
  if (!out.empty()) out += ",\n";
  absl::StrAppend(&out, "{\"name\":\"", name, "\",\"ph\":\"X\",\"pid\":", pid, ",\"tid\":", static_cast<int>(track),
                  ",\"ts\":", start_us, ",\"dur\":", end_us > start_us ? end_us - start_us : 0);
  std::vector<std::string> args;
  if (arg >= 0) args.push_back(absl::StrCat("\"i\":", arg));
  if (path != nullptr) args.push_back(absl::StrCat("\"path\":\"", Escaped(path), "\""));
  if (!args.empty()) absl::StrAppend(&out, ",\"args\":{", absl::StrJoin(args, ","), "}");
  out += "}";
}

}  // namespace

Tracer::Tracer(int rank, Device device, int capacity, int gpu_events)
    : rank_(rank), device_(device), capacity_(capacity) {
  records_.reserve(capacity_);
  if (!device_.is_cuda()) return;
  const cuda::Stream stream = cuda::Stream::Current(device_.index);
  // Create every event now (a CUDA event is created by its first Record), so that tracing a step
  // creates none; then stamp the anchor.
  events_.reserve(gpu_events);
  for (int i = 0; i < gpu_events; ++i) {
    events_.push_back(std::make_unique<cuda::Event>(/*enable_timing=*/true));
    events_.back()->Record(stream);
  }
  anchor_ = std::make_unique<cuda::Event>(/*enable_timing=*/true);
  anchor_->Record(stream);
  anchor_->Synchronize();
  anchor_us_ = NowUs();
}

Tracer::~Tracer() = default;

int64_t Tracer::NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Tracer::HasRoom() {
  if (static_cast<int>(records_.size()) < capacity_) return true;
  ++dropped_;
  return false;
}

// --- Spans ---------------------------------------------------------------------------------------

Tracer::Span::Span(Tracer* tracer, const char* name, int64_t arg)
    : tracer_(Active(tracer)), name_(name), arg_(arg), start_us_(tracer_ ? NowUs() : 0) {
  if (tracer_ != nullptr && tracer_->on_gpu()) {
    gpu_begin_ = tracer_->BeginGpu(cuda::Stream::Current(tracer_->device_.index));
  }
}

Tracer::Span::Span(Span&& other) noexcept
    : tracer_(other.tracer_), name_(other.name_), arg_(other.arg_), start_us_(other.start_us_),
      gpu_begin_(other.gpu_begin_) {
  other.tracer_ = nullptr;
}

Tracer::Span::~Span() {
  if (tracer_ == nullptr) return;
  tracer_->AddHostEvent(TraceTrack::kHost, name_, start_us_, NowUs(), arg_);
  if (gpu_begin_ >= 0) {
    tracer_->EndGpu(gpu_begin_, cuda::Stream::Current(tracer_->device_.index), TraceTrack::kCompute, name_, arg_);
  }
}

Tracer::Span Tracer::Scope(const char* name, int64_t arg) { return Span(this, name, arg); }

Tracer::Span Tracer::MaybeScope(Tracer* tracer, const char* name, int64_t arg) { return Span(tracer, name, arg); }

void Tracer::AddHostEvent(TraceTrack track, const char* name, int64_t start_us, int64_t end_us, int64_t arg,
                          const char* path) {
  if (!enabled_ || !HasRoom()) return;
  records_.push_back(Record{name, track, arg, start_us, end_us, -1, -1, path});
}

int Tracer::BeginGpu(const cuda::Stream& stream) {
  if (!enabled_) return -1;
  if (!device_.is_cuda() || next_event_ + 2 > events_.size()) {
    if (device_.is_cuda()) ++dropped_;
    return -1;
  }
  const int slot = static_cast<int>(next_event_);
  next_event_ += 2;  // the begin event and, right after it, the end event
  events_[slot]->Record(stream);
  return slot;
}

void Tracer::EndGpu(int slot, const cuda::Stream& stream, TraceTrack track, const char* name, int64_t arg,
                    const char* path) {
  if (slot < 0) return;
  events_[slot + 1]->Record(stream);
  if (!HasRoom()) return;
  records_.push_back(Record{name, track, arg, 0, 0, slot, slot + 1, path});
}

// --- Output --------------------------------------------------------------------------------------

std::string Tracer::EventsJson() {
  std::string out;
  // Names for the process and its tracks, then the intervals.
  absl::StrAppend(&out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", rank_, ",\"args\":{\"name\":\"rank ",
                  rank_, "\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":", rank_,
                  ",\"args\":{\"sort_index\":", rank_, "}}");
  for (TraceTrack track : {TraceTrack::kHost, TraceTrack::kCompute, TraceTrack::kComm}) {
    if (track == TraceTrack::kCompute && !on_gpu()) continue;
    absl::StrAppend(&out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", rank_, ",\"tid\":",
                    static_cast<int>(track), ",\"args\":{\"name\":\"", TrackName(track, on_gpu()), "\"}}");
  }
  for (const Record& r : records_) {
    int64_t start = r.start_us, end = r.end_us;
    if (r.gpu_begin >= 0) {
      events_[r.gpu_end]->Synchronize();  // the interval must have finished before it can be measured
      start = anchor_us_ + static_cast<int64_t>(1000.0 * cuda::Event::ElapsedMs(*anchor_, *events_[r.gpu_begin]));
      end = anchor_us_ + static_cast<int64_t>(1000.0 * cuda::Event::ElapsedMs(*anchor_, *events_[r.gpu_end]));
    }
    AppendEvent(out, r.name, rank_, r.track, start, end, r.arg, r.path);
  }
  return out;
}

absl::Status Tracer::WriteChromeTrace(ProcessGroup* pg, const std::string& path) {
  std::string body = EventsJson();
  if (pg != nullptr && pg->size() > 1) {
    // Collectives move numbers, not text: pack the JSON 8 bytes to an int64 word, gather the lengths,
    // then the texts padded to the longest, and unpack on rank 0.
    const Device device = on_gpu() ? device_ : Device::CPU();
    Tensor length = Tensor::FromVector<int64_t>({static_cast<int64_t>(body.size())}, {1}, device);
    Tensor lengths = Tensor::Empty({pg->size()}, DType::kInt64, device);
    RETURN_IF_ERROR(pg->AllGather(lengths, length)->Wait());
    const std::vector<int64_t> sizes = lengths.ToVector<int64_t>();
    int64_t words = 1;
    for (int64_t n : sizes) words = std::max(words, (n + 7) / 8);
    std::vector<int64_t> packed(words, 0);
    std::memcpy(packed.data(), body.data(), body.size());
    Tensor mine = Tensor::FromVector<int64_t>(packed, {words}, device);
    Tensor all = Tensor::Empty({words * pg->size()}, DType::kInt64, device);
    RETURN_IF_ERROR(pg->AllGather(all, mine)->Wait());
    if (pg->rank() != 0) return absl::OkStatus();
    const std::vector<int64_t> texts = all.ToVector<int64_t>();
    for (int r = 1; r < pg->size(); ++r) {
      const char* start = reinterpret_cast<const char*>(texts.data() + r * words);
      absl::StrAppend(&body, ",\n", std::string(start, sizes[r]));
    }
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::UnavailableError(absl::StrCat("trace: cannot open '", path, "' for writing"));
  file << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" << body << "\n]}\n";
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("trace: writing '", path, "' failed"));
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
