// JobRecords: a directory for the workers' rings, and the analyzer's verdict after a failed round.
#include "dist/observe/flight_recorder/job_records.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/observe/flight_recorder/record.h"
#include "dist/observe/flight_recorder/verdict.h"

namespace tinyddp::dist {

namespace {

// Keeps the newest `keep` job folders in `parent` (named job-<date>-<time>-<pid>-XXXXXX, so that sorting
// the names sorts them by age) and removes the older ones, except those whose launcher still runs.
void RemoveOldJobs(const std::string& parent, size_t keep) {
  std::vector<std::string> jobs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && absl::StartsWith(name, "job-")) jobs.push_back(name);
  }
  std::sort(jobs.rbegin(), jobs.rend());
  for (size_t i = keep; i < jobs.size(); ++i) {
    const std::vector<std::string> parts = absl::StrSplit(jobs[i], '-');
    int pid = 0;
    if (parts.size() > 3 && absl::SimpleAtoi(parts[3], &pid) && (::kill(pid, 0) == 0 || errno == EPERM)) continue;
    std::filesystem::remove_all(std::filesystem::path(parent) / jobs[i], ec);
  }
}

bool HoldsAFile(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<JobRecords> JobRecords::ForThisJob() { return std::make_shared<JobRecords>(); }

void JobRecords::ChooseDirOnce() {
  if (chosen_) return;
  chosen_ = true;
  const char* set = std::getenv(kFlightRecorderDirEnv);
  if (set != nullptr && *set != '\0') {
    dir_ = set;  // the workers inherit it
    return;
  }
  // One folder for every job's records, which any user may add to (and only its owner remove from: the
  // sticky bit, as /tmp's).
  const std::string parent = DefaultFlightRecorderDir();
  std::error_code ec;
  if (std::filesystem::create_directories(parent, ec)) ::chmod(parent.c_str(), 01777);
  RemoveOldJobs(parent, kKeptJobs);
  char stamp[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", ::localtime_r(&now, &local));
  std::string path = absl::StrCat(parent, "/job-", stamp, "-", ::getpid(), "-XXXXXX");
  if (::mkdtemp(path.data()) != nullptr) {
    dir_ = path;
    made_here_ = true;
  }
}

std::string JobRecords::RoundDir(int round) const {
  return dir_.empty() ? "" : absl::StrCat(dir_, "/round", round);
}

std::vector<std::pair<std::string, std::string>> JobRecords::WorkerEnvironment(int round, int rank) {
  ChooseDirOnce();
  if (dir_.empty()) return {};
  return {{kFlightRecorderDirEnv, RoundDir(round)}};
}

void JobRecords::FailedRound(int round, const std::string& prefix, const std::vector<int>& ranks_here) {
  if (dir_.empty()) return;
  const std::string dir = RoundDir(round);
  auto verdicts = AnalyzeFlightRecorderDir(dir, ranks_here);
  if (absl::IsNotFound(verdicts.status())) {  // a failure before this node's first collective: nothing to judge
    std::fprintf(stderr, "%sflight recorder: no collective was issued\n", prefix.c_str());
    return;
  }
  if (!verdicts.ok()) {
    std::fprintf(stderr, "%sflight recorder: %s\n", prefix.c_str(), std::string(verdicts.status().message()).c_str());
    worth_keeping_ = true;  // the files it could not read, for a person to look at
    return;
  }
  // Every rank completed every collective it issued (a refused setting, a full disk): the failure was not in
  // one, the ranks' own messages say what it was, and the records hold nothing to keep.
  if (std::all_of(verdicts->begin(), verdicts->end(),
                  [](const FlightVerdict& v) { return v.none_pending && v.culprits.empty(); })) {
    std::fprintf(stderr, "%sflight recorder: no collective was pending (the failure was not in one)\n",
                 prefix.c_str());
    return;
  }
  worth_keeping_ = true;
  std::string text = FormatFlightVerdicts(*verdicts, prefix);
  absl::StrAppend(&text, prefix, "  the records: ", dir, " (flight_recorder_analyze ", dir, ")",
                  made_here_ ? absl::StrCat("; the newest ", kKeptJobs, " failed jobs' stay there, ",
                                            kFlightRecorderDirEnv, " keeps them elsewhere for good")
                             : "",
                  "\n");
  std::fputs(text.c_str(), stderr);
}

void JobRecords::Finish(bool job_succeeded) {
  if (!made_here_) return;
  std::error_code ec;
  if (job_succeeded || !worth_keeping_ || !HoldsAFile(dir_)) {
    std::filesystem::remove_all(dir_, ec);
    return;
  }
  // This job's records stay: with them, the newest kKeptJobs failed jobs' (older ones go).
  RemoveOldJobs(std::filesystem::path(dir_).parent_path().string(), kKeptJobs);
}

}  // namespace tinyddp::dist
