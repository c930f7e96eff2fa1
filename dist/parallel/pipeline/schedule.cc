// The schedules (schedule.h): each one's compute order per rank, then the communication placed around it.
#include "dist/parallel/pipeline/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace tinyddp::dist::pipeline {
namespace {

Action F(int stage, int mb) { return {ActionKind::kForward, stage, mb}; }
Action B(int stage, int mb) { return {ActionKind::kBackward, stage, mb}; }
Action W(int stage, int mb) { return {ActionKind::kWeight, stage, mb}; }

// GPipe (all forward, all backward; picotron's AFAB): every microbatch's forward, then every backward, in
// microbatch order. Stage s holds all m microbatches' activations at the turn.
std::vector<Action> GPipeOrder(int rank, int m) {
  std::vector<Action> order;
  for (int k = 0; k < m; ++k) order.push_back(F(rank, k));
  for (int k = 0; k < m; ++k) order.push_back(B(rank, k));
  return order;
}

// 1F1B (PipeDream-flush, Megatron's default): p - s - 1 warm-up forwards, then one forward and one backward
// in turn, then the remaining backwards. The same bubble as GPipe, but stage s never holds more than p - s
// microbatches: a microbatch's backward starts as soon as the pipeline is full.
std::vector<Action> OneFOneBOrder(int rank, int p, int m) {
  const int warmup = std::min(p - rank - 1, m);
  std::vector<Action> order;
  for (int k = 0; k < warmup; ++k) order.push_back(F(rank, k));
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back(F(rank, warmup + i));
    order.push_back(B(rank, i));
  }
  for (int k = m - warmup; k < m; ++k) order.push_back(B(rank, k));
  return order;
}

// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): rank r holds v stages (chunks) r, r+p, ...; its
// forwards walk microbatches in groups of p through chunk 0, then the same group through chunk 1, ...;
// backwards walk the chunks the other way. Warm-up: 2(p - r - 1) + (v - 1)p forwards (all of them when
// m == p). Each stage still backwards its microbatches in increasing order (within a chunk, k grows).
// ZB-H1 (Qi et al. 2023, zero bubble): 1F1B's order of F and B, with each backward split into B (the input
// gradient, which the previous stage waits for) and W (the weight gradient, which nobody waits for). Stage s
// holds back its first s W's (as PyTorch's zero-bubble schedules do: the last stage, which starts every gradient
// on its way, holds back the most), so its F's and B's are not delayed, and spends them at the end, where 1F1B
// waits for the next gradient: the bubble shrinks from (p-1)(F+B+W) to (p-1)(F+B-W), a third when the three cost
// the same; stage s still holds at most p microbatches (p - s activations, s pending W's). W's run in
// microbatch order, so the weight gradients sum as 1F1B's do.
std::vector<Action> ZeroBubbleOrder(int rank, int p, int m) {
  const int warmup = std::min(p - rank - 1, m);
  std::vector<Action> order;
  int next_w = 0;
  for (int k = 0; k < warmup; ++k) order.push_back(F(rank, k));
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back(F(rank, warmup + i));
    order.push_back(B(rank, i));
    if (i >= rank) order.push_back(W(rank, next_w++));
  }
  for (int k = m - warmup; k < m; ++k) {
    order.push_back(B(rank, k));
    order.push_back(W(rank, next_w++));
  }
  while (next_w < m) order.push_back(W(rank, next_w++));
  return order;
}

using Units = std::vector<std::vector<Action>>;  // compute actions issued between two calls

Units OneEach(const std::vector<Action>& order) {
  Units units;
  for (const Action& a : order) units.push_back({a});
  return units;
}

// The steady phase's F and B are one unit: one call before the pair receives for both and one after sends
// for both (Megatron's send_forward_backward_recv_forward_backward). With a call between them, as 1F1B has,
// the chunks' messages cross and the ranks deadlock (ValidateSchedule finds it at p=2, v=2, m=4).
Units InterleavedOrder(int rank, int p, int m, int v) {
  const int total = m * v;
  auto microbatch = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k / p) % v; };
  auto backward_chunk = [&](int k) { return v - 1 - (k / p) % v; };
  const int warmup = m == p ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  Units units;
  for (int k = 0; k < warmup; ++k) units.push_back({F(forward_chunk(k) * p + rank, microbatch(k))});
  for (int i = 0; i < total - warmup; ++i) {
    const int k = warmup + i;
    units.push_back({F(forward_chunk(k) * p + rank, microbatch(k)), B(backward_chunk(i) * p + rank, microbatch(i))});
  }
  for (int k = total - warmup; k < total; ++k) units.push_back({B(backward_chunk(k) * p + rank, microbatch(k))});
  return units;
}

// The compute order with its communication around it (schedule.h, "Where the communication sits"): the call
// before unit u holds the sends of unit u-1's computes, then the receives unit u's computes need; after the
// last unit, its sends.
std::vector<Action> WithCommunication(const Units& units, int stages) {
  std::vector<Action> out;
  Action comm;
  for (size_t u = 0; u <= units.size(); ++u) {
    if (u > 0) {
      for (const Action& a : units[u - 1]) {
        if (SendOf(a, stages, &comm)) out.push_back(comm);
      }
    }
    if (u == units.size()) break;
    for (const Action& a : units[u]) {
      if (ReceiveFor(a, stages, &comm)) out.push_back(comm);
    }
    out.insert(out.end(), units[u].begin(), units[u].end());
  }
  return out;
}

}  // namespace

bool ReceiveFor(const Action& a, int stages, Action* recv) {
  if (a.kind == ActionKind::kForward && a.stage > 0) {
    *recv = {ActionKind::kRecvForward, a.stage, a.microbatch};
    return true;
  }
  if (a.kind == ActionKind::kBackward && a.stage < stages - 1) {
    *recv = {ActionKind::kRecvBackward, a.stage, a.microbatch};
    return true;
  }
  return false;
}
bool SendOf(const Action& a, int stages, Action* send) {
  if (a.kind == ActionKind::kForward && a.stage < stages - 1) {
    *send = {ActionKind::kSendForward, a.stage, a.microbatch};
    return true;
  }
  if (a.kind == ActionKind::kBackward && a.stage > 0) {
    *send = {ActionKind::kSendBackward, a.stage, a.microbatch};
    return true;
  }
  return false;
}

const char* ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZeroBubble: return "zb";
  }
  return "?";
}

absl::StatusOr<ScheduleKind> ParseSchedule(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                         ScheduleKind::kZeroBubble}) {
    if (name == ScheduleName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--pp_schedule=", name, ": expected one of gpipe, 1f1b, interleaved, zb"));
}

std::string Action::ToString() const {
  static const char* const kNames[] = {"F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  return absl::StrCat(stage, kNames[static_cast<int>(kind)], microbatch);
}

int PipelineSchedule::PeerOf(const Action& a) const {
  TINYDDP_CHECK_OP(!a.is_compute(), "PipelineSchedule::PeerOf", a.ToString(), " is not a communication");
  const bool next = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvBackward;
  return RankOfStage(next ? a.stage + 1 : a.stage - 1);
}

int PipelineSchedule::TagOf(const Action& a) const {
  // Named by the receiving stage on both ends: SEND_F of stage s is RECV_F of stage s+1, SEND_B of s is
  // RECV_B of s-1.
  int to = a.stage;
  if (a.kind == ActionKind::kSendForward) to = a.stage + 1;
  if (a.kind == ActionKind::kSendBackward) to = a.stage - 1;
  const bool gradient = a.kind == ActionKind::kSendBackward || a.kind == ActionKind::kRecvBackward;
  return (a.microbatch * num_stages() + to) * 2 + (gradient ? 1 : 0);
}

double PipelineSchedule::FormulaBubble() const {
  const double p = options.ranks, m = options.microbatches, v = options.virtual_stages;
  if (options.kind == ScheduleKind::kZeroBubble) return (p - 1) / (3 * m + p - 1);  // F = B = W: a third of 1F1B's
  return (p - 1) / (v * m + p - 1);
}

absl::StatusOr<PipelineSchedule> MakeSchedule(const ScheduleOptions& o) {
  if (o.ranks < 1) return absl::InvalidArgumentError(absl::StrCat("--pp=", o.ranks, ": must be >= 1"));
  if (o.microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--microbatches=", o.microbatches, ": must be >= 1"));
  }
  if (o.virtual_stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--pp_virtual_stages=", o.virtual_stages, ": must be >= 1"));
  }
  if (o.virtual_stages > 1 && o.kind != ScheduleKind::kInterleaved) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pp_virtual_stages=", o.virtual_stages, " applies to --pp_schedule=interleaved only, not ",
        ScheduleName(o.kind), ": drop it, or use --pp_schedule=interleaved"));
  }
  if (o.kind == ScheduleKind::kInterleaved) {
    if (o.ranks < 2) {
      return absl::InvalidArgumentError("--pp_schedule=interleaved needs --pp >= 2 (one rank has no bubble to "
                                        "shrink): use --pp_schedule=1f1b, or more pipeline ranks");
    }
    if (o.microbatches % o.ranks != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--pp_schedule=interleaved needs --microbatches to be a multiple of --pp (%d), got %d: its warm-up "
          "walks the microbatches in groups of %d; use --microbatches=%d",
          o.ranks, o.microbatches, o.ranks, o.ranks * ((o.microbatches + o.ranks - 1) / o.ranks)));
    }
  }
  // Each message's tag names its microbatch and stage (TagOf); they must stay below the evaluation's (2^20).
  if (static_cast<int64_t>(o.microbatches) * o.ranks * o.virtual_stages >= (1 << 19)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--microbatches=%d over %d stages: more than 2^19 messages per step, past the tags a step can name; use "
        "fewer microbatches", o.microbatches, o.ranks * o.virtual_stages));
  }
  PipelineSchedule s;
  s.options = o;
  const int stages = o.ranks * o.virtual_stages;
  for (int r = 0; r < o.ranks; ++r) {
    Units units;
    switch (o.kind) {
      case ScheduleKind::kGPipe: units = OneEach(GPipeOrder(r, o.microbatches)); break;
      case ScheduleKind::kOneFOneB: units = OneEach(OneFOneBOrder(r, o.ranks, o.microbatches)); break;
      case ScheduleKind::kZeroBubble: units = OneEach(ZeroBubbleOrder(r, o.ranks, o.microbatches)); break;
      default: units = InterleavedOrder(r, o.ranks, o.microbatches, o.virtual_stages); break;
    }
    s.ranks.push_back(WithCommunication(units, stages));
  }
  return s;
}

}  // namespace tinyddp::dist::pipeline
