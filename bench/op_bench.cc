// op_bench: how fast the tensor engine's kernels run on one GPU (or, with --cpu, on the CPU).
//
//   bazel run -c opt //bench:op_bench                # GPU 0: GEMMs of the three MLPs, memory-bound ops
//   bazel run -c opt //bench:op_bench -- --cpu       # the CPU kernels (tiny MLP, 4M elements)
//   flags: --elements=N (memory-bound ops), --samples=N, --mlps=tiny,medium,large
//
// GEMMs: the forward (x @ W^T + b), backward-data (dY @ W) and backward-weight (dY^T @ X) products of
// every layer of the MLPs in docs/design.md, in TFLOP/s, and their sum per training step. Memory-bound ops
// (copy, add, relu, scale, sum, cross-entropy, SGD with momentum, AdamW) on 64M float32 elements, in
// GB/s of compulsory traffic and as a share of the H200's measured 4.3 TB/s copy bandwidth (the target
// is 80% for elementwise and optimizer kernels). Each figure is the median of --samples samples; a
// sample times enough back-to-back calls to last ~2 ms, with CUDA events on the current stream, after
// warm-up (so the caching allocator and cuBLASLt plans are in their steady state). Prints a table, then
// one JSON line for scripts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

ABSL_FLAG(bool, cpu, false, "measure the CPU kernels instead of GPU 0's");
ABSL_FLAG(int64_t, elements, 0, "elements of the memory-bound ops; 0: 64M on a GPU, 4M on the CPU");
ABSL_FLAG(int32_t, samples, 21, "samples per figure (the median is reported)");
ABSL_FLAG(std::string, mlps, "",
          "MLPs whose GEMMs to time, of tiny,medium,large; empty: all three on a GPU, tiny on the CPU");

namespace tinyddp {
namespace {

constexpr double kCopyPeakGBs = 4300.0;  // H200, measured (docs/design.md)

struct Options {
  bool cpu = false;
  int64_t elements = 0;  // 0: 64M on a GPU, 4M on the CPU
  int samples = 21;
  std::vector<std::string> mlps;  // empty: all three on a GPU, tiny on the CPU
};

const std::vector<FlagGroup>& Flags() {
  static const auto* groups = new std::vector<FlagGroup>{{"flags", {"cpu", "elements", "samples", "mlps"}}};
  return *groups;
}

// The command line, checked; help is set when --help was given.
absl::StatusOr<Options> ParseFlags(int argc, char** argv, bool* help) {
  ASSIGN_OR_RETURN(const CommandLine command_line,
                   ParseCommandLineFlags(std::vector<std::string>(argv + 1, argv + argc), Flags()));
  *help = command_line.help;
  if (!command_line.rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", command_line.rest.front(), "\""));
  }
  Options o;
  o.cpu = absl::GetFlag(FLAGS_cpu);
  o.elements = absl::GetFlag(FLAGS_elements);
  o.samples = absl::GetFlag(FLAGS_samples);
  if (o.elements < 0) return absl::InvalidArgumentError(absl::StrCat("--elements: must be >= 0, got ", o.elements));
  if (o.samples < 1) return absl::InvalidArgumentError(absl::StrCat("--samples: must be >= 1, got ", o.samples));
  const std::string mlps = absl::GetFlag(FLAGS_mlps);
  if (!mlps.empty()) o.mlps = absl::StrSplit(mlps, ',');
  for (const std::string& m : o.mlps) {
    if (m != "tiny" && m != "medium" && m != "large") {
      return absl::InvalidArgumentError(
          absl::StrCat("--mlps=", mlps, ": unknown MLP \"", m, "\" (tiny, medium, large)"));
    }
  }
  if (o.elements == 0) o.elements = o.cpu ? (int64_t{1} << 22) : (int64_t{1} << 26);
  if (o.mlps.empty())
    o.mlps = o.cpu ? std::vector<std::string>{"tiny"} : std::vector<std::string>{"tiny", "medium", "large"};
  return o;
}

// --- Timing --------------------------------------------------------------------------------------------

/// Median milliseconds per call of `fn` on `device`, timed as described at the top of the file.
double MedianMs(Device device, int samples, const std::function<void()>& fn) {
  const bool gpu = device.is_cuda();
  cuda::Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
  auto time_calls = [&](int calls) {
    if (gpu) {
      const cuda::Stream stream = cuda::Stream::Current(device.index);
      start.Record(stream);
      for (int i = 0; i < calls; ++i) fn();
      end.Record(stream);
      end.Synchronize();
      return static_cast<double>(cuda::Event::ElapsedMs(start, end)) / calls;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / calls;
  };
  time_calls(2);  // warm-up: allocator blocks, cuBLASLt plans, scratch
  const double once = time_calls(1);
  const int calls = static_cast<int>(std::clamp(2.0 / std::max(once, 1e-4), 1.0, 1000.0));
  std::vector<double> ms(samples);
  for (double& m : ms) m = time_calls(calls);
  std::nth_element(ms.begin(), ms.begin() + samples / 2, ms.end());
  return ms[samples / 2];
}

Tensor Random(Shape shape, Device device, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kFloat32, device);
  ops::UniformInit(t, -1.0, 1.0, seed);
  return t;
}

// --- GEMMs of the MLPs ---------------------------------------------------------------------------------

struct Mlp {
  std::string name;
  std::vector<int64_t> dims;
  int64_t batch;
};

const std::vector<Mlp> kMlps = {{"tiny", {784, 512, 512, 10}, 64},
                                {"medium", {1024, 4096, 4096, 4096, 4096, 1024}, 256},
                                {"large", {4096, 8192, 8192, 8192, 8192, 4096}, 512}};

struct GemmRow {
  std::string mlp, pass;
  int64_t m, n, k, layers;  // `layers`: how many layers of the MLP have this shape
  double ms;
};

std::vector<GemmRow> BenchGemms(const Mlp& mlp, Device device, int samples) {
  std::vector<GemmRow> rows;
  const int64_t b = mlp.batch;
  for (size_t l = 0; l + 1 < mlp.dims.size(); ++l) {
    const int64_t in = mlp.dims[l], out = mlp.dims[l + 1];
    bool seen = false;  // layers of one shape are timed once and counted `layers` times
    for (size_t j = 0; j < l; ++j) seen = seen || (mlp.dims[j] == in && mlp.dims[j + 1] == out);
    if (seen) continue;
    int64_t layers = 0;
    for (size_t j = 0; j + 1 < mlp.dims.size(); ++j) layers += mlp.dims[j] == in && mlp.dims[j + 1] == out;
    const Tensor x = Random({b, in}, device, 1), w = Random({out, in}, device, 2), bias = Random({out}, device, 3);
    const Tensor dy = Random({b, out}, device, 4);
    Tensor dx = Tensor::Empty({b, in}, DType::kFloat32, device);
    Tensor dw = Tensor::Empty({out, in}, DType::kFloat32, device);
    rows.push_back(
        {mlp.name, "fwd x@W^T+b", b, out, in, layers, MedianMs(device, samples, [&] { ops::Linear(x, w, bias); })});
    rows.push_back({mlp.name, "bwd dX=dY@W", b, in, out, layers,
                    MedianMs(device, samples, [&] { ops::MatMulInto(dx, dy, w, false, false); })});
    rows.push_back({mlp.name, "bwd dW=dY^T@X", out, in, b, layers,
                    MedianMs(device, samples, [&] { ops::MatMulInto(dw, dy, x, true, false); })});
  }
  return rows;
}

// --- Memory-bound ops ----------------------------------------------------------------------------------

struct MemRow {
  std::string op;
  double bytes;  // compulsory traffic: every input read once, every output written once
  double ms;
};

std::vector<MemRow> BenchMemoryBound(int64_t n, Device device, int samples) {
  std::vector<MemRow> rows;
  const double f = 4.0 * static_cast<double>(n);  // bytes of one float32 tensor
  Tensor a = Random({n}, device, 5), b = Random({n}, device, 6);
  Tensor out = Tensor::Empty({n}, DType::kFloat32, device);
  rows.push_back({"copy", 2 * f, MedianMs(device, samples, [&] { ops::CopyInto(out, a); })});
  rows.push_back({"add", 3 * f, MedianMs(device, samples, [&] { ops::Add(a, b); })});
  rows.push_back({"relu", 2 * f, MedianMs(device, samples, [&] { ops::Relu(a); })});
  rows.push_back({"scale", 2 * f, MedianMs(device, samples, [&] { ops::Scale(a, 0.5); })});
  rows.push_back({"sum", f, MedianMs(device, samples, [&] { ops::Sum(a); })});
  {
    const int64_t classes = 1024, batch = n / classes;
    const Tensor logits = a.Rows(0, batch * classes).View({batch, classes});
    std::vector<int64_t> label_values(batch);
    for (int64_t i = 0; i < batch; ++i) label_values[i] = (i * 7919) % classes;
    const Tensor labels = Tensor::FromVector(label_values, {batch}, device);
    Tensor softmax;
    rows.push_back({"cross_entropy [" + std::to_string(batch) + ", 1024]", 2.0 * 4 * batch * classes,
                    MedianMs(device, samples, [&] { ops::CrossEntropy(logits, labels, &softmax); })});
  }
  std::vector<Tensor> p = {Random({n}, device, 7)}, buf = {Tensor::Zeros({n}, DType::kFloat32, device)};
  const std::vector<Tensor> g = {b};
  ops::SgdConfig sgd;
  sgd.lr = 1e-3, sgd.momentum = 0.9, sgd.first_step = false;
  rows.push_back({"sgd_momentum_step", 5 * f,
                  MedianMs(device, samples, [&] { ops::SgdStep(absl::MakeSpan(p), g, absl::MakeSpan(buf), sgd); })});
  std::vector<Tensor> m = {Tensor::Zeros({n}, DType::kFloat32, device)},
                      v = {Tensor::Zeros({n}, DType::kFloat32, device)};
  ops::AdamConfig adam;
  adam.weight_decay = 1e-2;
  rows.push_back({"adamw_step", 7 * f, MedianMs(device, samples, [&] {
                    ops::AdamStep(absl::MakeSpan(p), g, absl::MakeSpan(m), absl::MakeSpan(v), adam);
                  })});
  return rows;
}

// --- Report --------------------------------------------------------------------------------------------

int Run(const Options& o) {
  const Device device = o.cpu ? Device::CPU() : Device::CUDA(0);
  const std::string where = o.cpu ? "CPU (one thread)" : cuda::DeviceDescription(0);
  std::printf("op_bench on %s, float32, median of %d samples\n\n", where.c_str(), o.samples);
  nlohmann::json report = {{"bench", "op_bench"}, {"device", where}, {"samples", o.samples}};

  std::printf("%-7s %-14s %6s %6s %6s %7s %11s %9s\n", "MLP", "GEMM", "M", "N", "K", "layers", "time (us)", "TFLOP/s");
  nlohmann::json gemms = nlohmann::json::array(), step_ms = nlohmann::json::object();
  for (const Mlp& mlp : kMlps) {
    if (std::find(o.mlps.begin(), o.mlps.end(), mlp.name) == o.mlps.end()) continue;
    double step = 0;
    for (const GemmRow& r : BenchGemms(mlp, device, o.samples)) {
      const double tflops = 2.0 * r.m * r.n * r.k / (r.ms * 1e9);
      std::printf("%-7s %-14s %6lld %6lld %6lld %7lld %11.1f %9.3f\n", r.mlp.c_str(), r.pass.c_str(),
                  static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
                  static_cast<long long>(r.layers), r.ms * 1e3, tflops);
      step += r.ms * r.layers;
      gemms.push_back({{"mlp", r.mlp},
                       {"pass", r.pass},
                       {"m", r.m},
                       {"n", r.n},
                       {"k", r.k},
                       {"layers", r.layers},
                       {"us", r.ms * 1e3},
                       {"tflops", tflops}});
    }
    std::printf("%-7s %-14s %37.1f us per step (all layers, forward + both backward GEMMs)\n", mlp.name.c_str(), "sum",
                step * 1e3);
    step_ms[mlp.name] = step;
  }
  report["gemm"] = gemms;
  report["gemm_ms_per_step"] = step_ms;

  std::printf("\n%-34s %11s %10s %s\n", ("memory-bound, " + std::to_string(o.elements) + " elements").c_str(),
              "time (ms)", "GB/s", o.cpu ? "" : "of 4.3 TB/s");
  nlohmann::json mems = nlohmann::json::array();
  for (const MemRow& r : BenchMemoryBound(o.elements, device, o.samples)) {
    const double gbs = r.bytes / (r.ms * 1e6);
    if (o.cpu) {
      std::printf("%-34s %11.3f %10.1f\n", r.op.c_str(), r.ms, gbs);
    } else {
      std::printf("%-34s %11.3f %10.1f %6.1f%%\n", r.op.c_str(), r.ms, gbs, 100.0 * gbs / kCopyPeakGBs);
    }
    mems.push_back({{"op", r.op},
                    {"elements", o.elements},
                    {"ms", r.ms},
                    {"gbps", gbs},
                    {"fraction_of_copy_peak", o.cpu ? 0.0 : gbs / kCopyPeakGBs}});
  }
  report["memory_bound"] = mems;
  std::printf("\n%s\n", report.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tinyddp

int main(int argc, char** argv) {
  bool help = false;
  const absl::StatusOr<tinyddp::Options> options = tinyddp::ParseFlags(argc, argv, &help);
  if (help) {
    std::printf("usage: op_bench [flags]\n\n%s", tinyddp::FlagsHelp(tinyddp::Flags()).c_str());
    return 0;
  }
  if (!options.ok()) {
    std::fprintf(stderr, "op_bench: %s (--help lists the flags)\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (!options->cpu && tinyddp::cuda::DeviceCount() == 0) {
    std::printf("op_bench: no CUDA device (%s); run with --cpu to measure the CPU kernels instead.\n",
                tinyddp::cuda::BuiltWithCuda() ? "none visible" : "built without CUDA");
    return 0;
  }
  return tinyddp::Run(*options);
}
