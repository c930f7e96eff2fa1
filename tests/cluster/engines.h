// What the tests against real job engines share: finding the engines' programs, the reason a test skips
// when it cannot run them, running a command with a bound and a clean environment, the tiny ddp_mlp job
// whose weights must come out the same bits under every engine, and reading cluster_probe's lines.
#ifndef TINYDDP_TESTS_CLUSTER_ENGINES_H_
#define TINYDDP_TESTS_CLUSTER_ENGINES_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tinyddp::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

/// `name`'s absolute path: the first directory of $PATH that holds an executable `name`; for a daemon
/// (`sbin`) also /usr/local/sbin, /usr/sbin and /sbin, where Debian puts them and which a user's PATH
/// often lacks. "" when there is none. (A test run with a PATH without /usr/bin finds no srun, sbatch
/// or mpirun, and skips.)
std::string FindProgram(const std::string& name, bool sbin = false);

/// "" when this process can run the engines' `programs` (and `daemons`, which need root); otherwise
/// why not, and how to get them, for GTEST_SKIP.
std::string WhyEnginesCannotRun(const std::vector<std::string>& programs, const std::vector<std::string>& daemons);

/// A file of this test's runfiles ("examples/ddp_mlp").
std::string Runfile(const std::string& path);

/// A new folder under /tmp (short: Unix socket paths are limited to 107 bytes), 0755.
std::string ShortTempDir(const std::string& prefix);

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal, or by the bound
  bool timed_out = false;
  std::string out, err;
  std::string Explain() const;  // both outputs, for failure messages
};

/// Starts `argv` (argv[0] an absolute path) in `cwd` and its own process group, with `env` added and
/// every variable of an enclosing job removed (RANK, MASTER_ADDR, ..., SLURM_*, OMPI_*, PMI_*, PET_*,
/// TORCHELASTIC_*, TINYDDP_*), stdout and stderr to files in `cwd`. Returns the pid.
pid_t StartCommand(const std::vector<std::string>& argv, const Env& env, const std::string& cwd,
                   const std::string& name);
/// Waits for a StartCommand's process; past `bound` kills its whole process group.
CommandResult WaitCommand(pid_t pid, const std::string& cwd, const std::string& name, std::chrono::seconds bound);
/// StartCommand then WaitCommand.
CommandResult RunCommand(const std::vector<std::string>& argv, const Env& env, const std::string& cwd,
                         std::chrono::seconds bound);

/// ddp_mlp's flags for the job every engine trains (2 ranks over Gloo: 1200 synthetic examples of 32
/// features, a 32-24-10 MLP, batch 32 per rank, 12 steps), checkpointing into `checkpoint_dir`.
std::vector<std::string> TinyJob(const std::string& checkpoint_dir);
/// The tiny job's command line under an engine: `engine` ({srun, -n2}, {launch, --nproc_per_node=2}, or
/// nothing), then ddp_mlp and TinyJob(checkpoint_dir).
std::vector<std::string> TinyJobUnder(std::vector<std::string> engine, const std::string& checkpoint_dir);

/// The final checkpoint of `launch --nproc_per_node=2 ddp_mlp TinyJob`, trained once per test binary:
/// what every engine's run must match. "" (with a failure recorded) when the reference run failed.
const std::string& ReferenceCheckpoint();

/// The newest step-* folder of a --checkpoint_dir ("" when none).
std::string LatestCheckpoint(const std::string& checkpoint_dir);

/// "" when both checkpoint folders hold the same step and the same bytes in model.safetensors and
/// optimizer.safetensors; otherwise what differs.
std::string CompareCheckpoints(const std::string& expected, const std::string& actual);

/// cluster_probe's lines ("probe rank=1 world=2 ..."), by rank: key -> value.
std::map<int, std::map<std::string, std::string>> ProbeLines(const std::string& output);

/// What backend auto must pick with `ranks_here` ranks on this machine: "nccl" when NCCL is built in
/// and this process sees a GPU for each, else "gloo" (dist/init.h, ResolveBackend).
std::string AutoBackend(int ranks_here);

/// Whether `host` resolves (getaddrinfo).
bool Resolves(const std::string& host);
/// This machine's host name when it resolves, else "".
std::string ResolvableHostName();
/// This machine's host name up to its first dot (what Slurm calls this node).
std::string ShortHostName();

/// A TCP port nobody listens on now.
int FreePort();

}  // namespace tinyddp::testing

#endif  // TINYDDP_TESTS_CLUSTER_ENGINES_H_
