// The ladder's factory (dist/ladder/ladder.h), and the full rung: DistributedDataParallel itself behind the
// ladder's interface.
#include "dist/ladder/ladder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/ladder/bucketed_ddp.h"
#include "dist/ladder/flat_ddp.h"
#include "dist/ladder/naive_ddp.h"
#include "dist/observe/trace/traced_comm_hook.h"

namespace tinyddp::dist::ladder {
namespace {

// The top rung: everything happens inside Forward and autograd::Backward (the Reducer launches buckets from
// the gradient hooks and waits for them at the end of backward), so FinishBackward only reports DDP's status.
class FullRung : public DataParallel {
 public:
  FullRung(std::unique_ptr<DistributedDataParallel> ddp, Tracer* tracer) : ddp_(std::move(ddp)), tracer_(tracer) {}

  autograd::Variable Forward(const autograd::Variable& input, bool sync) override {
    Tracer::Span span = Tracer::MaybeScope(tracer_, "forward");  // as the other rungs record theirs
    if (sync) return ddp_->Forward(input);
    DistributedDataParallel::NoSyncGuard no_sync = ddp_->NoSync();  // only the Forward decides: see ddp.h
    return ddp_->Forward(input);
  }
  absl::Status FinishBackward() override { return ddp_->status(); }
  std::string Describe() const override { return ddp_->BucketTable(); }
  std::vector<int64_t> AllReduceBytes() const override {
    std::vector<int64_t> bytes;
    for (int b = 0; b < ddp_->reducer().num_buckets(); ++b) bytes.push_back(ddp_->reducer().BucketBytes(b));
    return bytes;
  }

 private:
  std::unique_ptr<DistributedDataParallel> ddp_;
  Tracer* const tracer_;
};

}  // namespace

const std::vector<std::string>& RungNames() {
  static const auto* names = new std::vector<std::string>{"naive", "flat", "bucketed", "full"};
  return *names;
}

absl::StatusOr<std::unique_ptr<DataParallel>> CreateDataParallel(const std::string& name, nn::Module& module,
                                                                 std::shared_ptr<ProcessGroup> pg,
                                                                 const DdpOptions& options, Tracer* tracer) {
  if (name == "full") {
    DdpOptions traced = options;
    if (tracer != nullptr) traced.comm_hook = TracedCommHook(options.comm_hook, tracer);
    ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                     DistributedDataParallel::Create(module, std::move(pg), std::move(traced)));
    return std::unique_ptr<DataParallel>(new FullRung(std::move(ddp), tracer));
  }
  const char* only_full = options.comm_hook.run               ? "a comm hook"
                          : options.find_unused_parameters    ? "find_unused_parameters"
                          : !options.gradient_as_bucket_view ? "gradient_as_bucket_view=false"
                                                              : nullptr;
  if (only_full != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP ladder: ", only_full, " needs the full DistributedDataParallel (--ddp=full), not --ddp=", name));
  }
  if (name == "naive") {
    ASSIGN_OR_RETURN(std::unique_ptr<NaiveDdp> naive, NaiveDdp::Create(module, std::move(pg), tracer));
    return std::unique_ptr<DataParallel>(std::move(naive));
  }
  if (name == "flat") {
    ASSIGN_OR_RETURN(std::unique_ptr<FlatDdp> flat, FlatDdp::Create(module, std::move(pg), tracer));
    return std::unique_ptr<DataParallel>(std::move(flat));
  }
  if (name == "bucketed") {
    ASSIGN_OR_RETURN(std::unique_ptr<BucketedDdp> bucketed,
                     BucketedDdp::Create(module, std::move(pg), options.first_bucket_bytes, options.bucket_cap_bytes,
                                         tracer));
    return std::unique_ptr<DataParallel>(std::move(bucketed));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DDP ladder: unknown rung '", name, "'; expected one of ", absl::StrJoin(RungNames(), ", ")));
}

}  // namespace tinyddp::dist::ladder
