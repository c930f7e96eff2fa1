// The analyzer: load a directory's records, look for a disagreement, else for the collective the job
// stopped at, and say who did not get there.
#include "dist/observe/flight_recorder/verdict.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tinyddp::dist {

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* LivenessText(Liveness l) {
  switch (l) {
    case Liveness::kAlive: return "alive";
    case Liveness::kStopped: return "stopped (SIGSTOP)";
    case Liveness::kGone: return "gone";
    case Liveness::kUnknown: return "liveness unknown";
  }
  return "?";
}

std::string RankSet(const std::vector<int>& ranks) { return absl::StrCat("{", absl::StrJoin(ranks, ","), "}"); }

const FlightEntry* Find(const RankFlightRecord& r, int64_t seq) {
  auto it = std::lower_bound(r.entries.begin(), r.entries.end(), seq,
                             [](const FlightEntry& e, int64_t s) { return e.seq < s; });
  return it != r.entries.end() && it->seq == seq ? &*it : nullptr;
}

int64_t LastSeq(const RankFlightRecord& r) { return r.entries.empty() ? -1 : r.entries.back().seq; }

// The first collective this rank has not completed (the next one it would issue if all are done).
int64_t FirstUnfinished(const RankFlightRecord& r) {
  for (const FlightEntry& e : r.entries) {
    if (e.state != FlightState::kCompleted) return e.seq;
  }
  return LastSeq(r) + 1;
}

// The last collective this rank completed before `seq`, or -1 if its ring holds none.
int64_t LastCompletedBefore(const RankFlightRecord& r, int64_t seq) {
  int64_t last = -1;
  for (const FlightEntry& e : r.entries) {
    if (e.seq < seq && e.state == FlightState::kCompleted) last = e.seq;
  }
  return last;
}

// "AllReduce(float32 [262144], AVG) (bucket 0, 1.0 MiB)"
std::string Describe(const FlightEntry& e) {
  std::string extra = e.bucket >= 0 ? absl::StrCat("bucket ", e.bucket, ", ") : "";
  return absl::StrCat(e.Fingerprint(), " (", extra, HumanBytes(e.bytes), ")");
}

std::string Short(const std::string& error, size_t max_chars = 160) {
  std::string s = error.substr(0, error.find('\n'));
  if (s.size() > max_chars) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

// One line per rank: where it was, as its record shows.
std::string DetailOf(const RankFlightRecord& r, int64_t seq, int64_t now_us) {
  std::string line = absl::StrCat("rank ", r.rank, " (", r.source, " ", r.path.empty() ? "" : r.path, ", pid ",
                                  r.pid, ", ", LivenessText(LivenessOf(r, now_us)), "): ");
  const int64_t last = LastSeq(r);
  if (last < 0) return line + "no collective recorded";
  int64_t done = -1;
  for (const FlightEntry& e : r.entries) {
    if (e.state == FlightState::kCompleted) done = e.seq;
  }
  absl::StrAppend(&line, "last completed #", done, ", last issued #", last);
  if (const FlightEntry* e = Find(r, seq)) {
    absl::StrAppend(&line, "; #", seq, " ", FlightStateName(e->state));
    if (e->state == FlightState::kFailed) absl::StrAppend(&line, ": ", Short(e->error));
  } else {
    absl::StrAppend(&line, "; never issued #", seq);
  }
  if (!r.reason.empty()) absl::StrAppend(&line, " [dumped on ", r.reason, "]");
  return line;
}

}  // namespace

Liveness LivenessOf(const RankFlightRecord& r, int64_t now_us) {
  if (!r.boot_id.empty() && r.boot_id == ThisBootId() && r.pid > 0) {
    // This machine: the kernel knows. Field 3 of /proc/<pid>/stat is the state (T: stopped, Z: zombie).
    std::ifstream in(absl::StrCat("/proc/", r.pid, "/stat"));
    std::string stat;
    if (!std::getline(in, stat)) return Liveness::kGone;
    const size_t paren = stat.rfind(')');
    const char state = paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
    if (state == 'T' || state == 't') return Liveness::kStopped;
    if (state == 'Z' || state == 'X') return Liveness::kGone;
    return Liveness::kAlive;
  }
  if (r.heartbeat_us <= 0) return Liveness::kUnknown;
  return now_us - r.heartbeat_us > kHeartbeatSilenceUs ? Liveness::kGone : Liveness::kAlive;
}

FlightVerdict JudgeFlightRecords(const std::vector<RankFlightRecord>& all, const std::vector<int>& ranks_here,
                                 int64_t now_us) {
  if (now_us == 0) now_us = NowMicros();
  // Point-to-point calls (numbered apart, each between two ranks) say nothing about where the ranks'
  // collectives parted: the verdict reads the collectives only.
  std::vector<RankFlightRecord> input = all;
  for (RankFlightRecord& r : input) {
    r.entries.erase(std::remove_if(r.entries.begin(), r.entries.end(), [](const FlightEntry& e) {
      return e.op == "Send" || e.op == "Recv" || e.op == "BatchSendRecv";
    }), r.entries.end());
  }
  FlightVerdict v;
  if (input.empty()) {
    v.verdict = "no flight records";
    return v;
  }
  // The newest record decides the job's shape; records of another world size are a previous job's.
  const RankFlightRecord* newest = &input[0];
  for (const auto& r : input) {
    if (r.written_us > newest->written_us) newest = &r;
  }
  v.group = newest->group;
  const int world = newest->world_size;
  std::vector<const RankFlightRecord*> by_rank(std::max(world, 0), nullptr);
  for (const auto& r : input) {
    if (r.world_size != world || r.rank < 0 || r.rank >= world) {
      v.notes.push_back(absl::StrCat(r.path, ": rank ", r.rank, " of ", r.world_size, " ranks, not of this job's ",
                                     world, "; skipped (a previous job's?)"));
      continue;
    }
    by_rank[r.rank] = &r;
  }
  // Ranks without a record: missing (their files should be here) or elsewhere (another machine's).
  std::vector<int> without_record, elsewhere;
  std::vector<const RankFlightRecord*> present;
  for (int r = 0; r < world; ++r) {
    if (by_rank[r] != nullptr) {
      present.push_back(by_rank[r]);
    } else if (ranks_here.empty() || std::find(ranks_here.begin(), ranks_here.end(), r) != ranks_here.end()) {
      without_record.push_back(r);
    } else {
      elsewhere.push_back(r);
    }
  }
  const std::string elsewhere_note =
      elsewhere.empty() ? ""
                        : absl::StrCat("; ranks ", RankSet(elsewhere), " ran on other machines and their records are "
                                       "there (flight_recorder_analyze over every machine's files names the one "
                                       "that is missing)");

  // 1. A disagreement: the first sequence number two ranks recorded with different fingerprints.
  std::map<int64_t, std::map<std::string, std::vector<int>>> calls;  // seq -> fingerprint -> ranks
  for (const auto* r : present) {
    for (const FlightEntry& e : r->entries) calls[e.seq][e.Fingerprint()].push_back(r->rank);
  }
  for (const auto& [seq, variants] : calls) {
    if (variants.size() < 2) continue;
    std::vector<std::string> sides;
    for (const auto& [fingerprint, ranks] : variants) {
      sides.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                   ranks.size() == 1 ? absl::StrCat(ranks[0]) : RankSet(ranks), " ", fingerprint));
    }
    v.verdict = absl::StrCat("ranks disagree at #", seq, ": ", absl::StrJoin(sides, " vs "),
                             " (every rank must issue the same collectives in the same order)");
    // The minority is to blame when there is one; with an even split nobody can tell.
    size_t most = 0;
    for (const auto& [f, ranks] : variants) most = std::max(most, ranks.size());
    size_t holders = 0;
    for (const auto& [f, ranks] : variants) holders += ranks.size() == most ? 1 : 0;
    if (holders == 1) {
      for (const auto& [f, ranks] : variants) {
        if (ranks.size() != most) v.culprits.insert(v.culprits.end(), ranks.begin(), ranks.end());
      }
    }
    for (const auto* r : present) v.details.push_back(DetailOf(*r, seq, now_us));
    return v;
  }

  if (present.empty()) {
    v.verdict = absl::StrCat("no rank of ", v.group, " left a record here");
    return v;
  }
  // 2. Where the job stopped: the oldest collective some rank has not finished.
  int64_t stuck = std::numeric_limits<int64_t>::max();
  for (const auto* r : present) stuck = std::min(stuck, FirstUnfinished(*r));
  const FlightEntry* what = nullptr;
  for (const auto* r : present) {
    if ((what = Find(*r, stuck)) != nullptr) break;
  }
  std::vector<int> never, queued, waiting, failed, gone_inside, completed;
  for (int rank = 0; rank < world; ++rank) {
    const RankFlightRecord* r = by_rank[rank];
    if (r == nullptr) continue;
    const FlightEntry* e = Find(*r, stuck);
    if (e == nullptr) {
      (LastSeq(*r) < stuck ? never : completed).push_back(rank);  // beyond its ring: long done
      continue;
    }
    switch (e->state) {
      case FlightState::kEnqueued: queued.push_back(rank); break;
      case FlightState::kStarted:
        // Started with no end: still waiting in it if its process lives (a dump alone says it lived when it
        // dumped); froze or died inside it otherwise.
        (r->source == "dump" || LivenessOf(*r, now_us) == Liveness::kAlive ? waiting : gone_inside).push_back(rank);
        break;
      case FlightState::kFailed: failed.push_back(rank); break;
      default: completed.push_back(rank); break;
    }
  }
  for (int rank = 0; rank < world; ++rank) {
    if (by_rank[rank] != nullptr) v.details.push_back(DetailOf(*by_rank[rank], stuck, now_us));
  }
  for (int rank : without_record) v.details.push_back(absl::StrCat("rank ", rank, ": no ring file and no dump"));
  for (int rank : elsewhere) v.details.push_back(absl::StrCat("rank ", rank, ": on another machine"));

  if (what == nullptr) {
    // Every rank finished everything it issued and the numbers agree: the failure was not in a collective.
    v.verdict = absl::StrCat("no collective of ", v.group, " was pending: every rank with a record completed all ",
                             stuck, " it issued");
    v.none_pending = true;
    if (!without_record.empty()) {
      absl::StrAppend(&v.verdict, "; ranks ", RankSet(without_record), " left no record");
      v.culprits = without_record;
    }
    v.verdict += elsewhere_note;
    return v;
  }
  const std::string head = absl::StrCat("collective #", stuck, " ", Describe(*what), ": ");
  std::vector<std::string> parts;
  // The ranks that never got to it are the ones everybody else waited for.
  std::vector<int> absent = never;
  absent.insert(absent.end(), queued.begin(), queued.end());
  absent.insert(absent.end(), without_record.begin(), without_record.end());
  std::sort(absent.begin(), absent.end());
  if (!absent.empty()) {
    parts.push_back(absl::StrCat("ranks ", RankSet(absent), " never started it"));
    for (int rank : absent) {
      if (by_rank[rank] == nullptr) {
        parts.push_back(absl::StrCat("rank ", rank, " left no record"));
      } else {
        parts.push_back(absl::StrCat("rank ", rank, "'s last completed collective is #",
                                     LastCompletedBefore(*by_rank[rank], stuck)));
      }
    }
    v.culprits = absent;
  }
  if (!gone_inside.empty()) {
    parts.push_back(absl::StrCat("ranks ", RankSet(gone_inside),
                                 " started it and recorded no end (they died or froze inside it)"));
    if (absent.empty()) v.culprits = gone_inside;
  }
  if (!waiting.empty()) parts.push_back(absl::StrCat("ranks ", RankSet(waiting), " started it and are waiting in it"));
  if (!completed.empty()) parts.push_back(absl::StrCat("ranks ", RankSet(completed), " completed it"));
  if (!failed.empty()) {
    // The status code is enough here ("DEADLINE_EXCEEDED"); the details show the whole message.
    const std::string& error = Find(*by_rank[failed[0]], stuck)->error;
    parts.push_back(absl::StrCat("ranks ", RankSet(failed), " failed in it (", error.substr(0, error.find(':')), ")"));
  }
  if (absent.empty() && gone_inside.empty() && elsewhere.empty()) {
    // Everyone was in it: no rank is missing, the ranks could not reach each other.
    parts.push_back("every rank started it, so none was missing: the ranks could not reach each other (a network "
                    "problem, e.g. a cut link) or one of them stalled inside it");
  }
  v.verdict = head + absl::StrJoin(parts, "; ") + elsewhere_note;
  return v;
}

absl::StatusOr<std::vector<FlightVerdict>> AnalyzeFlightRecorderDir(const std::string& dir,
                                                                    const std::vector<int>& ranks_here) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", dir, ": ", ec.message()));
  // group -> rank -> record (the ring's collectives, the dump's reason and error)
  std::map<std::string, std::map<int, RankFlightRecord>> groups;
  std::vector<std::string> notes;
  std::vector<std::string> files;
  for (const auto& entry : it) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& path : files) {
    const bool ring = absl::EndsWith(path, ".ring");
    if (!ring && !absl::EndsWith(path, ".json")) continue;
    absl::StatusOr<RankFlightRecord> r = ring ? ReadFlightRing(path) : ReadFlightDump(path);
    if (!r.ok()) {
      notes.push_back(absl::StrCat("skipped: ", r.status().message()));
      continue;
    }
    auto [slot, fresh] = groups[r->group].try_emplace(r->rank, *r);
    if (fresh) continue;
    RankFlightRecord& have = slot->second;
    // Both a ring and a dump: the ring's collectives, the dump's reason and error.
    RankFlightRecord& from_ring = ring ? *r : have;
    const RankFlightRecord& from_dump = ring ? have : *r;
    from_ring.reason = from_dump.reason;
    from_ring.error = from_dump.error;
    from_ring.source = "ring+dump";
    if (ring) have = std::move(*r);
  }
  if (groups.empty()) {
    return absl::NotFoundError(absl::StrCat("no flight records in ", dir,
                                            notes.empty() ? "" : absl::StrCat(" (", absl::StrJoin(notes, "; "), ")")));
  }
  std::vector<FlightVerdict> verdicts;
  for (auto& [group, ranks] : groups) {
    std::vector<RankFlightRecord> records;
    for (auto& [rank, record] : ranks) records.push_back(std::move(record));
    verdicts.push_back(JudgeFlightRecords(records, ranks_here));
  }
  if (!notes.empty()) verdicts.front().notes.insert(verdicts.front().notes.end(), notes.begin(), notes.end());
  return verdicts;
}

std::string FormatFlightVerdicts(const std::vector<FlightVerdict>& verdicts, const std::string& prefix) {
  std::string out;
  for (const FlightVerdict& v : verdicts) {
    absl::StrAppend(&out, prefix, "flight recorder (", v.group, "): ", v.verdict, "\n");
    for (const std::string& d : v.details) absl::StrAppend(&out, prefix, "  ", d, "\n");
    for (const std::string& n : v.notes) absl::StrAppend(&out, prefix, "  note: ", n, "\n");
  }
  return out;
}

}  // namespace tinyddp::dist
