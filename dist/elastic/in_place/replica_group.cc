// ReplicaGroup: see replica_group.h.
#include "dist/elastic/in_place/replica_group.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
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
  RETURN_IF_ERROR(replicas->store_->Set(absl::StrCat("pid/", replicas->id_),
                                        ToBytes(absl::StrCat(HostName(), " ", ::getpid()))));
  RETURN_IF_ERROR(replicas->group_->Barrier()->Wait());  // every pid is in the store before anyone may fence
  return replicas;
}

std::shared_ptr<Store> ReplicaGroup::generation_store() const {
  return std::make_shared<PrefixStore>(absl::StrCat("g", membership_.generation, "/"), store_);
}

absl::StatusOr<Membership> ReplicaGroup::Shrink(int64_t next_step) {
  group_.reset();  // the abort: our connections close, and peers still waiting on us fail now, not at --timeout
  for (;;) {
    const std::vector<int> previous = membership_.members;
    ASSIGN_OR_RETURN(Membership decided, AgreeOnMembership(*store_, membership_.generation + 1, previous, id_,
                                                           next_step, options_.window));
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
    auto store = std::make_shared<PrefixStore>(absl::StrCat("g", decided.generation, "/gloo"), store_);
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
    next_step = decided.step;
  }
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
