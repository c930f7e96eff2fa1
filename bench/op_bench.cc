// op_bench: how fast the tensor engine's kernels run on one GPU (or, with --cpu, on the CPU).
//
//   bazel run -c opt //bench:op_bench                # GPU 0: GEMMs of the three MLPs, memory-bound ops
//   bazel run -c opt //bench:op_bench -- --cpu       # the CPU kernels (tiny MLP, 4M elements)
//   flags: --elements=N (memory-bound ops), --samples=N, --mlps=tiny,medium,large,
//          --precisions=fp32,bf16 (default both on a GPU, fp32 on the CPU)
//
// GEMMs: the forward (x @ W^T + b), backward-data (dY @ W) and backward-weight (dY^T @ X) products of
// every layer of the three MLPs (tiny, medium, large), in TFLOP/s, and their sum per training step. In
// bf16 the passes are the ones mixed-precision training runs: the forward with bias and ReLU fused
// (LinearRelu), dX in bf16, and dW from bf16 operands into a float32 gradient (plus, not counted in the
// sum, dW into bf16, the variant for gradients reduced in bf16), against the H200's measured bf16 GEMM
// ceiling of ~790 TFLOP/s (dense, random data). Memory-bound ops (copy, add, relu, scale, sum,
// cross-entropy, SGD with momentum, AdamW; in bf16: casts, relu and its backward, the bias-gradient
// column sum, cross-entropy of bf16 logits, and the optimizer steps that also write bf16 copies of the
// weights) on 64M elements, in GB/s of compulsory traffic and as a share of the H200's measured
// 4.3 TB/s copy bandwidth (the target is 80% for elementwise and optimizer kernels). Each figure is the
// median of --samples samples; a
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
ABSL_FLAG(std::string, precisions, "", "of fp32,bf16; empty: both on a GPU, fp32 on the CPU");

namespace tinyddp {
namespace {

constexpr double kCopyPeakGBs = 4300.0;       // H200, measured
constexpr double kBf16GemmPeakTflops = 790.0;  // H200, dense bf16 GEMM on random data, measured

struct Options {
  bool cpu = false;
  int64_t elements = 0;  // 0: 64M on a GPU, 4M on the CPU
  int samples = 21;
  std::vector<std::string> mlps;        // empty: all three on a GPU, tiny on the CPU
  std::vector<std::string> precisions;  // empty: fp32 and bf16 on a GPU, fp32 on the CPU
};

const std::vector<FlagGroup>& Flags() {
  static const auto* groups = new std::vector<FlagGroup>{{"flags", {"cpu", "elements", "samples", "mlps", "precisions"}}};
  return *groups;
}

bool Has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
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
  const std::string precisions = absl::GetFlag(FLAGS_precisions);
  if (!precisions.empty()) o.precisions = absl::StrSplit(precisions, ',');
  for (const std::string& p : o.precisions) {
    if (p != "fp32" && p != "bf16") {
      return absl::InvalidArgumentError(
          absl::StrCat("--precisions=", precisions, ": unknown precision \"", p, "\" (fp32, bf16)"));
    }
  }
  if (o.elements == 0) o.elements = o.cpu ? (int64_t{1} << 22) : (int64_t{1} << 26);
  if (o.mlps.empty())
    o.mlps = o.cpu ? std::vector<std::string>{"tiny"} : std::vector<std::string>{"tiny", "medium", "large"};
  if (o.precisions.empty())
    o.precisions = o.cpu ? std::vector<std::string>{"fp32"} : std::vector<std::string>{"fp32", "bf16"};
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

Tensor Random(Shape shape, Device device, uint64_t seed, DType dtype = DType::kFloat32) {
  Tensor t = Tensor::Empty(std::move(shape), dtype, device);
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
  bool in_step = true;  // counted in the per-step sum
};

/// The GEMMs of one training step in float32 (`bf16` false) or mixed precision (`bf16` true).
std::vector<GemmRow> BenchGemms(const Mlp& mlp, Device device, int samples, bool bf16) {
  std::vector<GemmRow> rows;
  const int64_t b = mlp.batch;
  for (size_t l = 0; l + 1 < mlp.dims.size(); ++l) {
    const int64_t in = mlp.dims[l], out = mlp.dims[l + 1];
    bool seen = false;  // layers of one shape are timed once and counted `layers` times
    for (size_t j = 0; j < l; ++j) seen = seen || (mlp.dims[j] == in && mlp.dims[j + 1] == out);
    if (seen) continue;
    int64_t layers = 0;
    for (size_t j = 0; j + 1 < mlp.dims.size(); ++j) layers += mlp.dims[j] == in && mlp.dims[j + 1] == out;
    if (bf16) {
      const DType h = DType::kBFloat16;
      const Tensor x = Random({b, in}, device, 1, h), w = Random({out, in}, device, 2, h);
      const Tensor bias = Random({out}, device, 3, h), dy = Random({b, out}, device, 4, h);
      Tensor dx = Tensor::Empty({b, in}, h, device);
      Tensor dw = Tensor::Empty({out, in}, DType::kFloat32, device), dw16 = Tensor::Empty({out, in}, h, device);
      rows.push_back({mlp.name, "fwd relu(xW^T+b)", b, out, in, layers,
                      MedianMs(device, samples, [&] { ops::LinearRelu(x, w, bias); })});
      rows.push_back({mlp.name, "bwd dX=dY@W", b, in, out, layers,
                      MedianMs(device, samples, [&] { ops::MatMulInto(dx, dy, w, false, false); })});
      rows.push_back({mlp.name, "bwd dW->fp32", out, in, b, layers,
                      MedianMs(device, samples, [&] { ops::MatMulInto(dw, dy, x, true, false); })});
      rows.push_back({mlp.name, "bwd dW->bf16", out, in, b, layers,
                      MedianMs(device, samples, [&] { ops::MatMulInto(dw16, dy, x, true, false); }), false});
      continue;
    }
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

/// The memory-bound work of a mixed-precision step: casts, bf16 activations, the bias gradient, the
/// loss of bf16 logits, and the optimizer steps that write bf16 copies (fp32 master weights and state).
std::vector<MemRow> BenchMemoryBoundBf16(int64_t n, Device device, int samples) {
  std::vector<MemRow> rows;
  const DType h = DType::kBFloat16;
  const double f = 4.0 * static_cast<double>(n), half = 2.0 * static_cast<double>(n);  // bytes of n fp32 / bf16
  const Tensor a32 = Random({n}, device, 5);
  const Tensor a = Random({n}, device, 5, h), b = Random({n}, device, 6, h);
  Tensor out16 = Tensor::Empty({n}, h, device), out32 = Tensor::Empty({n}, DType::kFloat32, device);
  rows.push_back({"bf16 cast fp32->bf16", f + half, MedianMs(device, samples, [&] { ops::CastInto(out16, a32); })});
  rows.push_back({"bf16 cast bf16->fp32", half + f, MedianMs(device, samples, [&] { ops::CastInto(out32, a); })});
  rows.push_back({"bf16 relu", 2 * half, MedianMs(device, samples, [&] { ops::Relu(a); })});
  rows.push_back({"bf16 relu_backward", 3 * half, MedianMs(device, samples, [&] { ops::ReluBackward(a, b); })});
  {
    const int64_t cols = 8192, batch = n / cols;  // the large MLP's bias gradient, repeated to n elements
    const Tensor dy = a.Rows(0, batch * cols).View({batch, cols});
    Tensor db = Tensor::Zeros({cols}, DType::kFloat32, device);
    rows.push_back({"bf16 sum_rows->fp32 [" + std::to_string(batch) + ", 8192]", 2.0 * batch * cols,
                    MedianMs(device, samples, [&] { ops::SumRowsInto(db, dy, 1.f); })});
  }
  {
    const int64_t classes = 1024, batch = n / classes;
    const Tensor logits = a.Rows(0, batch * classes).View({batch, classes});
    std::vector<int64_t> label_values(batch);
    for (int64_t i = 0; i < batch; ++i) label_values[i] = (i * 7919) % classes;
    const Tensor labels = Tensor::FromVector(label_values, {batch}, device);
    Tensor softmax;  // read bf16 logits, write the fp32 softmax
    rows.push_back({"bf16 cross_entropy [" + std::to_string(batch) + ", 1024]", 6.0 * batch * classes,
                    MedianMs(device, samples, [&] { ops::CrossEntropy(logits, labels, &softmax); })});
  }
  std::vector<Tensor> p = {Random({n}, device, 7)}, buf = {Tensor::Zeros({n}, DType::kFloat32, device)};
  std::vector<Tensor> copies = {Tensor::Empty({n}, h, device)};
  const std::vector<Tensor> g32 = {a32}, g16 = {b};
  ops::SgdConfig sgd;
  sgd.lr = 1e-3, sgd.momentum = 0.9, sgd.first_step = false;
  // p and buf read and written, g read (fp32 or bf16), the bf16 copy written.
  rows.push_back({"sgd_momentum + bf16 copy, fp32 grads", 5 * f + half, MedianMs(device, samples, [&] {
                    ops::SgdStep(absl::MakeSpan(p), g32, absl::MakeSpan(buf), sgd, absl::MakeSpan(copies));
                  })});
  rows.push_back({"sgd_momentum + bf16 copy, bf16 grads", 4 * f + 2 * half, MedianMs(device, samples, [&] {
                    ops::SgdStep(absl::MakeSpan(p), g16, absl::MakeSpan(buf), sgd, absl::MakeSpan(copies));
                  })});
  std::vector<Tensor> m = {Tensor::Zeros({n}, DType::kFloat32, device)},
                      v = {Tensor::Zeros({n}, DType::kFloat32, device)};
  ops::AdamConfig adam;
  adam.weight_decay = 1e-2;
  rows.push_back({"adamw + bf16 copy, fp32 grads", 7 * f + half, MedianMs(device, samples, [&] {
                    ops::AdamStep(absl::MakeSpan(p), g32, absl::MakeSpan(m), absl::MakeSpan(v), adam,
                                  absl::MakeSpan(copies));
                  })});
  return rows;
}

// --- Report --------------------------------------------------------------------------------------------

int Run(const Options& o) {
  const Device device = o.cpu ? Device::CPU() : Device::CUDA(0);
  const std::string where = o.cpu ? "CPU (one thread)" : cuda::DeviceDescription(0);
  std::printf("op_bench on %s, median of %d samples\n", where.c_str(), o.samples);
  nlohmann::json report = {{"bench", "op_bench"}, {"device", where}, {"samples", o.samples}};

  nlohmann::json gemms = nlohmann::json::array(), step_ms = nlohmann::json::object();
  for (const std::string& precision : o.precisions) {
    const bool bf16 = precision == "bf16";
    std::printf("\n%-7s %-17s %6s %6s %6s %7s %11s %9s %s\n", "MLP", (precision + " GEMM").c_str(), "M", "N", "K",
                "layers", "time (us)", "TFLOP/s", bf16 && !o.cpu ? "of 790" : "");
    for (const Mlp& mlp : kMlps) {
      if (!Has(o.mlps, mlp.name)) continue;
      double step = 0;
      for (const GemmRow& r : BenchGemms(mlp, device, o.samples, bf16)) {
        const double tflops = 2.0 * r.m * r.n * r.k / (r.ms * 1e9);
        std::printf("%-7s %-17s %6lld %6lld %6lld %7lld %11.1f %9.3f", r.mlp.c_str(), r.pass.c_str(),
                    static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
                    static_cast<long long>(r.layers), r.ms * 1e3, tflops);
        if (bf16 && !o.cpu) std::printf(" %5.1f%%", 100.0 * tflops / kBf16GemmPeakTflops);
        std::printf("%s\n", r.in_step ? "" : "  (not in the sum)");
        if (r.in_step) step += r.ms * r.layers;
        gemms.push_back({{"precision", precision},
                         {"mlp", r.mlp},
                         {"pass", r.pass},
                         {"m", r.m},
                         {"n", r.n},
                         {"k", r.k},
                         {"layers", r.layers},
                         {"us", r.ms * 1e3},
                         {"tflops", tflops},
                         {"in_step", r.in_step}});
      }
      std::printf("%-7s %-17s %37.1f us per step (all layers, forward + both backward GEMMs)\n", mlp.name.c_str(),
                  "sum", step * 1e3);
      step_ms[precision + " " + mlp.name] = step;
    }
  }
  report["gemm"] = gemms;
  report["gemm_ms_per_step"] = step_ms;

  std::printf("\n%-40s %11s %10s %s\n", ("memory-bound, " + std::to_string(o.elements) + " elements").c_str(),
              "time (ms)", "GB/s", o.cpu ? "" : "of 4.3 TB/s");
  nlohmann::json mems = nlohmann::json::array();
  std::vector<MemRow> mem_rows;
  if (Has(o.precisions, "fp32")) mem_rows = BenchMemoryBound(o.elements, device, o.samples);
  if (Has(o.precisions, "bf16")) {
    for (MemRow& r : BenchMemoryBoundBf16(o.elements, device, o.samples)) mem_rows.push_back(std::move(r));
  }
  for (const MemRow& r : mem_rows) {
    const double gbs = r.bytes / (r.ms * 1e6);
    if (o.cpu) {
      std::printf("%-40s %11.3f %10.1f\n", r.op.c_str(), r.ms, gbs);
    } else {
      std::printf("%-40s %11.3f %10.1f %6.1f%%\n", r.op.c_str(), r.ms, gbs, 100.0 * gbs / kCopyPeakGBs);
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
