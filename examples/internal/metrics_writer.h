// MetricsWriter: the --metrics_out file of ddp_mlp, one JSON object per line, and its plot.
//
//   {"type":"step","step":50,"epoch":0,"loss":0.8123,"lr":0.08,"samples_per_s":2410.5}
//   {"type":"epoch","epoch":0,"step":469,"train_loss":0.52,"test_loss":0.45,"test_accuracy":0.8391,"time_s":21.3}
//
// Step losses are already averaged over every rank and over the steps since the previous line; only
// rank 0 writes. Lines are flushed as they are written, so `tail -f` follows a run and a crash loses
// nothing that was printed. Finish() writes a loss/accuracy plot next to the file ("metrics.jsonl" ->
// "metrics.svg") from every record in it, including those of earlier runs a --resume appended to.
// Sits beside progress.h: one reports to the terminal, this one to files.
#ifndef TINYDDP_EXAMPLES_INTERNAL_METRICS_WRITER_H_
#define TINYDDP_EXAMPLES_INTERNAL_METRICS_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tinyddp::examples {

struct StepRecord {
  int64_t step = 0;  // optimizer steps taken when the line is written
  int64_t epoch = 0;
  double loss = 0;
  double lr = 0;
  double samples_per_s = 0;
};

struct EpochRecord {
  int64_t epoch = 0;
  int64_t step = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double time_s = 0;  // since the start of this process's training
};

class MetricsWriter {
 public:
  /// Opens `path` for writing: appended to when `append` (a resumed run), else truncated.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  absl::Status WriteStep(const StepRecord& r);
  absl::Status WriteEpoch(const EpochRecord& r);
  /// Closes the file and writes the SVG plot; returns the plot's path.
  absl::StatusOr<std::string> Finish();

  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteLine(const std::string& line);
  std::string path_;
  std::FILE* file_;
};

/// "<dir>/metrics.svg" for "<dir>/metrics.jsonl" (or .json); "<path>.svg" for any other name.
std::string PlotPathFor(const std::string& metrics_path);

/// The SVG plot of the JSON lines in `jsonl`: train loss per logged step and test loss per epoch on
/// the left, test accuracy per epoch on the right. When a resumed run logged a step (or epoch) again,
/// the later record wins. Lines that are not records are ignored.
std::string PlotMetrics(const std::string& jsonl);

}  // namespace tinyddp::examples

#endif  // TINYDDP_EXAMPLES_INTERNAL_METRICS_WRITER_H_
