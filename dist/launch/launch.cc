// launch: torchrun's interface for C++ programs (see launch_flags.h for the flags, launcher.h for
// what it does, gpu_report.h for --check).
//
//   launch --nproc_per_node=gpu bazel-bin/examples/ddp_mlp
//   launch --check
#include <cstdio>
#include <string>
#include <vector>

#include "dist/launch/gpu_report.h"
#include "dist/launch/launch_flags.h"
#include "dist/launch/launcher.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto options = tinyddp::dist::ParseLaunchArgs(args);
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
  return tinyddp::dist::RunLauncher(*options);
}
