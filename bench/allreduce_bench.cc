// allreduce_bench: how fast ProcessGroup::AllReduce is, as an nccl-tests-style table.
//
//   bazel run -c opt //bench:allreduce_bench                      # one rank per GPU (NCCL), or 2 CPU ranks (Gloo)
//   bazel run -c opt //bench:allreduce_bench -- --backend=gloo    # Gloo even with GPUs
//   launch --nproc_per_node=2 allreduce_bench                     # under the launcher (or srun, mpirun)
//   flags: --backend=auto|nccl|gloo  --min_bytes=8  --max_bytes=N (default 1 GiB for NCCL, 16 MiB for Gloo)
//          --dtype=float32|bfloat16|float64|int32|int64  --iters=N (default: 100, 20 from 256 MiB)  --warmup=5
//          --json=FILE  the JSON lines go to FILE instead of after the table
//          --copy_engines  two GPUs of one machine: the float32 sizes from 4 MiB run on the copy engines
//                      (dist/accel/copy_engine), as the copy-engine comm hook sends DDP's large buckets,
//                      through ProcessGroup::AllReduceExternal; smaller sizes stay NCCL's. The "path"
//                      column says which ran. (Standalone, without a backward beside it, NCCL's kernel is
//                      usually faster: the copy engines pay off by leaving the SMs to compute.)
//
// Sizes go from min to max in x4 steps, plus PyTorch's reference points (25, 64, 256 MiB, 1 GiB) so the
// two can be compared row by row (bench/reference/torch_allreduce.py measures those the same way).
// Each size: warm-up, then `iters` in-place SUM all-reduces back to back, each followed by
// SynchronizeStream(), which is what torch.distributed.all_reduce does; NCCL is timed with CUDA events on
// the compute stream around the loop, Gloo with the host clock. Columns, as in nccl-tests:
//   algbw = bytes / time;  busbw = algbw * 2(n-1)/n, the bandwidth each link carries in a ring, which
//   does not depend on n and compares with the hardware's link bandwidth.
// Rank 0 prints the table, the comparison with docs/design.md's PyTorch figures, and then, once the table is
// whole (a person reads the table, a script the lines starting with '{'), one JSON line per size, or writes
// those lines to --json=FILE.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "dist/init.h"
#include "dist/launch/spawn.h"
#ifdef TINYDDP_HAVE_COPY_ENGINES
#include "dist/accel/copy_engine/copy_engine_all_reduce.h"
#endif
#include "nlohmann/json.hpp"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

struct Options {
  dist::Backend backend = dist::Backend::kAuto;
  int64_t min_bytes = 8;
  int64_t max_bytes = 0;  // 0: 1 GiB for NCCL, 16 MiB for Gloo
  DType dtype = DType::kFloat32;
  int iters = 0;  // 0: 100, or 20 from 256 MiB (as the PyTorch reference)
  int warmup = 5;
  bool copy_engines = false;
  std::string json_path;  // --json: where the JSON lines go (empty: stdout, after the table)
};

absl::StatusOr<DType> ParseDType(const std::string& s) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    if (s == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError("unknown --dtype " + s + " (float32, bfloat16, float64, int32, int64)");
}

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::vector<std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    const bool has = kv.size() == 2;
    if (kv[0] == "--backend" && has) {
      absl::StatusOr<dist::Backend> b = dist::ParseBackend(kv[1]);
      RETURN_IF_ERROR(b);
      o.backend = *b;
    } else if (kv[0] == "--dtype" && has) {
      absl::StatusOr<DType> d = ParseDType(kv[1]);
      RETURN_IF_ERROR(d);
      o.dtype = *d;
    } else if (kv[0] == "--min_bytes" && has && absl::SimpleAtoi(kv[1], &o.min_bytes) && o.min_bytes > 0) {
    } else if (kv[0] == "--max_bytes" && has && absl::SimpleAtoi(kv[1], &o.max_bytes) && o.max_bytes > 0) {
    } else if (kv[0] == "--iters" && has && absl::SimpleAtoi(kv[1], &o.iters) && o.iters > 0) {
    } else if (kv[0] == "--json" && has && !kv[1].empty()) {
      o.json_path = kv[1];
    } else if (kv[0] == "--copy_engines" && !has) {
      o.copy_engines = true;
    } else if (kv[0] == "--warmup" && has && absl::SimpleAtoi(kv[1], &o.warmup) && o.warmup >= 0) {
    } else {
      return absl::InvalidArgumentError("unknown or malformed flag " + arg +
                                        " (see the header of bench/allreduce_bench.cc)");
    }
  }
  return o;
}

// 8, 32, 128, ... up to max, plus PyTorch's reference sizes in range.
std::vector<int64_t> Sizes(const Options& o, int64_t max_bytes) {
  std::set<int64_t> sizes;
  for (int64_t b = o.min_bytes; b <= max_bytes; b *= 4) sizes.insert(b);
  for (int64_t b : {25 * kMiB, 64 * kMiB, 256 * kMiB, 1024 * kMiB}) {
    if (b >= o.min_bytes && b <= max_bytes) sizes.insert(b);
  }
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

// One in-place SUM all_reduce of `x` on the path the row measures.
using AllReduceFn = std::function<std::shared_ptr<dist::Work>(const Tensor& x)>;

// Microseconds per all-reduce of `x`, timed as the header describes. Fails on any collective error.
absl::StatusOr<double> TimeAllReduce(dist::ProcessGroup& pg, const Tensor& x, int warmup, int iters, bool gpu,
                                     const AllReduceFn& all_reduce) {
  for (int i = 0; i < warmup; ++i) {
    RETURN_IF_ERROR(all_reduce(x)->SynchronizeStream());
  }
  RETURN_IF_ERROR(pg.Barrier()->Wait());  // start together
  if (gpu) {
    const cuda::Stream compute = cuda::Stream::Current(x.device().index);
    compute.Synchronize();
    cuda::Event start(/*enable_timing=*/true), stop(/*enable_timing=*/true);
    start.Record(compute);
    for (int i = 0; i < iters; ++i) {
      RETURN_IF_ERROR(all_reduce(x)->SynchronizeStream());
    }
    stop.Record(compute);
    stop.Synchronize();
    return 1000.0 * cuda::Event::ElapsedMs(start, stop) / iters;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    RETURN_IF_ERROR(all_reduce(x)->Wait());
  }
  const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - t0;
  return us.count() / iters;
}

// --copy_engines: the rows' paths. Every size is the group's own all_reduce, except those the copy engines
// take (float32 from 4 MiB on two GPUs of one machine), which run through the group's external seam.
class Paths {
 public:
  // Collective. Fails when the copy engines were asked for and cannot run here (the reason says why).
  static absl::StatusOr<Paths> Make(dist::ProcessGroup& pg, bool copy_engines) {
    Paths paths(pg);
    if (!copy_engines) return paths;
#ifdef TINYDDP_HAVE_COPY_ENGINES
    std::shared_ptr<dist::Store> store = pg.SubStore("copy_engine");
    if (pg.device_index() < 0 || pg.size() != 2 || store == nullptr) {
      return absl::FailedPreconditionError("--copy_engines needs the nccl backend with two ranks (two GPUs)");
    }
    std::string why_not;
    ASSIGN_OR_RETURN(std::unique_ptr<dist::CopyEngineAllReduce> ce,
                     dist::CopyEngineAllReduce::Create(std::move(store), pg.rank(), pg.device_index(), pg.timeout(),
                                                       dist::CopyEngineOptions{}, &why_not));
    if (ce == nullptr) return absl::FailedPreconditionError("--copy_engines: the copy engines are off: " + why_not);
    paths.copy_engines_ = std::move(ce);
    pg.AddObserver(paths.copy_engines_);  // beside the group, as CopyEngineHook attaches it (ordering, abort)
    return paths;
#else
    return absl::FailedPreconditionError("--copy_engines: this build has no CUDA");
#endif
  }

  // The path a row of `x` takes, and the function that runs it.
  std::string Name(const Tensor& x) const { return TakesCopyEngines(x) ? "copy_engines" : pg_->backend_name(); }
  AllReduceFn For(const Tensor& x) const {
#ifdef TINYDDP_HAVE_COPY_ENGINES
    if (TakesCopyEngines(x)) {
      return [this](const Tensor& t) { return pg_->AllReduceExternal(copy_engines_, {t}, dist::ReduceOp::kSum); };
    }
#endif
    return [this](const Tensor& t) { return pg_->AllReduce(t, dist::ReduceOp::kSum); };
  }

 private:
  explicit Paths(dist::ProcessGroup& pg) : pg_(&pg) {}
  bool TakesCopyEngines(const Tensor& x) const {
#ifdef TINYDDP_HAVE_COPY_ENGINES
    return copy_engines_ != nullptr && copy_engines_->Takes(x.dtype(), x.numel(), dist::ReduceOp::kSum);
#else
    return false;
#endif
  }

  dist::ProcessGroup* pg_;
#ifdef TINYDDP_HAVE_COPY_ENGINES
  std::shared_ptr<dist::CopyEngineAllReduce> copy_engines_;
#endif
};

// One all-reduce of rank+1 everywhere must give n(n+1)/2: a benchmark of wrong answers is worthless.
absl::Status CheckResult(dist::ProcessGroup& pg, DType dtype, Device device) {
  Tensor t = Tensor::Full({1000}, pg.rank() + 1.0, dtype, device);
  RETURN_IF_ERROR(pg.AllReduce(t)->Wait());
  const double want = pg.size() * (pg.size() + 1) / 2.0;
  const double got = ops::Cast(t, DType::kFloat64).ToVector<double>()[999];
  if (got != want) return absl::InternalError(absl::StrCat("all-reduce gave ", got, ", expected ", want));
  return absl::OkStatus();
}

// docs/design.md's PyTorch 2.11 figures on 2x H200 (float32 SUM through torch.distributed).
const std::map<int64_t, double> kTorchBusbw = {
    {25 * kMiB, 236}, {64 * kMiB, 270}, {256 * kMiB, 297}, {1024 * kMiB, 327}};
constexpr double kTorchSmallLatencyUs = 42;

int Run(const Options& o) {
  dist::InitOptions init;
  init.backend = o.backend;
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg_or = dist::InitProcessGroup(init);
  if (!pg_or.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", std::string(pg_or.status().message()).c_str());
    return 1;
  }
  dist::ProcessGroup& pg = **pg_or;
  const bool gpu = std::string(pg.backend_name()) == "nccl";
  const Device device = gpu ? Device::CUDA(cuda::CurrentDevice()) : Device::CPU();
  const int64_t max_bytes = o.max_bytes > 0 ? o.max_bytes : (gpu ? 1024 * kMiB : 16 * kMiB);
  const int n = pg.size();
  const bool print = pg.rank() == 0;
  if (absl::Status s = CheckResult(pg, o.dtype, device); !s.ok()) {
    std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", pg.rank(), std::string(s.message()).c_str());
    return 1;
  }
  absl::StatusOr<Paths> paths = Paths::Make(pg, o.copy_engines);
  if (!paths.ok()) {
    std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", pg.rank(), std::string(paths.status().message()).c_str());
    return 1;
  }
  if (print) {
    std::printf("# tinyddp allreduce_bench: %s, %d ranks, %s SUM, in place%s%s\n", pg.backend_name(), n,
                DTypeName(o.dtype), o.copy_engines ? ", copy engines from 4 MiB" : "",
                gpu ? absl::StrCat(", ", cuda::DeviceDescription(device.index)).c_str() : "");
    std::printf("# %12s %12s %9s %11s %12s %12s  %s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "path");
  }
  std::map<int64_t, std::pair<double, double>> measured;  // bytes -> (us, busbw)
  std::string json_lines;                                   // printed once the table is whole
  for (int64_t bytes : Sizes(o, max_bytes)) {
    const int64_t count = std::max<int64_t>(1, bytes / static_cast<int64_t>(DTypeSize(o.dtype)));
    const int64_t real_bytes = count * DTypeSize(o.dtype);
    Tensor x = Tensor::Full({count}, 1.0, o.dtype, device);
    int iters = o.iters > 0 ? o.iters : (bytes >= 256 * kMiB ? 20 : 100);
    if (!gpu) iters = std::max<int>(3, std::min<int64_t>(iters, 64 * kMiB / real_bytes));  // CPU: ~1 s per size
    const std::string path = paths->Name(x);
    absl::StatusOr<double> us = TimeAllReduce(pg, x, o.warmup, iters, gpu, paths->For(x));
    if (!us.ok()) {
      std::fprintf(stderr, "allreduce_bench: rank %d, %lld bytes: %s\n", pg.rank(), static_cast<long long>(bytes),
                   std::string(us.status().message()).c_str());
      return 1;
    }
    const double algbw = real_bytes / *us / 1e3;  // bytes/us = MB/s; /1e3 = GB/s
    const double busbw = algbw * 2.0 * (n - 1) / n;
    measured[real_bytes] = {*us, busbw};
    if (print) {
      std::printf("  %12lld %12lld %9s %11.2f %12.2f %12.2f  %s\n", static_cast<long long>(real_bytes),
                  static_cast<long long>(count), DTypeName(o.dtype), *us, algbw, busbw, path.c_str());
      auto round3 = [](double v) { return std::round(v * 1000) / 1000; };
      nlohmann::json row = {{"impl", "tinyddp"},
                            {"backend", pg.backend_name()},
                            {"ranks", n},
                            {"bytes", real_bytes},
                            {"count", count},
                            {"type", DTypeName(o.dtype)},
                            {"time_us", round3(*us)},
                            {"algbw_GBps", round3(algbw)},
                            {"busbw_GBps", round3(busbw)},
                            {"path", path}};
      absl::StrAppend(&json_lines, row.dump(), "\n");
      std::fflush(stdout);
    }
  }
  if (print && gpu && n == 2 && o.dtype == DType::kFloat32) {
    std::printf("# vs PyTorch 2.11 on 2x H200 (docs/design.md; target: busbw within 5%%, 8 B latency <= 42 us):\n");
    if (auto it = measured.find(8); it != measured.end()) {
      std::printf("#   8 B: %.2f us vs %.0f us  %s\n", it->second.first, kTorchSmallLatencyUs,
                  it->second.first <= kTorchSmallLatencyUs ? "ok" : "SLOWER");
    }
    for (const auto& [bytes, torch] : kTorchBusbw) {
      auto it = measured.find(bytes);
      if (it == measured.end()) continue;
      const double ratio = it->second.second / torch;
      std::printf("#   %4lld MiB: busbw %.1f vs %.0f GB/s (%.1f%%)  %s\n", static_cast<long long>(bytes / kMiB),
                  it->second.second, torch, 100 * ratio, ratio >= 0.95 ? "ok" : "BELOW TARGET");
    }
  }
  if (print && !o.json_path.empty()) {
    FILE* f = std::fopen(o.json_path.c_str(), "w");
    if (f == nullptr || std::fputs(json_lines.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "allreduce_bench: cannot write --json=%s: %s\n", o.json_path.c_str(), std::strerror(errno));
      return 1;
    }
    std::printf("# JSON lines, one per size: %s\n", o.json_path.c_str());
  } else if (print) {
    std::printf("%s", json_lines.c_str());
  }
  // Leave together: rank 0 may host the store, which the others still use until here.
  if (absl::Status s = pg.Barrier()->Wait(); !s.ok()) return 1;
  return 0;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  const absl::StatusOr<tinyddp::Options> options = tinyddp::ParseFlags(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = tinyddp::dist::SpawnWorkersIfNeeded(argc, argv); !s.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return tinyddp::Run(*options);
}
