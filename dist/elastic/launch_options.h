// LaunchOptions: what `launch` (torchrun's interface for C++ programs) is told, as the launcher uses it.
// launch_flags.h reads it from the command line:
//
//   launch [--nproc_per_node=N|gpu|cpu|auto] [--nnodes=K --node_rank=I --master_addr=H --master_port=P]
//          [--prefix_output|--tee=3] [--grace_seconds=S] [--preempt_grace=S] [--timeout=T] [--max_restarts=N]
//          [--ignore_worker_limits] [--check] PROGRAM [ARGS...]
#ifndef TINYDDP_DIST_ELASTIC_LAUNCH_OPTIONS_H_
#define TINYDDP_DIST_ELASTIC_LAUNCH_OPTIONS_H_

#include <chrono>
#include <string>
#include <vector>

namespace tinyddp::dist {

struct LaunchOptions {
  // --nproc_per_node: a number, or "gpu", "cpu", "auto" (torchrun's meanings: ResolveNprocPerNode in
  // worker_limits.h). Default 1.
  std::string nproc_per_node = "1";
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // -1 = default: with one node, a free port picked by the launcher; with several, 29500.
  int master_port = -1;
  bool prefix_output = false;  // --prefix_output, or torchrun's --tee (which also prefixes lines)
  int grace_seconds = 5;       // SIGTERM to SIGKILL when stopping workers
  int preempt_grace_seconds = 30;  // the same after launch itself got SIGTERM or SIGUSR1 (time to checkpoint)
  // The job's one timeout (job_timeout.h), bounding every wait of the launcher and, as TINYDDP_TIMEOUT, of
  // its workers: launch's --timeout, else the program's own --timeout (so that both wait alike), else
  // TINYDDP_TIMEOUT, else 300 s. `timeout_source` says which, for the launcher's first line.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  std::string timeout_source = "the default";
  int rendezvous_timeout_seconds = 0;  // how long launchers of a multi-node job wait for each other; 0: timeout
  int max_restarts = 0;                // --max_restarts: restart every worker this often after a failure
  bool ignore_worker_limits = false;   // skip the check that the workers fit on this machine (worker_limits.h)
  bool check = false;          // --check: print the GPU/driver/NCCL report and exit
  bool help = false;
  std::vector<std::string> program;  // PROGRAM and its arguments
};

}  // namespace tinyddp::dist

#endif  // TINYDDP_DIST_ELASTIC_LAUNCH_OPTIONS_H_
