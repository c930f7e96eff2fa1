// CopyEngineAllReduce: the all_reduce of two GPUs of one machine done by their copy engines, so that
// DDP's gradient buckets are averaged without taking streaming multiprocessors away from backward. An
// ExternalAllReduce (dist/process_group/external_all_reduce.h): the process group runs its calls as its
// own collectives (ProcessGroup::AllReduceExternal), and CopyEngineHook (copy_engine_hook.h), the comm
// hook a program opts into, is the one place that decides which buckets take it. It needs no NCCL
// communicator: it sets itself up from a store (ProcessGroup::SubStore) and CUDA IPC.
//
// Why. An NCCL all_reduce is a kernel: for as long as it runs, a few dozen SMs spin moving data, and the
// backward GEMMs that overlap it get the rest. On 2x H200 that stretched the backward of the medium MLP
// from ~1.55 to ~2.3 ms. Each GPU also has copy engines, DMA units that move memory over NVLink without
// any SM. With two ranks an all_reduce is a reduce-scatter plus an all-gather, and both halves are plain
// copies; only the addition needs an SM, for one pass over half the bucket. A standalone all_reduce (no
// compute beside it) is faster as NCCL's kernel, so only overlapped buckets come here.
//
// The protocol, per all_reduce, identical on both ranks (r = this rank, p = the peer). The tensors are
// seen as one concatenated vector split in two halves; rank 0 owns the first, rank 1 the second. Each rank
// has a scratch area in two parts, IN and OUT, mapped into the peer's address space with CUDA IPC. Each
// half moves in up to four chunks, so that the addition of one chunk overlaps the copies of the next.
// Three streams: "copies" (the group's stream, ordered after the gradients by the group), a high-priority
// "helper" for the additions, and a "drain" for what lands from the peer:
//   1. copies: my values of the peer's half -> the peer's IN, per chunk  (copy engine, NVLink write)
//              then signal the peer: DATA[chunk] = seq                   (cuStreamWriteValue32 over NVLink)
//   2. helper: wait until my DATA[chunk] >= seq: IN holds the peer's values of that chunk of my half
//   3. helper: that chunk of my half = (mine + IN) * scale                (a small kernel)
//   4. copies: once reduced, the chunk -> the peer's OUT; signal DONE[chunk] = seq
//   5. drain:  wait until my DONE[chunk] >= seq: OUT holds that reduced chunk of the peer's half
//   6. drain:  OUT -> the peer's half of my tensors                        (copy engine, local)
//      For a registered buffer (Register: DDP's flat buckets) step 4 writes straight into the peer's
//      buffer, and step 6 has nothing to do.
//   7. drain:  signal FREE = seq (my OUT may be written again); wait for my last addition; the call's
//              `done` event.
// The copies stream does not wait for 5-7: the next call's copies start while this one drains, which on
// 2x H200 inside backward saves ~100 us per 64 MiB bucket (the local copies of the last chunks).
// Why it is safe: the peer's IN is written for call k+1 only after the peer's last DONE of call k, which
// it gave after reducing (reading IN) all of call k; the peer's OUT only after its FREE of call k, given
// after its drain emptied OUT. My tensors are only written by my helper and drain; a call whose tensors
// overlap the previous call's first waits for that call's end, and every call waits for the end of the
// one before the previous (at most two in flight); the group orders any other collective on its stream
// after the last call's end. These rules, the chunking and the sequence numbers are a pure schedule
// (copy_engine_plan.h) that Enqueue executes and a CPU test checks under random interleavings. Waits are
// stream memory operations executed by the GPU's front end: no SM spins and the host never blocks. The
// tensors need no registration and may be separate (DDP's coalesced layout) or one flat bucket.
//
// Setup is collective, through the store: both GPUs must be on one host (same boot id) and reach each
// other peer-to-peer, else Create returns null with the reason. The scratch grows (a collective
// exchange, host-blocking, the first time a bigger call comes: Prepare) to the largest call seen; it grows
// identically on both ranks since both make the same calls.
// Beside the group, as an observer of it (pg.AddObserver(module): CopyEngineHook does), the module keeps
// what is its own out of the group's collective path: any other call the group issues starts after this
// module's last call ended (Issued; Enqueue let the group's stream go early), and on an abort its waits
// are let go (Aborting).
// Timeouts: a peer that dies leaves a wait on one of the three streams pending; the group's watchdog
// fails the Work after its timeout and, as it aborts, tells its observers: Aborting() satisfies every
// wait locally so the streams drain (with garbage).
// Not thread-safe: one thread makes the calls (the group's launching thread, which also brings Issued);
// Aborting comes from the group's watchdog, under the group's launch lock, as Enqueue.
#ifndef TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_ALL_REDUCE_H_
#define TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_ALL_REDUCE_H_

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/accel/copy_engine/copy_engine_plan.h"
#include "dist/process_group/collective_observer.h"
#include "dist/process_group/external_all_reduce.h"
#include "dist/store/store.h"
#include "tensor/tensor.h"

namespace tinyddp::dist {

struct CopyEngineOptions {
  /// Takes() is false below this many bytes: small calls are faster as NCCL's kernel (its latency is
  /// lower). The two ranks agree on the larger of their values.
  int64_t min_bytes = int64_t{4} << 20;
  /// Non-empty: this rank declines, with this reason (e.g. "TINYDDP_COPY_ENGINE_ALLREDUCE=0"); the peer
  /// then declines too, so both keep using NCCL.
  std::string veto;
  /// Tests only: lets both ranks share ONE GPU (two processes, CUDA IPC within the device, no peer access
  /// needed), so that the protocol runs end to end on a one-GPU machine, without NCCL (which refuses two
  /// ranks on one GPU). Slower than NCCL there; never set it for training.
  bool allow_one_gpu = false;
};

class CopyEngineAllReduce final : public ExternalAllReduce, public CollectiveObserver {
 public:
  /// The path's name in descriptions, fingerprints, DDP's bucket table and the trace.
  static constexpr char kPathName[] = "copy engines";

  /// Collective over the two ranks of `store` (a key space private to this module, e.g.
  /// ProcessGroup::SubStore). Returns null, and why in `*why_not`, when the pair cannot use it
  /// (another host, no peer access, the same GPU, no stream memory operations, a veto); an error only
  /// when the store fails or times out. `device`: this rank's GPU. `timeout` bounds every exchange.
  /// Before its first call through a group (AllReduceExternal), add it to that group's observers
  /// (pg.AddObserver(module)): without it the group's next call would not wait for the end of this
  /// module's calls, nor would an abort let their waits go.
  static absl::StatusOr<std::unique_ptr<CopyEngineAllReduce>> Create(std::shared_ptr<Store> store, int rank,
                                                                     int device, std::chrono::milliseconds timeout,
                                                                     const CopyEngineOptions& options,
                                                                     std::string* why_not);
  ~CopyEngineAllReduce() override;
  CopyEngineAllReduce(const CopyEngineAllReduce&) = delete;
  CopyEngineAllReduce& operator=(const CopyEngineAllReduce&) = delete;

  /// Whether a call of `numel` elements of `dtype` with `op` comes here: float32, SUM or AVG, at least
  /// min_bytes(). Depends only on what every rank passes, so both ranks answer the same.
  bool Takes(DType dtype, int64_t numel, ReduceOp op) const;
  /// The bytes below which Takes() is false (the larger of the two ranks' CopyEngineOptions::min_bytes).
  int64_t min_bytes() const { return min_bytes_; }

  // --- ExternalAllReduce -------------------------------------------------------------------------------
  const char* path_name() const override { return kPathName; }
  /// Makes the scratch big enough for `tensors` (collective the first time a call is bigger than any
  /// before; host-blocking then, free afterwards). InvalidArgument unless float32 SUM/AVG (any size);
  /// FailedPrecondition while the current stream is capturing a CUDA graph.
  absl::Status Prepare(const std::vector<Tensor>& tensors, ReduceOp op) override;
  /// Enqueues the plan of the call (copy_engine_plan.h), scaled by 1 for SUM and 0.5 for AVG, starting on
  /// `stream` and recording `done` on the drain stream. `stream` itself is not ordered after the end: it
  /// may start the next call at once (Issued orders the group's other calls). Precondition: Prepare()
  /// succeeded for these tensors.
  absl::Status Enqueue(const std::vector<Tensor>& tensors, ReduceOp op, CUstream_st* stream,
                       CUevent_st* done) override;

  // --- CollectiveObserver, of the group that carries the calls -----------------------------------------
  /// A call of the group other than this module's: the group's stream waits for this module's last call
  /// to end first (not in a capture: a replay runs on the caller's stream, already ordered after it).
  void Issued(const CollectiveInfo& info) override;
  /// Satisfies every wait this rank has enqueued, so that its streams drain (results are garbage from
  /// then on), before the group frees its communicator.
  void Aborting() override;

  /// Collective, host-blocking: pairs each of `buffers` with the peer's buffer at the same position
  /// and maps the peer's here, so that a later call on exactly one of them sends the reduced half
  /// straight into the peer's buffer: no OUT, no local copy on the peer's side (DDP's flat buckets).
  /// Replaces what was registered before, after the calls in flight have finished; the registered
  /// tensors are kept alive until then, so their addresses cannot be reused meanwhile. A buffer that
  /// either side cannot map stays unregistered on both. Errors: the ranks' lists differ in length or
  /// sizes (the message names the first difference), or the store fails.
  absl::Status Register(const std::vector<Tensor>& buffers);

  /// Calls enqueued so far, and how many of them went straight into registered buffers.
  int64_t calls() const { return calls_; }
  int64_t direct_calls() const { return direct_calls_; }

 private:
  CopyEngineAllReduce(std::shared_ptr<Store> store, int rank, int device, std::chrono::milliseconds timeout);
  // Publishes `mine` under `key`/rank and returns the peer's value of `key`.
  absl::StatusOr<Bytes> Exchange(const std::string& key, const Bytes& mine);
  // Blocks until every call enqueued so far has finished on both sides (Prepare, Register).
  absl::Status WaitForCallsInFlight(const char* before);
  // Exports the allocation starting at `ptr` (cudaMalloc'd) for the peer.
  static absl::StatusOr<Bytes> Export(void* ptr);
  // Maps the peer's exported allocation here.
  static absl::StatusOr<char*> Import(const Bytes& exported);
  // The peer's buffer paired with `tensors` when they are one registered buffer, else null.
  float* RegisteredPeer(const std::vector<Tensor>& tensors) const;
  // Where `memory` + `at` (elements) is for the current call.
  float* Address(copy_engine::Memory memory, int64_t at, float* peer_buffer) const;
  // Enqueues one operation of a plan.
  cudaError_t Run(const copy_engine::Op& op, const std::vector<Tensor>& tensors, float scale,
                  const cudaStream_t streams[], cudaEvent_t done, float* peer_buffer);

  std::shared_ptr<Store> store_;
  const int rank_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  int64_t min_bytes_ = 0;
  int64_t exchanges_ = 0;

  copy_engine::Planner planner_;
  std::vector<copy_engine::ByteRange> ranges_;  // the current call's tensors, reused (no allocation per call)
  uint32_t* flags_ = nullptr;       // mine: copy_engine::kNumFlags words
  char* peer_flags_ = nullptr;      // the peer's, mapped here
  char* scratch_ = nullptr;         // mine: IN = [0, half_bytes_), OUT = [half_bytes_, 2 half_bytes_)
  char* peer_scratch_ = nullptr;    // the peer's, mapped here
  int64_t half_bytes_ = 0;
  cudaStream_t release_stream_ = nullptr;
  cudaStream_t helper_ = nullptr;   // additions, beside the group's stream (copies)
  cudaStream_t drain_ = nullptr;    // what the peer sends back into my tensors, and each call's end
  cudaEvent_t events_[copy_engine::kNumPlanEvents] = {};  // the plan's own events (kDoneEvent is the caller's)
  cudaEvent_t last_end_ = nullptr;      // the end of the last call, recorded after its `done`
  cudaStream_t group_stream_ = nullptr;  // the group's stream while not yet ordered after last_end_
  struct Registered {
    Tensor mine;                      // kept alive while registered
    float* peer = nullptr;            // the peer's paired buffer, mapped here
  };
  std::vector<Registered> registered_;
  std::vector<std::pair<Bytes, char*>> peer_allocations_;  // IPC handle -> mapped base, opened once each
  int64_t calls_ = 0;
  int64_t direct_calls_ = 0;
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ACCEL_COPY_ENGINE_COPY_ENGINE_ALL_REDUCE_H_
