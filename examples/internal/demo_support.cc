// The shared main() and printing of the collective demos (examples/internal/demo_support.h).
#include "examples/internal/demo_support.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/command_line.h"
#include "dist/init.h"
#include "dist/launch/spawn.h"
#include "tensor/cuda_device.h"

ABSL_FLAG(std::string, backend, "auto",
          "collectives: nccl on GPUs, gloo on CPU; auto picks nccl when there is a GPU (auto|gloo|nccl)");

namespace tinyddp::examples {
namespace {

// The demo's command line: --backend, or --help. Workers started by SpawnWorkersIfNeeded get the same
// arguments and parse them the same way.
absl::StatusOr<CommandLine> ParseDemoFlags(int argc, char** argv, const std::vector<FlagGroup>& flags,
                                           dist::InitOptions& options) {
  absl::StatusOr<CommandLine> command_line =
      ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (!command_line.ok() || command_line->help) return command_line;
  if (!command_line->rest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", command_line->rest.front(), "\": this program takes flags only"));
  }
  absl::StatusOr<dist::Backend> backend = dist::ParseBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return absl::InvalidArgumentError(absl::StrCat("--backend: ", backend.status().message()));
  options.backend = *backend;
  return command_line;
}

}  // namespace

std::string Format(const Tensor& t) {
  std::vector<std::string> parts;
  for (float v : t.ToVector<float>()) {
    parts.push_back(v == std::floor(v) ? absl::StrCat(static_cast<long long>(v)) : absl::StrCat(v));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

void PrintInRankOrder(dist::ProcessGroup& pg, const std::string& line) {
  for (int r = 0; r < pg.size(); ++r) {
    if (r == pg.rank()) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    (void)pg.Barrier()->Wait();
  }
}

int DemoMain(const char* name, int argc, char** argv, const DemoBody& body) {
  const std::vector<FlagGroup> flags = {{"flags", {"backend"}}};
  dist::InitOptions options;
  absl::StatusOr<CommandLine> command_line = ParseDemoFlags(argc, argv, flags, options);
  if (!command_line.ok()) {
    std::fprintf(stderr, "%s: %s (--help lists the flags)\n", name,
                 std::string(command_line.status().message()).c_str());
    return 2;
  }
  if (command_line->help) {
    std::printf("usage: %s [flags]: one rank per GPU (NCCL) or 2 CPU ranks (Gloo) when run directly\n\n%s", name,
                FlagsHelp(flags).c_str());
    return 0;
  }
  // Run directly, this process becomes a small launcher for its own workers; as a worker it continues.
  if (absl::Status s = dist::SpawnWorkersIfNeeded(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(s.message()).c_str());
    return 1;
  }
  auto pg = dist::InitProcessGroup(options);  // bounded by TINYDDP_TIMEOUT, else 300 s
  if (!pg.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(pg.status().message()).c_str());
    return 1;
  }
  // NCCL reduces GPU memory: InitProcessGroup bound this process to cuda:LOCAL_RANK.
  const Device device =
      std::string((*pg)->backend_name()) == "nccl" ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();
  return body(**pg, device);
}

}  // namespace tinyddp::examples
