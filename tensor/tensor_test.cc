// Tests of tensor/tensor.h on the CPU: creation, round trips for every dtype, views that share storage,
// copies that do not, bfloat16 rounding, and the messages misuse stops with.
#include "tensor/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/ops.h"

namespace tinyddp {
namespace {

uint16_t Bf16Bits(float f) { return BFloat16(f).bits; }
float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

TEST(Shape, PrintsAndCounts) {
  EXPECT_EQ(ShapeToString({64, 784}), "[64, 784]");
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({3, 0, 5}), 0);
  EXPECT_EQ(NumElements({7, 13}), 91);
}

TEST(DType, SizesAndPyTorchNames) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(DType::kUInt8), 1u);
  EXPECT_STREQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(DTypeName(DType::kUInt8), "uint8");
  EXPECT_TRUE(IsFloatingPoint(DType::kBFloat16));
  EXPECT_FALSE(IsFloatingPoint(DType::kInt64));
}

TEST(Device, ParsesCpuAndCudaOrdinalsAndRejectsTheRest) {
  EXPECT_EQ(*Device::Parse("cpu"), Device::CPU());
  EXPECT_EQ(*Device::Parse("cuda"), Device::CUDA(0));
  EXPECT_EQ(*Device::Parse("cuda:3"), Device::CUDA(3));
  EXPECT_EQ(Device::CUDA(1).ToString(), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", ""}) {
    EXPECT_FALSE(Device::Parse(bad).ok()) << bad;
  }
}

TEST(BFloat16, RoundsToNearestEvenLikePyTorch) {
  // bfloat16 keeps 7 mantissa bits: 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(Bf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(Bf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);                             // tie, to even (down)
  EXPECT_EQ(Bf16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);                         // tie, to even (up)
  EXPECT_EQ(Bf16Bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);     // above the tie
  EXPECT_EQ(Bf16Bits(-2.5f), 0xc020);
  EXPECT_EQ(Bf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(Bf16Bits(FloatFromBits(0x7f7fffff)), 0x7f80);  // float max rounds up to infinity
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);
  EXPECT_EQ(static_cast<float>(BFloat16(3.140625f)), 3.140625f);  // exactly representable
}

template <typename T>
std::vector<T> RandomValues(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      x = BFloat16(std::uniform_real_distribution<float>(-100, 100)(gen));
    } else if constexpr (std::is_floating_point_v<T>) {
      x = std::uniform_real_distribution<T>(-100, 100)(gen);
    } else {
      x = static_cast<T>(gen());
    }
  }
  return v;
}

template <typename T>
void ExpectRoundTrip(DType dtype) {
  const std::vector<T> v = RandomValues<T>(7 * 13, 42);
  Tensor t = Tensor::FromVector(v, {7, 13});
  EXPECT_EQ(t.dtype(), dtype);
  EXPECT_EQ(t.shape(), Shape({7, 13}));
  EXPECT_EQ(t.nbytes(), 91 * sizeof(T));
  const std::vector<T> back = t.ToVector<T>();
  ASSERT_EQ(back.size(), v.size());
  EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * sizeof(T)), 0) << DTypeName(dtype);
}

TEST(Tensor, FromVectorToVectorRoundTripsEveryDType) {
  ExpectRoundTrip<float>(DType::kFloat32);
  ExpectRoundTrip<double>(DType::kFloat64);
  ExpectRoundTrip<BFloat16>(DType::kBFloat16);
  ExpectRoundTrip<int32_t>(DType::kInt32);
  ExpectRoundTrip<int64_t>(DType::kInt64);
  ExpectRoundTrip<uint8_t>(DType::kUInt8);
}

TEST(Tensor, ZerosAndFullFillEveryDType) {
  EXPECT_EQ(Tensor::Zeros({3, 5}).ToVector<float>(), std::vector<float>(15, 0.f));
  EXPECT_EQ(Tensor::Full({2, 3}, 2.5, DType::kFloat64).ToVector<double>(), std::vector<double>(6, 2.5));
  EXPECT_EQ(Tensor::Full({4}, -7, DType::kInt32).ToVector<int32_t>(), std::vector<int32_t>(4, -7));
  EXPECT_EQ(Tensor::Full({4}, 1e12, DType::kInt64).ToVector<int64_t>(), std::vector<int64_t>(4, 1000000000000));
  EXPECT_EQ(Tensor::Full({3}, -1, DType::kUInt8).ToVector<uint8_t>(), std::vector<uint8_t>(3, 255));
  for (BFloat16 b : Tensor::Full({5}, 1.0 / 3.0, DType::kBFloat16).ToVector<BFloat16>()) {
    EXPECT_EQ(b.bits, BFloat16(1.0f / 3.0f).bits);
  }
  Tensor empty = Tensor::Zeros({0, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.ToVector<float>().empty());
}

TEST(Tensor, SizeCountsNegativeDimsFromTheEnd) {
  Tensor t = Tensor::Empty({2, 3, 5});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.device(), Device::CPU());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << "host storage is 64-byte aligned";
}

TEST(Tensor, ViewSharesStorageAndInfersMinusOne) {
  Tensor t = Tensor::FromVector(RandomValues<float>(6 * 35, 1), {6, 35});
  Tensor v = t.View({-1, 7});
  EXPECT_EQ(v.shape(), Shape({30, 7}));
  EXPECT_TRUE(v.SharesStorageWith(t));
  EXPECT_EQ(v.data_ptr(), t.data_ptr());
  v.data<float>()[8] = 123.f;  // row 1, column 1 of the view is element 8 of the original
  EXPECT_EQ(t.ToVector<float>()[8], 123.f);
  EXPECT_EQ(t.Flatten().shape(), Shape({210}));
  EXPECT_EQ(t.Reshape({210, 1}).size(1), 1);
}

TEST(Tensor, RowsIsAnOffsetViewOfTheSameStorage) {
  const std::vector<double> values = RandomValues<double>(7 * 3, 2);
  Tensor t = Tensor::FromVector(values, {7, 3});
  Tensor r = t.Rows(2, 5);
  EXPECT_EQ(r.shape(), Shape({3, 3}));
  EXPECT_EQ(r.byte_offset(), 2 * 3 * sizeof(double));
  EXPECT_TRUE(r.SharesStorageWith(t));
  EXPECT_EQ(r.ToVector<double>(), std::vector<double>(values.begin() + 6, values.begin() + 15));
  // A view of a view keeps adding offsets, and writes land in the original.
  Tensor rr = r.Rows(1, 2).Flatten();
  EXPECT_EQ(rr.byte_offset(), 3 * 3 * sizeof(double));
  rr.data<double>()[2] = -1.0;
  EXPECT_EQ(t.ToVector<double>()[3 * 3 + 2], -1.0);
  // 1-D: a contiguous slice of elements.
  Tensor flat = t.Flatten().Rows(4, 11);
  EXPECT_EQ(flat.numel(), 7);
  EXPECT_EQ(flat.ToVector<double>()[0], values[4]);
  EXPECT_EQ(t.Rows(7, 7).numel(), 0);
}

TEST(Tensor, CloneOwnsIndependentData) {
  Tensor t = Tensor::FromVector(RandomValues<float>(13, 3), {13});
  Tensor c = t.Clone();
  EXPECT_FALSE(c.SharesStorageWith(t));
  EXPECT_EQ(c.ToVector<float>(), t.ToVector<float>());
  c.data<float>()[0] = 42.f;
  EXPECT_NE(t.ToVector<float>()[0], 42.f);
  // Cloning a Rows view copies just the view's elements.
  Tensor rows = Tensor::FromVector(RandomValues<float>(12, 4), {4, 3});
  Tensor rc = rows.Rows(1, 3).Clone();
  EXPECT_EQ(rc.byte_offset(), 0u);
  EXPECT_EQ(rc.ToVector<float>(), rows.Rows(1, 3).ToVector<float>());
}

TEST(Tensor, ToSameDeviceReturnsTheSameTensor) {
  Tensor t = Tensor::Zeros({3});
  EXPECT_TRUE(t.To(Device::CPU()).SharesStorageWith(t));
}

TEST(Tensor, FromStorageWrapsWithoutCopying) {
  std::shared_ptr<Storage> s = AllocateStorage(64, Device::CPU());
  Tensor a = Tensor::FromStorage(s, 16, {4}, DType::kFloat32);
  Tensor b = Tensor::FromStorage(s, 0, {16}, DType::kFloat32);
  ops::Fill(b, 0.0);
  a.data<float>()[1] = 9.f;
  EXPECT_EQ(b.ToVector<float>()[5], 9.f);
  EXPECT_TRUE(a.SharesStorageWith(b));
}

TEST(Tensor, PinnedStorageIsUsableHostMemory) {
  std::shared_ptr<Storage> s = AllocatePinnedStorage(40);
  EXPECT_TRUE(s->device().is_cpu());
  Tensor t = Tensor::FromStorage(s, 0, {10}, DType::kFloat32);
  ops::Fill(t, 1.5);
  EXPECT_EQ(t.ToVector<float>(), std::vector<float>(10, 1.5f));
}

TEST(Tensor, ItemAndToStringShowValues) {
  EXPECT_EQ(Tensor::Full({1, 1}, -3.25, DType::kFloat64).Item(), -3.25);
  EXPECT_EQ(Tensor::Full({}, 200, DType::kUInt8).Item(), 200.0);
  Tensor t = Tensor::FromVector(std::vector<float>{1.5f, -2.f, 0.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_EQ(t.ToString(), "Tensor[2, 3] float32 cpu {1.5, -2, 0, 4, 5, 6}");
  EXPECT_EQ(Tensor::Zeros({100}).ToString(), "Tensor[100] float32 cpu");
  EXPECT_EQ(Tensor().ToString(), "Tensor(undefined)");
}

// --- Misuse stops with a message that names the op and the shapes/dtypes ---------------------------

TEST(TensorDeathTest, DataWithTheWrongTypeNamesBothDTypes) {
  Tensor t = Tensor::Zeros({2, 3});
  EXPECT_DEATH(t.data<double>(), "data<T>\\(\\): the tensor is float32 \\[2, 3\\] but float64 was asked for");
}

TEST(TensorDeathTest, ViewWithADifferentElementCountStops) {
  Tensor t = Tensor::Zeros({2, 3});
  EXPECT_DEATH(t.View({4, 2}), "Tensor::View: shape \\[4, 2\\] has 8 elements but the tensor \\[2, 3\\] has 6");
}

TEST(TensorDeathTest, RowsOutOfRangeStops) {
  Tensor t = Tensor::Zeros({5, 2});
  EXPECT_DEATH(t.Rows(3, 6), "Tensor::Rows: range \\[3, 6\\) is not inside the 5 rows of \\[5, 2\\]");
}

TEST(TensorDeathTest, FromVectorWithTheWrongCountStops) {
  EXPECT_DEATH(Tensor::FromVector(std::vector<float>(5), {2, 3}), "FromVector: 5 values do not fill shape \\[2, 3\\]");
}

TEST(TensorDeathTest, UndefinedTensorStops) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_DEATH(t.shape(), "the tensor is undefined");
}

TEST(TensorDeathTest, CudaTensorWithoutAGpuStopsWithAReason) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_DEATH(Tensor::Empty({4}, DType::kFloat32, Device::CUDA(0)), "built without CUDA|no such GPU");
}

}  // namespace
}  // namespace tinyddp
