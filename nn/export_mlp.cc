// export_mlp: the C++ half of the PyTorch interoperability check (tools/safetensors_torch_check.py).
//
//   export_mlp --out_dir=DIR    writes DIR/mlp.safetensors (a 784-32-10 ReLU MLP, PyTorch state_dict
//                               names) and DIR/io.safetensors ("input" [4, 784], "output" [4, 10] = mlp(input))
//   export_mlp --check_dir=DIR  loads DIR/torch_mlp.safetensors (written by PyTorch) into the same MLP
//                               strictly, runs DIR/torch_io.safetensors "input" through it and compares
//                               with its "output"; exit status 0 when they agree
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "autograd/grad_mode.h"
#include "base/status_macros.h"
#include "nn/checkpoint.h"
#include "nn/mlp.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"

ABSL_FLAG(std::string, out_dir, "", "write mlp.safetensors and io.safetensors here");
ABSL_FLAG(std::string, check_dir, "", "check torch_mlp.safetensors against torch_io.safetensors here");
ABSL_FLAG(double, tolerance, 1e-5, "largest accepted |ours - torch| of an output element");

namespace tinyddp::nn {
namespace {

const std::vector<int64_t> kDims = {784, 32, 10};

Variable Run(Module& model, const Tensor& input) {
  autograd::NoGradGuard no_grad;
  return model(Variable(input));
}

absl::Status Export(const std::string& dir) {
  MlpOptions options;
  options.seed = 2024;
  auto model = MLP(kDims, options);
  Tensor input = Tensor::Empty({4, 784});
  ops::UniformInit(input, 0.0, 1.0, 99);  // like pixels scaled to [0, 1]
  const Tensor output = Run(*model, input).data();
  RETURN_IF_ERROR(SaveModule(*model, dir + "/mlp.safetensors"));
  if (absl::Status s = SaveSafetensors(dir + "/io.safetensors", {{"input", input}, {"output", output}}); !s.ok()) {
    return s;
  }
  std::printf("wrote %s/mlp.safetensors (%s) and %s/io.safetensors\n", dir.c_str(), model->ToString().c_str(),
              dir.c_str());
  return absl::OkStatus();
}

absl::Status Check(const std::string& dir, double tolerance) {
  auto model = MLP(kDims);
  RETURN_IF_ERROR(LoadModule(*model, dir + "/torch_mlp.safetensors"));
  absl::StatusOr<SafetensorsContents> io = LoadSafetensors(dir + "/torch_io.safetensors");
  RETURN_IF_ERROR(io);
  if (io->tensors.count("input") == 0 || io->tensors.count("output") == 0) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/torch_io.safetensors must hold 'input' and 'output'"));
  }
  const std::vector<float> ours = Run(*model, io->tensors.at("input")).data().ToVector<float>();
  const std::vector<float> theirs = io->tensors.at("output").ToVector<float>();
  if (ours.size() != theirs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("output sizes differ: ours ", ours.size(), ", torch ", theirs.size()));
  }
  double max_diff = 0;
  for (size_t i = 0; i < ours.size(); ++i) max_diff = std::max(max_diff, std::abs(double{ours[i]} - theirs[i]));
  std::printf("torch -> tinyddp: loaded strictly, max |ours - torch| over %zu outputs = %.3g (tolerance %.3g)\n",
              ours.size(), max_diff, tolerance);
  if (max_diff > tolerance) return absl::InternalError("outputs differ from PyTorch's");
  return absl::OkStatus();
}

}  // namespace
}  // namespace tinyddp::nn

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string out_dir = absl::GetFlag(FLAGS_out_dir), check_dir = absl::GetFlag(FLAGS_check_dir);
  if (out_dir.empty() == check_dir.empty()) {
    std::fprintf(stderr, "export_mlp: pass exactly one of --out_dir=DIR or --check_dir=DIR\n");
    return 2;
  }
  const absl::Status status = out_dir.empty() ? tinyddp::nn::Check(check_dir, absl::GetFlag(FLAGS_tolerance))
                                              : tinyddp::nn::Export(out_dir);
  if (!status.ok()) {
    std::fprintf(stderr, "export_mlp: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
