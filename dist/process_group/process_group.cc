// ProcessGroup's public calls: number each call, tell the observers (who may refuse it), check its arguments
// once for every backend, then hand the call to the backend's Run* method.
#include "dist/process_group/process_group.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "dist/process_group/external_all_reduce.h"
#include "dist/store/prefix_store.h"

namespace tinyddp::dist {

const char* ReduceOpName(ReduceOp op) {
  static constexpr const char* kNames[] = {"SUM", "AVG", "MAX", "MIN", "PRODUCT"};  // ReduceOp's order
  return kNames[static_cast<int>(op)];
}

std::string TensorSignature(const Tensor& tensor) {
  if (!tensor.defined()) return "undefined";
  std::string s = absl::StrCat(DTypeName(tensor.dtype()), " ", ShapeToString(tensor.shape()));
  if (tensor.device().is_cuda()) absl::StrAppend(&s, " ", tensor.device().ToString());
  return s;
}

namespace {

// `so_far` if it failed, else whether `root` is a rank of the group.
absl::Status CheckRoot(absl::Status so_far, int root, int size) {
  if (!so_far.ok() || (root >= 0 && root < size)) return so_far;
  return absl::InvalidArgumentError(absl::StrCat("root ", root, " is not a rank of this group (size ", size, ")"));
}

// `so_far` if it failed, else whether `whole` holds size() blocks of `part`: "output must hold size() *
// input.numel() = 2 * 5 elements, not 9".
absl::Status CheckNumel(absl::Status so_far, const char* whole, int64_t whole_numel, const char* part,
                        int64_t part_numel, int size) {
  if (!so_far.ok() || whole_numel == size * part_numel) return so_far;
  return absl::InvalidArgumentError(absl::StrCat(whole, " must hold size() * ", part, ".numel() = ", size, " * ",
                                                 part_numel, " elements, not ", whole_numel));
}

// "float32 [4] cuda:1" -> "float32 [4] cuda": the ranks of an NCCL group make the same call on different
// GPUs, so what observers compare across ranks leaves the device index out.
std::string WithoutDeviceIndex(std::string signature) {
  for (size_t at = signature.find("cuda:"); at != std::string::npos; at = signature.find("cuda:", at)) {
    size_t end = at + 5;
    while (end < signature.size() && absl::ascii_isdigit(signature[end])) ++end;
    signature.erase(at + 4, end - (at + 4));
    at += 4;
  }
  return signature;
}

std::atomic<int64_t> groups_created{0};  // "pg0", "pg1", ...: the groups of this process in creation order

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout), group_name_(absl::StrCat("pg", groups_created.fetch_add(1))) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<Store> ProcessGroup::SubStore(const std::string& purpose) {
  if (store_ == nullptr) return nullptr;
  return std::make_shared<PrefixStore>(absl::StrCat(purpose, "/", sub_stores_++), store_);
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

void ProcessGroup::NotifyAborting() {
  for (const auto& o : *Snapshot()) o->Aborting();
}

int64_t ProcessGroup::NumberBackendWork(const char* op, absl::string_view signature) {
  CollectiveInfo info{.seq = sequence_number_++, .op = op, .signature = std::string(signature)};
  for (const auto& o : *Snapshot()) o->Issued(info);
  return info.seq;
}

// --- Numbering and checking ------------------------------------------------------------------------

// `peers`: null for a collective; for a point-to-point call, the text after its parentheses (" to 2 tag 0").
std::shared_ptr<Work> ProcessGroup::Prepare(const char* op_name, absl::Span<const Tensor> contribution,
                                            const std::string& signature, absl::Status args_ok, Call* call,
                                            const char* via, const std::string* peers) {
  const int64_t n = peers != nullptr ? p2p_sequence_number_++ : sequence_number_++;
  call->seq = peers != nullptr ? kPointToPointSeqBase + n : n;
  call->description = absl::StrCat(op_name, "(", signature, ")", peers != nullptr ? *peers + " #p" : " #", n, " on ",
                                   backend_name(), " rank ", rank_, "/", size_,
                                   via != nullptr ? absl::StrCat(" via ", via) : "");
  CollectiveInfo info{.seq = call->seq, .op = op_name,
                      .signature = WithoutDeviceIndex(signature) + (peers != nullptr ? *peers : ""),
                      .via = via != nullptr ? via : "", .description = call->description,
                      .bucket = CollectiveBucketScope::Current()};
  for (const Tensor& t : contribution) {
    if (!t.defined()) continue;
    if (info.dtype.empty()) info.dtype = DTypeName(t.dtype());
    info.numel += t.numel();
    info.bytes += static_cast<int64_t>(t.nbytes());
  }
  const std::shared_ptr<const Observers> observers = Snapshot();
  for (const auto& o : *observers) o->Issued(info);
  // Ends the call here: told, and for a failure of the group (not bad arguments) noted.
  auto done = [&](absl::Status status, const char* failure_reason = nullptr) {
    NotifyEnded(call->seq, status);
    if (failure_reason != nullptr) status = NoteFailure(status, failure_reason);
    return CompletionWork::Done(std::move(status), call->description, timeout_);
  };
  // Observers may refuse before the arguments are checked: the debug check's exchange then still reaches
  // the other ranks, which get a report instead of waiting for a collective this rank will never start.
  for (const auto& o : *observers) {
    if (absl::Status s = o->Admit(info); !s.ok()) return done(std::move(s), "refused call");
  }
  if (!args_ok.ok()) return done(absl::InvalidArgumentError(absl::StrCat(call->description, ": ", args_ok.message())));
  if (op_name != std::string("Barrier") && info.numel == 0) return done(absl::OkStatus());  // nothing to move
  return nullptr;
}

absl::Status ProcessGroup::CheckTensors(absl::Span<const Tensor> tensors) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " is undefined"));
    RETURN_IF_ERROR(CheckTensor(t));
    if (t.dtype() != tensors[0].dtype() || t.device() != tensors[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all tensors must share one dtype and device; tensor 0 is ", TensorSignature(tensors[0]),
          " but tensor ", i, " is ", TensorSignature(t), " (hint: coalesce tensors of one dtype at a time)"));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> ProcessGroup::PrepareAllReduce(const char* op_name, absl::Span<const Tensor> tensors,
                                                     ReduceOp op, Call* call, const char* via) {
  std::vector<std::string> parts;
  for (const Tensor& t : tensors) parts.push_back(TensorSignature(t));
  parts.push_back(ReduceOpName(op));
  call->op = op;
  return Prepare(op_name, tensors, absl::StrJoin(parts, ", "), CheckTensors(tensors), call, via);
}

// --- Collectives -----------------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroup::AllReduce(const Tensor& tensor, ReduceOp op) {
  Call call;
  if (auto failed = PrepareAllReduce("AllReduce", {tensor}, op, &call)) return failed;
  return RunAllReduce({tensor}, call);
}

std::shared_ptr<Work> ProcessGroup::AllReduceCoalesced(absl::Span<const Tensor> tensors, ReduceOp op) {
  Call call;
  if (auto failed = PrepareAllReduce("AllReduceCoalesced", tensors, op, &call)) return failed;
  return RunAllReduce(std::vector<Tensor>(tensors.begin(), tensors.end()), call);
}

std::shared_ptr<Work> ProcessGroup::AllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                      absl::Span<const Tensor> tensors, ReduceOp op) {
  Call call;
  const char* op_name = tensors.size() == 1 ? "AllReduce" : "AllReduceCoalesced";
  if (auto failed = PrepareAllReduce(op_name, tensors, op, &call, impl->path_name())) return failed;
  return RunAllReduceExternal(std::move(impl), std::vector<Tensor>(tensors.begin(), tensors.end()), call);
}

std::shared_ptr<Work> ProcessGroup::RunAllReduceExternal(std::shared_ptr<ExternalAllReduce> impl,
                                                         std::vector<Tensor> tensors, const Call& call) {
  absl::Status status = absl::UnimplementedError(absl::StrCat(call.description, ": ", backend_name(),
                                                              " carries no external all_reduce"));
  NotifyEnded(call.seq, status);
  return CompletionWork::Done(std::move(status), call.description, timeout_);
}

std::shared_ptr<Work> ProcessGroup::Broadcast(const Tensor& tensor, int root) {
  Call call{.root = root};
  const std::string signature = absl::StrCat(TensorSignature(tensor), ", root=", root);
  const absl::Status ok = CheckRoot(CheckTensors({tensor}), root, size_);
  if (auto failed = Prepare("Broadcast", {tensor}, signature, ok, &call)) return failed;
  return RunBroadcast(tensor, call);
}

std::shared_ptr<Work> ProcessGroup::AllGather(const Tensor& output, const Tensor& input) {
  Call call;
  const std::string signature = absl::StrCat(TensorSignature(output), " <- ", TensorSignature(input));
  const absl::Status ok =
      CheckNumel(CheckTensors({output, input}), "output", output.numel(), "input", input.numel(), size_);
  if (auto failed = Prepare("AllGather", {input}, signature, ok, &call)) return failed;
  return RunAllGather(output, input, call);
}

std::shared_ptr<Work> ProcessGroup::ReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  Call call{.op = op};
  const std::string signature =
      absl::StrCat(TensorSignature(output), " <- ", TensorSignature(input), ", ", ReduceOpName(op));
  const absl::Status ok =
      CheckNumel(CheckTensors({output, input}), "input", input.numel(), "output", output.numel(), size_);
  if (auto failed = Prepare("ReduceScatter", {input}, signature, ok, &call)) return failed;
  return RunReduceScatter(output, input, call);
}

std::shared_ptr<Work> ProcessGroup::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  Call call{.op = op, .root = root};
  const std::string signature = absl::StrCat(TensorSignature(tensor), ", root=", root, ", ", ReduceOpName(op));
  const absl::Status ok = CheckRoot(CheckTensors({tensor}), root, size_);
  if (auto failed = Prepare("Reduce", {tensor}, signature, ok, &call)) return failed;
  return RunReduce(tensor, call);
}

std::shared_ptr<Work> ProcessGroup::Barrier() {
  Call call;
  if (auto failed = Prepare("Barrier", {}, "", absl::OkStatus(), &call)) return failed;
  return RunBarrier(call);
}

// --- Point-to-point ----------------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroup::Send(const Tensor& tensor, int dst, int tag) {
  return PointToPoint("Send", {P2POp{P2POp::Kind::kSend, tensor, dst, tag}});
}

std::shared_ptr<Work> ProcessGroup::Recv(const Tensor& tensor, int src, int tag) {
  return PointToPoint("Recv", {P2POp{P2POp::Kind::kRecv, tensor, src, tag}});
}

std::shared_ptr<Work> ProcessGroup::BatchSendRecv(std::vector<P2POp> ops) {
  return PointToPoint("BatchSendRecv", std::move(ops));
}

std::shared_ptr<Work> ProcessGroup::PointToPoint(const char* op_name, std::vector<P2POp> ops) {
  const bool batch = op_name == std::string("BatchSendRecv");
  absl::Status ok = ops.empty() ? absl::InvalidArgumentError("no ops to issue") : absl::OkStatus();
  std::vector<std::string> parts;
  std::vector<Tensor> tensors;
  std::string peers;  // " to 2 tag 0" for one op; a batch names each op's peer inside its parentheses
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const bool send = op.kind == P2POp::Kind::kSend;
    peers = absl::StrCat(send ? " to " : " from ", op.peer, " tag ", op.tag);
    parts.push_back(batch ? absl::StrCat(send ? "send " : "recv ", TensorSignature(op.tensor), peers)
                          : TensorSignature(op.tensor));
    tensors.push_back(op.tensor);
    const std::string which = batch ? absl::StrCat("op ", i, ": ") : "";
    absl::Status s = op.tensor.defined() ? CheckTensor(op.tensor) : absl::InvalidArgumentError("the tensor is undefined");
    if (s.ok() && (op.peer < 0 || op.peer >= size_ || op.peer == rank_)) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "peer ", op.peer, op.peer == rank_ ? " is this rank (a rank does not send to itself; copy the tensor)"
                                             : absl::StrCat(" is not a rank of this group (size ", size_, ")")));
    }
    if (s.ok() && (op.tag < 0 || op.tag >= (1 << 24))) {
      s = absl::InvalidArgumentError(absl::StrCat("tag ", op.tag, " is outside [0, 2^24)"));
    }
    if (ok.ok() && !s.ok()) ok = absl::InvalidArgumentError(absl::StrCat(which, s.message()));
  }
  if (batch) peers.clear();
  Call call;
  if (auto failed = Prepare(op_name, tensors, absl::StrJoin(parts, ", "), ok, &call, nullptr, &peers)) return failed;
  ops.erase(std::remove_if(ops.begin(), ops.end(), [](const P2POp& op) { return op.tensor.numel() == 0; }), ops.end());
  return RunPointToPoint(std::move(ops), call);
}

}  // namespace tinyddp::dist
