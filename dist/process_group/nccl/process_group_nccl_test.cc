// ProcessGroupNCCL on every visible GPU, one process per GPU (re-executing this binary): the same
// collective sweep as Gloo, stream ordering in both directions, no device allocations per call, the
// watchdog's abort on timeout, argument errors, and on one GPU the safety nets around an external
// all_reduce (numbering, ordering, watchdog). Skips without a GPU; the two-rank tests skip with one.
#include "dist/process_group/nccl/process_group_nccl.h"

#include <cuda_runtime.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dist/process_group/exit_on_failure.h"
#include "dist/process_group/collective_observer.h"
#include "dist/store/hash_store.h"
#include "dist/testing/collective_checks.h"
#include "dist/testing/multi_process.h"
#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace tinyddp::dist {
namespace {

using testing::RankContext;
using testing::RunOnRanks;

bool Contains(const std::string& text, const std::string& part) { return absl::StrContains(text, part); }

// One rank per visible GPU; 0 means "skip".
int Gpus() { return cuda::DeviceCount(); }

std::unique_ptr<ProcessGroupNCCL> Connect(const RankContext& ctx,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  NcclOptions options;
  options.timeout = timeout;
  options.device = ctx.rank;
  auto pg = ProcessGroupNCCL::Create(ctx.store, ctx.rank, ctx.world_size, options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

testing::SweepOptions OnMyGpu(const ProcessGroupNCCL& pg) {
  testing::SweepOptions o;
  o.device = Device::CUDA(pg.device_index());
  return o;
}

#define SKIP_WITHOUT_GPU() \
  if (Gpus() == 0) GTEST_SKIP() << "needs a CUDA GPU; none is visible"

TEST(ProcessGroupNccl, EveryCollectiveMatchesTheLocalReferenceForEveryOpDTypeAndSize) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(Gpus(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    const testing::SweepOptions o = OnMyGpu(*pg);
    testing::CheckAllReduce(*pg, o);
    testing::CheckAllReduceCoalesced(*pg, o);
    testing::CheckBroadcast(*pg, o);
    testing::CheckAllGather(*pg, o);
    testing::CheckReduceScatter(*pg, o);
    testing::CheckReduce(*pg, o);
    ASSERT_TRUE(pg->Barrier()->Wait().ok());
  });
}

TEST(ProcessGroupNccl, CollectiveSeesKernelsQueuedBeforeItAndLaterKernelsSeeItsResult) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(Gpus(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    // A compute stream of our own, as a training loop would have: nothing implicit orders it with NCCL.
    cuda::Stream compute = cuda::Stream::Create(pg->device_index());
    cuda::Stream::SetCurrent(compute);
    const int64_t n = 32 << 20;  // large enough that the kernels below take a while
    Tensor t = Tensor::Empty({n}, DType::kFloat32, Device::CUDA(pg->device_index()));
    ops::Fill(t, ctx.rank + 1.0);
    for (int i = 0; i < 20; ++i) ops::ScaleInPlace(t, 1.0);
    ops::ScaleInPlace(t, 2.0);  // the value NCCL must see: 2 * (rank + 1)
    auto work = pg->AllReduce(t);
    ASSERT_TRUE(work->SynchronizeStream().ok());  // the GPU waits; the host does not
    ops::ScaleInPlace(t, 0.5);  // must run after the all-reduce wrote t
    const int w = ctx.world_size;
    const double want = 0.5 * 2.0 * w * (w + 1) / 2;
    std::vector<float> got = t.ToVector<float>();
    int64_t bad = 0;
    for (float v : got) bad += v != static_cast<float>(want);
    EXPECT_EQ(bad, 0) << "want " << want << " everywhere; first element " << got[0];
    ASSERT_TRUE(work->Wait().ok());
  });
}

TEST(ProcessGroupNccl, SteadyStateCollectivesAllocateNoDeviceMemory) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(Gpus(), [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    Tensor t = Tensor::Full({1 << 20}, 1.0, DType::kFloat32, Device::CUDA(pg->device_index()));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pg->AllReduce(t)->Wait().ok());  // warm-up
    const cuda::AllocatorStats before = cuda::GetAllocatorStats(pg->device_index());
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(pg->AllReduce(t, ReduceOp::kAvg)->SynchronizeStream().ok());
    ASSERT_TRUE(pg->Barrier()->Wait().ok());
    const cuda::AllocatorStats after = cuda::GetAllocatorStats(pg->device_index());
    EXPECT_EQ(after.num_cuda_malloc, before.num_cuda_malloc);
    // Five warm-up SUMs multiplied the ones by world_size^5; the AVGs since then keep that value.
    float want = 1.0f;
    for (int i = 0; i < 5; ++i) want *= ctx.world_size;
    EXPECT_EQ(t.ToVector<float>()[12345], want);
  });
}

TEST(ProcessGroupNccl, CollectiveAnotherRankNeverJoinsIsAbortedByTheWatchdogWithDeadlineExceeded) {
  SKIP_WITHOUT_GPU();
  if (Gpus() < 2) GTEST_SKIP() << "needs two GPUs, found " << Gpus();
  RunOnRanks(Gpus(), [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::seconds(3));
    ASSERT_NE(pg, nullptr);
    if (ctx.rank != 0) {
      // Connected, but never joins the all-reduce: rank 0's kernel would spin forever without a watchdog.
      ASSERT_TRUE(ctx.store->Wait({"rank0_done"}, std::chrono::seconds(120)).ok());
      return;
    }
    Tensor t = Tensor::Full({1000}, 1.0, DType::kFloat32, Device::CUDA(pg->device_index()));
    auto work = pg->AllReduce(t);
    absl::Status s = work->Wait(std::chrono::seconds(60));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "did not finish within 3000 ms");
    EXPECT_PRED2(Contains, std::string(s.message()), "AllReduce(float32 [1000] cuda:0, SUM) #0");
    EXPECT_TRUE(work->IsCompleted());
    absl::Status after = pg->Barrier()->Wait(std::chrono::seconds(10));
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    ASSERT_TRUE(ctx.store->Set("rank0_done", "1").ok());
  });
}

// On one rank a reduce-scatter is a copy, whatever the op. NCCL's own one-rank AVG kernel (before 2.29.7)
// leaves the tail of an out-of-place call unwritten when n is not a multiple of its block count: 3 elements
// of 2^20 + 3 in every float dtype, 31 of 2^20 + 31, 3 of 100003 in float32, 7 of 65543 in float64. The
// output starts as -77 everywhere, so an element never written shows.
TEST(ProcessGroupNccl, OneRankReduceScatterWritesEveryElementForEveryOpAndDType) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(1, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    const Device gpu = Device::CUDA(pg->device_index());
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProduct}) {
        for (int64_t n : {(int64_t{1} << 20) + 3, (int64_t{1} << 20) + 31, int64_t{100003}, int64_t{65543}}) {
          const std::vector<double> in = testing::RankInput(0, 0, n, /*case_key=*/n * 31 + 7, op, dtype);
          Tensor input = testing::MakeTensor(in, dtype, gpu);
          Tensor output = testing::MakeTensor(std::vector<double>(n, -77), dtype, gpu);
          absl::Status s = pg->ReduceScatter(output, input, op)->Wait();
          ASSERT_TRUE(s.ok()) << s;
          testing::ExpectValues(testing::ReadTensor(output), in, dtype, ReduceOp::kSum,
                                absl::StrCat("one-rank ReduceScatter(", DTypeName(dtype), " [", n, "], ",
                                             ReduceOpName(op), ")"));
        }
      }
    }
  });
}

TEST(ProcessGroupNccl, RejectsHostTensorsAndOtherGpusTensorsWithAHint) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(1, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    absl::Status s = pg->AllReduce(Tensor::Zeros({4}))->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_PRED2(Contains, std::string(s.message()), "takes CUDA tensors on this rank's device cuda:0");
    EXPECT_PRED2(Contains, std::string(s.message()), ".To(Device::CUDA(0))");
    s = pg->AllReduce(Tensor::Zeros({4}, DType::kUInt8, Device::CUDA(0)))->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_PRED2(Contains, std::string(s.message()), "does not reduce uint8");
    // Still usable: argument errors never reach NCCL.
    Tensor t = Tensor::Full({3}, 2.5, DType::kFloat32, Device::CUDA(0));
    EXPECT_TRUE(pg->AllReduce(t, ReduceOp::kMax)->Wait().ok());
    EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
  });
}

// What the group tells its observers (collective_observer.h), one line each, in order. Failed() returns
// a sentence for the error, and with a `path` also writes the lines so far there (as a flight recorder dumps).
class LogObserver : public CollectiveObserver {
 public:
  explicit LogObserver(std::string path = "") : path_(std::move(path)) {}
  void Issued(const CollectiveInfo& info) override {
    Add(absl::StrCat("issued #", info.seq, " ", info.op, "(", info.signature, ")",
                     info.via.empty() ? "" : " via ", info.via));
  }
  void Ended(int64_t seq, const absl::Status& status) override {
    Add(absl::StrCat("ended #", seq, " ", absl::StatusCodeToString(status.code())));
  }
  std::string Failed(absl::string_view reason, const absl::Status& status) override {
    Add(absl::StrCat("failed ", reason));
    if (!path_.empty()) testing::WriteFile(path_, absl::StrJoin(Lines(), "\n"));
    return "Observers: told of the failure.";
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  void Add(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(std::move(line));
  }
  const std::string path_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

bool Has(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

// --- The external all_reduce seam ---------------------------------------------------------------------

// An external all_reduce of a one-rank group (whose result is the tensor itself, here stamped with 7 in
// its first element so that ordering shows) that runs on a stream of its own and ends only once its gate
// opens: a host function holds that stream until then. Like the copy engines, it leaves the group's stream
// before it ends and attaches beside the group as an observer (external_all_reduce.h): Issued orders the
// group's other calls after its end, Aborting opens the gate. Real streams and events; what it exercises
// is what the group does around any external call, and that its observer seams come in time.
class GatedAllReduce : public ExternalAllReduce, public CollectiveObserver {
 public:
  explicit GatedAllReduce(int device) {
    cudaSetDevice(device);
    cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&start_, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&end_, cudaEventDisableTiming);
    cudaMalloc(&seven_, sizeof(float));
    const float seven = 7.0f;
    cudaMemcpy(seven_, &seven, sizeof(float), cudaMemcpyHostToDevice);
  }
  ~GatedAllReduce() override {
    Open();
    cudaStreamSynchronize(side_);
    cudaStreamDestroy(side_);
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
    cudaFree(seven_);
  }
  const char* path_name() const override { return "a gate"; }
  absl::Status Prepare(const std::vector<Tensor>&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status Enqueue(const std::vector<Tensor>& tensors, ReduceOp, CUstream_st* stream, CUevent_st* done) override {
    cudaEventRecord(start_, stream);
    cudaStreamWaitEvent(side_, start_, 0);
    cudaLaunchHostFunc(side_, &GatedAllReduce::WaitForGate, &open_);
    cudaMemcpyAsync(tensors[0].data_ptr(), seven_, sizeof(float), cudaMemcpyDeviceToDevice, side_);
    if (cudaEventRecord(done, side_) != cudaSuccess || cudaEventRecord(end_, side_) != cudaSuccess) {
      return absl::InternalError("cudaEventRecord");
    }
    group_stream_ = stream;
    return absl::OkStatus();
  }
  void Issued(const CollectiveInfo& info) override {
    if (group_stream_ == nullptr || info.via == path_name()) return;
    cudaStreamWaitEvent(group_stream_, end_, 0);
    group_stream_ = nullptr;
  }
  void Aborting() override {
    released_ = true;
    Open();
  }

  void Open() { open_ = true; }
  bool released() const { return released_; }

 private:
  static void WaitForGate(void* open) {
    while (!static_cast<std::atomic<bool>*>(open)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  cudaStream_t side_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  cudaStream_t group_stream_ = nullptr;  // left before the call's end; Issued orders it after end_
  float* seven_ = nullptr;
  std::atomic<bool> open_{false};
  std::atomic<bool> released_{false};
};

TEST(ProcessGroupNcclExternal, IsNumberedDescribedAndItsObserverOrdersTheNextNcclCallAfterItsEnd) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(1, [](const RankContext& ctx) {
    auto pg = Connect(ctx);
    ASSERT_NE(pg, nullptr);
    auto gate = std::make_shared<GatedAllReduce>(pg->device_index());
    pg->AddObserver(gate);
    Tensor t = Tensor::Full({5}, 1.0, DType::kFloat32, Device::CUDA(pg->device_index()));
    const int64_t seq = pg->sequence_number();
    std::shared_ptr<Work> external = pg->AllReduceExternal(gate, {t}, ReduceOp::kSum);
    EXPECT_EQ(pg->sequence_number(), seq + 1);
    EXPECT_EQ(external->description(),
              absl::StrCat("AllReduce(float32 [5] cuda:0, SUM) #", seq, " on nccl rank 0/1 via a gate"));
    // The external call left the group's stream at once, but has not ended: the gate is closed. An NCCL
    // collective issued now waits for its end (its observer's Issued came before the group enqueued it),
    // so it cannot have completed either.
    std::shared_ptr<Work> nccl = pg->AllReduce(t);
    EXPECT_FALSE(external->IsCompleted());
    EXPECT_FALSE(nccl->IsCompleted()) << "the NCCL call ran before the external call on the same stream ended";
    gate->Open();
    ASSERT_TRUE(nccl->Wait().ok());
    ASSERT_TRUE(external->Wait().ok());
    EXPECT_EQ(t.ToVector<float>(), (std::vector<float>{7, 1, 1, 1, 1}));
    EXPECT_FALSE(gate->released());
  });
}

TEST(ProcessGroupNcclExternal, ACallThatNeverEndsIsAbortedByTheWatchdogWhoseAbortingObserversRelease) {
  SKIP_WITHOUT_GPU();
  RunOnRanks(1, [](const RankContext& ctx) {
    auto pg = Connect(ctx, std::chrono::seconds(2));
    ASSERT_NE(pg, nullptr);
    auto log = std::make_shared<LogObserver>();
    pg->AddObserver(log);
    auto gate = std::make_shared<GatedAllReduce>(pg->device_index());
    pg->AddObserver(gate);
    Tensor t = Tensor::Full({5}, 1.0, DType::kFloat32, Device::CUDA(pg->device_index()));
    const int64_t seq = pg->sequence_number();
    std::shared_ptr<Work> work = pg->AllReduceExternal(gate, {t}, ReduceOp::kSum);
    const absl::Status s = work->Wait(std::chrono::seconds(60));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_PRED2(Contains, std::string(s.message()), "via a gate did not finish within 2000 ms");
    EXPECT_PRED2(Contains, std::string(s.message()), "\nObservers: told of the failure.");
    // The watchdog fails the Work first (so its end event never reads as success), then tells the
    // observers it aborts (the gate opens): that follows the failure by moments.
    for (int i = 0; i < 1000 && !gate->released(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(gate->released()) << "the watchdog aborted the group without telling its observers first";
    // The observers saw it issued (portable: no device index), ended failed, then the failure, once.
    EXPECT_EQ(log->Lines(),
              (std::vector<std::string>{absl::StrCat("issued #", seq, " AllReduce(float32 [5] cuda, SUM) via a gate"),
                                        absl::StrCat("ended #", seq, " DEADLINE_EXCEEDED"), "failed timeout"}));
    const absl::Status after = pg->Barrier()->Wait(std::chrono::seconds(10));
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  });
}

// The watchdog's lock problem, fixed: a launching thread stuck inside an enqueue (here an external call's
// Enqueue that never returns, as a kernel launch blocks on a full CUDA launch queue behind a hung
// collective) used to hold the lock the watchdog needed to abort, and the process hung forever. Now the
// watchdog fails the hung collective without that lock, and since the stuck thread can never be told,
// ends the process cleanly: exit status 3, the error on stderr, no abort. Runs in a child process.
class StuckEnqueue : public GatedAllReduce {
 public:
  using GatedAllReduce::GatedAllReduce;
  absl::Status Enqueue(const std::vector<Tensor>& tensors, ReduceOp op, CUstream_st* stream, CUevent_st* done) override {
    if (calls_++ == 0) return GatedAllReduce::Enqueue(tensors, op, stream, done);  // never ends: the gate stays shut
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));                   // never returns
  }

 private:
  int calls_ = 0;
};

TEST(ProcessGroupNcclWatchdog, EndsTheProcessCleanlyWhenTheLaunchingThreadIsStuckInsideAnEnqueue) {
  SKIP_WITHOUT_GPU();
  if (std::getenv("NCCL_TEST_STUCK_CHILD") != nullptr) {
    NcclOptions options;
    options.timeout = std::chrono::seconds(1);
    options.device = 0;
    auto pg = ProcessGroupNCCL::Create(std::make_shared<HashStore>(std::chrono::seconds(30)), 0, 1, options);
    if (!pg.ok()) ::_exit(10);
    (*pg)->AddObserver(std::make_shared<LogObserver>(std::string(std::getenv("NCCL_TEST_STUCK_CHILD")) + "/told.txt"));
    auto stuck = std::make_shared<StuckEnqueue>(0);
    Tensor t = Tensor::Full({5}, 1.0, DType::kFloat32, Device::CUDA(0));
    std::shared_ptr<Work> hung = (*pg)->AllReduceExternal(stuck, {t}, ReduceOp::kSum);  // #0: never ends
    (*pg)->AllReduceExternal(stuck, {t}, ReduceOp::kSum);  // #1: this thread never comes back
    ::_exit(11);
  }
  const std::string dir = testing::MakeTempDir();
  const pid_t child = testing::StartProcess(
      {testing::SelfPath(),
       "--gtest_filter=ProcessGroupNcclWatchdog.EndsTheProcessCleanlyWhenTheLaunchingThreadIsStuckInsideAnEnqueue"},
      {{"NCCL_TEST_STUCK_CHILD", dir}}, testing::LauncherVariables(), dir + "/out.txt",
      dir + "/err.txt");
  const std::optional<int> status = testing::WaitFor(child, std::chrono::seconds(120));
  const std::string err = testing::ReadFile(dir + "/err.txt");
  ASSERT_TRUE(status.has_value()) << "the process hung: the watchdog waited for the stuck thread's lock\n" << err;
  ASSERT_TRUE(WIFEXITED(*status)) << "killed by signal " << WTERMSIG(*status) << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(*status), kCollectiveFailureExitCode) << err;
  EXPECT_PRED2(Contains, err, "ProcessGroupNCCL watchdog (rank 0): DEADLINE_EXCEEDED: AllReduce(float32 [5] cuda:0, SUM) #0");
  EXPECT_PRED2(Contains, err, "The thread issuing collectives has been inside an NCCL/CUDA call");
  // The observers were told before the exit (a flight recorder dumps there), with the hung collective
  // failed and the next one issued, not ended.
  const std::string told = testing::ReadFile(dir + "/told.txt");
  const std::vector<std::string> lines = absl::StrSplit(told, '\n');
  EXPECT_TRUE(Has(lines, "ended #0 DEADLINE_EXCEEDED")) << told;
  EXPECT_TRUE(Has(lines, "issued #1 AllReduce(float32 [5] cuda, SUM) via a gate")) << told;
  EXPECT_FALSE(absl::StrContains(told, "ended #1")) << told;
  EXPECT_EQ(lines.back(), "failed timeout") << told;
}

}  // namespace
}  // namespace tinyddp::dist
