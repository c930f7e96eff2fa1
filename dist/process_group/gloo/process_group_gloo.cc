// ProcessGroupGloo: rendezvous, the worker thread, and one short function per collective.
#include "dist/process_group/gloo/process_group_gloo.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/process_group/gloo/gloo_ring_reduce_scatter.h"
#include "dist/process_group/host_reduce.h"
#include "dist/store/prefix_store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace tinyddp::dist {

namespace {

// Gloo's rendezvous (connectFullMesh) over our Store, private to one group (a PrefixStore: Gloo's keys are
// "rank_0"...). A failed Status is thrown as gloo::IoException, which CatchGloo turns back into a Status.
// Every wait has `store`'s timeout, whatever Gloo passes (0 = forever; Create shortens Gloo's own).
class StoreForGloo : public gloo::rendezvous::Store {
 public:
  explicit StoreForGloo(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check("set", key, store_->Set(key, Bytes(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<Bytes> value = store_->Get(key);
    Check("get", key, value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  // Gloo's wait with a timeout calls this one.
  void wait(const std::vector<std::string>& keys) override {
    Check("wait", keys.empty() ? std::string() : keys.front(), store_->Wait(keys));
  }

 private:
  static void Check(const char* what, const std::string& key, const absl::Status& status) {
    if (status.ok()) return;
    throw gloo::IoException(
        absl::StrCat("Gloo rendezvous: store ", what, "(\"", key, "\") failed: ", status.ToString()));
  }

  std::shared_ptr<dist::Store> store_;
};

// Runs `fn` (which calls into Gloo) and converts whatever Gloo throws into a Status about `what`.
template <typename F>
absl::Status CatchGloo(const std::string& what, std::chrono::milliseconds timeout, F&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    // Gloo reports every timeout as an IoException; its messages are the only way to tell them apart.
    const std::string message = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(message, "timed out") || absl::StrContains(message, "timeout")) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, " timed out after ", timeout.count(),
          " ms: another rank did not join it in time (it may be stuck, slower, have crashed, or be "
          "calling a different collective; TINYDDP_DISTRIBUTED_DEBUG=DETAIL checks that). Gloo: ", e.what()));
    }
    return absl::UnavailableError(absl::StrCat(
        what, " failed in Gloo's transport (a peer may have exited or closed its connection): ", e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat(what, ": Gloo rejected the call: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(absl::StrCat(what, ": Gloo threw a non-standard exception"));
  }
}

// Where Gloo listens: GLOO_SOCKET_IFNAME's interface, as in PyTorch; else 127.0.0.1 when the store's
// address (`master_addr`, else MASTER_ADDR) is unknown or a loopback address (a one-machine job); else this
// machine's host name, which must resolve to an address the peers reach.
gloo::transport::tcp::attr ListenAttr(const std::string& master_addr) {
  gloo::transport::tcp::attr attr;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  const char* master = std::getenv("MASTER_ADDR");
  const std::string addr = !master_addr.empty() ? master_addr : master == nullptr ? "" : master;
  char name[256] = {};
  if (ifname != nullptr && *ifname != '\0') {
    attr.iface = ifname;
  } else if (addr.empty() || addr == "localhost" || absl::StartsWith(addr, "127.") || addr == "::1" ||
             gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    attr.hostname = "127.0.0.1";
  } else {
    attr.hostname = name;
  }
  return attr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> ProcessGroupGloo::Create(std::shared_ptr<Store> store, int rank,
                                                                           int size, GlooOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProcessGroupGloo::Create: rank ", rank, " is not in [0, ", size, ")"));
  }
  const gloo::transport::tcp::attr attr = ListenAttr(options.master_addr);
  const std::string where = attr.iface.empty() ? "host " + attr.hostname : "interface " + attr.iface;

  std::shared_ptr<gloo::transport::Device> device;
  absl::Status s = CatchGloo("Gloo TCP device", options.timeout,
                             [&] { device = gloo::transport::tcp::CreateDevice(attr); });
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("ProcessGroupGloo: cannot listen on ", where, ": ", s.message(),
                                               " (set GLOO_SOCKET_IFNAME to a network interface, or MASTER_ADDR)"));
  }
  static std::atomic<bool> told{false};  // which interface GLOO_SOCKET_IFNAME chose: said once, by rank 0
  if (!attr.iface.empty() && rank == 0 && !told.exchange(true)) {
    std::fprintf(stderr, "ProcessGroupGloo: GLOO_SOCKET_IFNAME=%s: Gloo's device is %s\n", attr.iface.c_str(),
                 device->str().c_str());
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // Gloo waits five times its context timeout for a pair to connect, so a rank that froze between
  // publishing its address and connecting would cost the others 5x the job's timeout: a fifth of it during
  // the rendezvous keeps that wait at the timeout. The store's waits (StoreForGloo) and every collective
  // have their own, so nothing else sees the shortened value.
  context->setTimeout(std::max(options.timeout / 5, std::chrono::milliseconds(1)));
  // Each group this process creates rendezvouses under its own keys: a second group over the same store (a
  // new group after an error, a test that connects twice) must not read the first one's stale addresses.
  // Every rank creates its groups in the same order, so the n-th group has the same number everywhere.
  static std::atomic<int64_t> groups_created{0};
  const std::string prefix = absl::StrCat(options.store_prefix, "/", groups_created.fetch_add(1));
  auto group_store = std::make_shared<PrefixStore>(prefix, std::move(store));
  group_store->set_timeout(options.timeout);
  StoreForGloo gloo_store(std::move(group_store));
  s = CatchGloo(absl::StrCat("Gloo rendezvous of rank ", rank, "/", size), options.timeout,
                [&] { context->connectFullMesh(gloo_store, device); });
  RETURN_IF_ERROR(s);
  context->setTimeout(options.timeout);
  return std::unique_ptr<ProcessGroupGloo>(new ProcessGroupGloo(rank, size, options.timeout, std::move(context)));
}

ProcessGroupGloo::ProcessGroupGloo(int rank, int size, std::chrono::milliseconds timeout,
                                   std::shared_ptr<gloo::Context> context)
    : ProcessGroup(rank, size, timeout), context_(std::move(context)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
}

absl::Status ProcessGroupGloo::CheckTensor(const Tensor& tensor) const {
  if (!tensor.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the gloo backend takes CPU tensors, got ", TensorSignature(tensor),
        " (hint: use the nccl backend for CUDA tensors, or copy with .To(Device::CPU()))"));
  }
  if (!IsCollectiveDType(tensor.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("the gloo backend does not reduce ", DTypeName(tensor.dtype()),
                                                   "; it takes float32, float64, bfloat16, int32 and int64"));
  }
  return absl::OkStatus();
}

// --- The worker thread ---------------------------------------------------------------------------

std::shared_ptr<Work> ProcessGroupGloo::Enqueue(const Call& call, Run run) {
  auto work = std::make_shared<CompletionWork>(call.description, timeout());
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Task{work, std::move(run), call.seq, std::chrono::steady_clock::now() + timeout()});
  }
  queue_cv_.notify_one();
  return work;
}

void ProcessGroupGloo::WorkerLoop() {
  // Gloo matches messages by tag; every rank runs the same collectives in the same order on this one
  // thread, so counting them gives every rank the same tag for the same collective.
  uint32_t tag = 0;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.work->MarkStarted();  // for traces: when this collective really ran (Work::HostInterval)
    NotifyStarted(task.seq);
    absl::Status status = RunTask(task, IsPointToPoint(task.seq) ? 0 : tag++);  // p2p: not every rank's
    NotifyEnded(task.seq, status);
    if (!status.ok() && broken_.ok()) {
      // The group's first failure: the observers hear of it (a flight recorder dumps, this entry included,
      // and the error says where), and every later collective fails fast quoting it.
      status = NoteFailure(status, absl::IsDeadlineExceeded(status) ? "timeout" : "error");
      broken_ = status;
    }
    task.work->Complete(std::move(status));
    // `task` (and the tensors its closure holds) is released here, after completion.
  }
}

absl::Status ProcessGroupGloo::RunTask(Task& task, uint32_t tag) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        task.work->description(), " not run: this gloo process group failed earlier and its connections "
        "are in an unknown state (create a new group). The first error: ", broken_.message()));
  }
  // Gloo reads a timeout of 0 as "none": a collective whose deadline passed while it queued still gets
  // 1 ms, and then fails as timed out (unless its peers are already there).
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(task.deadline - std::chrono::steady_clock::now());
  const auto budget = std::max(left, std::chrono::milliseconds(1));
  return CatchGloo(task.work->description(), timeout(), [&] { task.run(tag, budget); });
}

// --- Collectives: each closure runs on the worker thread ------------------------------------------

std::shared_ptr<Work> ProcessGroupGloo::RunAllReduce(std::vector<Tensor> tensors, const Call& call) {
  return Enqueue(call, [this, tensors = std::move(tensors), op = call.op](uint32_t tag, std::chrono::milliseconds budget) {
    const DType dtype = tensors[0].dtype();
    const size_t esize = DTypeSize(dtype);
    size_t total = 0;
    for (const Tensor& t : tensors) total += t.numel();
    // One tensor is reduced where it lies; several are packed into one buffer so they cost one ring.
    const bool packed = tensors.size() > 1;
    auto copy = [&](bool unpack) {
      uint8_t* at = scratch_.data();
      for (const Tensor& t : tensors) {
        unpack ? std::memcpy(t.data_ptr(), at, t.nbytes()) : std::memcpy(at, t.data_ptr(), t.nbytes());
        at += t.nbytes();
      }
    };
    if (packed && scratch_.size() < total * esize) scratch_.resize(total * esize);
    if (packed) copy(/*unpack=*/false);
    void* data = packed ? scratch_.data() : tensors[0].data_ptr();
    VisitCollectiveDType(dtype, [&](auto type) {
      using T = decltype(type);
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(static_cast<T*>(data), total);
      opts.setReduceFunction(GetHostReduceFn(dtype, op));
      opts.setTag(tag);
      opts.setTimeout(budget);
      gloo::allreduce(opts);
    });
    if (op == ReduceOp::kAvg) DivideInPlace(data, total, dtype, size());
    if (packed) copy(/*unpack=*/true);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::RunBroadcast(const Tensor& tensor, const Call& call) {
  return Enqueue(call, [this, tensor, root = call.root](uint32_t tag, std::chrono::milliseconds budget) {
    VisitCollectiveDType(tensor.dtype(), [&](auto type) {
      using T = decltype(type);
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<T*>(tensor.data_ptr()), tensor.numel());  // in place on every rank
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(budget);
      gloo::broadcast(opts);
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::RunAllGather(const Tensor& output, const Tensor& input, const Call& call) {
  return Enqueue(call, [this, output, input](uint32_t tag, std::chrono::milliseconds budget) {
    // In place (all_gather_into_tensor's form, ZeRO-1's parameters): `input` is already block `rank` of
    // `output`, so Gloo is given no input to copy there (a copy onto itself).
    const bool in_place =
        static_cast<const uint8_t*>(input.data_ptr()) == static_cast<const uint8_t*>(output.data_ptr()) +
                                                            static_cast<size_t>(rank()) * input.nbytes();
    VisitCollectiveDType(input.dtype(), [&](auto type) {
      using T = decltype(type);
      gloo::AllgatherOptions opts(context_);
      if (!in_place) opts.setInput(static_cast<T*>(input.data_ptr()), input.numel());
      opts.setOutput(static_cast<T*>(output.data_ptr()), output.numel());
      opts.setTag(tag);
      opts.setTimeout(budget);
      gloo::allgather(opts);
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::RunReduceScatter(const Tensor& output, const Tensor& input,
                                                         const Call& call) {
  return Enqueue(call, [this, output, input, op = call.op](uint32_t tag, std::chrono::milliseconds budget) {
    RingReduceScatter(*context_, input, output, op, tag, budget, scratch_);
    if (op == ReduceOp::kAvg) DivideInPlace(output.data_ptr(), output.numel(), output.dtype(), size());
  });
}

std::shared_ptr<Work> ProcessGroupGloo::RunReduce(const Tensor& tensor, const Call& call) {
  return Enqueue(call, [this, tensor, op = call.op, root = call.root](uint32_t tag, std::chrono::milliseconds budget) {
    // Gloo's reduce uses its output as a scratch ring buffer on every rank; only the root's output is the
    // result. Non-roots point it at our scratch, so their tensors stay unchanged (as with NCCL).
    const bool is_root = rank() == root;
    if (!is_root && scratch_.size() < tensor.nbytes()) scratch_.resize(tensor.nbytes());
    VisitCollectiveDType(tensor.dtype(), [&](auto type) {
      using T = decltype(type);
      gloo::ReduceOptions opts(context_);
      opts.setInput(static_cast<T*>(tensor.data_ptr()), tensor.numel());
      opts.setOutput(is_root ? static_cast<T*>(tensor.data_ptr()) : reinterpret_cast<T*>(scratch_.data()),
                     tensor.numel());
      opts.setRoot(root);
      opts.setReduceFunction(GetHostReduceFn(tensor.dtype(), op));
      opts.setTag(tag);
      opts.setTimeout(budget);
      gloo::reduce(opts);
    });
    if (is_root && op == ReduceOp::kAvg) DivideInPlace(tensor.data_ptr(), tensor.numel(), tensor.dtype(), size());
  });
}

std::shared_ptr<Work> ProcessGroupGloo::RunBarrier(const Call& call) {
  return Enqueue(call, [this](uint32_t tag, std::chrono::milliseconds budget) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(budget);
    gloo::barrier(opts);
  });
}

}  // namespace tinyddp::dist
