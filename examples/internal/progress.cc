// Progress: see progress.h.
#include "examples/internal/progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tinyddp::examples {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string RenderBar(int64_t done, int64_t total, int width) {
  const int64_t filled = total > 0 ? std::clamp<int64_t>(done * width / total, 0, width) : 0;
  return absl::StrCat("[", std::string(static_cast<size_t>(filled), '#'),
                      std::string(static_cast<size_t>(width - filled), '-'), "]");
}

void Progress::BeginEpoch(int64_t epoch, int64_t num_epochs, int64_t total_batches, int64_t start_batch,
                          int64_t samples_per_batch) {
  epoch_ = epoch;
  num_epochs_ = num_epochs;
  total_ = total_batches;
  start_batch_ = done_ = start_batch;
  samples_per_batch_ = samples_per_batch;
  // loss_ keeps the last logged value across epochs: better than a blank until the first log.
  epoch_start_ = last_line_ = Clock::now();
  last_draw_ = Clock::time_point();
  last_line_done_ = start_batch;
  if (interactive_) Draw();
}

double Progress::SamplesPerSecond() const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  const int64_t trained = done_ - start_batch_;
  return trained > 0 && elapsed > 0 ? static_cast<double>(trained * samples_per_batch_) / elapsed : 0;
}

double Progress::EtaSeconds() const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  const int64_t trained = done_ - start_batch_;
  if (trained <= 0) return std::nan("");
  return elapsed / static_cast<double>(trained) * static_cast<double>(total_ - done_);
}

void Progress::Update(int64_t batches_done, double loss) {
  done_ = batches_done;
  if (std::isfinite(loss)) loss_ = loss;
  if (!interactive_) return;
  // At most 10 redraws a second, and always the last one.
  const Clock::time_point now = Clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
  Draw();
}

void Progress::LogStep(int64_t batches_done, double loss, double lr) {
  done_ = batches_done;
  loss_ = loss;
  if (interactive_) return;  // the live bar shows it
  const Clock::time_point now = Clock::now();
  const bool waited = std::chrono::duration<double>(now - last_line_).count() >= limits_.min_seconds;
  const bool advanced = static_cast<double>(done_ - last_line_done_) >= limits_.min_epoch_fraction * total_;
  if (!waited || !advanced) return;
  last_line_ = now;
  last_line_done_ = done_;
  std::fprintf(out_, "epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f samples/s  ETA %s\n",
               static_cast<long long>(epoch_ + 1), static_cast<long long>(num_epochs_), static_cast<long long>(done_),
               static_cast<long long>(total_), loss, lr, SamplesPerSecond(), FormatDuration(EtaSeconds()).c_str());
  std::fflush(out_);
}

void Progress::Draw() {
  last_draw_ = Clock::now();
  const std::string loss = std::isfinite(loss_) ? absl::StrFormat("%.4f", loss_) : "-";
  // \r back to column 0, \033[K erase the rest of the old line (a shorter line leaves no debris).
  std::fprintf(out_, "\r\033[Kepoch %lld/%lld %s %lld/%lld  loss %s  %.0f samples/s  ETA %s",
               static_cast<long long>(epoch_ + 1), static_cast<long long>(num_epochs_),
               RenderBar(done_, total_, 24).c_str(), static_cast<long long>(done_), static_cast<long long>(total_),
               loss.c_str(), SamplesPerSecond(), FormatDuration(EtaSeconds()).c_str());
  std::fflush(out_);
  bar_visible_ = true;
}

void Progress::ClearLine() {
  if (!bar_visible_) return;
  std::fputs("\r\033[K", out_);
  bar_visible_ = false;
}

void Progress::EndEpoch() {
  if (!interactive_) return;
  Draw();
  std::fputc('\n', out_);
  std::fflush(out_);
  bar_visible_ = false;
}

void Progress::Print(const std::string& line) {
  const bool redraw = bar_visible_;
  ClearLine();
  std::fprintf(out_, "%s\n", line.c_str());
  if (redraw) Draw();
  std::fflush(out_);
}

}  // namespace tinyddp::examples
