// JobRecords: a directory for the workers' rings, and the analyzer's verdict after a failed round.
#include "dist/observe/flight_recorder/job_records.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "dist/observe/flight_recorder/record.h"
#include "dist/observe/flight_recorder/verdict.h"

namespace tinyddp::dist {

std::shared_ptr<JobRecords> JobRecords::ForThisJob() { return std::make_shared<JobRecords>(); }

void JobRecords::ChooseDirOnce() {
  if (chosen_) return;
  chosen_ = true;
  const char* set = std::getenv(kFlightRecorderDirEnv);
  if (set != nullptr && *set != '\0') {
    dir_ = set;  // the workers inherit it
    return;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/tinyddp-flight-recorder-XXXXXX");
  if (::mkdtemp(path.data()) != nullptr) {
    dir_ = path;
    made_here_ = true;
  }
}

std::string JobRecords::RoundDir(int round) const {
  return dir_.empty() ? "" : absl::StrCat(dir_, "/round", round);
}

std::vector<std::pair<std::string, std::string>> JobRecords::WorkerEnvironment(int round) {
  ChooseDirOnce();
  if (dir_.empty()) return {};
  return {{kFlightRecorderDirEnv, RoundDir(round)}};
}

void JobRecords::FailedRound(int round, const std::string& prefix, const std::vector<int>& ranks_here) {
  if (dir_.empty()) return;
  const std::string dir = RoundDir(round);
  auto verdicts = AnalyzeFlightRecorderDir(dir, ranks_here);
  if (!verdicts.ok()) {
    std::fprintf(stderr, "%sflight recorder: %s\n", prefix.c_str(), std::string(verdicts.status().message()).c_str());
    return;
  }
  std::string text = FormatFlightVerdicts(*verdicts, prefix);
  absl::StrAppend(&text, prefix, "  the records: ", dir, " (flight_recorder_analyze ", dir, ")\n");
  std::fputs(text.c_str(), stderr);
}

void JobRecords::Finish(bool job_succeeded) {
  std::error_code ec;
  if (job_succeeded && made_here_) std::filesystem::remove_all(dir_, ec);
}

}  // namespace tinyddp::dist
