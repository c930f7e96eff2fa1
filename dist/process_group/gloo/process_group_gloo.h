// ProcessGroupGloo: collectives on CPU tensors over TCP with Gloo (the engine behind PyTorch's "gloo"
// backend). Used when a process has no GPU: CPU training, tests, and the laptop run of every example.
//
//   * transport   gloo::transport::tcp, listening on GLOO_SOCKET_IFNAME's interface, else on loopback for
//                 one machine (MASTER_ADDR unset or loopback), else on this host's name.
//   * rendezvous  connectFullMesh swaps those addresses through our Store, then connects every pair of ranks.
//   * algorithms  Gloo's ring allreduce, broadcast, allgather, reduce, barrier; reduce-scatter is our ring
//                 on Gloo's primitives (gloo_ring_reduce_scatter.h). Reductions: host_reduce.h.
//   * asynchrony  one worker thread runs the collectives in issue order, which is every rank's order; the
//                 caller gets a Work at once. Point-to-point calls queue there too, without a collective tag.
// One timeout (GlooOptions::timeout) bounds the rendezvous, Gloo's connection setup and every collective,
// counted from when it was issued: a queue behind a stuck collective fails at its deadline, not one timeout
// after another. Gloo's exceptions become the Work's status (a timeout is DeadlineExceeded naming the
// collective). After a transport error Gloo's connections are in an unknown state: later collectives fail
// fast quoting the first error, which the group's observers hear of (collective_observer.h).
#ifndef TINYDDP_DIST_PROCESS_GROUP_GLOO_PROCESS_GROUP_GLOO_H_
#define TINYDDP_DIST_PROCESS_GROUP_GLOO_PROCESS_GROUP_GLOO_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/process_group/process_group.h"
#include "dist/store/store.h"

namespace gloo {
class Context;
}

namespace tinyddp::dist {

struct GlooOptions {
  /// Bound on every collective (Gloo's context timeout) and on the rendezvous.
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  /// Key prefix in the store, distinct for each group sharing one store.
  std::string store_prefix = "gloo";
  /// Where the job's store is, as this rank resolved it (init passes the engine's answer): a loopback
  /// address means a one-machine job. Empty: MASTER_ADDR's value. Under Slurm no MASTER_ADDR is set, and
  /// without this a job of several nodes would listen on 127.0.0.1.
  std::string master_addr;
};

class ProcessGroupGloo : public ProcessGroup {
 public:
  /// Connects this rank to the others through `store`. Blocks until every rank has joined or the timeout
  /// passes (DeadlineExceeded). Precondition: 0 <= rank < size, and every rank passes the same size,
  /// store and store_prefix.
  static absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> Create(std::shared_ptr<Store> store, int rank,
                                                                  int size, GlooOptions options = {});
  /// Finishes the collectives already queued (each still bounded by the timeout), then closes.
  ~ProcessGroupGloo() override;

  const char* backend_name() const override { return "gloo"; }

 protected:
  std::shared_ptr<Work> RunAllReduce(std::vector<Tensor> tensors, const Call& call) override;
  std::shared_ptr<Work> RunBroadcast(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunAllGather(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduceScatter(const Tensor& output, const Tensor& input, const Call& call) override;
  std::shared_ptr<Work> RunReduce(const Tensor& tensor, const Call& call) override;
  std::shared_ptr<Work> RunBarrier(const Call& call) override;
  /// On the worker thread: posts every op's send or receive (Gloo's unbound buffers), then waits for all
  /// (point_to_point.cc).
  std::shared_ptr<Work> RunPointToPoint(std::vector<P2POp> ops, const Call& call) override;
  /// CPU tensors of float32, float64, bfloat16, int32 or int64.
  absl::Status CheckTensor(const Tensor& tensor) const override;

 private:
  ProcessGroupGloo(int rank, int size, std::chrono::milliseconds timeout, std::shared_ptr<gloo::Context> context);

  // A queued collective: `run` does the Gloo calls on the worker thread (it may throw) and is given the
  // tag that numbers this collective's messages and the time it may still take (its deadline minus now).
  using Run = std::function<void(uint32_t tag, std::chrono::milliseconds budget)>;
  struct Task {
    std::shared_ptr<CompletionWork> work;
    Run run;
    int64_t seq = 0;
    std::chrono::steady_clock::time_point deadline;  // issued + the group's timeout
  };
  std::shared_ptr<Work> Enqueue(const Call& call, Run run);
  void WorkerLoop();
  // Runs one task, converting whatever Gloo throws into a Status.
  absl::Status RunTask(Task& task, uint32_t tag);

  std::shared_ptr<gloo::Context> context_;
  // Messages issued so far per (peer, tag, is a send), counted on the issuing thread: a message's Gloo slot
  // carries its count, so the n-th Send to a peer meets that peer's n-th Recv (FIFO per pair and tag).
  std::map<std::tuple<int, int, bool>, uint32_t> p2p_counts_;
  std::mutex mu_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  // Worker-thread state.
  absl::Status broken_;            // the first transport error; later collectives fail fast with it
  std::vector<uint8_t> scratch_;   // flattening and staging buffer, grown once, then reused
  std::thread worker_;             // last: starts after everything it reads is constructed
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_PROCESS_GROUP_GLOO_PROCESS_GROUP_GLOO_H_
