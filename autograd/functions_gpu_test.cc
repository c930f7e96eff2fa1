// Every differentiable op gives the same value and the same gradients on CUDA as on the CPU (float32,
// random inputs, odd shapes, random seed gradient). The CPU side is itself checked by gradcheck.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"

namespace tinyddp::autograd {
namespace {

using Vars = std::vector<Variable>;
using Fn = std::function<Variable(const Vars&)>;

void ExpectClose(const Tensor& cpu, const Tensor& gpu, const std::string& what, double rtol) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  const std::vector<float> c = cpu.ToVector<float>(), g = gpu.ToVector<float>();
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(c[i], g[i], 0.1 * rtol + rtol * std::abs(c[i])) << what << " element " << i;
  }
}

// Runs f forward and backward on both devices from the same inputs and seed, and compares (relative
// tolerance rtol; float32 math agrees to 1e-4, bfloat16 math to a rounding step of 2^-8 here and there).
void CompareDevices(const std::string& name, const Fn& f, const std::vector<Shape>& shapes, double low = -1.0,
                    double high = 1.0, double rtol = 1e-4) {
  SCOPED_TRACE(name);
  Vars cpu, gpu;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor t = Tensor::Empty(shapes[i]);
    ops::UniformInit(t, low, high, 10 + i);
    cpu.emplace_back(t, true);
    gpu.emplace_back(t.To(Device::CUDA(0)), true);
  }
  const Variable y_cpu = f(cpu), y_gpu = f(gpu);
  ExpectClose(y_cpu.data(), y_gpu.data(), "value", rtol);
  Tensor seed = Tensor::Empty(y_cpu.shape());
  ops::UniformInit(seed, -1.0, 1.0, 99);
  Backward(y_cpu, seed);
  Backward(y_gpu, seed.To(Device::CUDA(0)));
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(gpu[i].grad().device(), Device::CUDA(0));
    ExpectClose(cpu[i].grad(), gpu[i].grad(), "gradient of input " + std::to_string(i), rtol);
  }
}

TEST(FunctionsOnGpu, EveryOpMatchesTheCpu) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Tensor labels = Tensor::FromVector<int64_t>({4, 0, 2, 2, 1, 3, 0}, {7});
  const Tensor gpu_labels = labels.To(Device::CUDA(0));
  auto labels_for = [&](const Variable& v) { return v.device().is_cpu() ? labels : gpu_labels; };
  CompareDevices("Linear", [](const Vars& v) { return Linear(v[0], v[1], v[2]); }, {{7, 33}, {5, 33}, {5}});
  CompareDevices("LinearNoBias", [](const Vars& v) { return Linear(v[0], v[1], Variable()); }, {{7, 33}, {5, 33}});
  CompareDevices("LinearRelu", [](const Vars& v) { return LinearRelu(v[0], v[1], v[2]); }, {{7, 33}, {5, 33}, {5}});
  CompareDevices("LinearReluNoBias", [](const Vars& v) { return LinearRelu(v[0], v[1], Variable()); },
                 {{7, 33}, {5, 33}});
  // Mixed precision: bfloat16 input and stand-in weights, float32 parameters and their float32 gradients
  // (the output is cast back to float32 only to compare it).
  auto mixed = [](bool relu) {
    return [relu](const Vars& v) {
      const Variable x = Cast(v[0], DType::kBFloat16);
      const LinearValues values{ops::Cast(v[1].data(), DType::kBFloat16), ops::Cast(v[2].data(), DType::kBFloat16)};
      return Cast(relu ? LinearRelu(x, v[1], v[2], values) : Linear(x, v[1], v[2], values), DType::kFloat32);
    };
  };
  CompareDevices("MixedLinear", mixed(false), {{37, 129}, {19, 129}, {19}}, -1.0, 1.0, 2e-2);
  CompareDevices("MixedLinearRelu", mixed(true), {{37, 129}, {19, 129}, {19}}, -1.0, 1.0, 2e-2);
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      CompareDevices("MatMul" + std::to_string(ta) + std::to_string(tb),
                     [ta, tb](const Vars& v) { return MatMul(v[0], v[1], ta, tb); },
                     {ta ? Shape{9, 7} : Shape{7, 9}, tb ? Shape{5, 9} : Shape{9, 5}});
    }
  }
  CompareDevices("Add", [](const Vars& v) { return v[0] + v[1]; }, {{3, 1001}, {3, 1001}});
  CompareDevices("Sub", [](const Vars& v) { return v[0] - v[1]; }, {{1001}, {1001}});
  CompareDevices("Mul", [](const Vars& v) { return v[0] * v[1]; }, {{17, 3}, {17, 3}});
  CompareDevices("Div", [](const Vars& v) { return v[0] / v[1]; }, {{17, 3}, {17, 3}}, 0.5, 2.0);
  CompareDevices("Scale", [](const Vars& v) { return Scale(v[0], 0.3); }, {{1, 7}});
  CompareDevices("AddRowVector", [](const Vars& v) { return AddRowVector(v[0], v[1]); }, {{13, 7}, {7}});
  CompareDevices("View", [](const Vars& v) { return View(v[0], {7, -1}) * v[1]; }, {{21}, {7, 3}});
  CompareDevices("Relu", [](const Vars& v) { return Relu(v[0]); }, {{5, 77}});
  CompareDevices("Gelu", [](const Vars& v) { return Gelu(v[0]); }, {{5, 77}}, -3.0, 3.0);
  CompareDevices("SumAll", [](const Vars& v) { return Sum(v[0]); }, {{7, 1000}});
  CompareDevices("MeanAll", [](const Vars& v) { return Mean(v[0]); }, {{7, 1000}});
  for (int64_t dim : {0, 1, 2}) {
    CompareDevices("SumDim" + std::to_string(dim), [dim](const Vars& v) { return Sum(v[0], dim); }, {{3, 5, 7}});
    CompareDevices("MeanDim" + std::to_string(dim), [dim](const Vars& v) { return Mean(v[0], dim, true); },
                   {{3, 5, 7}});
  }
  CompareDevices("LogSoftmax", [](const Vars& v) { return LogSoftmax(v[0]); }, {{7, 5}}, -3.0, 3.0);
  CompareDevices("CrossEntropy", [&](const Vars& v) { return CrossEntropy(v[0], labels_for(v[0])); }, {{7, 5}},
                 -3.0, 3.0);
  CompareDevices("MseLoss", [](const Vars& v) { return MseLoss(v[0], v[1]); }, {{6, 7}, {6, 7}});
}

}  // namespace
}  // namespace tinyddp::autograd
