// Fault injection for tests: make one rank of a real job hang, exit, die or see a NaN at a chosen step,
// so that the failure paths (timeouts, blame, elastic restart, the non-finite loss check) are tested
// with real processes instead of mocks. Off unless the environment asks for it:
//
//   TINYDDP_FAULT=rank=1,step=5,action=hang             rank 1 stops responding before step 5
//   TINYDDP_FAULT=rank=1,step=5,action=exit,code=7      rank 1 exits with status 7
//   TINYDDP_FAULT=rank=*,step=9,action=kill             every rank dies by SIGKILL (no cleanup at all)
//   TINYDDP_FAULT=rank=0,step=3,action=nan              rank 0's step 3 computes a NaN loss
//   TINYDDP_FAULT=rank=0,step=7,action=preempt          before step 7 rank 0 sends SIGTERM to the process that
//                                                       started the ranks (launch, or ddp_mlp's own spawner), as
//                                                       a scheduler preempting the job does: at a known step
//   TINYDDP_FAULT=rank=1,step=5,point=allreduce,action=hang   at another named point (see below)
//   TINYDDP_FAULT=rank=2,step=4,action=stop             rank 2 freezes (SIGSTOP) before step 4
//   TINYDDP_FAULT=rank=0,step=8,action=sleep,ms=3000    rank 0 sleeps 3 s before step 8, then carries on
//   TINYDDP_FAULT="rank=3,step=5,action=kill;rank=2,step=8,action=kill"   several faults, ';' between them
//
// Keys (comma-separated, each once): rank (a RANK, or * for every rank; required), step (required),
// action (hang | exit | kill | nan | preempt | stop | sleep; required), point (default "step"), code (exit's
// status, 1-255, default 1), ms (sleep's milliseconds, default 1000), restart (the launcher round it fires in: a number or *, default 0, so an elastic restart,
// which sets TINYDDP_RESTART_COUNT, runs clean).
//
// Points are names that code passes to MaybeInjectFault together with its step counter:
//   step        examples/ddp_mlp.cc, before each training step (the global step, from 0)
//   collective  dist/observe/fault/collective_fault.h, an observer of a process group (ddp_mlp attaches it):
//               as this rank issues collective #step (its sequence number in the group), numbered but
//               before it runs, so a kill here leaves the peers waiting inside that collective for a rank
//               that is gone (e.g. in a DDP bucket's all_reduce)
//   recovery    dist/elastic/in_place/replica_group.cc, as a survivor of recovery generation `step` has been
//               counted in its quorum and is about to build the new group (a loss during the recovery)
// Other layers add their own points (a collective, a bucket's all_reduce) by calling MaybeInjectFault
// with a new name and listing it here. hang, exit and kill happen inside MaybeInjectFault; nan is
// returned to the caller, which knows how to poison its own numbers. A fault fires when point, step,
// rank and restart all match; it prints one line on stderr first, so a test's output says what it did.
//
// This sits below everything (base/ depends on nothing but Abseil): it reads RANK (or SLURM_PROCID,
// OMPI_COMM_WORLD_RANK) and TINYDDP_RESTART_COUNT itself.
#ifndef TINYDDP_BASE_FAULT_INJECTION_H_
#define TINYDDP_BASE_FAULT_INJECTION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tinyddp {

inline constexpr char kFaultEnv[] = "TINYDDP_FAULT";

enum class FaultAction {
  kNone,       // nothing to do here
  kHang,       // stop responding (sleep until killed), connections left open
  kExit,       // exit at once with FaultSpec::exit_code, skipping destructors
  kKill,       // raise SIGKILL: the process vanishes as in an OOM kill
  kNonFinite,  // the caller makes this step's numbers NaN
  kPreempt,    // SIGTERM to the parent process (the launcher); this rank carries on
  kStop,       // raise SIGSTOP: every thread freezes, connections stay open (a frozen rank)
  kSleep,      // sleep FaultSpec::sleep_ms, then carry on (a slow rank: gives a replacement time to start)
};

/// "hang", "exit", "kill", "nan", "none".
const char* FaultActionName(FaultAction action);

struct FaultSpec {
  std::optional<int> rank;     // nullopt: every rank
  int64_t step = 0;
  std::string point = "step";
  FaultAction action = FaultAction::kNone;
  int exit_code = 1;           // kExit only
  int64_t sleep_ms = 1000;     // kSleep only
  std::optional<int> restart = 0;  // nullopt: every round
  std::string text;            // as given, for messages
};

/// Parses a TINYDDP_FAULT value (grammar in the header comment). InvalidArgument names the bad key or
/// value and shows a valid example.
absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text);

/// A spec bound to one process: its rank (-1 when unknown: matches only rank=*) and restart round.
class FaultInjector {
 public:
  FaultInjector() = default;  // injects nothing
  FaultInjector(FaultSpec spec, int rank, int restart) : spec_(std::move(spec)), rank_(rank), restart_(restart) {}

  /// Whether the spec names this process, `point` and `step`.
  bool Matches(absl::string_view point, int64_t step) const;
  /// When it matches: prints what it does, then hangs, exits or kills the process (never returning),
  /// or returns kNonFinite. kNone otherwise.
  FaultAction Maybe(absl::string_view point, int64_t step) const;

 private:
  std::optional<FaultSpec> spec_;
  int rank_ = -1;
  int restart_ = 0;
};

/// Checks TINYDDP_FAULT (when set) once, so a program can refuse a typo at startup with a clean error
/// instead of silently injecting nothing. OK when unset.
absl::Status CheckFaultInjectionEnvironment();

/// The process-wide injector built from the environment on first use (a bad spec injects nothing;
/// CheckFaultInjectionEnvironment reports it). Thread-safe. Costs one branch when TINYDDP_FAULT is unset.
FaultAction MaybeInjectFault(absl::string_view point, int64_t step);

}  // namespace tinyddp

#endif  // TINYDDP_BASE_FAULT_INJECTION_H_
