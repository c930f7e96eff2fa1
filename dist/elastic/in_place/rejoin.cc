// ReplicaGroup's rejoin: a replacement joins at a step boundary (replica_group.h). Keys, in the job's
// in-place store:
//   join/count, join/<n>     the n-th request to join and the replica id that asks (the replacement writes)
//   g<G>/grow                a counter, 0 or the step at whose boundary generation G grows (the lead adds it)
//   g<G+1>/decision          the grown membership (the lead writes it with the announcement)
//   joined/<id>              "<G+1>": the generation that takes replica <id> in (the lead writes)
#include <algorithm>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/elastic/in_place/replica_group.h"

namespace tinyddp::dist::in_place {
namespace {

Bytes ToBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string ToText(const Bytes& b) { return std::string(b.begin(), b.end()); }

absl::StatusOr<int64_t> ReadNumber(Store& store, const std::string& key) {
  ASSIGN_OR_RETURN(const Bytes value, store.Get(key));
  int64_t number = 0;
  if (!absl::SimpleAtoi(ToText(value), &number)) {
    return absl::DataLossError(absl::StrCat("in-place recovery: \"", key, "\" holds \"", ToText(value),
                                            "\", not a number"));
  }
  return number;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Join(std::shared_ptr<Store> store, int id,
                                                                 ReplicaGroupOptions options) {
  auto replicas = std::unique_ptr<ReplicaGroup>(new ReplicaGroup(std::move(store), id, options));
  ASSIGN_OR_RETURN(const int64_t n, replicas->store_->Add("join/count", 1));
  RETURN_IF_ERROR(replicas->store_->Set(absl::StrCat("join/", n), ToBytes(absl::StrCat(id))));
  // Until the lead's next step boundary: bounded by the store's timeout (the job's --timeout).
  ASSIGN_OR_RETURN(const int64_t generation, ReadNumber(*replicas->store_, absl::StrCat("joined/", id)));
  ASSIGN_OR_RETURN(const Bytes decided, replicas->store_->Get(DecisionKey(generation)));
  ASSIGN_OR_RETURN(Membership membership, DecodeMembership(generation, ToText(decided)));
  if (membership.IndexOf(id) < 0) {
    return absl::FailedPreconditionError(absl::StrCat("replica ", id, " asked to rejoin, but generation ", generation,
                                                      " was decided without it (", membership.ToString(), ")"));
  }
  std::vector<int> previous;
  for (int member : membership.members) {
    if (member != id) previous.push_back(member);
  }
  RETURN_IF_ERROR(replicas->Form(std::move(membership), previous, /*next_step=*/-1).status());  // no state: -1
  // Only now: until the group took it in, "pid/<id>" names the lost process, which the survivors fence.
  RETURN_IF_ERROR(replicas->RecordPid());
  return replicas;
}

absl::Status ReplicaGroup::AnnounceJoiners(int64_t step) {
  if (rank() != 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int64_t count, store_->Add("join/count", 0));
  if (count <= joins_seen_ || grow_generation_ == membership_.generation) return absl::OkStatus();
  Membership grown = membership_;
  grown.generation = membership_.generation + 1;
  grown.step = step + 2;
  grown.source = membership_.members.front();  // a member: it holds the state
  std::vector<int> joiners;
  for (int64_t n = joins_seen_ + 1; n <= count; ++n) {
    ASSIGN_OR_RETURN(const int64_t id, ReadNumber(*store_, absl::StrCat("join/", n)));
    if (grown.IndexOf(static_cast<int>(id)) >= 0) continue;  // already a member (asked twice)
    grown.members.push_back(static_cast<int>(id));
    joiners.push_back(static_cast<int>(id));
  }
  if (joiners.empty()) {
    joins_seen_ = count;
    return absl::OkStatus();
  }
  std::sort(grown.members.begin(), grown.members.end());
  // The decision first, then the announcement, then each replacement's answer: whoever reads one finds the rest.
  // A failure's quorum may have taken this generation's decision meanwhile: then the joiners wait for the next.
  const std::string encoded = EncodeMembership(grown);
  ASSIGN_OR_RETURN(const Bytes stored, store_->CompareSet(DecisionKey(grown.generation), Bytes(), ToBytes(encoded)));
  if (ToText(stored) != encoded) return absl::OkStatus();
  joins_seen_ = count;
  // A counter, so that the members' lookup is one Add(key, 0), which never waits (0: nothing announced).
  RETURN_IF_ERROR(store_->Add(absl::StrCat("g", membership_.generation, "/grow"), grown.step).status());
  for (int id : joiners) {
    RETURN_IF_ERROR(store_->Set(absl::StrCat("joined/", id), ToBytes(absl::StrCat(grown.generation))));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ReplicaGroup::GrowthDue(int64_t step) {
  if (grow_generation_ != membership_.generation) {
    ASSIGN_OR_RETURN(const int64_t announced, store_->Add(absl::StrCat("g", membership_.generation, "/grow"), 0));
    if (announced == 0) return false;
    grow_at_ = announced;
    grow_generation_ = membership_.generation;
  }
  return step == grow_at_;
}

absl::StatusOr<Membership> ReplicaGroup::Grow(int64_t next_step) {
  group_.reset();
  ASSIGN_OR_RETURN(const Bytes decided, store_->Get(DecisionKey(membership_.generation + 1)));
  ASSIGN_OR_RETURN(Membership membership, DecodeMembership(membership_.generation + 1, ToText(decided)));
  return Form(std::move(membership), membership_.members, next_step);
}

}  // namespace tinyddp::dist::in_place
