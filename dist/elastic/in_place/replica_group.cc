// ReplicaGroup: see replica_group.h.
#include "dist/elastic/in_place/replica_group.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/fault_injection.h"
#include "base/status_macros.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/prefix_store.h"

namespace tinyddp::dist::in_place {
namespace {

std::string HostName() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

Bytes ToBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A generation's keys for its Gloo group. ProcessGroupGloo::Create puts a group's rendezvous under
// "gloo/<n>/", n counting the Gloo groups this process made, which is the same on every rank only while every
// rank made the same groups; a replacement has made others (rejoin.cc). Each generation builds one group under
// keys of its own ("g<G>/"), so the count is dropped here: "gloo/<n>/key" -> "gloo/key".
class GenerationKeys : public Store {
 public:
  explicit GenerationKeys(std::shared_ptr<Store> base) : base_(std::move(base)) { set_timeout(base_->timeout()); }
  absl::Status Set(const std::string& key, const Bytes& value) override { return base_->Set(Map(key), value); }
  absl::StatusOr<Bytes> Get(const std::string& key) override {
    RETURN_IF_ERROR(base_->Wait({Map(key)}, timeout_));  // this view's timeout, as PrefixStore does
    return base_->Get(Map(key));
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override { return base_->Add(Map(key), delta); }
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return base_->CompareSet(Map(key), expected, desired);
  }
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> mapped;
    for (const std::string& key : keys) mapped.push_back(Map(key));
    return base_->Wait(mapped, timeout);
  }
  absl::StatusOr<bool> Delete(const std::string& key) override { return base_->Delete(Map(key)); }
  absl::StatusOr<int64_t> NumKeys() override { return base_->NumKeys(); }
  using Store::Set;
  using Store::Wait;

 private:
  static std::string Map(const std::string& key) {
    const size_t first = key.find('/');
    const size_t second = first == std::string::npos ? std::string::npos : key.find('/', first + 1);
    if (second == std::string::npos) return key;
    for (size_t i = first + 1; i < second; ++i) {
      if (key[i] < '0' || key[i] > '9') return key;
    }
    return key.substr(0, first) + key.substr(second);
  }
  std::shared_ptr<Store> base_;
};

}  // namespace

ReplicaGroup::ReplicaGroup(std::shared_ptr<ProcessGroup> world, std::shared_ptr<Store> store,
                           ReplicaGroupOptions options)
    : store_(std::move(store)), group_(std::move(world)), options_(options), id_(group_->rank()) {
  membership_.members.resize(group_->size());
  std::iota(membership_.members.begin(), membership_.members.end(), 0);
}

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Create(std::shared_ptr<ProcessGroup> world,
                                                                   ReplicaGroupOptions options) {
  std::shared_ptr<Store> store = world->SubStore("in_place");
  if (store == nullptr) {
    return absl::FailedPreconditionError(
        "in-place recovery needs the group's store (InitProcessGroup's Gloo group has one)");
  }
  auto replicas = std::unique_ptr<ReplicaGroup>(new ReplicaGroup(std::move(world), std::move(store), options));
  RETURN_IF_ERROR(replicas->RecordPid());
  RETURN_IF_ERROR(replicas->group_->Barrier()->Wait());  // every pid is in the store before anyone may fence
  return replicas;
}

ReplicaGroup::ReplicaGroup(std::shared_ptr<Store> store, int id, ReplicaGroupOptions options)
    : store_(std::move(store)), options_(options), id_(id) {}

absl::Status ReplicaGroup::RecordPid() {
  return store_->Set(absl::StrCat("pid/", id_), ToBytes(absl::StrCat(HostName(), " ", ::getpid())));
}

std::shared_ptr<Store> ReplicaGroup::generation_store() const {
  return std::make_shared<PrefixStore>(absl::StrCat("g", membership_.generation, "/"), store_);
}

absl::StatusOr<Membership> ReplicaGroup::Shrink(int64_t next_step) {
  group_.reset();  // the abort: our connections close, and peers still waiting on us fail now, not at --timeout
  const std::vector<int> previous = membership_.members;
  ASSIGN_OR_RETURN(Membership decided, AgreeOnMembership(*store_, membership_.generation + 1, previous, id_, next_step,
                                                         options_.window, [this](int id) { return Gone(id); }));
  return Form(std::move(decided), previous, next_step);
}

absl::StatusOr<Membership> ReplicaGroup::Form(Membership decided, std::vector<int> previous, int64_t next_step) {
  for (;;) {
    membership_ = decided;
    std::vector<int> left_out;
    for (int member : previous) {
      if (decided.IndexOf(member) < 0) left_out.push_back(member);
    }
    if (id_ == decided.source) Fence(left_out);
    if (static_cast<int>(decided.members.size()) < options_.min_replicas) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fewer than --min_replicas=", options_.min_replicas, " replicas remain (", decided.ToString(),
          "): the job ends here"));
    }
    // A failure test's loss during the recovery itself: this member counted in the quorum, then dies.
    MaybeInjectFault("recovery", decided.generation);
    auto store = std::make_shared<GenerationKeys>(
        std::make_shared<PrefixStore>(absl::StrCat("g", decided.generation, "/gloo"), store_));
    absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> gloo =
        ProcessGroupGloo::Create(store, decided.IndexOf(id_), static_cast<int>(decided.members.size()),
                                 {.timeout = options_.timeout});
    if (gloo.ok()) {
      (*gloo)->set_store(std::make_shared<PrefixStore>("group", store));
      group_ = std::move(*gloo);
      return decided;
    }
    // A member died or froze while the group formed: the next generation goes on without it.
    std::fprintf(stderr, "in-place recovery: replica %d: building %s failed (%s); agreeing again\n", id_,
                 decided.ToString().c_str(), std::string(gloo.status().message()).c_str());
    previous = decided.members;
    ASSIGN_OR_RETURN(decided, AgreeOnMembership(*store_, decided.generation + 1, previous, id_, next_step,
                                                options_.window, [this](int id) { return Gone(id); }));
  }
}

bool ReplicaGroup::Gone(int id) const {
  if (id == id_) return false;
  absl::StatusOr<Bytes> where = store_->Get(absl::StrCat("pid/", id));
  if (!where.ok()) return false;
  std::vector<std::string> parts = absl::StrSplit(std::string(where->begin(), where->end()), ' ');
  int pid = 0;
  if (parts.size() != 2 || parts[0] != HostName() || !absl::SimpleAtoi(parts[1], &pid) || pid <= 1) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));  // "pid (name) S ...": Z is a zombie, not yet reaped
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

void ReplicaGroup::Fence(const std::vector<int>& left_out) {
  const std::string here = HostName();
  for (int member : left_out) {
    absl::StatusOr<Bytes> where = store_->Get(absl::StrCat("pid/", member));
    if (!where.ok()) continue;
    std::vector<std::string> parts = absl::StrSplit(std::string(where->begin(), where->end()), ' ');
    int pid = 0;
    if (parts.size() != 2 || parts[0] != here || !absl::SimpleAtoi(parts[1], &pid) || pid <= 1) continue;
    if (::kill(pid, SIGKILL) == 0) {
      std::fprintf(stderr, "in-place recovery: replica %d fenced replica %d (pid %d, left out of the group)\n", id_,
                   member, pid);
    }
  }
}

}  // namespace tinyddp::dist::in_place
