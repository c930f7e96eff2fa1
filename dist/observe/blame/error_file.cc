// Error files: see error_file.h.
#include "dist/observe/blame/error_file.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace tinyddp::dist {

const char* FailureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::kError: return "error";
    case FailureKind::kTimeout: return "timeout";
    case FailureKind::kPeer: return "peer";
  }
  return "?";
}

FailureKind FailureKindOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded: return FailureKind::kTimeout;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled: return FailureKind::kPeer;
    default: return FailureKind::kError;
  }
}

void RecordWorkerFailure(int rank, const absl::Status& status) {
  const char* path = std::getenv(kErrorFileEnv);
  if (path == nullptr || *path == '\0' || status.ok()) return;
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const nlohmann::json j = {{"rank", rank},
                            {"kind", FailureKindName(FailureKindOf(status))},
                            {"message", std::string(status.message())},
                            {"time_us", now_us}};
  const std::string tmp = std::string(path) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    // Invalid UTF-8 in a message is replaced rather than thrown: this runs on the way out.
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) {
      ::signal(SIGTERM, SIG_IGN);
      return;
    }
  }
  std::rename(tmp.c_str(), path);
  ::signal(SIGTERM, SIG_IGN);
}

std::optional<WorkerFailure> ReadWorkerFailure(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    WorkerFailure f;
    f.rank = j.at("rank").get<int>();
    const std::string kind = j.at("kind").get<std::string>();
    f.kind = kind == "timeout" ? FailureKind::kTimeout : kind == "peer" ? FailureKind::kPeer : FailureKind::kError;
    f.message = j.at("message").get<std::string>();
    f.time_us = j.at("time_us").get<int64_t>();
    return f;
  } catch (const std::exception&) {
    return std::nullopt;  // a worker killed mid-write, or not our file: judged by its exit alone
  }
}

std::string FirstLine(const std::string& message, size_t max_chars) {
  std::string line = message.substr(0, message.find('\n'));
  if (line.size() > max_chars) line = line.substr(0, max_chars) + "...";
  return line;
}

}  // namespace tinyddp::dist
