// tensor/stream.h on a GPU: events order work between streams, Query reports pending work, timing events
// measure it, and the current stream is per device, process-wide and restorable. Streams are held still
// with a StreamBlocker, so every claim is checked by what has or has not happened, never by timing.
#include "tensor/stream.h"

#include <cuda_runtime.h>

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"
#include "tensor/testing/cuda_test_util.h"

namespace tinyddp::cuda {
namespace {

using ::tinyddp::testing::StreamBlocker;

// A device buffer of n floats from the caching allocator, freed at scope exit.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) : n(n), ptr(static_cast<float*>(CachingMalloc(n * sizeof(float), 0, nullptr))) {}
  ~DeviceFloats() { CachingFree(ptr); }
  size_t n;
  float* ptr;
};

TEST(Stream, EventRecordedOnOneStreamOrdersWorkOnAnother) {
  TINYDDP_REQUIRE_GPU();
  Stream producer = Stream::Create(0), consumer = Stream::Create(0);
  const size_t n = 1000003;
  DeviceFloats x(n), y(n);
  ASSERT_EQ(cudaMemset(x.ptr, 0, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(y.ptr, 0, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // memsets run on the legacy stream, ours are non-blocking
  float* pinned = static_cast<float*>(PinnedMalloc(n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(i % 977) + 0.5f;

  StreamBlocker hold(producer);  // the producer's copy cannot start until Release
  MemcpyAsync(x.ptr, pinned, n * sizeof(float), CopyKind::kHostToDevice, producer.handle());
  Event written;
  written.Record(producer);
  consumer.Wait(written);  // without this the consumer would copy the zeros of x right away
  MemcpyAsync(y.ptr, x.ptr, n * sizeof(float), CopyKind::kDeviceToDevice, consumer.handle());
  hold.Release();
  consumer.Synchronize();

  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), y.ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), pinned, n * sizeof(float)), 0);
  PinnedFree(pinned);
}

TEST(Event, QueryIsFalseWhileRecordedWorkIsPendingAndTrueAfter) {
  TINYDDP_REQUIRE_GPU();
  Stream s = Stream::Create(0);
  Event never_recorded;
  EXPECT_TRUE(never_recorded.Query());  // nothing captured: complete, as in CUDA

  StreamBlocker hold(s);
  Event e;
  e.Record(s);
  EXPECT_FALSE(e.Query());
  EXPECT_FALSE(e.Query());  // asking again does not change the answer or leave an error behind
  hold.Release();
  e.Synchronize();
  EXPECT_TRUE(e.Query());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a 'not ready' answer must not leak into later error checks";
}

TEST(Event, TimingEventsGiveTheElapsedTimeOfWorkBetweenThem) {
  TINYDDP_REQUIRE_GPU();
  Stream s = Stream::Create(0);
  Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
  const size_t n = 1 << 24;
  DeviceFloats a(n), b(n);
  start.Record(s);
  for (int i = 0; i < 10; ++i) MemcpyAsync(b.ptr, a.ptr, n * sizeof(float), CopyKind::kDeviceToDevice, s.handle());
  end.Record(s);
  end.Synchronize();
  const float ms = Event::ElapsedMs(start, end);
  EXPECT_GT(ms, 0.f) << "ten 64 MiB copies take a measurable time";
}

void ElapsedMsOfEventsWithoutTiming() {
  Stream s = Stream::Create(0);
  Event start;
  Event end;
  start.Record(s);
  end.Record(s);
  end.Synchronize();
  Event::ElapsedMs(start, end);
}

TEST(EventDeathTest, ElapsedMsOfEventsWithoutTimingStopsWithAMessage) {
  TINYDDP_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child re-executes: a fresh CUDA context
  EXPECT_DEATH(ElapsedMsOfEventsWithoutTiming(), "timing events");
}

TEST(Stream, CurrentStreamIsTheLegacyStreamUntilSetAndSetCurrentReturnsThePrevious) {
  TINYDDP_REQUIRE_GPU();
  const Stream original = Stream::Current(0);
  Stream s = Stream::Create(0);
  const Stream previous = Stream::SetCurrent(s);
  EXPECT_EQ(previous.handle(), original.handle());
  EXPECT_EQ(Stream::Current(0).handle(), s.handle());
  EXPECT_EQ(Stream::Current(0).device(), 0);
  Stream::SetCurrent(previous);
  EXPECT_EQ(Stream::Current(0).handle(), original.handle());
}

TEST(Stream, CurrentStreamIsSharedByEveryThreadOfTheProcess) {
  TINYDDP_REQUIRE_GPU();
  Stream s = Stream::Create(0);
  const Stream previous = Stream::SetCurrent(s);
  void* seen = nullptr;
  std::thread other([&seen] { seen = Stream::Current(0).handle(); });
  other.join();
  EXPECT_EQ(seen, s.handle());
  Stream::SetCurrent(previous);
}

TEST(Stream, AStreamSetCurrentStaysAliveAfterItsLastOtherHandleIsDropped) {
  TINYDDP_REQUIRE_GPU();
  Stream previous;
  void* raw = nullptr;
  {
    Stream s = Stream::Create(0);
    raw = s.handle();
    previous = Stream::SetCurrent(s);
  }
  // The registry holds a copy, so the stream is still valid: work can go on it.
  Stream current = Stream::Current(0);
  EXPECT_EQ(current.handle(), raw);
  Event e;
  e.Record(current);
  current.Synchronize();
  EXPECT_TRUE(e.Query());
  Stream::SetCurrent(previous);
}

TEST(Stream, EachDeviceHasItsOwnCurrentStream) {
  TINYDDP_REQUIRE_GPU();
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
  Stream s1 = Stream::Create(1);
  const Stream previous = Stream::SetCurrent(s1);
  EXPECT_EQ(Stream::Current(1).handle(), s1.handle());
  EXPECT_NE(Stream::Current(0).handle(), s1.handle());
  Stream::SetCurrent(previous);
}

TEST(Device, DescriptionNamesTheGpuItsMemoryAndArchitecture) {
  TINYDDP_REQUIRE_GPU();
  EXPECT_TRUE(BuiltWithCuda());
  const std::string d = DeviceDescription(0);
  EXPECT_NE(d.find("GiB"), std::string::npos) << d;
  EXPECT_NE(d.find("sm_"), std::string::npos) << d;
  EXPECT_EQ(CurrentDevice(), 0);
}

}  // namespace
}  // namespace tinyddp::cuda
