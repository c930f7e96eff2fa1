// AgreeOnMembership: the survivors of a failed step agree, through the job's store, on who goes on and on
// the step they all continue from. torchft's quorum, keyed here on a generation (one per recovery).
//
// Protocol for generation g (the members of generation g-1 are `previous`):
//   1. each survivor writes "g<g>/arrived/<id>" = the next step it would run (the failed step, or the one
//      after it if its own all_reduce of that step had completed: see below);
//   2. it waits up to `window` for every previous member to arrive (a dead or frozen one never does; one
//      whose process is known to be gone ends the wait early, see AgreeOnMembership);
//   3. it proposes "the members that arrived, and the largest next step among them" and writes the
//      proposal with CompareSet("g<g>/decision", absent -> proposal): the first write wins, every later
//      CompareSet returns the winner's value, so every survivor reads the same decision;
//   4. a survivor that is not in the decision (it arrived after the window) is out of the job (Excluded).
// Why two survivors can never continue with different members: a survivor continues only with the decision
// of its generation, which is one key written once; and the group of generation g is built under keys of its
// own ("g<g>/") with exactly the decided members, so a process that read no decision, or another generation's,
// cannot connect into it.
// Why the largest next step: a ring all_reduce can complete on some ranks and fail on others (a rank that
// received every chunk before the peer died). Those that completed step k hold the state after step k, the
// same on all of them (they summed the same inputs), so nobody rolls back: the others adopt the state of the
// `source` (the lowest id at the largest step; live_state.h) and the job redoes nothing that completed.
// Divergence is at most one step: no rank can complete step k+1 unless every rank contributed to it.
#ifndef TINYDDP_DIST_ELASTIC_IN_PLACE_QUORUM_H_
#define TINYDDP_DIST_ELASTIC_IN_PLACE_QUORUM_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/store/store.h"

namespace tinyddp::dist::in_place {

/// Who trains, from which step, in one generation of the job's group.
struct Membership {
  int64_t generation = 0;
  int64_t step = 0;          // the step every member runs next
  std::vector<int> members;  // replica ids (the ranks the job started with), ascending
  int source = 0;            // the member whose state every member adopts (reached `step`; lowest such id)
  /// The member's index (its rank in this generation's group), or -1.
  int IndexOf(int id) const;
  /// "generation 1: replicas 0,1,2 from step 5 (state from 0)".
  std::string ToString() const;
};

/// One survivor's part of generation `generation`'s quorum (see the header comment). `gone` (may be empty) says
/// whether a member's process is known to be gone (ReplicaGroup asks the kernel about those on this host): the
/// wait then ends as soon as every member has arrived or is gone, instead of at the end of the window. Errors:
/// FailedPrecondition ("excluded: ...") when the decision left `id` out; the store's error (its timeout bounds
/// every call). Preconditions: `id` is in `previous`; every survivor passes the same generation and previous.
absl::StatusOr<Membership> AgreeOnMembership(Store& store, int64_t generation, const std::vector<int>& previous, int id,
                                             int64_t next_step, std::chrono::milliseconds window,
                                             const std::function<bool(int id)>& gone = {});

/// A decision as the store holds it ("step;source;id,id,...") and back.
std::string EncodeMembership(const Membership& m);
absl::StatusOr<Membership> DecodeMembership(int64_t generation, const std::string& text);
/// The key of generation `generation`'s one decision.
std::string DecisionKey(int64_t generation);

}  // namespace tinyddp::dist::in_place

#endif  // TINYDDP_DIST_ELASTIC_IN_PLACE_QUORUM_H_
