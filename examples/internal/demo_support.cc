// The shared main() and printing of the collective demos (examples/internal/demo_support.h).
#include "examples/internal/demo_support.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/init.h"
#include "dist/launch/spawn.h"
#include "tensor/cuda_device.h"

namespace tinyddp::examples {

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
  dist::InitOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto parsed = dist::ParseBackend(arg.rfind("--backend=", 0) == 0 ? arg.substr(10) : arg);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s: %s (usage: %s [--backend=auto|nccl|gloo])\n", name,
                   std::string(parsed.status().message()).c_str(), name);
      return 2;
    }
    options.backend = *parsed;
  }
  // Run directly, this process becomes a small launcher for its own workers; as a worker it continues.
  if (absl::Status s = dist::SpawnWorkersIfNeeded(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, std::string(s.message()).c_str());
    return 1;
  }
  auto pg = dist::InitProcessGroup(options);
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
