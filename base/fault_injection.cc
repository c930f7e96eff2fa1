// Fault injection: see fault_injection.h.
#include "base/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tinyddp {
namespace {

constexpr char kExample[] = "e.g. TINYDDP_FAULT=rank=1,step=5,action=hang";

absl::Status Bad(absl::string_view text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(kFaultEnv, "=", text, ": ", why, " (", kExample,
                                                 "; keys: rank, step, action, point, code, restart)"));
}

// A number, or "*" for "any" (nullopt).
bool ParseRankLike(absl::string_view value, std::optional<int>* out) {
  if (value == "*") {
    *out = std::nullopt;
    return true;
  }
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 0) return false;
  *out = n;
  return true;
}

// The first of RANK (launch, torchrun), SLURM_PROCID, OMPI_COMM_WORLD_RANK; -1 when none is a number.
int RankFromEnvironment() {
  for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}) {
    const char* v = std::getenv(name);
    int rank = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &rank)) return rank;
  }
  return -1;
}

// The launcher's restart round (TINYDDP_RESTART_COUNT, dist/launch/env.h); 0 for a first start.
int RestartFromEnvironment() {
  const char* v = std::getenv("TINYDDP_RESTART_COUNT");
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) ? n : 0;
}

}  // namespace

const char* FaultActionName(FaultAction action) {
  switch (action) {
    case FaultAction::kNone: return "none";
    case FaultAction::kHang: return "hang";
    case FaultAction::kExit: return "exit";
    case FaultAction::kKill: return "kill";
    case FaultAction::kNonFinite: return "nan";
    case FaultAction::kPreempt: return "preempt";
    case FaultAction::kStop: return "stop";
    case FaultAction::kSleep: return "sleep";
  }
  return "?";
}

absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text) {
  FaultSpec spec;
  spec.text = std::string(text);
  std::set<std::string> seen;
  bool has_code = false, has_ms = false;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string key(absl::StripAsciiWhitespace(kv.first));
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (!seen.insert(key).second) return Bad(text, absl::StrCat("\"", key, "\" is given twice"));
    if (key == "rank") {
      if (!ParseRankLike(value, &spec.rank)) return Bad(text, absl::StrCat("rank=", value, " is not a rank or *"));
    } else if (key == "step") {
      if (!absl::SimpleAtoi(value, &spec.step) || spec.step < 0) {
        return Bad(text, absl::StrCat("step=", value, " is not a step number (0, 1, ...)"));
      }
    } else if (key == "point") {
      if (value.empty()) return Bad(text, "point= needs a name such as step");
      spec.point = std::string(value);
    } else if (key == "action") {
      if (value == "hang") {
        spec.action = FaultAction::kHang;
      } else if (value == "exit") {
        spec.action = FaultAction::kExit;
      } else if (value == "kill") {
        spec.action = FaultAction::kKill;
      } else if (value == "nan") {
        spec.action = FaultAction::kNonFinite;
      } else if (value == "preempt") {
        spec.action = FaultAction::kPreempt;
      } else if (value == "stop") {
        spec.action = FaultAction::kStop;
      } else if (value == "sleep") {
        spec.action = FaultAction::kSleep;
      } else {
        return Bad(text, absl::StrCat("action=", value, " is not one of hang, exit, kill, nan, preempt, stop, sleep"));
      }
    } else if (key == "code") {
      if (!absl::SimpleAtoi(value, &spec.exit_code) || spec.exit_code < 1 || spec.exit_code > 255) {
        return Bad(text, absl::StrCat("code=", value, " must be an exit status in [1, 255]"));
      }
      has_code = true;
    } else if (key == "ms") {
      if (!absl::SimpleAtoi(value, &spec.sleep_ms) || spec.sleep_ms < 0 || spec.sleep_ms > 3'600'000) {
        return Bad(text, absl::StrCat("ms=", value, " must be milliseconds in [0, 3600000]"));
      }
      has_ms = true;
    } else if (key == "restart") {
      if (!ParseRankLike(value, &spec.restart)) {
        return Bad(text, absl::StrCat("restart=", value, " is not a round number or *"));
      }
    } else {
      return Bad(text, absl::StrCat("unknown key \"", key, "\""));
    }
  }
  for (const char* required : {"rank", "step", "action"}) {
    if (seen.count(required) == 0) return Bad(text, absl::StrCat("missing ", required, "="));
  }
  if (has_code && spec.action != FaultAction::kExit) return Bad(text, "code= only applies to action=exit");
  if (has_ms && spec.action != FaultAction::kSleep) return Bad(text, "ms= only applies to action=sleep");
  return spec;
}

bool FaultInjector::Matches(absl::string_view point, int64_t step) const {
  if (!spec_ || spec_->point != point || spec_->step != step) return false;
  if (spec_->rank && *spec_->rank != rank_) return false;
  return !spec_->restart || *spec_->restart == restart_;
}

FaultAction FaultInjector::Maybe(absl::string_view point, int64_t step) const {
  if (!Matches(point, step)) return FaultAction::kNone;
  const FaultAction action = spec_->action;
  std::fprintf(stderr, "fault injection (%s=%s): rank %d, %.*s %lld: %s\n", kFaultEnv, spec_->text.c_str(), rank_,
               static_cast<int>(point.size()), point.data(), static_cast<long long>(step), FaultActionName(action));
  std::fflush(nullptr);
  switch (action) {
    case FaultAction::kHang:
      for (;;) ::pause();  // until a signal ends the process (the launcher's SIGTERM)
    case FaultAction::kExit:
      ::_exit(spec_->exit_code);  // no destructors, no error report: as abrupt as a crash with a status
    case FaultAction::kKill:
      ::raise(SIGKILL);
      for (;;) ::pause();
    case FaultAction::kSleep:
      std::this_thread::sleep_for(std::chrono::milliseconds(spec_->sleep_ms));
      return FaultAction::kNone;
    case FaultAction::kStop:
      ::raise(SIGSTOP);          // every thread freezes; its sockets stay open (a SIGCONT resumes it)
      return FaultAction::kNone;
    case FaultAction::kPreempt:
      ::kill(::getppid(), SIGTERM);  // the process that started the ranks, as a scheduler's preemption
      return FaultAction::kNone;     // this rank carries on; the signal reaches it through its launcher
    default:
      return action;
  }
}

absl::Status CheckFaultInjectionEnvironment() {
  const char* text = std::getenv(kFaultEnv);
  if (text == nullptr || *text == '\0') return absl::OkStatus();
  for (absl::string_view one : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    if (absl::Status s = ParseFaultSpec(one).status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

FaultAction MaybeInjectFault(absl::string_view point, int64_t step) {
  // Several faults may be given, separated by ';' (each with its own rank, step and point).
  static const std::vector<FaultInjector>* const injectors = [] {
    auto* all = new std::vector<FaultInjector>();
    const char* text = std::getenv(kFaultEnv);
    if (text == nullptr || *text == '\0') return all;
    for (absl::string_view one : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
      absl::StatusOr<FaultSpec> spec = ParseFaultSpec(one);
      if (!spec.ok()) {
        std::fprintf(stderr, "fault injection off: %s\n", std::string(spec.status().message()).c_str());
        all->clear();
        return all;
      }
      all->emplace_back(*std::move(spec), RankFromEnvironment(), RestartFromEnvironment());
    }
    return all;
  }();
  for (const FaultInjector& injector : *injectors) {
    if (const FaultAction action = injector.Maybe(point, step); action != FaultAction::kNone) return action;
  }
  return FaultAction::kNone;
}

}  // namespace tinyddp
