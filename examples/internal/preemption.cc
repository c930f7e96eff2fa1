// Preemption: see preemption.h.
#include "examples/internal/preemption.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/cuda_allocator.h"
#include "tensor/cuda_device.h"

namespace tinyddp::examples {
namespace {

// The handler may only do async-signal-safe work: lock-free atomics and clock_gettime.
constexpr int kStopSignals[] = {SIGTERM, SIGUSR1};
std::atomic<int> g_signal{0};            // the highest-numbered stop signal seen; 0: none
std::atomic<int64_t> g_signal_ns{0};     // CLOCK_MONOTONIC when the first one came
struct sigaction g_previous[std::size(kStopSignals)];

int64_t MonotonicNanos() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

void OnStopSignal(int signo) {
  const int saved_errno = errno;
  int seen = 0;
  if (g_signal.compare_exchange_strong(seen, signo)) {
    g_signal_ns = MonotonicNanos();
  } else {
    while (seen < signo && !g_signal.compare_exchange_weak(seen, signo)) {
    }
  }
  // A handler that was there before us (the flight recorder's SIGUSR1 dump) runs too; never the default
  // action, which would end the process.
  for (size_t i = 0; i < std::size(kStopSignals); ++i) {
    const struct sigaction& previous = g_previous[i];
    if (kStopSignals[i] != signo || (previous.sa_flags & SA_SIGINFO) != 0) continue;
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) previous.sa_handler(signo);
  }
  errno = saved_errno;
}

}  // namespace

Preemption::Preemption(Device device, double check_seconds)
    : device_(device), check_seconds_(check_seconds), agreement_(Tensor::Zeros({2}, DType::kFloat32, device)) {
  if (device_.is_cuda()) {
    // Never freed: 16 bytes, and a copy may still be using them when this object goes.
    pinned_ = static_cast<float*>(cuda::PinnedMalloc(4 * sizeof(float)));
    copied_ = std::make_unique<cuda::Event>();
  }
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) ::sigaction(kStopSignals[i], &action, &g_previous[i]);
}

// The handlers stay for the rest of the process's life, which is about to end: putting SIGTERM's default
// back would undo a rank that has chosen to ignore it while it exits (RecordWorkerFailure).
Preemption::~Preemption() = default;

absl::StatusOr<bool> Preemption::StopAfterThisStep(dist::ProcessGroup& pg) {
  const int64_t step = steps_++;
  // 1. The agreement started after the previous step, if one was: done by now (it ran while this step did).
  if (in_flight_ != nullptr) {
    RETURN_IF_ERROR(in_flight_->Wait());
    in_flight_.reset();
    if (copied_ != nullptr) copied_->Synchronize();  // the previous step's tail, not this one's
    const float* agreed = pinned_ != nullptr ? pinned_ + 2 : agreement_.data<float>();
    agreed_signal_ = static_cast<int>(agreed[0]);
    if (agreed_signal_ > 0) return true;
    // The same numbers on every rank, so the same next step everywhere: about check_seconds away by the
    // slowest rank's clock, at most twice as many steps as this time.
    const double slowest = agreed[1];
    if (slowest > 0) {
      interval_ = std::clamp<int64_t>(std::llround(static_cast<double>(interval_) * check_seconds_ / slowest), 1,
                                      2 * interval_);
    }
    next_ = step - 1 + interval_;
  }
  if (step != next_) return false;
  // 2. Start the next agreement: the signal this rank has seen, and how long since it started the last.
  const auto now = std::chrono::steady_clock::now();
  const float values[2] = {static_cast<float>(g_signal.load()),
                           step == 0 ? 0.0f : std::chrono::duration<float>(now - last_start_).count()};
  last_start_ = now;
  if (pinned_ == nullptr) {
    std::copy(values, values + 2, agreement_.data<float>());
    in_flight_ = pg.AllReduce(agreement_, dist::ReduceOp::kMax);
    return false;
  }
  // GPU: up and back through pinned memory, in order on the compute stream; the host never waits here.
  std::copy(values, values + 2, pinned_);
  cuda::MemcpyAsync(agreement_.data_ptr(), pinned_, 2 * sizeof(float), cuda::CopyKind::kHostToDevice);
  in_flight_ = pg.AllReduce(agreement_, dist::ReduceOp::kMax);
  RETURN_IF_ERROR(in_flight_->SynchronizeStream());  // the compute stream waits for it, the host does not
  cuda::MemcpyAsync(pinned_ + 2, agreement_.data_ptr(), 2 * sizeof(float), cuda::CopyKind::kDeviceToHost);
  copied_->Record(cuda::Stream::Current(device_.index));
  return false;
}

std::string Preemption::SignalName() const {
  switch (agreed_signal_) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return absl::StrCat("signal ", agreed_signal_);
  }
}

double Preemption::SecondsSinceSignal() const {
  if (g_signal.load() == 0) return -1;
  return static_cast<double>(MonotonicNanos() - g_signal_ns.load()) / 1e9;
}

}  // namespace tinyddp::examples
