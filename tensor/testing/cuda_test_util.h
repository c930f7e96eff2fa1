// Test helper for the GPU tests of tensor/: a StreamBlocker holds a stream still, so a test can put work
// behind it and observe what has and has not run yet (ordering, events, allocator reuse) without
// relying on timing. Uses the CUDA runtime directly; test-only.
#ifndef TINYDDP_TENSOR_TESTING_CUDA_TEST_UTIL_H_
#define TINYDDP_TENSOR_TESTING_CUDA_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "tensor/cuda_device.h"
#include "tensor/stream.h"

namespace tinyddp::testing {

#define TINYDDP_REQUIRE_GPU() \
  if (::tinyddp::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

/// Enqueues a host function on `stream` that waits until Release() (or the destructor, or a 20 s
/// timeout that reports a failure), so nothing queued on the stream after it can start before then.
class StreamBlocker {
 public:
  explicit StreamBlocker(const cuda::Stream& stream) : state_(std::make_shared<State>()) {
    // The host function owns a reference of its own, so the state outlives it whatever happens here.
    auto* ref = new std::shared_ptr<State>(state_);
    EXPECT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream.handle()), &Wait, ref), cudaSuccess);
    stream_ = stream;
  }
  ~StreamBlocker() { Release(); }
  StreamBlocker(const StreamBlocker&) = delete;
  StreamBlocker& operator=(const StreamBlocker&) = delete;

  /// Lets the stream continue, and waits until the host function has returned.
  void Release() {
    if (released_) return;
    released_ = true;
    state_->go.store(true);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!state_->stream_done.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    EXPECT_TRUE(state_->stream_done.load()) << "the blocked stream never reached the host function";
  }

 private:
  struct State {
    std::atomic<bool> go{false};
    std::atomic<bool> stream_done{false};
  };
  static void CUDART_CB Wait(void* raw) {
    std::unique_ptr<std::shared_ptr<State>> ref(static_cast<std::shared_ptr<State>*>(raw));
    State* state = ref->get();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!state->go.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "StreamBlocker: not released after 20 s; letting the stream go\n");
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    state->stream_done.store(true);
  }

  std::shared_ptr<State> state_;
  cuda::Stream stream_;
  bool released_ = false;
};

}  // namespace tinyddp::testing

#endif  // TINYDDP_TENSOR_TESTING_CUDA_TEST_UTIL_H_
