// Tracer: a timeline of one training run in the Chrome trace format, so a reader can open it in
// chrome://tracing or https://ui.perfetto.dev and see gradient all_reduces overlapping backward. A wing
// (dist/observe/): DDP knows nothing of it. It attaches through DDP's comm hook seam (DdpOptions::comm_hook
// wrapped by TracedCommHook, traced_comm_hook.h: each bucket's all_reduce), and the training loop records
// its own phases (forward, backward, optimizer step) with Tracer::Scope.
//
// The picture: one process per rank ("rank 0", "rank 1", ...) with three tracks each:
//   host      what the training thread was doing (host clock, steady_clock in microseconds)
//   compute   GPU time of each phase on the compute stream (CUDA timing events)
//   comm      GPU time of each bucket's all_reduce, from the group's stream to where it ends (CUDA timing
//             events); on CPU, the host-measured time of the Gloo collective. Each names its path
//             ("NCCL all_reduce", "copy engines") in its args (traced_comm_hook.h records them)
// GPU times are placed on the host timeline through one anchor: an event recorded and synchronised when
// the tracer is created, whose completion is stamped with the host clock.
//
// Recording never blocks and never allocates after construction (events and records are preallocated;
// past `capacity` records are counted and dropped). Writing synchronises and, for more than one rank,
// gathers every rank's events on rank 0 with the process group. Not thread-safe: one training thread.
#ifndef TINYDDP_DIST_OBSERVE_TRACE_TRACE_H_
#define TINYDDP_DIST_OBSERVE_TRACE_TRACE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dist/process_group/process_group.h"
#include "tensor/device.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

/// Which track of a rank an event belongs to (the Chrome trace "tid").
enum class TraceTrack : int { kHost = 0, kCompute = 1, kComm = 2 };

class Tracer {
 public:
  /// `rank` becomes the trace's process id. For a CUDA device, GPU spans are timed with events on that
  /// device; for the CPU only host spans exist. `capacity`: records kept before dropping.
  /// GPU intervals use two CUDA events each from a pool of `gpu_events`, all created here.
  Tracer(int rank, Device device, int capacity = 1 << 16, int gpu_events = 4096);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  /// Host microseconds on the tracer's timeline (steady clock).
  static int64_t NowUs();

  /// A host span, plus on a CUDA device a GPU span on the current stream (the compute track): records on
  /// construction, finishes on destruction. `name` must outlive the tracer (a string literal).
  class Span {
   public:
    ~Span();
    Span(Span&& other) noexcept;
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    Span& operator=(Span&&) = delete;

   private:
    friend class Tracer;
    Span(Tracer* tracer, const char* name, int64_t arg);
    Tracer* tracer_;  // null: moved-from or tracing off
    const char* name_;
    int64_t arg_;
    int64_t start_us_;
    int gpu_begin_ = -1;
  };
  /// Starts a span named `name` (e.g. "backward"); `arg` (e.g. the step number) is shown with it.
  [[nodiscard]] Span Scope(const char* name, int64_t arg = -1);
  /// tracer->Scope(...), or a span that records nothing when `tracer` is null (tracing off).
  [[nodiscard]] static Span MaybeScope(Tracer* tracer, const char* name, int64_t arg = -1);

  /// Records a finished host interval on `track` (CPU collectives: the comm track). `path`, when set (a
  /// string literal), is shown with it as args.path (how an all_reduce was carried).
  void AddHostEvent(TraceTrack track, const char* name, int64_t start_us, int64_t end_us, int64_t arg = -1,
                    const char* path = nullptr);

  /// GPU interval on any stream of the tracer's device: BeginGpu records a timing event on `stream` and
  /// returns a slot, EndGpu records the closing event and files the interval on `track`. BeginGpu returns
  /// -1 (and EndGpu ignores it) on the CPU or when the event pool is exhausted.
  int BeginGpu(const cuda::Stream& stream);
  void EndGpu(int slot, const cuda::Stream& stream, TraceTrack track, const char* name, int64_t arg = -1,
              const char* path = nullptr);

  /// Writes the whole job's trace to `path` (JSON). Collective over `pg` (null: this process alone): rank 0
  /// gathers every rank's events (two all_gathers) and writes one file with a process per rank; the other
  /// ranks write nothing. Waits for the recorded GPU work to finish. Returns the collective's error, or on
  /// rank 0 the file's.
  absl::Status WriteChromeTrace(ProcessGroup* pg, const std::string& path);
  /// This rank's events as a JSON array body ("{...},{...}"), GPU times resolved; synchronises.
  std::string EventsJson();

  /// While disabled, every recording call is a no-op (e.g. during warm-up and timed steps).
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  /// `tracer` when it is set and enabled, else null: the check recorders make before recording.
  static Tracer* Active(Tracer* tracer) { return tracer != nullptr && tracer->enabled_ ? tracer : nullptr; }

  int rank() const { return rank_; }
  bool on_gpu() const { return device_.is_cuda(); }
  int64_t dropped() const { return dropped_; }

 private:
  struct Record {
    const char* name;
    TraceTrack track;
    int64_t arg;
    int64_t start_us;  // host clock; for GPU records, filled from the events when writing
    int64_t end_us;
    int gpu_begin;     // event slots, -1 for host records
    int gpu_end;
    const char* path;  // args.path, or null
  };
  bool HasRoom();  // counts a drop when full

  const int rank_;
  const Device device_;
  const int capacity_;
  std::vector<Record> records_;
  // GPU timing: a pool of timing events, the next free one, and the anchor event whose completion was
  // stamped with the host clock (anchor_us_): GPU time t maps to anchor_us_ + (t - anchor) on the timeline.
  std::vector<std::unique_ptr<cuda::Event>> events_;
  size_t next_event_ = 0;
  std::unique_ptr<cuda::Event> anchor_;
  int64_t anchor_us_ = 0;
  int64_t dropped_ = 0;
  bool enabled_ = true;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_OBSERVE_TRACE_TRACE_H_
