// PipelineSchedule: what every rank of a pipeline does in one training step, as a list of actions per rank
// (PyTorch's torch.distributed.pipelining action IR, Megatron's schedules). A piece of the pipeline wing
// (dist/parallel/pipeline/, docs/pipeline_parallel.md): a pure function of (schedule, p, m, v), so every rank
// derives the same table, rank 0 prints it (schedule_printer.h) and the runtime (pipeline_runtime.h) runs a
// rank's row of it, action by action.
//
// The actions of (virtual) stage s on microbatch k:
//   F k       forward: the stage's layers on microbatch k's activation (stage 0: the inputs)
//   B k       backward: from the activation's gradient (last stage: the loss) to the input's gradient,
//             accumulating the weight gradients (zb: the input gradient only)
//   W k       zb only: the weight gradients B k left behind (autograd/weight_grad_deferral.h), into .grad
//   SEND_F k  the activation F k made, to stage s+1         RECV_F k   stage s-1's activation, for F k
//   SEND_B k  the input gradient B k made, to stage s-1      RECV_B k   stage s+1's gradient, for B k
// Stage s lives on rank s % p (Megatron's interleaved layout: rank r holds stages r, r+p, ..., r+(v-1)p).
//
// Where the communication sits (the runtime issues it exactly so, so the printed table is what runs): the
// actions between two compute actions form one call, BatchSendRecv (batch_isend_irecv): the sends the
// previous compute made and the receive the next one needs. One call, because a rank's point-to-point calls
// run one after another (Gloo's worker thread, NCCL's stream) and a send completes only once its receiver is
// there: a 1F1B stage that sent an activation and then waited for a gradient, facing a neighbour that sent a
// gradient and waited for an activation, would deadlock; as one call each, both pairs meet (Megatron's
// send_forward_recv_backward). The runtime waits for a call only in front of the compute that reads its
// receive: a call of sends alone runs while the rank computes on, and is waited for at the end of the step
// (picotron waits for every send and receive as soon as it is issued). ValidateSchedule runs exactly these
// rules (one call at a time per rank, a message moving only when both ends' calls are current) to prove that
// no rank waits forever.
//
// Why every schedule here trains to the same bits as one process accumulating the same microbatches: each
// stage runs the backwards of its microbatches in increasing k (GPipe and 1F1B by construction; interleaved
// per stage as well), so every weight gradient is summed in microbatch order, as the one-process reference
// does, and each microbatch's arithmetic is the same GEMMs on the same rows. ValidateSchedule checks it.
#ifndef TINYDDP_DIST_PARALLEL_PIPELINE_SCHEDULE_H_
#define TINYDDP_DIST_PARALLEL_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tinyddp::dist::pipeline {

enum class ScheduleKind : uint8_t { kGPipe, kOneFOneB, kInterleaved, kZeroBubble };
/// "gpipe", "1f1b", "interleaved", "zb" (the --pp_schedule spellings).
const char* ScheduleName(ScheduleKind kind);
/// The kind spelled `name`; InvalidArgument listing the choices.
absl::StatusOr<ScheduleKind> ParseSchedule(const std::string& name);

enum class ActionKind : uint8_t { kForward, kBackward, kWeight, kSendForward, kRecvForward, kSendBackward, kRecvBackward };

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;       // the (virtual) stage, 0 .. p*v-1
  int microbatch = 0;  // 0 .. m-1
  bool is_compute() const { return kind == ActionKind::kForward || kind == ActionKind::kBackward || kind == ActionKind::kWeight; }
  bool is_send() const { return kind == ActionKind::kSendForward || kind == ActionKind::kSendBackward; }
  bool is_recv() const { return kind == ActionKind::kRecvForward || kind == ActionKind::kRecvBackward; }
  /// PyTorch's spelling, stage then action then microbatch: "1F3", "0B2", "2SEND_F0", "1RECV_B4".
  std::string ToString() const;
  bool operator==(const Action& o) const { return kind == o.kind && stage == o.stage && microbatch == o.microbatch; }
};

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int ranks = 1;           // p: pipeline ranks
  int microbatches = 1;    // m
  int virtual_stages = 1;  // v: stages per rank (interleaved only)
};

struct PipelineSchedule {
  ScheduleOptions options;
  std::vector<std::vector<Action>> ranks;  // ranks[r]: rank r's actions, in the order they are issued

  int num_ranks() const { return options.ranks; }
  int num_stages() const { return options.ranks * options.virtual_stages; }
  int num_microbatches() const { return options.microbatches; }
  int RankOfStage(int stage) const { return stage % options.ranks; }
  /// The rank a communication action talks to: the next stage's for SEND_F and RECV_B, the previous
  /// stage's for RECV_F and SEND_B. Precondition: a communication action.
  int PeerOf(const Action& action) const;
  /// The tag both ends of one message use: which microbatch, which stage receives it, activation or gradient.
  int TagOf(const Action& action) const;
  /// The formula's idle fraction for this shape: (p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1), zb (ZB-H1 with F, B
/// and W of one cost each: its bubble is (p-1) units of 3m) (p-1)/(3m+p-1).
  double FormulaBubble() const;
};

/// The receive compute action `a` needs before it runs (RECV_F for an F past stage 0, RECV_B for a B before the
/// last of `stages` stages): true and *recv set, or false.
bool ReceiveFor(const Action& a, int stages, Action* recv);
/// The send compute action `a` makes after it runs (SEND_F, SEND_B): true and *send set, or false.
bool SendOf(const Action& a, int stages, Action* send);

/// The schedule `options.kind` for p ranks, m microbatches, v virtual stages. InvalidArgument, naming the
/// flag and the fix, for a shape the schedule cannot run: p, m or v < 1; v > 1 for anything but interleaved;
/// interleaved with m not a multiple of p (Megatron's rule: its warm-up walks microbatches in groups of p).
absl::StatusOr<PipelineSchedule> MakeSchedule(const ScheduleOptions& options);

/// Checks what the runtime and the exactness claim rely on: every stage forwards and backwards every
/// microbatch exactly once (zb: and W's it, after its B), backwards (and W's) each stage's microbatches in
/// increasing order, forwards before it backwards, and the ranks' calls pair up so that, run as the header says, no rank waits forever (a
/// simulation to completion). FailedPrecondition naming the first broken rule.
absl::Status ValidateSchedule(const PipelineSchedule& schedule);

/// A compute action placed in time by SimulatedTimeline.
struct TimedAction {
  Action action;
  int64_t start = 0, end = 0;
};
/// Runs the schedule with an F taking `forward_cost` time units, a B `backward_cost` and a W (zb) `weight_cost`
/// (for zb pass B's input half as backward_cost and its weight half as weight_cost), messages free once
/// both ends' calls are current: each rank's compute actions with their start and end (empty rows when the
/// schedule deadlocks; ValidateSchedule says where).
std::vector<std::vector<TimedAction>> SimulatedTimeline(const PipelineSchedule& schedule, int forward_cost = 1,
                                                       int backward_cost = 2, int weight_cost = 1);

/// Runs the schedule in unit time steps (an F takes `forward_cost`, a B `backward_cost`, messages are free)
/// and returns each rank's idle fraction of the makespan: the formula's world, for comparison with the
/// measured figures. Precondition: ValidateSchedule passed.
std::vector<double> SimulatedBubble(const PipelineSchedule& schedule, int forward_cost = 1, int backward_cost = 2,
                                    int weight_cost = 1);

/// The most microbatches whose activations rank `rank` holds at once (forwarded, not yet backwarded):
/// GPipe m, 1F1B at most p (stage 0; stage s holds p - s).
int PeakMicrobatchesInFlight(const PipelineSchedule& schedule, int rank);

}  // namespace tinyddp::dist::pipeline

#endif  // TINYDDP_DIST_PARALLEL_PIPELINE_SCHEDULE_H_
