// The schedules' check and their simulation (schedule.h): the rules the runtime's point-to-point calls follow,
// run in time, to show that no rank waits forever and to place each action in time for the printer and the
// formulas' world.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dist/parallel/pipeline/schedule.h"

namespace tinyddp::dist::pipeline {
namespace {

// The rules of schedule.h run in time: each rank's main thread issues its calls (the communication between
// two computes, as one call) and computes when the call holding its receive is done; each rank's calls run
// one at a time, in issue order, and a message moves when the calls holding its send and its receive are
// both current. Messages take no time; an F takes `forward_cost`, a B `backward_cost`.
struct Simulation {
  std::vector<std::vector<TimedAction>> timeline;
  bool finished = true;
  std::string stuck;  // where the first rank that never finished waits
};

Simulation Simulate(const PipelineSchedule& s, int forward_cost, int backward_cost, int weight_cost) {
  struct Call {
    std::vector<Action> ops;
    std::vector<bool> matched;
    int64_t issued = 0, done_at = -1, last_match = 0;
  };
  const int p = s.num_ranks(), stages = s.num_stages();
  std::vector<std::vector<Call>> calls(p);
  std::vector<size_t> at(p, 0), head(p, 0);
  std::vector<int64_t> now(p, 0);
  std::vector<std::map<std::tuple<int, int, int>, size_t>> call_of(p);  // recv (kind, stage, mb) -> its call
  Simulation sim;
  sim.timeline.resize(p);
  auto since = [&](int r) {  // when rank r's current call became current
    const Call& c = calls[r][head[r]];
    return head[r] == 0 ? c.issued : std::max(c.issued, calls[r][head[r] - 1].done_at);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {  // main threads
      const std::vector<Action>& row = s.ranks[r];
      while (at[r] < row.size()) {
        if (!row[at[r]].is_compute()) {
          Call call;
          call.issued = now[r];
          for (; at[r] < row.size() && !row[at[r]].is_compute(); ++at[r]) {
            const Action& a = row[at[r]];
            if (a.is_recv()) call_of[r][{static_cast<int>(a.kind), a.stage, a.microbatch}] = calls[r].size();
            call.ops.push_back(a);
          }
          call.matched.assign(call.ops.size(), false);
          calls[r].push_back(call);
          progress = true;
          continue;
        }
        const Action& a = row[at[r]];
        Action need;
        if (ReceiveFor(a, stages, &need)) {
          const Call& c = calls[r][call_of[r].at({static_cast<int>(need.kind), need.stage, need.microbatch})];
          if (c.done_at < 0) break;
          now[r] = std::max(now[r], c.done_at);
        }
        const int cost = a.kind == ActionKind::kForward    ? forward_cost
                         : a.kind == ActionKind::kBackward ? backward_cost
                                                           : weight_cost;
        sim.timeline[r].push_back({a, now[r], now[r] + cost});
        now[r] += cost;
        ++at[r];
        progress = true;
      }
    }
    for (int r = 0; r < p; ++r) {  // the ranks' current calls
      if (head[r] >= calls[r].size()) continue;
      Call& c = calls[r][head[r]];
      for (size_t i = 0; i < c.ops.size(); ++i) {
        if (c.matched[i]) continue;
        const int q = s.PeerOf(c.ops[i]), tag = s.TagOf(c.ops[i]);
        if (head[q] >= calls[q].size()) continue;
        Call& d = calls[q][head[q]];
        for (size_t j = 0; j < d.ops.size(); ++j) {
          if (d.matched[j] || d.ops[j].is_send() == c.ops[i].is_send() || s.PeerOf(d.ops[j]) != r ||
              s.TagOf(d.ops[j]) != tag) {
            continue;
          }
          const int64_t t = std::max(since(r), since(q));
          c.matched[i] = d.matched[j] = true;
          c.last_match = std::max(c.last_match, t);
          d.last_match = std::max(d.last_match, t);
          progress = true;
          break;
        }
      }
    }
    for (int r = 0; r < p; ++r) {  // calls whose every message moved are done
      while (head[r] < calls[r].size() &&
             std::all_of(calls[r][head[r]].matched.begin(), calls[r][head[r]].matched.end(), [](bool m) { return m; })) {
        calls[r][head[r]].done_at = std::max(calls[r][head[r]].last_match, since(r));
        ++head[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p && sim.finished; ++r) {
    if (at[r] < s.ranks[r].size() || head[r] < calls[r].size()) {
      sim.finished = false;
      sim.stuck = absl::StrCat("rank ", r, " waits forever at ",
                               at[r] < s.ranks[r].size() ? s.ranks[r][at[r]].ToString() : "the end of the step",
                               head[r] < calls[r].size() ? absl::StrCat(" (its current call holds ",
                                                                         calls[r][head[r]].ops[0].ToString(), ")")
                                                         : "");
    }
  }
  return sim;
}

}  // namespace

absl::Status ValidateSchedule(const PipelineSchedule& s) {
  const int m = s.num_microbatches();
  // Per rank: each stage's F and B exactly once per microbatch, B after F, B in increasing microbatch order.
  for (int r = 0; r < s.num_ranks(); ++r) {
    std::map<int, int> next_backward, next_weight;  // stage -> the microbatch its next B (W) must be
    std::set<std::pair<int, int>> forwarded;
    int computes = 0;
    for (const Action& a : s.ranks[r]) {
      if (s.RankOfStage(a.stage) != r) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", r, " runs ", a.ToString(), " of another rank"));
      }
      if (a.kind == ActionKind::kForward) {
        if (!forwarded.insert({a.stage, a.microbatch}).second) {
          return absl::FailedPreconditionError(absl::StrCat("rank ", r, " runs ", a.ToString(), " twice"));
        }
        ++computes;
      } else if (a.kind == ActionKind::kBackward) {
        if (!forwarded.count({a.stage, a.microbatch})) {
          return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": ", a.ToString(), " before its forward"));
        }
        if (a.microbatch != next_backward[a.stage]++) {
          return absl::FailedPreconditionError(absl::StrCat(
              "rank ", r, ": ", a.ToString(), " out of microbatch order (the gradient sums would differ)"));
        }
        ++computes;
      } else if (a.kind == ActionKind::kWeight) {
        if (a.microbatch >= next_backward[a.stage] || a.microbatch != next_weight[a.stage]++) {
          return absl::FailedPreconditionError(absl::StrCat(
              "rank ", r, ": ", a.ToString(), " before its B or out of microbatch order (the sums would differ)"));
        }
        ++computes;
      }
    }
    const int per_microbatch = s.options.kind == ScheduleKind::kZeroBubble ? 3 : 2;
    if (computes != per_microbatch * m * s.options.virtual_stages) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, " runs ", computes, " computations, expected ",
                                                        per_microbatch * m * s.options.virtual_stages));
    }
  }
  const Simulation sim = Simulate(s, 1, 2, 1);
  if (!sim.finished) return absl::FailedPreconditionError(absl::StrCat("deadlock: ", sim.stuck));
  return absl::OkStatus();
}

std::vector<std::vector<TimedAction>> SimulatedTimeline(const PipelineSchedule& s, int forward_cost,
                                                       int backward_cost, int weight_cost) {
  Simulation sim = Simulate(s, forward_cost, backward_cost, weight_cost);
  if (!sim.finished) return std::vector<std::vector<TimedAction>>(s.num_ranks());
  return std::move(sim.timeline);
}

std::vector<double> SimulatedBubble(const PipelineSchedule& s, int forward_cost, int backward_cost,
                                    int weight_cost) {
  const std::vector<std::vector<TimedAction>> timeline = SimulatedTimeline(s, forward_cost, backward_cost, weight_cost);
  int64_t makespan = 1;
  for (const auto& row : timeline) {
    if (!row.empty()) makespan = std::max(makespan, row.back().end);
  }
  std::vector<double> idle;
  for (const auto& row : timeline) {
    int64_t busy = 0;
    for (const TimedAction& t : row) busy += t.end - t.start;
    idle.push_back(1.0 - static_cast<double>(busy) / static_cast<double>(makespan));
  }
  return idle;
}

int PeakMicrobatchesInFlight(const PipelineSchedule& s, int rank) {
  int live = 0, peak = 0;
  for (const Action& a : s.ranks[rank]) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++live);
    if (a.kind == ActionKind::kBackward) --live;
  }
  return peak;
}

}  // namespace tinyddp::dist::pipeline
