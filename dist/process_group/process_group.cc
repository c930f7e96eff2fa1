// ProcessGroup's public calls: number each call, tell the observers, run the debug-mode fingerprint check,
// check its arguments once for every backend, then hand the call to the backend's Run* method.
#include "dist/process_group/process_group.h"

#include <atomic>
#include <functional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/process_group/debug_check.h"
#include "dist/process_group/external_all_reduce.h"

namespace tinyddp::dist {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kAvg: return "AVG";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kProduct: return "PRODUCT";
  }
  return "?";
}

std::string TensorSignature(const Tensor& tensor) {
  if (!tensor.defined()) return "undefined";
  std::string s = absl::StrCat(DTypeName(tensor.dtype()), " ", ShapeToString(tensor.shape()));
  if (tensor.device().is_cuda()) absl::StrAppend(&s, " ", tensor.device().ToString());
  return s;
}

namespace {

// Every tensor defined, accepted by the backend, and all of one dtype and device.
absl::Status CheckTensors(absl::Span<const Tensor> tensors,
                          const std::function<absl::Status(const Tensor&)>& backend_check) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " is undefined"));
    RETURN_IF_ERROR(backend_check(t));
    if (t.dtype() != tensors[0].dtype() || t.device() != tensors[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all tensors must share one dtype and device; tensor 0 is ", TensorSignature(tensors[0]),
          " but tensor ", i, " is ", TensorSignature(t), " (hint: coalesce tensors of one dtype at a time)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRoot(int root, int size) {
  if (root >= 0 && root < size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("root ", root, " is not a rank of this group (size ", size, ")"));
}

// "float32 [4] cuda:1" -> "float32 [4] cuda": the ranks of an NCCL group make the same call on different
// GPUs, so the debug fingerprint leaves the device index out.
std::string WithoutDeviceIndex(std::string signature) {
  for (size_t at = signature.find("cuda:"); at != std::string::npos; at = signature.find("cuda:", at)) {
    size_t end = at + 5;
    while (end < signature.size() && absl::ascii_isdigit(signature[end])) ++end;
    signature.erase(at + 4, end - (at + 4));
    at += 4;
  }
  return signature;
}

// What this rank contributes to a collective, for the observers: its input (AllGather and
// ReduceScatter pass {output, input}), else every tensor.
void Contribution(const char* op_name, absl::Span<const Tensor> tensors, int64_t* numel, int64_t* bytes) {
  const std::string op = op_name;
  if ((op == "AllGather" || op == "ReduceScatter") && tensors.size() == 2) tensors = tensors.subspan(1);
  *numel = *bytes = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    *numel += t.numel();
    *bytes += static_cast<int64_t>(t.nbytes());
  }
}

// Every group of this process gets the next number: "pg0", "pg1", ...
std::string NextGroupName() {
  static std::atomic<int64_t> created{0};
  return absl::StrCat("pg", created.fetch_add(1));
}

bool AllEmpty(absl::Span<const Tensor> tensors) {
  for (const Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) return false;
  }
  return true;
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout), group_name_(NextGroupName()) {}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::EnableDebugCheck(std::unique_ptr<CollectiveFingerprintCheck> check) {
  debug_check_ = std::move(check);
}

// --- Observers -------------------------------------------------------------------------------------

void ProcessGroup::AddObserver(std::shared_ptr<CollectiveObserver> observer) {
  std::lock_guard<std::mutex> lock(observers_mu_);
  auto next = std::make_shared<Observers>(*observers_);
  next->push_back(std::move(observer));
  observers_ = std::move(next);
}

std::shared_ptr<const ProcessGroup::Observers> ProcessGroup::Snapshot() const {
  std::lock_guard<std::mutex> lock(observers_mu_);
  return observers_;
}

void ProcessGroup::NotifyStarted(int64_t seq) {
  for (const auto& o : *Snapshot()) o->Started(seq);
}

void ProcessGroup::NotifyEnded(int64_t seq, const absl::Status& status) {
  for (const auto& o : *Snapshot()) o->Ended(seq, status);
}

absl::Status ProcessGroup::NoteFailure(const absl::Status& status, absl::string_view reason) {
  if (status.ok() || failed_.exchange(true)) return status;
  std::string message(status.message());
  for (const auto& o : *Snapshot()) {
    const std::string text = o->Failed(reason, status);
    if (!text.empty()) absl::StrAppend(&message, "\n", text);
  }
  return absl::Status(status.code(), message);
}

int64_t ProcessGroup::NumberBackendWork(const char* op, absl::string_view signature) {
  CollectiveInfo info;
  info.seq = sequence_number_++;
  info.op = op;
  info.signature = std::string(signature);
  for (const auto& o : *Snapshot()) o->Issued(info);
  return info.seq;
}

// --- Numbering and checking ------------------------------------------------------------------------

ProcessGroup::Prepared ProcessGroup::Prepare(const char* op_name, absl::Span<const Tensor> tensors,
                                             std::string signature, ReduceOp op, int root, absl::Status args_ok,
                                             const char* via) {
  const int64_t seq = sequence_number_++;
  Prepared p;
  p.call.seq = seq;
  p.call.op = op;
  p.call.root = root;
  const std::string path = via != nullptr ? absl::StrCat(" via ", via) : "";
  p.call.description =
      absl::StrCat(op_name, "(", signature, ") #", seq, " on ", backend_name(), " rank ", rank_, "/", size_, path);
  // Told as every rank issues it (no device index: ranks of an NCCL group use different GPUs), so the
  // flight recorder's analyzer can compare ranks' calls at each sequence number.
  CollectiveInfo info;
  info.seq = seq;
  info.op = op_name;
  info.signature = WithoutDeviceIndex(signature);
  info.via = via != nullptr ? via : "";
  info.bucket = CollectiveBucketScope::Current();
  Contribution(op_name, tensors, &info.numel, &info.bytes);
  for (const Tensor& t : tensors) {
    if (t.defined()) {
      info.dtype = DTypeName(t.dtype());
      break;
    }
  }
  for (const auto& o : *Snapshot()) o->Issued(info);
  // Ends the call here: told, and for a failure of the group (not bad arguments) noted.
  auto done = [&](absl::Status status, const char* failure_reason = nullptr) {
    NotifyEnded(seq, status);
    if (failure_reason != nullptr) status = NoteFailure(status, failure_reason);
    p.failed = CompletionWork::Done(std::move(status), p.call.description, timeout_);
  };
  // The fingerprint exchange comes first, even for bad arguments, so the other ranks get a report
  // instead of waiting for a collective this rank will never start.
  if (debug_check_) {
    const std::string what = absl::StrCat(op_name, "(", info.signature, ")", path);
    if (absl::Status s = debug_check_->Check(seq, what); !s.ok()) {
      done(std::move(s), "debug check");
      return p;
    }
  }
  if (!args_ok.ok()) {
    done(absl::InvalidArgumentError(absl::StrCat(p.call.description, ": ", args_ok.message())));
    return p;
  }
  // No elements: nothing to move, completes at once on every rank.
  if (op_name != std::string("Barrier") && AllEmpty(tensors)) done(absl::OkStatus());
  return p;
}

ProcessGroup::Prepared ProcessGroup::PrepareAllReduce(const char* op_name, absl::Span<const Tensor> tensors,
                                                      ReduceOp op, const char* via) {
  auto check = [this](const Tensor& t) { return CheckTensor(t); };
  std::vector<std::string> parts;
  for (const Tensor& t : tensors) parts.push_back(TensorSignature(t));
  parts.push_back(ReduceOpName(op));
  return Prepare(op_name, tensors, absl::StrJoin(parts, ", "), op, 0, CheckTensors(tensors, check), via);
}

// --- Collectives -----------------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroup::AllReduce(const Tensor& tensor, ReduceOp op) {
  Prepared p = PrepareAllReduce("AllReduce", {tensor}, op, nullptr);
  if (p.failed) return p.failed;
  return RunAllReduce({tensor}, p.call);
}

std::shared_ptr<Work> ProcessGroup::AllReduceCoalesced(absl::Span<const Tensor> tensors, ReduceOp op) {
  Prepared p = PrepareAllReduce("AllReduceCoalesced", tensors, op, nullptr);
  if (p.failed) return p.failed;
  return RunAllReduce(std::vector<Tensor>(tensors.begin(), tensors.end()), p.call);
}

std::shared_ptr<Work> ProcessGroup::AllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                      absl::Span<const Tensor> tensors, ReduceOp op) {
  Prepared p = PrepareAllReduce(tensors.size() == 1 ? "AllReduce" : "AllReduceCoalesced", tensors, op,
                                impl->path_name());
  if (p.failed) return p.failed;
  return RunAllReduceExternal(std::move(impl), std::vector<Tensor>(tensors.begin(), tensors.end()), p.call);
}

std::shared_ptr<Work> ProcessGroup::RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                         std::vector<Tensor> tensors, const Call& call) {
  absl::Status status = absl::UnimplementedError(absl::StrCat(call.description, ": ", backend_name(),
                                                              " carries no external all_reduce"));
  NotifyEnded(call.seq, status);
  return CompletionWork::Done(std::move(status), call.description, timeout_);
}

std::shared_ptr<Work> ProcessGroup::Broadcast(const Tensor& tensor, int root) {
  auto check = [this](const Tensor& t) { return CheckTensor(t); };
  absl::Status ok = CheckTensors({tensor}, check);
  if (ok.ok()) ok = CheckRoot(root, size_);
  Prepared p = Prepare("Broadcast", {tensor}, absl::StrCat(TensorSignature(tensor), ", root=", root),
                       ReduceOp::kSum, root, ok);
  if (p.failed) return p.failed;
  return RunBroadcast(tensor, p.call);
}

std::shared_ptr<Work> ProcessGroup::AllGather(const Tensor& output, const Tensor& input) {
  auto check = [this](const Tensor& t) { return CheckTensor(t); };
  absl::Status ok = CheckTensors({output, input}, check);
  if (ok.ok() && output.numel() != size_ * input.numel()) {
    ok = absl::InvalidArgumentError(absl::StrCat("output must hold size() * input.numel() = ", size_, " * ",
                                                 input.numel(), " elements, not ", output.numel()));
  }
  Prepared p = Prepare("AllGather", {output, input},
                       absl::StrCat(TensorSignature(output), " <- ", TensorSignature(input)), ReduceOp::kSum, 0, ok);
  if (p.failed) return p.failed;
  return RunAllGather(output, input, p.call);
}

std::shared_ptr<Work> ProcessGroup::ReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  auto check = [this](const Tensor& t) { return CheckTensor(t); };
  absl::Status ok = CheckTensors({output, input}, check);
  if (ok.ok() && input.numel() != size_ * output.numel()) {
    ok = absl::InvalidArgumentError(absl::StrCat("input must hold size() * output.numel() = ", size_, " * ",
                                                 output.numel(), " elements, not ", input.numel()));
  }
  Prepared p = Prepare("ReduceScatter", {output, input},
                       absl::StrCat(TensorSignature(output), " <- ", TensorSignature(input), ", ",
                                    ReduceOpName(op)),
                       op, 0, ok);
  if (p.failed) return p.failed;
  return RunReduceScatter(output, input, p.call);
}

std::shared_ptr<Work> ProcessGroup::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  auto check = [this](const Tensor& t) { return CheckTensor(t); };
  absl::Status ok = CheckTensors({tensor}, check);
  if (ok.ok()) ok = CheckRoot(root, size_);
  Prepared p = Prepare("Reduce", {tensor},
                       absl::StrCat(TensorSignature(tensor), ", root=", root, ", ", ReduceOpName(op)), op, root,
                       ok);
  if (p.failed) return p.failed;
  return RunReduce(tensor, p.call);
}

std::shared_ptr<Work> ProcessGroup::Barrier() {
  Prepared p = Prepare("Barrier", {}, "", ReduceOp::kSum, 0, absl::OkStatus());
  if (p.failed) return p.failed;
  return RunBarrier(p.call);
}

}  // namespace tinyddp::dist
