// CopyEngineAllReduce (copy_engine_all_reduce.h): setup through the store, CUDA IPC, and the six steps.
#include "dist/process_group/nccl/copy_engine/copy_engine_all_reduce.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/nccl/copy_engine/copy_engine_reduce.h"

namespace tinyddp::dist::internal {
namespace {

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

// Flags, in uint32 units: DATA of chunk j at kData + j, DONE of chunk j at kDone + j.
constexpr int kData = 0;
constexpr int kDone = 64;
constexpr int kFree = 128;  // the peer's OUT is free again up to this call (written by its drain)
constexpr size_t kFlagWords = 136;
constexpr size_t kFlagBytes = kFlagWords * 4;
// A half is moved in chunks so that the addition of one chunk overlaps the copies of the next: at most
// kMaxChunks of them, at least 1 Mi floats (4 MiB) each. Measured on 2x H200 inside DDP's backward
// (medium MLP, ms/step): 1 chunk 2.56, 2 chunks 2.51, 4 chunks 2.48, 16 chunks 2.62; every chunk costs a
// few microseconds of signalling, which small chunks do not earn back.
constexpr int64_t kMinChunk = int64_t{1} << 20;
// Both halves start on a 256-byte boundary, so copies and the vectorised addition run aligned.
constexpr int64_t kSplitAlign = 64;  // floats

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

// The chunks of a half of `len` elements: `size` elements each (the last one shorter), `count` of them.
// A function of the length only, so the pusher and the owner of a half cut it the same way.
struct Chunks {
  int64_t size = 0;
  int64_t count = 0;
};
Chunks ChunksOf(int64_t len, int max_chunks) {
  Chunks c;
  // As many whole kMinChunk as fit, at most max_chunks, cut evenly: a 16 MiB weight with its bias is two
  // chunks, not two and a sliver (each chunk costs a round of signalling).
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>(max_chunks, len / kMinChunk));
  c.size = (len + count - 1) / count;
  c.size = (c.size + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  c.count = len == 0 ? 0 : (len + c.size - 1) / c.size;
  return c;
}

// Rank 0 owns [0, split), rank 1 [split, n); split is 64-float aligned so both halves start aligned.
int64_t Split(int64_t n) { return std::min(n, ((n + 1) / 2 + kSplitAlign - 1) / kSplitAlign * kSplitAlign); }

}  // namespace

absl::StatusOr<std::unique_ptr<CopyEngineAllReduce>> CopyEngineAllReduce::Create(
    std::shared_ptr<Store> store, int rank, int device, std::chrono::milliseconds timeout, std::string* why_not) {
  std::unique_ptr<CopyEngineAllReduce> ce(new CopyEngineAllReduce(std::move(store), rank, device, timeout));
  if (const char* v = std::getenv("TINYDDP_COPY_ENGINE_MIN_BYTES")) {
    int64_t bytes = 0;
    if (absl::SimpleAtoi(v, &bytes) && bytes >= 0) ce->min_bytes_ = bytes;
  }

  // Each rank decides what it can do, then both take the stricter answer, so the decision is symmetric.
  std::string mine_why;
  const char* env = std::getenv("TINYDDP_COPY_ENGINE_ALLREDUCE");
  if (env != nullptr && std::string(env) == "0") mine_why = "TINYDDP_COPY_ENGINE_ALLREDUCE=0";
  if (mine_why.empty() && !Driver().ok()) mine_why = "the CUDA driver offers no stream memory operations";
  const std::string me = Identity(device);
  absl::StatusOr<Bytes> peer = ce->Exchange("identity", ToBytes(me));
  RETURN_IF_ERROR(peer);
  const std::string them = ToString(*peer);
  const std::string my_host = me.substr(0, me.rfind('|')), their_host = them.substr(0, them.rfind('|'));
  if (mine_why.empty() && my_host != their_host) mine_why = "the two ranks run on different machines";
  if (mine_why.empty()) {
    int peer_device = -1, can = 0;
    if (cudaDeviceGetByPCIBusId(&peer_device, them.substr(them.rfind('|') + 1).c_str()) != cudaSuccess) {
      cudaGetLastError();
      mine_why = "the peer's GPU is not visible in this process (CUDA_VISIBLE_DEVICES)";
    } else if (cudaDeviceCanAccessPeer(&can, device, peer_device) != cudaSuccess || !can) {
      cudaGetLastError();
      mine_why = "the two GPUs cannot access each other peer-to-peer";
    }
  }
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
  absl::StatusOr<Bytes> peer_flags = ce->Exchange("flags", exported);
  RETURN_IF_ERROR(peer_flags);
  if (mine_why.empty() && peer_flags->empty()) mine_why = "the peer cannot use it";
  if (mine_why.empty()) {
    absl::StatusOr<char*> p = Import(*peer_flags);
    if (p.ok()) ce->peer_flags_ = *p; else mine_why = std::string(p.status().message());
  }
  absl::StatusOr<Bytes> verdict = ce->Exchange("verdict", ToBytes(mine_why));
  RETURN_IF_ERROR(verdict);
  if (!mine_why.empty() || !verdict->empty()) {
    *why_not = !mine_why.empty() ? mine_why : absl::StrCat("rank ", 1 - rank, ": ", ToString(*verdict));
    return std::unique_ptr<CopyEngineAllReduce>();
  }
  // Which calls come here must be the same on both ranks, even if TINYDDP_COPY_ENGINE_MIN_BYTES differs.
  absl::StatusOr<Bytes> their_min = ce->Exchange("min_bytes", ToBytes(std::to_string(ce->min_bytes_)));
  RETURN_IF_ERROR(their_min);
  int64_t theirs = 0;
  if (absl::SimpleAtoi(ToString(*their_min), &theirs)) ce->min_bytes_ = std::max(ce->min_bytes_, theirs);
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStreamCreateWithPriority(&ce->release_stream_, cudaStreamNonBlocking, greatest);
  cudaStreamCreateWithPriority(&ce->helper_, cudaStreamNonBlocking, greatest);
  cudaStreamCreateWithPriority(&ce->drain_, cudaStreamNonBlocking, greatest);
  cudaEventCreateWithFlags(&ce->sent_, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&ce->start_, cudaEventDisableTiming);
  for (cudaEvent_t& e : ce->ends_) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  for (cudaEvent_t& e : ce->reduced_) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  return ce;
}

CopyEngineAllReduce::CopyEngineAllReduce(std::shared_ptr<Store> store, int rank, int device,
                                         std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), device_(device), timeout_(timeout) {}

CopyEngineAllReduce::~CopyEngineAllReduce() {
  // The group destroys this after its collectives finished; the peer's mappings of our memory die with it.
  for (const auto& [handle, base] : peer_allocations_) cudaIpcCloseMemHandle(base);
  if (peer_flags_ != nullptr) cudaIpcCloseMemHandle(peer_flags_);
  if (peer_scratch_ != nullptr) cudaIpcCloseMemHandle(peer_scratch_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (flags_ != nullptr) cudaFree(flags_);
  if (release_stream_ != nullptr) cudaStreamDestroy(release_stream_);
  if (helper_ != nullptr) cudaStreamDestroy(helper_);
  if (drain_ != nullptr) cudaStreamDestroy(drain_);
  if (sent_ != nullptr) cudaEventDestroy(sent_);

  if (start_ != nullptr) cudaEventDestroy(start_);
  for (cudaEvent_t e : ends_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : reduced_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

absl::StatusOr<Bytes> CopyEngineAllReduce::Exchange(const std::string& key, const Bytes& mine) {
  const std::string base = absl::StrCat("ce/", exchanges_++, "/", key, "/");
  RETURN_IF_ERROR(store_->Set(base + std::to_string(rank_), mine));
  const std::string theirs = base + std::to_string(1 - rank_);
  if (absl::Status s = store_->Wait({theirs}, timeout_); !s.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("copy-engine all_reduce setup: rank ", rank_, " waited ",
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

bool CopyEngineAllReduce::Takes(const std::vector<Tensor>& tensors, bool sum_or_avg) const {
  if (!sum_or_avg || tensors.empty()) return false;
  for (const Tensor& t : tensors) {
    if (t.dtype() != DType::kFloat32) return false;
  }
  return TotalNumel(tensors) * 4 >= min_bytes_;
}

absl::Status CopyEngineAllReduce::Reserve(const std::vector<Tensor>& tensors) {
  const int64_t half = Split(TotalNumel(tensors)) * 4;
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
  absl::StatusOr<Bytes> peer = Exchange("scratch", exported);
  RETURN_IF_ERROR(peer);
  if (!error.empty()) return absl::ResourceExhaustedError(error);
  if (peer->empty()) return absl::ResourceExhaustedError("the peer could not allocate its copy-engine scratch");
  absl::StatusOr<char*> p = Import(*peer);
  RETURN_IF_ERROR(p);
  peer_scratch_ = *p;
  half_bytes_ = want;
  return absl::OkStatus();
}

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

cudaError_t CopyEngineAllReduce::Enqueue(const std::vector<Tensor>& tensors, float scale, cudaStream_t stream,
                                         cudaEvent_t done) {
  const int64_t n = TotalNumel(tensors);
  const int64_t split = Split(n);
  const int64_t my_lo = rank_ == 0 ? 0 : split, my_hi = rank_ == 0 ? split : n;
  const int64_t peer_lo = rank_ == 0 ? split : 0, peer_hi = rank_ == 0 ? n : split;
  if (split * 4 > half_bytes_) return cudaErrorInvalidValue;  // Reserve was not called
  const Chunks mine = ChunksOf(my_hi - my_lo, kMaxChunks), theirs = ChunksOf(peer_hi - peer_lo, kMaxChunks);
  float* in = reinterpret_cast<float*>(scratch_);
  float* out = reinterpret_cast<float*>(scratch_ + half_bytes_);
  float* peer_in = reinterpret_cast<float*>(peer_scratch_);
  float* peer_out = reinterpret_cast<float*>(peer_scratch_ + half_bytes_);
  const uint32_t seq = ++seq_;
  const DriverApi& d = Driver();
  auto signal = [&](cudaStream_t on, int index) {
    return d.write_value(reinterpret_cast<CUstream>(on), reinterpret_cast<CUdeviceptr>(peer_flags_) + index * 4, seq,
                         CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS
               ? cudaSuccess
               : cudaErrorUnknown;
  };
  auto wait = [&](cudaStream_t on, int index, uint32_t value) {
    return d.wait_value(reinterpret_cast<CUstream>(on), reinterpret_cast<CUdeviceptr>(flags_ + index), value,
                        CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS
               ? cudaSuccess
               : cudaErrorUnknown;
  };
  // [lo, hi) of chunk j of a half starting at `base`.
  auto chunk = [](int64_t base, int64_t end, const Chunks& c, int64_t j) {
    return std::pair<int64_t, int64_t>(base + j * c.size, std::min(end, base + (j + 1) * c.size));
  };
  cudaStream_t copies = stream, helper = helper_, drain = drain_;
  cudaError_t err = cudaSuccess;
  // A registered buffer: the reduced half goes straight into the peer's paired buffer (the peer finds
  // the same entry at the same position, so both take this branch).
  float* peer_buffer = nullptr;
  if (tensors.size() == 1) {
    for (const Registered& r : registered_) {
      if (r.mine.data_ptr() == tensors[0].data_ptr() && r.mine.numel() == n) peer_buffer = r.peer;
    }
  }
  if (peer_buffer != nullptr) ++direct_calls_;
  // The previous call may still be draining into its tensors; a call on any of the same memory waits.
  bool overlaps = false;
  for (const Tensor& t : tensors) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data_ptr()), hi = lo + t.numel() * 4;
    for (const auto& [plo, phi] : last_ranges_) overlaps = overlaps || (lo < phi && plo < hi);
  }
  last_ranges_.clear();  // keeps its capacity: no allocation per call
  for (const Tensor& t : tensors) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data_ptr());
    last_ranges_.emplace_back(lo, lo + t.numel() * 4);
  }
  // At most two calls in flight: this one and the previous one, maybe still draining. So a call waits
  // for the end of the one before the previous (usually long over), and for the previous one's end only
  // when its tensors overlap.
  cudaEvent_t& my_end = ends_[seq % 2];
  const cudaEvent_t previous_end = ends_[(seq + 1) % 2];
  if (seq > 2) err = cudaStreamWaitEvent(copies, my_end, 0);
  if (err == cudaSuccess && overlaps && seq > 1) err = cudaStreamWaitEvent(copies, previous_end, 0);
  // The helper and drain streams start after everything the group's stream waits for (the gradients).
  if (err == cudaSuccess) err = cudaEventRecord(start_, copies);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(helper, start_, 0);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(drain, start_, 0);

  // 1. Copy engines: my values of the peer's half into its IN, chunk by chunk, each announced. The
  //    peer's IN is free once it has reduced all of the previous call: its last DONE of that call.
  if (err == cudaSuccess && seq > 1 && last_peer_chunks_ > 0) {
    err = wait(copies, kDone + last_peer_chunks_ - 1, seq - 1);
  }
  for (int64_t j = 0; err == cudaSuccess && j < theirs.count; ++j) {
    const std::pair<int64_t, int64_t> range = chunk(peer_lo, peer_hi, theirs, j);
    const int64_t lo = range.first, hi = range.second;
    err = ForRange(tensors, lo, hi, [&](float* p, int64_t at, int64_t count) {
      return cudaMemcpyAsync(peer_in + (lo - peer_lo) + at, p, count * 4, cudaMemcpyDeviceToDevice, copies);
    });
    if (err == cudaSuccess) err = signal(copies, kData + static_cast<int>(j));
  }
  last_peer_chunks_ = static_cast<int>(theirs.count);
  // 2-3. Helper stream: as each chunk of the peer's values of my half arrives, reduce it.
  for (int64_t j = 0; err == cudaSuccess && j < mine.count; ++j) {
    const std::pair<int64_t, int64_t> range = chunk(my_lo, my_hi, mine, j);
    const int64_t lo = range.first, hi = range.second;
    err = wait(helper, kData + static_cast<int>(j), seq);
    if (err == cudaSuccess) {
      err = ForRange(tensors, lo, hi, [&](float* p, int64_t at, int64_t count) {
        return LaunchAddScale(p, in + (lo - my_lo) + at, count, scale, helper);
      });
    }
    if (err == cudaSuccess) err = cudaEventRecord(reduced_[j], helper);
  }
  // 4. Copy engines: each reduced chunk into the peer's OUT as soon as it is reduced, announced. The
  //    peer's OUT is free once its drain has emptied it for the previous call (FREE). A registered
  //    buffer's chunk goes to the same place in the peer's buffer instead, whose values there the peer
  //    sent us (step 1, before its DATA) and no longer needs.
  if (err == cudaSuccess && seq > 1 && peer_buffer == nullptr) err = wait(copies, kFree, seq - 1);
  for (int64_t j = 0; err == cudaSuccess && j < mine.count; ++j) {
    const std::pair<int64_t, int64_t> range = chunk(my_lo, my_hi, mine, j);
    const int64_t lo = range.first, hi = range.second;
    err = cudaStreamWaitEvent(copies, reduced_[j], 0);
    if (err == cudaSuccess) {
      err = ForRange(tensors, lo, hi, [&](float* p, int64_t at, int64_t count) {
        float* to = peer_buffer != nullptr ? peer_buffer + lo + at : peer_out + (lo - my_lo) + at;
        return cudaMemcpyAsync(to, p, count * 4, cudaMemcpyDeviceToDevice, copies);
      });
    }
    if (err == cudaSuccess) err = signal(copies, kDone + static_cast<int>(j));
  }
  // My tensors are read by my copies until here.
  if (err == cudaSuccess) err = cudaEventRecord(sent_, copies);
  // 5-6. Drain stream: as each reduced chunk of the peer's half arrives in my OUT, into my tensors; then
  //      tell the peer my OUT is free. The call is complete once my copies, which came after my
  //      additions, are too.
  for (int64_t j = 0; err == cudaSuccess && j < theirs.count; ++j) {
    const std::pair<int64_t, int64_t> range = chunk(peer_lo, peer_hi, theirs, j);
    const int64_t lo = range.first, hi = range.second;
    err = wait(drain, kDone + static_cast<int>(j), seq);
    if (err == cudaSuccess && peer_buffer == nullptr) {
      err = ForRange(tensors, lo, hi, [&](float* p, int64_t at, int64_t count) {
        return cudaMemcpyAsync(p, out + (lo - peer_lo) + at, count * 4, cudaMemcpyDeviceToDevice, drain);
      });
    }
  }
  if (err == cudaSuccess) err = signal(drain, kFree);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(drain, sent_, 0);
  if (err == cudaSuccess) err = cudaEventRecord(my_end, drain);
  if (err == cudaSuccess) err = cudaEventRecord(done, drain);
  return err;
}

absl::Status CopyEngineAllReduce::WaitForCallsInFlight(const char* before) {
  // Every call ends on the drain stream, after its own copies and additions and after the peer's writes
  // into our memory (the DONE waits): the drain idle means all of that has happened.
  if (cudaError_t err = cudaStreamSynchronize(drain_); err != cudaSuccess) {
    return absl::InternalError(CudaError(absl::StrCat("cudaStreamSynchronize before ", before).c_str(), err));
  }
  return absl::OkStatus();
}

cudaError_t CopyEngineAllReduce::OrderAfterLastCall(cudaStream_t stream) {
  // The drain stream runs the calls' ends in order: the last one's end is after all the others'.
  return seq_ == 0 ? cudaSuccess : cudaStreamWaitEvent(stream, ends_[seq_ % 2], 0);
}

void CopyEngineAllReduce::Release() {
  // Far ahead of any sequence number this rank will reach, in the wrap-around order GEQ uses. The group
  // calls this under the same lock as Enqueue, so seq_ is stable.
  const uint32_t far = seq_ + (1u << 30);
  uint32_t host[kFlagWords];
  for (uint32_t& v : host) v = far;
  cudaMemcpyAsync(flags_, host, sizeof(host), cudaMemcpyHostToDevice, release_stream_);
  cudaStreamSynchronize(release_stream_);
}

}  // namespace tinyddp::dist::internal
