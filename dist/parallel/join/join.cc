// Join (dist/parallel/join/join.h): the per-step flags, the turns, and the checks that travel with them.
#include "dist/parallel/join/join.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/parallel/join/shadow_step.h"
#include "tensor/tensor.h"

namespace tinyddp::dist::join {
namespace {

// What a rank reports about its previous step beside its flag, so that a mistake every rank makes alike is
// found by every rank at the same step (a rank that found it alone would stop, and leave the others waiting).
enum Violation : int64_t {
  kNone = 0,
  kNoHook = 1,  // the step's backward went through DDP's comm hook, but that hook is not Join's
};

std::string Explain(int rank, int64_t violation, int64_t step) {
  if (violation == kNoHook) {
    return absl::StrCat("rank ", rank, "'s DDP step ", step, " sent no gradient bucket through Join's comm hook, so "
                        "its gradients were averaged over all ranks, not over those that train. hint: set "
                        "DdpOptions::comm_hook = join->Hook() before DistributedDataParallel::Create, and leave "
                        "gradient accumulation (NoSync) out, which Join does not support");
  }
  return absl::StrCat("rank ", rank, " reported an unknown problem (", violation, ") at step ", step);
}

}  // namespace

const char* TurnName(Turn turn) {
  switch (turn) {
    case Turn::kTrain: return "train";
    case Turn::kShadow: return "shadow";
    case Turn::kAllDone: return "all done";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Join>> Join::Create(std::shared_ptr<ProcessGroup> pg, JoinOptions options) {
  if (pg == nullptr) {
    return absl::InvalidArgumentError("Join: the process group is null; hint: pass the group DDP uses");
  }
  return std::unique_ptr<Join>(new Join(std::move(pg), options));
}

Join::Join(std::shared_ptr<ProcessGroup> pg, JoinOptions options) : pg_(std::move(pg)), options_(options) {}

CommHook Join::Hook(CommHook inner) { return JoinHook(hook_state_, std::move(inner)); }

absl::StatusOr<Turn> Join::Next(bool has_batch) {
  // Mistakes of this rank alone are refused here, before the flags' all_reduce: the ranks that train may be
  // waiting for this rank in DDP's all_reduce, and the flags would be matched against it (a collective is
  // matched by its position). Those ranks then fail after the group's timeout, naming the all_reduce.
  const bool sent_this_turn = hook_state_->buckets_sent != buckets_at_turn_start_;
  if (turn_ == Turn::kShadow && !shadowed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Join::Next on rank ", pg_->rank(), ": this rank was told to shadow step ", step_,
        " (Turn::kShadow) but did not call Join::Shadow; the ranks that train that step wait for it in DDP's "
        "all_reduce until the group's timeout. hint: on kShadow call join->Shadow(ddp, optimizer, placeholder)"));
  }
  if (turn_ == Turn::kTrain && !sent_this_turn && hook_state_->buckets_sent > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Join::Next on rank ", pg_->rank(), ": step ", step_, " was a training step without a synchronised DDP "
        "backward (no backward, or one under NoSync). Join does not support gradient accumulation: every step "
        "must run one backward outside NoSync, or the ranks' collectives no longer match"));
  }
  // A step that went through DDP but not through Join's hook (the hook has never run): DDP's comm hook is
  // another. Every rank configured alike finds it at the same step, so it travels with the flags.
  int64_t violation = kNone;
  if ((turn_ == Turn::kTrain && hook_state_->buckets_sent == 0) || shadow_missed_hook_) violation = kNoHook;
  shadow_missed_hook_ = false;
  const bool new_epoch = turn_ == Turn::kAllDone;
  const int64_t previous_step = step_;
  if (new_epoch) {
    step_ = 0;
    steps_trained_ = 0;
    steps_shadowed_ = 0;
  } else {
    ++step_;
  }

  // The flags: slot r is rank r's "I have a batch", slot W + r its violation. A SUM leaves every rank's
  // values in its own slots on every rank. Host tensors for Gloo, this rank's GPU for NCCL.
  const int w = pg_->size();
  std::vector<int64_t> flags(2 * w, 0);
  flags[pg_->rank()] = has_batch ? 1 : 0;
  flags[w + pg_->rank()] = violation;
  const Device device = pg_->device_index() >= 0 ? Device::CUDA(pg_->device_index()) : Device::CPU();
  Tensor t = Tensor::FromVector<int64_t>(flags, {2 * static_cast<int64_t>(w)}, device);
  if (absl::Status s = pg_->AllReduce(t, ReduceOp::kSum)->Wait(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("Join: rank ", pg_->rank(), " exchanging the \"I still have a batch\" ",
                                               "flags of step ", step_, " failed: ", s.message()));
  }
  flags = t.ToVector<int64_t>();

  std::vector<std::string> problems;
  for (int r = 0; r < w; ++r) {
    if (flags[w + r] != kNone) problems.push_back(Explain(r, flags[w + r], previous_step));
  }
  if (!problems.empty()) {
    turn_ = Turn::kAllDone;  // a later Next starts afresh
    training_ranks_.clear();
    return absl::FailedPreconditionError(
        absl::StrCat("Join: every rank stops before step ", step_, ": ", absl::StrJoin(problems, "; ")));
  }

  training_ranks_.clear();
  for (int r = 0; r < w; ++r) {
    if (flags[r] != 0) training_ranks_.push_back(r);
  }
  const int n = static_cast<int>(training_ranks_.size());
  shadowed_ = false;
  buckets_at_turn_start_ = hook_state_->buckets_sent;
  if (n == 0) {
    hook_state_->scale = 1.0;
    turn_ = Turn::kAllDone;
    return turn_;
  }
  // W / n: the hook's inner AVG divides by W, so the step's gradient is the mean over the n (join_hook.h).
  hook_state_->scale = options_.divide_by_initial_world_size ? 1.0 : static_cast<double>(w) / n;
  turn_ = has_batch ? Turn::kTrain : Turn::kShadow;
  if (has_batch) {
    ++steps_trained_;
  } else {
    ++steps_shadowed_;
  }
  return turn_;
}

absl::Status Join::Shadow(DistributedDataParallel& ddp, nn::Optimizer* optimizer,
                          const autograd::Variable& placeholder_input) {
  if (turn_ != Turn::kShadow || shadowed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Join::Shadow on rank ", pg_->rank(), " at step ", step_, ": this rank's turn is \"", TurnName(turn_), "\"",
        shadowed_ ? " and it already shadowed this step" : "",
        "; hint: call Shadow once, only when Next() returned Turn::kShadow"));
  }
  if (optimizer != nullptr && ddp.has_bucket_reduced_callback()) {
    return absl::InvalidArgumentError(
        "Join::Shadow: an optimizer wrapper (a fused optimizer) steps inside DDP's backward; stepping `optimizer` "
        "too would update the parameters twice. hint: pass nullptr as the optimizer");
  }
  const int64_t before = hook_state_->buckets_sent;
  RETURN_IF_ERROR(ShadowBackward(ddp, placeholder_input));
  shadowed_ = true;
  if (hook_state_->buckets_sent == before) {
    // DDP's comm hook is not Join's: the gradients are averages over all ranks. Said by the next Next(), on
    // every rank at once (the training ranks find the same), instead of here, which would leave them waiting.
    shadow_missed_hook_ = true;
    return absl::OkStatus();
  }
  if (optimizer != nullptr) optimizer->Step();  // the averaged gradient, as every training rank applies it
  return absl::OkStatus();
}

}  // namespace tinyddp::dist::join
