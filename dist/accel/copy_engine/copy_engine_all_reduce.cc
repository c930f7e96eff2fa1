// CopyEngineAllReduce (copy_engine_all_reduce.h): setup through the store, CUDA IPC, the scratch, buffer
// registration, and the executor that turns a plan (copy_engine_plan.h) into CUDA calls.
#include "dist/accel/copy_engine/copy_engine_all_reduce.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/accel/copy_engine/copy_engine_reduce.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using copy_engine::Memory;
using copy_engine::Op;

// Stream memory operations are driver API; the runtime hands out their entry points, so nothing links
// libcuda directly.
using StreamValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

struct DriverApi {
  StreamValue32Fn wait_value = nullptr;
  StreamValue32Fn write_value = nullptr;
  AddressRangeFn address_range = nullptr;  // Register only: the allocation a buffer lives in
  bool ok() const { return wait_value && write_value; }
};

template <typename Fn>
Fn Resolve(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

const DriverApi& Driver() {
  static const DriverApi api = [] {
    DriverApi a;
    a.wait_value = Resolve<StreamValue32Fn>("cuStreamWaitValue32");
    a.write_value = Resolve<StreamValue32Fn>("cuStreamWriteValue32");
    a.address_range = Resolve<AddressRangeFn>("cuMemGetAddressRange");
    return a;
  }();
  return api;
}

constexpr size_t kFlagBytes = copy_engine::kNumFlags * sizeof(uint32_t);

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "host|boot id|PCI bus id": two ranks may share CUDA memory only if the first two match.
std::string Identity(int device) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char bus[64] = {};
  cudaDeviceGetPCIBusId(bus, sizeof(bus), device);
  return absl::StrCat(host, "|", ReadFirstLine("/proc/sys/kernel/random/boot_id"), "|", bus);
}

Bytes ToBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string ToString(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::string CudaError(const char* what, cudaError_t err) {
  return absl::StrCat(what, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

// The range [lo, hi) of the tensors seen as one concatenated vector: fn(pointer, position in the range,
// count) for each tensor's part of it, in order; stops at the first error.
template <typename Fn>
cudaError_t ForRange(const std::vector<Tensor>& tensors, int64_t lo, int64_t hi, Fn&& fn) {
  int64_t base = 0;
  for (const Tensor& t : tensors) {
    const int64_t b = std::max(lo, base), e = std::min(hi, base + t.numel());
    if (b < e) {
      if (cudaError_t err = fn(static_cast<float*>(t.data_ptr()) + (b - base), b - lo, e - b); err != cudaSuccess) {
        return err;
      }
    }
    base += t.numel();
  }
  return cudaSuccess;
}

int64_t TotalNumel(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

// Makes `device` current for a scope (Register is called from outside the group, on any device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

bool SumOrAvg(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kAvg; }

// Whether this rank can share memory with the peer whose Identity() is `them`: "" when it can, else why.
std::string CheckPeer(int device, const std::string& me, const std::string& them, bool allow_one_gpu) {
  const std::string my_host = me.substr(0, me.rfind('|')), their_host = them.substr(0, them.rfind('|'));
  if (my_host != their_host) return "the two ranks run on different machines";
  int peer_device = -1, can = 0;
  if (cudaDeviceGetByPCIBusId(&peer_device, them.substr(them.rfind('|') + 1).c_str()) != cudaSuccess) {
    cudaGetLastError();
    return "the peer's GPU is not visible in this process (CUDA_VISIBLE_DEVICES)";
  }
  if (peer_device == device) {
    // Two processes on one GPU share its memory through IPC without any peer access.
    return allow_one_gpu ? "" : absl::StrCat("both ranks use the same GPU (cuda:", device, ")");
  }
  if (cudaDeviceCanAccessPeer(&can, device, peer_device) != cudaSuccess || !can) {
    cudaGetLastError();
    return "the two GPUs cannot access each other peer-to-peer";
  }
  return "";
}

}  // namespace

// --- Setup -----------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<CopyEngineAllReduce>> CopyEngineAllReduce::Create(
    std::shared_ptr<Store> store, int rank, int device, std::chrono::milliseconds timeout,
    const CopyEngineOptions& options, std::string* why_not) {
  if (rank != 0 && rank != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the copy-engine all_reduce joins two ranks; got rank ", rank));
  }
  std::unique_ptr<CopyEngineAllReduce> ce(new CopyEngineAllReduce(std::move(store), rank, device, timeout));
  const DeviceGuard on_device(device);

  // Each rank decides what it can do, then both take the stricter answer, so the decision is symmetric.
  std::string mine_why = options.veto;
  if (mine_why.empty() && !Driver().ok()) mine_why = "the CUDA driver offers no stream memory operations";
  const std::string me = Identity(device);
  ASSIGN_OR_RETURN(const Bytes peer, ce->Exchange("identity", ToBytes(me)));
  if (mine_why.empty()) mine_why = CheckPeer(device, me, ToString(peer), options.allow_one_gpu);
  // Shared memory: the flag area (the scratch comes with the first call). Failing here (IPC refused)
  // also means "no".
  if (mine_why.empty()) {
    cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&ce->flags_), kFlagBytes);
    if (err == cudaSuccess) err = cudaMemset(ce->flags_, 0, kFlagBytes);
    if (err != cudaSuccess) mine_why = CudaError("allocating the flag area", err);
  }
  Bytes exported;
  if (mine_why.empty()) {
    absl::StatusOr<Bytes> e = Export(ce->flags_);
    if (e.ok()) exported = *e; else mine_why = std::string(e.status().message());
  }
  ASSIGN_OR_RETURN(const Bytes peer_flags, ce->Exchange("flags", exported));
  if (mine_why.empty() && peer_flags.empty()) mine_why = "the peer cannot use it";
  if (mine_why.empty()) {
    absl::StatusOr<char*> p = Import(peer_flags);
    if (p.ok()) ce->peer_flags_ = *p; else mine_why = std::string(p.status().message());
  }
  ASSIGN_OR_RETURN(const Bytes verdict, ce->Exchange("verdict", ToBytes(mine_why)));
  if (!mine_why.empty() || !verdict.empty()) {
    *why_not = !mine_why.empty() ? mine_why : absl::StrCat("rank ", 1 - rank, ": ", ToString(verdict));
    return std::unique_ptr<CopyEngineAllReduce>();
  }
  // Which calls come here must be the same on both ranks, even if their thresholds differ.
  ASSIGN_OR_RETURN(const Bytes their_min, ce->Exchange("min_bytes", ToBytes(std::to_string(options.min_bytes))));
  int64_t theirs = 0;
  ce->min_bytes_ = options.min_bytes;
  if (absl::SimpleAtoi(ToString(their_min), &theirs)) ce->min_bytes_ = std::max(ce->min_bytes_, theirs);
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStreamCreateWithPriority(&ce->release_stream_, cudaStreamNonBlocking, greatest);
  cudaStreamCreateWithPriority(&ce->helper_, cudaStreamNonBlocking, greatest);
  cudaStreamCreateWithPriority(&ce->drain_, cudaStreamNonBlocking, greatest);
  for (int e = 0; e < copy_engine::kNumPlanEvents; ++e) {
    if (e != copy_engine::kDoneEvent) cudaEventCreateWithFlags(&ce->events_[e], cudaEventDisableTiming);
  }
  cudaEventCreateWithFlags(&ce->last_end_, cudaEventDisableTiming);
  return ce;
}

CopyEngineAllReduce::CopyEngineAllReduce(std::shared_ptr<Store> store, int rank, int device,
                                         std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), device_(device), timeout_(timeout), planner_(rank) {}

CopyEngineAllReduce::~CopyEngineAllReduce() {
  // Destroyed once no call is in flight (each call's Work holds this until it ended, and the group as its
  // observer); the peer's mappings of our memory die with it.
  const DeviceGuard on_device(device_);
  registered_.clear();
  for (const auto& [handle, base] : peer_allocations_) cudaIpcCloseMemHandle(base);
  if (peer_flags_ != nullptr) cudaIpcCloseMemHandle(peer_flags_);
  if (peer_scratch_ != nullptr) cudaIpcCloseMemHandle(peer_scratch_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (flags_ != nullptr) cudaFree(flags_);
  for (cudaStream_t s : {release_stream_, helper_, drain_}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  for (cudaEvent_t e : events_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (last_end_ != nullptr) cudaEventDestroy(last_end_);
}

absl::StatusOr<Bytes> CopyEngineAllReduce::Exchange(const std::string& key, const Bytes& mine) {
  const std::string base = absl::StrCat(exchanges_++, "/", key, "/");
  RETURN_IF_ERROR(store_->Set(base + std::to_string(rank_), mine));
  const std::string theirs = base + std::to_string(1 - rank_);
  if (absl::Status s = store_->Wait({theirs}, timeout_); !s.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("copy-engine all_reduce: rank ", rank_, " waited ",
                                                    timeout_.count(), " ms for rank ", 1 - rank_, "'s '", key,
                                                    "': ", s.message()));
  }
  return store_->Get(theirs);
}

absl::StatusOr<Bytes> CopyEngineAllReduce::Export(void* ptr) {
  cudaIpcMemHandle_t handle;
  if (cudaError_t err = cudaIpcGetMemHandle(&handle, ptr); err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(CudaError("cudaIpcGetMemHandle", err));
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&handle);
  return Bytes(p, p + sizeof(handle));
}

absl::StatusOr<char*> CopyEngineAllReduce::Import(const Bytes& bytes) {
  if (bytes.size() != sizeof(cudaIpcMemHandle_t)) return absl::DataLossError("a malformed IPC handle in the store");
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, bytes.data(), sizeof(handle));
  void* base = nullptr;
  if (cudaError_t err = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess); err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(CudaError("cudaIpcOpenMemHandle", err));
  }
  return static_cast<char*>(base);
}

bool CopyEngineAllReduce::Takes(DType dtype, int64_t numel, ReduceOp op) const {
  return dtype == DType::kFloat32 && SumOrAvg(op) && numel * 4 >= min_bytes_;
}

// --- The scratch -------------------------------------------------------------------------------------

absl::Status CopyEngineAllReduce::Prepare(const std::vector<Tensor>& tensors, ReduceOp op) {
  // Its calls synchronise with the peer outside the stream (and growing the scratch below allocates and
  // talks to the peer): nothing a CUDA graph could record. Refuse a capture before anything is done.
  if (cuda::Stream::Current(device_).IsCapturing()) {
    return absl::FailedPreconditionError(
        "an external all_reduce cannot be recorded into a CUDA graph (its implementation synchronises outside "
        "the stream); use the group's AllReduce inside a graph");
  }
  for (const Tensor& t : tensors) {
    if (t.dtype() != DType::kFloat32 || !SumOrAvg(op)) {
      return absl::InvalidArgumentError(absl::StrCat("the copy-engine all_reduce takes float32 SUM or AVG, not ",
                                                     DTypeName(t.dtype()), " ", ReduceOpName(op)));
    }
  }
  const int64_t half = copy_engine::SplitPoint(TotalNumel(tensors), planner_.options()) * 4;
  if (half <= half_bytes_) return absl::OkStatus();
  // Both ranks grow here, at the same call, once every write of ours into the peer's old scratch and of
  // the peer's into ours has finished.
  RETURN_IF_ERROR(WaitForCallsInFlight("growing the copy-engine scratch"));
  // Grow by at least half again, so that a sequence of slightly bigger calls does not regrow each time.
  const int64_t want = std::max(half, half_bytes_ * 3 / 2);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (peer_scratch_ != nullptr) cudaIpcCloseMemHandle(peer_scratch_);
  scratch_ = peer_scratch_ = nullptr;
  half_bytes_ = 0;
  Bytes exported;
  std::string error;
  if (cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&scratch_), 2 * want); err != cudaSuccess) {
    cudaGetLastError();
    scratch_ = nullptr;
    error = CudaError(absl::StrCat("allocating ", 2 * want, " bytes of copy-engine scratch").c_str(), err);
  } else {
    absl::StatusOr<Bytes> e = Export(scratch_);
    if (e.ok()) exported = *e; else error = std::string(e.status().message());
  }
  ASSIGN_OR_RETURN(const Bytes peer, Exchange("scratch", exported));
  if (!error.empty()) return absl::ResourceExhaustedError(error);
  if (peer.empty()) return absl::ResourceExhaustedError("the peer could not allocate its copy-engine scratch");
  ASSIGN_OR_RETURN(peer_scratch_, Import(peer));
  half_bytes_ = want;
  return absl::OkStatus();
}

// --- Registered buffers ------------------------------------------------------------------------------

namespace {
// One buffer as Register publishes it: mappable (1) or not (0), its allocation's IPC handle, its
// offset in that allocation and its element count.
constexpr size_t kRecordBytes = 1 + sizeof(cudaIpcMemHandle_t) + 2 * sizeof(int64_t);
struct Record {
  bool ok = false;
  Bytes handle;
  int64_t offset = 0;
  int64_t numel = 0;
};
void Append(Bytes& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
Record Parse(const Bytes& in, size_t i) {
  const uint8_t* p = in.data() + i * kRecordBytes;
  Record r;
  r.ok = p[0] == 1;
  r.handle.assign(p + 1, p + 1 + sizeof(cudaIpcMemHandle_t));
  std::memcpy(&r.offset, p + 1 + sizeof(cudaIpcMemHandle_t), sizeof(int64_t));
  std::memcpy(&r.numel, p + 1 + sizeof(cudaIpcMemHandle_t) + sizeof(int64_t), sizeof(int64_t));
  return r;
}
}  // namespace

absl::Status CopyEngineAllReduce::Register(const std::vector<Tensor>& buffers) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].device() != Device::CUDA(device_)) {
      return absl::InvalidArgumentError(absl::StrCat("copy-engine buffer registration: buffer ", i, " is on ",
                                                     buffers[i].device().ToString(), ", not on this rank's cuda:",
                                                     device_));
    }
  }
  const DeviceGuard on_device(device_);
  // Calls in flight may still read or write the buffers registered so far (ours, and through our
  // copies the peer's).
  RETURN_IF_ERROR(WaitForCallsInFlight("registering buffers"));
  registered_.clear();
  // What I can offer: each buffer's allocation, exported.
  Bytes mine;
  std::vector<Record> my_records;
  for (const Tensor& t : buffers) {
    Record r;
    r.numel = t.numel();
    r.handle.assign(sizeof(cudaIpcMemHandle_t), 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(t.data_ptr());
    if (t.dtype() == DType::kFloat32 && Driver().address_range != nullptr &&
        Driver().address_range(&base, &size, at) == CUDA_SUCCESS) {
      if (absl::StatusOr<Bytes> handle = Export(reinterpret_cast<void*>(base)); handle.ok()) {
        r.ok = true;
        r.handle = *std::move(handle);
        r.offset = static_cast<int64_t>(at - base);
      }
    }
    const uint8_t ok = r.ok ? 1 : 0;
    Append(mine, &ok, 1);
    Append(mine, r.handle.data(), r.handle.size());
    Append(mine, &r.offset, sizeof(int64_t));
    Append(mine, &r.numel, sizeof(int64_t));
    my_records.push_back(r);
  }
  absl::StatusOr<Bytes> theirs = Exchange("register", mine);
  RETURN_IF_ERROR(theirs);
  if (theirs->size() != mine.size()) {
    return absl::InvalidArgumentError(absl::StrCat("copy-engine buffer registration: rank ", rank_, " registers ",
                                                   buffers.size(), " buffer(s), rank ", 1 - rank_, " ",
                                                   theirs->size() / kRecordBytes, "; every rank passes the same list"));
  }
  // Map what both sides could export; then agree, so that a buffer is registered on both or neither.
  std::vector<float*> peer(buffers.size(), nullptr);
  Bytes mapped(buffers.size(), 0);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Record r = Parse(*theirs, i);
    if (r.numel != my_records[i].numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "copy-engine buffer registration: buffer ", i, " has ", my_records[i].numel, " elements on rank ", rank_,
          " and ", r.numel, " on rank ", 1 - rank_, "; every rank passes the same list"));
    }
    if (!r.ok || !my_records[i].ok) continue;
    auto it = std::find_if(peer_allocations_.begin(), peer_allocations_.end(),
                           [&](const auto& e) { return e.first == r.handle; });
    if (it == peer_allocations_.end()) {
      absl::StatusOr<char*> base = Import(r.handle);
      if (!base.ok()) continue;
      it = peer_allocations_.insert(peer_allocations_.end(), {r.handle, *base});
    }
    peer[i] = reinterpret_cast<float*>(it->second + r.offset);
    mapped[i] = 1;
  }
  absl::StatusOr<Bytes> their_mapped = Exchange("registered", mapped);
  RETURN_IF_ERROR(their_mapped);
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (mapped[i] && i < their_mapped->size() && (*their_mapped)[i]) registered_.push_back({buffers[i], peer[i]});
  }
  return absl::OkStatus();
}

float* CopyEngineAllReduce::RegisteredPeer(const std::vector<Tensor>& tensors) const {
  // The peer finds the same entry at the same position (both register the same list and call on
  // corresponding buffers), so both plan a direct call.
  if (tensors.size() != 1) return nullptr;
  for (const Registered& r : registered_) {
    if (r.mine.data_ptr() == tensors[0].data_ptr() && r.mine.numel() == tensors[0].numel()) return r.peer;
  }
  return nullptr;
}

// --- The executor -------------------------------------------------------------------------------------

float* CopyEngineAllReduce::Address(Memory memory, int64_t at, float* peer_buffer) const {
  switch (memory) {
    case Memory::kIn: return reinterpret_cast<float*>(scratch_) + at;
    case Memory::kOut: return reinterpret_cast<float*>(scratch_ + half_bytes_) + at;
    case Memory::kPeerIn: return reinterpret_cast<float*>(peer_scratch_) + at;
    case Memory::kPeerOut: return reinterpret_cast<float*>(peer_scratch_ + half_bytes_) + at;
    case Memory::kPeerTensors: return peer_buffer + at;
    case Memory::kTensors: break;  // ForRange: the tensors may be several
  }
  return nullptr;
}

cudaError_t CopyEngineAllReduce::Run(const Op& op, const std::vector<Tensor>& tensors, float scale,
                                     const cudaStream_t streams[], cudaEvent_t done, float* peer_buffer) {
  const cudaStream_t s = streams[static_cast<int>(op.stream)];
  const cudaEvent_t event = op.index == copy_engine::kDoneEvent ? done : events_[op.index];
  const DriverApi& d = Driver();
  switch (op.kind) {
    case Op::Kind::kRecord:
      return cudaEventRecord(event, s);
    case Op::Kind::kWaitEvent:
      return cudaStreamWaitEvent(s, event, 0);
    case Op::Kind::kWaitFlag:
      return d.wait_value(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flags_ + op.index), op.value,
                          CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS
                 ? cudaSuccess
                 : cudaErrorUnknown;
    case Op::Kind::kSignal:
      return d.write_value(reinterpret_cast<CUstream>(s),
                           reinterpret_cast<CUdeviceptr>(peer_flags_) + op.index * sizeof(uint32_t), op.value,
                           CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS
                 ? cudaSuccess
                 : cudaErrorUnknown;
    case Op::Kind::kCopy:
      // The plan copies between the tensors and a scratch area or the peer's buffer, one side each.
      if (op.src == Memory::kTensors) {
        return ForRange(tensors, op.src_at, op.src_at + op.count, [&](float* p, int64_t at, int64_t count) {
          return cudaMemcpyAsync(Address(op.dst, op.dst_at + at, peer_buffer), p, count * 4, cudaMemcpyDeviceToDevice, s);
        });
      }
      return ForRange(tensors, op.dst_at, op.dst_at + op.count, [&](float* p, int64_t at, int64_t count) {
        return cudaMemcpyAsync(p, Address(op.src, op.src_at + at, peer_buffer), count * 4, cudaMemcpyDeviceToDevice, s);
      });
    case Op::Kind::kReduce:
      return ForRange(tensors, op.dst_at, op.dst_at + op.count, [&](float* p, int64_t at, int64_t count) {
        return copy_engine::LaunchAddScale(p, Address(op.src, op.src_at + at, peer_buffer), count, scale, s);
      });
  }
  return cudaErrorInvalidValue;
}

absl::Status CopyEngineAllReduce::Enqueue(const std::vector<Tensor>& tensors, ReduceOp op, CUstream_st* stream,
                                          CUevent_st* done) {
  const int64_t n = TotalNumel(tensors);
  if (copy_engine::SplitPoint(n, planner_.options()) * 4 > half_bytes_) {
    return absl::InvalidArgumentError("copy-engine all_reduce: Enqueue without a successful Prepare (nothing enqueued)");
  }
  float* peer_buffer = RegisteredPeer(tensors);
  ranges_.clear();
  for (const Tensor& t : tensors) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data_ptr());
    ranges_.emplace_back(lo, lo + t.numel() * sizeof(float));
  }
  const std::vector<Op>& plan = planner_.Next(n, ranges_, peer_buffer != nullptr);
  ++calls_;
  if (peer_buffer != nullptr) ++direct_calls_;
  const cudaStream_t streams[copy_engine::kNumPlanStreams] = {stream, helper_, drain_};
  const float scale = op == ReduceOp::kAvg ? 0.5f : 1.0f;  // two ranks
  for (const Op& step : plan) {
    if (cudaError_t err = Run(step, tensors, scale, streams, done, peer_buffer); err != cudaSuccess) {
      return absl::InternalError(CudaError("enqueueing the copy-engine all_reduce", err));
    }
  }
  // The call's end, for the group's next call of another kind (Issued): `done` is the group's event, which
  // it recycles once this call's Work is gone, so the module records its own right behind it.
  if (cudaError_t err = cudaEventRecord(last_end_, drain_); err != cudaSuccess) {
    return absl::InternalError(CudaError("recording the copy-engine all_reduce's end", err));
  }
  group_stream_ = stream;
  return absl::OkStatus();
}

void CopyEngineAllReduce::Issued(const CollectiveInfo& info) {
  if (group_stream_ == nullptr || info.via == kPathName) return;
  if (cuda::Stream::Current(device_).IsCapturing()) return;
  cudaStreamWaitEvent(group_stream_, last_end_, 0);
  group_stream_ = nullptr;  // ordered, until this module's next call
}

absl::Status CopyEngineAllReduce::WaitForCallsInFlight(const char* before) {
  // Every call ends on the drain stream, after its own copies and additions and after the peer's writes
  // into our memory (the DONE waits): the drain idle means all of that has happened.
  if (cudaError_t err = cudaStreamSynchronize(drain_); err != cudaSuccess) {
    return absl::InternalError(CudaError(absl::StrCat("cudaStreamSynchronize before ", before).c_str(), err));
  }
  return absl::OkStatus();
}

void CopyEngineAllReduce::Aborting() {
  // Far ahead of any sequence number this rank will reach, in the wrap-around order the waits use. The
  // group calls this under the same lock as Enqueue, so the planner's sequence number is stable.
  uint32_t host[copy_engine::kNumFlags];
  for (uint32_t& v : host) v = planner_.ReleaseValue();
  cudaMemcpyAsync(flags_, host, sizeof(host), cudaMemcpyHostToDevice, release_stream_);
  cudaStreamSynchronize(release_stream_);
}

}  // namespace tinyddp::dist
