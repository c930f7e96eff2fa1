// The backend sweep (after ggml's test-backend-ops): every op of tensor/ops.h runs on the CPU and on the
// GPU with the same random inputs, and the two answers are compared. Sizes include 1, 7, 1000 and
// 2^20 + 3 (odd, so the vectorised kernels' scalar tails run), views that start 4 bytes into their
// storage (so the misaligned paths run), and odd matrix shapes. Each GPU output block is filled with
// 0xFF bytes (NaN, or -1) before the op, so an element the kernel forgets to write cannot pass.
//
// Exact (bit for bit): ops whose CUDA kernels round in the CPU's order (elementwise, casts, gathers,
// Philox init, argmax, the cross-entropy backward, the optimizer steps). Within rounding: sums (same
// double accumulation, different order), GEMMs, and anything through exp/log/tanh, whose last bits
// differ between libm and CUDA.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/testing/cuda_test_util.h"
#include "tensor/ops.h"
#include "tensor/testing/ops_test_util.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace tinyddp {
namespace {

using ::tinyddp::testing::AsDoubles;
using ::tinyddp::testing::ExpectAllNear;
using ::tinyddp::testing::RandomTensor;
using ::tinyddp::testing::Tol;

const Device kGpu = Device::CUDA(0);
const std::vector<int64_t> kSizes = {1, 7, 1000, (1 << 20) + 3};
const std::vector<DType> kFloatTypes = {DType::kFloat32, DType::kFloat64};
const std::vector<DType> kAllTypes = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                      DType::kInt32,   DType::kInt64,   DType::kUInt8};

// --- Helpers -------------------------------------------------------------------------------------------

/// A GPU copy of `cpu`; with `misaligned`, a view starting one element into its storage, so that no
/// pointer the kernel sees is 16-byte aligned.
Tensor Gpu(const Tensor& cpu, bool misaligned = false) {
  if (!misaligned) return cpu.To(kGpu);
  Tensor storage = Tensor::Empty({cpu.numel() + 1}, cpu.dtype(), kGpu);
  Tensor view = storage.Rows(1, cpu.numel() + 1).View(cpu.shape());
  ops::CopyInto(view, cpu);
  return view;
}

/// Fills a block of the size class of a `bytes` allocation with 0xFF and gives it back: the caching
/// allocator hands the most recently freed block of a class out first, so the op's output gets it.
void PoisonNext(size_t bytes) {
  Tensor junk = Tensor::Empty({static_cast<int64_t>(bytes == 0 ? 1 : bytes)}, DType::kUInt8, kGpu);
  ops::Fill(junk, 255);
}
void PoisonNextLike(const Tensor& t) { PoisonNext(t.nbytes()); }

double ValueAt(const Tensor& cpu, int64_t i) {
  const void* p = static_cast<const char*>(cpu.data_ptr()) + i * DTypeSize(cpu.dtype());
  switch (cpu.dtype()) {
    case DType::kFloat32:
      return *static_cast<const float*>(p);
    case DType::kFloat64:
      return *static_cast<const double*>(p);
    case DType::kBFloat16:
      return static_cast<float>(*static_cast<const BFloat16*>(p));
    case DType::kInt32:
      return *static_cast<const int32_t*>(p);
    case DType::kInt64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::kUInt8:
      return *static_cast<const uint8_t*>(p);
  }
  return 0;
}

/// The GPU result has exactly the CPU result's bytes.
void ExpectBitwiseEqual(const Tensor& want, const Tensor& got_gpu, const std::string& what) {
  const Tensor got = got_gpu.To(Device::CPU());
  ASSERT_EQ(want.shape(), got.shape()) << what;
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  const size_t es = DTypeSize(want.dtype());
  const auto* a = static_cast<const unsigned char*>(want.data_ptr());
  const auto* b = static_cast<const unsigned char*>(got.data_ptr());
  int64_t misses = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::memcmp(a + i * es, b + i * es, es) == 0) continue;
    if (++misses <= 5) {
      ADD_FAILURE() << what << " element " << i << ": cuda " << ValueAt(got, i) << ", cpu " << ValueAt(want, i);
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.numel() << " elements differ";
}

/// |gpu - cpu| <= rtol * (|cpu| + max(1, max |cpu|)) elementwise.
void ExpectClose(const Tensor& want, const Tensor& got_gpu, double rtol, const std::string& what) {
  const std::vector<double> w = AsDoubles(want), g = AsDoubles(got_gpu.To(Device::CPU()));
  double scale = 1;
  for (double v : w) scale = std::fmax(scale, std::fabs(v));
  ExpectAllNear(g, w, rtol * scale, rtol, what);
}

double FloatTol(DType dtype) { return dtype == DType::kFloat32 ? 1e-5 : 1e-12; }

std::string Case(DType dtype, const Shape& shape, bool misaligned = false) {
  return absl::StrCat(DTypeName(dtype), " ", ShapeToString(shape), misaligned ? " misaligned" : "");
}

// --- Elementwise ---------------------------------------------------------------------------------------

TEST(CudaOps, BinaryOpsAndScalingMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (bool misaligned : {false, true}) {
        const Tensor a = RandomTensor({n}, dtype, 1), b = RandomTensor({n}, dtype, 2, 0.5, 2.0);
        const Tensor ga = Gpu(a, misaligned), gb = Gpu(b, misaligned);
        const std::string c = Case(dtype, {n}, misaligned);
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
}

TEST(CudaOps, ReluAndItsBackwardMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      Tensor x = RandomTensor({n}, dtype, 3);
      for (int64_t i = 0; i < n; i += 5) {  // exact zeros: the y <= 0 boundary of the backward
        if (dtype == DType::kFloat32)
          x.data<float>()[i] = 0.f;
        else
          x.data<double>()[i] = 0.0;
      }
      const Tensor g = RandomTensor({n}, dtype, 4);
      const Tensor gx = Gpu(x), gg = Gpu(g), gx_misaligned = Gpu(x, true);
      const std::string c = Case(dtype, {n});
      PoisonNextLike(x);
      ExpectBitwiseEqual(ops::Relu(x), ops::Relu(gx), "Relu " + c);
      PoisonNextLike(x);
      ExpectBitwiseEqual(ops::ReluBackward(g, x), ops::ReluBackward(gg, gx_misaligned), "ReluBackward " + c);
    }
  }
}

TEST(CudaOps, GeluAndItsBackwardMatchTheCpuWithinRounding) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor x = RandomTensor({n}, dtype, 5, -4.0, 4.0), g = RandomTensor({n}, dtype, 6);
      const Tensor gx = Gpu(x), gg = Gpu(g);
      const std::string c = Case(dtype, {n});
      PoisonNextLike(x);
      ExpectClose(ops::Gelu(x), ops::Gelu(gx), FloatTol(dtype), "Gelu " + c);
      PoisonNextLike(x);
      ExpectClose(ops::GeluBackward(g, x), ops::GeluBackward(gg, gx), FloatTol(dtype), "GeluBackward " + c);
    }
  }
}

TEST(CudaOps, AddRowVectorMatchesTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : {Shape{1, 1}, Shape{7, 13}, Shape{1000, 33}, Shape{129, 1024}}) {
      for (bool misaligned : {false, true}) {
        const Tensor x = RandomTensor(shape, dtype, 7), row = RandomTensor({shape[1]}, dtype, 8);
        const Tensor gx = Gpu(x, misaligned), grow = Gpu(row, misaligned);
        PoisonNextLike(x);
        ExpectBitwiseEqual(ops::AddRowVector(x, row), ops::AddRowVector(gx, grow),
                           "AddRowVector " + Case(dtype, shape, misaligned));
      }
    }
  }
}

// --- Data movement -------------------------------------------------------------------------------------

/// Values of every dtype that every conversion handles without undefined behaviour.
Tensor SourceOf(DType dtype, int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<double> v(n);
  for (auto& x : v) {
    if (dtype == DType::kUInt8)
      x = static_cast<double>(gen() % 256);
    else if (dtype == DType::kInt32 || dtype == DType::kInt64)
      x = static_cast<double>(gen() % 2001) - 1000.0;
    else
      x = (static_cast<double>(gen() % 600001) - 300000.0) / 1000.0 + 1e-4;
  }
  return ops::Cast(Tensor::FromVector(v, {n}), dtype);
}

TEST(CudaOps, CastMatchesTheCpuBitForBitForEveryPairOfDTypesAndScales) {
  TINYDDP_REQUIRE_GPU();
  for (DType from : kAllTypes) {
    const Tensor x = SourceOf(from, 1003, 9);
    const Tensor gx = Gpu(x, /*misaligned=*/true);
    for (DType to : kAllTypes) {
      for (double scale : {1.0, 1.0 / 255.0, 3.0}) {
        const std::string c = absl::StrCat("Cast ", DTypeName(from), " -> ", DTypeName(to), " scale ", scale);
        PoisonNext(1003 * DTypeSize(to));
        ExpectBitwiseEqual(ops::Cast(x, to, scale), ops::Cast(gx, to, scale), c);
      }
    }
  }
  // The pixel path at full size: uint8 -> float32 with 1/255, and float32 <-> bfloat16.
  const Tensor pixels = SourceOf(DType::kUInt8, (1 << 20) + 3, 10);
  const Tensor gpixels = Gpu(pixels);
  PoisonNext(pixels.numel() * sizeof(float));
  ExpectBitwiseEqual(ops::Cast(pixels, DType::kFloat32, 1.0 / 255), ops::Cast(gpixels, DType::kFloat32, 1.0 / 255),
                     "Cast uint8 -> float32 / 255, 2^20+3");
  const Tensor f = RandomTensor({(1 << 20) + 3}, DType::kFloat32, 11, -1e4, 1e4);
  const Tensor bf = ops::Cast(f, DType::kBFloat16);
  const Tensor gf = Gpu(f), gbf = Gpu(bf);
  PoisonNextLike(bf);
  ExpectBitwiseEqual(bf, ops::Cast(gf, DType::kBFloat16), "Cast float32 -> bfloat16 (round to nearest even)");
  Tensor back = Tensor::Empty(f.shape(), DType::kFloat32, kGpu);
  ops::Fill(back, NAN);
  ops::CastInto(back, gbf);
  ExpectBitwiseEqual(ops::Cast(bf, DType::kFloat32), back, "CastInto bfloat16 -> float32");
}

TEST(CudaOps, FillAndCopyWriteEveryDTypeLikeTheCpu) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kAllTypes) {
    for (int64_t n : kSizes) {
      for (double value : {-1.75, 3.25, 0.0}) {
        Tensor cpu = Tensor::Empty({n}, dtype), gpu = Gpu(Tensor::Zeros({n}, dtype), /*misaligned=*/n > 1);
        ops::Fill(cpu, value);
        ops::Fill(gpu, value);
        ExpectBitwiseEqual(cpu, gpu, absl::StrCat("Fill ", value, " ", Case(dtype, {n})));
      }
      const Tensor src = SourceOf(dtype, n, 12);
      Tensor dst = Tensor::Empty({n}, dtype, kGpu);
      ops::CopyInto(dst, Gpu(src, true));
      ExpectBitwiseEqual(src, dst, "CopyInto " + Case(dtype, {n}));
    }
  }
}

TEST(CudaOps, IndexSelectRowsGathersLikeTheCpuForEveryRowWidth) {
  TINYDDP_REQUIRE_GPU();
  struct Gather {
    DType dtype;
    Shape shape;
  };
  // Row widths of 784 B (16-byte copies), 132 B (4), 6 B (2), 5 B (1), 56 B (8) and one int64.
  for (const Gather& c :
       {Gather{DType::kUInt8, {100, 784}}, Gather{DType::kFloat32, {1000, 33}}, Gather{DType::kBFloat16, {50, 3}},
        Gather{DType::kUInt8, {20, 5}}, Gather{DType::kFloat64, {10, 7}}, Gather{DType::kInt64, {9}}}) {
    const Tensor x = SourceOf(c.dtype, NumElements(c.shape), 13).View(c.shape);
    std::vector<int64_t> idx(257);
    std::mt19937 gen(14);
    for (auto& i : idx) i = static_cast<int64_t>(gen() % c.shape[0]);  // with repeats
    const Tensor indices = Tensor::FromVector(idx, {257});
    const Tensor gx = Gpu(x), gindices = Gpu(indices);
    Shape out_shape = c.shape;
    out_shape[0] = 257;
    PoisonNext(NumElements(out_shape) * DTypeSize(c.dtype));
    ExpectBitwiseEqual(ops::IndexSelectRows(x, indices), ops::IndexSelectRows(gx, gindices),
                       "IndexSelectRows " + Case(c.dtype, c.shape));
  }
}

TEST(CudaOps, UniformAndNormalInitGiveTheCpusBitsInEveryFloatDType) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    for (int64_t n : kSizes) {
      const std::string c = Case(dtype, {n});
      Tensor cpu = Tensor::Empty({n}, dtype), gpu = Tensor::Empty({n}, dtype, kGpu);
      ops::UniformInit(cpu, -0.5, 2.0, /*seed=*/0x5eed1234abcdull, /*offset=*/12345);
      ops::UniformInit(gpu, -0.5, 2.0, 0x5eed1234abcdull, 12345);
      ExpectBitwiseEqual(cpu, gpu, "UniformInit " + c);
      ops::NormalInit(cpu, 0.3, 1.7, /*seed=*/42, /*offset=*/(uint64_t{1} << 33) + 5);
      ops::NormalInit(gpu, 0.3, 1.7, 42, (uint64_t{1} << 33) + 5);
      ExpectBitwiseEqual(cpu, gpu, "NormalInit " + c);
    }
  }
}

// --- Reductions and losses -----------------------------------------------------------------------------

TEST(CudaOps, SumAndMeanMatchTheCpuOverEverythingAndAlongEachDim) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (bool misaligned : {false, true}) {
        const Tensor x = RandomTensor({n}, dtype, 15);
        const Tensor gx = Gpu(x, misaligned);
        PoisonNext(DTypeSize(dtype));
        ExpectClose(ops::Sum(x), ops::Sum(gx), 1e-6, "Sum " + Case(dtype, {n}, misaligned));
        ExpectClose(ops::Mean(x), ops::Mean(gx), 1e-6, "Mean " + Case(dtype, {n}, misaligned));
      }
    }
    // Row sums (short rows: a warp per row; long rows: a block per row), column sums, middle dims.
    for (const Shape& shape :
         {Shape{7, 13, 5}, Shape{1000, 33}, Shape{3, 5000}, Shape{1, 1}, Shape{64, 1}, Shape{2, 70000, 3}}) {
      const Tensor x = RandomTensor(shape, dtype, 16);
      const Tensor gx = Gpu(x);
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
        const std::string c = absl::StrCat("Sum dim ", dim, " ", Case(dtype, shape));
        PoisonNext(x.nbytes() / shape[dim]);
        ExpectClose(ops::Sum(x, dim), ops::Sum(gx, dim), 1e-6, c);
        ExpectClose(ops::Mean(x, dim, true), ops::Mean(gx, dim, true), 1e-6, "Mean keepdim " + c);
      }
    }
  }
}

TEST(CudaOps, ArgMaxMatchesTheCpuIncludingTiesAndNaN) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : {Shape{1000, 37}, Shape{5, 1}, Shape{3, 5000}, Shape{64, 10}}) {
      Tensor x = RandomTensor(shape, dtype, 17);
      if (shape[0] >= 64 && shape[1] >= 10) {
        auto set = [&](int64_t r, int64_t c, double v) {
          if (dtype == DType::kFloat32)
            x.data<float>()[r * shape[1] + c] = static_cast<float>(v);
          else
            x.data<double>()[r * shape[1] + c] = v;
        };
        for (int64_t c = 0; c < shape[1]; ++c) set(3, c, 0.25);  // all equal: index 0
        set(5, 9, 7.0);                                          // two maxima: the first
        set(5, 2, 7.0);
        set(6, 8, NAN);  // NaN wins, the first NaN
        set(6, 4, NAN);
        set(6, 1, 9.0);
        set(7, shape[1] - 1, 100.0);  // the last column
      }
      const Tensor gx = Gpu(x);
      PoisonNext(shape[0] * sizeof(int64_t));
      ExpectBitwiseEqual(ops::ArgMax(x), ops::ArgMax(gx), "ArgMax " + Case(dtype, shape));
    }
  }
}

TEST(CudaOps, LogSoftmaxAndCrossEntropyMatchTheCpu) {
  TINYDDP_REQUIRE_GPU();
  // Rows from one warp (10 classes) to longer than the block's registers hold (9000).
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : {Shape{1, 1}, Shape{7, 10}, Shape{64, 10}, Shape{33, 1000}, Shape{256, 1024},
                               Shape{5, 9000}, Shape{1000, 37}}) {
      const std::string c = Case(dtype, shape);
      const Tensor x = RandomTensor(shape, dtype, 18, -10.0, 10.0);
      std::vector<int64_t> label_values(shape[0]);
      for (int64_t i = 0; i < shape[0]; ++i) label_values[i] = (i * 31 + 3) % shape[1];
      const Tensor labels = Tensor::FromVector(label_values, {shape[0]});
      const Tensor gx = Gpu(x), glabels = Gpu(labels);
      PoisonNextLike(x);
      ExpectClose(ops::LogSoftmax(x), ops::LogSoftmax(gx), FloatTol(dtype), "LogSoftmax " + c);

      Tensor softmax, gsoftmax;
      const Tensor loss = ops::CrossEntropy(x, labels, &softmax);
      PoisonNextLike(x);
      PoisonNext(DTypeSize(dtype));
      const Tensor gloss = ops::CrossEntropy(gx, glabels, &gsoftmax);
      ExpectClose(loss, gloss, FloatTol(dtype), "CrossEntropy loss " + c);
      ExpectClose(softmax, gsoftmax, FloatTol(dtype), "CrossEntropy softmax " + c);

      // The backward from the same softmax is exact.
      const Tensor grad_loss = Tensor::Full({}, 0.7, dtype);
      const Tensor gsoftmax_in = Gpu(softmax), ggrad_loss = Gpu(grad_loss);
      PoisonNextLike(x);
      ExpectBitwiseEqual(ops::CrossEntropyBackward(softmax, labels, grad_loss),
                         ops::CrossEntropyBackward(gsoftmax_in, glabels, ggrad_loss), "CrossEntropyBackward " + c);
    }
  }
}

TEST(CudaOps, MseLossMatchesTheCpu) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor a = RandomTensor({n}, dtype, 19), b = RandomTensor({n}, dtype, 20);
      const Tensor ga = Gpu(a, true), gb = Gpu(b, true);
      PoisonNext(DTypeSize(dtype));
      ExpectClose(ops::MseLoss(a, b), ops::MseLoss(ga, gb), 1e-6, "MseLoss " + Case(dtype, {n}));
    }
  }
}

// --- Matrix products -----------------------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;
};
const std::vector<GemmShape> kGemmShapes = {{1, 1, 1},     {7, 5, 13},     {64, 784, 512},
                                            {64, 512, 10}, {33, 1000, 17}, {256, 1024, 1024}};

TEST(CudaOps, MatMulMatchesTheCpuForEveryTransposeAlphaBetaAndOddShapes) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (const GemmShape& s : kGemmShapes) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const Tensor a = RandomTensor(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, dtype, 21);
        const Tensor b = RandomTensor(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, dtype, 22);
        const bool misaligned = s.m == 7 || s.m == 64;
        const std::string c = absl::StrCat(DTypeName(dtype), " m=", s.m, " k=", s.k, " n=", s.n, " trans_a=", ta,
                                           " trans_b=", tb, misaligned ? " misaligned" : "");
        const double tol = Tol(dtype, s.k);
        const Tensor ga = Gpu(a, misaligned), gb = Gpu(b);
        PoisonNext(s.m * s.n * DTypeSize(dtype));
        ExpectAllNear(AsDoubles(ops::MatMul(ga, gb, ta, tb).To(Device::CPU())), AsDoubles(ops::MatMul(a, b, ta, tb)),
                      tol, 0.0, "MatMul " + c);

        // Accumulate (the backward of Linear) and overwrite a NaN-filled output (beta 0 must not read it).
        Tensor out = RandomTensor({s.m, s.n}, dtype, 23), gout = Gpu(out);
        ops::MatMulInto(out, a, b, ta, tb, 0.5f, 1.5f);
        ops::MatMulInto(gout, ga, gb, ta, tb, 0.5f, 1.5f);
        ExpectAllNear(AsDoubles(gout.To(Device::CPU())), AsDoubles(out), tol, 0.0, "MatMulInto beta=1.5 " + c);
        ops::Fill(out, NAN);
        ops::Fill(gout, NAN);
        ops::MatMulInto(out, a, b, ta, tb, 1.f, 0.f);
        ops::MatMulInto(gout, ga, gb, ta, tb, 1.f, 0.f);
        ExpectAllNear(AsDoubles(gout.To(Device::CPU())), AsDoubles(out), tol, 0.0, "MatMulInto beta=0 " + c);
      }
    }
  }
}

TEST(CudaOps, LinearMatchesTheCpuWithAndWithoutItsFusedBias) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (const GemmShape& s : kGemmShapes) {
      const Tensor x = RandomTensor({s.m, s.k}, dtype, 24), w = RandomTensor({s.n, s.k}, dtype, 25);
      const Tensor bias = RandomTensor({s.n}, dtype, 26);
      const double tol = Tol(dtype, s.k + 1);
      const std::string c = absl::StrCat(DTypeName(dtype), " x [", s.m, ", ", s.k, "] w [", s.n, ", ", s.k, "]");
      const Tensor gx = Gpu(x), gw = Gpu(w), gbias = Gpu(bias), gx_off = Gpu(x, true), gbias_off = Gpu(bias, true);
      const Tensor want = ops::Linear(x, w, bias);
      PoisonNext(s.m * s.n * DTypeSize(dtype));
      ExpectAllNear(AsDoubles(ops::Linear(gx, gw, gbias).To(Device::CPU())), AsDoubles(want), tol, 0.0, "Linear " + c);
      PoisonNext(s.m * s.n * DTypeSize(dtype));
      ExpectAllNear(AsDoubles(ops::Linear(gx, gw, Tensor()).To(Device::CPU())), AsDoubles(ops::Linear(x, w, Tensor())),
                    tol, 0.0, "Linear without bias " + c);
      // Operands 4 bytes off alignment: cuBLASLt's epilogue may refuse them, the fallback adds the bias apart.
      PoisonNext(s.m * s.n * DTypeSize(dtype));
      ExpectAllNear(AsDoubles(ops::Linear(gx_off, gw, gbias_off).To(Device::CPU())), AsDoubles(want), tol, 0.0,
                    "Linear misaligned " + c);
    }
  }
}

// --- Optimizers ----------------------------------------------------------------------------------------

// Parameters of odd sizes (one of them a misaligned view on the GPU) and their CPU twins.
struct ParamSet {
  std::vector<Tensor> cpu, gpu;
};
ParamSet MakeParams(DType dtype, const std::vector<int64_t>& sizes, uint32_t seed, bool zeros = false) {
  ParamSet s;
  for (size_t i = 0; i < sizes.size(); ++i) {
    s.cpu.push_back(zeros ? Tensor::Zeros({sizes[i]}, dtype)
                          : RandomTensor({sizes[i]}, dtype, seed + static_cast<uint32_t>(i)));
    s.gpu.push_back(Gpu(s.cpu.back(), /*misaligned=*/i == 1));
  }
  return s;
}
const std::vector<int64_t> kParamSizes = {1, 7, 1000, (1 << 20) + 3, 4097, 512};

TEST(CudaOps, SgdStepMatchesTheCpuBitForBitInEveryConfiguration) {
  TINYDDP_REQUIRE_GPU();
  std::vector<ops::SgdConfig> configs(4);
  configs[0].lr = 0.1;  // plain SGD
  configs[1].lr = 0.05, configs[1].momentum = 0.9, configs[1].dampening = 0.1, configs[1].weight_decay = 1e-2;
  configs[2].lr = 0.05, configs[2].momentum = 0.9, configs[2].nesterov = true, configs[2].weight_decay = 1e-4;
  configs[3].lr = 0.3, configs[3].momentum = 0.5;
  for (DType dtype : kFloatTypes) {
    for (size_t k = 0; k < configs.size(); ++k) {
      ParamSet p = MakeParams(dtype, kParamSizes, 30), bufs = MakeParams(dtype, kParamSizes, 40, true);
      for (int step = 0; step < 3; ++step) {
        const ParamSet g = MakeParams(dtype, kParamSizes, 50 + step * 10);
        ops::SgdConfig config = configs[k];
        config.first_step = step == 0;
        ops::SgdStep(absl::MakeSpan(p.cpu), g.cpu, absl::MakeSpan(bufs.cpu), config);
        ops::SgdStep(absl::MakeSpan(p.gpu), g.gpu, absl::MakeSpan(bufs.gpu), config);
        for (size_t i = 0; i < kParamSizes.size(); ++i) {
          const std::string c = absl::StrCat("SgdStep config ", k, " step ", step, " param ", i, " ", DTypeName(dtype));
          ExpectBitwiseEqual(p.cpu[i], p.gpu[i], c);
          if (config.momentum != 0) ExpectBitwiseEqual(bufs.cpu[i], bufs.gpu[i], "momentum of " + c);
        }
      }
    }
  }
}

TEST(CudaOps, AdamAndAdamWStepsMatchTheCpuBitForBit) {
  TINYDDP_REQUIRE_GPU();
  for (DType dtype : kFloatTypes) {
    for (bool decoupled : {true, false}) {
      for (double wd : {0.0, 0.01}) {
        ParamSet p = MakeParams(dtype, kParamSizes, 60);
        ParamSet m = MakeParams(dtype, kParamSizes, 70, true), v = MakeParams(dtype, kParamSizes, 80, true);
        ops::AdamConfig config;
        config.lr = 1e-2, config.weight_decay = wd, config.decoupled_weight_decay = decoupled;
        for (int step = 1; step <= 3; ++step) {
          const ParamSet g = MakeParams(dtype, kParamSizes, 90 + step * 10);
          config.step = step;
          ops::AdamStep(absl::MakeSpan(p.cpu), g.cpu, absl::MakeSpan(m.cpu), absl::MakeSpan(v.cpu), config);
          ops::AdamStep(absl::MakeSpan(p.gpu), g.gpu, absl::MakeSpan(m.gpu), absl::MakeSpan(v.gpu), config);
          for (size_t i = 0; i < kParamSizes.size(); ++i) {
            const std::string c = absl::StrCat(decoupled ? "AdamW" : "Adam", " wd ", wd, " step ", step, " param ", i,
                                               " ", DTypeName(dtype));
            ExpectBitwiseEqual(p.cpu[i], p.gpu[i], c);
            ExpectBitwiseEqual(m.cpu[i], m.gpu[i], "exp_avg of " + c);
            ExpectBitwiseEqual(v.cpu[i], v.gpu[i], "exp_avg_sq of " + c);
          }
        }
      }
    }
  }
}

TEST(CudaOps, OptimizerStepsCoverParameterListsLongerThanOneLaunch) {
  TINYDDP_REQUIRE_GPU();
  std::vector<int64_t> sizes;
  for (int i = 0; i < 150; ++i) sizes.push_back((i * 37) % 1000 + 1);  // 150 tensors: three launches
  ParamSet p = MakeParams(DType::kFloat32, sizes, 100), bufs = MakeParams(DType::kFloat32, sizes, 300, true);
  const ParamSet g = MakeParams(DType::kFloat32, sizes, 500);
  ops::SgdConfig config;
  config.lr = 0.1, config.momentum = 0.9;
  ops::SgdStep(absl::MakeSpan(p.cpu), g.cpu, absl::MakeSpan(bufs.cpu), config);
  ops::SgdStep(absl::MakeSpan(p.gpu), g.gpu, absl::MakeSpan(bufs.gpu), config);
  for (size_t i = 0; i < sizes.size(); ++i) ExpectBitwiseEqual(p.cpu[i], p.gpu[i], absl::StrCat("param ", i));
}

// --- Streams -------------------------------------------------------------------------------------------

TEST(CudaOps, KernelsRunOnTheCurrentStreamOfTheirDevice) {
  TINYDDP_REQUIRE_GPU();
  Tensor x = Tensor::Full({1 << 20}, 1.0, DType::kFloat32, kGpu);
  cuda::DeviceSynchronize();
  cuda::Stream s = cuda::Stream::Create(0), reader = cuda::Stream::Create(0);
  const cuda::Stream previous = cuda::Stream::SetCurrent(s);
  {
    testing::StreamBlocker hold(s);
    ops::Fill(x, 7.0);  // queued on s, behind the blocker
    std::vector<float> seen(x.numel());
    cuda::MemcpyAsync(seen.data(), x.data_ptr(), x.nbytes(), cuda::CopyKind::kDeviceToHost, reader.handle());
    reader.Synchronize();
    EXPECT_EQ(seen[0], 1.f) << "Fill ran although its stream was held: it did not go to the current stream";
  }
  s.Synchronize();
  EXPECT_EQ(x.ToVector<float>(), std::vector<float>(x.numel(), 7.f));
  cuda::Stream::SetCurrent(previous);
}

}  // namespace
}  // namespace tinyddp
