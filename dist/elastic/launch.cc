// launch: torchrun's interface for C++ programs, the program that puts the rooms together: the core
// launcher (dist/launch/: workers with their env:// variables, the supervisor, gpu_report.h for --check),
// the elastic agent around it (this folder: launch_flags.h for the flags, launcher.h for what it does:
// restarts, several nodes, limits), Kubeflow's PET_* variables as flags (dist/engines/pet_flags.h), and two
// observers: the root-cause blame
// (dist/observe/blame/blame.h: the job's failure is the rank whose failure came first, from the error
// files its workers write) and the flight recorder's job side (dist/observe/flight_recorder/job_records.h:
// every worker writes its rings into one directory per round, and a failed round ends with the verdict
// naming the rank the others waited for).
//
//   launch --nproc_per_node=gpu bazel-bin/examples/ddp_mlp
//   launch --check
#include <cstdio>
#include <string>
#include <vector>

#include "dist/elastic/in_place/keep_going.h"
#include "dist/elastic/launch_flags.h"
#include "dist/elastic/launcher.h"
#include "dist/launch/gpu_report.h"
#include "dist/observe/blame/blame.h"
#include "dist/observe/flight_recorder/job_records.h"
#include "dist/worker/env.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // PET_* (torchrun's variables, set by Kubeflow) are read as flags before the command line, which wins.
  auto options = tinyddp::dist::ParseLaunchArgs(args, tinyddp::dist::CurrentEnvironment());
  if (!options.ok()) {
    std::fprintf(stderr, "%s", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::printf("%s", tinyddp::dist::LaunchUsage().c_str());
    return 0;
  }
  if (options->check) {
    std::printf("%s", tinyddp::dist::SystemReport().c_str());
    return 0;
  }
  tinyddp::dist::Blame blame("launch");
  const auto flight_records = tinyddp::dist::JobRecords::ForThisJob();
  // The program's --min_replicas (in-place recovery): one worker's death does not stop the others.
  tinyddp::dist::in_place::KeepGoingAfterLoss keep_going(options->max_restarts);  // replacements: rejoin
  std::vector<tinyddp::dist::JobObserver*> observers = {&blame, flight_records.get()};
  if (tinyddp::dist::in_place::ProgramAsksToKeepGoing(options->program)) observers.push_back(&keep_going);
  return tinyddp::dist::RunLauncher(*options, observers);
}
