// GraphedStep (dist/accel/graph/graphed_step.h): warm-up, capture, replays under the watchdog, and the fallbacks.
#include "dist/accel/graph/graphed_step.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dist/ddp/ddp.h"
#include "dist/process_group/collective_observer.h"
#include "nn/optimizer.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"

namespace tinyddp::dist {

// The descriptions of the collectives issued while the step is recorded, in issue order: the collectives
// each replay runs, where no call of ours sees them. Observes DDP's group (any thread may issue).
class CapturedCollectives : public CollectiveObserver {
 public:
  void Issued(const CollectiveInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_) described_.push_back(info.description);
  }
  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = true;
    described_.clear();
  }
  std::vector<std::string> Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = false;
    return std::move(described_);
  }

 private:
  std::mutex mu_;
  bool recording_ = false;
  std::vector<std::string> described_;
};

std::string WhyNotCapturable(const CaptureFacts& facts) {
  if (!facts.built_with_cuda) return "this binary was built without CUDA, and a CUDA graph records GPU work";
  if (!facts.on_gpu) return "the step runs on the CPU, and a CUDA graph records GPU work";
  if (!facts.collectives_on_gpu) {
    return "the process group is not NCCL: its collectives run on host threads, which a CUDA graph cannot record";
  }
  if (facts.find_unused_parameters) {
    return "DDP's find_unused_parameters walks the autograd graph and waits on the host for the ranks' map of used "
           "parameters every step; make every parameter take part in the loss and turn it off to capture";
  }
  if (facts.tracer) {
    return "the step records a trace (--trace), with host times and timing events per step that a replay would not "
           "refresh; trace without --cuda_graph";
  }
  if (facts.no_sync) {
    return "the step runs under DDP's NoSync (gradient accumulation): a step that does not communicate would need "
           "a graph of its own";
  }
  return "";
}

GraphedStep::GraphedStep(Device device, StepFn step, DistributedDataParallel* ddp,
                         std::vector<const nn::Optimizer*> optimizers, GraphedStepOptions options)
    : device_(device), step_(std::move(step)), ddp_(ddp), optimizers_(std::move(optimizers)),
      options_(std::move(options)), graph_(std::make_unique<cuda::CudaGraph>()) {
  CaptureFacts facts;
  facts.built_with_cuda = cuda::BuiltWithCuda();
  facts.on_gpu = device_.is_cuda();
  if (ddp_ != nullptr) {
    facts.collectives_on_gpu = std::string(ddp_->process_group().backend_name()) == "nccl";
    facts.find_unused_parameters = ddp_->options().find_unused_parameters;
  }
  facts.tracer = options_.traced;
  std::string reason = WhyNotCapturable(facts);
  if (reason.empty()) reason = options_.eager_reason;
  if (!reason.empty()) FallBack(std::move(reason));
}

GraphedStep::~GraphedStep() = default;

void GraphedStep::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
    return;
  }
  std::fprintf(stderr, "tinyddp: %s\n", line.c_str());
  std::fflush(stderr);
}

void GraphedStep::FallBack(std::string reason) {
  eager_reason_ = std::move(reason);
  Log(absl::StrCat("cuda graph: off, every step runs eagerly: ", eager_reason_));
}

std::string GraphedStep::ModeName() const {
  if (replaying()) return "cuda graph (replaying)";
  if (!eager_reason_.empty()) return absl::StrCat("eager (", eager_reason_, ")");
  return "eager (warming up before the capture)";
}

bool GraphedStep::WarmedUp() const {
  if (eager_steps_ < std::max(options_.warmup_steps, 1)) return false;
  // DDP rebuilds its buckets (and the fused optimizers that follow them) in the forward after the first
  // synchronised backward; the graph must hold the final layout.
  if (ddp_ != nullptr && ddp_->options().rebuild_buckets && !ddp_->options().find_unused_parameters &&
      !ddp_->reducer().buckets_rebuilt()) {
    return false;
  }
  return true;
}

std::vector<const nn::Optimizer*> GraphedStep::Watched() const {
  std::vector<const nn::Optimizer*> watched = optimizers_;
  if (options_.rebuilt_optimizers) {
    for (const nn::Optimizer* opt : options_.rebuilt_optimizers()) watched.push_back(opt);
  }
  return watched;
}

std::vector<GraphedStep::LrSource> GraphedStep::LearningRates() const {
  std::vector<LrSource> lrs;
  for (const nn::Optimizer* opt : Watched()) {
    lrs.push_back({opt->lr(), opt->device_lr().defined() ? opt->device_lr().data_ptr() : nullptr});
  }
  return lrs;
}

std::string GraphedStep::LearningRateMoved(const std::vector<LrSource>& before, const std::vector<LrSource>& after,
                                           const char* when) const {
  if (before.size() != after.size()) return "";  // DDP rebuilt its fused optimizers: nothing to compare
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] == after[i]) continue;
    if (before[i].device != after[i].device) {
      return absl::StrCat("optimizer ", i, " was given another device learning rate ", when,
                          ", and a graph reads the one it was recorded with");
    }
    return absl::StrCat("the learning rate of optimizer ", i, ", set on the host, changed from ", before[i].host,
                        " to ", after[i].host, " ", when, ", and a graph replays the value it was recorded with; give "
                        "the optimizer a device learning rate (Optimizer::UseDeviceLr, nn/device_lr.h) so that the "
                        "schedule moves inside the graph");
  }
  return "";
}

absl::StatusOr<Tensor> GraphedStep::Run() {
  if (eager_reason_.empty() && ddp_ != nullptr && !ddp_->sync_enabled()) {
    CaptureFacts facts;
    facts.no_sync = true;
    FallBack(WhyNotCapturable(facts));
  }
  if (eager_reason_.empty() && graph_->captured()) {
    // A set_lr between steps (a schedule outside the step) would leave the graph's value behind.
    if (std::string moved = LearningRateMoved(captured_lrs_, LearningRates(), "after the capture"); !moved.empty()) {
      FallBack(std::move(moved));
    }
  }
  if (!eager_reason_.empty()) {
    ++eager_steps_;
    return step_();
  }
  if (!graph_->captured() && !WarmedUp()) {
    ++eager_steps_;
    absl::StatusOr<Tensor> out = step_();
    // A learning rate the step sets on the host and that moves from step to step would be frozen.
    std::vector<LrSource> lrs = LearningRates();
    if (std::string moved = LearningRateMoved(warmup_lrs_, lrs, "between two warm-up steps"); !moved.empty()) {
      FallBack(std::move(moved));
    }
    warmup_lrs_ = std::move(lrs);
    return out;
  }
  if (!graph_->captured()) {
    for (const nn::Optimizer* opt : Watched()) {
      if (std::string why = opt->WhyStepNotCapturable(); !why.empty()) {
        FallBack(std::move(why));
        ++eager_steps_;
        return step_();
      }
    }
    if (absl::Status s = Capture(); !s.ok()) return s;
    captured_lrs_ = LearningRates();
    // The capture ran the step's host code (a schedule's set_lr included) but none of its GPU work. If the
    // rate moved there, the graph holds this step's rate and is replayed once below: running the step
    // again eagerly would run its host code twice. From the next step on, the steps run eagerly.
    stale_after_replay_ = LearningRateMoved(warmup_lrs_, captured_lrs_, "between the last eager step and the "
                                            "captured one");
  }

  // A replay. The watchdog may have failed the previous one (a rank died, NCCL broke): stop here then.
  if (last_watch_ != nullptr && last_watch_->IsCompleted()) {
    if (absl::Status s = last_watch_->Wait(std::chrono::milliseconds(0)); !s.ok()) return s;
  }
  if (absl::Status s = graph_->Replay(); !s.ok()) return s;
  ++replays_;
  if (ddp_ != nullptr) last_watch_ = ddp_->process_group().WatchReplay(absl::StrCat(watch_description_, replays_));
  if (!stale_after_replay_.empty()) FallBack(std::exchange(stale_after_replay_, std::string()));
  return output_;
}

absl::Status GraphedStep::Capture() {
  // Record from a quiet device: the warm-up's work (and any collective still on the NCCL stream) is done,
  // so nothing recorded can depend on it, and the private pool starts from the allocator's steady state.
  const cuda::Stream stream = cuda::Stream::Current(device_.index);
  stream.Synchronize();
  if (ddp_ != nullptr) ddp_->process_group().collective_stream().Synchronize();
  if (ddp_ != nullptr && capture_log_ == nullptr) {
    capture_log_ = std::make_shared<CapturedCollectives>();
    ddp_->process_group().AddObserver(capture_log_);
  }
  if (capture_log_ != nullptr) capture_log_->Start();

  absl::Status step_status;
  std::vector<std::string> recorded_paths;  // each bucket's path as the hook answers inside the capture
  absl::Status s = graph_->Capture(stream, [this, &step_status, &recorded_paths] {
    absl::StatusOr<Tensor> out = step_();
    if (out.ok()) {
      output_ = *std::move(out);
    } else {
      step_status = out.status();
    }
    for (int b = 0; ddp_ != nullptr && b < ddp_->reducer().num_buckets(); ++b) {
      recorded_paths.push_back(ddp_->BucketPath(b));
    }
  });
  if (s.ok()) s = step_status;  // the step failed while it was recorded: what was recorded is not replayed
  std::vector<std::string> collectives = capture_log_ != nullptr ? capture_log_->Stop() : std::vector<std::string>();
  if (!s.ok()) {
    graph_ = std::make_unique<cuda::CudaGraph>();
    output_ = Tensor();
    return absl::Status(s.code(), absl::StrCat("recording the training step into a CUDA graph after ", eager_steps_,
                                               " eager steps: ", s.message()));
  }
  collectives_ = std::move(collectives);
  if (!options_.dot_path.empty()) {
    if (absl::Status dot = graph_->WriteDot(options_.dot_path); !dot.ok()) return dot;
  }

  const int rank = ddp_ != nullptr ? ddp_->process_group().rank() : 0;
  watch_description_ = absl::StrCat("CUDA graph replay of the training step on rank ", rank, " (holding ",
                                    collectives_.size(), " collective(s): ", absl::StrJoin(collectives_, "; "),
                                    ") #");
  Log(absl::StrFormat("cuda graph: captured the training step after %d eager steps: %d nodes, %d collective(s), "
                      "%.1f MiB private memory; every step from here on is one replay",
                      eager_steps_, graph_->num_nodes(), collectives_.size(),
                      static_cast<double>(graph_->pool_bytes()) / (1 << 20)));
  // A comm hook may take another path inside a graph than in an eager step: the copy engines, whose calls
  // number themselves in stream memory that a replay would freeze, leave their buckets to NCCL there.
  std::vector<std::string> moved;
  for (size_t b = 0; b < recorded_paths.size(); ++b) {
    const std::string eager_path = ddp_->BucketPath(static_cast<int>(b));
    if (recorded_paths[b] == eager_path) continue;
    moved.push_back(absl::StrCat(b, " (", eager_path, " -> ", recorded_paths[b], ")"));
  }
  if (!moved.empty()) {
    Log(absl::StrCat("cuda graph: bucket(s) ", absl::StrJoin(moved, ", "), " take another path in the graph than in "
                     "an eager step: their comm hook avoids a path that a replay cannot repeat"));
  }
  return absl::OkStatus();
}

}  // namespace tinyddp::dist
