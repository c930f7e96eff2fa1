// JobFlightRecorder: a directory for the workers' rings, and the analyzer's verdict after a failure.
#include "dist/launch/job_flight_recorder.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "dist/process_group/flight_record.h"
#include "dist/process_group/flight_recorder_analysis.h"

namespace tinyddp::dist {

JobFlightRecorder JobFlightRecorder::ForThisJob() {
  JobFlightRecorder j;
  const char* set = std::getenv(kFlightRecorderDirEnv);
  if (set != nullptr && *set != '\0') {
    j.dir_ = set;  // the workers inherit it
    return j;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/tinyddp-flight-recorder-XXXXXX");
  if (::mkdtemp(path.data()) != nullptr) {
    j.dir_ = path;
    j.made_here_ = true;
  }
  return j;
}

std::string JobFlightRecorder::RoundDir(int round) const {
  return dir_.empty() ? "" : absl::StrCat(dir_, "/round", round);
}

std::vector<std::pair<std::string, std::string>> JobFlightRecorder::WorkerEnvironment(int round) const {
  if (dir_.empty()) return {};
  return {{kFlightRecorderDirEnv, RoundDir(round)}};
}

void JobFlightRecorder::ReportFailedRound(int round, const std::string& prefix,
                                          const std::vector<int>& ranks_here) const {
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

void JobFlightRecorder::Finish(bool job_succeeded) const {
  std::error_code ec;
  if (job_succeeded && made_here_) std::filesystem::remove_all(dir_, ec);
}

}  // namespace tinyddp::dist
