// FlightRecorder: the ring (a mapped file or anonymous memory), the observer calls that write it, JSON
// dumps, the SIGUSR1 dumper thread, and AttachFlightRecorder.
#include "dist/observe/flight_recorder/recorder.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tinyddp::dist {

namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- One thread per process for every recorder: a heartbeat each second, and dumps on SIGUSR1 ----------

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<FlightRecorder*>& Registry() {
  static auto* recorders = new std::vector<FlightRecorder*>();  // never destroyed: the thread may outlive main
  return *recorders;
}
int signal_pipe[2] = {-1, -1};

void OnSigusr1(int) {
  const int saved = errno;
  const char byte = 1;
  (void)!::write(signal_pipe[1], &byte, 1);  // async-signal-safe; the recorder thread does the rest
  errno = saved;
}

void RecorderThreadLoop() {
  for (;;) {
    pollfd wake{signal_pipe[0], POLLIN, 0};
    const int n = ::poll(&wake, 1, /*timeout_ms=*/1000);
    bool dump = false;
    if (n > 0) {
      char bytes[16];
      dump = ::read(signal_pipe[0], bytes, sizeof(bytes)) > 0;
    }
    std::lock_guard<std::mutex> lock(RegistryMutex());
    for (FlightRecorder* r : Registry()) {
      r->Heartbeat();
      if (!dump) continue;
      const std::string path = r->Dump("SIGUSR1");
      if (!path.empty()) std::fprintf(stderr, "flight recorder: SIGUSR1: wrote %s\n", path.c_str());
    }
  }
}

// Starts the thread, and takes SIGUSR1 only if nobody has: its default action ends the process, so a
// program (or a launcher) that sends it to a worker without this handler installed would kill it.
void StartRecorderThreadOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    std::thread(RecorderThreadLoop).detach();
    struct sigaction current {};
    if (::sigaction(SIGUSR1, nullptr, &current) != 0) return;
    if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return;  // the program's own
    struct sigaction sa {};
    sa.sa_handler = OnSigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

// Maps a ring file of `bytes` at `path` (created or truncated); null with `*why` on failure.
void* MapRingFile(const std::string& dir, const std::string& path, size_t bytes, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = absl::StrCat("cannot create ", path, ": ", std::strerror(errno));
    return nullptr;
  }
  void* p = nullptr;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *why = absl::StrCat("cannot size ", path, ": ", std::strerror(errno));
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      *why = absl::StrCat("cannot map ", path, ": ", std::strerror(errno));
      p = nullptr;
    }
  }
  ::close(fd);  // the mapping keeps the file
  return p;
}

}  // namespace

FlightRecorder::FlightRecorder(std::string group, std::string backend, int rank, int world_size,
                               std::chrono::milliseconds timeout, std::string dir, uint32_t capacity)
    : group_(std::move(group)), rank_(rank), dir_(std::move(dir)), capacity_(std::max<uint32_t>(capacity, 1)) {
  mapping_bytes_ = sizeof(RingHeader) + size_t{capacity_} * sizeof(RingSlot);
  if (!dir_.empty()) {
    const std::string path = RingFilePath(dir_, group_, rank_);
    std::string why;
    mapping_ = MapRingFile(dir_, path, mapping_bytes_, &why);
    if (mapping_ != nullptr) {
      ring_path_ = path;
    } else {
      std::fprintf(stderr, "flight recorder: %s; keeping the records of %s in memory\n", why.c_str(), group_.c_str());
    }
  }
  if (mapping_ == nullptr) {
    mapping_ = ::mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  header_ = static_cast<RingHeader*>(mapping_);
  slots_ = reinterpret_cast<RingSlot*>(static_cast<char*>(mapping_) + sizeof(RingHeader));
  std::memset(mapping_, 0, mapping_bytes_);
  for (uint32_t i = 0; i < capacity_; ++i) slots_[i].seq = -1;
  std::memcpy(header_->magic, kRingMagic, sizeof(kRingMagic));
  header_->version = kRingVersion;
  header_->header_bytes = sizeof(RingHeader);
  header_->slot_bytes = sizeof(RingSlot);
  header_->capacity = capacity_;
  header_->rank = rank;
  header_->world_size = world_size;
  header_->pid = static_cast<int32_t>(::getpid());
  header_->timeout_ms = timeout.count();
  header_->created_us = header_->updated_us = header_->heartbeat_us = NowMicros();
  CopyToField(group_, header_->group, sizeof(header_->group));
  CopyToField(backend, header_->backend, sizeof(header_->backend));
  static const std::string boot_id = ThisBootId();
  CopyToField(boot_id, header_->boot_id, sizeof(header_->boot_id));

  StartRecorderThreadOnce();
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().push_back(this);
}

FlightRecorder::~FlightRecorder() {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto& all = Registry();
    all.erase(std::remove(all.begin(), all.end(), this), all.end());
  }
  ::munmap(mapping_, mapping_bytes_);  // a ring file stays behind, for the analyzer
}

void FlightRecorder::Heartbeat() { header_->heartbeat_us = NowMicros(); }

void FlightRecorder::Issued(const CollectiveInfo& info) {
  const int64_t seq = info.seq;
  const int64_t now = NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  RingSlot& s = slots_[issued_++ % capacity_];
  // Readers in other processes skip a slot whose seq is negative: mark it while the fields change.
  s.seq = -2;
  std::atomic_thread_fence(std::memory_order_release);
  s.state = static_cast<int32_t>(FlightState::kEnqueued);
  s.bucket = info.bucket;
  s.numel = info.numel;
  s.bytes = info.bytes;
  s.enqueued_us = now;
  s.started_us = s.completed_us = 0;
  CopyToField(info.op, s.op, sizeof(s.op));
  CopyToField(info.dtype, s.dtype, sizeof(s.dtype));
  CopyToField(info.via, s.via, sizeof(s.via));
  CopyToField(info.signature, s.signature, sizeof(s.signature));
  s.error[0] = '\0';
  std::atomic_thread_fence(std::memory_order_release);
  s.seq = seq;
  header_->updated_us = now;
}

RingSlot* FlightRecorder::SlotOf(int64_t seq) const {
  for (uint64_t back = 1; back <= std::min<uint64_t>(issued_, capacity_); ++back) {
    if (RingSlot& s = slots_[(issued_ - back) % capacity_]; s.seq == seq) return &s;
  }
  return nullptr;
}

void FlightRecorder::Started(int64_t seq) {
  const int64_t now = NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  RingSlot* slot = SlotOf(seq);
  if (slot == nullptr || slot->state != static_cast<int32_t>(FlightState::kEnqueued)) return;
  RingSlot& s = *slot;
  s.started_us = now;
  s.state = static_cast<int32_t>(FlightState::kStarted);
  header_->updated_us = now;
}

void FlightRecorder::Ended(int64_t seq, const absl::Status& status) {
  const int64_t now = NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  RingSlot* slot = SlotOf(seq);
  if (slot == nullptr || slot->state == static_cast<int32_t>(FlightState::kCompleted) ||
      slot->state == static_cast<int32_t>(FlightState::kFailed)) {
    return;  // overwritten by a newer collective, or finished already (the first outcome stays)
  }
  RingSlot& s = *slot;
  if (s.started_us == 0) s.started_us = now;  // it ran, if only to fail: the host saw no separate start
  s.completed_us = now;
  if (!status.ok()) CopyToField(status.ToString(), s.error, sizeof(s.error));
  s.state = static_cast<int32_t>(status.ok() ? FlightState::kCompleted : FlightState::kFailed);
  header_->updated_us = now;
}

RankFlightRecord FlightRecorder::Snapshot() const {
  RankFlightRecord r;
  std::lock_guard<std::mutex> lock(mu_);
  r.group = group_;
  r.backend = FieldText(header_->backend, sizeof(header_->backend));
  r.rank = header_->rank;
  r.world_size = header_->world_size;
  r.pid = header_->pid;
  r.timeout_ms = header_->timeout_ms;
  r.source = "memory";
  r.written_us = r.heartbeat_us = NowMicros();  // a snapshot is a sign of life
  r.boot_id = FieldText(header_->boot_id, sizeof(header_->boot_id));
  for (uint32_t i = 0; i < capacity_; ++i) {
    if (slots_[i].seq >= 0 && slots_[i].state > 0) r.entries.push_back(EntryFromSlot(slots_[i]));
  }
  std::sort(r.entries.begin(), r.entries.end(), [](const FlightEntry& a, const FlightEntry& b) { return a.seq < b.seq; });
  return r;
}

std::string FlightRecorder::dump_path() const {
  return DumpFilePath(dir_.empty() ? DefaultFlightRecorderDir() : dir_, group_, rank_);
}

std::string FlightRecorder::Dump(absl::string_view reason, const absl::Status& error) {
  RankFlightRecord r = Snapshot();
  r.reason = std::string(reason);
  if (!error.ok()) r.error = error.ToString();
  const std::string path = dump_path();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // Written beside and renamed: a reader (the launcher's analyzer) never sees half a file.
  const std::string tmp = absl::StrCat(path, ".tmp", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << FlightRecordToJson(r);
    if (!out.good()) {
      std::fprintf(stderr, "flight recorder: cannot write %s\n", tmp.c_str());
      return "";
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "flight recorder: cannot rename %s to %s: %s\n", tmp.c_str(), path.c_str(), std::strerror(errno));
    return "";
  }
  return path;
}

std::string FlightRecorder::Failed(absl::string_view reason, const absl::Status& status) {
  Dump(reason, status);
  return WhereToLook();
}

std::string FlightRecorder::WhereToLook() const {
  const std::string dir = dir_.empty() ? DefaultFlightRecorderDir() : dir_;
  return absl::StrCat("Flight recorder: rank ", rank_, "'s last collectives are in ", dump_path(),
                      "; `flight_recorder_analyze ", dir, "` names the rank the others waited for",
                      dir_.empty() ? absl::StrCat(" (set ", kFlightRecorderDirEnv,
                                                  " to a directory every rank can write, so that frozen and "
                                                  "killed ranks leave their records there too)")
                                   : "");
}

std::shared_ptr<FlightRecorder> AttachFlightRecorder(ProcessGroup& group) {
  auto recorder = std::make_shared<FlightRecorder>(group.group_name(), group.backend_name(), group.rank(),
                                                   group.size(), group.timeout());
  group.AddObserver(recorder);
  return recorder;
}

}  // namespace tinyddp::dist
