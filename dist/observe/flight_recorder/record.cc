// Flight records: fixed fields, JSON dumps (nlohmann-json) and ring files read back.
#include "dist/observe/flight_recorder/record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tinyddp::dist {

static_assert(sizeof(RingHeader) == 160, "the ring file layout changed: bump kRingVersion");
static_assert(sizeof(RingSlot) == 456, "the ring file layout changed: bump kRingVersion");

const char* FlightStateName(FlightState state) {
  switch (state) {
    case FlightState::kEmpty: return "empty";
    case FlightState::kEnqueued: return "enqueued";
    case FlightState::kStarted: return "started";
    case FlightState::kCompleted: return "completed";
    case FlightState::kFailed: return "failed";
  }
  return "?";
}

namespace {

FlightState StateFromName(const std::string& name) {
  for (FlightState s : {FlightState::kEnqueued, FlightState::kStarted, FlightState::kCompleted, FlightState::kFailed}) {
    if (name == FlightStateName(s)) return s;
  }
  return FlightState::kEmpty;
}

}  // namespace

std::string FlightEntry::Fingerprint() const {
  return absl::StrCat(op, "(", signature, ")", via.empty() ? "" : absl::StrCat(" via ", via));
}

void CopyToField(absl::string_view text, char* field, size_t size) {
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(field, text.data(), n);
  std::memset(field + n, 0, size - n);
}

std::string FieldText(const char* field, size_t size) { return std::string(field, strnlen(field, size)); }

FlightEntry EntryFromSlot(const RingSlot& slot) {
  FlightEntry e;
  e.seq = slot.seq;
  e.state = static_cast<FlightState>(slot.state);
  e.op = FieldText(slot.op, sizeof(slot.op));
  e.signature = FieldText(slot.signature, sizeof(slot.signature));
  e.dtype = FieldText(slot.dtype, sizeof(slot.dtype));
  e.via = FieldText(slot.via, sizeof(slot.via));
  e.numel = slot.numel;
  e.bytes = slot.bytes;
  e.bucket = slot.bucket;
  e.enqueued_us = slot.enqueued_us;
  e.started_us = slot.started_us;
  e.completed_us = slot.completed_us;
  e.error = FieldText(slot.error, sizeof(slot.error));
  return e;
}

std::string ThisBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string FlightRecorderDirFromEnvironment() {
  const char* dir = std::getenv(kFlightRecorderDirEnv);
  return dir != nullptr ? dir : "";
}

std::string DefaultFlightRecorderDir() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/tinyddp-flight-recorder");
}

std::string RingFilePath(absl::string_view dir, absl::string_view group, int rank) {
  return absl::StrCat(dir, "/", group, ".rank", rank, ".ring");
}

std::string DumpFilePath(absl::string_view dir, absl::string_view group, int rank) {
  return absl::StrCat(dir, "/", group, ".rank", rank, ".json");
}

// --- JSON dumps ---------------------------------------------------------------------------------------

std::string FlightRecordToJson(const RankFlightRecord& r) {
  // ordered_json: the fields in the order written here, which is the order a person reads them in.
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const FlightEntry& e : r.entries) {
    nlohmann::ordered_json j = {{"seq", e.seq},
                        {"state", FlightStateName(e.state)},
                        {"op", e.op},
                        {"signature", e.signature},
                        {"dtype", e.dtype},
                        {"numel", e.numel},
                        {"bytes", e.bytes},
                        {"bucket", e.bucket},
                        {"enqueued_us", e.enqueued_us},
                        {"started_us", e.started_us},
                        {"completed_us", e.completed_us}};
    if (!e.via.empty()) j["via"] = e.via;
    if (!e.error.empty()) j["error"] = e.error;
    entries.push_back(std::move(j));
  }
  nlohmann::ordered_json doc = {{"format", "tinyddp flight recorder"},
                        {"version", kRingVersion},
                        {"group", r.group},
                        {"backend", r.backend},
                        {"rank", r.rank},
                        {"world_size", r.world_size},
                        {"pid", r.pid},
                        {"timeout_ms", r.timeout_ms},
                        {"reason", r.reason},
                        {"error", r.error},
                        {"written_us", r.written_us},
                        {"boot_id", r.boot_id},
                        {"heartbeat_us", r.heartbeat_us},
                        {"entries", std::move(entries)}};
  // One entry per line: a person can read the file, and grep finds a sequence number.
  std::string out = "{\n";
  bool first = true;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "entries") continue;
    absl::StrAppend(&out, first ? "" : ",\n", "  ", nlohmann::ordered_json(it.key()).dump(), ": ", it.value().dump());
    first = false;
  }
  absl::StrAppend(&out, ",\n  \"entries\": [");
  const nlohmann::ordered_json& list = doc["entries"];
  for (size_t i = 0; i < list.size(); ++i) absl::StrAppend(&out, i == 0 ? "\n    " : ",\n    ", list[i].dump());
  absl::StrAppend(&out, list.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return out;
}

absl::StatusOr<RankFlightRecord> ParseFlightDump(absl::string_view json, const std::string& path) {
  const nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object (a dump cut short?)"));
  }
  if (doc.value("format", "") != "tinyddp flight recorder") {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a tinyddp flight recorder dump"));
  }
  try {
    RankFlightRecord r;
    r.group = doc.at("group").get<std::string>();
    r.backend = doc.value("backend", "");
    r.rank = doc.at("rank").get<int>();
    r.world_size = doc.at("world_size").get<int>();
    r.pid = doc.value("pid", 0);
    r.timeout_ms = doc.value("timeout_ms", int64_t{0});
    r.reason = doc.value("reason", "");
    r.error = doc.value("error", "");
    r.written_us = doc.value("written_us", int64_t{0});
    r.boot_id = doc.value("boot_id", "");
    r.heartbeat_us = doc.value("heartbeat_us", r.written_us);
    r.source = "dump";
    r.path = path;
    for (const nlohmann::json& j : doc.at("entries")) {
      FlightEntry e;
      e.seq = j.at("seq").get<int64_t>();
      e.state = StateFromName(j.at("state").get<std::string>());
      e.op = j.at("op").get<std::string>();
      e.signature = j.value("signature", "");
      e.dtype = j.value("dtype", "");
      e.via = j.value("via", "");
      e.numel = j.value("numel", int64_t{0});
      e.bytes = j.value("bytes", int64_t{0});
      e.bucket = j.value("bucket", -1);
      e.enqueued_us = j.value("enqueued_us", int64_t{0});
      e.started_us = j.value("started_us", int64_t{0});
      e.completed_us = j.value("completed_us", int64_t{0});
      e.error = j.value("error", "");
      r.entries.push_back(std::move(e));
    }
    std::sort(r.entries.begin(), r.entries.end(), [](const FlightEntry& a, const FlightEntry& b) { return a.seq < b.seq; });
    return r;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a field is missing or has the wrong type: ", e.what()));
  }
}

absl::StatusOr<RankFlightRecord> ReadFlightDump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return ParseFlightDump(text.str(), path);
}

// --- Ring files ---------------------------------------------------------------------------------------

absl::StatusOr<RankFlightRecord> ReadFlightRing(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  RingHeader h;
  if (!in.read(reinterpret_cast<char*>(&h), sizeof(h))) {
    return absl::DataLossError(absl::StrCat(path, ": shorter than a flight recorder header"));
  }
  if (std::memcmp(h.magic, kRingMagic, sizeof(kRingMagic)) != 0 || h.version != kRingVersion ||
      h.header_bytes != sizeof(RingHeader) || h.slot_bytes != sizeof(RingSlot)) {
    return absl::DataLossError(absl::StrCat(path, ": not a version ", kRingVersion,
                                            " flight recorder ring (written by another tinyddp?)"));
  }
  if (h.capacity == 0 || h.capacity > (1u << 20)) {
    return absl::DataLossError(absl::StrCat(path, ": implausible capacity ", h.capacity));
  }
  RankFlightRecord r;
  r.group = FieldText(h.group, sizeof(h.group));
  r.backend = FieldText(h.backend, sizeof(h.backend));
  r.rank = h.rank;
  r.world_size = h.world_size;
  r.pid = h.pid;
  r.timeout_ms = h.timeout_ms;
  r.written_us = h.updated_us;
  r.boot_id = FieldText(h.boot_id, sizeof(h.boot_id));
  r.heartbeat_us = h.heartbeat_us;
  r.source = "ring";
  r.path = path;
  std::vector<RingSlot> slots(h.capacity);
  in.read(reinterpret_cast<char*>(slots.data()), static_cast<std::streamsize>(slots.size() * sizeof(RingSlot)));
  const size_t complete = static_cast<size_t>(in.gcount()) / sizeof(RingSlot);
  for (size_t i = 0; i < complete; ++i) {
    const RingSlot& s = slots[i];
    // seq < 0: never used, or being rewritten at this moment (the recorder marks a slot before it writes).
    if (s.seq < 0 || s.state <= 0 || s.state > static_cast<int32_t>(FlightState::kFailed)) continue;
    r.entries.push_back(EntryFromSlot(s));
  }
  std::sort(r.entries.begin(), r.entries.end(), [](const FlightEntry& a, const FlightEntry& b) { return a.seq < b.seq; });
  return r;
}

}  // namespace tinyddp::dist
