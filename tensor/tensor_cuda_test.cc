// tensor/tensor.h on a GPU: creation, host<->device round trips for every dtype, views of device memory,
// Clone/To, and copies between GPUs when there are two. Only byte copies are involved (no kernels), so
// this checks tensor_core and the CUDA runtime layer beneath it. Skips without a GPU.
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/tensor.h"

namespace tinyddp {
namespace {

#define REQUIRE_GPU() \
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

template <typename T>
std::vector<T> Values(int n) {
  std::mt19937 gen(n);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      x = BFloat16(static_cast<float>(gen() % 1000) / 7.f);
    } else {
      x = static_cast<T>(gen() % 100000) / static_cast<T>(3);
    }
  }
  return v;
}

template <typename T>
void ExpectDeviceRoundTrip() {
  const std::vector<T> v = Values<T>(1000003);
  Tensor t = Tensor::FromVector(v, {1000003}, Device::CUDA(0));
  EXPECT_TRUE(t.device().is_cuda());
  const std::vector<T> back = t.ToVector<T>();
  ASSERT_EQ(back.size(), v.size());
  EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * sizeof(T)), 0) << DTypeName(DTypeOf<T>());
}

TEST(TensorCuda, FromVectorToVectorRoundTripsEveryDType) {
  REQUIRE_GPU();
  ExpectDeviceRoundTrip<float>();
  ExpectDeviceRoundTrip<double>();
  ExpectDeviceRoundTrip<BFloat16>();
  ExpectDeviceRoundTrip<int32_t>();
  ExpectDeviceRoundTrip<int64_t>();
  ExpectDeviceRoundTrip<uint8_t>();
}

TEST(TensorCuda, ZerosAndFullFillDeviceMemoryLargerThanOneStagingChunk) {
  REQUIRE_GPU();
  const int64_t n = (1 << 20) + 3;  // more than the 1 MiB host pattern, not a multiple of it
  EXPECT_EQ(Tensor::Full({n}, -1.25, DType::kFloat32, Device::CUDA(0)).ToVector<float>(),
            std::vector<float>(n, -1.25f));
  EXPECT_EQ(Tensor::Zeros({7, 13}, DType::kInt64, Device::CUDA(0)).ToVector<int64_t>(), std::vector<int64_t>(91, 0));
  EXPECT_EQ(Tensor::Full({5}, 7, DType::kUInt8, Device::CUDA(0)).ToVector<uint8_t>(), std::vector<uint8_t>(5, 7));
  EXPECT_EQ(Tensor::Full({1}, 7, DType::kUInt8, Device::CUDA(0)).Item(), 7.0);
}

TEST(TensorCuda, RowsAndViewsOfDeviceTensorsReadTheRightBytes) {
  REQUIRE_GPU();
  const std::vector<float> v = Values<float>(7 * 13);
  Tensor t = Tensor::FromVector(v, {7, 13}, Device::CUDA(0));
  Tensor r = t.Rows(2, 5);
  EXPECT_TRUE(r.SharesStorageWith(t));
  EXPECT_EQ(r.ToVector<float>(), std::vector<float>(v.begin() + 26, v.begin() + 65));
  EXPECT_EQ(t.View({13, 7}).Rows(12, 13).ToVector<float>(), std::vector<float>(v.end() - 7, v.end()));
  EXPECT_EQ(r.Clone().ToVector<float>(), r.ToVector<float>());
  EXPECT_EQ(t.ToString(), "Tensor[7, 13] float32 cuda:0");
}

TEST(TensorCuda, ToMovesBetweenHostAndDeviceAndCloneIsIndependent) {
  REQUIRE_GPU();
  const std::vector<double> v = Values<double>(4097);
  Tensor host = Tensor::FromVector(v, {4097});
  Tensor dev = host.To(Device::CUDA(0));
  EXPECT_EQ(dev.device(), Device::CUDA(0));
  EXPECT_TRUE(dev.To(Device::CUDA(0)).SharesStorageWith(dev));
  Tensor copy = dev.Clone();
  EXPECT_FALSE(copy.SharesStorageWith(dev));
  EXPECT_EQ(copy.To(Device::CPU()).ToVector<double>(), v);
  // Pinned host memory goes the same way (asynchronously on the stream).
  std::shared_ptr<Storage> pinned = AllocatePinnedStorage(4097 * sizeof(double));
  std::memcpy(pinned->data(), v.data(), 4097 * sizeof(double));
  Tensor from_pinned = Tensor::FromStorage(pinned, 0, {4097}, DType::kFloat64).To(Device::CUDA(0));
  EXPECT_EQ(from_pinned.ToVector<double>(), v);
}

TEST(TensorCuda, CopiesBetweenTwoGpus) {
  if (cuda::DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  const std::vector<float> v = Values<float>(100003);
  Tensor a = Tensor::FromVector(v, {100003}, Device::CUDA(0));
  Tensor b = a.To(Device::CUDA(1));
  EXPECT_EQ(b.device(), Device::CUDA(1));
  EXPECT_EQ(b.ToVector<float>(), v);
  EXPECT_EQ(b.To(Device::CUDA(0)).ToVector<float>(), v);
}

TEST(TensorCudaDeathTest, ANonexistentGpuIsAClearError) {
  REQUIRE_GPU();
  const int n = cuda::DeviceCount();
  EXPECT_DEATH(Tensor::Empty({3}, DType::kFloat32, Device::CUDA(n)), "no such GPU: cuda:");
}

}  // namespace
}  // namespace tinyddp
