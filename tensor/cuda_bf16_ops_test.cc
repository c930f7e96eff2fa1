// The bfloat16 backend sweep: every op of tensor/ops.h that takes bfloat16 runs on the GPU and on the
// CPU (cpu_bf16.cc) with the same random inputs, and the answers are compared. Sizes are odd (the
// vectorised kernels' scalar tails run), some views start one element into their storage (the
// misaligned paths run), matrix shapes include ones cuBLASLt handles and ones it hands to
// cublasGemmEx, and each GPU output block is filled with 0xFF bytes first (a NaN in bfloat16 and
// float32), so an element a kernel forgets to write cannot pass.
//
// Exact (bit for bit): everything computed in float32 and rounded once in the same order on both
// sides (elementwise, the cross-entropy backward, the optimizer steps and their bfloat16 copies).
// Within a bfloat16 ulp: GEMMs (float32 accumulation in a different order can move a result across a
// rounding boundary) and anything through exp/log/tanh. Sums within float32 rounding of their scale.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"
#include "tensor/testing/bf16_test_util.h"
#include "tensor/testing/cuda_test_util.h"
#include "tensor/testing/ops_test_util.h"

namespace tinyddp {
namespace {

using ::tinyddp::testing::ExpectAllNear;
using ::tinyddp::testing::Floats;
using ::tinyddp::testing::RandomBf16Values;

const Device kGpu = Device::CUDA(0);
constexpr DType kBf16 = DType::kBFloat16;
const std::vector<int64_t> kSizes = {1, 7, 1000, (1 << 20) + 3};

// --- Helpers -------------------------------------------------------------------------------------------

/// Random bfloat16 values as a bfloat16 CPU tensor.
Tensor RandomBf16(Shape shape, uint32_t seed, double low = -1.0, double high = 1.0) {
  return ops::Cast(RandomBf16Values(std::move(shape), seed, low, high), kBf16);
}

/// A GPU copy of `cpu`; with `misaligned`, a view starting one element into its storage.
Tensor Gpu(const Tensor& cpu, bool misaligned = false) {
  if (!misaligned) return cpu.To(kGpu);
  Tensor storage = Tensor::Empty({cpu.numel() + 1}, cpu.dtype(), kGpu);
  Tensor view = storage.Rows(1, cpu.numel() + 1).View(cpu.shape());
  ops::CopyInto(view, cpu);
  return view;
}

/// Fills a block of the size class of `t` with 0xFF and gives it back, so the next output of that size
/// (the caching allocator hands the most recently freed block out first) starts as NaNs.
void PoisonNextLike(const Tensor& t) {
  Tensor junk = Tensor::Empty({static_cast<int64_t>(t.nbytes() == 0 ? 1 : t.nbytes())}, DType::kUInt8, kGpu);
  ops::Fill(junk, 255);
}

/// The GPU result has exactly the CPU result's bytes.
void ExpectBitwiseEqual(const Tensor& want, const Tensor& got_gpu, const std::string& what) {
  const Tensor got = got_gpu.To(Device::CPU());
  ASSERT_EQ(want.shape(), got.shape()) << what;
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  const size_t es = DTypeSize(want.dtype());
  const auto* a = static_cast<const unsigned char*>(want.data_ptr());
  const auto* b = static_cast<const unsigned char*>(got.data_ptr());
  const std::vector<float> wf = Floats(want), gf = Floats(got);
  int64_t misses = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::memcmp(a + i * es, b + i * es, es) == 0) continue;
    if (++misses <= 5) ADD_FAILURE() << what << " element " << i << ": cuda " << gf[i] << ", cpu " << wf[i];
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.numel() << " elements differ";
}

/// |gpu - cpu| <= rtol * |cpu| + atol * max(1, max |cpu|) elementwise (float32 or bfloat16 tensors).
void ExpectClose(const Tensor& want, const Tensor& got_gpu, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(want.dtype(), got_gpu.dtype()) << what;
  const std::vector<float> w = Floats(want), g = Floats(got_gpu.To(Device::CPU()));
  std::vector<double> wd(w.begin(), w.end()), gd(g.begin(), g.end());
  double scale = 1;
  for (double v : wd) scale = std::fmax(scale, std::fabs(v));
  ExpectAllNear(gd, wd, atol * scale, rtol, what);
}

/// Within a bfloat16 ulp (2^-8 relative) of the CPU, plus half an ulp of the output's scale for
/// results that cancel (a GEMM's float32 accumulation order differs between cuBLAS and Eigen).
void ExpectWithinBf16Ulp(const Tensor& want, const Tensor& got_gpu, const std::string& what) {
  ExpectClose(want, got_gpu, 1.0 / 128, 1.0 / 512, what);
}

std::string Case(const Shape& shape, bool misaligned = false) {
  return absl::StrCat(ShapeToString(shape), misaligned ? " misaligned" : "");
}

// --- Elementwise ---------------------------------------------------------------------------------------

TEST(CudaBf16Ops, ElementwiseOpsMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (int64_t n : kSizes) {
    for (bool misaligned : {false, true}) {
      Tensor a = RandomBf16({n}, 1, -3.0, 3.0);
      const Tensor b = RandomBf16({n}, 2, 0.25, 2.0);
      for (int64_t i = 0; i < n; i += 5) a.data<BFloat16>()[i] = BFloat16(0.f);  // the y <= 0 boundary
      const Tensor ga = Gpu(a, misaligned), gb = Gpu(b, misaligned);
      const std::string c = Case({n}, misaligned);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::Add(a, b), ops::Add(ga, gb), "Add " + c);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::Sub(a, b), ops::Sub(ga, gb), "Sub " + c);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::Mul(a, b), ops::Mul(ga, gb), "Mul " + c);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::Div(a, b), ops::Div(ga, gb), "Div " + c);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::Scale(a, 0.37), ops::Scale(ga, 0.37), "Scale " + c);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::Relu(a), ops::Relu(ga), "Relu " + c);
      PoisonNextLike(a);
      ExpectBitwiseEqual(ops::ReluBackward(b, a), ops::ReluBackward(gb, ga), "ReluBackward " + c);

      Tensor dst = a.Clone(), gdst = Gpu(a, misaligned);
      ops::AddInto(dst, b, -0.61);
      ops::AddInto(gdst, gb, -0.61);
      ExpectBitwiseEqual(dst, gdst, "AddInto " + c);
      ops::ScaleInPlace(dst, 1.7);
      ops::ScaleInPlace(gdst, 1.7);
      ExpectBitwiseEqual(dst, gdst, "ScaleInPlace " + c);
    }
  }
}

TEST(CudaBf16Ops, GeluAndItsBackwardMatchTheCpuWithinAnUlp) {
  TINYDDP_REQUIRE_GPU();
  for (int64_t n : kSizes) {
    const Tensor x = RandomBf16({n}, 3, -4.0, 4.0), g = RandomBf16({n}, 4);
    const Tensor gx = Gpu(x), gg = Gpu(g);
    PoisonNextLike(x);
    ExpectClose(ops::Gelu(x), ops::Gelu(gx), 1.0 / 128, 1e-6, "Gelu " + Case({n}));
    PoisonNextLike(x);
    ExpectClose(ops::GeluBackward(g, x), ops::GeluBackward(gg, gx), 1.0 / 128, 1e-6, "GeluBackward " + Case({n}));
  }
}

TEST(CudaBf16Ops, AddRowVectorAndCastsMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1, 1}, Shape{7, 13}, Shape{1000, 33}, Shape{129, 1024}}) {
    for (bool misaligned : {false, true}) {
      const Tensor x = RandomBf16(shape, 5), row = RandomBf16({shape[1]}, 6);
      PoisonNextLike(x);
      ExpectBitwiseEqual(ops::AddRowVector(x, row), ops::AddRowVector(Gpu(x, misaligned), Gpu(row, misaligned)),
                         "AddRowVector " + Case(shape, misaligned));
      const Tensor f = testing::RandomTensor(shape, DType::kFloat32, 7, -50.0, 50.0);
      PoisonNextLike(x);
      ExpectBitwiseEqual(ops::Cast(f, kBf16), ops::Cast(Gpu(f, misaligned), kBf16), "Cast f32->bf16 " + Case(shape));
      PoisonNextLike(f);
      ExpectBitwiseEqual(ops::Cast(x, DType::kFloat32), ops::Cast(Gpu(x, misaligned), DType::kFloat32),
                         "Cast bf16->f32 " + Case(shape));
    }
  }
}

// --- Matrix products -----------------------------------------------------------------------------------

// [m, n, k]: a cuBLASLt shape (every leading dimension a multiple of 8 elements), odd shapes that may go
// to cublasGemmEx, and the tiny MLP's last layer (n = 10).
const std::vector<std::vector<int64_t>> kGemmShapes = {{64, 512, 784}, {37, 29, 133}, {64, 10, 512}, {1, 1, 1}};

TEST(CudaBf16Ops, MatMulMatchesTheCpuWithinAnUlpForEveryTransposeAndOutputDType) {
  TINYDDP_REQUIRE_GPU();
  for (const auto& mnk : kGemmShapes) {
    const int64_t m = mnk[0], n = mnk[1], k = mnk[2];
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = RandomBf16(ta ? Shape{k, m} : Shape{m, k}, 8);
        const Tensor b = RandomBf16(tb ? Shape{n, k} : Shape{k, n}, 9);
        const Tensor ga = Gpu(a), gb = Gpu(b);
        const std::string c = absl::StrCat("m=", m, " n=", n, " k=", k, " trans_a=", ta, " trans_b=", tb);
        PoisonNextLike(Tensor::Empty({m, n}, kBf16));
        ExpectWithinBf16Ulp(ops::MatMul(a, b, ta, tb), ops::MatMul(ga, gb, ta, tb), "MatMul bf16 " + c);

        // bf16 inputs, float32 out (the weight gradient), written over NaNs with beta 0 and then
        // accumulated with beta 1: float32 results, compared at float32 accuracy.
        const Tensor start = testing::RandomTensor({m, n}, DType::kFloat32, 10);
        for (float beta : {0.f, 1.f}) {
          Tensor want = start.Clone(), got = Gpu(start);
          if (beta == 0.f) ops::Fill(got, std::nan(""));
          ops::MatMulInto(want, a, b, ta, tb, 0.5f, beta);
          ops::MatMulInto(got, ga, gb, ta, tb, 0.5f, beta);
          ExpectClose(want, got, 1e-5, 1e-5, absl::StrCat("MatMulInto float32 out beta=", beta, " ", c));
        }
        // bf16 out accumulated with beta 1: beta * out added in float32 before the one rounding.
        Tensor want16 = RandomBf16({m, n}, 11), got16 = Gpu(want16);
        ops::MatMulInto(want16, a, b, ta, tb, 1.f, 1.f);
        ops::MatMulInto(got16, ga, gb, ta, tb, 1.f, 1.f);
        ExpectWithinBf16Ulp(want16, got16, "MatMulInto bf16 out beta=1 " + c);
      }
    }
  }
}

TEST(CudaBf16Ops, LinearAndLinearReluMatchTheCpuWithAndWithoutTheirFusedEpilogue) {
  TINYDDP_REQUIRE_GPU();
  for (const auto& mnk : kGemmShapes) {
    const int64_t batch = mnk[0], out = mnk[1], in = mnk[2];
    const Tensor x = RandomBf16({batch, in}, 12), w = RandomBf16({out, in}, 13), bias = RandomBf16({out}, 14);
    for (bool with_bias : {true, false}) {
      const Tensor b = with_bias ? bias : Tensor(), gb = with_bias ? Gpu(bias) : Tensor();
      const std::string c = absl::StrCat(Case({batch, out, in}), with_bias ? " with bias" : " without bias");
      PoisonNextLike(Tensor::Empty({batch, out}, kBf16));
      ExpectWithinBf16Ulp(ops::Linear(x, w, b), ops::Linear(Gpu(x), Gpu(w), gb), "Linear " + c);
      PoisonNextLike(Tensor::Empty({batch, out}, kBf16));
      const Tensor relu = ops::LinearRelu(Gpu(x), Gpu(w), gb);
      ExpectWithinBf16Ulp(ops::LinearRelu(x, w, b), relu, "LinearRelu " + c);
      for (float v : Floats(relu.To(Device::CPU()))) ASSERT_GE(v, 0.f) << "LinearRelu " << c;
      // float32 takes the same epilogue path.
      const Tensor x32 = ops::Cast(x, DType::kFloat32), w32 = ops::Cast(w, DType::kFloat32);
      const Tensor b32 = with_bias ? ops::Cast(bias, DType::kFloat32) : Tensor();
      ExpectClose(ops::LinearRelu(x32, w32, b32), ops::LinearRelu(Gpu(x32), Gpu(w32), with_bias ? Gpu(b32) : Tensor()),
                  1e-5, 1e-5, "LinearRelu float32 " + c);
    }
  }
}

// A bias that is a view inside a larger buffer, at an address aligned to 2 bytes only (ZeRO-3 gathers a
// layer's weight and bias into one flat buffer): cuBLASLt's bias epilogue read it wrongly on an H200, with
// results that changed from call to call. The GEMM no longer fuses such a bias; the result is the CPU's.
TEST(CudaBf16Ops, LinearWithABiasViewAlignedToTwoBytesMatchesTheCpu) {
  TINYDDP_REQUIRE_GPU();
  const int64_t batch = 24, out = 129, in = 67;  // out * in is odd: the bias starts 2 bytes into a 4-byte word
  const Tensor x = RandomBf16({batch, in}, 21), w = RandomBf16({out, in}, 22), bias = RandomBf16({out}, 23);
  Tensor flat = Tensor::Empty({out * in + out}, kBf16, kGpu);
  Tensor weight_part = flat.Rows(0, out * in), bias_part = flat.Rows(out * in, out * in + out);
  ops::CopyInto(weight_part, Gpu(w).View({out * in}));
  ops::CopyInto(bias_part, Gpu(bias));
  const Tensor gw = flat.Rows(0, out * in).View({out, in}), gb = flat.Rows(out * in, out * in + out);
  ASSERT_NE(reinterpret_cast<uintptr_t>(gb.data_ptr()) % 4, 0u) << "the case needs a bias aligned to 2 bytes";
  for (int call = 0; call < 3; ++call) {
    ExpectWithinBf16Ulp(ops::Linear(x, w, bias), ops::Linear(Gpu(x), gw, gb), absl::StrCat("Linear, call ", call));
    ExpectWithinBf16Ulp(ops::LinearRelu(x, w, bias), ops::LinearRelu(Gpu(x), gw, gb),
                        absl::StrCat("LinearRelu, call ", call));
  }
}

// --- Reductions and losses -----------------------------------------------------------------------------

TEST(CudaBf16Ops, SumRowsIntoMatchesTheCpuForEveryOutputDTypeAndBeta) {
  TINYDDP_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1, 5}, Shape{64, 10}, Shape{257, 300}, Shape{512, 8192}}) {
    const Tensor x = RandomBf16(shape, 15);
    const Tensor gx = Gpu(x);
    for (float beta : {0.f, 1.f}) {
      const std::string c = absl::StrCat(ShapeToString(shape), " beta=", beta);
      const Tensor start = testing::RandomTensor({shape[1]}, DType::kFloat32, 16);
      Tensor want = start.Clone(), got = Gpu(start);
      if (beta == 0.f) ops::Fill(got, std::nan(""));
      ops::SumRowsInto(want, x, beta);
      ops::SumRowsInto(got, gx, beta);
      ExpectClose(want, got, 1e-6, 1e-6, "bf16 -> float32 " + c);
      Tensor want16 = ops::Cast(start, kBf16), got16 = Gpu(want16);
      ops::SumRowsInto(want16, x, beta);
      ops::SumRowsInto(got16, gx, beta);
      ExpectWithinBf16Ulp(want16, got16, "bf16 -> bf16 " + c);
    }
  }
}

TEST(CudaBf16Ops, SumMeanAndArgMaxMatchTheCpu) {
  TINYDDP_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1, 1}, Shape{37, 41}, Shape{1025, 333}}) {
    const Tensor x = RandomBf16(shape, 17);
    const Tensor gx = Gpu(x);
    const std::string c = ShapeToString(shape);
    ExpectWithinBf16Ulp(ops::Sum(x), ops::Sum(gx), "Sum " + c);
    ExpectWithinBf16Ulp(ops::Mean(x), ops::Mean(gx), "Mean " + c);
    for (int64_t dim : {0, 1}) {
      ExpectWithinBf16Ulp(ops::Sum(x, dim), ops::Sum(gx, dim), absl::StrCat("Sum dim=", dim, " ", c));
      ExpectWithinBf16Ulp(ops::Mean(x, dim), ops::Mean(gx, dim), absl::StrCat("Mean dim=", dim, " ", c));
    }
    EXPECT_EQ(ops::ArgMax(x).ToVector<int64_t>(), ops::ArgMax(gx).To(Device::CPU()).ToVector<int64_t>()) << c;
  }
}

Tensor Labels(int64_t n, int64_t classes) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (i * 7 + 3) % classes;
  return Tensor::FromVector(v, {n});
}

TEST(CudaBf16Ops, CrossEntropyOfBf16LogitsMatchesTheCpuInFloat32AndItsBackwardBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1, 10}, Shape{64, 10}, Shape{33, 1027}, Shape{512, 4096}, Shape{3, 9000}}) {
    const Tensor logits = RandomBf16(shape, 18, -6.0, 6.0), labels = Labels(shape[0], shape[1]);
    const Tensor glabels = labels.To(kGpu);
    const std::string c = ShapeToString(shape);
    Tensor softmax, gsoftmax;
    const Tensor loss = ops::CrossEntropy(logits, labels, &softmax);
    const Tensor gloss = ops::CrossEntropy(Gpu(logits), glabels, &gsoftmax);
    ASSERT_EQ(gloss.dtype(), DType::kFloat32);
    ASSERT_EQ(gsoftmax.dtype(), DType::kFloat32);
    ExpectClose(loss, gloss, 1e-5, 1e-6, "CrossEntropy loss " + c);
    ExpectClose(softmax, gsoftmax, 1e-5, 1e-6, "CrossEntropy softmax " + c);
    // The backward from the same float32 softmax: computed in float32, rounded once to bfloat16.
    const Tensor grad_loss = Tensor::FromVector(std::vector<float>{0.7f}, {});
    PoisonNextLike(logits);
    ExpectBitwiseEqual(ops::CrossEntropyBackward(softmax, labels, grad_loss, kBf16),
                       ops::CrossEntropyBackward(Gpu(softmax), glabels, Gpu(grad_loss), kBf16),
                       "CrossEntropyBackward " + c);
    PoisonNextLike(logits);
    ExpectWithinBf16Ulp(ops::LogSoftmax(logits), ops::LogSoftmax(Gpu(logits)), "LogSoftmax " + c);
  }
}

TEST(CudaBf16Ops, MseLossOfBf16InputsIsAFloat32ScalarMatchingTheCpu) {
  TINYDDP_REQUIRE_GPU();
  for (int64_t n : kSizes) {
    const Tensor a = RandomBf16({n}, 19), b = RandomBf16({n}, 20);
    const Tensor got = ops::MseLoss(Gpu(a, true), Gpu(b, true));
    ASSERT_EQ(got.dtype(), DType::kFloat32);
    ExpectClose(ops::MseLoss(a, b), got, 1e-6, 1e-7, "MseLoss " + Case({n}));
  }
}

// --- Optimizer steps with bfloat16 gradients and copies ------------------------------------------------

struct MixedState {
  std::vector<Tensor> params, grads, state_a, state_b, copies;
};

/// `count` parameters of varied odd sizes on `device` (every third one a misaligned view on the GPU),
/// bfloat16 gradients, zero state, copies holding garbage (7.0).
MixedState MakeMixedState(Device device, int count, DType grad_dtype) {
  MixedState s;
  const std::vector<int64_t> sizes = {1, 7, 1000, 4099, (1 << 18) + 5};
  for (int i = 0; i < count; ++i) {
    const int64_t n = sizes[i % sizes.size()];
    const bool misaligned = device.is_cuda() && i % 3 == 2;
    auto place = [&](const Tensor& cpu) { return device.is_cuda() ? Gpu(cpu, misaligned) : cpu.Clone(); };
    s.params.push_back(place(testing::RandomTensor({n}, DType::kFloat32, 100 + i)));
    s.grads.push_back(place(ops::Cast(RandomBf16Values({n}, 200 + i), grad_dtype)));
    s.state_a.push_back(place(Tensor::Zeros({n})));
    s.state_b.push_back(place(Tensor::Zeros({n})));
    s.copies.push_back(place(Tensor::Full({n}, 7.0, kBf16)));
  }
  return s;
}

void ExpectMixedStatesEqual(const MixedState& cpu, const MixedState& gpu, const std::string& what) {
  for (size_t i = 0; i < cpu.params.size(); ++i) {
    const std::string c = absl::StrCat(what, " param ", i);
    ExpectBitwiseEqual(cpu.params[i], gpu.params[i], c + " master weights");
    ExpectBitwiseEqual(cpu.state_a[i], gpu.state_a[i], c + " state");
    ExpectBitwiseEqual(cpu.state_b[i], gpu.state_b[i], c + " second state");
    ExpectBitwiseEqual(cpu.copies[i], gpu.copies[i], c + " bf16 copy");
    ExpectBitwiseEqual(ops::Cast(gpu.params[i], kBf16).To(Device::CPU()), gpu.copies[i], c + " copy == round(p)");
  }
}

TEST(CudaBf16Optim, SgdStepsWithBf16GradsAndCopiesMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (DType grad_dtype : {kBf16, DType::kFloat32}) {
    for (bool nesterov : {false, true}) {
      for (int count : {5, 70}) {  // 70: more tensors than one launch carries
        MixedState cpu = MakeMixedState(Device::CPU(), count, grad_dtype);
        MixedState gpu = MakeMixedState(kGpu, count, grad_dtype);
        ops::SgdConfig config{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = nesterov};
        for (int step = 0; step < 3; ++step) {
          config.first_step = step == 0;
          ops::SgdStep(absl::MakeSpan(cpu.params), cpu.grads, absl::MakeSpan(cpu.state_a), config,
                       absl::MakeSpan(cpu.copies));
          ops::SgdStep(absl::MakeSpan(gpu.params), gpu.grads, absl::MakeSpan(gpu.state_a), config,
                       absl::MakeSpan(gpu.copies));
        }
        const std::string c = absl::StrCat("SGD grads ", DTypeName(grad_dtype), nesterov ? " nesterov" : "", " x", count);
        ExpectMixedStatesEqual(cpu, gpu, c);
      }
    }
  }
}

TEST(CudaBf16Optim, AdamStepsWithBf16GradsAndCopiesMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (bool decoupled : {true, false}) {
    MixedState cpu = MakeMixedState(Device::CPU(), 7, kBf16), gpu = MakeMixedState(kGpu, 7, kBf16);
    ops::AdamConfig config{.lr = 1e-2, .weight_decay = 0.1, .decoupled_weight_decay = decoupled};
    for (int64_t step = 1; step <= 3; ++step) {
      config.step = step;
      ops::AdamStep(absl::MakeSpan(cpu.params), cpu.grads, absl::MakeSpan(cpu.state_a), absl::MakeSpan(cpu.state_b),
                    config, absl::MakeSpan(cpu.copies));
      ops::AdamStep(absl::MakeSpan(gpu.params), gpu.grads, absl::MakeSpan(gpu.state_a), absl::MakeSpan(gpu.state_b),
                    config, absl::MakeSpan(gpu.copies));
    }
    ExpectMixedStatesEqual(cpu, gpu, decoupled ? "AdamW" : "Adam");
  }
}

// --- Steady state --------------------------------------------------------------------------------------

TEST(CudaBf16Ops, AMixedPrecisionStepCallsCudaMallocOnlyWhileWarmingUp) {
  TINYDDP_REQUIRE_GPU();
  // A two-layer MLP step the way the policy layer will run it: bfloat16 forward, float32 loss,
  // bfloat16 activation gradients, float32 weight and bias gradients, SGD writing bfloat16 copies.
  const int64_t batch = 64, in = 784, hidden = 512, classes = 10;
  const double b1 = 1.0 / std::sqrt(in), b2 = 1.0 / std::sqrt(hidden);  // PyTorch's default Linear init range
  std::vector<Tensor> params = {Gpu(testing::RandomTensor({hidden, in}, DType::kFloat32, 1, -b1, b1)),
                                Gpu(testing::RandomTensor({hidden}, DType::kFloat32, 2, -b1, b1)),
                                Gpu(testing::RandomTensor({classes, hidden}, DType::kFloat32, 3, -b2, b2)),
                                Gpu(testing::RandomTensor({classes}, DType::kFloat32, 4, -b2, b2))};
  std::vector<Tensor> copies, grads, bufs;
  for (const Tensor& p : params) {
    copies.push_back(ops::Cast(p, kBf16));
    grads.push_back(Tensor::Zeros(p.shape(), DType::kFloat32, kGpu));
    bufs.push_back(Tensor::Zeros(p.shape(), DType::kFloat32, kGpu));
  }
  const Tensor x = Gpu(testing::RandomTensor({batch, in}, DType::kFloat32, 5));
  const Tensor labels = Labels(batch, classes).To(kGpu);
  const Tensor grad_loss = Tensor::Full({}, 1.0, DType::kFloat32, kGpu);
  ops::SgdConfig config{.lr = 0.01, .momentum = 0.9};
  auto step = [&] {
    const Tensor x16 = ops::Cast(x, kBf16);
    const Tensor h = ops::LinearRelu(x16, copies[0], copies[1]);
    const Tensor logits = ops::Linear(h, copies[2], copies[3]);
    Tensor softmax;
    const Tensor loss = ops::CrossEntropy(logits, labels, &softmax);
    const Tensor dlogits = ops::CrossEntropyBackward(softmax, labels, grad_loss, kBf16);
    ops::MatMulInto(grads[2], dlogits, h, true, false);
    ops::SumRowsInto(grads[3], dlogits);
    const Tensor dh = ops::ReluBackward(ops::MatMul(dlogits, copies[2]), h);
    ops::MatMulInto(grads[0], dh, x16, true, false);
    ops::SumRowsInto(grads[1], dh);
    ops::SgdStep(absl::MakeSpan(params), grads, absl::MakeSpan(bufs), config, absl::MakeSpan(copies));
    config.first_step = false;
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  cuda::Stream::Current(0).Synchronize();
  const int64_t mallocs = cuda::GetAllocatorStats(0).num_cuda_malloc;
  float first = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    const float loss = step().To(Device::CPU()).ToVector<float>()[0];
    if (i == 0) first = loss;
    last = loss;
  }
  EXPECT_EQ(cuda::GetAllocatorStats(0).num_cuda_malloc, mallocs) << "a steady-state step called cudaMalloc";
  EXPECT_LT(last, first) << "twenty SGD steps on one batch should lower its loss";
}

}  // namespace
}  // namespace tinyddp
