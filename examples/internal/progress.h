// Progress: what rank 0 of ddp_mlp shows while an epoch trains.
//
// On a terminal, one live line redrawn in place (at most 10 times a second, so printing never slows a
// fast GPU step):
//   epoch 1/2 [##########----------] 234/469  loss 0.5123  2410 samples/s  ETA 0:09
// When stdout is a file or a pipe (CI logs, `| tee`), carriage returns would make a mess, so instead
// a plain line is printed for a logged step - but at most one per 10 seconds and per 10% of the epoch
// (PlainLineLimits), so a fast run's log stays short (the epoch summaries still come, one per epoch):
//   epoch 1/2  step 250/469  loss 0.5123  lr 0.0612  2410 samples/s  ETA 0:09
// This only thins stdout: the steps logged to --metrics_out stay every --log_every.
// Other messages (epoch summaries, checkpoint notes) go through Print(), which clears the live line
// first. Not thread-safe; rank 0's training thread owns it.
#ifndef TINYDDP_EXAMPLES_INTERNAL_PROGRESS_H_
#define TINYDDP_EXAMPLES_INTERNAL_PROGRESS_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tinyddp::examples {

/// "0:09", "12:34", "1:02:03" (hours only when needed); "?" for negative or non-finite input.
std::string FormatDuration(double seconds);

/// "[#####-----]": `width` cells, done/total of them filled. Precondition: width >= 1.
std::string RenderBar(int64_t done, int64_t total, int width);

/// How often plain (non-terminal) lines may appear: a logged step is printed only when at least
/// `min_seconds` have passed and at least `min_epoch_fraction` of the epoch has been trained since the
/// epoch's start or the last printed line. Zeros print every logged step.
struct PlainLineLimits {
  double min_seconds = 10;
  double min_epoch_fraction = 0.1;
};

class Progress {
 public:
  /// `interactive`: draw the live bar (pass isatty(fileno(out))). `out` is not owned.
  Progress(bool interactive, std::FILE* out, PlainLineLimits limits = {})
      : interactive_(interactive), out_(out), limits_(limits) {}

  /// Starts epoch `epoch` (0-based) of `num_epochs`, with `total_batches` batches of which the first
  /// `start_batch` were already trained before a resume; `samples_per_batch` is the global batch size.
  void BeginEpoch(int64_t epoch, int64_t num_epochs, int64_t total_batches, int64_t start_batch,
                  int64_t samples_per_batch);
  /// Batch `batches_done` (counted from the epoch's start) has finished. Redraws the live bar when
  /// due; `loss` is the latest rank-averaged loss (NaN before the first logged step).
  void Update(int64_t batches_done, double loss);
  /// A logged step (loss averaged over ranks and steps): the plain line when not interactive, within
  /// the PlainLineLimits.
  void LogStep(int64_t batches_done, double loss, double lr);
  /// Ends the live line (the bar stays on screen, complete).
  void EndEpoch();
  /// Prints `line` (newline added), keeping the live bar intact below it.
  void Print(const std::string& line);

  /// Global samples per second over this epoch so far (0 before any batch).
  double SamplesPerSecond() const;
  /// Estimated seconds left in this epoch.
  double EtaSeconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  void Draw();
  void ClearLine();

  const bool interactive_;
  std::FILE* const out_;
  const PlainLineLimits limits_;
  int64_t epoch_ = 0, num_epochs_ = 1, total_ = 0, start_batch_ = 0, samples_per_batch_ = 0;
  int64_t done_ = 0;
  double loss_ = std::nan("");
  bool bar_visible_ = false;
  Clock::time_point epoch_start_, last_draw_;
  Clock::time_point last_line_;  // plain output: when the last line was printed (or the epoch started)
  int64_t last_line_done_ = 0;   // ... and at which batch
};

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_PROGRESS_H_
