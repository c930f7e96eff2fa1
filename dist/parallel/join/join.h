// Join: training with uneven inputs, without padding the data: ranks with different numbers of batches
// finish an epoch together instead of hanging. torch.distributed.algorithms.join.Join with DDP's join hook,
// as a wing (dist/parallel/join/) that attaches at DDP's CommHook seam and changes nothing in dist/ddp/.
// The problem and the walk-through: docs/uneven_inputs.md.
//
// The problem. A rank's DDP backward waits in one all_reduce per bucket for every other rank. A rank that
// has run out of data calls no backward, so the ranks that still have a batch wait in an all_reduce that
// never completes: the job hangs until the group's timeout. DistributedSampler avoids it by padding each
// rank to the same number of examples (repeats); with real uneven inputs (a rank's own files, streams,
// sequences packed into a varying number of batches) there is nothing to pad with.
//
// The protocol, once per step, on every rank:
//   1. Next(has_batch): one tiny all_reduce of "I still have a batch" flags, W int64 (plus W error codes).
//      Every rank learns which ranks train this step. None: the epoch is over (Turn::kAllDone), on every
//      rank at the same step, so every rank leaves its loop at the same point.
//   2. A rank with a batch trains as usual (Turn::kTrain). Its gradients go through Hook() (join_hook.h),
//      which makes DDP average over the n ranks that train this step instead of all W.
//   3. A rank without one shadows (Turn::kShadow): Shadow() takes the same DDP step on a placeholder input
//      with a gradient of exactly zero (shadow_step.h), so it issues exactly the collectives of the training
//      ranks' backward (the same buckets, sizes and order, because DDP's own code issues them), and adds
//      nothing to the sums. It then steps its optimizer on the averaged gradient it received.
//
// Why the shadowing ranks step their optimizer. PyTorch's joined ranks skip the optimizer and, at the end,
// receive the model by a broadcast from the last rank to join (sync_final_model). That restores the
// weights but not the optimizer state: the joined ranks' momentum buffers, Adam moments and step counts
// stay behind, so a checkpoint or an evaluation taken on such a rank is wrong, and the next epoch starts
// from different optimizer states on different ranks. Here every rank applies the same step to the same
// averaged gradient every step, so weights AND optimizer state stay identical on every rank all the time,
// and no final broadcast is needed. It costs the shadowing rank one small forward/backward and an optimizer
// step while it would otherwise wait anyway.
//
// Which average. With n of W ranks training at step t, each rank's gradient g_i the gradient of its mean
// loss over its own batch:
//   default (divide_by_initial_world_size = false): step t applies (1/n) * sum of the n g_i, the mean over
//     the ranks that train. The step has the same size whatever the number of ranks left, like training
//     on a smaller world; the last batches of the rank with the most data are not damped to 1/W of their
//     gradient. It is also the rule the tests check against (the reference below), and it is what
//     PyTorch's DDP.join(divide_by_initial_world_size=False) does.
//   divide_by_initial_world_size = true (PyTorch's default): step t applies (1/W) * sum of the n g_i. Every
//     batch weighs the same in the epoch's total update, whenever it comes, which is what PyTorch recommends
//     when the ranks differ by a batch or so at the very end (the no-padding sampler's case, at most one
//     example apart).
// The default here is the first: it keeps the per-step semantics of DDP (the gradient is a mean) for
// inputs of any unevenness, where the second turns the tail of a much longer rank into tiny steps.
//
// The reference (join_test.cc checks it): one process, one copy of the model and optimizer; for each step t
// of the epoch, the gradient is the mean, over the ranks that have a batch at step t, of each such rank's
// mean-loss gradient on its batch (divided by W instead of n with the option), then one optimizer step.
// Every rank ends with the same bits, and those agree with the reference up to float reassociation.
//
// The training loop (examples/uneven_inputs.cc runs it; ddp_mlp --join too):
//
//   ASSIGN_OR_RETURN(std::unique_ptr<dist::join::Join> join, dist::join::Join::Create(pg));  // no collective
//   ddp_options.comm_hook = join->Hook();                          // before DistributedDataParallel::Create
//   ASSIGN_OR_RETURN(auto ddp, dist::DistributedDataParallel::Create(*model, pg, ddp_options));
//   const autograd::Variable placeholder(Tensor::Zeros({1, in_features}));  // any input the model takes
//   for (;;) {
//     std::optional<data::Batch> batch = loader->Next();           // this rank's own data, any length
//     if (!batch) RETURN_IF_ERROR(loader->status());               // the end of its data, or an error
//     ASSIGN_OR_RETURN(dist::join::Turn turn, join->Next(batch.has_value()));   // collective: the flags
//     if (turn == dist::join::Turn::kAllDone) break;               // every rank leaves at the same step
//     if (turn == dist::join::Turn::kShadow) {
//       RETURN_IF_ERROR(join->Shadow(*ddp, &optimizer, placeholder));  // collective: DDP's step, zeros
//       continue;
//     }
//     optimizer.ZeroGrad();                                        // kTrain: the usual step
//     autograd::Backward(autograd::CrossEntropy(ddp->Forward(autograd::Variable(batch->inputs)), batch->labels));
//     RETURN_IF_ERROR(ddp->status());
//     optimizer.Step();
//   }
//
// An LR schedule sees the same step on every rank: join->step() counts the epoch's steps, shadowed or not.
//
// Supported: plain DDP (either bucket layout, any bucket sizes), SGD, Adam(W) or any nn::Optimizer, fused
// optimizers (pass no optimizer to Shadow: they step inside DDP's backward), an inner comm hook that
// averages over the world (Hook(inner)), find_unused_parameters (a parameter no training rank used gets a
// zero gradient instead of none on a step where some rank shadows), a rank with no batch at all, and ranks
// that have a batch again after a step without one. Refused, with a message that says what to change:
//   * a DDP whose comm hook is not Hook(): found at the next Next(), on every rank at once (each rank's
//     finding travels with the flags), before any rank trains a wrongly averaged step further;
//   * gradient accumulation (NoSync): a backward under NoSync communicates nothing, so the ranks' collectives
//     would no longer match. Shadow refuses it, and so does the next Next() after a training step without a
//     synchronised backward;
//   * a kShadow turn without Shadow().
// The last two are one rank's mistakes: that rank's Next() refuses before issuing the flags (they would be
// matched against the others' DDP all_reduce), and the ranks waiting for it there fail after the timeout.
//
// Every wait is the group's: the flags' all_reduce and DDP's collectives fail with DeadlineExceeded after
// the group's timeout (InitOptions::timeout, TINYDDP_TIMEOUT). Not thread-safe: the training thread only.
#ifndef TINYDDP_DIST_PARALLEL_JOIN_JOIN_H_
#define TINYDDP_DIST_PARALLEL_JOIN_JOIN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "autograd/variable.h"
#include "dist/ddp/comm_hooks.h"
#include "dist/ddp/ddp.h"
#include "dist/parallel/join/join_hook.h"
#include "dist/process_group/process_group.h"
#include "nn/optimizer.h"

namespace tinyddp::dist::join {

struct JoinOptions {
  /// false (the default here): each step averages over the ranks that train it. true (PyTorch's default):
  /// over all ranks, the shadowing ones counting as zeros. The header says why.
  bool divide_by_initial_world_size = false;
};

/// What a rank does in the current step (Join::Next's answer).
enum class Turn {
  kTrain,    // this rank has a batch: the usual DDP step
  kShadow,   // this rank has none but others do: Join::Shadow
  kAllDone,  // no rank has a batch: the epoch is over, leave the loop (every rank gets it at the same step)
};

/// "train", "shadow", "all done".
const char* TurnName(Turn turn);

class Join {
 public:
  /// The join of this rank over `pg`, the group DDP uses. Collective-free. InvalidArgument for a null group.
  static absl::StatusOr<std::unique_ptr<Join>> Create(std::shared_ptr<ProcessGroup> pg, JoinOptions options = {});

  /// The comm hook to give DDP (DdpOptions::comm_hook, before DistributedDataParallel::Create): `inner`
  /// (empty: AllReduceHook, all_reduce AVG) with each bucket scaled so the average is over this step's
  /// training ranks (join_hook.h). `inner` must average over the whole group, as AVG does.
  CommHook Hook(CommHook inner = {});

  /// Starts a step: the all_reduce of every rank's `has_batch` (collective, every rank calls it once per
  /// step, with or without a batch). Returns kTrain when has_batch, kShadow when not but another rank has
  /// one, kAllDone when no rank has one; after kAllDone the next call starts a new epoch. Errors:
  /// FailedPrecondition, before any collective, when this rank's previous turn was kShadow without Shadow()
  /// or kTrain without a synchronised backward (NoSync); FailedPrecondition on every rank at once naming each
  /// rank whose previous step did not go through Hook(); the flags' communication error (a peer died, or
  /// the group's timeout passed).
  absl::StatusOr<Turn> Next(bool has_batch);

  /// This rank's step on a kShadow turn (collective: it matches the training ranks' DDP step): a DDP step
  /// on `placeholder_input` with a gradient of exactly zero (shadow_step.h), then, unless `optimizer` is
  /// null, optimizer->Step() on the averaged gradient the step received. `placeholder_input` is any input
  /// the model accepts whose forward stays finite (e.g. one row of zeros); its values do not matter.
  /// Pass the optimizer the training ranks step, or null when they call no Step() (fused optimizers step
  /// inside DDP's backward). Errors, all before any collective but the last: FailedPrecondition when the
  /// turn is not kShadow or inside NoSync; InvalidArgument for an optimizer beside fused optimizers (it
  /// would step twice); DDP's communication error. When DDP's comm hook turns out not to be Hook(), the
  /// optimizer does not step and the next Next() reports it on every rank.
  absl::Status Shadow(DistributedDataParallel& ddp, nn::Optimizer* optimizer,
                      const autograd::Variable& placeholder_input);

  /// The current step's index in this epoch (0 for the first); after kAllDone, the epoch's number of steps.
  int64_t step() const { return step_; }
  /// The ranks that train the current step, in increasing order (empty after kAllDone).
  const std::vector<int>& training_ranks() const { return training_ranks_; }
  /// This epoch so far: steps this rank trained, and steps it shadowed.
  int64_t steps_trained() const { return steps_trained_; }
  int64_t steps_shadowed() const { return steps_shadowed_; }
  const JoinOptions& options() const { return options_; }

 private:
  Join(std::shared_ptr<ProcessGroup> pg, JoinOptions options);

  std::shared_ptr<ProcessGroup> pg_;
  const JoinOptions options_;
  std::shared_ptr<JoinHookState> hook_state_ = std::make_shared<JoinHookState>();

  // The current step.
  Turn turn_ = Turn::kAllDone;        // kAllDone before the first step: Next starts an epoch
  bool shadowed_ = false;             // Shadow ran in this kShadow turn
  bool shadow_missed_hook_ = false;   // ... but DDP's comm hook was not Join's (the next Next says so)
  int64_t buckets_at_turn_start_ = 0;  // hook_state_->buckets_sent when the turn began
  int64_t step_ = 0;
  std::vector<int> training_ranks_;
  int64_t steps_trained_ = 0;
  int64_t steps_shadowed_ = 0;
};

}  // namespace tinyddp::dist::join

#endif  // TINYDDP_DIST_PARALLEL_JOIN_JOIN_H_
