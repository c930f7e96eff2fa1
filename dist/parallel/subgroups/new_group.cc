// NewGroup (dist/parallel/subgroups/new_group.h): check that every rank asks for the same group, then the
// members build it as InitProcessGroup builds the world.
#include "dist/parallel/subgroups/new_group.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/observe/flight_recorder/recorder.h"
#include "dist/process_group/gloo/process_group_gloo.h"
#include "dist/store/prefix_store.h"
#ifdef TINYDDP_HAVE_NCCL
#include "dist/process_group/nccl/process_group_nccl.h"
#endif

namespace tinyddp::dist {
namespace {

// How many NewGroup calls this process has made: the n-th call makes the n-th group on every rank.
int64_t groups_made = 0;

// The key space of exactly one backend group. ProcessGroupGloo::Create and ProcessGroupNCCL::Create each
// put their keys under "gloo/<n>/" or "nccl/<n>/", n counting the groups of that backend this process created,
// which is the same on every rank only when every rank creates every group; a subgroup's non-members
// create none. Each subgroup already has keys of its own ("subgroup<k>/", k counting NewGroup calls, which
// every rank makes), so here that per-process number is dropped: "gloo/3/rank_0" -> "gloo/rank_0".
class OneGroupStore : public Store {
 public:
  OneGroupStore(std::shared_ptr<Store> base, std::chrono::milliseconds timeout) : base_(std::move(base)) {
    set_timeout(timeout);
  }
  absl::Status Set(const std::string& key, const Bytes& value) override { return base_->Set(Key(key), value); }
  absl::StatusOr<Bytes> Get(const std::string& key) override {
    RETURN_IF_ERROR(base_->Wait({Key(key)}, timeout_));  // this view's timeout, as PrefixStore's Get
    return base_->Get(Key(key));
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override { return base_->Add(Key(key), delta); }
  absl::StatusOr<Bytes> CompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return base_->CompareSet(Key(key), expected, desired);
  }
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> mapped;
    for (const std::string& k : keys) mapped.push_back(Key(k));
    return base_->Wait(mapped, timeout);
  }
  absl::StatusOr<bool> Delete(const std::string& key) override { return base_->Delete(Key(key)); }
  absl::StatusOr<int64_t> NumKeys() override { return base_->NumKeys(); }
  using Store::Set;
  using Store::Wait;

 private:
  // "<prefix>/<digits>/<rest>" -> "<prefix>/<rest>"; any other key unchanged.
  static std::string Key(const std::string& key) {
    const size_t first = key.find('/');
    const size_t second = first == std::string::npos ? first : key.find('/', first + 1);
    if (second == std::string::npos || second == first + 1) return key;
    for (size_t i = first + 1; i < second; ++i) {
      if (key[i] < '0' || key[i] > '9') return key;
    }
    return key.substr(0, first) + key.substr(second);
  }
  std::shared_ptr<Store> base_;
};

// One number for a list of ranks, the same on every rank that passes the same list (FNV-1a).
int64_t Fingerprint(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = (h ^ static_cast<uint64_t>(r + 1)) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

// Collective over `world`: OK when every rank passed the same (call number, list); else InvalidArgument on
// every rank, naming the first rank that differs from rank 0.
absl::Status CheckSameRequest(ProcessGroup& world, int64_t call, const std::vector<int>& ranks) {
  const Device device = world.device_index() >= 0 ? Device::CUDA(world.device_index()) : Device::CPU();
  const Tensor mine = Tensor::FromVector<int64_t>({call, Fingerprint(ranks)}, {2}, device);
  Tensor all = Tensor::Empty({2 * world.size()}, DType::kInt64, device);
  RETURN_IF_ERROR(world.AllGather(all, mine)->Wait());
  const std::vector<int64_t> seen = all.ToVector<int64_t>();
  for (int r = 1; r < world.size(); ++r) {
    if (seen[2 * r] != seen[0] || seen[2 * r + 1] != seen[1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NewGroup: rank ", r, " asked for ", seen[2 * r] == seen[0] ? "another list of ranks" : "another group",
          " than rank 0 (", seen[2 * r] == seen[0] ? "same" : "different", " call number); every rank of the world "
          "must call NewGroup with the same ranks, in the same order as its other NewGroup calls (this rank passed {",
          absl::StrJoin(ranks, ", "), "})"));
    }
  }
  return absl::OkStatus();
}

// The member's group on the world's backend.
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeGroup(const ProcessGroup& world, std::shared_ptr<Store> store,
                                                        int rank, int size, std::chrono::milliseconds timeout) {
  const std::string backend = world.backend_name();
  if (backend == "gloo") {
    GlooOptions gloo;
    gloo.timeout = timeout;
    ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupGloo> pg, ProcessGroupGloo::Create(std::move(store), rank, size, gloo));
    return std::unique_ptr<ProcessGroup>(std::move(pg));
  }
#ifdef TINYDDP_HAVE_NCCL
  if (backend == "nccl") {
    NcclOptions nccl;
    nccl.timeout = timeout;
    nccl.device = world.device_index();  // the member's GPU: the one its world group uses
    ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupNCCL> pg, ProcessGroupNCCL::Create(std::move(store), rank, size, nccl));
    return std::unique_ptr<ProcessGroup>(std::move(pg));
  }
#endif
  return absl::UnimplementedError(absl::StrCat("NewGroup: no subgroups of a ", backend, " group in this build"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<ProcessGroup>> NewGroup(ProcessGroup& world, std::shared_ptr<Store> store,
                                                       std::vector<int> ranks, const NewGroupOptions& options) {
  const int64_t call = groups_made++;
  std::sort(ranks.begin(), ranks.end());
  // Compared first, whatever the list: a rank that returned early on a bad list would leave the others
  // waiting in the all_gather.
  RETURN_IF_ERROR(CheckSameRequest(world, call, ranks));
  const bool in_range = !ranks.empty() && ranks.front() >= 0 && ranks.back() < world.size();
  if (!in_range || std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("NewGroup: ranks {", absl::StrJoin(ranks, ", "),
                                                   "} must be distinct ranks of the world, in [0, ", world.size(), ")"));
  }
  if (store == nullptr) return absl::InvalidArgumentError("NewGroup: no store (pass the store the world was built on)");
  const auto me = std::find(ranks.begin(), ranks.end(), world.rank());
  if (me == ranks.end()) return std::shared_ptr<ProcessGroup>();  // not a member: nothing to join

  const std::string name = absl::StrCat("subgroup", call);  // not the world's group_name(): see the header
  const std::chrono::milliseconds timeout = options.timeout.count() > 0 ? options.timeout : world.timeout();
  auto keys = std::make_shared<OneGroupStore>(std::make_shared<PrefixStore>(name, std::move(store)), timeout);
  const int rank = static_cast<int>(me - ranks.begin()), size = static_cast<int>(ranks.size());
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = MakeGroup(world, std::move(keys), rank, size, timeout);
  if (!group.ok()) {
    return absl::Status(group.status().code(), absl::StrCat("NewGroup {", absl::StrJoin(ranks, ", "), "} on world rank ",
                                                            world.rank(), ": ", group.status().message()));
  }
  if (options.flight_recorder) {
    (*group)->AddObserver(std::make_shared<FlightRecorder>(name, (*group)->backend_name(), rank, size, timeout));
  }
  return std::shared_ptr<ProcessGroup>(std::move(*group));
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> NewGroup(ProcessGroup& world, std::vector<int> ranks,
                                                       const NewGroupOptions& options) {
  std::shared_ptr<Store> store = world.SubStore("subgroup");
  if (store == nullptr) {
    ++groups_made;  // the call still counts, so that later groups keep their numbers on every rank
    return absl::FailedPreconditionError(absl::StrCat(
        "NewGroup: the ", world.backend_name(), " world keeps no store to set a group up through; pass the store "
        "it was built on: NewGroup(world, store, ranks)"));
  }
  return NewGroup(world, std::move(store), std::move(ranks), options);
}

}  // namespace tinyddp::dist
