// DistributedDataParallel (dist/ddp/ddp.h): construction-time checks and broadcast, Forward, NoSync.
#include "dist/ddp/ddp.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd/grad_mode.h"
#include "base/status_macros.h"
#include "dist/ddp/reducer.h"
#include "dist/process_group/exit_on_failure.h"
#include "nn/module.h"
#include "base/check.h"

namespace tinyddp::dist {
namespace {

// FNV-1a: a hash that is the same in every process (std::hash and absl::Hash need not be).
int64_t StableHash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);  // non-negative, so it never equals kMissing
}
constexpr int64_t kMissing = -1;     // "this rank has no parameter at this position"
constexpr int64_t kDescChars = 200;  // characters of one parameter description exchanged on mismatch

std::string Describe(const std::string& name, const Tensor& t) {
  return absl::StrCat("'", name, "' ", DTypeName(t.dtype()), " ", ShapeToString(t.shape()));
}

// All-gathers `local` (int64, same length on every rank) on `device`; row r of the result is rank r's.
absl::StatusOr<std::vector<std::vector<int64_t>>> AllGatherInts(ProcessGroup& pg, const std::vector<int64_t>& local,
                                                                Device device) {
  const int64_t n = static_cast<int64_t>(local.size());
  Tensor input = Tensor::FromVector<int64_t>(local, {n}, device);
  Tensor output = Tensor::Empty({n * pg.size()}, DType::kInt64, device);
  RETURN_IF_ERROR(pg.AllGather(output, input)->Wait());
  const std::vector<int64_t> flat = output.ToVector<int64_t>();
  std::vector<std::vector<int64_t>> rows(pg.size());
  for (int r = 0; r < pg.size(); ++r) rows[r].assign(flat.begin() + r * n, flat.begin() + (r + 1) * n);
  return rows;
}

// DdpOptions::bucket_order (a resumed run's layout) must list each trainable parameter once.
absl::Status CheckBucketOrder(const std::vector<std::pair<std::string, autograd::Variable>>& params,
                              const std::vector<std::string>& order) {
  std::vector<std::string> trainable;
  for (const auto& [name, p] : params) {
    if (p.requires_grad()) trainable.push_back(name);
  }
  std::vector<std::string> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::sort(trainable.begin(), trainable.end());
  if (order.empty() || sorted == trainable) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "DistributedDataParallel: bucket_order lists ", order.size(), " parameters (", absl::StrJoin(order, ", "),
      ") but the module's trainable parameters are ", trainable.size(), " (", absl::StrJoin(trainable, ", "),
      "); hint: it must come from a checkpoint of this model (Reducer::LayoutOrder), or be empty"));
}

}  // namespace

absl::Status VerifyParametersMatchAcrossRanks(ProcessGroup& pg,
                                              const std::vector<std::pair<std::string, autograd::Variable>>& params) {
  const Device device = params.empty() ? Device::CPU() : params[0].second.device();
  // Round 1: how many parameters each rank has.
  auto counts = AllGatherInts(pg, {static_cast<int64_t>(params.size())}, device);
  RETURN_IF_ERROR(counts);
  int64_t most = 0;
  for (const auto& row : *counts) most = std::max(most, row[0]);
  if (most == 0) return absl::OkStatus();
  // Round 2: a hash of each (name, dtype, shape), padded to the longest list.
  std::vector<int64_t> hashes(most, kMissing);
  for (size_t i = 0; i < params.size(); ++i) hashes[i] = StableHash(Describe(params[i].first, params[i].second.data()));
  auto all = AllGatherInts(pg, hashes, device);
  RETURN_IF_ERROR(all);
  int64_t first = -1;
  for (int64_t i = 0; i < most && first < 0; ++i) {
    for (int r = 1; r < pg.size(); ++r) {
      if ((*all)[r][i] != (*all)[0][i]) first = i;
    }
  }
  if (first < 0) return absl::OkStatus();
  // Every rank found the same `first`; round 3 exchanges that entry's text so the error can show it.
  std::string mine = first < static_cast<int64_t>(params.size())
                         ? Describe(params[first].first, params[first].second.data())
                         : absl::StrCat("nothing (it has only ", params.size(), " parameters)");
  std::vector<int64_t> chars(kDescChars, 0);
  for (size_t c = 0; c < mine.size() && c < static_cast<size_t>(kDescChars); ++c) chars[c] = mine[c];
  auto texts = AllGatherInts(pg, chars, device);
  RETURN_IF_ERROR(texts);
  auto text_of = [&](int r) {
    std::string s;
    for (int64_t c : (*texts)[r]) {
      if (c == 0) break;
      s.push_back(static_cast<char>(c));
    }
    return s;
  };
  std::vector<std::string> differing, details;
  for (int r = 1; r < pg.size(); ++r) {
    if ((*all)[r][first] == (*all)[0][first]) continue;
    differing.push_back(absl::StrCat(r));
    details.push_back(absl::StrCat("rank ", r, " has ", text_of(r)));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "DistributedDataParallel: the ranks hold different parameters. First difference at parameter #", first,
      ": rank 0 has ", text_of(0), "; ", absl::StrJoin(details, "; "), " (ranks differing from rank 0: ",
      absl::StrJoin(differing, ", "), "). hint: build the same model, with the same layer sizes, on every rank"));
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    nn::Module& module, std::shared_ptr<ProcessGroup> pg, DdpOptions options) {
  if (pg == nullptr) return absl::InvalidArgumentError("DistributedDataParallel: the process group is null");
  const std::vector<std::pair<std::string, autograd::Variable>> params = module.NamedParameters();
  bool any_trainable = false;
  for (const auto& [name, p] : params) {
    any_trainable = any_trainable || p.requires_grad();
    if (p.device() != params[0].second.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DistributedDataParallel: parameter '", name, "' is on ", p.device().ToString(), " but '",
          params[0].first, "' is on ", params[0].second.device().ToString(),
          "; hint: move the whole module to this rank's device (Module::To) first"));
    }
  }
  if (!any_trainable) {
    return absl::FailedPreconditionError(
        "DistributedDataParallel: the module has no parameter that requires grad, so there is nothing to "
        "synchronise; hint: DDP is not needed for this module");
  }
  if (options.bucket_cap_bytes <= 0 || options.first_bucket_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedDataParallel: bucket sizes must be positive, got "
                                                   "bucket_cap_bytes=", options.bucket_cap_bytes,
                                                   " first_bucket_bytes=", options.first_bucket_bytes));
  }
  RETURN_IF_ERROR(CheckBucketOrder(params, options.bucket_order));
  RETURN_IF_ERROR(VerifyParametersMatchAcrossRanks(*pg, params));

  // Start from one model: rank 0's values everywhere (PyTorch's _sync_module_states). All broadcasts are
  // issued first and then waited for, so they pipeline.
  {
    autograd::NoGradGuard no_grad;
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& [name, p] : params) works.push_back(pg->Broadcast(p.data(), /*root=*/0));
    for (size_t i = 0; i < works.size(); ++i) {
      if (absl::Status s = works[i]->Wait(); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("DistributedDataParallel: broadcasting parameter '",
                                                   params[i].first, "' from rank 0 failed: ", s.message()));
      }
    }
    module.RefreshComputeCopies();  // bf16 precision: the compute copies follow rank 0's weights too
  }

  // How each bucket is communicated: the user's hook, or (empty) the reducer's default, AllReduceHook.
  auto reducer = std::make_unique<Reducer>(params, pg, options, options.comm_hook);
  RETURN_IF_ERROR(reducer->status());  // the hook's setup of the buckets failed (CommHook::on_buckets_rebuilt)
  return std::unique_ptr<DistributedDataParallel>(
      new DistributedDataParallel(module, std::move(pg), std::move(options), std::move(reducer)));
}

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> pg,
                                                 DdpOptions options, std::unique_ptr<Reducer> reducer)
    : module_(module), pg_(std::move(pg)), options_(std::move(options)), reducer_(std::move(reducer)) {}

DistributedDataParallel::~DistributedDataParallel() = default;

absl::Status DistributedDataParallel::status() const { return reducer_->status(); }

autograd::Variable DistributedDataParallel::Forward(const autograd::Variable& input) {
  // A loop that did not stop on status() would train on gradients that are not averages, over a broken
  // group: the process ends here instead, cleanly (exit_on_failure.h).
  if (const absl::Status failed = status(); !failed.ok()) {
    ExitOnCollectiveFailure(absl::StrCat("DistributedDataParallel (rank ", pg_->rank(), ")"), failed);
  }
  const bool grad = autograd::GradModeEnabled();
  // The one-time rebuild happens here, between iterations, when no bucket is in flight (collective).
  if (grad) reducer_->RebuildBucketsIfNeeded();
  autograd::Variable output = module_.Forward(input);
  if (grad && sync_enabled_) {
    reducer_->PrepareForBackward(output);
  } else {
    reducer_->PrepareForLocalBackward();
  }
  return output;
}

void DistributedDataParallel::SetBucketReducedCallback(std::function<absl::Status(const GradBucket& bucket)> callback,
                                                       Reducer::CallbackTiming timing) {
  TINYDDP_CHECK_OP(!(callback && has_bucket_reduced_callback_), "DistributedDataParallel::SetBucketReducedCallback",
                   "a callback is already set (one optimizer wrapper at a time); hint: remove it first (empty)");
  has_bucket_reduced_callback_ = static_cast<bool>(callback);
  reducer_->SetBucketReducedCallback(std::move(callback), timing);
}

// --- Which path each bucket takes ------------------------------------------------------------------------

const char* DistributedDataParallel::BucketPath(int b) const {
  return reducer_->comm_hook().PathOf(*pg_, reducer_->grad_bucket(b));
}

std::string DistributedDataParallel::BucketTable() const {
  std::string out = absl::StrFormat("DDP buckets, in launch order (%d ranks, %s; the same on every rank):\n",
                                    pg_->size(), pg_->backend_name());
  absl::StrAppendFormat(&out, "  %6s %14s %7s  %-24s %s\n", "bucket", "bytes", "params", "path", "parameters");
  const std::vector<std::vector<std::string>> all_names = reducer_->BucketParameterNames();
  for (int b = 0; b < reducer_->num_buckets(); ++b) {
    const std::vector<std::string>& names = all_names[b];
    std::string shown = absl::StrJoin(names, ", ");
    if (shown.size() > 60) shown = absl::StrCat(shown.substr(0, 56), " ...");
    const char* path = BucketPath(b);
    absl::StrAppendFormat(&out, "  %6d %14d %7d  %-24s %s\n", b, reducer_->BucketBytes(b), names.size(), path, shown);
  }
  if (options_.rebuild_buckets && !reducer_->buckets_rebuilt() && !options_.find_unused_parameters) {
    absl::StrAppend(&out, "(rebuilt once after the first step, in the order gradients arrive)\n");
  }
  return out;
}

DistributedDataParallel::NoSyncGuard DistributedDataParallel::NoSync() {
  const bool previous = sync_enabled_;
  sync_enabled_ = false;
  return NoSyncGuard(this, previous);
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : ddp_(other.ddp_), previous_(other.previous_) {
  other.ddp_ = nullptr;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  if (ddp_ != nullptr) ddp_->sync_enabled_ = previous_;
}

}  // namespace tinyddp::dist
