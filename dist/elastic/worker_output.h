// PrefixedOutput: the launch program's --prefix_output (and torchrun's --tee): every line a worker prints
// reaches this process's stdout or stderr as "[rank N] line". The core supervisor only points a worker's
// stdout and stderr at descriptors (WorkerProcessSpec::stdout_fd, stderr_fd); this gives it pipes, and
// one thread here reads them all and writes whole lines, so a worker's line is never cut by another's.
//
//   PrefixedOutput output;
//   RETURN_IF_ERROR(output.Attach(specs));   // a pipe per stream of each spec
//   supervisor.Start(specs); output.Start();  // this side's write ends closed; the reading thread runs
//   JobResult result = supervisor.Wait();
//   output.Finish();                          // what is left, at most kDrain later; partial lines flushed
//
// Bounded: a grandchild that inherited a pipe and keeps it open cannot hold the launcher past kDrain after
// the workers exited. A closed stdout (`launch ... | head`) drops the output instead of killing the
// launcher (the thread blocks SIGPIPE for itself).
#ifndef TINYDDP_DIST_ELASTIC_WORKER_OUTPUT_H_
#define TINYDDP_DIST_ELASTIC_WORKER_OUTPUT_H_

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "dist/launch/supervisor.h"

namespace tinyddp::dist {

class PrefixedOutput {
 public:
  /// How long Finish() still reads after the workers exited (their children may hold the pipes).
  static constexpr std::chrono::milliseconds kDrain = std::chrono::seconds(2);

  PrefixedOutput() = default;
  /// Stops the thread (as Finish) and closes every descriptor still open.
  ~PrefixedOutput();
  PrefixedOutput(const PrefixedOutput&) = delete;
  PrefixedOutput& operator=(const PrefixedOutput&) = delete;

  /// Makes two pipes per spec and sets its stdout_fd and stderr_fd to their write ends. Call once.
  absl::Status Attach(std::vector<WorkerProcessSpec>& specs);
  /// After Supervisor::Start: closes this process's write ends (so a worker's exit ends its streams) and
  /// starts the reading thread.
  void Start();
  /// After Supervisor::Wait: reads until every stream ended or kDrain passed, writes the partial last
  /// lines with a newline, and stops the thread. Idempotent.
  void Finish();

 private:
  struct Stream {
    int rank = 0;
    int read_fd = -1, write_fd = -1;
    int to = 1;           // STDOUT_FILENO or STDERR_FILENO
    std::string pending;  // a partial last line, until its newline arrives
  };
  void Loop();
  // Reads what `s` has (all of it at its end, `flush`) and writes its whole lines with the prefix.
  void Read(Stream& s, bool flush);

  std::vector<Stream> streams_;
  std::thread thread_;
  std::atomic<bool> finishing_{false};  // set by Finish: the thread reads for kDrain more at most
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_WORKER_OUTPUT_H_
