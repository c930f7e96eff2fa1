// GraphedStep: a whole training step - zeroing the gradients, forward, backward with DDP's bucket
// all_reduces, the optimizer, the loss - recorded once into a CUDA graph (tensor/cuda_graph.h) and replayed
// with one launch per step. What wins the launch-bound regime: a tiny MLP's step is ~40 small kernels, and
// the host needs longer to enqueue them one by one than the GPU needs to run them. A wing (dist/accel/):
// the caller opts in by running its step through it; it attaches to the process group at one seam,
// ProcessGroup::WatchReplay, and otherwise uses what any module may (collective_stream, and an observer of
// the collectives issued while the step is recorded: collective_observer.h), and DDP's public accessors.
//
//   GraphedStep step(device, [&] { return TrainStep(static_inputs, static_labels); }, ddp.get(), {&optimizer});
//   for (...) {
//     loader.NextInto(static_inputs, static_labels);   // the graph reads the same buffers every time
//     ASSIGN_OR_RETURN(Tensor loss, step.Run());        // eager for a few steps, then captured, then replays
//     window.Add(loss);                                 // the loss stays on the device: no host wait
//   }
//
// The life of a GraphedStep:
//   warm-up   the first `warmup_steps` Run()s call the step eagerly. They make what a steady-state step
//             only reuses: optimizer state, DDP's rebuilt buckets (the rebuild happens in the second
//             forward), the fused optimizers of the new layout, cuBLAS plans, scratch buffers. Warm-up
//             lasts until DDP has rebuilt its buckets, however many steps that takes.
//   capture   the next Run() synchronises once (the device is quiet when recording starts), records the
//             step: its host code runs once, every kernel and collective it enqueues becomes a node, the
//             temporaries it allocates come from the graph's private pool. Then it replays it: recording
//             ran nothing.
//   replay    every later Run() is one cudaGraphLaunch, plus, with NCCL, one end event handed to the
//             process group's watchdog (ProcessGroup::WatchReplay): a rank that dies mid-replay makes the
//             others' replays time out and abort the communicator, and the error names the replay and its
//             collectives.
// Run() returns the step's output (its loss): on replays always the same tensor, rewritten by each replay.
//
// Why DDP's hooks still work when recorded: they run on the host during the capture, at the moments they
// run in any backward, and they only enqueue work (autograd/engine.h, point 6). So the graph holds what
// they enqueued: each bucket's all_reduce on the NCCL stream, after an event edge from the gradients that
// fill it, and the compute stream's wait for it at the end of backward (the reducer's SynchronizeStream).
// The overlap of communication with backward is kept: the graph has the same edges the streams had.
//
// What cannot be captured, and what happens then: the step runs eagerly, and the reason is logged once.
//   - a CPU step, or a build without CUDA (a graph records GPU work);
//   - a process group other than NCCL (Gloo's collectives run on host threads);
//   - DDP's find_unused_parameters (a graph walk and a host wait for the used-map every step);
//   - a traced step (GraphedStepOptions::traced: host times and timing events per step that a replay
//     would not refresh);
//   - a step under NoSync (gradient accumulation: a step that does not communicate is another graph);
//   - an optimizer whose Step passes a changing value by value (Adam's step count, until UseDeviceLr);
//   - a learning rate set on the host that moves: seen changing between two warm-up steps, between the
//     last of them and the captured one (that step is replayed once, then the steps run eagerly), or after
//     the capture (a set_lr outside the step). The graph holds the value it was recorded with; give the
//     optimizer a device learning rate (nn/device_lr.h) instead. Not seen: a host rate set inside the
//     step that stays put through the warm-up and moves only later (a step schedule), since replays do
//     not run the step's host code. Such a schedule needs a device learning rate.
// A path that cannot be recorded is not refused but avoided by its comm hook: inside a graph the copy-engine
// hook sends every bucket to NCCL (dist/accel/copy_engine/copy_engine_hook.h, condition 5); the capture log
// names the buckets whose path differs from an eager step's.
// A capture that fails for another reason (a host wait inside the step, a stream left unjoined) is an
// error, returned with CUDA's message and a hint: it is a bug in the step, not a case to hide.
//
// Contract for the step function: it enqueues one whole step on the current stream of `device` and reads
// its inputs from buffers that stay the same (copy each batch into them first); it must not wait for the
// GPU (no Item(), no Work::Wait()). Not thread-safe: the training thread only.
#ifndef TINYDDP_DIST_ACCEL_GRAPH_GRAPHED_STEP_H_
#define TINYDDP_DIST_ACCEL_GRAPH_GRAPHED_STEP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/process_group/work.h"
#include "tensor/cuda_graph.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace tinyddp::nn {
class Optimizer;
}

namespace tinyddp::dist {

class DistributedDataParallel;
class CapturedCollectives;  // graphed_step.cc: the observer that lists what a capture recorded

struct GraphedStepOptions {
  /// Eager steps before the capture; at least 1 (the first step makes the optimizer's state). With DDP
  /// the warm-up also lasts until the buckets are rebuilt (the second step's forward).
  int warmup_steps = 3;
  /// Where the one-line messages go (what was captured; why a step runs eagerly). Empty: stderr.
  std::function<void(const std::string&)> log;
  /// When not empty, the captured graph is written there in Graphviz format (CudaGraph::WriteDot).
  std::string dot_path;
  /// A reason the caller knows the step cannot be captured (a feature of the step that is not listed in
  /// CaptureFacts); when not empty, every step runs eagerly and this is logged as the reason.
  std::string eager_reason;
  /// The step records a trace (dist/observe/trace/): CaptureFacts::tracer, so every step runs eagerly.
  bool traced = false;
  /// Optimizers stepped inside the step whose set changes during the warm-up (a FusedOptimizer's per-bucket
  /// ones follow DDP's bucket rebuild, dist/accel/fused_optimizer): asked for each time they are checked.
  std::function<std::vector<const nn::Optimizer*>()> rebuilt_optimizers;
};

/// The facts that decide whether a step can be captured (GraphedStep gathers them; tests state them).
struct CaptureFacts {
  bool built_with_cuda = true;
  bool on_gpu = true;                 // the step's tensors live on a GPU
  bool collectives_on_gpu = true;     // no process group, or an NCCL one
  bool find_unused_parameters = false;
  bool tracer = false;                // the step records a trace (GraphedStepOptions::traced)
  bool no_sync = false;               // the step runs under DDP's NoSync
};

/// "" when a step with these facts can be recorded into a CUDA graph; otherwise one line: why not, and
/// what to change. The first fact that applies, in the order of CaptureFacts.
std::string WhyNotCapturable(const CaptureFacts& facts);

class GraphedStep {
 public:
  /// Enqueues one whole training step and returns its output (the loss), a tensor on the device, or the
  /// error that stopped it (a lambda returning a plain Tensor converts).
  using StepFn = std::function<absl::StatusOr<Tensor>()>;

  /// `device`: where the step runs. `ddp`: the DDP the step's forward goes through, or null (one device,
  /// no collectives). `optimizers`: the optimizers the step calls Step() on, whose learning rates are
  /// checked before each replay (and GraphedStepOptions::rebuilt_optimizers, asked each time). Nothing runs yet; when
  /// the step can never be captured (CPU, Gloo, find_unused_parameters, a trace), the reason is logged now.
  GraphedStep(Device device, StepFn step, DistributedDataParallel* ddp, std::vector<const nn::Optimizer*> optimizers,
              GraphedStepOptions options = {});
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  /// One training step: eager (warm-up, or when capture is not possible), the capture and first replay,
  /// or a replay. Returns the step's output. Errors: an eager step's own error; the capture failed
  /// (Internal/FailedPrecondition with the reason, or the step's error while it was recorded: nothing is
  /// replayed then); an earlier replay failed (the watchdog's status, e.g. DeadlineExceeded naming the
  /// replay). After a replay's error the group is unusable and training should stop.
  absl::StatusOr<Tensor> Run();

  /// True once the step is captured and replays (until a fallback).
  bool replaying() const { return graph_->captured() && eager_reason_.empty(); }
  /// Why steps run eagerly for good ("" while warming up or replaying).
  const std::string& eager_reason() const { return eager_reason_; }
  /// Steps run so far: eager ones, and replays.
  int64_t eager_steps() const { return eager_steps_; }
  int64_t replays() const { return replays_; }
  /// The recorded graph (captured() is false before the capture).
  const cuda::CudaGraph& graph() const { return *graph_; }
  /// The collectives each replay runs, as the process group describes them (empty without DDP).
  const std::vector<std::string>& captured_collectives() const { return collectives_; }
  /// "cuda graph (replaying)" or "eager (<reason>)": which mode ran, for logs and benchmark rows.
  std::string ModeName() const;

 private:
  // Where each watched optimizer reads its learning rate: the host value, or the device tensor's address.
  struct LrSource {
    double host = 0;
    const void* device = nullptr;
    bool operator==(const LrSource& o) const { return device == o.device && (device != nullptr || host == o.host); }
    bool operator!=(const LrSource& o) const { return !(*this == o); }
  };

  bool WarmedUp() const;
  // The optimizers whose learning rates a graph would freeze: the caller's, and DDP's fused ones.
  std::vector<const nn::Optimizer*> Watched() const;
  std::vector<LrSource> LearningRates() const;
  // "" when `after` reads its learning rates as `before` did; else why a graph would replay a stale one.
  std::string LearningRateMoved(const std::vector<LrSource>& before, const std::vector<LrSource>& after,
                                const char* when) const;
  absl::Status Capture();
  // Permanently eager from now on, with `reason` logged once.
  void FallBack(std::string reason);
  void Log(const std::string& line) const;

  const Device device_;
  const StepFn step_;
  DistributedDataParallel* const ddp_;
  std::vector<const nn::Optimizer*> optimizers_;
  const GraphedStepOptions options_;

  std::unique_ptr<cuda::CudaGraph> graph_;  // replaced by a fresh one when a capture fails
  Tensor output_;                        // the captured step's output, rewritten by each replay
  std::vector<LrSource> warmup_lrs_;      // after the last eager warm-up step
  std::vector<LrSource> captured_lrs_;    // as the captured step left them
  std::string stale_after_replay_;       // the rate moved at the capture: replay once, then this reason
  std::shared_ptr<CapturedCollectives> capture_log_;  // attached to DDP's group at the first capture
  std::vector<std::string> collectives_;
  std::string watch_description_;
  std::shared_ptr<Work> last_watch_;     // the last replay, as the watchdog holds it
  std::string eager_reason_;
  int64_t eager_steps_ = 0;
  int64_t replays_ = 0;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ACCEL_GRAPH_GRAPHED_STEP_H_
